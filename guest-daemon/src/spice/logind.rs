//! systemd-logind over zbus: which session a peer process belongs to, and which session is active on seat0
//! (reference desktop-integration.md §6).
//!
//! The active session is re-read once a second (a cheap property get) rather than followed through
//! PropertiesChanged, which keeps this module free of stream plumbing; a VT switch is noticed within a second.

use std::time::Duration;

use anyhow::{Context, Result};
use tokio::sync::watch;
use zbus::zvariant::OwnedObjectPath;

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

    async fn session_at(&self, path: OwnedObjectPath) -> Result<PeerSession> {
        let s = SessionProxy::builder(&self.conn)
            .path(path)?
            .cache_properties(zbus::proxy::CacheProperties::No)
            .build()
            .await?;
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

    async fn active(&self) -> Result<Option<String>> {
        let seat = SeatProxy::builder(&self.conn)
            .cache_properties(zbus::proxy::CacheProperties::No)
            .build()
            .await?;
        let (id, _) = seat.active_session().await?;
        Ok((!id.is_empty()).then_some(id))
    }

    /// Publishes seat0's active session into `tx` until every receiver is gone.
    pub async fn follow_active(self, tx: watch::Sender<Option<String>>) {
        let mut last_err = String::new();
        loop {
            match self.active().await {
                Ok(id) => {
                    tx.send_if_modified(|cur| {
                        let changed = *cur != id;
                        if changed {
                            tracing::info!(session = ?id, "active session");
                            *cur = id.clone();
                        }
                        changed
                    });
                }
                Err(e) => {
                    let text = e.to_string();
                    if text != last_err {
                        tracing::warn!("logind: active session unknown: {text}");
                        last_err = text;
                    }
                }
            }
            if tx.is_closed() {
                return;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }
}
