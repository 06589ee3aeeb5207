//! Display-related payloads: MOUSE_STATE, MONITORS_CONFIG, DISPLAY_CONFIG, AUDIO_VOLUME_SYNC and
//! GRAPHICS_DEVICE_INFO.
//!
//! Every count read from the wire is capped and multiplied with checked arithmetic, and every inner length is
//! checked against the bytes actually present (docs/protocol/vdagent.md#hostile-input: the 32-bit `num × 20` overflow
//! and the unchecked `device_address_len` that crash spice-vdagent 0.22.1).

use super::error::VdagentError;
use super::header::MessageType;
use super::wire::{len_u32, Put, Reader};

/// Most monitors accepted in one MONITORS_CONFIG (spice-server's own cap).
pub const MAX_MONITORS: u32 = 256;
/// Most entries accepted in one GRAPHICS_DEVICE_INFO.
pub(crate) const MAX_DEVICE_DISPLAYS: u32 = 256;
/// Monitors-config flag: x/y are meaningful.
pub const MONITORS_FLAG_USE_POS: u32 = 1;
/// Monitors-config flag: a `VDAgentMonitorMM` array follows the monitor array.
pub(crate) const MONITORS_FLAG_PHYSICAL_SIZE: u32 = 2;
/// Size of one `VDAgentMonConfig`.
pub(crate) const MON_CONFIG_SIZE: usize = 20;
/// Size of one `VDAgentMonitorMM`.
pub(crate) const MONITOR_MM_SIZE: usize = 4;

/// MOUSE_STATE (13 bytes): absolute position on `display_id` and the button mask.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MouseState {
    /// X relative to the display.
    pub x: u32,
    /// Y relative to the display.
    pub y: u32,
    /// Button mask: L 1<<1, M 1<<2, R 1<<3, up 1<<4, down 1<<5, side 1<<6, extra 1<<7.
    pub buttons: u32,
    /// Display the position refers to.
    pub display_id: u8,
}

impl MouseState {
    pub(crate) fn decode(payload: &[u8]) -> Result<Self, VdagentError> {
        let mut r = Reader::new(payload, MessageType::MouseState, "exactly 13");
        let v = Self {
            x: r.u32()?,
            y: r.u32()?,
            buttons: r.u32()?,
            display_id: r.u8()?,
        };
        r.finish()?;
        Ok(v)
    }

    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        out.put_u32(self.x);
        out.put_u32(self.y);
        out.put_u32(self.buttons);
        out.put_u8(self.display_id);
    }
}

/// One `VDAgentMonConfig` (note: height comes first on the wire).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MonitorConfig {
    /// Height in pixels (0 with width 0 = disabled, sparse configs).
    pub height: u32,
    /// Width in pixels.
    pub width: u32,
    /// Colour depth (spice-gtk sends 32).
    pub depth: u32,
    /// X position.
    pub x: i32,
    /// Y position.
    pub y: i32,
}

/// One `VDAgentMonitorMM`: physical size in millimetres (height first).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MonitorMm {
    /// Height in mm.
    pub height: u16,
    /// Width in mm.
    pub width: u16,
}

/// MONITORS_CONFIG: the layout the client wants.
///
/// `physical_sizes` is `Some` exactly when the PHYSICAL_SIZE flag is set; it then has one entry per monitor.
/// `flags` is kept verbatim (including the PHYSICAL_SIZE bit) so a decoded message re-encodes identically.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MonitorsConfig {
    /// `VD_AGENT_CONFIG_MONITORS_FLAG_*`.
    pub flags: u32,
    /// The monitors, indexed by display id with SPARSE_MONITORS_CONFIG.
    pub monitors: Vec<MonitorConfig>,
    /// Physical sizes (PHYSICAL_SIZE flag), one per monitor.
    pub physical_sizes: Option<Vec<MonitorMm>>,
}

impl MonitorsConfig {
    pub(crate) fn decode(payload: &[u8]) -> Result<Self, VdagentError> {
        const RULE: &str = "8 + num x 20 (+ num x 4 with PHYSICAL_SIZE)";
        let mut r = Reader::new(payload, MessageType::MonitorsConfig, RULE);
        let num = r.u32()?;
        let flags = r.u32()?;
        if num > MAX_MONITORS {
            return Err(VdagentError::TooMany {
                what: "monitors",
                count: num.into(),
                max: MAX_MONITORS.into(),
            });
        }
        let physical = flags & MONITORS_FLAG_PHYSICAL_SIZE != 0;
        let per_monitor = if physical {
            MON_CONFIG_SIZE + MONITOR_MM_SIZE
        } else {
            MON_CONFIG_SIZE
        };
        let needed = (num as usize)
            .checked_mul(per_monitor)
            .ok_or_else(|| r.short())?;
        if r.remaining() != needed {
            return Err(r.short());
        }
        let mut monitors = Vec::with_capacity(num as usize);
        for _ in 0..num {
            monitors.push(MonitorConfig {
                height: r.u32()?,
                width: r.u32()?,
                depth: r.u32()?,
                x: r.i32()?,
                y: r.i32()?,
            });
        }
        let physical_sizes = if physical {
            let mut mm = Vec::with_capacity(num as usize);
            for _ in 0..num {
                mm.push(MonitorMm {
                    height: r.u16()?,
                    width: r.u16()?,
                });
            }
            Some(mm)
        } else {
            None
        };
        r.finish()?;
        Ok(Self {
            flags,
            monitors,
            physical_sizes,
        })
    }

    pub(crate) fn encode(&self, out: &mut Vec<u8>) -> Result<(), VdagentError> {
        let num = len_u32(self.monitors.len(), "too many monitors")?;
        let mut flags = self.flags & !MONITORS_FLAG_PHYSICAL_SIZE;
        if let Some(mm) = &self.physical_sizes {
            if mm.len() != self.monitors.len() {
                return Err(VdagentError::Encode(
                    "physical sizes must have one entry per monitor",
                ));
            }
            flags |= MONITORS_FLAG_PHYSICAL_SIZE;
        }
        out.put_u32(num);
        out.put_u32(flags);
        for m in &self.monitors {
            out.put_u32(m.height);
            out.put_u32(m.width);
            out.put_u32(m.depth);
            out.put_i32(m.x);
            out.put_i32(m.y);
        }
        for mm in self.physical_sizes.iter().flatten() {
            out.put_u16(mm.height);
            out.put_u16(mm.width);
        }
        Ok(())
    }
}

/// DISPLAY_CONFIG (Windows guests only; the Linux agent ignores it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DisplayConfig {
    /// DISABLE_WALLPAPER 1, DISABLE_FONT_SMOOTH 2, DISABLE_ANIMATION 4, SET_COLOR_DEPTH 8.
    pub flags: u32,
    /// Colour depth, with SET_COLOR_DEPTH.
    pub depth: u32,
}

impl DisplayConfig {
    pub(crate) fn decode(payload: &[u8]) -> Result<Self, VdagentError> {
        let mut r = Reader::new(payload, MessageType::DisplayConfig, "exactly 8");
        let v = Self {
            flags: r.u32()?,
            depth: r.u32()?,
        };
        r.finish()?;
        Ok(v)
    }

    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        out.put_u32(self.flags);
        out.put_u32(self.depth);
    }
}

/// AUDIO_VOLUME_SYNC: per-channel volumes (0..=65535) of playback or capture.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AudioVolumeSync {
    /// Playback (true) or capture (false); any non-zero byte decodes as true.
    pub is_playback: bool,
    /// Muted; any non-zero byte decodes as true.
    pub mute: bool,
    /// One volume per channel (at most 255 channels).
    pub volumes: Vec<u16>,
}

impl AudioVolumeSync {
    pub(crate) fn decode(payload: &[u8]) -> Result<Self, VdagentError> {
        let mut r = Reader::new(payload, MessageType::AudioVolumeSync, "3 + nchannels x 2");
        let is_playback = r.u8()? != 0;
        let mute = r.u8()? != 0;
        let n = r.u8()?;
        if r.remaining() != usize::from(n) * 2 {
            return Err(r.short());
        }
        let volumes = (0..n).map(|_| r.u16()).collect::<Result<Vec<_>, _>>()?;
        Ok(Self {
            is_playback,
            mute,
            volumes,
        })
    }

    pub(crate) fn encode(&self, out: &mut Vec<u8>) -> Result<(), VdagentError> {
        let n = u8::try_from(self.volumes.len())
            .map_err(|_| VdagentError::Encode("more than 255 channels"))?;
        out.put_u8(self.is_playback.into());
        out.put_u8(self.mute.into());
        out.put_u8(n);
        for v in &self.volumes {
            out.put_u16(*v);
        }
        Ok(())
    }
}

/// One `VDAgentDeviceDisplayInfo`: which device address drives display `channel_id + monitor_id`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceDisplayInfo {
    /// SPICE display channel id.
    pub channel_id: u32,
    /// Monitor id within the channel.
    pub monitor_id: u32,
    /// Display id on the device.
    pub device_display_id: u32,
    /// Device address such as `pci/0000/02.0`, without the NUL terminator (bytes after the first NUL are
    /// dropped on decode).
    pub device_address: Vec<u8>,
}

/// GRAPHICS_DEVICE_INFO: the display device behind each SPICE display.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GraphicsDeviceInfo {
    /// One entry per display.
    pub displays: Vec<DeviceDisplayInfo>,
}

impl GraphicsDeviceInfo {
    pub(crate) fn decode(payload: &[u8]) -> Result<Self, VdagentError> {
        let mut r = Reader::new(
            payload,
            MessageType::GraphicsDeviceInfo,
            "4 + count x (16 + len)",
        );
        let count = r.u32()?;
        if count > MAX_DEVICE_DISPLAYS {
            return Err(VdagentError::TooMany {
                what: "device displays",
                count: count.into(),
                max: MAX_DEVICE_DISPLAYS.into(),
            });
        }
        let mut displays = Vec::with_capacity((count as usize).min(r.remaining() / 16));
        for _ in 0..count {
            let channel_id = r.u32()?;
            let monitor_id = r.u32()?;
            let device_display_id = r.u32()?;
            let len = r.u32()?;
            let available = r.remaining();
            let bytes = match usize::try_from(len) {
                Ok(l) if l <= available => l,
                _ => {
                    return Err(VdagentError::LengthOutOfBounds {
                        what: "device_address_len",
                        declared: len.into(),
                        available: available as u64,
                    })
                }
            };
            let raw = r.take(bytes)?;
            let end = raw.iter().position(|b| *b == 0).unwrap_or(raw.len());
            displays.push(DeviceDisplayInfo {
                channel_id,
                monitor_id,
                device_display_id,
                device_address: raw[..end].to_vec(),
            });
        }
        r.finish()?;
        Ok(Self { displays })
    }

    pub(crate) fn encode(&self, out: &mut Vec<u8>) -> Result<(), VdagentError> {
        out.put_u32(len_u32(self.displays.len(), "too many device displays")?);
        for d in &self.displays {
            if d.device_address.contains(&0) {
                return Err(VdagentError::Encode("device address contains a NUL byte"));
            }
            out.put_u32(d.channel_id);
            out.put_u32(d.monitor_id);
            out.put_u32(d.device_display_id);
            out.put_u32(len_u32(
                d.device_address.len() + 1,
                "device address too long",
            )?);
            out.extend_from_slice(&d.device_address);
            out.put_u8(0);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(out: &mut Vec<u8>, channel: u32, index: u32, address: &[u8]) {
        for v in [channel, 0, index, address.len() as u32] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        out.extend_from_slice(address);
    }

    #[test]
    fn graphics_device_info_bounds() {
        // The cap itself: 256 entries, each with a 1-byte address.
        let mut p = MAX_DEVICE_DISPLAYS.to_le_bytes().to_vec();
        for i in 0..MAX_DEVICE_DISPLAYS {
            entry(&mut p, i, 0, b"\0");
        }
        assert_eq!(GraphicsDeviceInfo::decode(&p).unwrap().displays.len(), 256);
        // One more is refused before anything is read.
        let mut over = (MAX_DEVICE_DISPLAYS + 1).to_le_bytes().to_vec();
        over.extend_from_slice(&p[4..]);
        assert!(matches!(
            GraphicsDeviceInfo::decode(&over),
            Err(VdagentError::TooMany { .. })
        ));
        // An address without its NUL is taken whole; bytes after the NUL are dropped.
        let mut p = 2u32.to_le_bytes().to_vec();
        entry(&mut p, 0, 1, b"pci/0000/02.0\0junk");
        entry(&mut p, 1, 0, b"pci/0000/03.0");
        let g = GraphicsDeviceInfo::decode(&p).unwrap();
        assert_eq!(g.displays[0].device_address, b"pci/0000/02.0");
        assert_eq!(g.displays[1].device_address, b"pci/0000/03.0");
        // Trailing bytes after the last entry, an entry count larger than what follows, a length one past the
        // end: all refused.
        let mut trailing = p.clone();
        trailing.push(0);
        assert!(GraphicsDeviceInfo::decode(&trailing).is_err());
        let mut short = 3u32.to_le_bytes().to_vec();
        short.extend_from_slice(&p[4..]);
        assert!(GraphicsDeviceInfo::decode(&short).is_err());
        let mut past = 1u32.to_le_bytes().to_vec();
        for v in [0u32, 0, 0, 5] {
            past.extend_from_slice(&v.to_le_bytes());
        }
        past.extend_from_slice(b"pci/");
        assert!(matches!(
            GraphicsDeviceInfo::decode(&past),
            Err(VdagentError::LengthOutOfBounds {
                declared: 5,
                available: 4,
                ..
            })
        ));
    }

    #[test]
    fn audio_volume_sync_bounds() {
        let mut p = vec![0, 1, 255];
        p.extend(std::iter::repeat_n(0xab, 510));
        let a = AudioVolumeSync::decode(&p).unwrap();
        assert_eq!((a.is_playback, a.mute, a.volumes.len()), (false, true, 255));
        p.push(0);
        assert!(AudioVolumeSync::decode(&p).is_err());
        assert!(AudioVolumeSync::decode(&[1, 0, 1, 0]).is_err());
        assert!(AudioVolumeSync::decode(&[1, 0]).is_err());
        assert_eq!(
            AudioVolumeSync::decode(&[1, 0, 0]).unwrap().volumes,
            Vec::<u16>::new()
        );
    }
}
