//! The I/O side of [`super::launch`]: watches the served session and the agents' connections, and asks the
//! launcher (`guestlink-agent-launch.socket`, a root-only unix socket; docs/desktops.md#an-agent-in-every-session)
//! to start an agent for a session. The request is the session id and a newline; the launcher checks everything
//! again with logind itself and answers one line (`ok …` or `error …`), which is only logged here.
//!
//! Agent connections are observed on the way from the accept loop to the core ([`spawn`] returns the sender the
//! accept loop uses); events are passed on unchanged and in order, through a channel of one, so the core's
//! back-pressure and memory bounds stay what they are.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;
use tokio::sync::{mpsc, watch};

use super::agents::Event;
use super::launch::{LaunchPlan, LaunchPolicy};
use super::log_limit::log_limited;
use super::logind::ActiveSession;

/// A request that takes longer than this counts as failed (the launcher waits up to 30 s for the user manager;
/// a loaded guest is slow to start processes). The launch itself may still succeed after it.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(120);
/// Longest answer line read from the launcher.
const MAX_ANSWER: u64 = 1024;

/// Starts the launch follower and returns the sender the accept loop must use instead of `core` (events reach
/// `core` unchanged). With `socket` = `None` (launching off) it is `core` itself and nothing is started.
pub fn spawn(
    socket: Option<PathBuf>,
    served: watch::Receiver<Option<ActiveSession>>,
    core: mpsc::Sender<Event>,
) -> mpsc::Sender<Event> {
    let Some(socket) = socket else {
        return core;
    };
    tracing::info!(launcher = %socket.display(), "session agents are launched where none connects");
    let (tx, rx) = mpsc::channel(1);
    tokio::spawn(follow(socket, served, rx, core));
    tx
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(t) => tokio::time::sleep_until(tokio::time::Instant::from_std(t)).await,
        None => std::future::pending().await,
    }
}

async fn follow(
    socket: PathBuf,
    mut served: watch::Receiver<Option<ActiveSession>>,
    mut events: mpsc::Receiver<Event>,
    core: mpsc::Sender<Event>,
) {
    let mut plan = LaunchPlan::new(LaunchPolicy::default());
    let (done_tx, mut done_rx) = mpsc::channel::<(String, bool)>(1);
    let current = served.borrow_and_update().as_ref().map(|a| a.id.clone());
    plan.set_served(current.as_deref(), Instant::now());
    loop {
        tokio::select! {
            ev = events.recv() => {
                let Some(ev) = ev else { return };
                match &ev {
                    Event::Connected { id, session, .. } => plan.agent_connected(*id, session),
                    Event::Gone(id) => plan.agent_gone(*id, Instant::now()),
                    _ => {}
                }
                if core.send(ev).await.is_err() {
                    return;
                }
            }
            r = served.changed() => {
                if r.is_err() {
                    // The logind follower is gone (the core is shutting down): only pass events on.
                    while let Some(ev) = events.recv().await {
                        if core.send(ev).await.is_err() {
                            return;
                        }
                    }
                    return;
                }
                let s = served.borrow_and_update().as_ref().map(|a| a.id.clone());
                plan.set_served(s.as_deref(), Instant::now());
            }
            Some((s, started)) = done_rx.recv() => plan.launch_done(&s, started, Instant::now()),
            _ = sleep_until(plan.next_check()) => {
                if let Some(session) = plan.due(Instant::now()) {
                    let last = plan.gave_up(&session);
                    let (socket, done) = (socket.clone(), done_tx.clone());
                    tokio::spawn(async move {
                        let started = request(&socket, &session, last).await;
                        let _ = done.send((session, started)).await;
                    });
                }
            }
        }
    }
}

/// Asks the launcher for an agent in `session` and logs the outcome; true if it reports the agent started.
async fn request(socket: &std::path::Path, session: &str, last: bool) -> bool {
    tracing::info!(
        session,
        "no session agent connected: asking the launcher for one"
    );
    let r = tokio::time::timeout(REQUEST_TIMEOUT, exchange(socket, session)).await;
    let outcome = match r {
        Ok(Ok(answer)) => answer,
        Ok(Err(e)) => format!("error {e}"),
        Err(_) => "error: no answer in time".into(),
    };
    let started = outcome.starts_with("ok");
    if started {
        tracing::info!(session, "launcher: {outcome}");
    } else {
        log_limited!(warn, session, "launcher: no agent started: {outcome}");
    }
    if last {
        tracing::warn!(
            session,
            "last launch for this session: no further agent will be launched for it"
        );
    }
    started
}

async fn exchange(socket: &std::path::Path, session: &str) -> std::io::Result<String> {
    use tokio::io::AsyncReadExt;
    let mut s = UnixStream::connect(socket).await?;
    s.write_all(format!("{session}\n").as_bytes()).await?;
    s.shutdown().await?;
    let mut line = String::new();
    BufReader::new(s.take(MAX_ANSWER))
        .read_line(&mut line)
        .await?;
    Ok(line
        .trim_end()
        .chars()
        .filter(|c| !c.is_control())
        .collect())
}
