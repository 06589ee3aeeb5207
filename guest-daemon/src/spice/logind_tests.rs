//! [`super::logind::Logind`] and [`super::peer::identify`] against a fake `org.freedesktop.login1` served with
//! zbus on a private dbus-daemon: the proxies' names, paths and signatures (GetSessionByPID, the GetUserByPID →
//! User.Display fallback, Session.Id/User/Type/Class/Remote/LockedHint, Seat.ActiveSession), the target-session
//! rule, following VT switches and lock changes through signals only, and the peer checks with real processes.
//!
//! Needs `dbus-daemon` (package dbus) and, for the child-process peers, python3; skipped loudly without them
//! unless GUESTLINK_REQUIRE_PEERS is set.

use std::collections::HashMap;
use std::os::fd::AsFd;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use guestlink_tests::dbus::DbusDaemon;
use guestlink_tests::gate::Gate as PeerGate;
use tokio::sync::{oneshot, watch};
use zbus::object_server::SignalEmitter;
use zbus::zvariant::OwnedObjectPath;

use super::logind::{target_session, ActiveSession, Logind, PeerSession, SessionProps};
use super::peer::testing::ChildPeer;
use super::peer::{identify, AgentUid, Peer};

/// Generous: the machine may be loaded; a signal normally arrives within milliseconds.
const T: Duration = Duration::from_secs(30);

fn path(p: &str) -> OwnedObjectPath {
    OwnedObjectPath::try_from(p).unwrap()
}

fn session_path(id: &str) -> String {
    format!("/org/freedesktop/login1/session/{id}")
}

/// Holds GetSessionByPID for `pid` until `release` fires, telling `started` when the call arrived.
struct Gate {
    pid: u32,
    started: oneshot::Sender<()>,
    release: oneshot::Receiver<()>,
}

/// pid 100 is in session "c1" (uid 1000); pid 200 runs in a user unit (no session) of uid 1000, whose display
/// session is "c1"; `pids` maps further pids to sessions; anything else is unknown.
struct FakeManager {
    pids: Arc<Mutex<HashMap<u32, String>>>,
    gate: Arc<Mutex<Option<Gate>>>,
}

#[zbus::interface(name = "org.freedesktop.login1.Manager")]
impl FakeManager {
    #[zbus(name = "GetSessionByPID")]
    async fn get_session_by_pid(&self, pid: u32) -> zbus::fdo::Result<OwnedObjectPath> {
        let gate = {
            let mut g = self.gate.lock().unwrap();
            if g.as_ref().is_some_and(|g| g.pid == pid) {
                g.take()
            } else {
                None
            }
        };
        if let Some(g) = gate {
            let _ = g.started.send(());
            let _ = g.release.await;
        }
        if pid == 100 {
            return Ok(path(&session_path("c1")));
        }
        match self.pids.lock().unwrap().get(&pid) {
            Some(id) => Ok(path(&session_path(id))),
            None => Err(zbus::fdo::Error::Failed("NoSessionForPID".into())),
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

struct FakeSession {
    id: &'static str,
    uid: u32,
    kind: &'static str,
    class: &'static str,
    remote: bool,
    locked_hint: bool,
}

#[zbus::interface(name = "org.freedesktop.login1.Session")]
impl FakeSession {
    #[zbus(property)]
    fn id(&self) -> String {
        self.id.into()
    }
    #[zbus(property)]
    fn user(&self) -> (u32, OwnedObjectPath) {
        (
            self.uid,
            path(&format!("/org/freedesktop/login1/user/_{}", self.uid)),
        )
    }
    #[zbus(property, name = "Type")]
    fn kind(&self) -> String {
        self.kind.into()
    }
    #[zbus(property)]
    fn class(&self) -> String {
        self.class.into()
    }
    #[zbus(property)]
    fn remote(&self) -> bool {
        self.remote
    }
    #[zbus(property)]
    fn locked_hint(&self) -> bool {
        self.locked_hint
    }
    #[zbus(signal)]
    async fn lock(emitter: &SignalEmitter<'_>) -> zbus::Result<()>;
    #[zbus(signal)]
    async fn unlock(emitter: &SignalEmitter<'_>) -> zbus::Result<()>;
}

/// The fake sessions: id, uid, Type, Class, Remote.
const SESSIONS: [(&str, u32, &str, &str, bool); 5] = [
    ("c1", 1000, "x11", "user", false),
    ("c2", 120, "wayland", "greeter", false),
    ("c3", 1000, "tty", "user", false),
    ("c4", 1000, "x11", "user", true),
    ("c5", 65534, "wayland", "user", false),
];

struct FakeUser;

#[zbus::interface(name = "org.freedesktop.login1.User")]
impl FakeUser {
    #[zbus(property)]
    fn display(&self) -> (String, OwnedObjectPath) {
        ("c1".into(), path(&session_path("c1")))
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
            session_path(&id)
        };
        (id, path(&p))
    }
}

fn start_bus(dir: &std::path::Path) -> Option<(DbusDaemon, String)> {
    if !guestlink_tests::gate::require_tools(
        PeerGate::Peers,
        &["/usr/bin/dbus-daemon"],
        "package dbus",
    ) {
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
    let bus = DbusDaemon::start(&[&format!("--config-file={}", conf.display())]);
    let addr = bus.address().to_owned();
    Some((bus, addr))
}

/// A private bus with the fake login1 on it and a [`Logind`] client.
struct Fake {
    // Field order: the connections close before the bus daemon is killed.
    logind: Logind,
    client: zbus::Connection,
    server: zbus::Connection,
    active: Arc<Mutex<String>>,
    pids: Arc<Mutex<HashMap<u32, String>>>,
    gate: Arc<Mutex<Option<Gate>>>,
    _bus: DbusDaemon,
    _dir: tempfile::TempDir,
}

impl Fake {
    async fn start() -> Option<Self> {
        let dir = tempfile::tempdir().unwrap();
        let (bus, addr) = start_bus(dir.path())?;
        let active = Arc::new(Mutex::new(String::new()));
        let pids = Arc::new(Mutex::new(HashMap::new()));
        let gate = Arc::new(Mutex::new(None));
        let mut b = zbus::connection::Builder::address(addr.as_str())
            .unwrap()
            .name("org.freedesktop.login1")
            .unwrap()
            .serve_at(
                "/org/freedesktop/login1",
                FakeManager {
                    pids: Arc::clone(&pids),
                    gate: Arc::clone(&gate),
                },
            )
            .unwrap()
            .serve_at("/org/freedesktop/login1/user/_1000", FakeUser)
            .unwrap()
            .serve_at(
                "/org/freedesktop/login1/seat/seat0",
                FakeSeat(Arc::clone(&active)),
            )
            .unwrap();
        for (id, uid, kind, class, remote) in SESSIONS {
            let s = FakeSession {
                id,
                uid,
                kind,
                class,
                remote,
                locked_hint: false,
            };
            b = b.serve_at(session_path(id), s).unwrap();
        }
        let server = tokio::time::timeout(T, b.build())
            .await
            .expect("server connection timed out")
            .unwrap();
        let client = zbus::connection::Builder::address(addr.as_str())
            .unwrap()
            .build();
        let client = tokio::time::timeout(T, client)
            .await
            .expect("client connection timed out")
            .unwrap();
        Some(Self {
            logind: Logind::with_connection(client.clone()),
            client,
            server,
            active,
            pids,
            gate,
            _bus: bus,
            _dir: dir,
        })
    }

    /// A VT switch: seat0's ActiveSession becomes `id` ("" = none), announced by PropertiesChanged.
    async fn set_active(&self, id: &str) {
        *self.active.lock().unwrap() = id.into();
        let seat = self
            .server
            .object_server()
            .interface::<_, FakeSeat>("/org/freedesktop/login1/seat/seat0")
            .await
            .unwrap();
        seat.get()
            .await
            .active_session_changed(seat.signal_emitter())
            .await
            .unwrap();
    }

    async fn session(&self, id: &str) -> zbus::object_server::InterfaceRef<FakeSession> {
        self.server
            .object_server()
            .interface::<_, FakeSession>(session_path(id))
            .await
            .unwrap()
    }

    /// The screen locker sets `LockedHint`.
    async fn set_locked_hint(&self, id: &str, locked: bool) {
        let s = self.session(id).await;
        let mut inner = s.get_mut().await;
        inner.locked_hint = locked;
        inner.locked_hint_changed(s.signal_emitter()).await.unwrap();
    }

    /// logind's Lock (`true`) or Unlock signal on session `id`.
    async fn lock_signal(&self, id: &str, lock: bool) {
        let s = self.session(id).await;
        if lock {
            FakeSession::lock(s.signal_emitter()).await.unwrap();
        } else {
            FakeSession::unlock(s.signal_emitter()).await.unwrap();
        }
    }
}

fn served(id: &str, locked: bool, file_xfer_allowed: bool) -> Option<ActiveSession> {
    Some(ActiveSession {
        id: id.into(),
        locked,
        file_xfer_allowed,
    })
}

/// Drops the last receiver: the follower must then end.
async fn follower_stops(
    rx: watch::Receiver<Option<ActiveSession>>,
    follower: tokio::task::JoinHandle<()>,
) {
    drop(rx);
    tokio::time::timeout(T, follower)
        .await
        .expect("the follower did not stop without receivers")
        .unwrap();
}

/// Polls the follower's channel until it holds `want`; returns how long that took.
async fn wait_for(
    rx: &mut watch::Receiver<Option<ActiveSession>>,
    want: Option<ActiveSession>,
) -> Duration {
    let t0 = Instant::now();
    let ok = matches!(
        tokio::time::timeout(T, rx.wait_for(|v| *v == want)).await,
        Ok(Ok(_))
    );
    assert!(
        ok,
        "follower did not publish {want:?} within {T:?}; has {:?}",
        *rx.borrow()
    );
    t0.elapsed()
}

#[test]
fn target_session_rule() {
    let props = |t: &str, c: &str, remote: bool| SessionProps {
        session_type: t.into(),
        class: c.into(),
        remote,
        locked: false,
    };
    assert_eq!(
        target_session("2", &props("x11", "user", false)),
        served("2", false, true)
    );
    assert_eq!(
        target_session("2", &props("wayland", "greeter", false)),
        served("2", false, false)
    );
    for (t, c, remote) in [
        ("tty", "user", false),
        ("x11", "user", true),
        ("mir", "user", false),
        ("wayland", "lock-screen", false),
        ("x11", "background", false),
    ] {
        assert_eq!(
            target_session("2", &props(t, c, remote)),
            None,
            "{t} {c} {remote}"
        );
    }
    assert_eq!(target_session("", &props("x11", "user", false)), None);
    let locked = SessionProps {
        locked: true,
        ..props("x11", "user", false)
    };
    assert_eq!(target_session("2", &locked), served("2", true, true));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logind_proxies_against_a_fake_login1() {
    let Some(fake) = Fake::start().await else {
        return;
    };
    let logind = fake.logind.clone();
    let want = PeerSession {
        id: "c1".into(),
        uid: 1000,
    };
    let got = tokio::time::timeout(T, logind.session_of_pid(100))
        .await
        .expect("GetSessionByPID timed out");
    assert_eq!(got.unwrap(), want);
    // A user-unit process: no session of its own, its user's display session.
    assert_eq!(logind.session_of_pid(200).await.unwrap(), want);
    assert!(logind.session_of_pid(300).await.is_err());
    // The fake serves logind's real property names (the follower's decisions below then prove the proxy's).
    let props = zbus::fdo::PropertiesProxy::builder(&fake.client)
        .destination("org.freedesktop.login1")
        .unwrap()
        .path(session_path("c4"))
        .unwrap()
        .build()
        .await
        .unwrap();
    let iface = zbus::names::InterfaceName::try_from("org.freedesktop.login1.Session").unwrap();
    let all = props.get_all(iface).await.unwrap();
    let mut names: Vec<&str> = all.keys().map(String::as_str).collect();
    names.sort_unstable();
    assert_eq!(
        names,
        ["Class", "Id", "LockedHint", "Remote", "Type", "User"]
    );
    assert_eq!(
        all["Type"],
        zbus::zvariant::Value::from("x11").try_into().unwrap()
    );
    assert_eq!(
        all["Remote"],
        zbus::zvariant::Value::from(true).try_into().unwrap()
    );

    // The follower publishes the served session and its changes (None = none).
    let (tx, mut rx) = watch::channel(served("stale", false, true));
    let follower = tokio::spawn(logind.clone().follow_active_info(tx));
    wait_for(&mut rx, None).await;
    fake.set_active("c1").await;
    tokio::time::timeout(
        T,
        rx.wait_for(|s| s.as_ref().map(|a| a.id.as_str()) == Some("c1")),
    )
    .await
    .unwrap()
    .unwrap();
    // A tty session on the seat is not served.
    fake.set_active("c3").await;
    wait_for(&mut rx, None).await;
    follower_stops(rx, follower).await;
}

/// Only signals can deliver the changes here: the safety-net re-read is an hour away.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn follower_sees_vt_switches_and_locks_through_signals() {
    let Some(fake) = Fake::start().await else {
        return;
    };
    let (tx, mut rx) = watch::channel(served("stale", true, true));
    let follower = tokio::spawn(
        fake.logind
            .clone()
            .follow_active_info_every(tx, Duration::from_secs(3600)),
    );
    // At boot there is no active session yet: None, not an error.
    wait_for(&mut rx, None).await;
    let mut slowest = Duration::ZERO;
    let mut step = |d: Duration| slowest = slowest.max(d);

    fake.set_active("c1").await;
    step(wait_for(&mut rx, served("c1", false, true)).await);
    fake.set_locked_hint("c1", true).await;
    step(wait_for(&mut rx, served("c1", true, true)).await);
    fake.set_locked_hint("c1", false).await;
    step(wait_for(&mut rx, served("c1", false, true)).await);
    fake.lock_signal("c1", true).await;
    step(wait_for(&mut rx, served("c1", true, true)).await);
    fake.lock_signal("c1", false).await;
    step(wait_for(&mut rx, served("c1", false, true)).await);
    // Lock requested, the locker sets and later clears the hint (no Unlock signal, as with GNOME): unlocked.
    fake.lock_signal("c1", true).await;
    step(wait_for(&mut rx, served("c1", true, true)).await);
    fake.set_locked_hint("c1", true).await;
    fake.set_locked_hint("c1", false).await;
    step(wait_for(&mut rx, served("c1", false, true)).await);

    // VT switches: to the greeter (no file transfer), a tty, back, a remote session.
    fake.set_active("c2").await;
    step(wait_for(&mut rx, served("c2", false, false)).await);
    fake.set_active("c3").await;
    step(wait_for(&mut rx, None).await);
    fake.set_active("c1").await;
    step(wait_for(&mut rx, served("c1", false, true)).await);
    fake.set_active("c4").await;
    step(wait_for(&mut rx, None).await);
    // The greeter's hint is followed too once it is active.
    fake.set_active("c2").await;
    step(wait_for(&mut rx, served("c2", false, false)).await);
    fake.set_locked_hint("c2", true).await;
    step(wait_for(&mut rx, served("c2", true, false)).await);
    eprintln!("slowest signal-to-publication: {slowest:?}");

    follower_stops(rx, follower).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn identify_our_own_peer_through_logind() {
    let Some(fake) = Fake::start().await else {
        return;
    };
    let (a, _b) = tokio::net::UnixStream::pair().unwrap();
    // Unknown to logind: refused.
    assert!(identify(&a, Some(&fake.logind), AgentUid::ActiveVt)
        .await
        .is_err());
    fake.pids
        .lock()
        .unwrap()
        .insert(std::process::id(), "c1".into());
    let got = identify(&a, Some(&fake.logind), AgentUid::ActiveVt).await;
    // c1 belongs to uid 1000: only root (or uid 1000) may claim it.
    match nix::unistd::getuid().as_raw() {
        0 | 1000 => assert_eq!(got.unwrap(), "c1"),
        _ => assert!(got.is_err()),
    }
}

/// A peer that is not root must own its session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn identify_requires_the_session_owner() {
    if !guestlink_tests::gate::require_root(PeerGate::Peers, "a peer runs as another uid") {
        return;
    }
    let Some(fake) = Fake::start().await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let Some(child) = ChildPeer::start(dir.path(), Some(65534)) else {
        return;
    };
    let stream = tokio::net::UnixStream::from_std(child.stream.try_clone().unwrap()).unwrap();
    assert_eq!(Peer::of(stream.as_fd()).unwrap().uid(), 65534);
    fake.pids
        .lock()
        .unwrap()
        .insert(child.child.id(), "c1".into());
    let err = format!(
        "{:#}",
        identify(&stream, Some(&fake.logind), AgentUid::ActiveVt)
            .await
            .unwrap_err()
    );
    assert!(err.contains("does not own session c1"), "{err}");
    fake.pids
        .lock()
        .unwrap()
        .insert(child.child.id(), "c5".into());
    assert_eq!(
        identify(&stream, Some(&fake.logind), AgentUid::ActiveVt)
            .await
            .unwrap(),
        "c5"
    );
}

/// The peer exits (and its pid could be recycled) while logind is being asked: refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn identify_refuses_a_peer_that_exits_during_the_lookup() {
    let Some(fake) = Fake::start().await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let Some(mut child) = ChildPeer::start(dir.path(), None) else {
        return;
    };
    let pid = child.child.id();
    fake.pids.lock().unwrap().insert(pid, "c1".into());
    let (started_tx, started) = oneshot::channel();
    let (release, release_rx) = oneshot::channel();
    *fake.gate.lock().unwrap() = Some(Gate {
        pid,
        started: started_tx,
        release: release_rx,
    });
    let stream = tokio::net::UnixStream::from_std(child.stream.try_clone().unwrap()).unwrap();
    let logind = fake.logind.clone();
    let check =
        tokio::spawn(async move { identify(&stream, Some(&logind), AgentUid::ActiveVt).await });
    tokio::time::timeout(T, started)
        .await
        .expect("GetSessionByPID never came")
        .unwrap();
    child.exit_and_reap();
    release.send(()).unwrap();
    let r = tokio::time::timeout(T, check).await.unwrap().unwrap();
    let err = format!("{:#}", r.expect_err("a dead peer was accepted"));
    assert!(err.contains("exited during the check"), "{err}");
}
