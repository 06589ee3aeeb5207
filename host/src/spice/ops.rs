//! The operations on a [`SpiceLink`]: clipboard get/set, resize, pointer, file transfer.

use std::fs::File;
use std::io::IoSliceMut;
use std::ops::Range;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

use guestlink_protocol::vdagent::display::MONITORS_FLAG_USE_POS;
use guestlink_protocol::vdagent::file_xfer::{
    G_IO_ERROR_INVALID_FILENAME, G_IO_ERROR_TOO_MANY_OPEN_FILES,
};
use guestlink_protocol::vdagent::{
    encode_raw_message_holes, ChunkMode, ClipboardType, FileXferData, FileXferDetail,
    FileXferResult, FileXferStart, FileXferStatus, Message, MessageType, MonitorConfig,
    MonitorsConfig, MouseState, Port, ReplyResult, Selection, SerialRule,
};

use super::SpiceLink;
use crate::error::{Channel, Error};
use nix::sys::uio::preadv;

/// Bytes per FILE_XFER_DATA message (spice-gtk's `FILE_XFER_CHUNK_SIZE`).
pub const FILE_CHUNK: usize = 64 * 1024;
/// FILE_XFER_DATA messages framed into one write (1 MiB of file data): a sixteenth of the syscalls and of the
/// checks for a guest abort, with the messages on the wire unchanged.
const FILE_BATCH: usize = 16;
/// File bytes per batch.
const BATCH_BYTES: usize = FILE_BATCH * FILE_CHUNK;

/// The frames of one batch of FILE_XFER_DATA messages with the places of their file data (see
/// [`encode_raw_message_holes`]). A batch of the same length is laid out only once: each full batch of a
/// transfer reuses the frames and only reads new file data into them.
#[derive(Debug, Default)]
struct BatchFrames {
    bytes: Vec<u8>,
    holes: Vec<Range<usize>>,
    /// (transfer id, file bytes) of the current layout.
    shape: Option<(u32, usize)>,
}

impl BatchFrames {
    /// Lays out the frames of `len` file bytes of transfer `id` in 64 KiB messages (a zero-length file gets one
    /// empty DATA message, like spice-gtk).
    fn layout(&mut self, id: u32, len: usize) -> Result<(), Error> {
        if self.shape == Some((id, len)) {
            return Ok(());
        }
        self.bytes.clear();
        self.holes.clear();
        let mut left = len;
        loop {
            let n = left.min(FILE_CHUNK);
            encode_raw_message_holes(
                &mut self.bytes,
                Port::Client,
                MessageType::FileXferData.as_u32(),
                &FileXferData::payload_head(id, n),
                n,
                ChunkMode::Split,
                &mut self.holes,
            )
            .map_err(|e| Error::SpiceProtocol(e.to_string()))?;
            left -= n;
            if left == 0 {
                break;
            }
        }
        self.shape = Some((id, len));
        Ok(())
    }

    /// Reads the file bytes from `offset` on straight into the frames' data places (`preadv`; a full batch has
    /// 528 of them, within `IOV_MAX`). A file that ends early is an error: START announced its size.
    fn fill(&mut self, file: &File, offset: u64) -> std::io::Result<()> {
        let mut slices = Vec::with_capacity(self.holes.len());
        let mut rest = &mut self.bytes[..];
        let mut base = 0;
        for h in &self.holes {
            let (_, tail) = std::mem::take(&mut rest).split_at_mut(h.start - base);
            let (hole, after) = tail.split_at_mut(h.len());
            slices.push(IoSliceMut::new(hole));
            rest = after;
            base = h.end;
        }
        let mut bufs = &mut slices[..];
        let mut at = offset;
        while !bufs.is_empty() {
            let pos =
                nix::libc::off_t::try_from(at).map_err(|_| std::io::ErrorKind::InvalidInput)?;
            match preadv(file, bufs, pos) {
                Ok(0) => {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::UnexpectedEof,
                        "the file got shorter while it was being sent",
                    ))
                }
                Ok(n) => {
                    IoSliceMut::advance_slices(&mut bufs, n);
                    at += n as u64;
                }
                Err(nix::errno::Errno::EINTR) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }
}

/// A display selection name.
pub fn selection_name(s: Selection) -> String {
    match s {
        Selection::Clipboard => "clipboard".into(),
        Selection::Primary => "primary".into(),
        Selection::Secondary => "secondary".into(),
        Selection::Other(n) => format!("selection {n}"),
    }
}

/// A clipboard type's short name.
pub fn type_name(t: ClipboardType) -> String {
    match t {
        ClipboardType::None => "none".into(),
        ClipboardType::Utf8Text => "text".into(),
        ClipboardType::ImagePng => "png".into(),
        ClipboardType::ImageBmp => "bmp".into(),
        ClipboardType::ImageTiff => "tiff".into(),
        ClipboardType::ImageJpg => "jpg".into(),
        ClipboardType::FileList => "file-list".into(),
        ClipboardType::Other(n) => format!("type {n}"),
    }
}

/// Requests the guest's `selection` as `wanted`; returns the type and bytes it answered with.
pub fn clipboard_get(
    link: &mut SpiceLink,
    selection: Selection,
    wanted: ClipboardType,
    timeout: Duration,
) -> Result<Vec<u8>, Error> {
    link.send(
        Port::Client,
        &Message::ClipboardRequest {
            selection,
            data_type: wanted,
        },
    )?;
    let deadline = Instant::now() + timeout;
    loop {
        let Some((_, msg)) = link.recv_until(deadline)? else {
            return Err(Error::Timeout {
                channel: Channel::Spice,
                what: "clipboard request".into(),
                timeout,
            });
        };
        match msg {
            Message::Clipboard {
                selection: s,
                data_type,
                data,
            } if s == selection => {
                if data_type == ClipboardType::None || (data.is_empty() && data_type != wanted) {
                    return Err(Error::ClipboardEmpty {
                        selection: selection_name(selection),
                        wanted: type_name(wanted),
                    });
                }
                return Ok(data);
            }
            Message::ClipboardGrab {
                selection: s,
                serial,
                ..
            } => {
                if let Some(serial) = serial {
                    link.serials.accept(s, serial, SerialRule::Client);
                }
            }
            other => tracing::debug!(
                "ignoring {:?} while waiting for clipboard data",
                other.message_type()
            ),
        }
    }
}

/// How long `clipboard set` serves the guest's paste requests.
#[derive(Debug, Clone, Copy)]
pub struct ServeLimits {
    /// Stop after answering this many requests (0 = no limit).
    pub loops: u32,
    /// Stop after this long (`None` = until the guest takes the selection over).
    pub timeout: Option<Duration>,
}

/// What happened while serving.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServeReport {
    /// Requests answered.
    pub requests: u32,
    /// The guest took the selection over (a guest-side copy).
    pub taken_over: bool,
}

/// Takes `selection` with `data` of type `kind` (GRAB) and answers the guest's requests until a limit, the
/// guest grabbing the selection itself, or the port closing; then releases the selection.
pub fn clipboard_set(
    link: &mut SpiceLink,
    selection: Selection,
    kind: ClipboardType,
    data: &[u8],
    limits: ServeLimits,
) -> Result<ServeReport, Error> {
    let serial = link
        .wire()
        .grab_serial
        .then(|| link.serials.next_outgoing(selection));
    link.send(
        Port::Client,
        &Message::ClipboardGrab {
            selection,
            serial,
            types: vec![kind],
        },
    )?;
    let mut report = ServeReport {
        requests: 0,
        taken_over: false,
    };
    let end = limits.timeout.map(|t| Instant::now() + t);
    loop {
        if limits.loops > 0 && report.requests >= limits.loops {
            break;
        }
        let deadline = end.unwrap_or_else(|| Instant::now() + Duration::from_secs(3600));
        let msg = match link.recv_until(deadline) {
            Ok(Some((_, m))) => m,
            Ok(None) if end.is_some() => break,
            Ok(None) => continue,
            Err(Error::Closed(Channel::Spice)) => return Ok(report),
            Err(e) => return Err(e),
        };
        match msg {
            Message::ClipboardRequest {
                selection: s,
                data_type,
            } if s == selection => {
                let answer = if data_type == kind {
                    Message::Clipboard {
                        selection,
                        data_type,
                        data: data.to_vec(),
                    }
                } else {
                    Message::Clipboard {
                        selection,
                        data_type: ClipboardType::None,
                        data: Vec::new(),
                    }
                };
                link.send(Port::Client, &answer)?;
                report.requests += 1;
            }
            Message::ClipboardGrab {
                selection: s,
                serial,
                ..
            } if s == selection => {
                let ok = serial.is_none_or(|n| link.serials.accept(s, n, SerialRule::Client));
                if ok {
                    report.taken_over = true;
                    return Ok(report);
                }
            }
            _ => {}
        }
    }
    link.send(Port::Client, &Message::ClipboardRelease { selection })?;
    Ok(report)
}

/// One monitor of a resize request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MonitorSpec {
    /// Width.
    pub width: u32,
    /// Height.
    pub height: u32,
    /// Position, if given.
    pub pos: Option<(i32, i32)>,
}

/// Parses `WxH[+X+Y][,WxH[+X+Y]…]`.
pub fn parse_monitors(spec: &str) -> Result<Vec<MonitorSpec>, Error> {
    let bad = || {
        Error::Usage(format!(
            "invalid monitor layout '{spec}': expected WxH[+X+Y][,…]"
        ))
    };
    spec.split(',')
        .map(|one| {
            let (size, pos) = match one.find('+') {
                Some(i) => (&one[..i], Some(&one[i + 1..])),
                None => (one, None),
            };
            let (w, h) = size.split_once('x').ok_or_else(bad)?;
            let pos = match pos {
                Some(p) => {
                    let (x, y) = p.split_once('+').ok_or_else(bad)?;
                    Some((x.parse().map_err(|_| bad())?, y.parse().map_err(|_| bad())?))
                }
                None => None,
            };
            let m = MonitorSpec {
                width: w.parse().map_err(|_| bad())?,
                height: h.parse().map_err(|_| bad())?,
                pos,
            };
            if m.width == 0 || m.height == 0 || m.width > 16384 || m.height > 16384 {
                return Err(bad());
            }
            Ok(m)
        })
        .collect()
}

/// Sends MONITORS_CONFIG (without PHYSICAL_SIZE: spice-vdagent 0.22 rejects it) and waits for the REPLY.
pub fn resize(
    link: &mut SpiceLink,
    monitors: &[MonitorSpec],
    timeout: Duration,
) -> Result<(), Error> {
    let use_pos = monitors.iter().any(|m| m.pos.is_some());
    let mut x = 0;
    let config = MonitorsConfig {
        flags: if use_pos { MONITORS_FLAG_USE_POS } else { 0 },
        monitors: monitors
            .iter()
            .map(|m| {
                let (mx, my) = m.pos.unwrap_or((x, 0));
                x = mx.saturating_add(m.width as i32);
                MonitorConfig {
                    height: m.height,
                    width: m.width,
                    depth: 32,
                    x: mx,
                    y: my,
                }
            })
            .collect(),
        physical_sizes: None,
    };
    link.send(Port::Client, &Message::MonitorsConfig(config))?;
    let deadline = Instant::now() + timeout;
    loop {
        match link.recv_until(deadline)? {
            Some((
                _,
                Message::Reply {
                    message_type,
                    result,
                },
            )) if message_type == MessageType::MonitorsConfig.as_u32() => {
                return match result {
                    ReplyResult::Success => Ok(()),
                    _ => Err(Error::ResizeRefused),
                };
            }
            Some(_) => {}
            None => {
                return Err(Error::Timeout {
                    channel: Channel::Spice,
                    what: "monitor configuration".into(),
                    timeout,
                })
            }
        }
    }
}

/// How long [`mouse`] holds a clicked button down.
const CLICK_HOLD: Duration = Duration::from_millis(100);

/// Sends MOUSE_STATE at (`x`, `y`) on `display` as spice-server does in client mouse mode (no reply exists);
/// with `click` (a button mask) a press, then [`CLICK_HOLD`] later a release, at that position. Returns the messages sent.
pub fn mouse(
    link: &mut SpiceLink,
    x: u32,
    y: u32,
    display: u8,
    click: Option<u32>,
) -> Result<usize, Error> {
    let state = |buttons| {
        Message::MouseState(MouseState {
            x,
            y,
            buttons,
            display_id: display,
        })
    };
    let mut msgs = vec![state(0)];
    if let Some(mask) = click {
        msgs.extend([state(mask), state(0)]);
    }
    for (i, m) in msgs.iter().enumerate() {
        if i == 2 {
            // The release follows the press as a person's click does; a press and release in the same instant
            // can be taken for switch bounce by the guest's input stack (libinput debounces buttons).
            std::thread::sleep(CLICK_HOLD);
        }
        // spice-server sends it on the server port (it comes from its input channel, not the client).
        link.send(Port::Server, m)?;
    }
    Ok(msgs.len())
}

/// Text for a failed transfer status.
pub fn status_text(st: &FileXferStatus) -> String {
    match (st.result, &st.detail) {
        (FileXferResult::Cancelled, _) => "the guest cancelled the transfer".into(),
        (FileXferResult::Error, FileXferDetail::Error { error_code, .. })
            if *error_code == G_IO_ERROR_INVALID_FILENAME =>
        {
            "the guest refused the file name".into()
        }
        (FileXferResult::Error, FileXferDetail::Error { error_code, .. })
            if *error_code == G_IO_ERROR_TOO_MANY_OPEN_FILES =>
        {
            "too many transfers in progress in the guest".into()
        }
        (FileXferResult::Error, FileXferDetail::Error { error_code, .. }) => {
            format!("the guest failed to save the file (GIOError {error_code})")
        }
        (FileXferResult::Error, _) => "the guest failed to save the file".into(),
        (FileXferResult::NotEnoughSpace, FileXferDetail::NotEnoughSpace { disk_free_space }) => {
            format!("not enough space in the guest ({disk_free_space} bytes free)")
        }
        (FileXferResult::NotEnoughSpace, _) => "not enough space in the guest".into(),
        (FileXferResult::SessionLocked, _) => "the guest session is locked".into(),
        (FileXferResult::VdagentNotConnected, _) => {
            "no desktop session agent runs in the guest".into()
        }
        (FileXferResult::Disabled, _) => "file transfer is disabled in the guest".into(),
        (other, _) => format!("unexpected transfer status {}", other.as_u32()),
    }
}

fn wait_status(
    link: &mut SpiceLink,
    id: u32,
    deadline: Instant,
    what: &'static str,
    timeout: Duration,
) -> Result<FileXferStatus, Error> {
    loop {
        match link.recv_until(deadline)? {
            Some((_, Message::FileXferStatus(st))) if st.id == id => return Ok(st),
            Some(_) => {}
            None => {
                return Err(Error::Timeout {
                    channel: Channel::Spice,
                    what: what.into(),
                    timeout,
                })
            }
        }
    }
}

/// Sends one file (START, wait CAN_SEND_DATA, 64 KiB DATA messages, wait SUCCESS); `progress(sent, total)`.
pub fn send_file(
    link: &mut SpiceLink,
    path: &Path,
    id: u32,
    timeout: Duration,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<u64, Error> {
    let local = |what, source| Error::Local {
        what,
        path: path.into(),
        source,
    };
    // O_NONBLOCK: opening a FIFO must not wait for a writer (it is refused below); a regular file ignores it.
    let file = File::options()
        .read(true)
        .custom_flags(nix::libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| local("cannot open", e))?;
    let meta = file.metadata().map_err(|e| local("cannot stat", e))?;
    if !meta.is_file() {
        // START announces the size, which only a regular file has.
        return Err(Error::Usage(format!(
            "{} is not a regular file",
            path.display()
        )));
    }
    let size = meta.len();
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .ok_or_else(|| Error::Usage(format!("{} has no file name", path.display())))?;
    let fail = |st: &FileXferStatus| Error::Transfer {
        name: name.clone(),
        reason: status_text(st),
    };
    link.send(
        Port::Client,
        &Message::FileXferStart(FileXferStart {
            id,
            name: name.clone(),
            size,
            file_xfer_nr: None,
            file_xfer_total: None,
        }),
    )?;
    let st = wait_status(
        link,
        id,
        Instant::now() + timeout,
        "file transfer start",
        timeout,
    )?;
    if st.result != FileXferResult::CanSendData {
        return Err(fail(&st));
    }
    let mut sent = 0u64;
    let mut frames = BatchFrames::default();
    loop {
        // `size - sent` ≤ the batch here, so it fits in usize.
        let n = (size - sent).min(BATCH_BYTES as u64) as usize;
        frames.layout(id, n)?;
        frames
            .fill(&file, sent)
            .map_err(|e| local("cannot read", e))?;
        link.send_framed(&frames.bytes)?;
        sent += n as u64;
        progress(sent, size);
        // The guest may abort mid-way.
        while let Some((_, m)) = link.try_recv()? {
            if let Message::FileXferStatus(st) = m {
                if st.id == id && st.result != FileXferResult::CanSendData {
                    return if st.result == FileXferResult::Success {
                        Ok(sent)
                    } else {
                        Err(fail(&st))
                    };
                }
            }
        }
        if sent == size {
            break;
        }
    }
    let st = wait_status(
        link,
        id,
        Instant::now() + timeout,
        "file transfer completion",
        timeout,
    )?;
    match st.result {
        FileXferResult::Success => Ok(sent),
        _ => Err(fail(&st)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use guestlink_protocol::vdagent::encode_raw_message_into;

    #[test]
    fn batches_are_the_messages_spice_gtk_sends() {
        let data: Vec<u8> = (0..BATCH_BYTES as u32 + 70_001)
            .map(|i| (i % 251) as u8)
            .collect();
        let mut f = tempfile::tempfile().unwrap();
        std::io::Write::write_all(&mut f, &data).unwrap();
        let mut frames = BatchFrames::default();
        // A full batch, the same batch shape again (frames reused, new data), a short last batch, an empty file.
        for (offset, len) in [
            (0, BATCH_BYTES),
            (70_001, BATCH_BYTES),
            (BATCH_BYTES, 70_001),
            (0, 0),
        ] {
            frames.layout(9, len).unwrap();
            frames.fill(&f, offset as u64).unwrap();
            let mut want = Vec::new();
            let mut pieces: Vec<&[u8]> = data[offset..offset + len].chunks(FILE_CHUNK).collect();
            if pieces.is_empty() {
                pieces.push(&[]);
            }
            for piece in pieces {
                let mut payload = FileXferData::payload_head(9, piece.len()).to_vec();
                payload.extend_from_slice(piece);
                encode_raw_message_into(
                    &mut want,
                    Port::Client,
                    MessageType::FileXferData.as_u32(),
                    &payload,
                    ChunkMode::Split,
                )
                .unwrap();
            }
            assert!(frames.bytes == want, "batch at {offset}, {len} bytes");
        }
        frames.layout(9, BATCH_BYTES).unwrap();
        let e = frames.fill(&f, data.len() as u64 - 10).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::UnexpectedEof, "{e}");
    }

    #[test]
    fn monitor_specs() {
        assert_eq!(
            parse_monitors("1024x768").unwrap(),
            vec![MonitorSpec {
                width: 1024,
                height: 768,
                pos: None
            }]
        );
        assert_eq!(
            parse_monitors("800x600+0+0,640x480+800+0").unwrap()[1],
            MonitorSpec {
                width: 640,
                height: 480,
                pos: Some((800, 0))
            }
        );
        for bad in ["", "x", "10x", "0x10", "10x10+1", "10x10+a+b", "99999x10"] {
            assert!(parse_monitors(bad).is_err(), "{bad}");
        }
    }
}
