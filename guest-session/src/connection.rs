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

use crate::backend::{DesktopBackend, DesktopCommand, DesktopEvent};
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
    /// The backend stopped: the session agent exits.
    Fatal(String),
}

/// The link to guestlinkd: one desktop backend, one file receiver, a daemon connection at a time.
#[derive(Debug)]
pub struct Connection {
    socket: PathBuf,
    backend: Box<dyn DesktopBackend>,
    events: mpsc::UnboundedReceiver<DesktopEvent>,
    files: FileReceiver,
    /// The connected daemon takes large clipboard answers as memfds (its hello said so).
    daemon_takes_fds: bool,
    /// Applies AUDIO_VOLUME_SYNC to the sound server or ALSA mixer.
    audio: crate::audio::Audio,
}

/// The daemon messages that are plain desktop commands; any other message comes back unchanged.
fn to_command(msg: SessionMessage) -> Result<DesktopCommand, SessionMessage> {
    Ok(match msg {
        SessionMessage::ClipboardGrab { selection, types } => {
            DesktopCommand::ClipboardGrab { selection, types }
        }
        SessionMessage::ClipboardRequest {
            selection,
            data_type,
        } => DesktopCommand::ClipboardRequest {
            selection,
            data_type,
        },
        SessionMessage::ClipboardData {
            selection,
            data_type,
            data,
        } => DesktopCommand::ClipboardData {
            selection,
            data_type,
            data,
        },
        SessionMessage::ClipboardRelease { selection } => {
            DesktopCommand::ClipboardRelease { selection }
        }
        SessionMessage::MonitorsConfig { flags, monitors } => {
            DesktopCommand::ApplyMonitors { flags, monitors }
        }
        SessionMessage::MaxClipboard { max } => {
            DesktopCommand::MaxClipboard(usize::try_from(max).ok())
        }
        other => return Err(other),
    })
}

/// The desktop events that become a plain daemon message (`ClipboardFile` is framed with its memfd by
/// [`outgoing::frame_memfd`]; `Fatal` ends the connection).
fn to_message(ev: DesktopEvent) -> Option<SessionMessage> {
    Some(match ev {
        DesktopEvent::ClipboardGrab { selection, types } => {
            SessionMessage::ClipboardGrab { selection, types }
        }
        DesktopEvent::ClipboardRequest {
            selection,
            data_type,
        } => SessionMessage::ClipboardRequest {
            selection,
            data_type,
        },
        DesktopEvent::ClipboardData {
            selection,
            data_type,
            data,
        } => SessionMessage::ClipboardData {
            selection,
            data_type,
            data,
        },
        DesktopEvent::ClipboardRelease { selection } => {
            SessionMessage::ClipboardRelease { selection }
        }
        DesktopEvent::Geometry(monitors) => SessionMessage::Geometry { monitors },
        DesktopEvent::ClipboardFile { .. } | DesktopEvent::Fatal(_) => return None,
    })
}

impl Connection {
    /// Talks to guestlinkd on `socket`.
    pub fn new(
        socket: PathBuf,
        backend: Box<dyn DesktopBackend>,
        events: mpsc::UnboundedReceiver<DesktopEvent>,
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
                    self.backend.command(DesktopCommand::ReleaseHostSelections);
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
            // Wait, but keep draining backend events (a fatal one ends the session agent).
            let sleep = tokio::time::sleep(backoff);
            tokio::pin!(sleep);
            loop {
                tokio::select! {
                    () = &mut sleep => break,
                    ev = self.events.recv() => match ev {
                        None => bail!("backend gone"),
                        Some(DesktopEvent::Fatal(e)) => bail!("backend stopped: {e}"),
                        Some(DesktopEvent::ClipboardRequest { selection, .. }) => {
                            // No host: refuse the paste right away.
                            self.backend.command(DesktopCommand::ClipboardData {
                                selection,
                                data_type: ClipboardType::None,
                                data: Vec::new(),
                            });
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
        self.backend.command(DesktopCommand::Resync);
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
                    if let DesktopEvent::Fatal(e) = ev {
                        break End::Fatal(e);
                    }
                    let parts = match ev {
                        DesktopEvent::ClipboardFile { selection, data_type, memfd } => {
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
        let msg = match to_command(msg) {
            Ok(cmd) => {
                self.backend.command(cmd);
                return Vec::new();
            }
            Err(msg) => msg,
        };
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
            SessionMessage::ClientDisconnected => {
                tracing::info!("SPICE client disconnected");
                self.backend.command(DesktopCommand::ReleaseHostSelections);
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
                self.backend.command(DesktopCommand::ReportGeometry);
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
