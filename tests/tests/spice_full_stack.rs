//! The whole guestlink SPICE stack on Xvfb: `guestlink` (host) ↔ relay (QEMU-chardev-like) ↔ `guestlinkd -m none
//! --spice-path` ↔ `guestlink-session` (X11 backend). Clipboard both ways via xclip (a short text, 16 MiB and a
//! PNG each way), resize seen by xrandr, a 64 MiB send-file with sha256 equality and a backslash name refused;
//! once over a QEMU-chardev-like socket relay, once over a socat pty pair (guestlinkd opens a pty, `guestlink`
//! the other end as a character device).
//!
//! Needs xvfb, xclip, x11-xserver-utils (.ci/apt.d/spice.txt); missing peers skip loudly unless
//! GUESTLINK_REQUIRE_PEERS is set. Run: `cargo test -p tests --test spice_full_stack`.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test target: unwrap is how a set-up step fails

use guestlink_tests::spice as spice_common;

use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixListener;
use std::process::{Command, Stdio};

use sha2::{Digest, Sha256};
use spice_common::{
    guestlink_bin, guestlinkd_spice, ok, payload, peers, session_bin, start_relay, wait_for, xvfb,
    Procs, SpiceEnv,
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
    let (session, _) = (session_bin(), guestlink_bin());
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
    std::fs::create_dir(dir.path().join("downloads")).unwrap();
    std::fs::create_dir(dir.path().join("run")).unwrap();
    let sock = dir.path().join("session.sock");
    let log = |name: &str| std::fs::File::create(dir.path().join(name)).unwrap();
    procs.0.push(
        guestlinkd_spice(dir.path(), &vport, &sock)
            .stderr(log("guestlinkd.log"))
            .spawn()
            .expect("guestlinkd"),
    );
    wait_for("the session socket", || sock.exists());
    // A real XDG_RUNTIME_DIR is private (0700); guestlink-session keeps its instance lock only in such a one.
    std::fs::create_dir_all(dir.path().join("run")).unwrap();
    std::fs::set_permissions(
        dir.path().join("run"),
        std::fs::Permissions::from_mode(0o700),
    )
    .unwrap();
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
    assert_eq!(v["caps"][0], 0x0003_dde7, "guestlinkd's announced caps");

    // Host → guest: a short text, 16 MiB of text (INCR towards the X client), a PNG image.
    env.clipboard_host_to_guest("hello from the host ✓");
    let big: String = (0..16 * 1024 * 1024)
        .map(|i| char::from(b'a' + (i % 23) as u8))
        .collect();
    host_file_to_guest(&env, big.as_bytes(), "text", "UTF8_STRING");
    host_file_to_guest(&env, TINY_PNG, "png", "image/png");

    // Guest → host: a short text, 16 MiB (xclip serves it with INCR, the session agent collects it straight into
    // a memfd and passes it sealed to guestlinkd, which copies it to the port), a PNG image.
    env.clipboard_guest_to_host("guest says hi\nline two", logs);
    env.clipboard_guest_to_host(&big, logs);
    let session_log = std::fs::read_to_string(env.dir.path().join("session.log")).unwrap();
    assert!(
        session_log.contains("guest clipboard data read into a memfd"),
        "the 16 MiB answer did not take the memfd path"
    );
    guest_png_to_host(&env);

    // Resize through the session agent's RandR backend.
    env.resize_to_1024x768();

    // send-file: 64 MiB arrive intact; a name that would leave the download dir on another system is refused.
    let src = env.dir.path().join("payload.bin");
    let data = payload(64 * 1024 * 1024 + 123);
    std::fs::write(&src, &data).unwrap();
    ok(&env.guestlink(&["-q", "send-file", src.to_str().unwrap()]));
    let landed =
        std::fs::read(env.dir.path().join("downloads/payload.bin")).expect("file not saved");
    assert_eq!(Sha256::digest(&landed), Sha256::digest(&data));
    let evil_dir = env.dir.path().join("evil");
    std::fs::create_dir(&evil_dir).unwrap();
    let evil = evil_dir.join("..\\escaped.txt");
    std::fs::write(&evil, b"x").unwrap();
    let o = env.guestlink(&["-q", "send-file", evil.to_str().unwrap()]);
    assert!(!o.status.success(), "a backslash name was accepted");
    // A FIFO has no size to announce: refused on the host, nothing started in the guest.
    let fifo = env.dir.path().join("fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let o = env.guestlink(&["-q", "send-file", fifo.to_str().unwrap()]);
    assert!(!o.status.success(), "a FIFO was sent");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("not a regular file"), "{err}");
    let names: Vec<_> = std::fs::read_dir(env.dir.path().join("downloads"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(
        names,
        ["payload.bin"],
        "only the good file is in the download dir"
    );
    assert!(!env.dir.path().join("escaped.txt").exists());
}

/// A 1×1 PNG.
const TINY_PNG: &[u8] = &[
    0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48, 0x44, 0x52,
    0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x08, 0x06, 0x00, 0x00, 0x00, 0x1f, 0x15, 0xc4,
    0x89, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x44, 0x41, 0x54, 0x78, 0x9c, 0x63, 0xf8, 0xcf, 0xc0, 0xf0,
    0x1f, 0x00, 0x05, 0x00, 0x01, 0xff, 0x89, 0x99, 0x3d, 0x1d, 0x00, 0x00, 0x00, 0x00, 0x49, 0x45,
    0x4e, 0x44, 0xae, 0x42, 0x60, 0x82,
];

/// Host → guest from a file: `guestlink clipboard set --file F --type KIND` serves one paste, and `xclip -o -t
/// TARGET` in the guest gets exactly the bytes.
fn host_file_to_guest(env: &SpiceEnv, bytes: &[u8], kind: &str, target: &str) {
    let src = env.dir.path().join(format!("offer.{kind}"));
    std::fs::write(&src, bytes).unwrap();
    let mut setter = Command::new(guestlink_bin())
        .arg("--spice-socket")
        .arg(&env.spice_socket)
        .args(["-q", "clipboard", "set", "--file"])
        .arg(&src)
        .args(["--type", kind, "--loops", "1", "--serve-timeout", "60"])
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let mut got = Vec::new();
    wait_for(
        &format!("xclip -o -t {target} to paste the host's {kind}"),
        || {
            let o = env
                .x("xclip")
                .args(["-o", "-selection", "clipboard", "-t", target])
                .output()
                .unwrap();
            got = o.stdout;
            o.status.success() && got.len() == bytes.len()
        },
    );
    assert!(
        got == bytes,
        "the guest pasted other bytes ({} of {})",
        got.len(),
        bytes.len()
    );
    let st = setter.wait().unwrap();
    assert!(st.success(), "clipboard set: {st}");
}

/// Guest → host PNG: `xclip -i -t image/png` owns the clipboard, `guestlink clipboard get --type png` reads it.
fn guest_png_to_host(env: &SpiceEnv) {
    let mut xclip = env
        .x("xclip")
        .args(["-i", "-quiet", "-selection", "clipboard", "-t", "image/png"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::io::Write::write_all(&mut xclip.stdin.take().unwrap(), TINY_PNG).unwrap();
    let out = env.dir.path().join("got.png");
    wait_for("guestlink clipboard get --type png", || {
        let o = env.guestlink(&[
            "-q",
            "clipboard",
            "get",
            "--type",
            "png",
            "-o",
            out.to_str().unwrap(),
        ]);
        o.status.success() && std::fs::read(&out).is_ok_and(|b| b == TINY_PNG)
    });
    let _ = xclip.kill();
    let _ = xclip.wait();
}
