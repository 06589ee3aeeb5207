//! The absolute pointer for SPICE client-mouse mode: a uinput tablet ("guestlink tablet", ABS_X/ABS_Y sized to
//! the desktop, BTN_LEFT/MIDDLE/RIGHT/SIDE/EXTRA, REL_WHEEL) or, with `--uinput-fake FILE`, raw
//! `struct input_event` records appended to a file (like spice-vdagentd `-f`, docs/protocol/vdagent.md#client-mouse).
//!
//! The device is (re)created as soon as the desktop size is known or changes, as spice-vdagentd does, not on the
//! next pointer event: an event written into a device the display server has not opened yet is lost. And the
//! kernel drops an ABS event whose value equals the axis' current value, so after a (re)creation the first
//! position, and a repeat of the previous position within [`FRESH_GRACE`], are written as a change (a
//! neighbouring value, then the real one, in the same SYN frame): a position that a not-yet-listening display
//! server missed still arrives when the client sends it again. docs/spice.md "uinput" describes it.

use std::fs::File;
use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use evdev::uinput::{VirtualDevice, VirtualDeviceBuilder};
use evdev::{AbsInfo, AbsoluteAxisType, AttributeSet, Key, RelativeAxisType, UinputAbsSetup};
use guestlink_protocol::session::GeometryMonitor;

const EV_SYN: u16 = 0;
const EV_KEY: u16 = 1;
const EV_REL: u16 = 2;
const EV_ABS: u16 = 3;
const ABS_X: u16 = 0;
const ABS_Y: u16 = 1;
const REL_WHEEL: u16 = 8;

/// SPICE button bits → evdev key codes (BTN_LEFT 0x110, BTN_RIGHT 0x111, BTN_MIDDLE 0x112, SIDE, EXTRA).
const BUTTONS: [(u32, u16); 5] = [
    (1 << 1, 0x110),
    (1 << 2, 0x112),
    (1 << 3, 0x111),
    (1 << 6, 0x113),
    (1 << 7, 0x114),
];
const WHEEL_UP: u32 = 1 << 4;
const WHEEL_DOWN: u32 = 1 << 5;

/// How long after a (re)creation positions are written as a change (see the module doc). The display server
/// opens a new input device within a few hundred milliseconds of its creation (udev, then X or the compositor).
pub const FRESH_GRACE: Duration = Duration::from_secs(2);

/// Where pointer events go.
#[derive(Debug)]
pub enum Sink {
    /// A file receiving 24-byte `input_event` records.
    Fake(PathBuf),
    /// `/dev/uinput`.
    Uinput,
}

/// The tablet: created as soon as the desktop size is known, recreated when it changes.
pub struct Tablet {
    sink: Sink,
    file: Option<File>,
    device: Option<VirtualDevice>,
    size: (u32, u32),
    buttons: u32,
    /// When the current device (or, in fake mode, the current size) came to be; `None` before the first size.
    created: Option<Instant>,
    /// No position was written since the (re)creation.
    fresh: bool,
    /// The last position written.
    last: (i32, i32),
}

impl std::fmt::Debug for Tablet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tablet")
            .field("sink", &self.sink)
            .field("size", &self.size)
            .field("device", &self.device.is_some())
            .finish()
    }
}

/// One `struct input_event` (x86_64/aarch64 layout: timeval as two i64, type u16, code u16, value i32).
fn record(type_: u16, code: u16, value: i32) -> [u8; 24] {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let mut r = [0u8; 24];
    r[0..8].copy_from_slice(&(now.as_secs() as i64).to_ne_bytes());
    r[8..16].copy_from_slice(&i64::from(now.subsec_micros()).to_ne_bytes());
    r[16..18].copy_from_slice(&type_.to_ne_bytes());
    r[18..20].copy_from_slice(&code.to_ne_bytes());
    r[20..24].copy_from_slice(&value.to_ne_bytes());
    r
}

impl Tablet {
    /// A tablet writing to `sink` (nothing is opened yet).
    pub fn new(sink: Sink) -> Self {
        Self {
            sink,
            file: None,
            device: None,
            size: (0, 0),
            buttons: 0,
            created: None,
            fresh: true,
            last: (0, 0),
        }
    }

    /// The desktop layout changed: size the axes to its bounding box.
    pub fn set_geometry(&mut self, monitors: &[GeometryMonitor]) {
        let w = monitors
            .iter()
            .map(|m| i64::from(m.x) + i64::from(m.width))
            .max()
            .unwrap_or(0)
            .clamp(0, i64::from(i32::MAX)) as u32;
        let h = monitors
            .iter()
            .map(|m| i64::from(m.y) + i64::from(m.height))
            .max()
            .unwrap_or(0)
            .clamp(0, i64::from(i32::MAX)) as u32;
        if (w, h) != self.size {
            self.size = (w, h);
            self.recreate();
        }
    }

    /// Replaces the device with one sized to `self.size` right away (uinput; in fake mode only the state is
    /// reset). The new device starts with every button up.
    fn recreate(&mut self) {
        self.device = None;
        self.buttons = 0;
        self.fresh = true;
        self.created = Some(Instant::now());
        if matches!(self.sink, Sink::Uinput) && self.size.0 > 0 && self.size.1 > 0 {
            match self.build() {
                Ok(d) => {
                    tracing::info!(
                        width = self.size.0,
                        height = self.size.1,
                        "uinput tablet created"
                    );
                    self.device = Some(d);
                }
                // Tried again on the next event.
                Err(e) => tracing::warn!("tablet: cannot create the uinput device: {e}"),
            }
        }
    }

    /// Whether position `pos` must be written as a change (see the module doc).
    fn needs_nudge(&self, pos: (i32, i32)) -> bool {
        self.fresh || (pos == self.last && self.created.is_some_and(|t| t.elapsed() < FRESH_GRACE))
    }

    fn build(&self) -> std::io::Result<VirtualDevice> {
        let (w, h) = self.size;
        let abs = |axis, max: u32| {
            UinputAbsSetup::new(
                axis,
                AbsInfo::new(0, 0, max.saturating_sub(1) as i32, 0, 0, 0),
            )
        };
        let mut keys = AttributeSet::<Key>::new();
        for k in [
            Key::BTN_LEFT,
            Key::BTN_MIDDLE,
            Key::BTN_RIGHT,
            Key::BTN_SIDE,
            Key::BTN_EXTRA,
        ] {
            keys.insert(k);
        }
        let mut rel = AttributeSet::<RelativeAxisType>::new();
        rel.insert(RelativeAxisType::REL_WHEEL);
        VirtualDeviceBuilder::new()?
            .name("guestlink tablet")
            .with_absolute_axis(&abs(AbsoluteAxisType::ABS_X, w))?
            .with_absolute_axis(&abs(AbsoluteAxisType::ABS_Y, h))?
            .with_keys(&keys)?
            .with_relative_axes(&rel)?
            .build()
    }

    /// Emits a pointer state: position, button edges, wheel clicks on press edges, SYN.
    pub fn mouse(&mut self, x: i64, y: i64, buttons: u32) {
        let x = x.clamp(0, i64::from(i32::MAX)) as i32;
        let y = y.clamp(0, i64::from(i32::MAX)) as i32;
        let mut events: Vec<(u16, u16, i32)> = Vec::with_capacity(8);
        if self.needs_nudge((x, y)) {
            // A neighbouring value first, so the kernel never drops the real one as a repeat.
            let near = |v: i32| if v > 0 { v - 1 } else { v + 1 };
            events.push((EV_ABS, ABS_X, near(x)));
            events.push((EV_ABS, ABS_Y, near(y)));
        }
        events.push((EV_ABS, ABS_X, x));
        events.push((EV_ABS, ABS_Y, y));
        let changed = buttons ^ self.buttons;
        for (bit, code) in BUTTONS {
            if changed & bit != 0 {
                events.push((EV_KEY, code, i32::from(buttons & bit != 0)));
            }
        }
        let pressed = changed & buttons;
        if pressed & WHEEL_UP != 0 {
            events.push((EV_REL, REL_WHEEL, 1));
        }
        if pressed & WHEEL_DOWN != 0 {
            events.push((EV_REL, REL_WHEEL, -1));
        }
        self.buttons = buttons;
        match self.emit(&events) {
            Ok(true) => {
                self.fresh = false;
                self.last = (x, y);
            }
            Ok(false) => {}
            Err(e) => crate::spice::log_limit::log_limited!(warn, "tablet: {e}"),
        }
    }

    /// Writes `events` and a SYN; `Ok(false)` when there is no device to write to yet (size unknown).
    fn emit(&mut self, events: &[(u16, u16, i32)]) -> std::io::Result<bool> {
        match &self.sink {
            Sink::Fake(path) => {
                if self.file.is_none() {
                    self.file = Some(File::options().append(true).create(true).open(path)?);
                }
                let mut bytes = Vec::with_capacity((events.len() + 1) * 24);
                for &(t, c, v) in events.iter().chain(std::iter::once(&(EV_SYN, 0, 0))) {
                    bytes.extend_from_slice(&record(t, c, v));
                }
                match self.file.as_mut() {
                    Some(f) => f.write_all(&bytes).map(|()| true),
                    None => Ok(false),
                }
            }
            Sink::Uinput => {
                if self.size.0 == 0 || self.size.1 == 0 {
                    return Ok(false);
                }
                if self.device.is_none() {
                    // Creating it at the size change failed: try again.
                    self.device = Some(self.build()?);
                    self.created = Some(Instant::now());
                    self.fresh = true;
                }
                let evs: Vec<evdev::InputEvent> = events
                    .iter()
                    .map(|&(t, c, v)| evdev::InputEvent::new(evdev::EventType(t), c, v))
                    .collect();
                match self.device.as_mut() {
                    // emit() appends the SYN_REPORT.
                    Some(d) => d.emit(&evs).map(|()| true),
                    None => Ok(false),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LEFT: u32 = 1 << 1;
    const SYN: (u16, u16, i32) = (0, 0, 0);

    fn screen(width: u32, height: u32) -> Vec<GeometryMonitor> {
        vec![GeometryMonitor {
            display_id: 0,
            x: 0,
            y: 0,
            width,
            height,
        }]
    }

    /// The records appended to the fake file since the last call.
    struct Reader {
        path: PathBuf,
        seen: usize,
    }

    impl Reader {
        fn take(&mut self) -> Vec<(u16, u16, i32)> {
            let b = std::fs::read(&self.path).unwrap_or_default();
            let evs = b[self.seen..]
                .chunks(24)
                .map(|r| {
                    (
                        u16::from_ne_bytes([r[16], r[17]]),
                        u16::from_ne_bytes([r[18], r[19]]),
                        i32::from_ne_bytes([r[20], r[21], r[22], r[23]]),
                    )
                })
                .collect();
            self.seen = b.len();
            evs
        }
    }

    fn fake() -> (tempfile::TempDir, Tablet, Reader) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ev");
        let t = Tablet::new(Sink::Fake(path.clone()));
        (dir, t, Reader { path, seen: 0 })
    }

    #[test]
    fn buttons_and_wheel_become_key_and_rel_events() {
        let (_d, mut t, mut r) = fake();
        t.set_geometry(&screen(1024, 768));
        t.mouse(5, 5, 0);
        r.take();
        t.mouse(100, 200, LEFT);
        t.mouse(100, 200, 1 << 4);
        t.mouse(101, 200, 1 << 5);
        assert_eq!(
            r.take(),
            vec![
                (3, 0, 100),
                (3, 1, 200),
                (1, 0x110, 1),
                SYN,
                // A repeated position shortly after creation is written as a change.
                (3, 0, 99),
                (3, 1, 199),
                (3, 0, 100),
                (3, 1, 200),
                (1, 0x110, 0),
                (2, 8, 1),
                SYN,
                (3, 0, 101),
                (3, 1, 200),
                (2, 8, -1),
                SYN,
            ]
        );
    }

    /// The first position after start and after every resize reaches the device as a change, so the kernel
    /// cannot drop it (or its repeat) as a duplicate; a click there arrives with it. The old code wrote it
    /// plainly into a device created on that very event.
    #[test]
    fn first_position_after_start_and_after_resize_is_a_change() {
        let (_d, mut t, mut r) = fake();
        t.set_geometry(&screen(1024, 768));
        t.mouse(512, 384, LEFT);
        assert_eq!(
            r.take(),
            vec![
                (3, 0, 511),
                (3, 1, 383),
                (3, 0, 512),
                (3, 1, 384),
                (1, 0x110, 1),
                SYN
            ]
        );
        t.mouse(600, 300, LEFT);
        assert_eq!(r.take(), vec![(3, 0, 600), (3, 1, 300), SYN]);

        // Same size again: the device stays, nothing is re-sent.
        t.set_geometry(&screen(1024, 768));
        t.mouse(601, 300, LEFT);
        assert_eq!(r.take(), vec![(3, 0, 601), (3, 1, 300), SYN]);

        // A resize recreates the device with every button up: the held button is pressed on the new one, and
        // the position (even at 0,0, the new axes' start value) is written as a change.
        t.set_geometry(&screen(1920, 1080));
        t.mouse(0, 0, LEFT);
        assert_eq!(
            r.take(),
            vec![
                (3, 0, 1),
                (3, 1, 1),
                (3, 0, 0),
                (3, 1, 0),
                (1, 0x110, 1),
                SYN
            ]
        );
        // The client repeats the position (the display server had not opened the device yet): a change again.
        t.mouse(0, 0, 0);
        assert_eq!(
            r.take(),
            vec![
                (3, 0, 1),
                (3, 1, 1),
                (3, 0, 0),
                (3, 1, 0),
                (1, 0x110, 0),
                SYN
            ]
        );
        // Long after the creation a repeat is written plainly.
        t.created = Some(Instant::now() - 2 * FRESH_GRACE);
        t.mouse(0, 0, 0);
        assert_eq!(r.take(), vec![(3, 0, 0), (3, 1, 0), SYN]);
    }
}
