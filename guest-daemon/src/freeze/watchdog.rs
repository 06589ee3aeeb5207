//! The freeze watchdog: an OS thread of its own (not a task of the QGA runtime), so the auto-thaw and the retry of
//! a failed thaw run on time whatever the runtimes are doing. When its timer fires it runs the thaw on a small
//! runtime of its own (the thaw hook is async), taking the freezer's lock like any other thaw; a timer made stale
//! by a later freeze or thaw (generation mismatch) does nothing.

use std::sync::mpsc::{channel, RecvTimeoutError, Sender};
use std::sync::{Mutex, Weak};
use std::time::{Duration, Instant};

use super::Freezer;

/// Why the timer was armed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fire {
    /// `--auto-thaw`: no thaw came in time.
    AutoThaw,
    /// A thaw failed and is tried again.
    Retry,
}

#[derive(Debug)]
enum Msg {
    Arm(u64, Instant, Fire),
    Disarm,
}

/// Handle to the watchdog thread; the thread ends when this is dropped.
#[derive(Debug)]
pub struct Watchdog {
    tx: Option<Mutex<Sender<Msg>>>,
}

impl Watchdog {
    /// Starts the thread for `freezer`.
    pub fn spawn(freezer: Weak<Freezer>) -> std::io::Result<Watchdog> {
        let (tx, rx) = channel::<Msg>();
        std::thread::Builder::new()
            .name("guestlinkd-watchdog".into())
            .spawn(move || {
                let mut rt = None;
                let mut pending: Option<(u64, Instant, Fire)> = None;
                loop {
                    let msg = match pending {
                        Some((_, at, _)) => {
                            match rx.recv_timeout(at.saturating_duration_since(Instant::now())) {
                                Ok(m) => Some(m),
                                Err(RecvTimeoutError::Timeout) => None,
                                Err(RecvTimeoutError::Disconnected) => return,
                            }
                        }
                        None => match rx.recv() {
                            Ok(m) => Some(m),
                            Err(_) => return,
                        },
                    };
                    match msg {
                        Some(Msg::Arm(g, at, why)) => pending = Some((g, at, why)),
                        Some(Msg::Disarm) => pending = None,
                        None => {
                            let Some((generation, _, why)) = pending.take() else {
                                continue;
                            };
                            let Some(f) = freezer.upgrade() else { return };
                            if rt.is_none() {
                                rt = match tokio::runtime::Builder::new_current_thread()
                                    .enable_all()
                                    .build()
                                {
                                    Ok(rt) => Some(rt),
                                    Err(e) => {
                                        tracing::error!("watchdog runtime: {e}; retrying in 1 s");
                                        pending =
                                            Some((generation, Instant::now() + RETRY_SETUP, why));
                                        continue;
                                    }
                                };
                            }
                            if let Some(rt) = &rt {
                                rt.block_on(f.fired(generation, why));
                            }
                        }
                    }
                }
            })?;
        Ok(Watchdog {
            tx: Some(Mutex::new(tx)),
        })
    }

    /// A watchdog that never fires (only if the thread could not be started; the freezer then refuses to start).
    pub fn disabled() -> Watchdog {
        Watchdog { tx: None }
    }

    /// (Re)arms the timer: fire `why` for `generation` after `delay`.
    pub fn arm(&self, generation: u64, delay: Duration, why: Fire) {
        self.send(Msg::Arm(generation, Instant::now() + delay, why));
    }

    /// Cancels the timer.
    pub fn disarm(&self) {
        self.send(Msg::Disarm);
    }

    fn send(&self, m: Msg) {
        if let Some(tx) = &self.tx {
            let _ = tx.lock().unwrap_or_else(|p| p.into_inner()).send(m);
        }
    }
}

/// Wait before trying again when the thread cannot build its runtime (out of memory or descriptors).
const RETRY_SETUP: Duration = Duration::from_secs(1);
