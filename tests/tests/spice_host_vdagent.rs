//! The `guestlink` SPICE commands against the REAL Debian spice-vdagentd + spice-vdagent on Xvfb: proves the
//! host side speaks the reference protocol (clipboard both ways via xclip, resize seen by xrandr, send-file into
//! the XDG download dir with sha256 equality).
//!
//! Topology (docs/protocol/vdagent.md#running-spice-vdagentd-without-a-vm): spice-vdagentd `-s vport.sock` connects to
//! a socket the test listens on; the test relays that "virtio port" to `chardev.sock`, where each
//! `guestlink --spice-socket` invocation connects — like QEMU's `-chardev socket,server=on`, which keeps the guest
//! port while host clients come and go.
//!
//! Needs spice-vdagent, xvfb, xclip, x11-xserver-utils (.ci/apt.d/spice.txt); missing peers skip loudly unless
//! GUESTLINK_REQUIRE_PEERS is set. Run: `cargo test -p tests --test spice_host_vdagent`.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test target: unwrap is how a set-up step fails

use guestlink_tests::spice as spice_common;

use std::os::unix::net::UnixListener;
use std::process::Command;
use std::time::Instant;

use sha2::{Digest, Sha256};
use spice_common::{ok, payload, peers, start_relay, wait_for, xvfb, Procs, SpiceEnv};

fn start() -> Option<SpiceEnv> {
    peers(&["spice-vdagentd", "spice-vdagent", "Xvfb", "xclip", "xrandr"])?;
    let dir = tempfile::tempdir().unwrap();
    let mut procs = Procs::default();
    let display = xvfb(&mut procs);

    let vport = dir.path().join("vport.sock");
    let guest_l = UnixListener::bind(&vport).unwrap();
    let host_l = UnixListener::bind(dir.path().join("chardev.sock")).unwrap();
    let guest_connected = start_relay(guest_l, host_l);

    let home = dir.path().join("home");
    std::fs::create_dir_all(home.join("Downloads")).unwrap();
    std::fs::create_dir_all(home.join(".config")).unwrap();
    std::fs::write(
        home.join(".config/user-dirs.dirs"),
        "XDG_DOWNLOAD_DIR=\"$HOME/Downloads\"\nXDG_DESKTOP_DIR=\"$HOME/Desktop\"\n",
    )
    .unwrap();
    let fake = dir.path().join("fake-uinput");
    std::fs::write(&fake, b"").unwrap();
    let dsock = dir.path().join("vdagentd.sock");
    let log = |name: &str| std::fs::File::create(dir.path().join(name)).unwrap();
    procs.0.push(
        Command::new("spice-vdagentd")
            .args(["-x", "-d", "-X", "-f", "-u"])
            .arg(&fake)
            .arg("-s")
            .arg(&vport)
            .arg("-S")
            .arg(&dsock)
            .stderr(log("vdagentd.log"))
            .spawn()
            .expect("spice-vdagentd"),
    );
    wait_for("spice-vdagentd socket", || dsock.exists());
    procs.0.push(
        Command::new("spice-vdagent")
            .args(["-x", "-d", "-s"])
            .arg(&vport)
            .arg("-S")
            .arg(&dsock)
            .env("DISPLAY", &display)
            .env("HOME", &home)
            .env_remove("XDG_CONFIG_HOME")
            .stderr(log("vdagent.log"))
            .spawn()
            .expect("spice-vdagent"),
    );
    // The daemon opens its port once the session agent reported its geometry.
    wait_for("spice-vdagentd to open its port", || {
        *guest_connected.lock().unwrap()
    });
    let spice_socket = dir.path().join("chardev.sock");
    Some(SpiceEnv {
        dir,
        display,
        spice_socket,
        procs,
    })
}

#[test]
fn host_commands_against_real_spice_vdagent() {
    let Some(env) = start() else { return };

    // spice-state: vdagentd 0.22.1 announces 0x00038de7.
    let v: serde_json::Value =
        serde_json::from_str(&ok(&env.guestlink(&["--json", "spice-state"]))).unwrap();
    assert_eq!(v["agent"], true);
    let caps = v["caps"][0].as_u64().unwrap();
    assert_eq!(
        caps & 0x25,
        0x25,
        "MOUSE_STATE/REPLY/CLIPBOARD_BY_DEMAND missing: {caps:#x}"
    );
    eprintln!("spice-vdagentd caps: {caps:#010x}");

    // Host → guest clipboard: guestlink serves one paste; xclip -o in the guest prints it.
    env.clipboard_host_to_guest("hello from the host ✓");

    // Guest → host: xclip -i owns the guest clipboard; guestlink clipboard get reads it.
    env.clipboard_guest_to_host("guest says hi\nline two", || {});

    // Resize: the agent applies it with RandR on Xvfb.
    env.resize_to_1024x768();

    // send-file: 3 MiB + 123 bytes lands in ~/Downloads with the same sha256.
    let src = env.dir.path().join("payload.bin");
    let data = payload(3 * 1024 * 1024 + 123);
    std::fs::write(&src, &data).unwrap();
    let t = Instant::now();
    ok(&env.guestlink(&["send-file", src.to_str().unwrap()]));
    eprintln!("send-file 3 MiB: {:.2} s", t.elapsed().as_secs_f64());
    let dst = env.dir.path().join("home/Downloads/payload.bin");
    let landed = std::fs::read(&dst).expect("file not in the download dir");
    assert_eq!(Sha256::digest(&landed), Sha256::digest(&data));

    // A guest-side failure is a clear error: the download dir replaced by a regular file.
    let downloads = env.dir.path().join("home/Downloads");
    std::fs::rename(&downloads, env.dir.path().join("home/Downloads.old")).unwrap();
    std::fs::write(&downloads, b"not a directory").unwrap();
    let o = env.guestlink(&["send-file", src.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success(),
        "send-file into a non-directory succeeded"
    );
    assert!(
        err.contains("payload.bin: the guest"),
        "unclear error: {err}"
    );
    eprintln!("refused as expected: {}", err.trim());
}
