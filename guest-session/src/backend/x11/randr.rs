//! RandR ≥ 1.2 resize from a monitors config (the spice-vdagent algorithm) and geometry reporting.
//!
//! Steps: keep the enabled monitors that map to an output (display id = output index, or the output named by
//! GRAPHICS_DEVICE_INFO: [`crate::display_map`]), lay them out side by side
//! without `USE_POS`, zero-base the positions, round x and width down to multiples of 8, clamp sizes to the
//! screen's range, drop monitors that would not fit; then, under a server grab: disable CRTCs of outputs without a
//! monitor or that would stick out, set the screen size (96 dpi), find or create a `WxH-<display>` mode with CVT
//! reduced-blanking timings and set each CRTC. Custom modes no longer in use are destroyed. A config that could
//! not be applied is remembered and not retried when re-sent.

use anyhow::{Context, Result};
use guestlink_protocol::session::{GeometryMonitor, SessionMonitor};
use guestlink_protocol::vdagent::display::MONITORS_FLAG_USE_POS;
use x11rb::connection::Connection;
use x11rb::protocol::randr::{
    self, ConnectionExt as _, Crtc, ModeFlag, ModeInfo, NotifyMask, Output, Rotation, SetConfig,
};
use x11rb::protocol::xproto::{ConnectionExt as _, Window};
use x11rb::rust_connection::RustConnection;

use super::cvt::reduced_cvt;
use super::X11;

/// Most monitors handled (spice-vdagent's cap).
const MAX_MONITORS: usize = 64;

/// One monitor to set: display id and its rectangle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Placement {
    /// Display id (its output: `order[display_id]`, see [`crate::display_map::display_order`]).
    pub display_id: usize,
    /// X.
    pub x: i32,
    /// Y.
    pub y: i32,
    /// Width.
    pub width: u32,
    /// Height.
    pub height: u32,
}

/// RandR state of the X11 thread.
#[derive(Debug)]
pub struct RandrState {
    min: (u32, u32),
    max: (u32, u32),
    /// Modes this agent created: (output, mode).
    custom: Vec<(Output, u32)>,
    failed: Option<Vec<Placement>>,
}

impl RandrState {
    /// Queries RandR ≥ 1.2 and subscribes to screen changes; `None` when unavailable.
    pub fn init(conn: &RustConnection, root: Window) -> Option<Self> {
        let v = conn.randr_query_version(1, 5).ok()?.reply().ok()?;
        if (v.major_version, v.minor_version) < (1, 2) {
            tracing::warn!(
                major = v.major_version,
                minor = v.minor_version,
                "RandR < 1.2: resize disabled"
            );
            return None;
        }
        let range = conn.randr_get_screen_size_range(root).ok()?.reply().ok()?;
        let mask = NotifyMask::SCREEN_CHANGE | NotifyMask::CRTC_CHANGE | NotifyMask::OUTPUT_CHANGE;
        conn.randr_select_input(root, mask).ok()?;
        tracing::info!(
            version = format!("{}.{}", v.major_version, v.minor_version),
            min = format!("{}x{}", range.min_width, range.min_height),
            max = format!("{}x{}", range.max_width, range.max_height),
            "RandR"
        );
        Some(Self {
            min: (range.min_width.into(), range.min_height.into()),
            max: (range.max_width.into(), range.max_height.into()),
            custom: Vec::new(),
            failed: None,
        })
    }
}

/// The layout to apply for `monitors` on a screen with `outputs` outputs and the size range `min..=max`.
pub fn plan(
    flags: u32,
    monitors: &[SessionMonitor],
    outputs: usize,
    min: (u32, u32),
    max: (u32, u32),
) -> Vec<Placement> {
    let mut out: Vec<Placement> = monitors
        .iter()
        .enumerate()
        .take(outputs.min(MAX_MONITORS))
        .filter(|(_, m)| m.width > 0 && m.height > 0)
        .map(|(i, m)| Placement {
            display_id: i,
            x: m.x,
            y: m.y,
            width: m.width,
            height: m.height,
        })
        .collect();
    if flags & MONITORS_FLAG_USE_POS == 0 {
        let mut x = 0i32;
        for p in &mut out {
            p.x = x;
            p.y = 0;
            x = x.saturating_add(i32::try_from(p.width).unwrap_or(i32::MAX));
        }
    }
    let min_x = out.iter().map(|p| p.x).min().unwrap_or(0);
    let min_y = out.iter().map(|p| p.y).min().unwrap_or(0);
    for p in &mut out {
        p.x = p.x.saturating_sub(min_x) & !7;
        p.y = p.y.saturating_sub(min_y);
        p.width = (p.width & !7).clamp(min.0.max(8), max.0.max(8));
        p.height = p.height.clamp(min.1.max(1), max.1.max(1));
    }
    let fits = |p: &Placement| {
        i64::from(p.x) + i64::from(p.width) <= i64::from(max.0)
            && i64::from(p.y) + i64::from(p.height) <= i64::from(max.1)
    };
    out.retain(fits);
    out
}

/// The bounding box of `placements`, within `min`.
pub fn screen_size(placements: &[Placement], min: (u32, u32)) -> (u32, u32) {
    let w = placements
        .iter()
        .map(|p| p.x as u32 + p.width)
        .max()
        .unwrap_or(0);
    let h = placements
        .iter()
        .map(|p| p.y as u32 + p.height)
        .max()
        .unwrap_or(0);
    (w.max(min.0), h.max(min.1))
}

fn mm(px: u32) -> u32 {
    // 96 dpi, as spice-vdagent.
    (f64::from(px) * 25.4 / 96.0).round() as u32
}

impl X11 {
    /// Display id → output index for `outputs` ([`crate::display_map`]; identity without device info).
    fn output_order(&self, outputs: &[Output], ts: u32) -> Result<Vec<usize>> {
        let mut names = Vec::with_capacity(outputs.len());
        for output in outputs {
            let info = self.conn.randr_get_output_info(*output, ts)?.reply()?;
            names.push(String::from_utf8_lossy(&info.name).into_owned());
        }
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        Ok(crate::display_map::display_order(&refs))
    }

    /// The enabled outputs with their CRTC rectangles and display ids, or the root size.
    pub(super) fn geometry(&mut self) -> Result<Vec<GeometryMonitor>> {
        let mut out = Vec::new();
        if self.randr.is_some() {
            let res = self
                .conn
                .randr_get_screen_resources_current(self.root)?
                .reply()?;
            let ids = crate::display_map::display_ids(
                &self.output_order(&res.outputs, res.config_timestamp)?,
            );
            for (i, output) in res.outputs.iter().enumerate() {
                let info = self
                    .conn
                    .randr_get_output_info(*output, res.config_timestamp)?
                    .reply()?;
                if info.crtc == 0 {
                    continue;
                }
                let c = self
                    .conn
                    .randr_get_crtc_info(info.crtc, res.config_timestamp)?
                    .reply()?;
                if c.mode == 0 || c.width == 0 {
                    continue;
                }
                out.push(GeometryMonitor {
                    display_id: ids.get(i).copied().unwrap_or(i as u32),
                    x: c.x.into(),
                    y: c.y.into(),
                    width: c.width.into(),
                    height: c.height.into(),
                });
            }
        }
        if out.is_empty() {
            let g = self.conn.get_geometry(self.root)?.reply()?;
            out.push(GeometryMonitor {
                display_id: 0,
                x: 0,
                y: 0,
                width: g.width.into(),
                height: g.height.into(),
            });
        }
        Ok(out)
    }

    /// Applies a monitors config (see the module doc). Errors of single requests are logged, not fatal.
    pub(super) fn apply_monitors(&mut self, flags: u32, monitors: &[SessionMonitor]) -> Result<()> {
        let Some(rr) = self.randr.as_ref() else {
            tracing::warn!("monitors config ignored: no RandR 1.2");
            return Ok(());
        };
        let (min, max) = (rr.min, rr.max);
        let res = self
            .conn
            .randr_get_screen_resources_current(self.root)?
            .reply()?;
        let placements = plan(flags, monitors, res.outputs.len(), min, max);
        if placements.is_empty() {
            tracing::warn!("monitors config without a usable monitor ignored");
            return Ok(());
        }
        let current: Vec<Placement> = self
            .geometry()?
            .iter()
            .map(|g| Placement {
                display_id: g.display_id as usize,
                x: g.x,
                y: g.y,
                width: g.width,
                height: g.height,
            })
            .collect();
        let mut current = current;
        current.sort_by_key(|p| p.display_id);
        if current == placements {
            tracing::debug!("monitors config already in effect");
            return Ok(());
        }
        if self.randr.as_ref().and_then(|r| r.failed.as_ref()) == Some(&placements) {
            tracing::info!("monitors config failed before; not retried");
            return Ok(());
        }
        tracing::info!(?placements, "applying monitors config");
        self.conn.grab_server()?;
        let order = self.output_order(&res.outputs, res.config_timestamp)?;
        let result = self.apply_locked(&placements, &res.outputs, &order, min);
        self.conn.ungrab_server()?;
        self.conn.flush()?;
        result?;
        self.cleanup_modes()?;
        let mut now: Vec<(usize, u32, u32)> = self
            .geometry()?
            .iter()
            .map(|g| (g.display_id as usize, g.width, g.height))
            .collect();
        now.sort_unstable();
        let wanted: Vec<(usize, u32, u32)> = placements
            .iter()
            .map(|p| (p.display_id, p.width, p.height))
            .collect();
        if let Some(rr) = self.randr.as_mut() {
            if now == wanted {
                rr.failed = None;
            } else {
                tracing::warn!(?now, ?wanted, "monitors config only partly applied");
                rr.failed = Some(placements);
            }
        }
        Ok(())
    }

    fn apply_locked(
        &mut self,
        placements: &[Placement],
        outputs: &[Output],
        order: &[usize],
        min: (u32, u32),
    ) -> Result<()> {
        let (sw, sh) = screen_size(placements, min);
        let mut used_crtcs: Vec<Crtc> = Vec::new();
        // 1. Disable CRTCs without a monitor or that would not fit the new screen.
        for (i, output) in outputs.iter().enumerate() {
            let ts = self.config_time()?;
            let info = self.conn.randr_get_output_info(*output, ts)?.reply()?;
            if info.crtc == 0 {
                continue;
            }
            let c = self.conn.randr_get_crtc_info(info.crtc, ts)?.reply()?;
            let wanted = placements
                .iter()
                .any(|p| order.get(p.display_id) == Some(&i));
            let sticks_out = i64::from(c.x) + i64::from(c.width) > i64::from(sw)
                || i64::from(c.y) + i64::from(c.height) > i64::from(sh);
            if !wanted || sticks_out {
                let status = self
                    .conn
                    .randr_set_crtc_config(
                        info.crtc,
                        x11rb::CURRENT_TIME,
                        ts,
                        0,
                        0,
                        0,
                        Rotation::ROTATE0,
                        &[],
                    )?
                    .reply()
                    .map(|r| r.status);
                tracing::debug!(output = i, ?status, "CRTC disabled");
            }
        }
        // 2. The screen size.
        self.set_screen_size(sw, sh);
        // 3. Each monitor.
        for p in placements {
            let Some(&output) = order.get(p.display_id).and_then(|&i| outputs.get(i)) else {
                continue;
            };
            let ts = self.config_time()?;
            let info = self.conn.randr_get_output_info(output, ts)?.reply()?;
            let crtc = if info.crtc != 0 {
                info.crtc
            } else {
                match info.crtcs.iter().find(|c| !used_crtcs.contains(c)) {
                    Some(c) => *c,
                    None => {
                        tracing::warn!(output = p.display_id, "no free CRTC");
                        continue;
                    }
                }
            };
            used_crtcs.push(crtc);
            let mode = self.find_or_create_mode(output, &info.modes, p)?;
            let mut status = None;
            for _ in 0..2 {
                let ts = self.config_time()?;
                let r = self
                    .conn
                    .randr_set_crtc_config(
                        crtc,
                        x11rb::CURRENT_TIME,
                        ts,
                        p.x as i16,
                        p.y as i16,
                        mode,
                        Rotation::ROTATE0,
                        &[output],
                    )?
                    .reply();
                match r {
                    Ok(r) if r.status == SetConfig::INVALID_CONFIG_TIME => continue,
                    other => {
                        status = Some(other.map(|r| r.status));
                        break;
                    }
                }
            }
            tracing::debug!(output = p.display_id, ?status, "CRTC set");
        }
        // 4. A server that resized with the CRTC (RandR 1.0 drivers) may still need the screen size.
        let g = self.conn.get_geometry(self.root)?.reply()?;
        if (u32::from(g.width), u32::from(g.height)) != (sw, sh) {
            self.set_screen_size(sw, sh);
        }
        Ok(())
    }

    fn set_screen_size(&self, w: u32, h: u32) {
        let r = self
            .conn
            .randr_set_screen_size(self.root, w as u16, h as u16, mm(w), mm(h))
            .map_err(anyhow::Error::from)
            .and_then(|c| c.check().map_err(anyhow::Error::from));
        if let Err(e) = r {
            tracing::debug!(w, h, "set_screen_size: {e}");
        }
    }

    fn config_time(&self) -> Result<u32> {
        Ok(self
            .conn
            .randr_get_screen_resources_current(self.root)?
            .reply()?
            .config_timestamp)
    }

    fn find_or_create_mode(
        &mut self,
        output: Output,
        output_modes: &[u32],
        p: &Placement,
    ) -> Result<u32> {
        let res = self
            .conn
            .randr_get_screen_resources_current(self.root)?
            .reply()?;
        let found = res.modes.iter().find(|m| {
            output_modes.contains(&m.id)
                && u32::from(m.width) == p.width
                && u32::from(m.height) == p.height
        });
        if let Some(m) = found {
            return Ok(m.id);
        }
        let t = reduced_cvt(p.width, p.height);
        let name = format!("{}x{}-{}", p.width, p.height, p.display_id);
        let info = ModeInfo {
            id: 0,
            width: t.width as u16,
            height: t.height as u16,
            dot_clock: u32::try_from(t.dot_clock_hz).unwrap_or(u32::MAX),
            hsync_start: t.hsync_start as u16,
            hsync_end: t.hsync_end as u16,
            htotal: t.htotal as u16,
            hskew: 0,
            vsync_start: t.vsync_start as u16,
            vsync_end: t.vsync_end as u16,
            vtotal: t.vtotal as u16,
            name_len: name.len() as u16,
            mode_flags: ModeFlag::HSYNC_POSITIVE | ModeFlag::VSYNC_NEGATIVE,
        };
        let mode = self
            .conn
            .randr_create_mode(self.root, info, name.as_bytes())?
            .reply()
            .with_context(|| format!("creating mode {name}"))?
            .mode;
        self.conn.randr_add_output_mode(output, mode)?.check()?;
        tracing::debug!(name, mode, "mode created");
        if let Some(rr) = self.randr.as_mut() {
            rr.custom.push((output, mode));
        }
        Ok(mode)
    }

    /// Destroys the agent's custom modes that no CRTC uses any more.
    fn cleanup_modes(&mut self) -> Result<()> {
        let Some(rr) = self.randr.as_mut() else {
            return Ok(());
        };
        let custom = std::mem::take(&mut rr.custom);
        let res = self
            .conn
            .randr_get_screen_resources_current(self.root)?
            .reply()?;
        let mut in_use = Vec::new();
        for crtc in &res.crtcs {
            let c = self
                .conn
                .randr_get_crtc_info(*crtc, res.config_timestamp)?
                .reply()?;
            in_use.push(c.mode);
        }
        let mut keep = Vec::new();
        for (output, mode) in custom {
            if in_use.contains(&mode) {
                keep.push((output, mode));
            } else {
                let _ = self.conn.randr_delete_output_mode(output, mode);
                let _ = self.conn.randr_destroy_mode(mode);
            }
        }
        if let Some(rr) = self.randr.as_mut() {
            rr.custom = keep;
        }
        let _ = randr::X11_EXTENSION_NAME;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mon(w: u32, h: u32, x: i32, y: i32) -> SessionMonitor {
        SessionMonitor::sized(w, h, x, y)
    }

    #[test]
    fn plan_normalises_and_clamps() {
        let p = plan(
            MONITORS_FLAG_USE_POS,
            &[
                mon(1027, 768, 100, 50),
                mon(0, 0, 0, 0),
                mon(800, 600, 1127, 50),
            ],
            4,
            (320, 200),
            (8192, 8192),
        );
        assert_eq!(p.len(), 2);
        assert_eq!((p[0].x, p[0].y, p[0].width, p[0].height), (0, 0, 1024, 768));
        assert_eq!((p[1].display_id, p[1].x, p[1].width), (2, 1024, 800));
        assert_eq!(screen_size(&p, (320, 200)), (1824, 768));
        // Capped to the outputs and to the maximum size; no positions → side by side.
        let p = plan(
            0,
            &[mon(1920, 1080, 0, 0), mon(800, 600, 0, 0)],
            1,
            (1, 1),
            (1280, 800),
        );
        assert_eq!(
            p,
            vec![Placement {
                display_id: 0,
                x: 0,
                y: 0,
                width: 1280,
                height: 800
            }]
        );
        let p = plan(
            0,
            &[mon(640, 480, 0, 0), mon(640, 480, 0, 0)],
            2,
            (1, 1),
            (4096, 4096),
        );
        assert_eq!(p[1].x, 640);
    }
}
