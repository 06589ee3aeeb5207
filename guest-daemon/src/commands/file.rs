//! guest-file-*: the handle table, the persistent handle counter (`<statedir>/qga.state`), fopen-mode mapping and
//! the read/write/seek/flush semantics of qemu-ga (stdio-like, but unbuffered: every call goes straight to the fd).
//!
//! Reads are done by [`super::file_read`].

use std::collections::HashMap;
use std::fs::{File, OpenOptions, Permissions};
use std::io::{ErrorKind, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use base64::Engine;

use super::error::{CommandError, CommandResult};
pub use super::file_read::FileRead;

/// First handle id (qemu-ga's `QGA_PSTATE_DEFAULT_FD_COUNTER`).
pub const FIRST_HANDLE: i64 = 1000;
/// Default `count` of guest-file-read (`QGA_READ_COUNT_DEFAULT`).
pub const READ_COUNT_DEFAULT: i64 = 4096;
/// Largest `count` of guest-file-read (48 MiB: base64 of it fits the 64 MiB JSON limit).
pub const READ_COUNT_MAX: i64 = 48 * 1024 * 1024;

/// One open file.
#[derive(Debug)]
struct OpenFile {
    file: File,
}

#[derive(Debug)]
struct Table {
    next: i64,
    files: HashMap<i64, Arc<Mutex<OpenFile>>>,
}

/// The handle table of guest-file-*.
#[derive(Debug)]
pub struct FileTable {
    state_path: PathBuf,
    file_mode: u32,
    table: Mutex<Table>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding the lock leaves plain data behind; keep serving.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Reads `fd_counter` from a qga.state key-file (`[global]` group).
pub fn parse_state(text: &str) -> Option<i64> {
    let mut in_global = false;
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            in_global = line == "[global]";
        } else if in_global {
            if let Some((k, v)) = line.split_once('=') {
                if k.trim() == "fd_counter" {
                    return v.trim().parse().ok();
                }
            }
        }
    }
    None
}

/// Writes qga.state atomically (a fresh temp file with a random name, then rename), like `g_file_set_contents`:
/// see [`crate::state::write_atomic`].
pub fn write_state(path: &Path, counter: i64) -> std::io::Result<()> {
    crate::state::write_atomic(
        path,
        format!("[global]\nfd_counter={counter}\n").as_bytes(),
        0o600,
    )
}

/// The open(2) options for an fopen() mode string, or `None` when qemu-ga rejects it.
fn open_options(mode: &str) -> Option<(OpenOptions, bool)> {
    let mut o = OpenOptions::new();
    let creates = match mode {
        "r" | "rb" => {
            o.read(true);
            false
        }
        "w" | "wb" => {
            o.write(true).truncate(true);
            true
        }
        "a" | "ab" => {
            o.append(true);
            true
        }
        "r+" | "rb+" | "r+b" => {
            o.read(true).write(true);
            false
        }
        "w+" | "wb+" | "w+b" => {
            o.read(true).write(true).truncate(true);
            true
        }
        "a+" | "ab+" | "a+b" => {
            o.read(true).append(true);
            true
        }
        _ => return None,
    };
    // std adds O_CLOEXEC; non-blocking so FIFOs and devices cannot hang the daemon.
    o.custom_flags(libc::O_NOCTTY | libc::O_NONBLOCK);
    Some((o, creates))
}

/// Lenient base64 decoding with qemu's checks: only the base64 alphabet and '=' are allowed; then decoding works
/// in quads like GLib's `g_base64_decode` (a trailing partial quad is ignored).
pub fn decode_base64(input: &str) -> CommandResult<Vec<u8>> {
    if let Ok(v) = base64::engine::general_purpose::STANDARD.decode(input) {
        return Ok(v);
    }
    let val = |c: u8| -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => u32::from(c - b'A'),
            b'a'..=b'z' => u32::from(c - b'a') + 26,
            b'0'..=b'9' => u32::from(c - b'0') + 52,
            b'+' => 62,
            b'/' => 63,
            b'=' => 0,
            _ => return None,
        })
    };
    let bytes = input.as_bytes();
    if bytes.iter().any(|&c| val(c).is_none()) {
        return Err(CommandError::generic(
            "Base64 data contains invalid characters",
        ));
    }
    let mut out = Vec::with_capacity(bytes.len() / 4 * 3);
    for quad in bytes.chunks_exact(4) {
        let mut acc = 0u32;
        let mut pad = 0;
        for &c in quad {
            acc = (acc << 6) | val(c).unwrap_or(0);
            if c == b'=' {
                pad += 1;
            }
        }
        let b = acc.to_be_bytes();
        out.extend_from_slice(&b[1..4 - pad.min(2)]);
    }
    Ok(out)
}

impl FileTable {
    /// Loads (or creates) `<statedir>/qga.state`.
    pub fn new(statedir: &Path, file_mode: u32) -> CommandResult<FileTable> {
        let state_path = statedir.join("qga.state");
        let next = match std::fs::read_to_string(&state_path) {
            Ok(text) => parse_state(&text)
                .filter(|&n| n >= 0)
                .unwrap_or(FIRST_HANDLE),
            Err(e) if e.kind() == ErrorKind::NotFound => {
                if let Err(e) = write_state(&state_path, FIRST_HANDLE) {
                    tracing::warn!(path = %state_path.display(), error = %e, "cannot write persistent state");
                }
                FIRST_HANDLE
            }
            Err(e) => {
                return Err(CommandError::io(
                    format!("failed to read '{}'", state_path.display()),
                    &e,
                ))
            }
        };
        Ok(FileTable {
            state_path,
            file_mode,
            table: Mutex::new(Table {
                next,
                files: HashMap::new(),
            }),
        })
    }

    /// The umask may have removed bits of the configured mode at creation (e.g. `--file-mode 0666`, qemu-ga's
    /// mode, under the usual 022): add exactly those back with fchmod, so the file ends with the configured mode
    /// whatever the umask. This only ever widens towards the configured mode, never beyond it.
    fn widen_to_file_mode(&self, f: &File) -> CommandResult<()> {
        let created = f
            .metadata()
            .map(|m| m.permissions().mode() & 0o7777)
            .unwrap_or(0);
        if created == self.file_mode {
            return Ok(());
        }
        f.set_permissions(Permissions::from_mode(self.file_mode))
            .map_err(|e| {
                CommandError::io(
                    format!(
                        "failed to set permission 0{:03o} on new file",
                        self.file_mode
                    ),
                    &e,
                )
            })
    }

    /// Number of open handles.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        lock(&self.table).files.len()
    }

    fn find(&self, handle: i64) -> CommandResult<Arc<Mutex<OpenFile>>> {
        lock(&self.table)
            .files
            .get(&handle)
            .cloned()
            .ok_or_else(|| CommandError::generic(format!("handle '{handle}' has not been found")))
    }

    /// guest-file-open.
    pub fn open(&self, path: &str, mode: Option<&str>) -> CommandResult<i64> {
        let mode = mode.unwrap_or("r");
        let (opts, creates) = open_options(mode)
            .ok_or_else(|| CommandError::generic(format!("invalid file open mode '{mode}'")))?;
        let open_err = |e: &std::io::Error| {
            CommandError::io(format!("failed to open file '{path}' (mode: '{mode}')"), e)
        };
        let file = if creates {
            // The file is created with the configured mode by open(2) itself, so it is never, even for an
            // instant, more accessible than that mode (creating it with the default 0666 & ~umask and fchmod-ing
            // afterwards let a watcher in a shared directory open it in between: CVE-2013-2007's class).
            match opts
                .clone()
                .create_new(true)
                .mode(self.file_mode)
                .open(path)
            {
                Ok(f) => {
                    if let Err(e) = self.widen_to_file_mode(&f) {
                        drop(f);
                        let _ = std::fs::remove_file(path);
                        return Err(e);
                    }
                    f
                }
                Err(e) if e.kind() == ErrorKind::AlreadyExists => {
                    opts.open(path).map_err(|e| open_err(&e))?
                }
                Err(e) => return Err(open_err(&e)),
            }
        } else {
            opts.open(path).map_err(|e| open_err(&e))?
        };
        let mut t = lock(&self.table);
        let handle = t.next;
        let next = if handle >= i64::MAX - 1 {
            FIRST_HANDLE
        } else {
            handle + 1
        };
        if write_state(&self.state_path, next).is_err() {
            return Err(CommandError::generic(
                "failed to commit persistent state to disk",
            ));
        }
        t.next = next;
        t.files
            .insert(handle, Arc::new(Mutex::new(OpenFile { file })));
        Ok(handle)
    }

    /// guest-file-close.
    pub fn close(&self, handle: i64) -> CommandResult<()> {
        lock(&self.table)
            .files
            .remove(&handle)
            .map(drop)
            .ok_or_else(|| CommandError::generic(format!("handle '{handle}' has not been found")))
    }

    /// guest-file-read (blocking on regular files only; FIFOs are non-blocking).
    pub fn read(&self, handle: i64, count: Option<i64>) -> CommandResult<FileRead> {
        let of = self.find(handle)?;
        let count = match count {
            None => READ_COUNT_DEFAULT,
            Some(c) if (0..=READ_COUNT_MAX).contains(&c) => c,
            Some(c) => return Err(CommandError::invalid_value(c, "count")),
        };
        let mut of = lock(&of);
        super::file_read::read_raw(&mut of.file, count as usize)
    }

    /// guest-file-write.
    pub fn write(
        &self,
        handle: i64,
        buf_b64: &str,
        count: Option<i64>,
    ) -> CommandResult<(i64, bool)> {
        let of = self.find(handle)?;
        let data = decode_base64(buf_b64)?;
        let count = match count {
            None => data.len(),
            Some(c) if c >= 0 && (c as u64) <= data.len() as u64 => c as usize,
            Some(c) => return Err(CommandError::invalid_value(c, "count")),
        };
        let mut of = lock(&of);
        let mut done = 0;
        while done < count {
            match of.file.write(&data[done..count]) {
                Ok(0) => break,
                Ok(n) => done += n,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if e.kind() == ErrorKind::WouldBlock && done > 0 => break,
                Err(e) => return Err(CommandError::io("failed to write to file", &e)),
            }
        }
        Ok((done as i64, false))
    }

    /// guest-file-seek; `whence` is the numeric code (0 set, 1 cur, 2 end).
    pub fn seek(&self, handle: i64, offset: i64, whence: i64) -> CommandResult<(i64, bool)> {
        let of = self.find(handle)?;
        let pos = match whence {
            0 => {
                if offset < 0 {
                    return Err(CommandError::Os {
                        msg: "failed to seek file".into(),
                        errno: libc::EINVAL,
                    });
                }
                SeekFrom::Start(offset as u64)
            }
            1 => SeekFrom::Current(offset),
            2 => SeekFrom::End(offset),
            w => return Err(CommandError::generic(format!("invalid whence code {w}"))),
        };
        let mut of = lock(&of);
        let p = of
            .file
            .seek(pos)
            .map_err(|e| CommandError::io("failed to seek file", &e))?;
        Ok((i64::try_from(p).unwrap_or(i64::MAX), false))
    }

    /// guest-file-flush (nothing is buffered, so this only checks the handle).
    pub fn flush(&self, handle: i64) -> CommandResult<()> {
        let of = self.find(handle)?;
        let mut of = lock(&of);
        of.file
            .flush()
            .map_err(|e| CommandError::io("failed to flush file", &e))
    }
}

/// The extension `guestlink-file-rename`: rename(2), atomic within one filesystem.
pub fn rename(from: &str, to: &str) -> CommandResult<()> {
    std::fs::rename(from, to)
        .map_err(|e| CommandError::io(format!("failed to rename '{from}' to '{to}'"), &e))
}

/// The extension `guestlink-file-sha256`: `{sha256: hex, size}` of a file, read in 1 MiB blocks.
pub fn sha256(path: &str) -> CommandResult<serde_json::Value> {
    use sha2::{Digest, Sha256};
    let err = |e: &std::io::Error| CommandError::io(format!("failed to read file '{path}'"), e);
    let mut f = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOCTTY | libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| err(&e))?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1024 * 1024];
    let mut size: u64 = 0;
    loop {
        match f.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                h.update(&buf[..n]);
                size += n as u64;
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(err(&e)),
        }
    }
    let hex: String = h.finalize().iter().map(|b| format!("{b:02x}")).collect();
    Ok(serde_json::json!({ "sha256": hex, "size": size }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b64(d: &[u8]) -> String {
        base64::engine::general_purpose::STANDARD.encode(d)
    }

    #[test]
    fn file_ops_like_test_qga() {
        let dir = tempfile::tempdir().unwrap();
        let t = FileTable::new(dir.path(), 0o600).unwrap();
        let foo = dir.path().join("foo");
        let foo = foo.to_str().unwrap();
        let data = b"Hello World!\n\0";
        let h = t.open(foo, Some("w+")).unwrap();
        assert_eq!(h, FIRST_HANDLE);
        assert_eq!(t.write(h, &b64(data), None).unwrap(), (14, false));
        t.flush(h).unwrap();
        t.close(h).unwrap();
        assert_eq!(std::fs::read(foo).unwrap(), data);
        let meta = std::fs::metadata(foo).unwrap();
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);

        let h = t.open(foo, Some("r")).unwrap();
        assert_eq!(h, FIRST_HANDLE + 1);
        let r = t.read(h, None).unwrap();
        assert_eq!(
            (r.count, r.eof, r.b64().as_str()),
            (14, true, b64(data).as_str())
        );
        let r = t.read(h, None).unwrap();
        assert_eq!((r.count, r.eof, r.b64().as_str()), (0, true, ""));
        assert_eq!(t.seek(h, 6, 0).unwrap(), (6, false));
        let r = t.read(h, None).unwrap();
        assert_eq!((r.count, r.eof), (8, true));
        assert_eq!(r.data.clone(), &data[6..]);
        // writing to a read-only handle
        let e = t.write(h, &b64(b"x"), None).unwrap_err();
        assert_eq!(
            e.to_string(),
            "failed to write to file: Bad file descriptor"
        );
        t.close(h).unwrap();
        // the counter survives a restart
        let t2 = FileTable::new(dir.path(), 0o600).unwrap();
        assert_eq!(t2.open(foo, None).unwrap(), FIRST_HANDLE + 2);
        let state = std::fs::read_to_string(dir.path().join("qga.state")).unwrap();
        assert_eq!(state, "[global]\nfd_counter=1003\n");
    }

    #[test]
    fn write_then_read_without_flush() {
        let dir = tempfile::tempdir().unwrap();
        let t = FileTable::new(dir.path(), 0o600).unwrap();
        let p = dir.path().join("f");
        let h = t.open(p.to_str().unwrap(), Some("w+")).unwrap();
        t.write(h, &b64(b"Hello World!\n\0"), None).unwrap();
        let r = t.read(h, None).unwrap();
        assert_eq!((r.count, r.eof, r.b64().as_str()), (0, true, ""));
        assert_eq!(t.seek(h, 0, 0).unwrap(), (0, false));
        let r = t.read(h, None).unwrap();
        assert_eq!((r.count, r.eof), (14, true));
    }

    #[test]
    fn errors() {
        let dir = tempfile::tempdir().unwrap();
        let t = FileTable::new(dir.path(), 0o600).unwrap();
        let p = dir.path().join("f");
        let p = p.to_str().unwrap();
        assert_eq!(
            t.open(p, Some("rw")).unwrap_err().to_string(),
            "invalid file open mode 'rw'"
        );
        assert_eq!(
            t.open(p, Some("r")).unwrap_err().to_string(),
            format!("failed to open file '{p}' (mode: 'r'): No such file or directory")
        );
        assert_eq!(
            t.read(999, None).unwrap_err().to_string(),
            "handle '999' has not been found"
        );
        let h = t.open(p, Some("w")).unwrap();
        assert_eq!(
            t.read(h, Some(READ_COUNT_MAX + 1)).unwrap_err().to_string(),
            "value '50331649' is invalid for argument count"
        );
        assert_eq!(
            t.read(h, Some(-1)).unwrap_err().to_string(),
            "value '-1' is invalid for argument count"
        );
        assert_eq!(
            t.write(h, "!!!!", None).unwrap_err().to_string(),
            "Base64 data contains invalid characters"
        );
        assert_eq!(
            t.write(h, &b64(b"ab"), Some(3)).unwrap_err().to_string(),
            "value '3' is invalid for argument count"
        );
        assert_eq!(t.write(h, &b64(b"abc"), Some(2)).unwrap(), (2, false));
        assert_eq!(
            t.seek(h, 0, 7).unwrap_err().to_string(),
            "invalid whence code 7"
        );
        assert_eq!(t.seek(h, 0, 2).unwrap(), (2, false));
        t.close(h).unwrap();
        assert!(t.close(h).is_err());
        assert_eq!(t.len(), 0);
    }

    #[test]
    fn lenient_base64() {
        assert_eq!(decode_base64("QQ==").unwrap(), b"A");
        assert_eq!(decode_base64("QUJD").unwrap(), b"ABC");
        assert_eq!(decode_base64("QUI").unwrap(), b""); // partial quad dropped, like GLib
        assert_eq!(decode_base64("").unwrap(), b"");
    }

    const CHUNK: usize = 3 * 1024 * 1024;

    #[test]
    fn large_read_chunks_and_fifo_does_not_block() {
        let dir = tempfile::tempdir().unwrap();
        let t = FileTable::new(dir.path(), 0o600).unwrap();
        let p = dir.path().join("big");
        let data: Vec<u8> = (0..(CHUNK * 2 + 1000))
            .map(|i| (i * 7 % 251) as u8)
            .collect();
        std::fs::write(&p, &data).unwrap();
        let h = t.open(p.to_str().unwrap(), None).unwrap();
        let r = t.read(h, Some(READ_COUNT_MAX)).unwrap();
        assert_eq!(r.count as usize, data.len());
        assert!(r.eof);
        assert_eq!(r.b64(), b64(&data));
        // exact count: no EOF seen yet
        t.seek(h, 0, 0).unwrap();
        let r = t.read(h, Some(CHUNK as i64 + 1)).unwrap();
        assert_eq!((r.count as usize, r.eof), (CHUNK + 1, false));
        assert_eq!(r.b64(), b64(&data[..CHUNK + 1]));

        let fifo = dir.path().join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let h = t.open(fifo.to_str().unwrap(), Some("r+")).unwrap();
        let e = t.read(h, None).unwrap_err();
        assert_eq!(
            e.to_string(),
            "failed to read file: Resource temporarily unavailable"
        );
        t.write(h, &b64(b"ping"), None).unwrap();
        let r = t.read(h, None).unwrap();
        assert_eq!((r.count, r.eof), (4, false));
    }

    #[test]
    fn sha256_of_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("abc");
        std::fs::write(&p, b"abc").unwrap();
        let v = sha256(p.to_str().unwrap()).unwrap();
        assert_eq!(
            v["sha256"],
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(v["size"], 3);
        assert!(sha256("/nonexistent/x").is_err());
    }

    #[test]
    fn rename_reports_errno() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a");
        let b = dir.path().join("b");
        std::fs::write(&a, b"x").unwrap();
        rename(a.to_str().unwrap(), b.to_str().unwrap()).unwrap();
        assert_eq!(std::fs::read(&b).unwrap(), b"x");
        let e = rename(a.to_str().unwrap(), b.to_str().unwrap()).unwrap_err();
        assert!(e.to_string().ends_with("No such file or directory"));
    }
}
