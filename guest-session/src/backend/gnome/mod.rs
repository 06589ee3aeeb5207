//! The GNOME backend: Mutter's `org.gnome.Mutter.DisplayConfig` for resize and layout ([`mutter`]), paired with a
//! clipboard backend — X11 through Xwayland (mutter has no data-control), or none. The clipboard calls pass
//! through; the clipboard backend's own geometry is kept off the wire (mutter's layout is the one reported).

mod mutter;

use guestlink_protocol::session::SessionMonitor;
use guestlink_protocol::vdagent::{ClipboardType, Selection};

use super::detect::{ClipboardBackend, Plan};
use super::{BackendEvent, BackendFeatures, DesktopBackend, EventSender};
pub use mutter::MutterResize;

/// GNOME (no data-control): Mutter DisplayConfig for resize, plus the X11 clipboard on Xwayland when `plan` says
/// so (its RandR geometry is filtered out: mutter's layout is the one reported). `None` when DisplayConfig does not
/// answer (the caller falls back to X11 alone).
pub fn start(events: EventSender, plan: &Plan) -> Option<Box<dyn DesktopBackend>> {
    let resize = match MutterResize::start(events.clone()) {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!("Mutter DisplayConfig unavailable: {e:#}");
            return None;
        }
    };
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let forward = events.clone();
    tokio::spawn(async move {
        while let Some(ev) = rx.recv().await {
            if !matches!(ev, BackendEvent::Geometry(_)) && forward.send(ev).is_err() {
                return;
            }
        }
    });
    let clipboard: Box<dyn DesktopBackend> = match plan.clipboard {
        ClipboardBackend::X11 => match super::x11::start(tx.clone()) {
            Ok(b) => Box::new(b),
            Err(e) => {
                tracing::warn!("X11 clipboard on Xwayland failed to start: {e:#}");
                Box::new(super::null::NullBackend::new(tx))
            }
        },
        _ => Box::new(super::null::NullBackend::new(tx)),
    };
    tracing::info!(
        clipboard = clipboard.name(),
        "backend gnome: Mutter DisplayConfig resize"
    );
    Some(Box::new(GnomeBackend::new(clipboard, resize)))
}

/// GNOME: a clipboard backend (X11 on Xwayland, or none) plus Mutter DisplayConfig for resize and layout.
#[derive(Debug)]
pub struct GnomeBackend {
    clipboard: Box<dyn DesktopBackend>,
    resize: MutterResize,
}

impl GnomeBackend {
    /// Pairs `clipboard` (whose Geometry events must already be filtered out) with `resize`.
    pub fn new(clipboard: Box<dyn DesktopBackend>, resize: MutterResize) -> Self {
        resize.report();
        Self { clipboard, resize }
    }
}

impl DesktopBackend for GnomeBackend {
    fn name(&self) -> &'static str {
        "gnome"
    }
    fn features(&self) -> BackendFeatures {
        BackendFeatures {
            resize: true,
            ..self.clipboard.features()
        }
    }
    fn clipboard_grab(&self, selection: Selection, types: Vec<ClipboardType>) {
        self.clipboard.clipboard_grab(selection, types);
    }
    fn clipboard_request(&self, selection: Selection, data_type: ClipboardType) {
        self.clipboard.clipboard_request(selection, data_type);
    }
    fn clipboard_data(&self, selection: Selection, data_type: ClipboardType, data: Vec<u8>) {
        self.clipboard.clipboard_data(selection, data_type, data);
    }
    fn clipboard_release(&self, selection: Selection) {
        self.clipboard.clipboard_release(selection);
    }
    fn release_host_selections(&self) {
        self.clipboard.release_host_selections();
    }
    fn set_max_clipboard(&self, max: Option<usize>) {
        self.clipboard.set_max_clipboard(max);
    }
    fn apply_monitors(&self, _flags: u32, monitors: Vec<SessionMonitor>) {
        self.resize.apply(monitors);
    }
    fn resync(&self) {
        self.clipboard.resync();
        self.resize.report();
    }
    fn displays_remapped(&self) {
        self.resize.report();
    }
}
