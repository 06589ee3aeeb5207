//! What the thread-based backends (X11, Wayland) share: [`ThreadBackend`] implements [`DesktopBackend`] once by
//! queueing each [`DesktopCommand`] for the backend's thread, and one byte on a wake-up socket makes the thread's
//! `poll(2)` (display fd + wake-up fd) return. A backend only writes its thread loop over [`Job`]s. Dropping the
//! handle sends [`Job::Shutdown`] and joins the thread.

use std::io::Write;
use std::os::unix::net::UnixStream;
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;

use anyhow::{Context, Result};

use super::{BackendFeatures, DesktopBackend, DesktopCommand};

/// What a backend thread receives.
#[derive(Debug)]
pub(crate) enum Job {
    /// A command for the backend.
    Command(DesktopCommand),
    /// The thread returns.
    Shutdown,
}

/// A non-blocking socket pair: the handle writes to the first, the thread polls and drains the second.
pub(crate) fn wake_pair() -> Result<(UnixStream, UnixStream)> {
    let (tx, rx) = UnixStream::pair().context("wake-up socket pair")?;
    tx.set_nonblocking(true)?;
    rx.set_nonblocking(true)?;
    Ok((tx, rx))
}

/// The sending side of a backend thread's queue; clones go to helper threads (KDE's kscreen-doctor) that report
/// back to it.
#[derive(Debug, Clone)]
pub(crate) struct Inbox {
    tx: mpsc::Sender<Job>,
    wake: Arc<UnixStream>,
}

impl Inbox {
    /// The queue `tx` and the write end of the thread's wake-up pair.
    pub(crate) fn new(tx: mpsc::Sender<Job>, wake: UnixStream) -> Self {
        Self {
            tx,
            wake: Arc::new(wake),
        }
    }

    /// Queues `job` and wakes the thread (a full socket buffer means a wake-up is already pending).
    pub(crate) fn send(&self, job: Job) {
        if self.tx.send(job).is_ok() {
            let _ = (&*self.wake).write(&[1]);
        }
    }
}

/// A backend running on its own thread, as the daemon connection sees it.
#[derive(Debug)]
pub(crate) struct ThreadBackend {
    name: &'static str,
    features: BackendFeatures,
    inbox: Inbox,
    thread: Option<JoinHandle<()>>,
}

impl ThreadBackend {
    /// The backend `name` with `features`, served by `thread`, which reads `inbox`'s queue.
    pub(crate) fn new(
        name: &'static str,
        features: BackendFeatures,
        inbox: Inbox,
        thread: JoinHandle<()>,
    ) -> Self {
        Self {
            name,
            features,
            inbox,
            thread: Some(thread),
        }
    }
}

impl DesktopBackend for ThreadBackend {
    fn name(&self) -> &'static str {
        self.name
    }
    fn features(&self) -> BackendFeatures {
        self.features
    }
    fn command(&self, cmd: DesktopCommand) {
        self.inbox.send(Job::Command(cmd));
    }
}

impl Drop for ThreadBackend {
    fn drop(&mut self) {
        self.inbox.send(Job::Shutdown);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
