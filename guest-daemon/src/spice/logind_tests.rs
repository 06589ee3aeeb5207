//! [`super::logind::Logind`] against a fake `org.freedesktop.login1` served with zbus on a private dbus-daemon:
//! checks the proxies' names, paths and signatures (GetSessionByPID, the GetUserByPID → User.Display fallback,
//! Session.Id/User, Seat.ActiveSession) and that an active-session change is followed.
//!
//! Needs `dbus-daemon` (package dbus); skipped loudly without it unless GUESTLINK_REQUIRE_PEERS is set.

use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use zbus::zvariant::OwnedObjectPath;

use super::logind::{Logind, PeerSession};

struct Bus(Child);

impl Drop for Bus {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn path(p: &str) -> OwnedObjectPath {
    OwnedObjectPath::try_from(p).unwrap()
}

/// pid 100 is in session "c1" (uid 1000); pid 200 runs in a user unit (no session) of uid 1000, whose display
/// session is "c1"; anything else is unknown.
struct FakeManager;

#[zbus::interface(name = "org.freedesktop.login1.Manager")]
impl FakeManager {
    #[zbus(name = "GetSessionByPID")]
    fn get_session_by_pid(&self, pid: u32) -> zbus::fdo::Result<OwnedObjectPath> {
        match pid {
            100 => Ok(path("/org/freedesktop/login1/session/c1")),
            _ => Err(zbus::fdo::Error::Failed("NoSessionForPID".into())),
        }
    }
    #[zbus(name = "GetUserByPID")]
    fn get_user_by_pid(&self, pid: u32) -> zbus::fdo::Result<OwnedObjectPath> {
        match pid {
            100 | 200 => Ok(path("/org/freedesktop/login1/user/_1000")),
            _ => Err(zbus::fdo::Error::Failed("NoUserForPID".into())),
        }
    }
}

struct FakeSession;

#[zbus::interface(name = "org.freedesktop.login1.Session")]
impl FakeSession {
    #[zbus(property)]
    fn id(&self) -> String {
        "c1".into()
    }
    #[zbus(property)]
    fn user(&self) -> (u32, OwnedObjectPath) {
        (1000, path("/org/freedesktop/login1/user/_1000"))
    }
}

struct FakeUser;

#[zbus::interface(name = "org.freedesktop.login1.User")]
impl FakeUser {
    #[zbus(property)]
    fn display(&self) -> (String, OwnedObjectPath) {
        ("c1".into(), path("/org/freedesktop/login1/session/c1"))
    }
}

struct FakeSeat(Arc<Mutex<String>>);

#[zbus::interface(name = "org.freedesktop.login1.Seat")]
impl FakeSeat {
    #[zbus(property)]
    fn active_session(&self) -> (String, OwnedObjectPath) {
        let id = self.0.lock().unwrap().clone();
        let p = if id.is_empty() {
            "/".to_owned()
        } else {
            format!("/org/freedesktop/login1/session/{id}")
        };
        (id, path(&p))
    }
}

fn start_bus(dir: &std::path::Path) -> Option<(Bus, String)> {
    if !std::path::Path::new("/usr/bin/dbus-daemon").exists() {
        assert!(
            std::env::var_os("GUESTLINK_REQUIRE_PEERS").is_none(),
            "dbus-daemon missing but GUESTLINK_REQUIRE_PEERS is set"
        );
        eprintln!("\n*** SKIPPED: dbus-daemon not installed (package dbus) ***\n");
        return None;
    }
    let sock = dir.join("bus");
    let conf = dir.join("bus.conf");
    std::fs::write(
        &conf,
        format!(
            "<!DOCTYPE busconfig PUBLIC \"-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN\" \
             \"http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd\">\n<busconfig><type>session</type>\
             <listen>unix:path={}</listen><auth>EXTERNAL</auth><policy context=\"default\">\
             <allow send_destination=\"*\"/><allow receive_sender=\"*\"/><allow own=\"*\"/></policy></busconfig>",
            sock.display()
        ),
    )
    .unwrap();
    let child = Command::new("dbus-daemon")
        .arg(format!("--config-file={}", conf.display()))
        .arg("--nofork")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let bus = Bus(child);
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !sock.exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "dbus-daemon did not start"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    Some((bus, format!("unix:path={}", sock.display())))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logind_proxies_against_a_fake_login1() {
    let dir = tempfile::tempdir().unwrap();
    let Some((_bus, addr)) = start_bus(dir.path()) else {
        return;
    };
    let active = Arc::new(Mutex::new(String::new()));
    let _server = zbus::connection::Builder::address(addr.as_str())
        .unwrap()
        .name("org.freedesktop.login1")
        .unwrap()
        .serve_at("/org/freedesktop/login1", FakeManager)
        .unwrap()
        .serve_at("/org/freedesktop/login1/session/c1", FakeSession)
        .unwrap()
        .serve_at("/org/freedesktop/login1/user/_1000", FakeUser)
        .unwrap()
        .serve_at(
            "/org/freedesktop/login1/seat/seat0",
            FakeSeat(Arc::clone(&active)),
        )
        .unwrap()
        .build();
    let _server = tokio::time::timeout(Duration::from_secs(20), _server)
        .await
        .expect("server connection timed out")
        .unwrap();
    let client = zbus::connection::Builder::address(addr.as_str())
        .unwrap()
        .build();
    let client = tokio::time::timeout(Duration::from_secs(20), client)
        .await
        .expect("client connection timed out")
        .unwrap();
    let logind = Logind::with_connection(client);
    let want = PeerSession {
        id: "c1".into(),
        uid: 1000,
    };
    let t = Duration::from_secs(20);
    let got = tokio::time::timeout(t, logind.session_of_pid(100))
        .await
        .expect("GetSessionByPID timed out");
    assert_eq!(got.unwrap(), want);
    // A user-unit process: no session of its own, its user's display session.
    assert_eq!(logind.session_of_pid(200).await.unwrap(), want);
    assert!(logind.session_of_pid(300).await.is_err());

    // The follower publishes seat0's active session and its changes ("" = none).
    let (tx, mut rx) = tokio::sync::watch::channel(Some("stale".to_owned()));
    tokio::spawn(logind.clone().follow_active(tx));
    tokio::time::timeout(Duration::from_secs(30), rx.wait_for(|s| s.is_none()))
        .await
        .unwrap()
        .unwrap();
    *active.lock().unwrap() = "c1".into();
    tokio::time::timeout(
        Duration::from_secs(30),
        rx.wait_for(|s| s.as_deref() == Some("c1")),
    )
    .await
    .unwrap()
    .unwrap();
}
