//! The GNOME backend: Mutter's `org.gnome.Mutter.DisplayConfig` for resize and layout ([`mutter`]), paired with a
//! clipboard backend — X11 through Xwayland (mutter has no data-control), or none. The clipboard calls pass
//! through; the clipboard backend's own geometry is kept off the wire (mutter's layout is the one reported).

mod mutter;

use anyhow::{Context, Result};

use super::detect::ClipboardVia;
use super::{BackendFeatures, DesktopBackend, DesktopCommand, DesktopEvent, EventSender};
pub use mutter::MutterResize;

/// Mutter DisplayConfig for resize, plus the X11 clipboard on Xwayland when `clipboard` is
/// [`ClipboardVia::X11`] (its RandR geometry is filtered out: mutter's layout is the one reported). An error
/// when DisplayConfig does not answer (the plan goes on with X11 alone).
pub fn start(events: EventSender, clipboard: ClipboardVia) -> Result<GnomeBackend> {
    let resize = MutterResize::start(events.clone()).context("Mutter DisplayConfig unavailable")?;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let forward = events.clone();
    tokio::spawn(async move {
        while let Some(ev) = rx.recv().await {
            if !matches!(ev, DesktopEvent::Geometry(_)) && forward.send(ev).is_err() {
                return;
            }
        }
    });
    let clipboard: Box<dyn DesktopBackend> = match clipboard {
        ClipboardVia::X11 => match super::x11::start(tx.clone()) {
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
        "GNOME: Mutter DisplayConfig resize"
    );
    Ok(GnomeBackend::new(clipboard, resize))
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
    fn command(&self, cmd: DesktopCommand) {
        match cmd {
            DesktopCommand::ApplyMonitors { monitors, .. } => self.resize.apply(monitors),
            DesktopCommand::Resync => {
                self.clipboard.command(DesktopCommand::Resync);
                self.resize.report();
            }
            DesktopCommand::ReportGeometry => self.resize.report(),
            DesktopCommand::ClipboardGrab { .. }
            | DesktopCommand::ClipboardRequest { .. }
            | DesktopCommand::ClipboardData { .. }
            | DesktopCommand::ClipboardRelease { .. }
            | DesktopCommand::ReleaseHostSelections
            | DesktopCommand::MaxClipboard(_) => self.clipboard.command(cmd),
        }
    }
}
