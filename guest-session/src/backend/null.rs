//! The fallback backend without a display: clipboard requests are answered empty, geometry is empty.

use guestlink_protocol::vdagent::ClipboardType;

use super::{BackendFeatures, DesktopBackend, DesktopCommand, DesktopEvent, EventSender};

/// No display server: file transfers still work, nothing else does.
#[derive(Debug)]
pub struct NullBackend {
    events: EventSender,
}

impl NullBackend {
    /// A backend that reports on `events`.
    pub fn new(events: EventSender) -> Self {
        Self { events }
    }
}

impl DesktopBackend for NullBackend {
    fn name(&self) -> &'static str {
        "none"
    }
    fn features(&self) -> BackendFeatures {
        BackendFeatures {
            clipboard: false,
            primary: false,
            resize: false,
        }
    }
    fn command(&self, cmd: DesktopCommand) {
        let reply = match cmd {
            DesktopCommand::ClipboardRequest { selection, .. } => DesktopEvent::ClipboardData {
                selection,
                data_type: ClipboardType::None,
                data: Vec::new(),
            },
            DesktopCommand::ApplyMonitors { .. } | DesktopCommand::Resync => {
                DesktopEvent::Geometry(Vec::new())
            }
            DesktopCommand::ClipboardGrab { .. }
            | DesktopCommand::ClipboardData { .. }
            | DesktopCommand::ClipboardRelease { .. }
            | DesktopCommand::ReleaseHostSelections
            | DesktopCommand::MaxClipboard(_)
            | DesktopCommand::ReportGeometry => return,
        };
        let _ = self.events.send(reply);
    }
}
