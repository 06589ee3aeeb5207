//! Backend detection: which display server the session agent runs in, and which desktop backends to try, in
//! order.
//!
//! Inputs are the environment (`XDG_SESSION_TYPE`, `WAYLAND_DISPLAY`, `DISPLAY`, `XDG_CURRENT_DESKTOP`) and, on
//! Wayland, the globals the compositor advertises. [`plan`] is pure and the only place that decides: on Wayland it
//! picks, by capability, how the clipboard is served (ext-data-control-v1 → zwlr-data-control-v1 → X11 through
//! Xwayland's DISPLAY → none) and how monitors are resized (wlr-output-management → Mutter DisplayConfig →
//! kscreen-doctor on KDE → none), and from that the ordered list of backends: the native Wayland backend when
//! there is data-control, else the GNOME backend under GNOME, then X11 when `DISPLAY` is set, and always the null
//! backend last. [`super::select`] starts the first one that starts and logs the plan and the choice.

use std::ffi::OsString;

/// The environment the agent was started in.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SessionEnv {
    /// `XDG_SESSION_TYPE` (`wayland`, `x11`, `tty`, …), lower-cased.
    pub session_type: Option<String>,
    /// `WAYLAND_DISPLAY`.
    pub wayland_display: Option<OsString>,
    /// `DISPLAY` (an X server, or the compositor's Xwayland).
    pub display: Option<OsString>,
    /// `XDG_CURRENT_DESKTOP`, split at `:` (`GNOME`, `KDE`, `sway`, …).
    pub desktops: Vec<String>,
}

impl SessionEnv {
    /// Reads the process environment (empty variables count as unset).
    pub fn from_env() -> Self {
        let var = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty());
        Self {
            session_type: var("XDG_SESSION_TYPE").map(|s| s.to_string_lossy().to_lowercase()),
            wayland_display: var("WAYLAND_DISPLAY"),
            display: var("DISPLAY"),
            desktops: var("XDG_CURRENT_DESKTOP")
                .map(|d| {
                    d.to_string_lossy()
                        .split(':')
                        .filter(|s| !s.is_empty())
                        .map(str::to_owned)
                        .collect()
                })
                .unwrap_or_default(),
        }
    }

    /// Whether the session should be treated as Wayland (a Wayland socket, unless the session says x11).
    pub fn is_wayland(&self) -> bool {
        self.wayland_display.is_some() && self.session_type.as_deref() != Some("x11")
    }

    /// Whether `XDG_CURRENT_DESKTOP` names `name` (case-insensitive).
    pub fn desktop_is(&self, name: &str) -> bool {
        self.desktops.iter().any(|d| d.eq_ignore_ascii_case(name))
    }
}

/// Interface names of the globals that matter.
pub mod globals {
    /// ext-data-control-v1 manager.
    pub const EXT_DATA_CONTROL: &str = "ext_data_control_manager_v1";
    /// wlr-data-control-unstable-v1 manager.
    pub const WLR_DATA_CONTROL: &str = "zwlr_data_control_manager_v1";
    /// wlr-output-management-unstable-v1 manager.
    pub const WLR_OUTPUT_MANAGER: &str = "zwlr_output_manager_v1";
    /// KDE output management (Plasma).
    pub const KDE_OUTPUT_MANAGEMENT: &str = "kde_output_management_v2";
    /// The seat.
    pub const SEAT: &str = "wl_seat";
}

/// The globals a compositor advertised: `(interface, version)`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Globals(pub Vec<(String, u32)>);

impl Globals {
    /// Highest advertised version of `interface`.
    pub fn version(&self, interface: &str) -> Option<u32> {
        self.0
            .iter()
            .filter(|(i, _)| i == interface)
            .map(|(_, v)| *v)
            .max()
    }
}

/// How the clipboard is served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClipboardVia {
    /// `ext_data_control_manager_v1` (always has primary).
    ExtDataControl,
    /// `zwlr_data_control_manager_v1` with this version (primary from v2).
    WlrDataControl(u32),
    /// The X11 backend on `$DISPLAY` (Xwayland under a compositor without data-control).
    X11,
    /// Nothing.
    None,
}

impl ClipboardVia {
    /// Whether PRIMARY can be served.
    pub fn has_primary(self) -> bool {
        match self {
            Self::ExtDataControl | Self::X11 => true,
            Self::WlrDataControl(v) => v >= 2,
            Self::None => false,
        }
    }

    /// Whether this is a Wayland data-control protocol (what the native Wayland backend needs).
    pub fn is_data_control(self) -> bool {
        matches!(self, Self::ExtDataControl | Self::WlrDataControl(_))
    }
}

/// How monitors configs are applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResizeVia {
    /// `zwlr_output_manager_v1` (sway, Hyprland, other wlroots compositors): custom modes.
    WlrOutputManagement,
    /// `org.gnome.Mutter.DisplayConfig` on the session bus (only modes mutter already lists).
    MutterDisplayConfig,
    /// KDE: `kscreen-doctor` (listed modes only on Plasma 5; see docs/wayland.md).
    KscreenDoctor,
    /// Nothing.
    None,
}

/// A desktop backend to start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackendKind {
    /// The native Wayland backend ([`super::wayland`]): data-control clipboard; resize by wlr-output-management
    /// or, on KDE, kscreen-doctor ([`super::kde`]) — other values of `resize` leave it without resize.
    Wayland {
        /// A data-control protocol.
        clipboard: ClipboardVia,
        /// How it resizes.
        resize: ResizeVia,
    },
    /// The GNOME backend ([`super::gnome`]): Mutter DisplayConfig, and the clipboard through X11 on Xwayland or
    /// none.
    Gnome {
        /// [`ClipboardVia::X11`] or [`ClipboardVia::None`].
        clipboard: ClipboardVia,
    },
    /// The X11 backend ([`super::x11`]) on `$DISPLAY`: clipboard and RandR.
    X11,
    /// The null backend ([`super::null`]): file transfers only. It cannot fail to start.
    Null,
}

impl BackendKind {
    /// The backend's name, as its [`super::DesktopBackend::name`] says it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Wayland { .. } => "wayland",
            Self::Gnome { .. } => "gnome",
            Self::X11 => "x11",
            Self::Null => "none",
        }
    }
}

/// One entry of a [`Plan`]: a backend and why it is there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    /// The backend.
    pub backend: BackendKind,
    /// Human-readable reason, for the log.
    pub why: String,
}

/// The desktop backends to try, in order; the first that starts is used. The last step is always
/// [`BackendKind::Null`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan(pub Vec<Step>);

impl Plan {
    /// The backends, in order.
    pub fn backends(&self) -> Vec<BackendKind> {
        self.0.iter().map(|s| s.backend).collect()
    }
}

/// How a Wayland compositor with `g` serves the clipboard, and why.
fn wayland_clipboard(env: &SessionEnv, g: &Globals) -> (ClipboardVia, &'static str) {
    let seat = g.version(globals::SEAT).is_some();
    if seat && g.version(globals::EXT_DATA_CONTROL).is_some() {
        (ClipboardVia::ExtDataControl, "ext-data-control-v1")
    } else if let Some(v) = g.version(globals::WLR_DATA_CONTROL).filter(|_| seat) {
        (ClipboardVia::WlrDataControl(v), "zwlr-data-control-v1")
    } else if env.display.is_some() {
        (
            ClipboardVia::X11,
            "no data-control global: X11 clipboard through Xwayland",
        )
    } else {
        (ClipboardVia::None, "no data-control global and no DISPLAY")
    }
}

/// How a Wayland compositor with `g` resizes, and why.
fn wayland_resize(env: &SessionEnv, g: &Globals) -> (ResizeVia, &'static str) {
    if g.version(globals::WLR_OUTPUT_MANAGER).is_some() {
        (ResizeVia::WlrOutputManagement, "wlr-output-management")
    } else if env.desktop_is("GNOME") {
        (
            ResizeVia::MutterDisplayConfig,
            "GNOME: Mutter DisplayConfig",
        )
    } else if g.version(globals::KDE_OUTPUT_MANAGEMENT).is_some() || env.desktop_is("KDE") {
        (ResizeVia::KscreenDoctor, "KDE: kscreen-doctor")
    } else {
        (ResizeVia::None, "no output-management interface")
    }
}

/// The ordered plan for `env`; `globals` is what the Wayland compositor advertised (None: not Wayland, or the
/// connection failed).
pub fn plan(env: &SessionEnv, globals: Option<&Globals>) -> Plan {
    let mut steps = Vec::new();
    let step = |backend, why: String| Step { backend, why };
    let wayland = globals.filter(|_| env.is_wayland());
    if let Some(g) = wayland {
        let (clipboard, cwhy) = wayland_clipboard(env, g);
        let (resize, rwhy) = wayland_resize(env, g);
        let why = format!("Wayland: clipboard via {cwhy}; resize via {rwhy}");
        if clipboard.is_data_control() {
            steps.push(step(BackendKind::Wayland { clipboard, resize }, why));
        } else if resize == ResizeVia::MutterDisplayConfig {
            steps.push(step(BackendKind::Gnome { clipboard }, why));
        }
    }
    if env.display.is_some() {
        let why = match (wayland, env.is_wayland()) {
            (Some(_), _) if steps.is_empty() => {
                "DISPLAY is set (Xwayland; the compositor has no data-control)"
            }
            (Some(_), _) => "DISPLAY is set (Xwayland)",
            (None, true) => "DISPLAY is set (the Wayland compositor did not answer)",
            (None, false) => "DISPLAY is set",
        };
        steps.push(step(BackendKind::X11, why.into()));
    }
    let why = if !steps.is_empty() {
        "file transfers only (every backend above failed to start)"
    } else if env.wayland_display.is_some() {
        "WAYLAND_DISPLAY without DISPLAY and no usable Wayland protocol (data-control, Mutter DisplayConfig): \
         file transfers only"
    } else {
        "neither DISPLAY nor WAYLAND_DISPLAY is set: file transfers only"
    };
    steps.push(step(BackendKind::Null, why.into()));
    Plan(steps)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(desktop: &str, display: bool) -> SessionEnv {
        SessionEnv {
            session_type: Some("wayland".into()),
            wayland_display: Some("wayland-1".into()),
            display: display.then(|| ":0".into()),
            desktops: vec![desktop.into()],
        }
    }

    fn g(list: &[(&str, u32)]) -> Globals {
        Globals(list.iter().map(|(i, v)| ((*i).to_owned(), *v)).collect())
    }

    /// What mutter advertises: no data-control, no output management.
    fn mutter_globals() -> Globals {
        g(&[("wl_seat", 8), ("wl_data_device_manager", 3)])
    }

    #[test]
    fn x11_only() {
        let e = SessionEnv {
            session_type: Some("x11".into()),
            display: Some(":0".into()),
            desktops: vec!["XFCE".into()],
            ..SessionEnv::default()
        };
        let p = plan(&e, None);
        assert_eq!(p.backends(), [BackendKind::X11, BackendKind::Null]);
        assert_eq!(p.0[0].why, "DISPLAY is set");
    }

    #[test]
    fn nothing() {
        let p = plan(&SessionEnv::default(), None);
        assert_eq!(p.backends(), [BackendKind::Null]);
        assert!(p.0[0].why.contains("neither DISPLAY nor WAYLAND_DISPLAY"));
        // A Wayland socket, but the compositor did not answer and there is no DISPLAY.
        assert_eq!(
            plan(&env("sway", false), None).backends(),
            [BackendKind::Null]
        );
        // A compositor without anything usable and no Xwayland.
        let p = plan(&env("weston", false), Some(&g(&[("wl_seat", 8)])));
        assert_eq!(p.backends(), [BackendKind::Null]);
        assert!(p.0[0].why.contains("WAYLAND_DISPLAY without DISPLAY"));
    }

    #[test]
    fn wayland_gnome() {
        let p = plan(&env("GNOME", true), Some(&mutter_globals()));
        assert_eq!(
            p.backends(),
            [
                BackendKind::Gnome {
                    clipboard: ClipboardVia::X11
                },
                BackendKind::X11,
                BackendKind::Null
            ]
        );
        // Without Xwayland: Mutter alone, the clipboard off.
        let p = plan(&env("GNOME", false), Some(&mutter_globals()));
        assert_eq!(
            p.backends(),
            [
                BackendKind::Gnome {
                    clipboard: ClipboardVia::None
                },
                BackendKind::Null
            ]
        );
    }

    #[test]
    fn wayland_kde() {
        let gl = g(&[
            ("wl_seat", 8),
            (globals::WLR_DATA_CONTROL, 2),
            (globals::EXT_DATA_CONTROL, 1),
            (globals::KDE_OUTPUT_MANAGEMENT, 4),
        ]);
        let p = plan(&env("KDE", true), Some(&gl));
        assert_eq!(
            p.backends(),
            [
                BackendKind::Wayland {
                    clipboard: ClipboardVia::ExtDataControl,
                    resize: ResizeVia::KscreenDoctor
                },
                BackendKind::X11,
                BackendKind::Null
            ]
        );
        assert!(p.0[0].why.contains("ext-data-control-v1"), "{p:?}");
        // XDG_CURRENT_DESKTOP alone is enough for kscreen-doctor.
        let gl = g(&[("wl_seat", 8), (globals::EXT_DATA_CONTROL, 1)]);
        assert!(matches!(
            plan(&env("KDE", false), Some(&gl)).backends()[..],
            [
                BackendKind::Wayland {
                    resize: ResizeVia::KscreenDoctor,
                    ..
                },
                BackendKind::Null
            ]
        ));
    }

    #[test]
    fn wlroots() {
        let gl = g(&[
            ("wl_seat", 7),
            (globals::WLR_DATA_CONTROL, 2),
            (globals::WLR_OUTPUT_MANAGER, 2),
        ]);
        let p = plan(&env("sway", true), Some(&gl));
        assert_eq!(
            p.backends(),
            [
                BackendKind::Wayland {
                    clipboard: ClipboardVia::WlrDataControl(2),
                    resize: ResizeVia::WlrOutputManagement
                },
                BackendKind::X11,
                BackendKind::Null
            ]
        );
        assert!(p.0[0].why.contains("zwlr-data-control-v1"), "{p:?}");
        assert!(ClipboardVia::WlrDataControl(2).has_primary());
        assert!(!ClipboardVia::WlrDataControl(1).has_primary());
    }

    #[test]
    fn no_seat_no_data_control() {
        // Data-control needs a seat; without one the X11 backend on Xwayland serves.
        let gl = g(&[(globals::WLR_DATA_CONTROL, 2)]);
        assert_eq!(
            plan(&env("sway", true), Some(&gl)).backends(),
            [BackendKind::X11, BackendKind::Null]
        );
    }

    #[test]
    fn x11_session_type_wins() {
        let mut e = env("GNOME", true);
        e.session_type = Some("x11".into());
        let gl = g(&[("wl_seat", 8), (globals::EXT_DATA_CONTROL, 1)]);
        assert_eq!(
            plan(&e, Some(&gl)).backends(),
            [BackendKind::X11, BackendKind::Null]
        );
    }
}
