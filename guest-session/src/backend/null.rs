//! The fallback backend without a display: clipboard requests are answered empty, geometry is empty.

use guestlink_protocol::session::SessionMonitor;
use guestlink_protocol::vdagent::{ClipboardType, Selection};

use super::{BackendEvent, BackendFeatures, DesktopBackend, EventSender};

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
    fn clipboard_grab(&self, _: Selection, _: Vec<ClipboardType>) {}
    fn clipboard_request(&self, selection: Selection, _: ClipboardType) {
        let _ = self.events.send(BackendEvent::ClipboardData {
            selection,
            data_type: ClipboardType::None,
            data: Vec::new(),
        });
    }
    fn clipboard_data(&self, _: Selection, _: ClipboardType, _: Vec<u8>) {}
    fn clipboard_release(&self, _: Selection) {}
    fn release_host_selections(&self) {}
    fn set_max_clipboard(&self, _: Option<usize>) {}
    fn apply_monitors(&self, _: u32, _: Vec<SessionMonitor>) {
        let _ = self.events.send(BackendEvent::Geometry(Vec::new()));
    }
    fn resync(&self) {
        let _ = self.events.send(BackendEvent::Geometry(Vec::new()));
    }
}
