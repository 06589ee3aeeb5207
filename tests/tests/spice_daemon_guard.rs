//! guestlinkd's SPICE side against hostile local users and protocol resets, black-box (issues 16 and 18): the
//! test plays the host on a unix socket standing in for `com.redhat.spice.0` and the session agents on the
//! session socket; the attacker runs as a real unprivileged uid (65534, through setpriv).
//!
//! - `--no-logind` accepts only root and `--agent-uid` (issue 16 finding 3);
//! - after a port reset, the newest capabilities decide the wire format (issue 18 bug 1);
//! - PRIMARY never reaches a client without CLIPBOARD_SELECTION (issue 18 bug 2).
//!
//! Run: `cargo test -p tests --test spice_daemon_guard`.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test target: unwrap is how a set-up step fails

use guestlink_tests::spice as spice_common;

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixListener;
use std::process::Stdio;

use guestlink_protocol::session::SessionMessage;
use guestlink_protocol::vdagent::Message;
use spice_common::daemon_peers::*;
use spice_common::wire_checks::{
    check_newest_caps_govern, check_primary_never_reaches_a_legacy_client, malformed_burst,
};

/// The unprivileged attacker.
const NOBODY: u32 = 65534;

/// Connects to the session socket as uid 65534 and prints how many bytes guestlinkd sent before closing the
/// connection (or before 5 s passed).
const ATTACKER: &str = r#"
import socket, sys, time
s = socket.socket(socket.AF_UNIX)
for _ in range(300):
    try:
        s.connect(sys.argv[1]); break
    except OSError:
        time.sleep(0.1)
s.settimeout(5)
got = b""
try:
    while True:
        b = s.recv(65536)
        if not b: break
        got += b
except socket.timeout:
    pass
print(len(got))
"#;

/// Issue 16 finding 3: with `--no-logind`, a local uid that is neither root nor `--agent-uid` is refused (it used
/// to become the agent and receive the host's clipboard and files, and the real agent got "session-taken").
#[test]
fn no_logind_refuses_other_uids_and_the_real_agent_still_works() {
    if spice_common::peers(&["setpriv", "python3"]).is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // The attacker must reach the 0666 socket inside.
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let vport = dir.path().join("vport.sock");
    let listener = UnixListener::bind(&vport).unwrap();
    let socket = dir.path().join("session.sock");
    let child = spice_common::guestlinkd_spice(dir.path(), &vport, &socket)
        // Some uid that is not the attacker's.
        .args(["--agent-uid", "4242"])
        .env("GUESTLINK_LOG", "debug")
        .spawn()
        .expect("start guestlinkd");
    let mut daemon = Daemon(child);
    let out = spice_common::python_as(NOBODY, ATTACKER)
        .arg(&socket)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success(), "attacker: {out:?}");
    let got = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    assert_eq!(
        got, "0",
        "uid {NOBODY} was served as the agent ({got} bytes)"
    );

    // The real agent (root here) is accepted, becomes active and the port opens.
    let mut agent = SessionAgent::connect(&socket);
    agent.hello_and_geometry();
    let mut host = Host::accept(&listener);
    host.handshake();
    agent.expect("client-connected", |m| {
        matches!(m, SessionMessage::ClientConnected).then_some(())
    });
    assert!(daemon.alive());
}

/// Issue 18 bug 1: a burst of malformed but well-framed messages (random types and sizes, capabilities with
/// random words), then a chunk with an invalid port: guestlinkd resets the port and announces again; the host
/// answers with fresh capabilities (CLIPBOARD_SELECTION and GRAB_SERIAL) and grabs. The guest's request must
/// then use the selection prefix, and the host's grab must be read with it.
#[test]
fn after_a_port_reset_the_newest_capabilities_govern_the_wire() {
    let s = Setup::start();
    let mut agent = SessionAgent::connect(&s.session_socket());
    agent.hello_and_geometry();
    let mut host = Host::accept(&s.listener);
    host.handshake();
    let _ = host.s.write_all(&malformed_burst());

    // The port is reset: a new connection, our caps with request=1; the host answers with fresh caps.
    let mut host = Host::accept(&s.listener);
    let (_, m) = host.recv();
    let Message::AnnounceCapabilities {
        request: true,
        caps: ours,
    } = m
    else {
        panic!("not a capabilities request after the reset: {m:?}");
    };
    check_newest_caps_govern(&mut host, &mut agent, &ours);
}

/// Issue 18 bug 2: a client that did not announce CLIPBOARD_SELECTION gets no grab when the guest's PRIMARY
/// changes (it would replace the client's clipboard on every highlight); CLIPBOARD still crosses.
#[test]
fn primary_never_reaches_a_legacy_client() {
    let s = Setup::start();
    let mut agent = SessionAgent::connect(&s.session_socket());
    agent.hello_and_geometry();
    let mut host = Host::accept(&s.listener);
    check_primary_never_reaches_a_legacy_client(&mut host, &mut agent);
}
