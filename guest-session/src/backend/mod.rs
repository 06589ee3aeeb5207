//! The desktop backend interface: what `guestlink-session` needs from a display server.
//!
//! A backend owns the clipboard selections (CLIPBOARD and PRIMARY) on behalf of the host, reports the guest's own
//! clipboard changes, applies monitor configurations and reports the resulting geometry. Calls never block: a
//! backend queues work on its own thread (or task) and answers through [`DesktopEvent`]s on the channel it was
//! created with. Implementations: X11 ([`x11`]), native Wayland ([`wayland`]: data-control clipboard,
//! wlr-output-management resize, or KDE's kscreen-doctor from [`kde`]) and GNOME ([`gnome`]: X11 clipboard on
//! Xwayland + Mutter DisplayConfig). [`follow_preferred`] is the preferred-mode policy all of them share.
//!
//! Choice ([`select`]): [`detect::plan`] lists the backends to try, by capability (see docs/wayland.md): on
//! Wayland the native backend when the compositor has data-control, the GNOME backend under GNOME; then X11 when
//! `$DISPLAY` is set (also under Xwayland); last a [`null::NullBackend`] that keeps file transfers working and
//! answers every clipboard request empty. The first that starts is used.

mod clipboard_data;
pub mod detect;
pub mod follow_preferred;
pub mod gnome;
pub mod kde;
pub mod null;
pub mod wayland;
pub(crate) mod worker;
pub mod x11;

use guestlink_protocol::session::{GeometryMonitor, SessionMonitor};
use guestlink_protocol::vdagent::{ClipboardType, Selection};
use tokio::sync::mpsc::UnboundedSender;

use detect::BackendKind;

pub use clipboard_data::ClipboardMemfd;

/// Hard cap on clipboard data read from guest applications, below the session frame limit.
pub const HARD_MAX_CLIPBOARD: usize = 64 * 1024 * 1024 - 64 * 1024;

/// What the daemon connection asks of the desktop backend (one variant per operation; each backend's
/// `command` match handles every one). Answers come back as [`DesktopEvent`]s.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DesktopCommand {
    /// The host owns `selection` with `types`: take the guest selection on its behalf.
    ClipboardGrab {
        /// Selection.
        selection: Selection,
        /// Offered vdagent types.
        types: Vec<ClipboardType>,
    },
    /// The host wants the guest's `selection` as `data_type`: answer with [`DesktopEvent::ClipboardData`] (or
    /// [`DesktopEvent::ClipboardFile`]).
    ClipboardRequest {
        /// Selection.
        selection: Selection,
        /// Wanted type.
        data_type: ClipboardType,
    },
    /// The host's answer to a [`DesktopEvent::ClipboardRequest`] (`ClipboardType::None` + empty = nothing).
    ClipboardData {
        /// Selection.
        selection: Selection,
        /// Type of `data`.
        data_type: ClipboardType,
        /// The bytes.
        data: Vec<u8>,
    },
    /// The host released `selection`: drop the guest selection if it is still held for the host.
    ClipboardRelease {
        /// Selection.
        selection: Selection,
    },
    /// Drop every selection held for the host (client or daemon gone).
    ReleaseHostSelections,
    /// The largest clipboard payload to read from guest applications (`None` = [`HARD_MAX_CLIPBOARD`]).
    MaxClipboard(Option<usize>),
    /// Apply a monitors config (indexed by display id, w = h = 0 disabled); the result comes back as
    /// [`DesktopEvent::Geometry`].
    ApplyMonitors {
        /// `VD_AGENT_CONFIG_MONITORS_FLAG_*`.
        flags: u32,
        /// The monitors.
        monitors: Vec<SessionMonitor>,
    },
    /// Report the current geometry ([`DesktopEvent::Geometry`]) and re-announce guest-owned selections (after a
    /// reconnect to the daemon).
    Resync,
    /// Report the geometry again (the X11 backend only if it changed): the display id → output map changed
    /// ([`crate::display_map`]), or a resize finished on another thread (KDE's kscreen-doctor).
    ReportGeometry,
}

/// What a backend tells the daemon connection (and so the host).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DesktopEvent {
    /// A guest application owns `selection` now and offers `types`.
    ClipboardGrab {
        /// Selection.
        selection: Selection,
        /// Offered vdagent types.
        types: Vec<ClipboardType>,
    },
    /// A guest application pastes host-owned `selection`: the host must send the data.
    ClipboardRequest {
        /// Selection.
        selection: Selection,
        /// Wanted type.
        data_type: ClipboardType,
    },
    /// The answer to [`DesktopCommand::ClipboardRequest`] (`ClipboardType::None` + empty = nothing).
    ClipboardData {
        /// Selection.
        selection: Selection,
        /// Type of `data`.
        data_type: ClipboardType,
        /// The bytes.
        data: Vec<u8>,
    },
    /// Like [`DesktopEvent::ClipboardData`], with the data collected straight into a memfd (the X11 INCR path:
    /// each chunk is written as it arrives, so the copy overlaps the transfer instead of following it).
    ClipboardFile {
        /// Selection.
        selection: Selection,
        /// Type of the data.
        data_type: ClipboardType,
        /// The memfd (not sealed yet) and its length.
        memfd: ClipboardMemfd,
    },
    /// The guest no longer offers `selection` (its owner went away).
    ClipboardRelease {
        /// Selection.
        selection: Selection,
    },
    /// The desktop layout (after a monitors config, a foreign change, or on request).
    Geometry(Vec<GeometryMonitor>),
    /// The backend stopped (display connection lost); the session agent exits.
    Fatal(String),
}

/// What a backend can do (logged at start and documented in docs/guestlink-session.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BackendFeatures {
    /// Host ↔ guest clipboard.
    pub clipboard: bool,
    /// PRIMARY in addition to CLIPBOARD.
    pub primary: bool,
    /// Arbitrary resolutions from a monitors config.
    pub resize: bool,
}

/// The interface every desktop backend implements.
pub trait DesktopBackend: std::fmt::Debug + Send {
    /// Short name for logs ("x11", "wayland", "gnome", "none").
    fn name(&self) -> &'static str;
    /// Supported features.
    fn features(&self) -> BackendFeatures;
    /// Queues `cmd`; never blocks. Results come back as [`DesktopEvent`]s on the backend's [`EventSender`].
    fn command(&self, cmd: DesktopCommand);
}

/// Events channel a backend reports on.
pub type EventSender = UnboundedSender<DesktopEvent>;

/// Picks the backend from the environment ([`detect::plan`]) and starts the first of the plan that starts. Logs the
/// plan, the choice and why.
pub fn select(events: EventSender) -> Box<dyn DesktopBackend> {
    let env = detect::SessionEnv::from_env();
    // On Wayland the plan depends on the compositor's globals; the same connection then serves the backend.
    let mut compositor = None;
    if env.is_wayland() {
        match wayland::Compositor::connect() {
            Ok(c) => compositor = Some(c),
            Err(e) => tracing::warn!("Wayland compositor: {e:#}"),
        }
    }
    let plan = detect::plan(&env, compositor.as_ref().map(wayland::Compositor::globals));
    tracing::info!(plan = ?plan.backends(), "desktop backends to try, in order");
    for detect::Step { backend, why } in plan.0 {
        let started: anyhow::Result<Box<dyn DesktopBackend>> = match backend {
            BackendKind::Wayland { clipboard, resize } => match compositor.take() {
                Some(c) => wayland::start(events.clone(), c, clipboard, resize)
                    .map(|b| Box::new(b) as Box<dyn DesktopBackend>),
                None => Err(anyhow::anyhow!("no Wayland connection")),
            },
            BackendKind::Gnome { clipboard } => {
                gnome::start(events.clone(), clipboard).map(|b| Box::new(b) as _)
            }
            BackendKind::X11 => x11::start(events.clone()).map(|b| Box::new(b) as _),
            BackendKind::Null => Ok(Box::new(null::NullBackend::new(events.clone()))),
        };
        match started {
            Ok(b) if backend == BackendKind::Null => {
                tracing::warn!("backend none: {why}");
                return b;
            }
            Ok(b) => {
                tracing::info!("backend {}: {why}", b.name());
                return b;
            }
            Err(e) => tracing::warn!("backend {} failed to start: {e:#}", backend.name()),
        }
    }
    // Not reached: the plan ends with the null backend, which always starts.
    Box::new(null::NullBackend::new(events))
}
