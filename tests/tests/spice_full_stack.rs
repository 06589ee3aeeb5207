//! The whole guestlink SPICE stack on Xvfb: `guestlink` (host) ↔ relay (QEMU-chardev-like) ↔ `guestlinkd -m none
//! --spice-path` ↔ `guestlink-session` (X11 backend). Clipboard both ways via xclip, resize seen by xrandr,
//! send-file with sha256 equality; once over a QEMU-chardev-like socket relay, once over a socat pty pair (guestlinkd
//! opens a pty, `guestlink` the other end as a character device).
//!
//! Needs xvfb, xclip, x11-xserver-utils (.ci/apt.d/spice.txt); missing peers skip loudly unless
//! GUESTLINK_REQUIRE_PEERS is set. Run: `cargo test -p guestlink-tests --test spice_full_stack`.

mod spice_common;

use std::os::unix::net::UnixListener;
use std::process::{Command, Stdio};

use guestlink_tests::agent::guestlinkd_path;
use sha2::{Digest, Sha256};
use spice_common::{
    guestlink_bin, ok, payload, peers, session_bin, start_relay, wait_for, xvfb, Procs, SpiceEnv,
};

/// How the "virtio port" is emulated.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Link {
    /// guestlinkd connects to a unix socket; a relay hands it to `guestlink` like QEMU's chardev server.
    Relay,
    /// A socat pty pair: guestlinkd opens one pty, `guestlink` the other (as a character device).
    SocatPty,
}

fn start(link: Link) -> Option<SpiceEnv> {
    peers(&["Xvfb", "xclip", "xrandr", "socat"])?;
    let (guestlinkd, session, _) = (guestlinkd_path(), session_bin(), guestlink_bin());
    let dir = tempfile::tempdir().unwrap();
    let mut procs = Procs::default();
    let display = xvfb(&mut procs);
    let (vport, host_end, port_open) = match link {
        Link::Relay => {
            let vport = dir.path().join("vport.sock");
            let guest_l = UnixListener::bind(&vport).unwrap();
            let host_l = UnixListener::bind(dir.path().join("chardev.sock")).unwrap();
            let open = start_relay(guest_l, host_l);
            (vport, dir.path().join("chardev.sock"), Some(open))
        }
        Link::SocatPty => {
            let (vport, host) = (dir.path().join("vport"), dir.path().join("hostside"));
            procs.0.push(
                Command::new("socat")
                    .arg(format!("pty,raw,echo=0,link={}", vport.display()))
                    .arg(format!("pty,raw,echo=0,link={}", host.display()))
                    .spawn()
                    .expect("socat"),
            );
            wait_for("socat's ptys", || vport.exists() && host.exists());
            (vport, host, None)
        }
    };
    std::fs::create_dir(dir.path().join("state")).unwrap();
    std::fs::create_dir(dir.path().join("downloads")).unwrap();
    std::fs::create_dir(dir.path().join("run")).unwrap();
    let sock = dir.path().join("session.sock");
    let log = |name: &str| std::fs::File::create(dir.path().join(name)).unwrap();
    procs.0.push(
        Command::new(guestlinkd)
            .args(["-m", "none", "--foreground", "--no-logind"])
            .arg("-t")
            .arg(dir.path().join("state"))
            .arg("--spice-path")
            .arg(&vport)
            .arg("--session-socket")
            .arg(&sock)
            .arg("--uinput-fake")
            .arg(dir.path().join("uinput"))
            .stdin(Stdio::null())
            .stderr(log("guestlinkd.log"))
            .spawn()
            .expect("guestlinkd"),
    );
    wait_for("the session socket", || sock.exists());
    procs.0.push(
        Command::new(session)
            .arg("--socket")
            .arg(&sock)
            .arg("--download-dir")
            .arg(dir.path().join("downloads"))
            .env("DISPLAY", &display)
            .env("XDG_RUNTIME_DIR", dir.path().join("run"))
            .env("WAYLAND_DISPLAY", "")
            .arg("-v")
            .stdin(Stdio::null())
            .stderr(log("session.log"))
            .spawn()
            .expect("guestlink-session"),
    );
    let env = SpiceEnv {
        dir,
        display,
        spice_socket: host_end,
        procs,
    };
    match port_open {
        Some(open) => wait_for("guestlinkd to open its port", || *open.lock().unwrap()),
        // A pty shows no open/close: poll until the agent answers.
        None => wait_for("guestlinkd to answer on the pty", || {
            env.guestlink(&["--connect-timeout", "2", "spice-state"])
                .status
                .success()
        }),
    }
    Some(env)
}

#[test]
fn full_stack_over_a_chardev_like_socket() {
    full_stack(Link::Relay);
}

#[test]
fn full_stack_over_a_socat_pty_pair() {
    full_stack(Link::SocatPty);
}

fn full_stack(link: Link) {
    let Some(env) = start(link) else { return };
    let logs = || {
        for f in ["guestlinkd.log", "session.log"] {
            let t = std::fs::read_to_string(env.dir.path().join(f)).unwrap_or_default();
            eprintln!("--- {f}\n{t}");
        }
    };

    let v: serde_json::Value =
        serde_json::from_str(&ok(&env.guestlink(&["--json", "spice-state"]))).unwrap();
    assert_eq!(v["caps"][0], 0x0003_d5e7, "guestlinkd's announced caps");

    // Host → guest.
    env.clipboard_host_to_guest("hello from the host ✓");

    // Guest → host.
    env.clipboard_guest_to_host("guest says hi\nline two", logs);
    // A large one: xclip serves it with INCR, the session agent collects it straight into a memfd and passes
    // it sealed to guestlinkd, which copies it to the port.
    let big: String = (0..6 * 1024 * 1024)
        .map(|i| char::from(b'a' + (i % 23) as u8))
        .collect();
    env.clipboard_guest_to_host(&big, logs);
    let session_log = std::fs::read_to_string(env.dir.path().join("session.log")).unwrap();
    assert!(
        session_log.contains("guest clipboard data read into a memfd"),
        "the 6 MiB answer did not take the memfd path"
    );

    // Resize through the session agent's RandR backend.
    env.resize_to_1024x768();

    // send-file.
    let src = env.dir.path().join("payload.bin");
    let data = payload(3 * 1024 * 1024 + 123);
    std::fs::write(&src, &data).unwrap();
    ok(&env.guestlink(&["send-file", src.to_str().unwrap()]));
    let landed =
        std::fs::read(env.dir.path().join("downloads/payload.bin")).expect("file not saved");
    assert_eq!(Sha256::digest(&landed), Sha256::digest(&data));
}
