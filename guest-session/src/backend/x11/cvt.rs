//! CVT reduced-blanking mode timings at 60 Hz (VESA CVT 1.2 "RB", as Xorg `xf86cvt.c` and spice-vdagent's
//! `set_reduced_cvt_mode` compute them). Pure arithmetic, for the modes the RandR resize ([`super::randr`]) creates.

/// Horizontal blanking in pixels.
const H_BLANK: u32 = 160;
/// Horizontal sync width in pixels.
const H_SYNC: u32 = 32;
/// Vertical front porch in lines.
const V_FPORCH: u32 = 3;
/// Vertical sync width in lines.
const V_SYNC: u32 = 10;
/// Minimum vertical back porch in lines.
const MIN_V_BPORCH: u32 = 6;
/// Minimum vertical blanking time in µs.
const MIN_VBLANK_US: f64 = 460.0;
/// Pixel clock granularity in kHz.
const CLOCK_STEP_KHZ: u64 = 250;
/// Refresh rate.
const REFRESH_HZ: f64 = 60.0;

/// Mode timings (pixels/lines; the dot clock in Hz as RandR wants it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timings {
    /// Visible width (a multiple of 8).
    pub width: u32,
    /// Visible height.
    pub height: u32,
    /// Horizontal sync start.
    pub hsync_start: u32,
    /// Horizontal sync end.
    pub hsync_end: u32,
    /// Horizontal total.
    pub htotal: u32,
    /// Vertical sync start.
    pub vsync_start: u32,
    /// Vertical sync end.
    pub vsync_end: u32,
    /// Vertical total.
    pub vtotal: u32,
    /// Pixel clock in Hz.
    pub dot_clock_hz: u64,
}

/// Reduced-blanking timings for `width`×`height` at 60 Hz (`width` is rounded down to a multiple of 8; both
/// dimensions are at least 8 and 1).
pub fn reduced_cvt(width: u32, height: u32) -> Timings {
    let width = (width & !7).max(8);
    let height = height.max(1);
    let hperiod_us = (1_000_000.0 / REFRESH_HZ - MIN_VBLANK_US) / f64::from(height);
    // Truncation as in xf86cvt.c; the value is small and positive.
    let vbi = ((MIN_VBLANK_US / hperiod_us) as u32 + 1).max(V_FPORCH + V_SYNC + MIN_V_BPORCH);
    let htotal = width + H_BLANK;
    let hsync_end = width + H_BLANK / 2;
    let clock_khz = (f64::from(htotal) * 1000.0 / hperiod_us) as u64;
    Timings {
        width,
        height,
        hsync_start: hsync_end - H_SYNC,
        hsync_end,
        htotal,
        vsync_start: height + V_FPORCH,
        vsync_end: height + V_FPORCH + V_SYNC,
        vtotal: height + vbi,
        dot_clock_hz: (clock_khz - clock_khz % CLOCK_STEP_KHZ) * 1000,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_cvt_rb_reference_values() {
        // `cvt -r 1920 1080 60`: 138.50 MHz, 1920 1968 2000 2080, 1080 1083 1088 1111. The vsync width differs
        // (CVT uses an aspect-dependent 5 lines; spice-vdagent's and Xorg's agent code use 10).
        let t = reduced_cvt(1920, 1080);
        assert_eq!((t.hsync_start, t.hsync_end, t.htotal), (1968, 2000, 2080));
        assert_eq!(t.vtotal, 1111);
        assert_eq!(t.dot_clock_hz, 138_500_000);
        assert_eq!((t.vsync_start, t.vsync_end), (1083, 1093));
        // `cvt -r 1024 768`: 56.00 MHz, htotal 1184, vtotal 790.
        let t = reduced_cvt(1027, 768);
        assert_eq!((t.width, t.htotal, t.vtotal), (1024, 1184, 790));
        assert_eq!(t.dot_clock_hz, 56_000_000);
    }
}
