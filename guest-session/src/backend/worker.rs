//! The handle half of a backend thread (X11, Wayland): the [`DesktopBackend`] calls become [`Command`]s on a
//! queue, and one byte on a wake-up socket makes the thread's `poll(2)` (display fd + wake-up fd) return.
//! Dropping the handle sends [`Command::Shutdown`] and joins the thread.

use std::io::Write;
use std::os::unix::net::UnixStream;
use std::sync::mpsc;
use std::thread::JoinHandle;

use anyhow::{Context, Result};
use guestlink_protocol::session::SessionMonitor;
use guestlink_protocol::vdagent::{ClipboardType, Selection};

use super::{BackendFeatures, DesktopBackend};

/// Work for a backend thread: the [`DesktopBackend`] calls, queued.
#[derive(Debug)]
pub(crate) enum Command {
    Grab(Selection, Vec<ClipboardType>),
    Request(Selection, ClipboardType),
    Data(Selection, ClipboardType, Vec<u8>),
    Release(Selection),
    ReleaseHostOwned,
    MaxClipboard(Option<usize>),
    /// `VD_AGENT_CONFIG_MONITORS_FLAG_*` and the monitors.
    Monitors(u32, Vec<SessionMonitor>),
    Resync,
    /// A resize finished elsewhere (Wayland: kscreen-doctor): report the layout.
    ReportGeometry,
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

/// The handle of a running backend thread.
#[derive(Debug)]
pub(crate) struct Worker {
    tx: mpsc::Sender<Command>,
    wake: UnixStream,
    thread: Option<JoinHandle<()>>,
}

impl Worker {
    /// Wraps a started thread, its command queue and the write end of its wake-up pair.
    pub(crate) fn new(tx: mpsc::Sender<Command>, wake: UnixStream, thread: JoinHandle<()>) -> Self {
        Worker {
            tx,
            wake,
            thread: Some(thread),
        }
    }

    /// Queues `cmd` and wakes the thread (a full socket buffer means a wake-up is already pending).
    pub(crate) fn send(&self, cmd: Command) {
        if self.tx.send(cmd).is_ok() {
            let _ = (&self.wake).write(&[1]);
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.send(Command::Shutdown);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A backend running on its own thread ([`Worker`]), as the agent sees it.
#[derive(Debug)]
pub(crate) struct ThreadBackend {
    name: &'static str,
    features: BackendFeatures,
    worker: Worker,
}

impl ThreadBackend {
    /// The backend `name` with `features`, served by `worker`'s thread.
    pub(crate) fn new(name: &'static str, features: BackendFeatures, worker: Worker) -> Self {
        Self {
            name,
            features,
            worker,
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
    fn clipboard_grab(&self, selection: Selection, types: Vec<ClipboardType>) {
        self.worker.send(Command::Grab(selection, types));
    }
    fn clipboard_request(&self, selection: Selection, data_type: ClipboardType) {
        self.worker.send(Command::Request(selection, data_type));
    }
    fn clipboard_data(&self, selection: Selection, data_type: ClipboardType, data: Vec<u8>) {
        self.worker.send(Command::Data(selection, data_type, data));
    }
    fn clipboard_release(&self, selection: Selection) {
        self.worker.send(Command::Release(selection));
    }
    fn release_host_selections(&self) {
        self.worker.send(Command::ReleaseHostOwned);
    }
    fn set_max_clipboard(&self, max: Option<usize>) {
        self.worker.send(Command::MaxClipboard(max));
    }
    fn apply_monitors(&self, flags: u32, monitors: Vec<SessionMonitor>) {
        self.worker.send(Command::Monitors(flags, monitors));
    }
    fn resync(&self) {
        self.worker.send(Command::Resync);
    }
    fn displays_remapped(&self) {
        self.worker.send(Command::ReportGeometry);
    }
}
