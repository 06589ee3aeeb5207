//! The desktop backend interface: what `guestlink-session` needs from a display server.
//!
//! A backend owns the clipboard selections (CLIPBOARD and PRIMARY) on behalf of the host, reports the guest's own
//! clipboard changes, applies monitor configurations and reports the resulting geometry. Calls never block: a
//! backend queues work on its own thread (or task) and answers through [`DesktopEvent`]s on the channel it was
//! created with. Implementations: X11 ([`x11`]), native Wayland ([`wayland`]: data-control clipboard,
//! wlr-output-management resize, or KDE's kscreen-doctor from [`kde`]) and GNOME ([`gnome`]: X11 clipboard on
//! Xwayland + Mutter DisplayConfig). [`follow_preferred`] is the preferred-mode policy all of them share.
//!
//! Choice ([`select`], by capability, see [`detect`] and docs/wayland.md): on Wayland the native backend when the
//! compositor has data-control, GNOME's pair under GNOME; else `$DISPLAY` set → X11 (also under Xwayland);
//! otherwise a [`null::NullBackend`] that keeps file transfers working and answers every clipboard request empty.

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

/// Picks the backend from the environment and starts it. Logs what was chosen and why.
pub fn select(events: EventSender) -> Box<dyn DesktopBackend> {
    // Native Wayland first (data-control); it falls through to X11 (Xwayland) when the compositor lacks it.
    let env = detect::SessionEnv::from_env();
    if env.is_wayland() {
        match wayland::start(events.clone(), &env) {
            Ok((Some(b), plan)) => {
                tracing::info!(?plan, "backend wayland: {}", plan.why);
                return Box::new(b);
            }
            Ok((None, plan)) => {
                tracing::info!(?plan, "no native Wayland backend: {}", plan.why);
                if plan.resize == detect::ResizeBackend::MutterDisplayConfig {
                    if let Some(b) = gnome::start(events.clone(), &plan) {
                        return b;
                    }
                }
            }
            Err(e) => tracing::warn!("Wayland backend failed to start: {e:#}"),
        }
    }
    let display = std::env::var_os("DISPLAY").filter(|d| !d.is_empty());
    let wayland = std::env::var_os("WAYLAND_DISPLAY").filter(|d| !d.is_empty());
    match (display, wayland) {
        (Some(d), wayland) => {
            let why = if wayland.is_some() {
                "DISPLAY is set (Xwayland; no native Wayland backend yet)"
            } else {
                "DISPLAY is set"
            };
            match x11::start(events.clone()) {
                Ok(b) => {
                    tracing::info!(display = ?d, "backend x11: {why}");
                    return Box::new(b);
                }
                Err(e) => tracing::error!(display = ?d, "backend x11 failed to start: {e:#}"),
            }
        }
        (None, Some(w)) => tracing::warn!(
            wayland = ?w,
            "WAYLAND_DISPLAY without DISPLAY and no usable Wayland protocol (data-control, output management): clipboard and resize disabled"
        ),
        (None, None) => {
            tracing::warn!(
                "neither DISPLAY nor WAYLAND_DISPLAY is set; clipboard and resize disabled"
            );
        }
    }
    tracing::info!("backend none: file transfers only");
    Box::new(null::NullBackend::new(events))
}
