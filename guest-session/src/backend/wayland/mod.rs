//! The native Wayland backend: clipboard over data-control (ext-data-control-v1, else zwlr-data-control-v1) and
//! resize over wlr-output-management or, on KDE, kscreen-doctor ([`super::kde`]), with a direct `wayland-client`
//! implementation. [`Compositor`] reads the globals that [`super::detect::plan`] decides on; [`start`] then serves
//! on the same connection. GNOME, which has no data-control, has its own backend ([`super::gnome`]).
//!
//! Why not wl-clipboard-rs: its copy/paste API is one-shot (a paste connects, reads and disconnects; a copy
//! serves from a forked/background thread until replaced), while this agent lives as long as the session, must
//! see every selection change, and must answer pastes by asking the host first. So one dedicated thread owns a
//! blocking [`Connection`]; it waits with `poll(2)` on the Wayland socket and a wake-up socket, like the X11
//! backend. Data moves through pipes on short-lived threads ([`io`]).

mod clipboard;
mod data_control;
mod io;
mod output;

use std::io::Read;
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use guestlink_protocol::session::GeometryMonitor;
use guestlink_protocol::vdagent::Selection;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use wayland_client::globals::{registry_queue_init, GlobalList, GlobalListContents};
use wayland_client::protocol::{wl_registry, wl_seat::WlSeat};
use wayland_client::{Connection, Dispatch, EventQueue, QueueHandle};
use wayland_protocols::xdg::xdg_output::zv1::client::zxdg_output_manager_v1::ZxdgOutputManagerV1;

use super::detect::{self, ClipboardVia, ResizeVia};
use super::worker::{wake_pair, Inbox, Job, ThreadBackend};
use super::{
    follow_preferred, kde, BackendFeatures, DesktopCommand, DesktopEvent, EventSender,
    HARD_MAX_CLIPBOARD,
};
use data_control::Manager;

/// The state owned by the Wayland thread.
#[derive(Debug)]
pub(crate) struct State {
    events: EventSender,
    qh: QueueHandle<State>,
    clip: Option<clipboard::Clipboard>,
    outputs: Vec<output::WlOut>,
    /// `zxdg_output_manager_v1`, for logical positions.
    xdg_outputs: Option<ZxdgOutputManagerV1>,
    wlr: Option<output::Wlr>,
    max_clipboard: usize,
    /// A wl_output sent `done`: report the layout if it changed.
    outputs_changed: bool,
    /// Report the layout after a round trip (after a monitors config).
    need_geometry: bool,
    last_geometry: Option<Vec<GeometryMonitor>>,
    fatal: Option<String>,
    /// KDE: resize with kscreen-doctor; this thread's own queue, for the helper thread to report back when done.
    kscreen: Option<Inbox>,
    /// KDE: follows a changed preferred mode (virtio-gpu hotplug); the flag says a kscreen-doctor thread runs.
    kde_follow: (
        std::sync::Arc<std::sync::Mutex<follow_preferred::Follower>>,
        std::sync::Arc<std::sync::atomic::AtomicBool>,
    ),
}

/// A connection to the compositor with its globals read: what detection looks at, and what [`start`] then
/// uses.
pub struct Compositor {
    globals: GlobalList,
    queue: EventQueue<State>,
    list: detect::Globals,
}

impl Compositor {
    /// Connects to `$WAYLAND_DISPLAY` and reads the globals.
    pub fn connect() -> Result<Self> {
        let conn = Connection::connect_to_env().context("connecting to the Wayland compositor")?;
        let (globals, queue) =
            registry_queue_init::<State>(&conn).context("reading the Wayland globals")?;
        let list = detect::Globals(
            globals
                .contents()
                .clone_list()
                .into_iter()
                .map(|g| (g.interface, g.version))
                .collect(),
        );
        tracing::debug!(globals = ?list.0, "Wayland globals");
        Ok(Self {
            globals,
            queue,
            list,
        })
    }

    /// The advertised globals.
    pub fn globals(&self) -> &detect::Globals {
        &self.list
    }
}

/// Starts the native backend on `compositor`: the clipboard over `clipboard` (a data-control protocol), resize
/// over `resize` when it is wlr-output-management or kscreen-doctor.
pub fn start(
    events: EventSender,
    compositor: Compositor,
    clipboard: ClipboardVia,
    resize: ResizeVia,
) -> Result<ThreadBackend> {
    let Compositor {
        globals, mut queue, ..
    } = compositor;
    let qh = queue.handle();
    let seat: WlSeat = globals.bind(&qh, 1..=1, ()).context("binding wl_seat")?;
    let manager = match clipboard {
        ClipboardVia::ExtDataControl => Manager::Ext(globals.bind(&qh, 1..=1, ())?),
        ClipboardVia::WlrDataControl(_) => Manager::Wlr(globals.bind(&qh, 1..=2, ())?),
        ClipboardVia::X11 | ClipboardVia::None => bail!("no data-control protocol"),
    };
    let device = manager.get_data_device(&seat, &qh);
    let clip = clipboard::Clipboard::new(manager, device, clipboard.has_primary());
    let wlr = match resize {
        ResizeVia::WlrOutputManagement => globals
            .bind(&qh, 1..=2, ())
            .map(output::Wlr::new)
            .map_err(|e| tracing::warn!("binding zwlr_output_manager_v1: {e}"))
            .ok(),
        _ => None,
    };
    let mut state = State {
        events: events.clone(),
        qh: qh.clone(),
        clip: Some(clip),
        outputs: Vec::new(),
        xdg_outputs: globals.bind(&qh, 1..=3, ()).ok(),
        wlr,
        max_clipboard: HARD_MAX_CLIPBOARD,
        outputs_changed: false,
        need_geometry: false,
        kde_follow: (
            std::sync::Arc::new(std::sync::Mutex::new(follow_preferred::Follower::from_env())),
            std::sync::Arc::default(),
        ),
        last_geometry: None,
        fatal: None,
        kscreen: None,
    };
    for g in globals.contents().clone_list() {
        if g.interface == "wl_output" {
            state.bind_output(globals.registry(), g.name, g.version);
        }
    }
    // Two round trips: globals' first events, then the objects they created (offers, heads, modes).
    queue.roundtrip(&mut state).context("Wayland round trip")?;
    queue.roundtrip(&mut state).context("Wayland round trip")?;
    let (wake_tx, wake_rx) = wake_pair()?;
    let (tx, rx) = mpsc::channel();
    let inbox = Inbox::new(tx, wake_tx);
    if resize == ResizeVia::KscreenDoctor {
        if kde::available() {
            state.kscreen = Some(inbox.clone());
        } else {
            tracing::warn!(
                "KDE without kscreen-doctor (libkf5screen-bin / kscreen): cannot resize"
            );
        }
    }
    let features = BackendFeatures {
        clipboard: true,
        primary: clipboard.has_primary(),
        resize: state.wlr.is_some() || state.kscreen.is_some(),
    };
    let thread = std::thread::Builder::new()
        .name("wayland".into())
        .spawn(move || {
            if let Err(e) = state.run(&mut queue, &rx, &wake_rx) {
                tracing::error!("Wayland backend stopped: {e:#}");
                let _ = events.send(DesktopEvent::Fatal(format!("{e:#}")));
            }
        })
        .context("spawning the Wayland thread")?;
    Ok(ThreadBackend::new("wayland", features, inbox, thread))
}

impl State {
    fn bind_output(&mut self, registry: &wl_registry::WlRegistry, name: u32, version: u32) {
        let output = registry.bind(name, version.min(4), &self.qh, name);
        let mut o = output::WlOut::new(output, name);
        o.xdg = self
            .xdg_outputs
            .as_ref()
            .map(|m| m.get_xdg_output(&o.output, &self.qh, name));
        self.outputs.push(o);
    }

    fn command(&mut self, cmd: DesktopCommand) {
        match cmd {
            DesktopCommand::ClipboardGrab { selection, types } => self.host_grab(selection, types),
            DesktopCommand::ClipboardRequest {
                selection,
                data_type,
            } => self.host_request(selection, data_type),
            DesktopCommand::ClipboardData {
                selection,
                data_type,
                data,
            } => self.host_data(selection, data_type, data),
            DesktopCommand::ClipboardRelease { selection } => self.host_release(selection),
            DesktopCommand::ReleaseHostSelections => {
                self.host_release(Selection::Clipboard);
                self.host_release(Selection::Primary);
            }
            DesktopCommand::MaxClipboard(max) => {
                self.max_clipboard = max.unwrap_or(HARD_MAX_CLIPBOARD).min(HARD_MAX_CLIPBOARD);
            }
            DesktopCommand::ApplyMonitors { monitors, .. } => match &self.kscreen {
                Some(inbox) if self.wlr.is_none() => {
                    if let Ok(mut f) = self.kde_follow.0.lock() {
                        f.host_request(Instant::now());
                    }
                    let inbox = inbox.clone();
                    kde::spawn_apply(monitors, move || {
                        inbox.send(Job::Command(DesktopCommand::ReportGeometry));
                    });
                }
                _ => self.apply_monitors(monitors),
            },
            DesktopCommand::ReportGeometry => self.need_geometry = true,
            DesktopCommand::Resync => {
                self.need_geometry = true;
                self.reannounce();
            }
        }
    }

    /// KDE: after an output change, follows a changed preferred mode through kscreen-doctor.
    fn kde_follow_preferred(&self) {
        let Some(inbox) = self.kscreen.clone().filter(|_| self.wlr.is_none()) else {
            return;
        };
        kde::spawn_follow(
            self.kde_follow.0.clone(),
            self.kde_follow.1.clone(),
            move || inbox.send(Job::Command(DesktopCommand::ReportGeometry)),
        );
    }

    fn report_geometry(&mut self, force: bool) {
        let g = self.geometry();
        if force || self.last_geometry.as_ref() != Some(&g) {
            tracing::info!(geometry = ?g, "geometry");
            self.last_geometry = Some(g.clone());
            let _ = self.events.send(DesktopEvent::Geometry(g));
        }
    }

    fn run(
        &mut self,
        queue: &mut EventQueue<State>,
        rx: &mpsc::Receiver<Job>,
        wake: &UnixStream,
    ) -> Result<()> {
        self.report_geometry(true);
        loop {
            let mut buf = [0u8; 64];
            while matches!((&*wake).read(&mut buf), Ok(n) if n > 0) {}
            loop {
                match rx.try_recv() {
                    Ok(Job::Shutdown) | Err(mpsc::TryRecvError::Disconnected) => return Ok(()),
                    Ok(Job::Command(cmd)) => self.command(cmd),
                    Err(mpsc::TryRecvError::Empty) => break,
                }
            }
            queue.dispatch_pending(self)?;
            if std::mem::take(&mut self.need_geometry) {
                queue.roundtrip(self)?;
                self.outputs_changed = false;
                self.report_geometry(true);
            } else if std::mem::take(&mut self.outputs_changed) {
                self.report_geometry(false);
                self.kde_follow_preferred();
            }
            if let Some(f) = self.fatal.take() {
                bail!(f);
            }
            self.expire_pastes(Instant::now());
            queue.flush()?;
            let Some(guard) = queue.prepare_read() else {
                continue;
            };
            let ready = {
                let mut fds = [
                    PollFd::new(guard.connection_fd(), PollFlags::POLLIN),
                    PollFd::new(wake.as_fd(), PollFlags::POLLIN),
                ];
                let ms = u16::try_from(Duration::from_secs(1).as_millis()).unwrap_or(1000);
                match poll(&mut fds, PollTimeout::from(ms)) {
                    Ok(_) | Err(nix::errno::Errno::EINTR) => {}
                    Err(e) => return Err(e.into()),
                }
                fds[0].revents().is_some_and(|r| !r.is_empty())
            };
            if ready {
                match guard.read() {
                    Ok(_) => {}
                    Err(wayland_client::backend::WaylandError::Io(e))
                        if e.kind() == std::io::ErrorKind::WouldBlock => {}
                    Err(e) => return Err(e).context("reading from the compositor"),
                }
            }
        }
    }
}

impl Dispatch<wl_registry::WlRegistry, GlobalListContents> for State {
    fn event(
        state: &mut Self,
        registry: &wl_registry::WlRegistry,
        event: wl_registry::Event,
        _: &GlobalListContents,
        _: &Connection,
        _: &QueueHandle<Self>,
    ) {
        match event {
            wl_registry::Event::Global {
                name,
                interface,
                version,
            } if interface == "wl_output" => state.bind_output(registry, name, version),
            wl_registry::Event::GlobalRemove { name } => {
                if let Some(i) = state.outputs.iter().position(|o| o.global == name) {
                    let o = state.outputs.remove(i);
                    if let Some(x) = &o.xdg {
                        x.destroy();
                    }
                    o.output.release_if_possible();
                    state.outputs_changed = true;
                }
            }
            _ => {}
        }
    }
}

impl Dispatch<WlSeat, ()> for State {
    fn event(
        _: &mut Self,
        _: &WlSeat,
        _: wayland_client::protocol::wl_seat::Event,
        _: &(),
        _: &Connection,
        _: &QueueHandle<Self>,
    ) {
    }
}

/// `wl_output.release` exists from version 3.
trait ReleaseIfPossible {
    fn release_if_possible(&self);
}

impl ReleaseIfPossible for wayland_client::protocol::wl_output::WlOutput {
    fn release_if_possible(&self) {
        use wayland_client::Proxy;
        if self.version() >= 3 {
            self.release();
        }
    }
}
