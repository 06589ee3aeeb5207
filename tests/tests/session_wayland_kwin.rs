//! guestlink-session's native Wayland backend against a real KWin 5.27 (`kwin_wayland --virtual`,
//! zwlr-data-control v2), checked with wl-copy/wl-paste. KWin sends no initial selection event while the clipboard
//! is empty, so the agent must not wait for one. Resize is not tested: the virtual output has one mode and
//! kde_output_management_v2 v3 has no custom modes (docs/wayland.md).
//!
//! Run: `cargo test -p guestlink-tests --test session_wayland_kwin` (needs kwin-wayland, dbus, wl-clipboard).

#[path = "session_wayland_support.rs"]
mod support;

use std::path::Path;

use guestlink_protocol::session::SessionMessage;
use guestlink_protocol::vdagent::{ClipboardType, Selection};
use support::{guest_to_host, host_to_guest, noise, tools_present, Harness, Kwin};

const TOOLS: &[&str] = &["kwin_wayland", "dbus-daemon", "wl-copy", "wl-paste"];

#[test]
fn clipboard_both_ways_on_kwin() {
    if !tools_present(TOOLS) {
        return;
    }
    let k = Kwin::start();
    let rt = k.runtime();
    let mut h = Harness::start(&[
        ("XDG_RUNTIME_DIR", &rt),
        ("WAYLAND_DISPLAY", Path::new(&k.display)),
        ("XDG_CURRENT_DESKTOP", Path::new("KDE")),
    ]);
    h.expect("geometry", |m| {
        matches!(m, SessionMessage::Geometry { monitors } if monitors.len() == 1 && monitors[0].width == 1280 && monitors[0].height == 800)
    });
    let log = h.log();
    assert!(
        log.contains("zwlr-data-control-v1") && log.contains("KDE: not implemented"),
        "{log}"
    );
    host_to_guest(
        &mut h,
        &k,
        Selection::Clipboard,
        ClipboardType::Utf8Text,
        "text/plain;charset=utf-8",
        "from the host to KWin ✓".as_bytes(),
    );
    host_to_guest(
        &mut h,
        &k,
        Selection::Primary,
        ClipboardType::Utf8Text,
        "text/plain",
        b"primary on kwin",
    );
    let png = noise(4 << 20, 3);
    let (mut c, _) = guest_to_host(
        &mut h,
        &k,
        Selection::Clipboard,
        ClipboardType::ImagePng,
        "image/png",
        &png,
    );
    let _ = c.kill();
    let _ = c.wait();
}
