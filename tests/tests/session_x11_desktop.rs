//! guestlink-session against a real Xvfb, driven by a fake guestlinkd: RandR resize from monitors configs,
//! received files (conflicts, traversal, cancel, incomplete transfers, free space), the single-instance guard and
//! reconnection. Run: `cargo test -p tests --test session_x11_desktop`.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test target: unwrap is how a set-up step fails

use guestlink_tests::x11 as support;

use std::path::Path;
use std::time::Duration;

use guestlink_protocol::session::{
    GeometryMonitor, SessionDeviceDisplay, SessionMessage, SessionMonitor,
};
use support::common::fake_drm_sysfs;
use support::{tools_present, Harness, Xvfb};

fn mon(width: u32, height: u32, x: i32, y: i32) -> SessionMonitor {
    SessionMonitor::sized(width, height, x, y)
}

fn geometry(h: &Harness, w: u32, hh: u32) -> Vec<GeometryMonitor> {
    let m = h.expect(&format!("geometry {w}x{hh}"), |m| {
        matches!(m, SessionMessage::Geometry { monitors } if monitors.first().is_some_and(|g| g.width == w && g.height == hh))
    });
    let SessionMessage::Geometry { monitors } = m else {
        unreachable!()
    };
    monitors
}

#[test]
fn monitors_config_resizes_xvfb() {
    if !tools_present() {
        return;
    }
    // Xvfb's screen maximum is its start size; its single output "screen" accepts new modes from a client
    // that keeps its connection (as the agent does).
    let x = Xvfb::start(1280, 800);
    let mut h = Harness::start(&x);
    h.send(&SessionMessage::MonitorsConfig {
        flags: 1,
        monitors: vec![mon(1024, 768, 0, 0)],
    });
    let g = geometry(&h, 1024, 768);
    assert_eq!((g.len(), g[0].x, g[0].y), (1, 0, 0));
    let xr = x.xrandr();
    assert!(xr.contains("current 1024 x 768"), "xrandr:\n{xr}");
    assert!(
        xr.contains("1024x768-0"),
        "agent mode missing in xrandr:\n{xr}"
    );
    // Width rounded down to a multiple of 8.
    h.send(&SessionMessage::MonitorsConfig {
        flags: 1,
        monitors: vec![mon(803, 600, 0, 0)],
    });
    geometry(&h, 800, 600);
    assert!(x.xrandr().contains("current 800 x 600"));
    // Larger than the screen maximum: clamped to 1280x800.
    h.send(&SessionMessage::MonitorsConfig {
        flags: 1,
        monitors: vec![mon(1920, 1080, 0, 0)],
    });
    geometry(&h, 1280, 800);
    assert!(x.xrandr().contains("current 1280 x 800"));
    // Two monitors, one output: the second is dropped.
    h.send(&SessionMessage::MonitorsConfig {
        flags: 1,
        monitors: vec![mon(640, 480, 0, 0), mon(640, 480, 640, 0)],
    });
    let g = geometry(&h, 640, 480);
    assert_eq!(g.len(), 1);
    assert!(x.xrandr().contains("current 640 x 480"));
    // A change made by someone else is reported too.
    let st = x
        .command("xrandr")
        .args(["--output", "screen", "--mode", "1280x800"])
        .status()
        .unwrap();
    assert!(st.success());
    geometry(&h, 1280, 800);
    // Hostile configs: hundreds of monitors, absurd sizes and positions. Clamped, nothing crashes.
    let many: Vec<SessionMonitor> = (0..300)
        .map(|i| mon(u32::MAX - i, u32::MAX, i32::MIN + i as i32, i32::MAX))
        .collect();
    h.send(&SessionMessage::MonitorsConfig {
        flags: 1,
        monitors: many,
    });
    h.send(&SessionMessage::MonitorsConfig {
        flags: 0,
        monitors: vec![mon(0, 0, 0, 0)],
    });
    h.send(&SessionMessage::MonitorsConfig {
        flags: 3,
        monitors: vec![mon(1, 1, -5, -5)],
    });
    // 1x1 → width rounded up to the 8-pixel minimum.
    geometry(&h, 8, 1);
    assert!(h.alive());
}

/// GRAPHICS_DEVICE_INFO names the DRM connector of display 0: the 2nd one of the card (`DUMMY1`, by a fake
/// sysfs, see `fake_drm_sysfs`), so a monitors config for display 0 lands on RandR output DUMMY1, not on the
/// first output; display 1, unmapped, takes the first output left free. Geometry reports the mapped ids.
#[test]
fn device_info_maps_display_0_to_the_second_output_on_xorg_dummy() {
    if !tools_present() {
        return;
    }
    let Some(x) = Xvfb::start_xorg_dummy() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let sysfs = fake_drm_sysfs(dir.path(), &["DUMMY0", "DUMMY1", "DUMMY2"]);
    let mut h = Harness::start_in(&x, dir, &[("GUESTLINK_SESSION_SYSFS", &sysfs)]);
    h.send(&SessionMessage::GraphicsDeviceInfo {
        displays: vec![SessionDeviceDisplay {
            channel_id: 0,
            monitor_id: 0,
            device_display_id: 1,
            device_address: "pci/0000/02.0".into(),
        }],
    });
    h.send(&SessionMessage::MonitorsConfig {
        flags: 1,
        monitors: vec![mon(1024, 768, 0, 0)],
    });
    let g = geometry(&h, 1024, 768);
    assert_eq!(
        g.iter()
            .map(|g| (g.display_id, g.x, g.y, g.width, g.height))
            .collect::<Vec<_>>(),
        [(0, 0, 0, 1024, 768)]
    );
    let xr = x.xrandr();
    assert!(output_at(&xr, "DUMMY1", "1024x768+0+0"), "{xr}");
    assert!(!output_at(&xr, "DUMMY0", "1024x768+"), "{xr}");
    assert!(
        h.log().contains("display mapped to a DRM connector"),
        "{}",
        h.log()
    );
    // Two monitors: display 0 stays on DUMMY1, display 1 gets DUMMY0 (its own index is taken).
    h.send(&SessionMessage::MonitorsConfig {
        flags: 1,
        monitors: vec![mon(1024, 768, 0, 0), mon(800, 600, 1024, 0)],
    });
    h.expect("geometry of both displays", |m| {
        let SessionMessage::Geometry { monitors } = m else {
            return false;
        };
        let mut r: Vec<_> = monitors
            .iter()
            .map(|g| (g.display_id, g.x, g.width))
            .collect();
        r.sort_unstable();
        r == [(0, 0, 1024), (1, 1024, 800)]
    });
    let xr = x.xrandr();
    assert!(output_at(&xr, "DUMMY1", "1024x768+0+0"), "{xr}");
    assert!(output_at(&xr, "DUMMY0", "800x600+1024+0"), "{xr}");
}

/// Whether `xrandr` shows `output` connected with a geometry starting with `rect` ("primary" may come between).
fn output_at(xrandr: &str, output: &str, rect: &str) -> bool {
    xrandr.lines().any(|l| {
        l.starts_with(&format!("{output} connected "))
            && l.split_whitespace().any(|w| w.starts_with(rect))
    })
}

#[test]
fn multi_monitor_positions_on_xorg_dummy() {
    if !tools_present() {
        return;
    }
    let Some(x) = Xvfb::start_xorg_dummy() else {
        return;
    };
    let mut h = Harness::start(&x);
    let rect = |g: &GeometryMonitor| (g.display_id, g.x, g.y, g.width, g.height);
    // Side by side, with positions (shifted so that the top-left is 0,0).
    h.send(&SessionMessage::MonitorsConfig {
        flags: 1,
        monitors: vec![mon(1024, 768, 100, 100), mon(800, 600, 1124, 100)],
    });
    let g = geometry(&h, 1024, 768);
    assert_eq!(
        g.iter().map(rect).collect::<Vec<_>>(),
        [(0, 0, 0, 1024, 768), (1, 1024, 0, 800, 600)]
    );
    let xr = x.xrandr();
    assert!(xr.contains("current 1824 x 768"), "{xr}");
    assert!(xr.contains("DUMMY1 connected 800x600+1024+0"), "{xr}");
    // Stacked vertically; without USE_POS the same two would be side by side.
    h.send(&SessionMessage::MonitorsConfig {
        flags: 1,
        monitors: vec![mon(640, 480, 0, 0), mon(640, 480, 0, 480)],
    });
    let g = geometry(&h, 640, 480);
    assert_eq!(
        g.iter().map(rect).collect::<Vec<_>>(),
        [(0, 0, 0, 640, 480), (1, 0, 480, 640, 480)]
    );
    assert!(x.xrandr().contains("current 640 x 960"));
    h.send(&SessionMessage::MonitorsConfig {
        flags: 0,
        monitors: vec![mon(720, 400, 0, 0), mon(720, 400, 0, 480)],
    });
    let g = geometry(&h, 720, 400);
    assert_eq!(
        g.iter().map(rect).collect::<Vec<_>>(),
        [(0, 0, 0, 720, 400), (1, 720, 0, 720, 400)]
    );
    // Sparse config: display 1 disabled, display 2 enabled; then back to one monitor.
    h.send(&SessionMessage::MonitorsConfig {
        flags: 1,
        monitors: vec![
            mon(1280, 720, 0, 0),
            mon(0, 0, 0, 0),
            mon(1280, 720, 1280, 0),
        ],
    });
    let g = geometry(&h, 1280, 720);
    assert_eq!(
        g.iter().map(rect).collect::<Vec<_>>(),
        [(0, 0, 0, 1280, 720), (2, 1280, 0, 1280, 720)]
    );
    h.send(&SessionMessage::MonitorsConfig {
        flags: 1,
        monitors: vec![mon(1920, 1080, 0, 0)],
    });
    let g = geometry(&h, 1920, 1080);
    assert_eq!(g.len(), 1);
    let xr = x.xrandr();
    assert!(xr.contains("current 1920 x 1080"), "{xr}");
}

#[test]
fn display_loss_ends_the_agent() {
    if !tools_present() {
        return;
    }
    let mut x = Xvfb::start(640, 480);
    let mut h = Harness::start(&x);
    x.kill();
    let st = h.wait_exit();
    assert!(!st.success(), "exit status {st}");
    assert!(h.log().contains("X11 backend stopped"), "{}", h.log());
}

fn status(h: &Harness, id: u32) -> (u32, Option<u64>, Option<u32>) {
    let m = h.expect(
        &format!("status of transfer {id}"),
        |m| matches!(m, SessionMessage::FileXferStatus { id: i, .. } if *i == id),
    );
    let SessionMessage::FileXferStatus {
        status,
        disk_free_space,
        error_code,
        ..
    } = m
    else {
        unreachable!()
    };
    (status, disk_free_space, error_code)
}

fn send_file(h: &mut Harness, id: u32, name: &str, data: &[u8]) -> u32 {
    h.send(&SessionMessage::FileXferStart {
        id,
        name: name.into(),
        size: data.len() as u64,
    });
    let (s, _, _) = status(h, id);
    if s != 0 {
        return s;
    }
    for c in data.chunks(64 * 1024) {
        h.send(&SessionMessage::FileXferData {
            id,
            data: c.to_vec(),
        });
    }
    status(h, id).0
}

fn listing(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn received_files() {
    if !tools_present() {
        return;
    }
    let x = Xvfb::start(640, 480);
    let mut h = Harness::start(&x);
    let dl = h.downloads();
    let data: Vec<u8> = (0..3 * 1024 * 1024 + 17u32)
        .map(|i| (i * 31 % 253) as u8)
        .collect();
    assert_eq!(send_file(&mut h, 1, "report.pdf", &data), 3, "success");
    assert!(std::fs::read(dl.join("report.pdf")).unwrap() == data);
    // 64 MiB in 64 KiB DATA frames (spice-gtk's chunk size): timed.
    let big: Vec<u8> = (0..64 * 1024 * 1024u32).map(|i| (i >> 7) as u8).collect();
    let t = std::time::Instant::now();
    assert_eq!(send_file(&mut h, 100, "big.bin", &big), 3);
    let took = t.elapsed();
    eprintln!(
        "64 MiB file (START..SUCCESS): {took:.2?} = {:.0} MB/s",
        64.0 * 1.048576 / took.as_secs_f64()
    );
    assert!(std::fs::read(dl.join("big.bin")).unwrap() == big);
    std::fs::remove_file(dl.join("big.bin")).unwrap();
    assert_eq!(send_file(&mut h, 2, "report.pdf", b"second"), 3);
    assert_eq!(std::fs::read(dl.join("report (1).pdf")).unwrap(), b"second");
    // Traversal: refused with ERROR + INVALID_FILENAME, nothing written outside.
    h.send(&SessionMessage::FileXferStart {
        id: 3,
        name: "../escape.txt".into(),
        size: 4,
    });
    assert_eq!(status(&h, 3), (2, None, Some(10)));
    assert!(!h.dir.path().join("escape.txt").exists());
    // Incomplete: the final name never appears while data is missing.
    h.send(&SessionMessage::FileXferStart {
        id: 4,
        name: "big.iso".into(),
        size: 1 << 20,
    });
    assert_eq!(status(&h, 4).0, 0);
    h.send(&SessionMessage::FileXferData {
        id: 4,
        data: vec![7; 512 * 1024],
    });
    // A later transfer's status proves the DATA was processed (one connection, in order).
    assert_eq!(send_file(&mut h, 5, "small.txt", b"x"), 3);
    let l = listing(&dl);
    assert!(!l.contains(&"big.iso".to_string()), "{l:?}");
    assert!(
        l.contains(&".big.iso.4.guestlink-partial".to_string()),
        "{l:?}"
    );
    // Cancel: the partial file is removed.
    h.send(&SessionMessage::FileXferCancel { id: 4 });
    assert_eq!(send_file(&mut h, 6, "after-cancel.txt", b"y"), 3);
    assert_eq!(
        listing(&dl),
        [
            "after-cancel.txt",
            "report (1).pdf",
            "report.pdf",
            "small.txt"
        ]
    );
    // Not enough space: NOT_ENOUGH_SPACE with the free byte count.
    h.send(&SessionMessage::FileXferStart {
        id: 7,
        name: "huge.bin".into(),
        size: u64::MAX / 2,
    });
    let (s, free, _) = status(&h, 7);
    assert_eq!(s, 4);
    assert!(free.is_some_and(|f| f > 0 && f < u64::MAX / 2));
    // An agent that loses the daemon mid-transfer leaves no partial file behind.
    h.send(&SessionMessage::FileXferStart {
        id: 8,
        name: "lost.bin".into(),
        size: 100,
    });
    assert_eq!(status(&h, 8).0, 0);
    h.send(&SessionMessage::FileXferData {
        id: 8,
        data: vec![1; 10],
    });
    h.reconnect();
    assert_eq!(
        listing(&dl),
        [
            "after-cancel.txt",
            "report (1).pdf",
            "report.pdf",
            "small.txt"
        ]
    );
}

#[test]
fn single_instance_and_reconnect() {
    if !tools_present() {
        return;
    }
    let x = Xvfb::start(640, 480);
    // systemd readiness: READY=1 on $NOTIFY_SOCKET once the backend is up.
    let dir = tempfile::tempdir().unwrap();
    let notify_path = dir.path().join("notify");
    let notify = std::os::unix::net::UnixDatagram::bind(&notify_path).unwrap();
    notify.set_read_timeout(Some(support::WAIT)).unwrap();
    let mut h = Harness::start_in(&x, dir, &[("NOTIFY_SOCKET", &notify_path)]);
    let mut buf = [0u8; 64];
    let n = notify.recv(&mut buf).expect("no sd_notify datagram");
    // sd_notify(3): newline-separated assignments; the sd-notify crate ends the last one with a newline.
    assert_eq!(String::from_utf8_lossy(&buf[..n]).trim_end(), "READY=1");
    // A second agent for the same user and display exits at once (status 0) and says why.
    let out = std::process::Command::new(support::session_binary())
        .args(["--socket", "/nonexistent/sock"])
        .env("DISPLAY", &x.display)
        .env("XDG_RUNTIME_DIR", h.runtime())
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("another guestlink-session"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The daemon goes away and comes back: the agent reconnects (backoff starts at 0.2 s).
    let took = h.reconnect();
    assert!(took < Duration::from_secs(15), "reconnect took {took:?}");
    // A guest selection owned before the reconnect is announced again.
    let mut c = x.copy("clipboard", None, b"before");
    h.expect("grab", |m| {
        matches!(m, SessionMessage::ClipboardGrab { .. })
    });
    h.reconnect();
    h.expect("grab again", |m| {
        matches!(m, SessionMessage::ClipboardGrab { .. })
    });
    c.kill().unwrap();
    c.wait().unwrap();
    assert!(h.alive());
}
