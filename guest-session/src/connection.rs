//! The connection to guestlinkd's session socket: frames of `guestlink_protocol::session`, dispatched to the
//! desktop backend and the file receiver; reconnects with exponential backoff (0.2 s … 10 s) when the socket
//! goes away. Writes go through a dedicated task so a large outgoing frame never stops reading.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Result};
use guestlink_protocol::session::{
    FrameDecoder, FrameEvent, SessionMessage, KIND_FILE_XFER_DATA, SESSION_PROTOCOL_VERSION,
};
use guestlink_protocol::vdagent::ClipboardType;
use tokio::io::AsyncReadExt;
use tokio::net::unix::OwnedReadHalf;
use tokio::net::UnixStream;
use tokio::sync::mpsc;

use crate::backend::{BackendEvent, DesktopBackend};
use crate::files::FileReceiver;
use crate::outgoing::{self, frame, send_parts, Out};

/// Shortest and longest wait between connection attempts.
const BACKOFF_MIN: Duration = Duration::from_millis(200);
const BACKOFF_MAX: Duration = Duration::from_secs(10);

/// Read size for frame heads while a direct-I/O transfer runs: the data behind a head that lands in the read
/// buffer is copied into the file's block, the rest of the frame is read straight in.
const HEAD_READ: usize = 4096;

/// Reads into `direct` when given (returns `true` with the count), else into `buf`.
async fn read_into(
    rd: &mut OwnedReadHalf,
    direct: Option<&mut [u8]>,
    buf: &mut [u8],
) -> (bool, std::io::Result<usize>) {
    match direct {
        Some(d) => (true, rd.read(d).await),
        None => (false, rd.read(buf).await),
    }
}

/// Why a daemon connection ended.
enum End {
    /// The daemon went away (EOF, I/O or fatal framing error).
    Lost(String),
    /// The backend stopped: the agent exits.
    Fatal(String),
}

/// The agent: one backend, one file receiver, a daemon connection at a time.
#[derive(Debug)]
pub struct Agent {
    socket: PathBuf,
    backend: Box<dyn DesktopBackend>,
    events: mpsc::UnboundedReceiver<BackendEvent>,
    files: FileReceiver,
    /// The connected daemon takes large clipboard answers as memfds (its hello said so).
    daemon_takes_fds: bool,
    /// Applies AUDIO_VOLUME_SYNC to the sound server or ALSA mixer.
    audio: crate::audio::Audio,
}

fn to_message(ev: BackendEvent) -> Option<SessionMessage> {
    Some(match ev {
        BackendEvent::ClipboardGrab { selection, types } => {
            SessionMessage::ClipboardGrab { selection, types }
        }
        BackendEvent::ClipboardRequest {
            selection,
            data_type,
        } => SessionMessage::ClipboardRequest {
            selection,
            data_type,
        },
        BackendEvent::ClipboardData {
            selection,
            data_type,
            data,
        } => SessionMessage::ClipboardData {
            selection,
            data_type,
            data,
        },
        BackendEvent::ClipboardRelease { selection } => {
            SessionMessage::ClipboardRelease { selection }
        }
        BackendEvent::Geometry(monitors) => SessionMessage::Geometry { monitors },
        // Sent by `outgoing::frame_memfd`, not as a plain message.
        BackendEvent::ClipboardFile { .. } | BackendEvent::Fatal(_) => return None,
    })
}

impl Agent {
    /// An agent talking to `socket`.
    pub fn new(
        socket: PathBuf,
        backend: Box<dyn DesktopBackend>,
        events: mpsc::UnboundedReceiver<BackendEvent>,
        files: FileReceiver,
    ) -> Self {
        Self {
            socket,
            backend,
            events,
            files,
            daemon_takes_fds: false,
            audio: crate::audio::Audio::start(),
        }
    }

    /// Runs until the backend fails (an error) — connection losses are retried forever.
    pub async fn run(&mut self) -> Result<()> {
        let mut backoff = BACKOFF_MIN;
        let mut warned = false;
        loop {
            match UnixStream::connect(&self.socket).await {
                Ok(stream) => {
                    tracing::info!(socket = %self.socket.display(), "connected to guestlinkd");
                    warned = false;
                    backoff = BACKOFF_MIN;
                    let end = self.session(stream).await;
                    self.files.abort_all();
                    self.backend.release_host_selections();
                    match end {
                        End::Fatal(e) => bail!("backend stopped: {e}"),
                        End::Lost(why) => tracing::warn!("guestlinkd connection lost: {why}"),
                    }
                }
                Err(e) if !warned => {
                    tracing::warn!(socket = %self.socket.display(), "cannot connect to guestlinkd: {e}; retrying");
                    warned = true;
                }
                Err(e) => tracing::debug!("connect: {e}"),
            }
            // Wait, but keep draining backend events (a fatal one ends the agent).
            let sleep = tokio::time::sleep(backoff);
            tokio::pin!(sleep);
            loop {
                tokio::select! {
                    () = &mut sleep => break,
                    ev = self.events.recv() => match ev {
                        None => bail!("backend gone"),
                        Some(BackendEvent::Fatal(e)) => bail!("backend stopped: {e}"),
                        Some(BackendEvent::ClipboardRequest { selection, .. }) => {
                            // No host: refuse the paste right away.
                            self.backend.clipboard_data(selection, ClipboardType::None, Vec::new());
                        }
                        _ => {}
                    },
                }
            }
            backoff = (backoff * 2).min(BACKOFF_MAX);
        }
    }

    async fn session(&mut self, stream: UnixStream) -> End {
        let (mut rd, wr) = stream.into_split();
        let (out, out_rx) = mpsc::channel::<Out>(64);
        let mut writer = tokio::spawn(outgoing::write_loop(wr, out_rx));
        self.daemon_takes_fds = false;
        let hello = SessionMessage::Hello {
            version: SESSION_PROTOCOL_VERSION,
            session_id: std::env::var("XDG_SESSION_ID").unwrap_or_default(),
            capabilities: self.capabilities(),
        };
        let _ = send_parts(&out, frame(hello, false)).await;
        self.backend.resync();
        // File data is passed from the read buffer straight to the file writer, not collected per frame first.
        let mut decoder = FrameDecoder::new().streaming_kind(KIND_FILE_XFER_DATA, 1);
        // The transfer whose DATA frame is streaming.
        let mut file_data: Option<u32> = None;
        let mut buf = vec![0u8; 256 * 1024];
        let end = 'conn: loop {
            // Where the next read goes: straight into the block of the file whose DATA frame is streaming, else
            // the buffer — in small pieces while a direct transfer runs, so that little data lands there.
            let head = if self.files.any_direct() {
                HEAD_READ
            } else {
                buf.len()
            };
            let left = decoder.stream_left();
            let direct = file_data
                .filter(|_| left > 0)
                .and_then(|id| self.files.room(id, left));
            tokio::select! {
                r = read_into(&mut rd, direct, &mut buf[..head]) => {
                    let (into_file, n) = match r {
                        (_, Ok(0)) => break End::Lost("end of stream".into()),
                        (into_file, Ok(n)) => (into_file, n),
                        (_, Err(e)) => break End::Lost(e.to_string()),
                    };
                    let mut replies = Vec::new();
                    if into_file {
                        // `direct` came from `file_data`.
                        replies.extend(file_data.and_then(|id| self.files.data_read(id, n)));
                        if decoder.consumed(n) {
                            file_data = None;
                        }
                    }
                    let fed: &[u8] = if into_file { &[] } else { &buf[..n] };
                    for ev in decoder.feed_borrowed(fed) {
                        match ev {
                            Ok(FrameEvent::Message(msg)) => replies.extend(self.handle(msg)),
                            Ok(FrameEvent::DataBegin { message, .. }) => {
                                // Only file data streams (see the decoder above).
                                if let SessionMessage::FileXferData { id, .. } = message {
                                    file_data = Some(id);
                                }
                            }
                            Ok(FrameEvent::Data(piece)) => {
                                replies.extend(file_data.and_then(|id| self.files.data(id, piece)));
                            }
                            Ok(FrameEvent::DataEnd) => file_data = None,
                            Err(e) => tracing::warn!("bad frame from guestlinkd: {e}"),
                        }
                    }
                    for reply in replies {
                        if !send_parts(&out, frame(reply, self.daemon_takes_fds)).await {
                            break 'conn End::Lost("daemon not reading".into());
                        }
                    }
                    if decoder.is_poisoned() {
                        break End::Lost("framing error".into());
                    }
                }
                ev = self.events.recv() => {
                    let Some(ev) = ev else { break End::Fatal("backend gone".into()) };
                    if let BackendEvent::Fatal(e) = ev {
                        break End::Fatal(e);
                    }
                    let parts = match ev {
                        BackendEvent::ClipboardFile { selection, data_type, memfd } => {
                            outgoing::frame_memfd(selection, data_type, &memfd, self.daemon_takes_fds)
                        }
                        ev => to_message(ev).map(|m| frame(m, self.daemon_takes_fds)).unwrap_or_default(),
                    };
                    if !send_parts(&out, parts).await {
                        break End::Lost("writer stopped".into());
                    }
                }
                r = &mut writer => {
                    break End::Lost(match r {
                        Ok(Err(e)) => e.to_string(),
                        _ => "writer stopped".into(),
                    });
                }
            }
        };
        writer.abort();
        end
    }

    fn capabilities(&self) -> Vec<String> {
        let f = self.backend.features();
        let mut caps = vec!["file-xfer".to_owned()];
        if f.clipboard {
            caps.push("clipboard".into());
        }
        if f.primary {
            caps.push("clipboard-primary".into());
        }
        if f.resize {
            caps.push("monitors-config".into());
        }
        caps
    }

    /// One daemon message; returns the frames to send back.
    fn handle(&mut self, msg: SessionMessage) -> Vec<SessionMessage> {
        let b = &self.backend;
        match msg {
            SessionMessage::Hello {
                version,
                session_id,
                capabilities,
            } => {
                self.daemon_takes_fds = outgoing::takes_fds(&capabilities);
                if version != SESSION_PROTOCOL_VERSION {
                    tracing::warn!(
                        version,
                        "guestlinkd speaks another session protocol version"
                    );
                }
                tracing::info!(session_id, "guestlinkd hello");
            }
            SessionMessage::ClipboardGrab { selection, types } => {
                b.clipboard_grab(selection, types);
            }
            SessionMessage::ClipboardRequest {
                selection,
                data_type,
            } => b.clipboard_request(selection, data_type),
            SessionMessage::ClipboardData {
                selection,
                data_type,
                data,
            } => b.clipboard_data(selection, data_type, data),
            SessionMessage::ClipboardRelease { selection } => b.clipboard_release(selection),
            SessionMessage::MonitorsConfig { flags, monitors } => b.apply_monitors(flags, monitors),
            SessionMessage::MaxClipboard { max } => {
                b.set_max_clipboard(usize::try_from(max).ok());
            }
            SessionMessage::ClientDisconnected => {
                tracing::info!("SPICE client disconnected");
                b.release_host_selections();
                self.files.abort_all();
            }
            SessionMessage::ClientConnected => tracing::info!("SPICE client connected"),
            SessionMessage::FileXferStart { id, name, size } => {
                return vec![self.files.start(id, &name, size)];
            }
            SessionMessage::FileXferData { id, data } => {
                return self.files.data(id, &data).into_iter().collect();
            }
            SessionMessage::FileXferCancel { id } => self.files.cancel(id),
            SessionMessage::FileXferDisable => {
                tracing::info!("file transfer disabled for this session");
                self.files.disable();
            }
            SessionMessage::GraphicsDeviceInfo { displays } => {
                crate::display_map::set_devices(&displays);
                b.displays_remapped();
            }
            SessionMessage::AudioVolumeSync {
                is_playback,
                mute,
                volumes,
            } => self.audio.sync(crate::audio::VolumeSync {
                playback: is_playback,
                mute,
                volumes,
            }),
            SessionMessage::Error { code, message } => {
                tracing::warn!(code, "guestlinkd error: {message}");
            }
            other => tracing::debug!(kind = other.kind(), "ignored message"),
        }
        Vec::new()
    }
}
