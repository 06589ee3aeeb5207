//! Received files: host → guest transfers saved in the download directory.
//!
//! Every file is written under a hidden temporary name (`.<name>.<id>.guestlink-partial`), created with
//! `openat(dirfd, O_CREAT|O_EXCL|O_NOFOLLOW)` directly under the directory fd, so a transfer can neither escape the
//! directory (names are one validated path component) nor follow a planted symlink. Only a complete transfer is
//! renamed to its final name, with `renameat2(RENAME_NOREPLACE)`; a taken name becomes `name (1).ext`,
//! `name (2).ext`, …. Cancel, error or a lost daemon unlink the temporary file, so no partial file ever appears
//! under its final name. The bytes reach the disk through [`crate::file_writer`] (direct I/O on a thread for
//! large files on a local disk, at most [`MAX_DIRECT`] at once) and are fsynced before the rename; a failed
//! write or fsync fails the transfer.

use std::collections::HashMap;
use std::fs::File;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use guestlink_protocol::session::SessionMessage;
use guestlink_protocol::vdagent::file_xfer::G_IO_ERROR_INVALID_FILENAME;
use guestlink_protocol::vdagent::{validate_file_name, FileXferResult};
use nix::errno::Errno;
use nix::fcntl::{openat, renameat2, OFlag, RenameFlags};
use nix::sys::stat::Mode;
use nix::unistd::{unlinkat, UnlinkatFlags};

use crate::file_writer::{FileWriter, WriteMode, MAX_DIRECT};

/// Most simultaneously active transfers (spice-vdagentd's limit).
pub const MAX_ACTIVE_TRANSFERS: usize = 128;
/// Highest conflict suffix tried (`name (N).ext`).
const MAX_CONFLICT_INDEX: u32 = 999;
/// `G_IO_ERROR_FAILED`.
const G_IO_ERROR_FAILED: u32 = 0;
/// `G_IO_ERROR_NO_SPACE`.
const G_IO_ERROR_NO_SPACE: u32 = 12;
/// `G_IO_ERROR_EXISTS`.
const G_IO_ERROR_EXISTS: u32 = 2;
/// `G_IO_ERROR_TOO_MANY_OPEN_FILES`.
const G_IO_ERROR_TOO_MANY_OPEN_FILES: u32 = 31;

struct Transfer {
    name: String,
    temp_name: String,
    size: u64,
    received: u64,
    writer: FileWriter,
    dir: OwnedFd,
}

/// The state of all active transfers of one daemon connection.
pub struct FileReceiver {
    dir: Option<PathBuf>,
    disabled: bool,
    /// `--buffered-writes`: never direct I/O.
    buffered_only: bool,
    active: HashMap<u32, Transfer>,
}

impl std::fmt::Debug for FileReceiver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileReceiver")
            .field("dir", &self.dir)
            .field("disabled", &self.disabled)
            .field("active", &self.active.len())
            .finish()
    }
}

fn status(id: u32, result: FileXferResult) -> SessionMessage {
    SessionMessage::FileXferStatus {
        id,
        status: result.as_u32(),
        disk_free_space: None,
        error_code: None,
    }
}

fn error(id: u32, code: u32) -> SessionMessage {
    SessionMessage::FileXferStatus {
        id,
        status: FileXferResult::Error.as_u32(),
        disk_free_space: None,
        error_code: Some(code),
    }
}

fn io_code(e: Errno) -> u32 {
    match e {
        Errno::ENOSPC | Errno::EDQUOT => G_IO_ERROR_NO_SPACE,
        Errno::EEXIST => G_IO_ERROR_EXISTS,
        Errno::EMFILE | Errno::ENFILE => G_IO_ERROR_TOO_MANY_OPEN_FILES,
        _ => G_IO_ERROR_FAILED,
    }
}

/// [`io_code`] of an I/O error (`G_IO_ERROR_FAILED` when it carries no errno).
fn io_error_code(e: &std::io::Error) -> u32 {
    e.raw_os_error()
        .map_or(G_IO_ERROR_FAILED, |c| io_code(Errno::from_raw(c)))
}

/// `name (n).ext` for `name.ext` (the extension is the part after the last dot, unless the name starts with it).
pub fn conflict_name(name: &str, n: u32) -> String {
    match name.rfind('.') {
        Some(dot) if dot > 0 => format!("{} ({n}){}", &name[..dot], &name[dot..]),
        _ => format!("{name} ({n})"),
    }
}

fn temp_name(name: &str, id: u32) -> String {
    // Keep the temporary name within NAME_MAX: cut the original name at a char boundary.
    let mut cut = name.len().min(200);
    while !name.is_char_boundary(cut) {
        cut -= 1;
    }
    format!(".{}.{id}.guestlink-partial", &name[..cut])
}

impl FileReceiver {
    /// Transfers are saved in `dir` (`None`: no download directory, transfers are answered DISABLED).
    pub fn new(dir: Option<PathBuf>) -> Self {
        Self {
            dir,
            disabled: false,
            buffered_only: false,
            active: HashMap::new(),
        }
    }

    /// Writes every file through the page cache (`--buffered-writes`).
    pub fn buffered_only(&mut self) {
        self.buffered_only = true;
    }

    /// The daemon said file transfer is not allowed for this session.
    pub fn disable(&mut self) {
        self.disabled = true;
        self.abort_all();
    }

    fn open_dir(dir: &Path) -> Result<OwnedFd, Errno> {
        if let Err(e) = std::fs::create_dir_all(dir) {
            tracing::warn!(dir = %dir.display(), "cannot create the download directory: {e}");
        }
        nix::fcntl::open(
            dir,
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
    }

    /// FILE_XFER_START: validates, checks the free space, creates the temporary file. Returns the status to send.
    pub fn start(&mut self, id: u32, name: &str, size: u64) -> SessionMessage {
        let Some(dir) = self.dir.as_deref().filter(|_| !self.disabled) else {
            return status(id, FileXferResult::Disabled);
        };
        if self.active.contains_key(&id) {
            tracing::warn!(id, "file transfer id already active");
            return error(id, G_IO_ERROR_EXISTS);
        }
        if self.active.len() >= MAX_ACTIVE_TRANSFERS {
            return error(id, G_IO_ERROR_TOO_MANY_OPEN_FILES);
        }
        if let Err(e) = validate_file_name(name) {
            tracing::warn!(id, ?name, "file transfer refused: {e}");
            return error(id, G_IO_ERROR_INVALID_FILENAME);
        }
        let dir_fd = match Self::open_dir(dir) {
            Ok(fd) => fd,
            Err(e) => {
                tracing::warn!(dir = %dir.display(), "cannot open the download directory: {e}");
                return error(id, io_code(e));
            }
        };
        match nix::sys::statvfs::fstatvfs(&dir_fd) {
            Ok(st) => {
                // fsblkcnt_t is not u64 on every target.
                #[allow(clippy::useless_conversion)]
                let free = u64::from(st.blocks_available()).saturating_mul(st.fragment_size());
                if size > free {
                    tracing::warn!(id, size, free, "not enough space for a received file");
                    return SessionMessage::FileXferStatus {
                        id,
                        status: FileXferResult::NotEnoughSpace.as_u32(),
                        disk_free_space: Some(free),
                        error_code: None,
                    };
                }
            }
            Err(e) => tracing::warn!("statvfs on the download directory: {e}"),
        }
        let temp = temp_name(name, id);
        let flags =
            OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        let fd = match openat(
            &dir_fd,
            temp.as_str(),
            flags,
            Mode::from_bits_truncate(0o600),
        ) {
            Ok(fd) => fd,
            Err(e) => {
                tracing::warn!(id, temp, "cannot create the temporary file: {e}");
                return error(id, io_code(e));
            }
        };
        let file = File::from(fd);
        if let Err(e) = reserve_space(&file, size) {
            tracing::warn!(id, size, "no room for a received file: {e}");
            let _ = unlinkat(&dir_fd, temp.as_str(), UnlinkatFlags::NoRemoveDir);
            if e != Errno::ENOSPC {
                return error(id, io_code(e));
            }
            let free = nix::sys::statvfs::fstatvfs(&dir_fd)
                .map(|st| {
                    #[allow(clippy::useless_conversion)]
                    u64::from(st.blocks_available()).saturating_mul(st.fragment_size())
                })
                .ok();
            return SessionMessage::FileXferStatus {
                id,
                status: FileXferResult::NotEnoughSpace.as_u32(),
                disk_free_space: free,
                error_code: None,
            };
        }
        let direct = self
            .active
            .values()
            .filter(|t| t.writer.is_direct())
            .count();
        let mode = if direct < MAX_DIRECT && !self.buffered_only {
            WriteMode::Auto
        } else {
            WriteMode::Buffered
        };
        let writer = match FileWriter::new(file, size, mode) {
            Ok(w) => w,
            Err(e) => {
                tracing::warn!(id, "cannot start writing a received file: {e}");
                let _ = unlinkat(&dir_fd, temp.as_str(), UnlinkatFlags::NoRemoveDir);
                return error(id, G_IO_ERROR_FAILED);
            }
        };
        tracing::info!(id, name, size, dir = %dir.display(), direct_io = writer.is_direct(), "receiving a file");
        self.active.insert(
            id,
            Transfer {
                name: name.to_owned(),
                temp_name: temp,
                size,
                received: 0,
                writer,
                dir: dir_fd,
            },
        );
        status(id, FileXferResult::CanSendData)
    }

    /// FILE_XFER_DATA: appends; returns a final status when the transfer completed or failed (a zero-size file
    /// completes with its one empty DATA, as spice-gtk sends it).
    pub fn data(&mut self, id: u32, data: &[u8]) -> Option<SessionMessage> {
        self.append(id, data.len(), |w| w.write(data))
    }

    /// Room for at most `max` next bytes of transfer `id`, in the block its direct-I/O writer fills, so the
    /// connection can read them from the socket straight in (then [`FileReceiver::data_read`]). `None`: not an
    /// active direct transfer; its data goes through [`FileReceiver::data`].
    pub fn room(&mut self, id: u32, max: usize) -> Option<&mut [u8]> {
        let room = self.active.get_mut(&id)?.writer.room()?;
        let n = room.len().min(max);
        Some(&mut room[..n])
    }

    /// The first `n` bytes of [`FileReceiver::room`] were read in: appended like [`FileReceiver::data`].
    pub fn data_read(&mut self, id: u32, n: usize) -> Option<SessionMessage> {
        self.append(id, n, |w| w.filled(n))
    }

    /// Whether a transfer is written with direct I/O (the connection then reads frame heads in small pieces, so
    /// the data behind them can be read straight into the blocks).
    pub fn any_direct(&self) -> bool {
        self.active.values().any(|t| t.writer.is_direct())
    }

    /// Counts `len` more bytes of transfer `id` and has `write` store them; a final status when it completed or
    /// failed. More bytes than announced fail the transfer before anything is stored.
    fn append(
        &mut self,
        id: u32,
        len: usize,
        write: impl FnOnce(&mut FileWriter) -> std::io::Result<()>,
    ) -> Option<SessionMessage> {
        let t = self.active.get_mut(&id)?;
        let new_total = t.received.saturating_add(len as u64);
        if new_total > t.size {
            tracing::warn!(id, "more file data than announced");
            self.abort(id);
            return Some(error(id, G_IO_ERROR_FAILED));
        }
        if let Err(e) = write(&mut t.writer) {
            tracing::warn!(id, "writing a received file: {e}");
            let code = io_error_code(&e);
            self.abort(id);
            return Some(error(id, code));
        }
        t.received = new_total;
        if t.received == t.size {
            return self.finish(id);
        }
        None
    }

    /// The host cancelled: the temporary file is removed.
    pub fn cancel(&mut self, id: u32) {
        if self.active.contains_key(&id) {
            tracing::info!(id, "file transfer cancelled");
            self.abort(id);
        }
    }

    /// Drops every transfer (daemon gone, client disconnected).
    pub fn abort_all(&mut self) {
        let ids: Vec<u32> = self.active.keys().copied().collect();
        for id in ids {
            self.abort(id);
        }
    }

    fn abort(&mut self, id: u32) {
        if let Some(t) = self.active.remove(&id) {
            drop(t.writer);
            if let Err(e) = unlinkat(&t.dir, t.temp_name.as_str(), UnlinkatFlags::NoRemoveDir) {
                tracing::warn!(id, temp = t.temp_name, "removing a partial file: {e}");
            }
        }
    }

    fn finish(&mut self, id: u32) -> Option<SessionMessage> {
        let t = self.active.remove(&id)?;
        if let Err(e) = t.writer.finish() {
            // The data may not be complete: it never gets the final name.
            tracing::warn!(id, "writing a received file: {e}");
            let _ = unlinkat(&t.dir, t.temp_name.as_str(), UnlinkatFlags::NoRemoveDir);
            let code = io_error_code(&e);
            return Some(error(id, code));
        }
        let mut n = 0;
        loop {
            let candidate = if n == 0 {
                t.name.clone()
            } else {
                conflict_name(&t.name, n)
            };
            match renameat2(
                &t.dir,
                t.temp_name.as_str(),
                &t.dir,
                candidate.as_str(),
                RenameFlags::RENAME_NOREPLACE,
            ) {
                Ok(()) => {
                    tracing::info!(id, name = candidate, size = t.size, "file received");
                    return Some(status(id, FileXferResult::Success));
                }
                Err(Errno::EEXIST) if n < MAX_CONFLICT_INDEX => n += 1,
                Err(Errno::ENAMETOOLONG) if n > 0 => break,
                Err(e) => {
                    tracing::warn!(id, name = candidate, "renaming a received file: {e}");
                    let _ = unlinkat(
                        t.dir.as_fd(),
                        t.temp_name.as_str(),
                        UnlinkatFlags::NoRemoveDir,
                    );
                    return Some(error(id, io_code(e)));
                }
            }
        }
        let _ = unlinkat(&t.dir, t.temp_name.as_str(), UnlinkatFlags::NoRemoveDir);
        Some(error(id, G_IO_ERROR_EXISTS))
    }
}

/// Reserves the disk blocks of a `size`-byte file up front (fallocate with KEEP_SIZE: the file still grows only
/// as data is written), so that a transfer accepted with CAN_SEND_DATA cannot run out of space half-way because
/// something else filled the disk, and ext4 allocates one extent instead of many at writeback. A filesystem
/// without fallocate (some FUSE, NFSv3) is fine: only the guarantee is lost. Only real errors are returned.
fn reserve_space(file: &File, size: u64) -> Result<(), Errno> {
    let Ok(len) = i64::try_from(size) else {
        return Err(Errno::EFBIG);
    };
    if len == 0 {
        return Ok(());
    }
    match nix::fcntl::fallocate(
        file,
        nix::fcntl::FallocateFlags::FALLOC_FL_KEEP_SIZE,
        0,
        len,
    ) {
        Ok(()) | Err(Errno::EOPNOTSUPP | Errno::ENOSYS | Errno::EINVAL) => Ok(()),
        Err(e) => Err(e),
    }
}

impl Drop for FileReceiver {
    fn drop(&mut self) {
        self.abort_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code(m: &SessionMessage) -> (u32, Option<u64>, Option<u32>) {
        match m {
            SessionMessage::FileXferStatus {
                status,
                disk_free_space,
                error_code,
                ..
            } => (*status, *disk_free_space, *error_code),
            other => panic!("not a status: {other:?}"),
        }
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn conflict_names() {
        assert_eq!(conflict_name("a.txt", 1), "a (1).txt");
        assert_eq!(conflict_name("a.tar.gz", 2), "a.tar (2).gz");
        assert_eq!(conflict_name(".hidden", 1), ".hidden (1)");
        assert_eq!(conflict_name("noext", 3), "noext (3)");
    }

    #[test]
    fn receive_conflict_cancel_and_traversal() {
        let dir = tempfile::tempdir().unwrap();
        let mut r = FileReceiver::new(Some(dir.path().to_owned()));
        assert_eq!(code(&r.start(1, "a.txt", 5)).0, 0);
        assert!(r.data(1, b"he").is_none());
        assert_eq!(names(dir.path()), vec![".a.txt.1.guestlink-partial"]);
        assert_eq!(code(&r.data(1, b"llo").unwrap()).0, 3);
        assert_eq!(std::fs::read(dir.path().join("a.txt")).unwrap(), b"hello");
        assert_eq!(code(&r.start(2, "a.txt", 1)).0, 0);
        assert_eq!(code(&r.data(2, b"x").unwrap()).0, 3);
        assert_eq!(std::fs::read(dir.path().join("a (1).txt")).unwrap(), b"x");
        assert_eq!(code(&r.start(3, "../evil", 1)), (2, None, Some(10)));
        assert_eq!(code(&r.start(4, "c.bin", 10)).0, 0);
        r.data(4, b"abc");
        r.cancel(4);
        assert_eq!(names(dir.path()), vec!["a (1).txt", "a.txt"]);
        assert_eq!(code(&r.start(5, "big", u64::MAX)).0, 4);
        assert_eq!(code(&r.start(6, "over", 1)).0, 0);
        assert_eq!(code(&r.data(6, b"xy").unwrap()).0, 2);
        assert_eq!(code(&r.start(7, "empty", 0)).0, 0);
        assert_eq!(code(&r.data(7, b"").unwrap()).0, 3);
        assert_eq!(names(dir.path()), vec!["a (1).txt", "a.txt", "empty"]);
    }

    #[test]
    fn space_is_reserved_at_start_and_data_lands_in_order() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().unwrap();
        let mut r = FileReceiver::new(Some(dir.path().to_owned()));
        let size = 3 * crate::file_writer::WRITEBACK_WINDOW + 12_345;
        assert_eq!(code(&r.start(1, "big.bin", size)).0, 0);
        let temp = dir.path().join(".big.bin.1.guestlink-partial");
        let meta = std::fs::metadata(&temp).unwrap();
        // The blocks are there before any data (where the filesystem has fallocate: the test dir's does), while
        // the length still shows only what was written.
        assert_eq!(meta.len(), 0);
        assert!(meta.blocks() * 512 >= size, "{} blocks", meta.blocks());
        // Writes cross several writeback windows in odd-sized pieces; the content comes out whole.
        let data: Vec<u8> = (0..size).map(|i| (i % 251) as u8).collect();
        let mut last = None;
        for piece in data.chunks(65_536 + 7) {
            last = r.data(1, piece);
        }
        assert_eq!(code(&last.unwrap()).0, 3);
        assert_eq!(std::fs::read(dir.path().join("big.bin")).unwrap(), data);
    }

    /// At most MAX_DIRECT transfers use a writer thread; the next one is written buffered, and all complete.
    #[test]
    fn direct_io_is_limited_per_agent() {
        use crate::file_writer::DIRECT_MIN;
        let dir = tempfile::tempdir().unwrap();
        let mut r = FileReceiver::new(Some(dir.path().to_owned()));
        let n = MAX_DIRECT as u32 + 1;
        for id in 1..=n {
            assert_eq!(code(&r.start(id, &format!("f{id}"), DIRECT_MIN)).0, 0);
        }
        let direct = |r: &FileReceiver, id| r.active[&id].writer.is_direct();
        if !direct(&r, 1) {
            eprintln!("the temp dir is not on ext4/xfs: only buffered writes to check");
        } else {
            assert!((1..n).all(|id| direct(&r, id)));
            assert!(!direct(&r, n));
            // `--buffered-writes`: none.
            let mut b = FileReceiver::new(Some(dir.path().to_owned()));
            b.buffered_only();
            assert_eq!(code(&b.start(99, "b", DIRECT_MIN)).0, 0);
            assert!(!direct(&b, 99));
        }
        let data: Vec<u8> = (0..DIRECT_MIN).map(|i| (i % 253) as u8).collect();
        for id in 1..=n {
            let mut last = None;
            for piece in data.chunks(65_536) {
                last = r.data(id, piece);
            }
            assert_eq!(code(&last.unwrap()).0, 3);
            assert_eq!(
                std::fs::read(dir.path().join(format!("f{id}"))).unwrap(),
                data
            );
        }
    }

    /// Data read straight into the blocks (as the connection does from the socket), mixed with copied pieces,
    /// lands whole and in order; bytes read in past the announced size fail the transfer and store nothing.
    #[test]
    fn data_read_into_the_blocks_lands_in_order() {
        use crate::file_writer::{BLOCK, DIRECT_MIN};
        let dir = tempfile::tempdir().unwrap();
        let mut r = FileReceiver::new(Some(dir.path().to_owned()));
        let size = DIRECT_MIN + 3 * BLOCK as u64 / 2 + 4321;
        assert_eq!(code(&r.start(1, "f", size)).0, 0);
        if r.room(1, 1).is_none() {
            eprintln!("the temp dir is not on ext4/xfs: no direct I/O blocks to read into");
            return;
        }
        assert!(r.any_direct());
        let data: Vec<u8> = (0..size).map(|i| (i % 251) as u8).collect();
        let (mut at, mut turn, mut last) = (0usize, 0usize, None);
        while at < data.len() {
            // Odd sizes: reads that stop inside a block, end one exactly, and copied pieces in between.
            let want = [4093, 65_536, 1 << 20, 1]
                .get(turn % 4)
                .copied()
                .unwrap_or(1);
            let want = want.min(data.len() - at);
            turn += 1;
            if turn % 3 == 0 {
                last = r.data(1, &data[at..at + want]);
                at += want;
                continue;
            }
            let room = r.room(1, want).unwrap();
            assert!(!room.is_empty() && room.len() <= want);
            let n = room.len();
            room.copy_from_slice(&data[at..at + n]);
            last = r.data_read(1, n);
            at += n;
        }
        assert_eq!(code(&last.unwrap()).0, 3);
        assert!(!r.any_direct());
        assert_eq!(std::fs::read(dir.path().join("f")).unwrap(), data);

        assert_eq!(code(&r.start(2, "g", DIRECT_MIN)).0, 0);
        let room = r.room(2, usize::MAX).unwrap();
        assert_eq!(room.len(), BLOCK, "a whole block to read into");
        for _ in 0..DIRECT_MIN / BLOCK as u64 - 1 {
            assert!(r.data_read(2, BLOCK).is_none());
        }
        // One byte more than announced in the last block.
        assert!(r.room(2, BLOCK + 1).unwrap().len() == BLOCK);
        assert_eq!(code(&r.data_read(2, BLOCK + 1).unwrap()).0, 2);
        assert!(r.room(2, 1).is_none(), "the transfer is gone");
        assert_eq!(names(dir.path()), vec!["f"]);
    }

    /// A large transfer cancelled (or dropped with its daemon) mid-way, while its writer thread has blocks in
    /// flight, leaves nothing behind: no temporary file, no final name.
    #[test]
    fn large_transfers_cancelled_mid_way_leave_nothing() {
        use crate::file_writer::{BLOCK, DIRECT_MIN};
        let dir = tempfile::tempdir().unwrap();
        let mut r = FileReceiver::new(Some(dir.path().to_owned()));
        let piece = vec![7u8; 65_536];
        for id in [1, 2] {
            assert_eq!(
                code(&r.start(id, &format!("big{id}.iso"), 4 * DIRECT_MIN)).0,
                0
            );
            for _ in 0..(3 * BLOCK / piece.len()) {
                assert!(r.data(id, &piece).is_none());
            }
        }
        assert_eq!(names(dir.path()).len(), 2);
        r.cancel(1);
        assert_eq!(names(dir.path()), vec![".big2.iso.2.guestlink-partial"]);
        drop(r);
        assert!(names(dir.path()).is_empty());
    }

    #[test]
    fn symlink_temp_is_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("target");
        std::os::unix::fs::symlink(&target, dir.path().join(".x.9.guestlink-partial")).unwrap();
        let mut r = FileReceiver::new(Some(dir.path().to_owned()));
        assert_eq!(code(&r.start(9, "x", 1)).0, 2);
        assert!(!target.exists());
    }
}
