//! File transfer over guest-file-*: chunked pull ([`pull()`], in `pull.rs`) and push ([`push()`], in `push.rs`),
//! sha256 verified end to end, and no partial file ever under the final name (temp name + rename on both sides).
//! This file holds what both directions share: tuning, reports, progress, the guest file handle and its
//! pipelined reader, and the guest-side hash.

mod pull;
mod push;

pub use pull::pull;
pub use push::push;

use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::error::{Error, Result};
use crate::session::{Pipeline, Session};

/// Default chunk: measured fastest against qemu-ga (1 MiB reads: 112 MB/s; 4 KiB: 35 MB/s).
pub const DEFAULT_CHUNK: usize = 1 << 20;
/// Largest chunk through libvirt: base64 of 6 MiB is 8 MiB, under libvirt's 10 MiB reply cap.
pub const MAX_CHUNK_LIBVIRT: usize = 6 << 20;
/// Largest push chunk through libvirt: the guest-file-write request is one `virsh` argument, and Linux caps one
/// argument at 128 KiB (MAX_ARG_STRLEN; execve fails with E2BIG beyond): base64 of 90 KiB is 120 KiB + the envelope.
pub const MAX_PUSH_CHUNK_LIBVIRT: usize = 90 << 10;
/// Largest chunk otherwise: guest-file-read caps count at 48 MiB; writes stay well under the 64 MiB token cap.
pub const MAX_CHUNK: usize = 32 << 20;

/// Progress callbacks (the CLI draws a bar; the library stays silent).
pub trait Progress {
    /// The transfer starts; `total` is the size when known.
    fn start(&mut self, _total: Option<u64>) {}
    /// `n` more bytes moved.
    fn advance(&mut self, _n: u64) {}
    /// A phase message (e.g. "verifying").
    fn message(&mut self, _msg: &str) {}
    /// Done (or failed).
    fn finish(&mut self) {}
    /// True when the user asked to stop (SIGINT/SIGTERM): the transfer aborts and cleans up.
    fn interrupted(&mut self) -> bool {
        false
    }
}

/// A [`Progress`] that ignores everything.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoProgress;
impl Progress for NoProgress {}

/// How the checksum was verified.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verification {
    /// The guest hashed the file (`guestlink-file-sha256`).
    GuestSha256,
    /// The written file was read back and hashed (guest file after a push, host file after a pull).
    Reread,
}

/// How a pushed file got its final name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Placement {
    /// `guestlink-file-rename` (atomic rename(2) in the guest).
    Rename,
    /// `guest-exec mv -f`.
    ExecMv,
    /// Written directly to the final name (neither rename method available).
    InPlace,
    /// Host-side rename after a pull.
    HostRename,
}

/// Result of a transfer.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct TransferReport {
    /// Source path.
    pub source: String,
    /// Destination path.
    pub destination: String,
    /// Bytes moved.
    pub bytes: u64,
    /// Hex sha256 of the content.
    pub sha256: String,
    /// How the hash was verified.
    pub verified: Verification,
    /// How the destination got its name.
    pub placement: Placement,
    /// Chunk size used.
    pub chunk_size: usize,
    /// Requests kept in flight.
    pub in_flight: usize,
    /// Wall time of the transfer, verification included.
    pub seconds: f64,
}

/// Default chunk through libvirt: every chunk costs one `virsh` process, so fewer, larger chunks.
pub const DEFAULT_CHUNK_LIBVIRT: usize = 4 << 20;

/// Chunk size and pipelining of a transfer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tuning {
    /// Bytes per guest-file-read / guest-file-write.
    pub chunk: usize,
    /// Requests kept in flight (1 = strict request/reply).
    pub in_flight: usize,
}

/// Defaults and caps for the target, applied to what the user asked for.
pub fn effective_tuning(
    session: &Session,
    chunk: Option<usize>,
    in_flight: Option<usize>,
) -> Tuning {
    let (default, max) = if session.via_libvirt() {
        (DEFAULT_CHUNK_LIBVIRT, MAX_CHUNK_LIBVIRT)
    } else {
        (DEFAULT_CHUNK, MAX_CHUNK)
    };
    Tuning {
        chunk: chunk.unwrap_or(default).clamp(4096, max),
        in_flight: in_flight
            .unwrap_or(DEFAULT_IN_FLIGHT)
            .clamp(1, MAX_IN_FLIGHT),
    }
}

fn hex(d: impl AsRef<[u8]>) -> String {
    d.as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

fn local<'a>(what: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> Error + 'a {
    move |source| Error::Local {
        what,
        path: path.to_owned(),
        source,
    }
}

/// A host file being written under a hidden temp sibling of its destination (`.NAME.guestlink-XXXXXXXX.part`
/// in the same directory, so the rename stays on one filesystem). [`HostPart::commit`] syncs it and renames it
/// over the destination; dropped before that, the temp is removed: never a partial file under the final name.
struct HostPart {
    file: File,
    tmp: PathBuf,
    committed: bool,
}

impl HostPart {
    /// Creates the temp sibling of `dest` (a new file, never an existing one).
    fn create(dest: &Path) -> Result<Self> {
        let dir = dest
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or_else(|| Path::new("."));
        let name = dest
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let tmp = dir.join(format!(
            ".{name}.guestlink-{:08x}.part",
            rand::random::<u32>()
        ));
        let file = File::options()
            .write(true)
            .create_new(true)
            .open(&tmp)
            .map_err(local("cannot create", &tmp))?;
        Ok(Self {
            file,
            tmp,
            committed: false,
        })
    }

    /// Appends `data`.
    fn write(&mut self, data: &[u8]) -> Result<()> {
        self.file
            .write_all(data)
            .map_err(local("cannot write", &self.tmp))
    }

    /// Where the bytes are until the commit (to read them back).
    fn path(&self) -> &Path {
        &self.tmp
    }

    /// Syncs the file and renames it over `dest`.
    fn commit(mut self, dest: &Path) -> Result<()> {
        self.file
            .sync_all()
            .map_err(local("cannot write", &self.tmp))?;
        std::fs::rename(&self.tmp, dest).map_err(local("cannot rename into", dest))?;
        self.committed = true;
        Ok(())
    }
}

impl Drop for HostPart {
    fn drop(&mut self) {
        if !self.committed {
            let _ = std::fs::remove_file(&self.tmp);
        }
    }
}

/// Writes `data` to the host file `dest` as a pull does ([`HostPart`]): on any failure `dest` is left as it was
/// and no temp file remains.
pub fn write_host_file(dest: &Path, data: &[u8]) -> Result<()> {
    let mut part = HostPart::create(dest)?;
    part.write(data)?;
    part.commit(dest)
}

/// A guest file handle that is closed on drop of the guard's scope via [`GuestFile::close`].
struct GuestFile {
    handle: i64,
}

impl GuestFile {
    fn open(session: &mut Session, path: &str, mode: &str) -> Result<Self> {
        let h = session.call("guest-file-open", Some(json!({"path": path, "mode": mode})))?;
        let handle = h.as_i64().ok_or_else(|| Error::BadReply {
            command: "guest-file-open".into(),
            detail: format!("handle is not an integer: {h}"),
        })?;
        Ok(Self { handle })
    }

    /// Read from the current position to EOF, pipelined, handing data to `sink`.
    fn read_all(
        &self,
        session: &mut Session,
        tuning: Tuning,
        size: Option<u64>,
        sink: &mut dyn FnMut(&[u8]) -> Result<()>,
    ) -> Result<()> {
        let mut r = Reader {
            handle: self.handle,
            chunk: tuning.chunk,
            size,
            issued: 0,
            eof: false,
            sink,
        };
        session.run_pipeline(tuning.in_flight, &mut r)
    }

    fn size(&self, session: &mut Session) -> Result<Option<u64>> {
        // Not seekable (FIFO, character device): size unknown, reads go one at a time.
        let Ok(end) = session.call(
            "guest-file-seek",
            Some(json!({"handle": self.handle, "offset": 0, "whence": 2})),
        ) else {
            return Ok(None);
        };
        session.call(
            "guest-file-seek",
            Some(json!({"handle": self.handle, "offset": 0, "whence": 0})),
        )?;
        Ok(end.get("position").and_then(Value::as_u64))
    }

    fn close(self, session: &mut Session) -> Result<()> {
        session
            .call("guest-file-close", Some(json!({"handle": self.handle})))
            .map(drop)
    }
}

/// Default requests in flight for chunked transfers (2: the agent works on one chunk while the host handles the
/// next).
pub const DEFAULT_IN_FLIGHT: usize = 2;
/// Upper bound for requests in flight (each may hold a chunk-sized reply in the socket buffers).
pub const MAX_IN_FLIGHT: usize = 16;

fn decode_read(value: &Value) -> Result<(Vec<u8>, bool)> {
    let data = match value.get("buf-b64").and_then(Value::as_str) {
        Some(s) => B64.decode(s).map_err(|e| Error::BadReply {
            command: "guest-file-read".into(),
            detail: e.to_string(),
        })?,
        None => Vec::new(),
    };
    let eof = value.get("eof").and_then(Value::as_bool).unwrap_or(false) || data.is_empty();
    Ok((data, eof))
}

/// Pipelined sequential reads of one guest handle until EOF, handing data to `sink` in order.
struct Reader<'a> {
    handle: i64,
    chunk: usize,
    /// Size from seek: reads are issued ahead only up to size + 1 bytes (the last one sees EOF).
    size: Option<u64>,
    issued: u64,
    eof: bool,
    sink: &'a mut dyn FnMut(&[u8]) -> Result<()>,
}

impl Pipeline for Reader<'_> {
    fn next_request(&mut self, in_flight: usize) -> Result<Option<(&'static str, Value)>> {
        let ahead_ok = self.size.is_some_and(|s| self.issued <= s);
        if self.eof || (in_flight > 0 && !ahead_ok) {
            return Ok(None);
        }
        self.issued += self.chunk as u64;
        Ok(Some((
            "guest-file-read",
            json!({"handle": self.handle, "count": self.chunk}),
        )))
    }

    fn on_reply(&mut self, _command: &'static str, value: Value) -> Result<()> {
        let (data, eof) = decode_read(&value)?;
        (self.sink)(&data)?;
        self.eof |= eof;
        Ok(())
    }
}

/// Hash a guest file: `guestlink-file-sha256` if available, else read it back through guest-file-read.
fn guest_sha256(
    session: &mut Session,
    path: &str,
    tuning: Tuning,
) -> Result<(String, Verification)> {
    if session.supports("guestlink-file-sha256")? {
        let r = session.call("guestlink-file-sha256", Some(json!({"path": path})))?;
        let h = r
            .get("sha256")
            .and_then(Value::as_str)
            .ok_or_else(|| Error::BadReply {
                command: "guestlink-file-sha256".into(),
                detail: format!("no sha256 in {r}"),
            })?;
        return Ok((h.to_ascii_lowercase(), Verification::GuestSha256));
    }
    let f = GuestFile::open(session, path, "rb")?;
    let mut hasher = Sha256::new();
    let res = f.size(session).and_then(|size| {
        f.read_all(session, tuning, size, &mut |d| {
            hasher.update(d);
            Ok(())
        })
    });
    let closed = f.close(session);
    res.and(closed)?;
    Ok((hex(hasher.finalize()), Verification::Reread))
}

fn split_guest_path(path: &str) -> (&str, &str) {
    match path.rsplit_once('/') {
        Some(("", name)) => ("/", name),
        Some((dir, name)) => (dir, name),
        None => ("", path),
    }
}

/// Reads until `buf` is full or the input ends; the count read.
pub(crate) fn read_full(r: &mut (impl Read + ?Sized), buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_file_is_written_whole_or_not_at_all() {
        let dir = tempfile::tempdir().unwrap();
        let dest = dir.path().join("clip.txt");
        write_host_file(&dest, b"first").unwrap();
        write_host_file(&dest, b"second").unwrap();
        assert_eq!(std::fs::read(&dest).unwrap(), b"second");
        let names = |d: &Path| -> Vec<String> {
            let mut v: Vec<String> = std::fs::read_dir(d)
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect();
            v.sort();
            v
        };
        assert_eq!(names(dir.path()), ["clip.txt"], "no temp sibling is left");

        // A destination the rename cannot replace (a non-empty directory): an error naming it, the directory
        // untouched, no temp left behind.
        let blocked = dir.path().join("blocked");
        std::fs::create_dir(&blocked).unwrap();
        std::fs::write(blocked.join("keep"), b"k").unwrap();
        let err = write_host_file(&blocked, b"data").unwrap_err();
        assert!(
            matches!(&err, Error::Local { what: "cannot rename into", path, .. } if *path == blocked),
            "{err:?}"
        );
        assert_eq!(names(dir.path()), ["blocked", "clip.txt"]);
        assert_eq!(names(&blocked), ["keep"]);

        // A directory that does not exist: the create fails, nothing appears.
        let err = write_host_file(&dir.path().join("no/such/file"), b"x").unwrap_err();
        assert!(
            matches!(
                &err,
                Error::Local {
                    what: "cannot create",
                    ..
                }
            ),
            "{err:?}"
        );
    }

    #[test]
    fn guest_paths_split() {
        assert_eq!(split_guest_path("/tmp/a.bin"), ("/tmp", "a.bin"));
        assert_eq!(split_guest_path("/a"), ("/", "a"));
        assert_eq!(split_guest_path("a"), ("", "a"));
    }
}
