//! The absolute pointer for SPICE client-mouse mode: a uinput tablet ("guestlink tablet", ABS_X/ABS_Y sized to
//! the desktop, BTN_LEFT/MIDDLE/RIGHT/SIDE/EXTRA, REL_WHEEL) or, with `--uinput-fake FILE`, raw
//! `struct input_event` records appended to a file (like spice-vdagentd `-f`, reference §2.4).

use std::fs::File;
use std::io::Write;
use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};

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

/// Where pointer events go.
#[derive(Debug)]
pub enum Sink {
    /// A file receiving 24-byte `input_event` records.
    Fake(PathBuf),
    /// `/dev/uinput`.
    Uinput,
}

/// The tablet: created lazily once the desktop size is known, recreated when it changes.
pub struct Tablet {
    sink: Sink,
    file: Option<File>,
    device: Option<VirtualDevice>,
    size: (u32, u32),
    buttons: u32,
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
            // Recreated with the new axis ranges on the next event.
            self.device = None;
        }
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
        let mut events: Vec<(u16, u16, i32)> = vec![
            (EV_ABS, ABS_X, x.clamp(0, i64::from(i32::MAX)) as i32),
            (EV_ABS, ABS_Y, y.clamp(0, i64::from(i32::MAX)) as i32),
        ];
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
        if let Err(e) = self.emit(&events) {
            crate::spice::log_limit::log_limited!(warn, "tablet: {e}");
        }
    }

    fn emit(&mut self, events: &[(u16, u16, i32)]) -> std::io::Result<()> {
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
                    Some(f) => f.write_all(&bytes),
                    None => Ok(()),
                }
            }
            Sink::Uinput => {
                if self.size.0 == 0 || self.size.1 == 0 {
                    return Ok(());
                }
                if self.device.is_none() {
                    self.device = Some(self.build()?);
                }
                let evs: Vec<evdev::InputEvent> = events
                    .iter()
                    .map(|&(t, c, v)| evdev::InputEvent::new(evdev::EventType(t), c, v))
                    .collect();
                match self.device.as_mut() {
                    // emit() appends the SYN_REPORT.
                    Some(d) => d.emit(&evs),
                    None => Ok(()),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fake_sink_writes_input_events() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ev");
        let mut t = Tablet::new(Sink::Fake(path.clone()));
        t.mouse(100, 200, 1 << 1);
        t.mouse(100, 200, 1 << 4);
        let b = std::fs::read(&path).unwrap();
        let evs: Vec<(u16, u16, i32)> = b
            .chunks(24)
            .map(|r| {
                (
                    u16::from_ne_bytes([r[16], r[17]]),
                    u16::from_ne_bytes([r[18], r[19]]),
                    i32::from_ne_bytes([r[20], r[21], r[22], r[23]]),
                )
            })
            .collect();
        assert_eq!(
            evs,
            vec![
                (3, 0, 100),
                (3, 1, 200),
                (1, 0x110, 1),
                (0, 0, 0),
                (3, 0, 100),
                (3, 1, 200),
                (1, 0x110, 0),
                (2, 8, 1),
                (0, 0, 0),
            ]
        );
    }
}
