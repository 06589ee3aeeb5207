//! A fake `org.freedesktop.login1` on a private dbus-daemon, for black-box guestlinkd tests that need logind
//! (systemd-logind itself cannot run here: it needs systemd as PID 1 and real seats). Only what guestlinkd reads
//! (guest-daemon/src/spice/logind.rs): Manager.GetSessionByPID / GetUserByPID, seat0's ActiveSession and the
//! Session properties Id, User, Type, Class, Remote, LockedHint, and the Session signals Lock/Unlock
//! ([`FakeLogind::lock`], as `loginctl lock-session`/`unlock-session` make logind send them). The session set is
//! fixed at start; `pids` maps processes to sessions and may change at any time. The unit test
//! guest-daemon/src/spice/logind_tests.rs has a fuller fake (VT switches, LockedHint changes) for the follower itself.
#![allow(dead_code)]
// each test uses part of it

// zbus generates public senders for the Session signals (Lock, Unlock) without doc comments of their own.
#![allow(missing_docs)]

use std::collections::HashMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};

use zbus::object_server::SignalEmitter;
use zbus::zvariant::OwnedObjectPath;

use crate::dbus::DbusDaemon;

/// One fake session: id, owner uid, `Type`, `Class`.
#[derive(Debug, Clone, Copy)]
pub struct FakeSessionSpec {
    /// Session id.
    pub id: &'static str,
    /// Owner uid.
    pub uid: u32,
    /// `Type` (x11, wayland, tty).
    pub kind: &'static str,
    /// `Class` (user, greeter).
    pub class: &'static str,
}

fn path(p: &str) -> OwnedObjectPath {
    OwnedObjectPath::try_from(p).unwrap()
}

fn session_path(id: &str) -> String {
    format!("/org/freedesktop/login1/session/{id}")
}

type Pids = Arc<Mutex<HashMap<u32, String>>>;

struct Manager(Pids);

#[zbus::interface(name = "org.freedesktop.login1.Manager")]
impl Manager {
    #[zbus(name = "GetSessionByPID")]
    fn get_session_by_pid(&self, pid: u32) -> zbus::fdo::Result<OwnedObjectPath> {
        match self.0.lock().unwrap().get(&pid) {
            Some(id) => Ok(path(&session_path(id))),
            None => Err(zbus::fdo::Error::Failed("NoSessionForPID".into())),
        }
    }
    #[zbus(name = "GetUserByPID")]
    fn get_user_by_pid(&self, _pid: u32) -> zbus::fdo::Result<OwnedObjectPath> {
        Err(zbus::fdo::Error::Failed("NoUserForPID".into()))
    }
}

struct Session(FakeSessionSpec);

#[zbus::interface(name = "org.freedesktop.login1.Session")]
impl Session {
    #[zbus(property)]
    fn id(&self) -> String {
        self.0.id.into()
    }
    #[zbus(property)]
    fn user(&self) -> (u32, OwnedObjectPath) {
        let uid = self.0.uid;
        (uid, path(&format!("/org/freedesktop/login1/user/_{uid}")))
    }
    #[zbus(property, name = "Type")]
    fn kind(&self) -> String {
        self.0.kind.into()
    }
    #[zbus(property)]
    fn class(&self) -> String {
        self.0.class.into()
    }
    #[zbus(property)]
    fn remote(&self) -> bool {
        false
    }
    #[zbus(property)]
    fn locked_hint(&self) -> bool {
        false
    }
    /// logind's `Lock` signal: the session is asked to lock.
    #[zbus(signal)]
    async fn lock(emitter: &SignalEmitter<'_>) -> zbus::Result<()>;
    /// logind's `Unlock` signal.
    #[zbus(signal)]
    async fn unlock(emitter: &SignalEmitter<'_>) -> zbus::Result<()>;
}

struct Seat(&'static str);

#[zbus::interface(name = "org.freedesktop.login1.Seat")]
impl Seat {
    #[zbus(property)]
    fn active_session(&self) -> (String, OwnedObjectPath) {
        (self.0.into(), path(&session_path(self.0)))
    }
}

/// The private bus and the fake login1 on it. Field order: the server connection and its runtime are dropped
/// before the bus daemon is killed.
#[derive(Debug)]
pub struct FakeLogind {
    _server: zbus::Connection,
    _rt: tokio::runtime::Runtime,
    _bus: DbusDaemon,
    /// The bus address, for `DBUS_SYSTEM_BUS_ADDRESS`.
    pub address: String,
    /// pid → session id, read at every GetSessionByPID.
    pids: Pids,
}

impl FakeLogind {
    /// Starts `dbus-daemon` on a socket in `dir` (a config allowing everything, as the only clients are this
    /// test and the guestlinkd it starts) and serves `sessions` with seat0's ActiveSession `active`.
    pub fn start(dir: &Path, sessions: &[FakeSessionSpec], active: &'static str) -> FakeLogind {
        let conf = dir.join("bus.conf");
        std::fs::write(
            &conf,
            format!(
                "<!DOCTYPE busconfig PUBLIC \"-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN\" \
                 \"http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd\">\n<busconfig><type>system</type>\
                 <listen>unix:path={}</listen><auth>EXTERNAL</auth><policy context=\"default\">\
                 <allow send_destination=\"*\"/><allow receive_sender=\"*\"/><allow own=\"*\"/></policy></busconfig>",
                dir.join("bus").display()
            ),
        )
        .unwrap();
        let bus = DbusDaemon::start(&[&format!("--config-file={}", conf.display())]);
        let address = bus.address().to_owned();
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let pids: Pids = Arc::default();
        let server = rt.block_on(async {
            let mut b = zbus::connection::Builder::address(address.as_str())
                .unwrap()
                .name("org.freedesktop.login1")
                .unwrap()
                .serve_at("/org/freedesktop/login1", Manager(Arc::clone(&pids)))
                .unwrap()
                .serve_at("/org/freedesktop/login1/seat/seat0", Seat(active))
                .unwrap();
            for s in sessions {
                b = b.serve_at(session_path(s.id), Session(*s)).unwrap();
            }
            tokio::time::timeout(crate::spice::TIMEOUT, b.build())
                .await
                .expect("connecting the fake logind timed out")
                .expect("fake logind")
        });
        FakeLogind {
            _server: server,
            _rt: rt,
            _bus: bus,
            address,
            pids,
        }
    }

    /// Emits session `id`'s `Lock` (`locked`) or `Unlock` signal, as logind does for `loginctl lock-session` /
    /// `unlock-session`.
    pub fn lock(&self, id: &str, locked: bool) {
        self._rt.block_on(async {
            let iface = self
                ._server
                .object_server()
                .interface::<_, Session>(session_path(id))
                .await
                .expect("no such fake session");
            let emitter = iface.signal_emitter();
            if locked {
                Session::lock(emitter).await
            } else {
                Session::unlock(emitter).await
            }
            .expect("emit Lock/Unlock");
        });
    }

    /// guestlinkd as the SPICE tests run it ([`crate::spice_common::guestlinkd_spice`]) but with logind: this
    /// fake's bus as the system bus.
    pub fn guestlinkd(&self, dir: &Path, port: &Path, session_socket: &Path) -> Command {
        std::fs::create_dir_all(dir.join("state")).unwrap();
        let mut cmd = Command::new(crate::qga_agent::guestlinkd_path());
        cmd.args(["-m", "none", "--foreground"])
            .arg("-t")
            .arg(dir.join("state"))
            .arg("--spice-path")
            .arg(port)
            .arg("--session-socket")
            .arg(session_socket)
            .arg("--uinput-fake")
            .arg(dir.join("uinput"))
            .env("DBUS_SYSTEM_BUS_ADDRESS", &self.address)
            .stdin(Stdio::null());
        cmd
    }

    /// Process `pid` belongs to session `id` from now on.
    pub fn map_pid(&self, pid: u32, id: &str) {
        self.pids.lock().unwrap().insert(pid, id.into());
    }
}
