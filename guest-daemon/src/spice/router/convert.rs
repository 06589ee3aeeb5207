//! Client display messages turned into the session protocol's frames for the agent.

use guestlink_protocol::session::{SessionDeviceDisplay, SessionMessage, SessionMonitor};
use guestlink_protocol::vdagent::{GraphicsDeviceInfo, MonitorsConfig};

pub(super) fn monitors_msg(mc: &MonitorsConfig) -> SessionMessage {
    let monitors = mc
        .monitors
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let mm = mc.physical_sizes.as_ref().and_then(|p| p.get(i));
            SessionMonitor {
                width: m.width,
                height: m.height,
                depth: m.depth,
                x: m.x,
                y: m.y,
                mm_width: mm.map(|p| p.width),
                mm_height: mm.map(|p| p.height),
            }
        })
        .collect();
    SessionMessage::MonitorsConfig {
        flags: mc.flags,
        monitors,
    }
}

pub(super) fn device_info_msg(info: &GraphicsDeviceInfo) -> SessionMessage {
    SessionMessage::GraphicsDeviceInfo {
        displays: info
            .displays
            .iter()
            .map(|d| SessionDeviceDisplay {
                channel_id: d.channel_id,
                monitor_id: d.monitor_id,
                device_display_id: d.device_display_id,
                device_address: String::from_utf8_lossy(
                    d.device_address
                        .strip_suffix(&[0])
                        .unwrap_or(&d.device_address),
                )
                .into_owned(),
            })
            .collect(),
    }
}
