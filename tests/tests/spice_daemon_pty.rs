//! guestlinkd's SPICE port on a pty (issue 18 bugs 1 and 2 over the second transport): guestlinkd is given the
//! pty's slave as `--spice-path`, as it would be given `/dev/virtio-ports/com.redhat.spice.0`, and the test plays
//! the host on the master. A pty behaves like the virtio port where `spice_daemon_guard.rs`'s unix socket does
//! not: the daemon opens a tty (raw mode, input flushed at each open), a "reset" is a close and re-open of the
//! slave rather than a new connection, and the host's end reads EIO while no one holds the slave.
//!
//! - after a port reset, the newest capabilities decide the wire format in both directions (bug 1);
//! - PRIMARY never reaches a client without CLIPBOARD_SELECTION (bug 2).
//!
//! The host end is bridged to a socketpair so the same `Host` peer as the socket tests decodes it; the bridge
//! only copies bytes (EIO while the slave is closed is waited out, as QEMU's pty chardev does).
//!
//! Run: `cargo test -p tests --test spice_daemon_pty`.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test target: unwrap is how a set-up step fails

use guestlink_tests::spice as spice_common;

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::Duration;

use guestlink_protocol::vdagent::{Message, Reassembler, ReassemblerConfig, WireFormat};
use nix::fcntl::OFlag;
use nix::pty::{grantpt, posix_openpt, ptsname_r, unlockpt};
use spice_common::daemon_peers::*;
use spice_common::wire_checks::{
    check_newest_caps_govern, check_primary_never_reaches_a_legacy_client, malformed_burst,
};

/// A pty pair whose master is bridged to a unix stream: `slave` is the path guestlinkd opens.
struct PtyPort {
    slave: PathBuf,
    host_end: UnixStream,
}

fn pty_port() -> PtyPort {
    let master = posix_openpt(OFlag::O_RDWR | OFlag::O_NOCTTY).expect("posix_openpt");
    grantpt(&master).unwrap();
    unlockpt(&master).unwrap();
    let slave = PathBuf::from(ptsname_r(&master).unwrap());
    let master = File::from(OwnedFd::from(master));
    let (host_end, bridge) = UnixStream::pair().unwrap();

    // pty master -> host. EIO: no one holds the slave (before the first open, between a close and the re-open).
    let mut from_pty = master.try_clone().unwrap();
    let mut to_host = bridge.try_clone().unwrap();
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 65536];
        loop {
            match from_pty.read(&mut buf) {
                Ok(0) => std::thread::sleep(Duration::from_millis(10)),
                Ok(n) => {
                    if to_host.write_all(&buf[..n]).is_err() {
                        return;
                    }
                }
                Err(e) if e.raw_os_error() == Some(nix::libc::EIO) => {
                    std::thread::sleep(Duration::from_millis(10));
                }
                Err(_) => return,
            }
        }
    });
    // host -> pty master.
    let mut to_pty = master;
    let mut from_host = bridge;
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 65536];
        while let Ok(n) = from_host.read(&mut buf) {
            if n == 0 || to_pty.write_all(&buf[..n]).is_err() {
                return;
            }
        }
    });
    PtyPort { slave, host_end }
}

/// A fresh host peer on the bridged master (new reassembler, legacy wire format until caps are exchanged).
fn host_on(port: &PtyPort) -> Host {
    let s = port.host_end.try_clone().unwrap();
    s.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    Host {
        s,
        reasm: Reassembler::new(ReassemblerConfig::host_side()),
        queue: Default::default(),
        wire: WireFormat::default(),
    }
}

/// guestlinkd serving the pty's slave; its session socket in a temporary directory.
fn start(port: &PtyPort) -> (tempfile::TempDir, Daemon) {
    let dir = tempfile::tempdir().unwrap();
    let child =
        spice_common::guestlinkd_spice(dir.path(), &port.slave, &dir.path().join("session.sock"))
            .env("GUESTLINK_LOG", "debug")
            .spawn()
            .expect("start guestlinkd");
    (dir, Daemon(child))
}

/// Bug 1 over a pty: after the burst guestlinkd closes the slave and opens it again, announcing its caps with
/// request=1; the host answers with spice-gtk's caps (CLIPBOARD_SELECTION, GRAB_SERIAL) and grabs. The grab must
/// be read with the selection prefix and the guest's request sent with it (a legacy 4-byte request does not
/// decode in `Host`, which uses the negotiated format).
#[test]
fn after_a_pty_port_reset_the_newest_capabilities_govern_the_wire() {
    let port = pty_port();
    let (dir, mut daemon) = start(&port);
    let mut agent = SessionAgent::connect(&dir.path().join("session.sock"));
    agent.hello_and_geometry();
    let mut host = host_on(&port);
    host.handshake();

    let _ = host.s.write_all(&malformed_burst());

    // Skip what the daemon said before the reset; the reset shows as a new caps request.
    let ours = host.expect("a capabilities request after the reset", |_, m| match m {
        Message::AnnounceCapabilities {
            request: true,
            caps,
        } => Some(caps.clone()),
        _ => None,
    });
    let mut host = host_on(&port);
    check_newest_caps_govern(&mut host, &mut agent, &ours);
    assert!(daemon.alive(), "guestlinkd died on the burst");
}

/// Bug 2 over a pty: a client without CLIPBOARD_SELECTION never gets the guest's PRIMARY; CLIPBOARD crosses.
#[test]
fn primary_never_reaches_a_legacy_client_over_a_pty() {
    let port = pty_port();
    let (dir, mut daemon) = start(&port);
    let mut agent = SessionAgent::connect(&dir.path().join("session.sock"));
    agent.hello_and_geometry();
    let mut host = host_on(&port);
    check_primary_never_reaches_a_legacy_client(&mut host, &mut agent);
    assert!(daemon.alive());
}
