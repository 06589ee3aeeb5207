//! The handle half of a backend thread (X11, Wayland): commands go through a queue, and one byte on a wake-up
//! socket makes the thread's `poll(2)` (display fd + wake-up fd) return. Dropping the handle sends the shutdown
//! command and joins the thread.

use std::io::Write;
use std::os::unix::net::UnixStream;
use std::sync::mpsc;
use std::thread::JoinHandle;

use anyhow::{Context, Result};

/// A backend thread's command type.
pub(crate) trait WorkerCommand: Send + 'static {
    /// The command that makes the thread return.
    fn shutdown() -> Self;
}

/// A non-blocking socket pair: the handle writes to the first, the thread polls and drains the second.
pub(crate) fn wake_pair() -> Result<(UnixStream, UnixStream)> {
    let (tx, rx) = UnixStream::pair().context("wake-up socket pair")?;
    tx.set_nonblocking(true)?;
    rx.set_nonblocking(true)?;
    Ok((tx, rx))
}

/// The handle of a running backend thread.
#[derive(Debug)]
pub(crate) struct Worker<C: WorkerCommand> {
    tx: mpsc::Sender<C>,
    wake: UnixStream,
    thread: Option<JoinHandle<()>>,
}

impl<C: WorkerCommand> Worker<C> {
    /// Wraps a started thread, its command queue and the write end of its wake-up pair.
    pub(crate) fn new(tx: mpsc::Sender<C>, wake: UnixStream, thread: JoinHandle<()>) -> Self {
        Worker {
            tx,
            wake,
            thread: Some(thread),
        }
    }

    /// Queues `cmd` and wakes the thread (a full socket buffer means a wake-up is already pending).
    pub(crate) fn send(&self, cmd: C) {
        if self.tx.send(cmd).is_ok() {
            let _ = (&self.wake).write(&[1]);
        }
    }
}

impl<C: WorkerCommand> Drop for Worker<C> {
    fn drop(&mut self) {
        self.send(C::shutdown());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
