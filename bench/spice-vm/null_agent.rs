//! Null SPICE guest agent, native build of bench/spice/null-agent for the in-VM benchmark (bench/spice-vm/run).
//!
//! Under TCG the Python agent spends more CPU per byte than the agents it is meant to bound, so it is no ceiling
//! there (docs/BENCHMARKS.md, "SPICE on the real transport"). This one does the same and nothing more, std only,
//! built with plain `rustc -O`:
//! * every FILE_XFER_START is answered with CAN_SEND_DATA; FILE_XFER_DATA is counted, never copied (only its
//!   12-byte head is kept); SUCCESS when the announced bytes arrived;
//! * with `--store DIR` (stack `null-store`) each file's data is also written to `DIR/.NAME.part` straight from
//!   the read buffer, and renamed to `DIR/NAME` before SUCCESS: the least any agent that keeps the file must do,
//!   a reference for what storing costs under TCG;
//! * a host CLIPBOARD_GRAB is answered at once with a CLIPBOARD_REQUEST for its first type; the CLIPBOARD answer
//!   is counted and dropped;
//! * with `--clipboard-bytes N` it grabs the guest clipboard (UTF8_TEXT) after each capabilities exchange and
//!   answers every CLIPBOARD_REQUEST with N bytes held in memory.
//!
//! One line per finished transfer or received clipboard goes to stdout. A read of 0 bytes means no host is
//! connected (virtio-serial): the parser is reset and the port polled.
//!
//! Usage: null-agent PORT [--clipboard-bytes N] [--store DIR]

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::path::PathBuf;
use std::time::Duration;

const ANNOUNCE: u32 = 6;
const CLIPBOARD: u32 = 4;
const GRAB: u32 = 7;
const REQUEST: u32 = 8;
const XFER_START: u32 = 10;
const XFER_STATUS: u32 = 11;
const XFER_DATA: u32 = 12;
const CAN_SEND_DATA: u32 = 0;
const ERROR: u32 = 2;
const SUCCESS: u32 = 3;
const CAP_SELECTION: u32 = 6;
const OUR_CAPS: u32 = (1 << 2) | (1 << 5) | (1 << 6) | (1 << 8) | (1 << 10) | (1 << 16);
const UTF8_TEXT: u32 = 1;
/// Bytes of a message body kept for parsing; the rest (clipboard payloads) is only counted.
const HEAD_MAX: usize = 64 * 1024;
/// What is kept of a FILE_XFER_DATA body: its id and size; the data itself is counted (or stored), not copied.
const DATA_HEAD: usize = 12;

fn u32_at(b: &[u8], off: usize) -> u32 {
    b.get(off..off + 4)
        .map_or(0, |s| u32::from_le_bytes(s.try_into().unwrap()))
}

struct Agent<W: Write> {
    port: W,
    clip: Option<Vec<u8>>,
    peer_caps: u32,
    /// transfer id -> (announced size, received)
    xfers: HashMap<u32, (u64, u64)>,
    /// `--store DIR`: where files go, and each transfer's open `.part` file and final path.
    store: Option<PathBuf>,
    files: HashMap<u32, (File, PathBuf, PathBuf)>,
    // parser state
    chunk_left: usize,
    chunk_hdr: Vec<u8>,
    msg_hdr: Vec<u8>,
    msg: Option<(u32, usize)>, // type, body bytes still to come
    head: Vec<u8>,
    body_len: usize,
}

impl<W: Write> Agent<W> {
    fn reset(&mut self) {
        self.chunk_left = 0;
        self.chunk_hdr.clear();
        self.msg_hdr.clear();
        self.msg = None;
        self.head.clear();
    }

    fn sel(&self) -> &'static [u8] {
        if self.peer_caps & (1 << CAP_SELECTION) != 0 {
            &[0, 0, 0, 0]
        } else {
            &[]
        }
    }

    fn send(&mut self, mtype: u32, parts: &[&[u8]]) -> std::io::Result<()> {
        let size: usize = parts.iter().map(|p| p.len()).sum();
        let mut h = Vec::with_capacity(28);
        h.extend_from_slice(&1u32.to_le_bytes()); // chunk port: client
        h.extend_from_slice(&((20 + size) as u32).to_le_bytes());
        h.extend_from_slice(&1u32.to_le_bytes()); // protocol
        h.extend_from_slice(&mtype.to_le_bytes());
        h.extend_from_slice(&0u64.to_le_bytes());
        h.extend_from_slice(&(size as u32).to_le_bytes());
        self.port.write_all(&h)?;
        for p in parts {
            self.port.write_all(p)?;
        }
        Ok(())
    }

    fn status(&mut self, xid: u32, result: u32) -> std::io::Result<()> {
        let mut b = xid.to_le_bytes().to_vec();
        b.extend_from_slice(&result.to_le_bytes());
        self.send(XFER_STATUS, &[&b])
    }

    /// Feeds bytes read from the port.
    fn feed(&mut self, mut data: &[u8]) -> std::io::Result<()> {
        while !data.is_empty() {
            if self.chunk_left == 0 {
                let take = (8 - self.chunk_hdr.len()).min(data.len());
                self.chunk_hdr.extend_from_slice(&data[..take]);
                data = &data[take..];
                if self.chunk_hdr.len() == 8 {
                    self.chunk_left = u32_at(&self.chunk_hdr, 4) as usize;
                    self.chunk_hdr.clear();
                }
                continue;
            }
            let n = self.chunk_left.min(data.len());
            self.payload(&data[..n])?;
            self.chunk_left -= n;
            data = &data[n..];
        }
        Ok(())
    }

    fn payload(&mut self, mut data: &[u8]) -> std::io::Result<()> {
        while !data.is_empty() {
            match self.msg {
                None => {
                    let take = (20 - self.msg_hdr.len()).min(data.len());
                    self.msg_hdr.extend_from_slice(&data[..take]);
                    data = &data[take..];
                    if self.msg_hdr.len() == 20 {
                        let mtype = u32_at(&self.msg_hdr, 4);
                        let size = u32_at(&self.msg_hdr, 16) as usize;
                        self.msg_hdr.clear();
                        self.head.clear();
                        self.body_len = size;
                        self.msg = Some((mtype, size));
                        if size == 0 {
                            self.finish(mtype)?;
                        }
                    }
                }
                Some((mtype, left)) => {
                    let n = left.min(data.len());
                    let max = if mtype == XFER_DATA {
                        DATA_HEAD
                    } else {
                        HEAD_MAX
                    };
                    let keep = max.saturating_sub(self.head.len()).min(n);
                    self.head.extend_from_slice(&data[..keep]);
                    if mtype == XFER_DATA && self.head.len() == DATA_HEAD && keep < n {
                        if let Some((f, _, _)) = self.files.get_mut(&u32_at(&self.head, 0)) {
                            f.write_all(&data[keep..n])?;
                        }
                    }
                    data = &data[n..];
                    self.msg = Some((mtype, left - n));
                    if left == n {
                        self.finish(mtype)?;
                    }
                }
            }
        }
        Ok(())
    }

    fn finish(&mut self, mtype: u32) -> std::io::Result<()> {
        self.msg = None;
        let body = std::mem::take(&mut self.head);
        match mtype {
            ANNOUNCE => {
                let request = u32_at(&body, 0);
                self.peer_caps = u32_at(&body, 4);
                if request != 0 {
                    let b = [0u32.to_le_bytes(), OUR_CAPS.to_le_bytes()].concat();
                    self.send(ANNOUNCE, &[&b])?;
                }
                if self.clip.is_some() {
                    let sel = self.sel();
                    self.send(GRAB, &[sel, &UTF8_TEXT.to_le_bytes()])?;
                }
            }
            XFER_START => {
                let xid = u32_at(&body, 0);
                let text = String::from_utf8_lossy(body.get(4..).unwrap_or(&[]));
                let size = text
                    .lines()
                    .find_map(|l| l.strip_prefix("size="))
                    .and_then(|s| s.trim_end_matches('\0').trim().parse().ok())
                    .unwrap_or(0);
                self.xfers.insert(xid, (size, 0));
                if let Some(dir) = &self.store {
                    let name = text
                        .lines()
                        .find_map(|l| l.strip_prefix("name="))
                        .map(|s| s.trim_end_matches('\0').trim().replace('/', "_"))
                        .unwrap_or_else(|| format!("file-{xid}"));
                    let part = dir.join(format!(".{name}.part"));
                    let f = File::create(&part)?;
                    self.files.insert(xid, (f, part, dir.join(name)));
                }
                self.status(xid, CAN_SEND_DATA)?;
            }
            XFER_DATA => {
                let xid = u32_at(&body, 0);
                let got = self.body_len.saturating_sub(12) as u64;
                if let Some(x) = self.xfers.get_mut(&xid) {
                    x.1 += got;
                    if x.1 >= x.0 {
                        let (want, have) = *x;
                        self.xfers.remove(&xid);
                        if let Some((f, part, name)) = self.files.remove(&xid) {
                            drop(f);
                            std::fs::rename(part, name)?;
                        }
                        self.status(xid, if have == want { SUCCESS } else { ERROR })?;
                        println!("file {xid}: {have} bytes");
                    }
                }
            }
            XFER_STATUS => {
                let xid = u32_at(&body, 0);
                self.xfers.remove(&xid);
                if let Some((_, part, _)) = self.files.remove(&xid) {
                    let _ = std::fs::remove_file(part);
                }
            }
            GRAB => {
                let off = self.sel().len();
                if body.len() >= off + 4 {
                    let sel = self.sel();
                    self.send(REQUEST, &[sel, &body[off..off + 4]])?;
                }
            }
            CLIPBOARD => {
                let n = self.body_len.saturating_sub(self.sel().len() + 4);
                println!("clipboard from host: {n} bytes");
            }
            REQUEST => {
                let ctype = u32_at(&body, self.sel().len());
                let sel = self.sel();
                let clip = self.clip.take();
                let data: &[u8] = match &clip {
                    Some(c) if ctype == UTF8_TEXT => c,
                    _ => &[],
                };
                let t = if data.is_empty() { 0 } else { ctype };
                let r = self.send(CLIPBOARD, &[sel, &t.to_le_bytes(), data]);
                self.clip = clip;
                r?;
            }
            _ => {}
        }
        std::io::stdout().flush()
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let usage = "usage: null-agent PORT [--clipboard-bytes N] [--store DIR]";
    let path = args.get(1).expect(usage);
    let (mut clip, mut store) = (None, None);
    for opt in args[2..].chunks(2) {
        match (opt[0].as_str(), opt.get(1)) {
            ("--clipboard-bytes", Some(n)) => clip = Some(vec![b'x'; n.parse().expect(usage)]),
            ("--store", Some(d)) => store = Some(PathBuf::from(d)),
            _ => panic!("{usage}"),
        }
    }
    let mut port = OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .expect("open the port");
    let writer = port.try_clone().expect("dup the port");
    let mut agent = Agent {
        port: writer,
        clip,
        peer_caps: 0,
        xfers: HashMap::new(),
        store,
        files: HashMap::new(),
        chunk_left: 0,
        chunk_hdr: Vec::new(),
        msg_hdr: Vec::new(),
        msg: None,
        head: Vec::new(),
        body_len: 0,
    };
    let mut buf = vec![0u8; 1 << 20];
    loop {
        match port.read(&mut buf) {
            Ok(0) => {
                agent.reset();
                std::thread::sleep(Duration::from_millis(10));
            }
            Ok(n) => agent.feed(&buf[..n]).expect("write to the port"),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => panic!("read the port: {e}"),
        }
    }
}
