//! guestlink-session's native Wayland backend against a real headless sway 1.7 (zwlr-data-control v2,
//! zwlr-output-management v2), checked with wl-copy/wl-paste and swaymsg, driven by a fake guestlinkd.
//!
//! Run: `cargo test -p tests --test session_wayland_sway -- --nocapture` (needs sway, wl-clipboard;
//! as root also setpriv: sway refuses to run as root, so the harness runs it as uid 65534).
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test target: unwrap is how a set-up step fails

use guestlink_tests::wayland as support;

use std::time::Instant;

use guestlink_protocol::session::{SessionMessage, SessionMonitor};
use guestlink_protocol::vdagent::{ClipboardType, Selection};
use support::{guest_to_host, host_to_guest, noise, tools_present, Harness, Sway};

const TOOLS: &[&str] = &["sway", "swaymsg", "wl-copy", "wl-paste", "setpriv"];

fn start() -> Option<(Sway, Harness)> {
    start_with(&[])
}

/// [`start`] with extra environment variables for the agent.
fn start_with(extra: &[(&str, &std::path::Path)]) -> Option<(Sway, Harness)> {
    if !tools_present(TOOLS) {
        return None;
    }
    let sway = Sway::start();
    let rt = sway.runtime();
    let mut env = vec![
        ("XDG_RUNTIME_DIR", rt.as_path()),
        ("WAYLAND_DISPLAY", std::path::Path::new(&sway.display)),
        ("XDG_SESSION_TYPE", std::path::Path::new("wayland")),
        ("XDG_CURRENT_DESKTOP", std::path::Path::new("sway")),
    ];
    env.extend_from_slice(extra);
    let h = Harness::start(&env);
    h.expect("geometry", |m| matches!(m, SessionMessage::Geometry { .. }));
    Some((sway, h))
}

#[test]
fn detection_and_host_text_to_guest_clipboard_and_primary() {
    let Some((s, mut h)) = start() else { return };
    let log = h.log();
    assert!(
        log.contains("backend wayland") && log.contains("zwlr-data-control-v1"),
        "detection not logged:\n{log}"
    );
    let text = "héllo from the host ✓\nline 2";
    host_to_guest(
        &mut h,
        &s,
        Selection::Clipboard,
        ClipboardType::Utf8Text,
        "text/plain;charset=utf-8",
        text.as_bytes(),
    );
    host_to_guest(
        &mut h,
        &s,
        Selection::Primary,
        ClipboardType::Utf8Text,
        "text/plain",
        b"primary text",
    );
    // Cached for the grab: another paste as another text type needs no new request.
    assert_eq!(
        s.paste(false, "UTF8_STRING").as_deref(),
        Some(text.as_bytes())
    );
    // The host's release empties the guest clipboard.
    h.send(&SessionMessage::ClipboardRelease {
        selection: Selection::Clipboard,
    });
    let deadline = Instant::now() + support::WAIT;
    while s.types(false).iter().any(|t| t.starts_with("text/")) {
        assert!(
            Instant::now() < deadline,
            "clipboard still offered after release"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

#[test]
fn guest_text_and_png_reach_host_and_release() {
    let Some((s, mut h)) = start() else { return };
    let (mut c1, _) = guest_to_host(
        &mut h,
        &s,
        Selection::Clipboard,
        ClipboardType::Utf8Text,
        "text/plain;charset=utf-8",
        "guest text ✓".as_bytes(),
    );
    let png = noise(300_000, 7);
    let (mut c2, _) = guest_to_host(
        &mut h,
        &s,
        Selection::Clipboard,
        ClipboardType::ImagePng,
        "image/png",
        &png,
    );
    let _ = c1.kill();
    let _ = c1.wait();
    let (mut c3, _) = guest_to_host(
        &mut h,
        &s,
        Selection::Primary,
        ClipboardType::Utf8Text,
        "text/plain",
        b"guest primary",
    );
    // wl-copy --clear empties CLIPBOARD: the agent tells the host.
    let mut clear = s.command("wl-copy");
    clear.arg("--clear");
    assert!(support::run(clear, None).is_some(), "wl-copy --clear");
    h.expect("clipboard release", |m| {
        matches!(m, SessionMessage::ClipboardRelease { selection } if *selection == Selection::Clipboard)
    });
    for c in [&mut c2, &mut c3] {
        let _ = c.kill();
        let _ = c.wait();
    }
}

#[test]
fn sixteen_mib_each_way() {
    let Some((s, mut h)) = start() else { return };
    let big = noise(16 << 20, 11);
    let down = host_to_guest(
        &mut h,
        &s,
        Selection::Clipboard,
        ClipboardType::ImagePng,
        "image/png",
        &big,
    );
    let big2 = noise(16 << 20, 13);
    let (mut c, up) = guest_to_host(
        &mut h,
        &s,
        Selection::Clipboard,
        ClipboardType::ImagePng,
        "image/png",
        &big2,
    );
    let _ = c.kill();
    let _ = c.wait();
    eprintln!(
        "BENCH wayland clipboard 16 MiB: host->guest (agent + wl-paste) {:.0} ms, guest->host (wl-copy + agent) {:.0} ms",
        down.as_secs_f64() * 1e3,
        up.as_secs_f64() * 1e3
    );
}

#[test]
fn max_clipboard_cap_refuses_larger_guest_data() {
    let Some((s, mut h)) = start() else { return };
    h.send(&SessionMessage::MaxClipboard { max: 1000 });
    let mut c = s.copy(false, "text/plain", &[b'x'; 5000]);
    h.expect("clipboard grab", |m| {
        matches!(m, SessionMessage::ClipboardGrab { selection, .. } if *selection == Selection::Clipboard)
    });
    h.send(&SessionMessage::ClipboardRequest {
        selection: Selection::Clipboard,
        data_type: ClipboardType::Utf8Text,
    });
    h.expect("empty clipboard data", |m| {
        matches!(m, SessionMessage::ClipboardData { data_type, data, .. } if *data_type == ClipboardType::None && data.is_empty())
    });
    let _ = c.kill();
    let _ = c.wait();
}

#[test]
fn monitors_config_sets_a_custom_mode() {
    let Some((s, mut h)) = start() else { return };
    for (w, hh) in [(1024u32, 768u32), (1600, 900)] {
        h.send(&SessionMessage::MonitorsConfig {
            flags: 0,
            monitors: vec![SessionMonitor::sized(w, hh, 0, 0)],
        });
        h.expect(&format!("geometry {w}x{hh}"), |m| {
            matches!(m, SessionMessage::Geometry { monitors } if monitors.len() == 1 && monitors[0].width == w && monitors[0].height == hh)
        });
        let outputs = s.outputs();
        assert!(
            outputs.contains(&format!("\"width\": {w}"))
                && outputs.contains(&format!("\"height\": {hh}")),
            "swaymsg does not show {w}x{hh}:\n{outputs}"
        );
    }
}

/// Two outputs (`swaymsg create_output` adds HEADLESS-2): display ids follow output names, positions are applied,
/// and the new output is reported without a request (wl_output hotplug).
#[test]
fn two_monitors_with_positions() {
    let Some((s, mut h)) = start() else { return };
    let mut c = s.command("swaymsg");
    c.arg("create_output");
    assert!(support::run(c, None).is_some(), "swaymsg create_output");
    h.expect(
        "geometry with two outputs",
        |m| matches!(m, SessionMessage::Geometry { monitors } if monitors.len() == 2),
    );
    let mon = |width, height, x| SessionMonitor::sized(width, height, x, 0);
    h.send(&SessionMessage::MonitorsConfig {
        flags: 0,
        monitors: vec![mon(1024, 768, 0), mon(800, 600, 1024)],
    });
    h.expect("geometry 1024x768 + 800x600", |m| {
        matches!(m, SessionMessage::Geometry { monitors } if monitors.len() == 2
            && (monitors[0].width, monitors[0].height, monitors[0].x) == (1024, 768, 0)
            && (monitors[1].width, monitors[1].height, monitors[1].x) == (800, 600, 1024))
    });
    let outputs = s.outputs();
    assert!(
        outputs.contains("\"width\": 800") && outputs.contains("\"x\": 1024"),
        "{outputs}"
    );
    // Disabling display 1: sway 1.7 cannot disable a headless output (its own `swaymsg output HEADLESS-2 disable`
    // fails the same way: "Failed to commit output HEADLESS-2"), so the agent reports the failure and the unchanged
    // layout.
    h.send(&SessionMessage::MonitorsConfig {
        flags: 0,
        monitors: vec![mon(1024, 768, 0), mon(0, 0, 0)],
    });
    let deadline = Instant::now() + support::WAIT;
    while !h.log().contains("wlr output configuration failed") {
        assert!(Instant::now() < deadline, "no failure logged:\n{}", h.log());
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    h.expect("unchanged geometry", |m| {
        matches!(m, SessionMessage::Geometry { monitors } if monitors.len() == 2 && monitors[1].x == 1024)
    });
}

/// GRAPHICS_DEVICE_INFO puts display 0 on the card's 2nd connector, `HEADLESS-2` (a fake sysfs names it:
/// headless sway has no DRM device, so the connector-name match is what this proves), so the first monitor
/// of a config lands there and display 1 takes HEADLESS-1.
#[test]
fn device_info_maps_display_0_to_the_second_output() {
    let dir = tempfile::tempdir().expect("tempdir");
    let sysfs = support::common::fake_drm_sysfs(dir.path(), &["HEADLESS-1", "HEADLESS-2"]);
    let Some((s, mut h)) = start_with(&[("GUESTLINK_SESSION_SYSFS", &sysfs)]) else {
        return;
    };
    let mut c = s.command("swaymsg");
    c.arg("create_output");
    assert!(support::run(c, None).is_some(), "swaymsg create_output");
    h.expect(
        "geometry with two outputs",
        |m| matches!(m, SessionMessage::Geometry { monitors } if monitors.len() == 2),
    );
    h.send(&SessionMessage::GraphicsDeviceInfo {
        displays: vec![guestlink_protocol::session::SessionDeviceDisplay {
            channel_id: 0,
            monitor_id: 0,
            device_display_id: 1,
            device_address: "pci/0000/02.0".into(),
        }],
    });
    let mon = |width, height, x| SessionMonitor::sized(width, height, x, 0);
    h.send(&SessionMessage::MonitorsConfig {
        flags: 1,
        monitors: vec![mon(1024, 768, 0), mon(800, 600, 1024)],
    });
    h.expect("geometry with display 0 at 1024x768", |m| {
        matches!(m, SessionMessage::Geometry { monitors } if monitors.len() == 2
            && (monitors[0].display_id, monitors[0].width, monitors[0].height, monitors[0].x) == (0, 1024, 768, 0)
            && (monitors[1].display_id, monitors[1].width, monitors[1].x) == (1, 800, 1024))
    });
    let outputs: serde_json::Value =
        serde_json::from_str(&s.outputs()).expect("swaymsg get_outputs JSON");
    let rect = |name: &str| {
        let o = outputs
            .as_array()
            .and_then(|a| a.iter().find(|o| o["name"] == name))
            .unwrap_or_else(|| panic!("{name} missing: {outputs}"));
        (o["current_mode"]["width"].as_i64(), o["rect"]["x"].as_i64())
    };
    assert_eq!(rect("HEADLESS-2"), (Some(1024), Some(0)), "{outputs}");
    assert_eq!(rect("HEADLESS-1"), (Some(800), Some(1024)), "{outputs}");
    assert!(
        h.log().contains("display mapped to a DRM connector"),
        "{}",
        h.log()
    );
}

/// The compositor going away is fatal: the agent exits (its unit restarts it) instead of spinning or hanging.
#[test]
fn agent_exits_when_the_compositor_dies() {
    let Some((mut s, mut h)) = start() else {
        return;
    };
    s.stop();
    let deadline = Instant::now() + support::WAIT;
    while h.alive() {
        assert!(
            Instant::now() < deadline,
            "guestlink-session still runs:\n{}",
            h.log()
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert!(h.log().contains("Wayland backend stopped"), "{}", h.log());
}
