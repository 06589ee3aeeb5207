//! The whole guestlink SPICE stack on Xvfb: `guestlink` (host) ↔ relay (QEMU-chardev-like) ↔ `guestlinkd -m none
//! --spice-path` ↔ `guestlink-session` (X11 backend). Clipboard both ways via xclip, resize seen by xrandr,
//! send-file with sha256 equality; once over a QEMU-chardev-like socket relay, once over a socat pty pair (guestlinkd
//! opens a pty, `guestlink` the other end as a character device).
//!
//! Needs xvfb, xclip, x11-xserver-utils (.ci/apt.d/spice.txt); missing peers skip loudly unless
//! GUESTLINK_REQUIRE_PEERS is set. Run: `cargo test -p guestlink-tests --test spice_full_stack`.

mod spice_common;

use std::io::Write;
use std::os::unix::net::UnixListener;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

use guestlink_tests::agent::guestlinkd_path;
use sha2::{Digest, Sha256};
use spice_common::{
    guestlink_bin, payload, peers, session_bin, start_relay, wait_for, xvfb, Procs,
};

struct Env {
    dir: tempfile::TempDir,
    display: String,
    /// What `--spice-socket` gets: the relay's socket or the host end of a socat pty pair.
    host_end: PathBuf,
    _procs: Procs,
}

/// How the "virtio port" is emulated.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Link {
    /// guestlinkd connects to a unix socket; a relay hands it to `guestlink` like QEMU's chardev server.
    Relay,
    /// A socat pty pair: guestlinkd opens one pty, `guestlink` the other (as a character device).
    SocatPty,
}

impl Env {
    fn guestlink(&self, args: &[&str]) -> Output {
        Command::new(guestlink_bin())
            .arg("--spice-socket")
            .arg(&self.host_end)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("run guestlink")
    }

    fn x(&self, prog: &str) -> Command {
        let mut c = Command::new(prog);
        c.env("DISPLAY", &self.display);
        c
    }

    fn downloads(&self) -> PathBuf {
        self.dir.path().join("downloads")
    }
}

fn ok(o: &Output) -> String {
    assert!(
        o.status.success(),
        "guestlink failed: {}\nstdout: {}\nstderr: {}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn start(link: Link) -> Option<Env> {
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
            .stdin(Stdio::null())
            .stderr(log("session.log"))
            .spawn()
            .expect("guestlink-session"),
    );
    let env = Env {
        dir,
        display,
        host_end,
        _procs: procs,
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
    let text = "hello from the host ✓";
    let mut setter = Command::new(guestlink_bin())
        .arg("--spice-socket")
        .arg(&env.host_end)
        .args([
            "clipboard",
            "set",
            text,
            "--loops",
            "1",
            "--serve-timeout",
            "60",
        ])
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let mut pasted = String::new();
    wait_for("xclip -o to paste the host text", || {
        let o = env
            .x("xclip")
            .args(["-o", "-selection", "clipboard"])
            .output()
            .unwrap();
        pasted = String::from_utf8_lossy(&o.stdout).into_owned();
        o.status.success() && !pasted.is_empty()
    });
    assert_eq!(pasted, text);
    assert!(setter.wait().unwrap().success());

    // Guest → host.
    let guest_text = "guest says hi\nline two";
    let mut xclip = env
        .x("xclip")
        .args(["-i", "-quiet", "-selection", "clipboard"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    xclip
        .stdin
        .take()
        .unwrap()
        .write_all(guest_text.as_bytes())
        .unwrap();
    let mut got = String::new();
    let mut tries = 0;
    wait_for("clipboard get to return the guest text", || {
        tries += 1;
        if tries == 200 {
            logs();
        }
        let o = env.guestlink(&["clipboard", "get"]);
        got = String::from_utf8_lossy(&o.stdout).into_owned();
        o.status.success() && got == guest_text
    });
    let _ = xclip.kill();
    let _ = xclip.wait();

    // Resize through the session agent's RandR backend.
    ok(&env.guestlink(&["resize", "1024x768"]));
    wait_for("xrandr to show 1024x768", || {
        let o = env.x("xrandr").output().unwrap();
        String::from_utf8_lossy(&o.stdout).contains("current 1024 x 768")
    });

    // send-file.
    let src = env.dir.path().join("payload.bin");
    let data = payload(3 * 1024 * 1024 + 123);
    std::fs::write(&src, &data).unwrap();
    ok(&env.guestlink(&["send-file", src.to_str().unwrap()]));
    let landed = std::fs::read(env.downloads().join("payload.bin")).expect("file not saved");
    assert_eq!(Sha256::digest(&landed), Sha256::digest(&data));
}
