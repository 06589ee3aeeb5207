//! Session detection: which display server this agent runs in, and which backend serves each feature.
//!
//! Inputs are the environment (`XDG_SESSION_TYPE`, `WAYLAND_DISPLAY`, `DISPLAY`, `XDG_CURRENT_DESKTOP`) and, on
//! Wayland, the globals the compositor advertises. [`plan`] is pure: it picks, by capability, with an ordered
//! fallback, the clipboard backend (ext-data-control-v1 → zwlr-data-control-v1 → X11 through Xwayland's DISPLAY)
//! and the resize backend (wlr-output-management → Mutter DisplayConfig → kscreen-doctor on KDE → X11 RandR). The choice is logged at start.

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
pub enum ClipboardBackend {
    /// `ext_data_control_manager_v1` (always has primary).
    ExtDataControl,
    /// `zwlr_data_control_manager_v1` with this version (primary from v2).
    WlrDataControl(u32),
    /// The X11 backend on `$DISPLAY` (Xwayland under a compositor without data-control).
    X11,
    /// Nothing.
    None,
}

impl ClipboardBackend {
    /// Whether PRIMARY can be served.
    pub fn has_primary(self) -> bool {
        match self {
            Self::ExtDataControl | Self::X11 => true,
            Self::WlrDataControl(v) => v >= 2,
            Self::None => false,
        }
    }
}

/// How monitors configs are applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResizeBackend {
    /// `zwlr_output_manager_v1` (sway, Hyprland, other wlroots compositors): custom modes.
    WlrOutputManagement,
    /// `org.gnome.Mutter.DisplayConfig` on the session bus (only modes mutter already lists).
    MutterDisplayConfig,
    /// KDE: `kscreen-doctor` (listed modes only on Plasma 5; see docs/wayland.md).
    KscreenDoctor,
    /// RandR on `$DISPLAY` (a real X server; on Xwayland it does not change the compositor's outputs).
    X11RandR,
    /// Nothing.
    None,
}

/// The backends chosen for a session, with the reason for the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// Clipboard.
    pub clipboard: ClipboardBackend,
    /// Resize.
    pub resize: ResizeBackend,
    /// Human-readable reason.
    pub why: String,
}

/// Chooses the backends for `env`; `globals` is what the Wayland compositor advertised (None: not Wayland or
/// the connection failed).
pub fn plan(env: &SessionEnv, globals: Option<&Globals>) -> Plan {
    let x11 = env.display.is_some();
    let Some(g) = globals.filter(|_| env.is_wayland()) else {
        return if x11 {
            Plan {
                clipboard: ClipboardBackend::X11,
                resize: ResizeBackend::X11RandR,
                why: "X11 session (DISPLAY set, no usable Wayland compositor)".into(),
            }
        } else {
            Plan {
                clipboard: ClipboardBackend::None,
                resize: ResizeBackend::None,
                why: "neither a Wayland compositor nor DISPLAY".into(),
            }
        };
    };
    let seat = g.version(globals::SEAT).is_some();
    let (clipboard, cwhy) = if seat && g.version(globals::EXT_DATA_CONTROL).is_some() {
        (ClipboardBackend::ExtDataControl, "ext-data-control-v1")
    } else if let Some(v) = g.version(globals::WLR_DATA_CONTROL).filter(|_| seat) {
        (ClipboardBackend::WlrDataControl(v), "zwlr-data-control-v1")
    } else if x11 {
        (
            ClipboardBackend::X11,
            "no data-control global: X11 clipboard through Xwayland",
        )
    } else {
        (
            ClipboardBackend::None,
            "no data-control global and no DISPLAY",
        )
    };
    let (resize, rwhy) = if g.version(globals::WLR_OUTPUT_MANAGER).is_some() {
        (ResizeBackend::WlrOutputManagement, "wlr-output-management")
    } else if env.desktop_is("GNOME") {
        (
            ResizeBackend::MutterDisplayConfig,
            "GNOME: Mutter DisplayConfig",
        )
    } else if g.version(globals::KDE_OUTPUT_MANAGEMENT).is_some() || env.desktop_is("KDE") {
        (ResizeBackend::KscreenDoctor, "KDE: kscreen-doctor")
    } else {
        (ResizeBackend::None, "no output-management interface")
    };
    Plan {
        clipboard,
        resize,
        why: format!("Wayland: clipboard via {cwhy}; resize via {rwhy}"),
    }
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

    #[test]
    fn ext_is_preferred_over_wlr() {
        let gl = g(&[
            ("wl_seat", 8),
            (globals::WLR_DATA_CONTROL, 2),
            (globals::EXT_DATA_CONTROL, 1),
        ]);
        let p = plan(&env("KDE", true), Some(&gl));
        assert_eq!(p.clipboard, ClipboardBackend::ExtDataControl);
        assert_eq!(p.resize, ResizeBackend::KscreenDoctor);
    }

    #[test]
    fn sway_uses_wlr_for_both() {
        let gl = g(&[
            ("wl_seat", 7),
            (globals::WLR_DATA_CONTROL, 2),
            (globals::WLR_OUTPUT_MANAGER, 2),
        ]);
        let p = plan(&env("sway", true), Some(&gl));
        assert_eq!(p.clipboard, ClipboardBackend::WlrDataControl(2));
        assert!(p.clipboard.has_primary());
        assert_eq!(p.resize, ResizeBackend::WlrOutputManagement);
        assert!(!ClipboardBackend::WlrDataControl(1).has_primary());
    }

    #[test]
    fn gnome_falls_back_to_xwayland_clipboard_and_mutter_resize() {
        let gl = g(&[("wl_seat", 8), ("wl_data_device_manager", 3)]);
        let p = plan(&env("GNOME", true), Some(&gl));
        assert_eq!(p.clipboard, ClipboardBackend::X11);
        assert_eq!(p.resize, ResizeBackend::MutterDisplayConfig);
        let p = plan(&env("GNOME", false), Some(&gl));
        assert_eq!(p.clipboard, ClipboardBackend::None);
    }

    #[test]
    fn no_seat_no_data_control() {
        let gl = g(&[(globals::WLR_DATA_CONTROL, 2)]);
        assert_eq!(
            plan(&env("sway", true), Some(&gl)).clipboard,
            ClipboardBackend::X11
        );
    }

    #[test]
    fn x11_session_type_wins() {
        let mut e = env("GNOME", true);
        e.session_type = Some("x11".into());
        let gl = g(&[("wl_seat", 8), (globals::EXT_DATA_CONTROL, 1)]);
        assert_eq!(plan(&e, Some(&gl)).clipboard, ClipboardBackend::X11);
        let e = SessionEnv::default();
        assert_eq!(plan(&e, None).clipboard, ClipboardBackend::None);
    }
}
