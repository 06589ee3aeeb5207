//! systemd-logind over zbus: which session a peer process belongs to, and which session on seat0 guestlink serves
//! (docs/protocol/desktop.md#logind-api, #choosing-the-served-session; docs/protocol/vdagent.md#session-agents).
//!
//! The target session is seat0's `ActiveSession` if it is a local graphical user or greeter session
//! ([`ActiveSession`]). Changes are followed through D-Bus signals — seat0's PropertiesChanged (a VT switch), the
//! session's PropertiesChanged (`LockedHint`, and `Type`/`Class`, which newer logind lets a session change) and its
//! `Lock`/`Unlock` signals. A signal is only a wake-up: the state is always re-read from logind, so a spoofed or
//! coalesced signal cannot make it wrong. A slow re-read ([`RESYNC_INTERVAL`]) is the safety net for a lost one.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use anyhow::{Context, Result};
use tokio::sync::watch;
use zbus::export::futures_core::Stream;
use zbus::zvariant::OwnedObjectPath;

/// Safety-net re-read period of [`Logind::follow_active_info`]; signals normally deliver a change at once.
pub const RESYNC_INTERVAL: Duration = Duration::from_secs(30);
/// Delay before re-subscribing after a logind/bus error.
const ERROR_RETRY: Duration = Duration::from_secs(1);
const LOGIND: &str = "org.freedesktop.login1";
const SEAT0: &str = "/org/freedesktop/login1/seat/seat0";

#[zbus::proxy(
    interface = "org.freedesktop.login1.Manager",
    default_service = "org.freedesktop.login1",
    default_path = "/org/freedesktop/login1",
    gen_blocking = false
)]
trait Manager {
    #[zbus(name = "GetSessionByPID")]
    fn get_session_by_pid(&self, pid: u32) -> zbus::Result<OwnedObjectPath>;
    #[zbus(name = "GetUserByPID")]
    fn get_user_by_pid(&self, pid: u32) -> zbus::Result<OwnedObjectPath>;
}

#[zbus::proxy(
    interface = "org.freedesktop.login1.Seat",
    default_service = "org.freedesktop.login1",
    default_path = "/org/freedesktop/login1/seat/seat0",
    gen_blocking = false
)]
trait Seat {
    #[zbus(property(emits_changed_signal = "false"))]
    fn active_session(&self) -> zbus::Result<(String, OwnedObjectPath)>;
}

#[zbus::proxy(
    interface = "org.freedesktop.login1.Session",
    default_service = "org.freedesktop.login1",
    gen_blocking = false
)]
trait Session {
    #[zbus(property)]
    fn id(&self) -> zbus::Result<String>;
    #[zbus(property)]
    fn user(&self) -> zbus::Result<(u32, OwnedObjectPath)>;
    #[zbus(property, name = "Type")]
    fn session_type(&self) -> zbus::Result<String>;
    #[zbus(property)]
    fn class(&self) -> zbus::Result<String>;
    #[zbus(property)]
    fn remote(&self) -> zbus::Result<bool>;
    #[zbus(property)]
    fn locked_hint(&self) -> zbus::Result<bool>;
    /// logind asks the session's screen locker to lock (`loginctl lock-session`).
    #[zbus(signal)]
    fn lock(&self) -> zbus::Result<()>;
    /// logind asks the session's screen locker to unlock.
    #[zbus(signal)]
    fn unlock(&self) -> zbus::Result<()>;
}

#[zbus::proxy(
    interface = "org.freedesktop.login1.User",
    default_service = "org.freedesktop.login1",
    gen_blocking = false
)]
trait User {
    #[zbus(property)]
    fn display(&self) -> zbus::Result<(String, OwnedObjectPath)>;
}

/// A connection to logind on the system bus.
#[derive(Debug, Clone)]
pub struct Logind {
    conn: zbus::Connection,
}

/// A peer's session: logind id and owner uid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerSession {
    /// Session id ("2", "c1", …).
    pub id: String,
    /// The session owner.
    pub uid: u32,
}

/// The session guestlink serves: seat0's active session, when it is a local x11/wayland user or greeter session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActiveSession {
    /// logind session id.
    pub id: String,
    /// The screen is locked (`LockedHint`, or a `Lock` signal not yet followed by `Unlock` or a falling
    /// `LockedHint`): a vdagent START is answered SESSION_LOCKED and no clipboard crosses.
    pub locked: bool,
    /// A `user` session, not a greeter: file transfer and the clipboard are allowed (a greeter gets
    /// FILE_XFER_DISABLE and no clipboard; docs/spice.md#locked-sessions-and-the-login-screen).
    pub file_xfer_allowed: bool,
}

/// The properties of a session that decide whether it is served (docs/protocol/desktop.md#choosing-the-served-session).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionProps {
    /// `Type`: "x11", "wayland", "tty", "mir", "unspecified".
    pub session_type: String,
    /// `Class`: "user", "greeter", "lock-screen", "background", …
    pub class: String,
    /// `Remote` (ssh, remote X).
    pub remote: bool,
    /// Locked (see [`ActiveSession::locked`]).
    pub locked: bool,
}

/// The target-session rule of docs/protocol/desktop.md#choosing-the-served-session: seat0's active session `id` is
/// served only if it is local, graphical (x11 or wayland) and of class user or greeter.
pub fn target_session(id: &str, props: &SessionProps) -> Option<ActiveSession> {
    let graphical = matches!(props.session_type.as_str(), "x11" | "wayland");
    let class_ok = matches!(props.class.as_str(), "user" | "greeter");
    (!id.is_empty() && graphical && class_ok && !props.remote).then(|| ActiveSession {
        id: id.to_owned(),
        locked: props.locked,
        file_xfer_allowed: props.class == "user",
    })
}

/// The signal subscriptions on the session currently active on seat0, made before its properties are read so
/// that no change between the read and the subscription is lost.
struct SessionWatch {
    path: OwnedObjectPath,
    props: zbus::fdo::PropertiesChangedStream,
    lock: LockStream,
    unlock: UnlockStream,
    /// A `Lock` signal arrived and no `Unlock` (nor a falling `LockedHint`) since.
    lock_requested: bool,
    /// `LockedHint` at the last read.
    last_hint: bool,
}

/// Why the follower woke up.
enum Wake {
    /// Something changed (or the safety-net timer fired): re-read.
    Reread,
    /// A `Lock` (true) or `Unlock` (false) signal on the watched session, or its `LockedHint` changed to false.
    LockSignal(bool),
    /// A signal stream ended (the bus connection is gone): re-subscribe after a delay.
    Ended,
}

/// The next item of a stream (`StreamExt::next` without a futures dependency).
fn next<S: Stream + Unpin>(s: &mut S) -> impl Future<Output = Option<S::Item>> + '_ {
    std::future::poll_fn(move |cx| Pin::new(&mut *s).poll_next(cx))
}

async fn session_wake(watch: &mut Option<SessionWatch>) -> Wake {
    let Some(w) = watch.as_mut() else {
        return std::future::pending().await;
    };
    tokio::select! {
        m = next(&mut w.props) => m.map_or(Wake::Ended, |sig| {
            if hint_cleared(&sig) {
                Wake::LockSignal(false)
            } else {
                Wake::Reread
            }
        }),
        m = next(&mut w.lock) => m.map_or(Wake::Ended, |_| Wake::LockSignal(true)),
        m = next(&mut w.unlock) => m.map_or(Wake::Ended, |_| Wake::LockSignal(false)),
    }
}

/// The signal reports `LockedHint` = false: the locker says the session is unlocked, which supersedes an
/// earlier `Lock` request (lockers such as GNOME's report the unlock only there, without an `Unlock` signal).
fn hint_cleared(sig: &zbus::fdo::PropertiesChanged) -> bool {
    sig.args().is_ok_and(|a| {
        matches!(
            a.changed_properties().get("LockedHint"),
            Some(zbus::zvariant::Value::Bool(false))
        )
    })
}

/// Waits `d`; true if every receiver of `tx` went away meanwhile.
async fn wait_or_closed<T>(tx: &watch::Sender<T>, d: Duration) -> bool {
    tokio::select! {
        _ = tx.closed() => true,
        _ = tokio::time::sleep(d) => false,
    }
}

impl Logind {
    /// Connects to the system bus.
    pub async fn connect() -> Result<Self> {
        let conn = zbus::Connection::system().await.context(
            "cannot reach systemd-logind on the system bus (use --no-logind without logind)",
        )?;
        Ok(Self { conn })
    }

    /// Uses an existing bus connection (tests with a private bus).
    #[cfg(test)]
    pub fn with_connection(conn: zbus::Connection) -> Self {
        Self { conn }
    }

    async fn session_proxy(&self, path: OwnedObjectPath) -> Result<SessionProxy<'static>> {
        Ok(SessionProxy::builder(&self.conn)
            .path(path)?
            .cache_properties(zbus::proxy::CacheProperties::No)
            .build()
            .await?)
    }

    async fn session_at(&self, path: OwnedObjectPath) -> Result<PeerSession> {
        let s = self.session_proxy(path).await?;
        Ok(PeerSession {
            id: s.id().await?,
            uid: s.user().await?.0,
        })
    }

    /// The session of process `pid`: its own scope, else (a systemd user unit) its user's display session.
    pub async fn session_of_pid(&self, pid: u32) -> Result<PeerSession> {
        let m = ManagerProxy::new(&self.conn).await?;
        match m.get_session_by_pid(pid).await {
            Ok(path) => self.session_at(path).await,
            Err(e) => {
                tracing::debug!(
                    pid,
                    "GetSessionByPID: {e}; trying the user's display session"
                );
                let user = m.get_user_by_pid(pid).await.context("GetUserByPID")?;
                let u = UserProxy::builder(&self.conn)
                    .path(user)?
                    .cache_properties(zbus::proxy::CacheProperties::No)
                    .build()
                    .await?;
                let (_, path) = u.display().await?;
                self.session_at(path).await
            }
        }
    }

    async fn properties_changed(
        &self,
        path: OwnedObjectPath,
    ) -> Result<zbus::fdo::PropertiesChangedStream> {
        let p = zbus::fdo::PropertiesProxy::builder(&self.conn)
            .destination(LOGIND)?
            .path(path)?
            .cache_properties(zbus::proxy::CacheProperties::No)
            .build()
            .await?;
        Ok(p.receive_properties_changed().await?)
    }

    async fn watch_session(&self, path: OwnedObjectPath) -> Result<SessionWatch> {
        let props = self.properties_changed(path.clone()).await?;
        let s = self.session_proxy(path.clone()).await?;
        Ok(SessionWatch {
            path,
            props,
            lock: s.receive_lock().await?,
            unlock: s.receive_unlock().await?,
            lock_requested: false,
            last_hint: false,
        })
    }

    /// Reads seat0's active session and decides whether it is served; (re)subscribes `watch` to it first.
    async fn evaluate(&self, watch: &mut Option<SessionWatch>) -> Result<Option<ActiveSession>> {
        let seat = SeatProxy::builder(&self.conn)
            .cache_properties(zbus::proxy::CacheProperties::No)
            .build()
            .await?;
        let (id, path) = seat.active_session().await?;
        if id.is_empty() {
            *watch = None;
            return Ok(None);
        }
        let w = match watch {
            Some(w) if w.path == path => w,
            _ => watch.insert(self.watch_session(path.clone()).await?),
        };
        let s = self.session_proxy(path).await?;
        let hint = s.locked_hint().await?;
        if w.last_hint && !hint {
            // The locker reports the unlock through the hint only (GNOME, KDE): it supersedes an earlier Lock.
            w.lock_requested = false;
        }
        w.last_hint = hint;
        let props = SessionProps {
            session_type: s.session_type().await?,
            class: s.class().await?,
            remote: s.remote().await?,
            locked: hint || w.lock_requested,
        };
        let target = target_session(&id, &props);
        if target.is_none() {
            tracing::debug!(session = %id, ?props, "active session is not served");
        }
        Ok(target)
    }

    /// Publishes the session guestlink serves ([`target_session`] of seat0's active session, `None` while there
    /// is none) into `tx`, following VT switches and lock changes through logind's signals, until every receiver
    /// is gone. The first reading is always sent (even if equal to the channel's initial value), later ones only
    /// when they differ. Errors are logged once and retried; logind not answering yet at boot is not fatal.
    pub async fn follow_active_info(self, tx: watch::Sender<Option<ActiveSession>>) {
        self.follow_active_info_every(tx, RESYNC_INTERVAL).await;
    }

    /// [`Self::follow_active_info`] with the safety-net period `resync` (tests make it long so that only signals
    /// can deliver a change).
    pub(crate) async fn follow_active_info_every(
        self,
        tx: watch::Sender<Option<ActiveSession>>,
        resync: Duration,
    ) {
        let mut first = true;
        let mut last_err = String::new();
        loop {
            if let Err(e) = self.follow_once(&tx, resync, &mut first).await {
                let text = format!("{e:#}");
                if text != last_err {
                    tracing::warn!("logind: active session unknown: {text}");
                    last_err = text;
                }
            }
            if tx.is_closed() || wait_or_closed(&tx, ERROR_RETRY).await {
                return;
            }
        }
    }

    /// Subscribes and follows until an error (returned) or until the receivers are gone (`Ok`).
    async fn follow_once(
        &self,
        tx: &watch::Sender<Option<ActiveSession>>,
        resync: Duration,
        first: &mut bool,
    ) -> Result<()> {
        // Subscribed before the first read, so a VT switch right after it is not missed.
        let mut seat_changes = self
            .properties_changed(OwnedObjectPath::try_from(SEAT0)?)
            .await
            .context("subscribing to seat0")?;
        let mut watch: Option<SessionWatch> = None;
        loop {
            let info = self.evaluate(&mut watch).await?;
            publish(tx, info, first);
            let wake = tokio::select! {
                _ = tx.closed() => return Ok(()),
                m = next(&mut seat_changes) => m.map_or(Wake::Ended, |_| Wake::Reread),
                w = session_wake(&mut watch) => w,
                _ = tokio::time::sleep(resync) => Wake::Reread,
            };
            match wake {
                Wake::Reread => {}
                Wake::LockSignal(locked) => {
                    if let Some(w) = watch.as_mut() {
                        w.lock_requested = locked;
                    }
                }
                Wake::Ended => anyhow::bail!("logind signal stream ended"),
            }
        }
    }
}

/// Sends `info`: always the first time, later only a change.
fn publish(
    tx: &watch::Sender<Option<ActiveSession>>,
    info: Option<ActiveSession>,
    first: &mut bool,
) {
    let log = |i: &Option<ActiveSession>| tracing::info!(session = ?i, "served session");
    if std::mem::take(first) {
        log(&info);
        tx.send_replace(info);
        return;
    }
    tx.send_if_modified(|cur| {
        let changed = *cur != info;
        if changed {
            log(&info);
            *cur = info;
        }
        changed
    });
}
