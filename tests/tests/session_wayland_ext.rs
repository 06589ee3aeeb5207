//! guestlink-session on ext-data-control-v1, against an in-process compositor (wayland-server) that offers only
//! `wl_seat`, `wl_output` and `ext_data_control_manager_v1`: Debian 12's compositors have no ext-data-control
//! (wlroots got it in 0.19, KWin in Plasma 6), so this compositor plays the selection broker and the guest
//! applications: it "copies" (sets a selection it serves itself) and "pastes" (asks the current source to send).
//!
//! Run: `cargo test -p tests --test session_wayland_ext`. Needs nothing outside Rust.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test target: unwrap is how a set-up step fails

use guestlink_tests::wayland as support;

use std::io::{Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use guestlink_protocol::session::SessionMessage;
use guestlink_protocol::vdagent::{ClipboardType, Selection};
use support::{Harness, WAIT};
use wayland_protocols::ext::data_control::v1::server::{
    ext_data_control_device_v1::{self, ExtDataControlDeviceV1},
    ext_data_control_manager_v1::{self, ExtDataControlManagerV1},
    ext_data_control_offer_v1::{self, ExtDataControlOfferV1},
    ext_data_control_source_v1::{self, ExtDataControlSourceV1},
};
use wayland_server::backend::{ClientData, ClientId, DisconnectReason};
use wayland_server::protocol::{wl_output, wl_seat};
use wayland_server::{
    Client, DataInit, Dispatch, Display, DisplayHandle, GlobalDispatch, ListeningSocket, New,
    Resource,
};

/// Who owns a selection.
#[derive(Debug, Clone)]
enum Owner {
    /// A client's data source.
    Source(ExtDataControlSourceV1),
    /// The compositor itself, standing in for a guest application: MIME types and the data served for each.
    Internal(Vec<(String, Arc<Vec<u8>>)>),
}

#[derive(Debug, Default)]
struct Comp {
    devices: Vec<ExtDataControlDeviceV1>,
    sel: [Option<Owner>; 2],
    /// Bumped on every selection change; offers of older generations are dead.
    generation: u64,
}

#[derive(Debug, Default)]
struct SourceData(Mutex<Vec<String>>);

#[derive(Debug)]
struct OfferData {
    sel: usize,
    generation: u64,
}

#[derive(Debug)]
struct NoData;
impl ClientData for NoData {
    fn initialized(&self, _: ClientId) {}
    fn disconnected(&self, _: ClientId, _: DisconnectReason) {}
}

fn mimes_of(owner: &Owner) -> Vec<String> {
    match owner {
        Owner::Source(s) => s
            .data::<SourceData>()
            .and_then(|d| d.0.lock().ok().map(|v| v.clone()))
            .unwrap_or_default(),
        Owner::Internal(v) => v.iter().map(|(m, _)| m.clone()).collect(),
    }
}

fn write_in_thread(fd: OwnedFd, data: Arc<Vec<u8>>) {
    std::thread::spawn(move || {
        let _ = std::fs::File::from(fd).write_all(&data);
    });
}

impl Comp {
    /// Announces selection `i` to `dev`.
    fn announce(&self, dh: &DisplayHandle, dev: &ExtDataControlDeviceV1, i: usize) {
        let offer = match &self.sel[i] {
            Some(owner) => {
                let Some(client) = dev.client() else { return };
                let Ok(offer) = client.create_resource::<ExtDataControlOfferV1, _, Comp>(
                    dh,
                    dev.version(),
                    OfferData {
                        sel: i,
                        generation: self.generation,
                    },
                ) else {
                    return;
                };
                dev.data_offer(&offer);
                for m in mimes_of(owner) {
                    offer.offer(m);
                }
                Some(offer)
            }
            None => None,
        };
        if i == 0 {
            dev.selection(offer.as_ref());
        } else {
            dev.primary_selection(offer.as_ref());
        }
    }

    fn set(&mut self, dh: &DisplayHandle, i: usize, owner: Option<Owner>) {
        if let Some(Owner::Source(old)) = &self.sel[i] {
            if !matches!(&owner, Some(Owner::Source(n)) if n == old) {
                old.cancelled();
            }
        }
        self.sel[i] = owner;
        self.generation += 1;
        for d in self.devices.clone() {
            self.announce(dh, &d, i);
        }
    }

    fn receive(&self, sel: usize, generation: u64, mime: String, fd: OwnedFd) {
        if generation != self.generation {
            return;
        }
        match &self.sel[sel] {
            Some(Owner::Source(s)) => s.send(mime, fd.as_fd()),
            Some(Owner::Internal(v)) => {
                if let Some((_, d)) = v.iter().find(|(m, _)| *m == mime) {
                    write_in_thread(fd, Arc::clone(d));
                }
            }
            None => {}
        }
    }
}

impl GlobalDispatch<wl_seat::WlSeat, ()> for Comp {
    fn bind(
        _: &mut Self,
        _: &DisplayHandle,
        _: &Client,
        resource: New<wl_seat::WlSeat>,
        _: &(),
        init: &mut DataInit<'_, Self>,
    ) {
        let seat = init.init(resource, ());
        seat.capabilities(wl_seat::Capability::empty());
    }
}
impl Dispatch<wl_seat::WlSeat, ()> for Comp {
    fn request(
        _: &mut Self,
        _: &Client,
        _: &wl_seat::WlSeat,
        _: wl_seat::Request,
        _: &(),
        _: &DisplayHandle,
        _: &mut DataInit<'_, Self>,
    ) {
    }
}

impl GlobalDispatch<wl_output::WlOutput, ()> for Comp {
    fn bind(
        _: &mut Self,
        _: &DisplayHandle,
        _: &Client,
        resource: New<wl_output::WlOutput>,
        _: &(),
        init: &mut DataInit<'_, Self>,
    ) {
        let o = init.init(resource, ());
        o.geometry(
            0,
            0,
            300,
            200,
            wl_output::Subpixel::Unknown,
            "test".into(),
            "ext".into(),
            wl_output::Transform::Normal,
        );
        o.mode(wl_output::Mode::Current, 1152, 864, 60000);
        if o.version() >= 4 {
            o.name("TEST-1".into());
        }
        if o.version() >= 2 {
            o.done();
        }
    }
}
impl Dispatch<wl_output::WlOutput, ()> for Comp {
    fn request(
        _: &mut Self,
        _: &Client,
        _: &wl_output::WlOutput,
        _: wl_output::Request,
        _: &(),
        _: &DisplayHandle,
        _: &mut DataInit<'_, Self>,
    ) {
    }
}

impl GlobalDispatch<ExtDataControlManagerV1, ()> for Comp {
    fn bind(
        _: &mut Self,
        _: &DisplayHandle,
        _: &Client,
        resource: New<ExtDataControlManagerV1>,
        _: &(),
        init: &mut DataInit<'_, Self>,
    ) {
        init.init(resource, ());
    }
}
impl Dispatch<ExtDataControlManagerV1, ()> for Comp {
    fn request(
        state: &mut Self,
        _: &Client,
        _: &ExtDataControlManagerV1,
        request: ext_data_control_manager_v1::Request,
        _: &(),
        dh: &DisplayHandle,
        init: &mut DataInit<'_, Self>,
    ) {
        match request {
            ext_data_control_manager_v1::Request::CreateDataSource { id } => {
                init.init(id, SourceData::default());
            }
            ext_data_control_manager_v1::Request::GetDataDevice { id, .. } => {
                let dev = init.init(id, ());
                state.announce(dh, &dev, 0);
                state.announce(dh, &dev, 1);
                state.devices.push(dev);
            }
            _ => {}
        }
    }
}
impl Dispatch<ExtDataControlDeviceV1, ()> for Comp {
    fn request(
        state: &mut Self,
        _: &Client,
        dev: &ExtDataControlDeviceV1,
        request: ext_data_control_device_v1::Request,
        _: &(),
        dh: &DisplayHandle,
        _: &mut DataInit<'_, Self>,
    ) {
        match request {
            ext_data_control_device_v1::Request::SetSelection { source } => {
                state.set(dh, 0, source.map(Owner::Source));
            }
            ext_data_control_device_v1::Request::SetPrimarySelection { source } => {
                state.set(dh, 1, source.map(Owner::Source));
            }
            ext_data_control_device_v1::Request::Destroy => state.devices.retain(|d| d != dev),
            _ => {}
        }
    }
}
impl Dispatch<ExtDataControlSourceV1, SourceData> for Comp {
    fn request(
        state: &mut Self,
        _: &Client,
        src: &ExtDataControlSourceV1,
        request: ext_data_control_source_v1::Request,
        data: &SourceData,
        dh: &DisplayHandle,
        _: &mut DataInit<'_, Self>,
    ) {
        match request {
            ext_data_control_source_v1::Request::Offer { mime_type } => {
                if let Ok(mut v) = data.0.lock() {
                    v.push(mime_type);
                }
            }
            ext_data_control_source_v1::Request::Destroy => {
                for i in 0..2 {
                    if matches!(&state.sel[i], Some(Owner::Source(s)) if s == src) {
                        state.sel[i] = None;
                        state.set(dh, i, None);
                    }
                }
            }
            _ => {}
        }
    }
}
impl Dispatch<ExtDataControlOfferV1, OfferData> for Comp {
    fn request(
        state: &mut Self,
        _: &Client,
        _: &ExtDataControlOfferV1,
        request: ext_data_control_offer_v1::Request,
        data: &OfferData,
        _: &DisplayHandle,
        _: &mut DataInit<'_, Self>,
    ) {
        if let ext_data_control_offer_v1::Request::Receive { mime_type, fd } = request {
            state.receive(data.sel, data.generation, mime_type, fd);
        }
    }
}

type Job = Box<dyn FnOnce(&mut Comp, &DisplayHandle) + Send>;

/// The compositor thread and a way to run code in it.
struct Server {
    jobs: mpsc::Sender<Job>,
    stop: Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
    dir: tempfile::TempDir,
}

impl Server {
    fn start() -> Server {
        let dir = tempfile::tempdir().expect("tempdir");
        // It is the agent's XDG_RUNTIME_DIR too, which must be private (0700) like a real one: guestlink-session
        // refuses to keep its instance lock anywhere else.
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700))
            .expect("chmod");
        let listener =
            ListeningSocket::bind_absolute(dir.path().join("wayland-ext")).expect("bind");
        let (jobs, rx) = mpsc::channel::<Job>();
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stop2 = Arc::clone(&stop);
        let thread = std::thread::spawn(move || {
            let mut display: Display<Comp> = Display::new().expect("display");
            let dh = display.handle();
            dh.create_global::<Comp, wl_seat::WlSeat, ()>(7, ());
            dh.create_global::<Comp, wl_output::WlOutput, ()>(4, ());
            dh.create_global::<Comp, ExtDataControlManagerV1, ()>(1, ());
            let mut comp = Comp::default();
            while !stop2.load(std::sync::atomic::Ordering::Relaxed) {
                if let Ok(Some(stream)) = listener.accept() {
                    dh.clone()
                        .insert_client(stream, Arc::new(NoData))
                        .expect("insert client");
                }
                while let Ok(job) = rx.try_recv() {
                    job(&mut comp, &dh);
                }
                let _ = display.dispatch_clients(&mut comp);
                let _ = display.flush_clients();
                let mut fds = [
                    nix::poll::PollFd::new(listener.as_fd(), nix::poll::PollFlags::POLLIN),
                    nix::poll::PollFd::new(
                        display.backend().poll_fd(),
                        nix::poll::PollFlags::POLLIN,
                    ),
                ];
                let _ = nix::poll::poll(&mut fds, nix::poll::PollTimeout::from(20u16));
            }
        });
        Server {
            jobs,
            stop,
            thread: Some(thread),
            dir,
        }
    }

    /// Runs `f` on the compositor thread and returns its result.
    fn call<R: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Comp, &DisplayHandle) -> R + Send + 'static,
    ) -> R {
        let (tx, rx) = mpsc::channel();
        self.jobs
            .send(Box::new(move |c, dh| {
                let _ = tx.send(f(c, dh));
            }))
            .expect("compositor gone");
        rx.recv_timeout(WAIT).expect("compositor job")
    }

    /// The MIME types selection `i` offers now.
    fn mimes(&self, i: usize) -> Vec<String> {
        self.call(move |c, _| c.sel[i].as_ref().map(mimes_of).unwrap_or_default())
    }

    /// A guest application copies `data` as `mimes`.
    fn copy(&self, i: usize, mimes: &[&str], data: &[u8]) {
        let data = Arc::new(data.to_vec());
        let v: Vec<(String, Arc<Vec<u8>>)> = mimes
            .iter()
            .map(|m| ((*m).to_owned(), Arc::clone(&data)))
            .collect();
        self.call(move |c, dh| c.set(dh, i, Some(Owner::Internal(v))));
    }

    /// A guest application pastes selection `i` as `mime` (the read runs on a thread).
    fn paste(&self, i: usize, mime: &str) -> std::thread::JoinHandle<Vec<u8>> {
        let (rd, wr) = nix::unistd::pipe().expect("pipe");
        let mime = mime.to_owned();
        self.call(move |c, _| c.receive(i, c.generation, mime, wr));
        std::thread::spawn(move || {
            let mut v = Vec::new();
            let _ = std::fs::File::from(rd).read_to_end(&mut v);
            v
        })
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn start() -> (Server, Harness) {
    let s = Server::start();
    let h = Harness::start(&[
        ("XDG_RUNTIME_DIR", s.dir.path()),
        ("WAYLAND_DISPLAY", std::path::Path::new("wayland-ext")),
    ]);
    (s, h)
}

#[test]
fn ext_data_control_is_chosen_and_geometry_comes_from_wl_output() {
    let (_s, h) = start();
    h.expect("geometry", |m| {
        matches!(m, SessionMessage::Geometry { monitors } if monitors.len() == 1 && monitors[0].width == 1152 && monitors[0].height == 864)
    });
    let log = h.log();
    assert!(
        log.contains("backend wayland") && log.contains("ext-data-control-v1"),
        "{log}"
    );
}

#[test]
fn host_to_guest_over_ext_clipboard_and_primary() {
    let (s, mut h) = start();
    for (i, sel, data) in [
        (0, Selection::Clipboard, "ext clipboard ✓".as_bytes()),
        (1, Selection::Primary, b"ext primary".as_slice()),
    ] {
        h.send(&SessionMessage::ClipboardGrab {
            selection: sel,
            types: vec![ClipboardType::Utf8Text],
        });
        let deadline = Instant::now() + WAIT;
        while !s.mimes(i).iter().any(|m| m == "text/plain;charset=utf-8") {
            assert!(
                Instant::now() < deadline,
                "the agent never set selection {i}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        let paste = s.paste(i, "text/plain;charset=utf-8");
        h.expect("clipboard request", |m| {
            matches!(m, SessionMessage::ClipboardRequest { selection, data_type } if *selection == sel && *data_type == ClipboardType::Utf8Text)
        });
        h.send(&SessionMessage::ClipboardData {
            selection: sel,
            data_type: ClipboardType::Utf8Text,
            data: data.to_vec(),
        });
        assert_eq!(paste.join().expect("paste"), data);
    }
}

#[test]
fn guest_to_host_over_ext_then_release() {
    let (s, mut h) = start();
    let png: Vec<u8> = (0..200_000u32).map(|i| (i * 7 % 251) as u8).collect();
    s.copy(0, &["image/png"], &png);
    h.expect("grab", |m| {
        matches!(m, SessionMessage::ClipboardGrab { selection: Selection::Clipboard, types } if types == &vec![ClipboardType::ImagePng])
    });
    h.send(&SessionMessage::ClipboardRequest {
        selection: Selection::Clipboard,
        data_type: ClipboardType::ImagePng,
    });
    let m = h.expect("data", |m| {
        matches!(m, SessionMessage::ClipboardData { .. })
    });
    assert!(
        matches!(&m, SessionMessage::ClipboardData { data_type: ClipboardType::ImagePng, data, .. } if *data == png),
        "wrong data"
    );
    s.copy(1, &["text/plain"], b"guest primary");
    h.expect("primary grab", |m| {
        matches!(m, SessionMessage::ClipboardGrab { selection: Selection::Primary, types } if types == &vec![ClipboardType::Utf8Text])
    });
    s.call(|c, dh| c.set(dh, 0, None));
    h.expect("release", |m| {
        matches!(
            m,
            SessionMessage::ClipboardRelease {
                selection: Selection::Clipboard
            }
        )
    });
}
