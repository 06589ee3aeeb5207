//! The X11 backend: clipboard (CLIPBOARD and PRIMARY, INCR both ways) and RandR resize, with x11rb.
//!
//! One dedicated thread owns a blocking [`RustConnection`]. It waits with `poll(2)` on the X connection and on a
//! wake-up socket; the handle ([`ThreadBackend`], from [`start`]) queues each [`DesktopCommand`] and writes one
//! byte to wake it. Nothing in the thread waits without a deadline: reads from guest applications, host answers
//! and INCR transfers all expire (see [`serve`] and [`read`]). Events travel back as [`DesktopEvent`]s.

mod atoms;
pub mod cvt;
mod follow_preferred;
mod randr;
mod read;
mod serve;

use std::collections::VecDeque;
use std::io::Read;
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use guestlink_protocol::session::GeometryMonitor;
use guestlink_protocol::vdagent::{ClipboardType, Selection};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use x11rb::connection::{Connection, RequestConnection as _};
use x11rb::errors::{ConnectionError, ReplyError, ReplyOrIdError};
use x11rb::protocol::xfixes::{ConnectionExt as _, SelectionEventMask};
use x11rb::protocol::xproto::{
    Atom, ConnectionExt as _, CreateWindowAux, EventMask, PropMode, Property, Window, WindowClass,
};
use x11rb::protocol::Event;
use x11rb::rust_connection::RustConnection;
use x11rb::wrapper::ConnectionExt as _;

use self::atoms::Atoms;
use super::worker::{wake_pair, Inbox, Job, ThreadBackend};
use super::{BackendFeatures, DesktopCommand, DesktopEvent, EventSender, HARD_MAX_CLIPBOARD};
/// Largest INCR chunk we write (spice-vdagent uses the same cap).
const MAX_CHUNK: usize = 256 * 1024;

/// Connects to `$DISPLAY` and starts the X11 thread.
pub fn start(events: EventSender) -> Result<ThreadBackend> {
    let (wake_tx, wake_rx) = wake_pair()?;
    let state = X11::connect(events.clone(), wake_rx)?;
    let (tx, rx) = mpsc::channel();
    let thread = std::thread::Builder::new()
        .name("x11".into())
        .spawn(move || {
            let mut state = state;
            if let Err(e) = state.run(&rx) {
                tracing::error!("X11 backend stopped: {e:#}");
                let _ = events.send(DesktopEvent::Fatal(format!("{e:#}")));
            }
        })
        .context("spawning the X11 thread")?;
    let features = BackendFeatures {
        clipboard: true,
        primary: true,
        resize: true,
    };
    Ok(ThreadBackend::new(
        "x11",
        features,
        Inbox::new(tx, wake_tx),
        thread,
    ))
}

/// Index of a handled selection (0 = CLIPBOARD, 1 = PRIMARY).
fn sel_index(s: Selection) -> Option<usize> {
    match s {
        Selection::Clipboard => Some(0),
        Selection::Primary => Some(1),
        _ => None,
    }
}

const SELECTIONS: [Selection; 2] = [Selection::Clipboard, Selection::Primary];

/// Keeps the thread alive through X protocol errors of single requests (a requestor window that vanished, a
/// RandR request the server refuses): only a broken connection is fatal.
fn survivable(r: Result<()>) -> Result<()> {
    let Err(e) = r else { return Ok(()) };
    let connection_lost = e.chain().any(|c| {
        c.downcast_ref::<ConnectionError>().is_some()
            || matches!(
                c.downcast_ref::<ReplyError>(),
                Some(ReplyError::ConnectionError(_))
            )
            || matches!(
                c.downcast_ref::<ReplyOrIdError>(),
                Some(ReplyOrIdError::ConnectionError(_))
            )
            || c.downcast_ref::<std::io::Error>().is_some()
            || c.downcast_ref::<nix::errno::Errno>().is_some()
    });
    if connection_lost {
        return Err(e);
    }
    tracing::warn!("X11 request failed: {e:#}");
    Ok(())
}

/// The state owned by the X11 thread.
pub(crate) struct X11 {
    conn: RustConnection,
    root: Window,
    win: Window,
    atoms: Atoms,
    events: EventSender,
    wake: UnixStream,
    pending: VecDeque<Event>,
    chunk: usize,
    max_clipboard: usize,
    serve: serve::ServeState,
    read: read::ReadState,
    randr: Option<randr::RandrState>,
    last_geometry: Option<Vec<GeometryMonitor>>,
    follow: crate::backend::follow_preferred::Follower,
}

impl X11 {
    fn connect(events: EventSender, wake: UnixStream) -> Result<Self> {
        let (conn, screen) = RustConnection::connect(None).context("connecting to the X server")?;
        let root = conn.setup().roots[screen].root;
        let win = conn.generate_id()?;
        conn.create_window(
            x11rb::COPY_DEPTH_FROM_PARENT,
            win,
            root,
            0,
            0,
            1,
            1,
            0,
            WindowClass::INPUT_ONLY,
            x11rb::COPY_FROM_PARENT,
            &CreateWindowAux::new().event_mask(EventMask::PROPERTY_CHANGE),
        )?
        .check()
        .context("creating the selection window")?;
        let atoms = Atoms::new(&conn)?.reply()?;
        let xf = conn.xfixes_query_version(5, 0)?.reply().context("XFixes")?;
        tracing::debug!(major = xf.major_version, minor = xf.minor_version, "XFixes");
        let mask = SelectionEventMask::SET_SELECTION_OWNER
            | SelectionEventMask::SELECTION_WINDOW_DESTROY
            | SelectionEventMask::SELECTION_CLIENT_CLOSE;
        for sel in [atoms.CLIPBOARD, atoms.PRIMARY] {
            conn.xfixes_select_selection_input(root, sel, mask)?
                .check()?;
        }
        let chunk = conn
            .maximum_request_bytes()
            .saturating_sub(100)
            .min(MAX_CHUNK);
        let randr = randr::RandrState::init(&conn, root);
        conn.flush()?;
        tracing::info!(
            chunk,
            randr = randr.is_some(),
            "X11 backend ready on screen {screen}"
        );
        Ok(Self {
            conn,
            root,
            win,
            atoms,
            events,
            wake,
            pending: VecDeque::new(),
            chunk,
            max_clipboard: HARD_MAX_CLIPBOARD,
            serve: serve::ServeState::default(),
            read: read::ReadState::default(),
            randr,
            last_geometry: None,
            follow: crate::backend::follow_preferred::Follower::from_env(),
        })
    }

    fn emit(&self, ev: DesktopEvent) {
        let _ = self.events.send(ev);
    }

    fn sel_atom(&self, i: usize) -> Atom {
        if i == 0 {
            self.atoms.CLIPBOARD
        } else {
            self.atoms.PRIMARY
        }
    }

    fn sel_of_atom(&self, a: Atom) -> Option<usize> {
        if a == self.atoms.CLIPBOARD {
            Some(0)
        } else if a == self.atoms.PRIMARY {
            Some(1)
        } else {
            None
        }
    }

    fn run(&mut self, rx: &mpsc::Receiver<Job>) -> Result<()> {
        self.report_geometry(true)?;
        survivable(self.follow_preferred())?;
        loop {
            let mut buf = [0u8; 64];
            while matches!((&self.wake).read(&mut buf), Ok(n) if n > 0) {}
            loop {
                match rx.try_recv() {
                    Ok(Job::Shutdown) | Err(mpsc::TryRecvError::Disconnected) => return Ok(()),
                    Ok(Job::Command(cmd)) => {
                        let r = self.command(cmd);
                        survivable(r)?;
                    }
                    Err(mpsc::TryRecvError::Empty) => break,
                }
            }
            while let Some(ev) = self.next_event()? {
                let r = self.event(ev);
                survivable(r)?;
            }
            let now = Instant::now();
            let r = self.expire(now);
            survivable(r)?;
            self.conn.flush()?;
            if !self.pending.is_empty() {
                continue;
            }
            let timeout = self
                .next_deadline()
                .map(|d| d.saturating_duration_since(now))
                .unwrap_or(Duration::from_secs(5))
                .min(Duration::from_secs(5));
            self.wait(timeout)?;
        }
    }

    /// Blocks until the X connection or the wake socket is readable, or `timeout`.
    fn wait(&self, timeout: Duration) -> Result<()> {
        let ms = u16::try_from(timeout.as_millis().max(1)).unwrap_or(u16::MAX);
        let mut fds = [
            PollFd::new(self.conn.stream().as_fd(), PollFlags::POLLIN),
            PollFd::new(self.wake.as_fd(), PollFlags::POLLIN),
        ];
        match poll(&mut fds, PollTimeout::from(ms)) {
            Ok(_) | Err(nix::errno::Errno::EINTR) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    fn next_event(&mut self) -> Result<Option<Event>> {
        if let Some(ev) = self.pending.pop_front() {
            return Ok(Some(ev));
        }
        Ok(self.conn.poll_for_event()?)
    }

    /// Waits up to `timeout` for an event matching `pred`; other events are kept for the main loop.
    fn wait_for(
        &mut self,
        timeout: Duration,
        pred: impl Fn(&Event) -> bool,
    ) -> Result<Option<Event>> {
        let deadline = Instant::now() + timeout;
        loop {
            self.conn.flush()?;
            while let Some(ev) = self.conn.poll_for_event()? {
                if pred(&ev) {
                    return Ok(Some(ev));
                }
                self.pending.push_back(ev);
            }
            let now = Instant::now();
            if now >= deadline {
                return Ok(None);
            }
            self.wait(deadline - now)?;
        }
    }

    /// A server timestamp: a zero-length property append on the own window (ICCCM §2.1).
    fn server_time(&mut self) -> Result<u32> {
        let prop = self.atoms.GUESTLINK_TIMESTAMP;
        let win = self.win;
        self.conn
            .change_property8(PropMode::APPEND, win, prop, self.atoms.STRING, &[])?;
        let ev = self.wait_for(
            Duration::from_secs(2),
            |e| matches!(e, Event::PropertyNotify(p) if p.window == win && p.atom == prop),
        )?;
        match ev {
            Some(Event::PropertyNotify(p)) => Ok(p.time),
            _ => {
                tracing::warn!("no PropertyNotify for the timestamp; using CurrentTime");
                Ok(x11rb::CURRENT_TIME)
            }
        }
    }

    fn command(&mut self, cmd: DesktopCommand) -> Result<()> {
        match cmd {
            DesktopCommand::ClipboardGrab { selection, types } => {
                if let Some(i) = sel_index(selection) {
                    self.host_grab(i, types)?;
                }
            }
            DesktopCommand::ClipboardRequest {
                selection,
                data_type,
            } => match sel_index(selection) {
                Some(i) => self.host_request(i, data_type)?,
                None => self.emit(DesktopEvent::ClipboardData {
                    selection,
                    data_type: ClipboardType::None,
                    data: Vec::new(),
                }),
            },
            DesktopCommand::ClipboardData {
                selection,
                data_type,
                data,
            } => {
                if let Some(i) = sel_index(selection) {
                    self.host_data(i, data_type, data)?;
                }
            }
            DesktopCommand::ClipboardRelease { selection } => {
                if let Some(i) = sel_index(selection) {
                    self.host_release(i)?;
                }
            }
            DesktopCommand::ReleaseHostSelections => {
                for i in 0..2 {
                    self.host_release(i)?;
                }
            }
            DesktopCommand::MaxClipboard(max) => {
                self.max_clipboard = max.unwrap_or(HARD_MAX_CLIPBOARD).min(HARD_MAX_CLIPBOARD);
                tracing::debug!(max = self.max_clipboard, "max clipboard");
            }
            DesktopCommand::ApplyMonitors { flags, monitors } => {
                self.follow.host_request(Instant::now());
                self.apply_monitors(flags, &monitors)?;
                self.report_geometry(true)?;
            }
            DesktopCommand::Resync => {
                self.report_geometry(true)?;
                self.reannounce();
            }
            DesktopCommand::ReportGeometry => self.report_geometry(false)?,
        }
        Ok(())
    }

    fn event(&mut self, ev: Event) -> Result<()> {
        match ev {
            Event::SelectionRequest(e) => self.on_selection_request(&e)?,
            Event::SelectionClear(e) => self.on_selection_clear(&e),
            Event::SelectionNotify(e) => self.on_selection_notify(&e)?,
            Event::XfixesSelectionNotify(e) => self.on_owner_change(&e)?,
            Event::PropertyNotify(e) => {
                if e.state == Property::DELETE {
                    self.on_property_delete(&e)?;
                } else if e.window == self.win {
                    self.on_property_new_value(&e)?;
                }
            }
            Event::RandrScreenChangeNotify(_) => {
                self.report_geometry(false)?;
                self.follow_preferred()?;
            }
            Event::RandrNotify(_) => self.follow_preferred()?,
            Event::Error(e) => tracing::debug!(?e, "X11 error"),
            _ => {}
        }
        Ok(())
    }

    fn next_deadline(&self) -> Option<Instant> {
        [self.serve.next_deadline(), self.read.next_deadline()]
            .into_iter()
            .flatten()
            .min()
    }

    fn expire(&mut self, now: Instant) -> Result<()> {
        self.expire_serve(now)?;
        self.expire_read(now)
    }

    /// Sends the geometry if it changed since the last report (or always with `force`).
    fn report_geometry(&mut self, force: bool) -> Result<()> {
        let geometry = self.geometry()?;
        if force || self.last_geometry.as_ref() != Some(&geometry) {
            tracing::info!(?geometry, "geometry");
            self.last_geometry = Some(geometry.clone());
            self.emit(DesktopEvent::Geometry(geometry));
        }
        Ok(())
    }
}
