//! How a received file's bytes reach the disk.
//!
//! Large files on a local disk filesystem (ext4, xfs) are written with direct I/O (`O_DIRECT`) on a thread of
//! their own: the agent's loop reads the arriving data straight into page-aligned blocks of [`BLOCK`] bytes
//! ([`FileWriter::room`], or copies it there with [`FileWriter::write`]) and hands them over, and the disk
//! reads them straight from those blocks while more data arrives. No page cache is filled: the agent spends
//! about 30 % less CPU on a large file (no fresh pages to allocate, copy into and write back;
//! docs/BENCHMARKS.md), and a multi-GB file does not push the desktop's working set out of memory. At most
//! [`MAX_DIRECT`] transfers of an agent use a thread (the caller counts), each with [`BUFFERS`] blocks, so memory
//! stays bounded whatever the host sends.
//!
//! Everything else (small files, other filesystems, one without `O_DIRECT`) is written buffered in the loop,
//! writeback started every [`WRITEBACK_WINDOW`] bytes so the final fsync waits for one window, not the file.
//! Either way [`FileWriter::finish`] returns only after fsync.

use std::fs::File;
use std::io::{self, Write};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;

use nix::fcntl::{fcntl, FcntlArg, OFlag};

/// Direct I/O block: the unit handed to the writer thread. Also a multiple of every logical block size.
pub const BLOCK: usize = 1024 * 1024;
/// Blocks per direct transfer: one being filled, the others queued or being written.
pub const BUFFERS: usize = 4;
/// Most transfers of one agent written with direct I/O at once; further ones are written buffered.
pub const MAX_DIRECT: usize = 4;
/// Smallest file written with direct I/O: below it a thread and 4 MiB of blocks are not worth it.
pub const DIRECT_MIN: u64 = 4 * 1024 * 1024;
/// Buffered writes start writeback every this many bytes (see [`start_writeback`]).
pub const WRITEBACK_WINDOW: u64 = 4 * 1024 * 1024;
/// Alignment of direct I/O buffers, offsets and lengths (the page size; covers 512 and 4096 sector disks).
const ALIGN: usize = 4096;

/// How to write a file; [`WriteMode::Auto`] picks by size and filesystem.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteMode {
    /// Direct I/O for large files on ext4 and xfs, buffered otherwise.
    Auto,
    /// Always buffered.
    Buffered,
    /// Direct I/O whenever the file accepts `O_DIRECT` (tests).
    #[cfg(test)]
    Direct,
}

/// Writes one file; see the module doc.
pub enum FileWriter {
    /// Written in the caller's thread.
    Buffered { file: File, written: u64 },
    /// Written by a thread of its own.
    Direct(DirectWriter),
}

impl FileWriter {
    /// A writer for `file` (empty, opened for writing) that will receive `size` bytes. Fails only if a writer
    /// thread cannot be started (the file is then closed).
    pub fn new(file: File, size: u64, mode: WriteMode) -> io::Result<Self> {
        let direct = match mode {
            WriteMode::Auto => size >= DIRECT_MIN && local_disk(&file),
            WriteMode::Buffered => false,
            #[cfg(test)]
            WriteMode::Direct => true,
        };
        if !direct {
            return Ok(Self::Buffered { file, written: 0 });
        }
        Ok(match DirectWriter::start(file)? {
            Ok(w) => Self::Direct(w),
            Err(file) => Self::Buffered { file, written: 0 },
        })
    }

    /// Whether the data goes through direct I/O.
    pub fn is_direct(&self) -> bool {
        matches!(self, Self::Direct(_))
    }

    /// Appends `data`.
    pub fn write(&mut self, data: &[u8]) -> io::Result<()> {
        match self {
            Self::Buffered { file, written } => {
                file.write_all(data)?;
                let before = *written;
                *written += data.len() as u64;
                if *written / WRITEBACK_WINDOW > before / WRITEBACK_WINDOW {
                    let end = *written / WRITEBACK_WINDOW * WRITEBACK_WINDOW;
                    start_writeback(file, end - WRITEBACK_WINDOW, WRITEBACK_WINDOW);
                }
                Ok(())
            }
            Self::Direct(w) => w.write(data),
        }
    }

    /// Room for the next bytes in the block being filled, for a caller that reads them straight in (then
    /// [`FileWriter::filled`]); `None` when writing buffered, where there is no block to read into.
    pub fn room(&mut self) -> Option<&mut [u8]> {
        match self {
            Self::Buffered { .. } => None,
            Self::Direct(w) => Some(w.room()),
        }
    }

    /// The first `n` bytes of [`FileWriter::room`] were filled: they are appended like [`FileWriter::write`].
    pub fn filled(&mut self, n: usize) -> io::Result<()> {
        match self {
            Self::Buffered { .. } => {
                Err(io::Error::other("no block to fill when writing buffered"))
            }
            Self::Direct(w) => w.filled(n),
        }
    }

    /// Writes what is left, then fsyncs; the data is on disk when this returns `Ok`.
    pub fn finish(self) -> io::Result<()> {
        match self {
            Self::Buffered { file, .. } => file.sync_all(),
            Self::Direct(w) => w.finish(),
        }
    }
}

/// Whether `file` is on a filesystem where direct I/O is plain and fast: ext4 or xfs on a block device. Network
/// and FUSE filesystems, tmpfs, btrfs (checksums of pages that could change under I/O) stay buffered.
fn local_disk(file: &File) -> bool {
    use nix::sys::statfs::{fstatfs, EXT4_SUPER_MAGIC, XFS_SUPER_MAGIC};
    fstatfs(file).is_ok_and(|s| {
        let t = s.filesystem_type();
        t == EXT4_SUPER_MAGIC || t == XFS_SUPER_MAGIC
    })
}

/// Starts writing `len` bytes at `offset` of `file` to disk without waiting (dpkg and PostgreSQL do the same
/// before their fsync): the disk works while more data arrives instead of all at the end. On Linux
/// POSIX_FADV_DONTNEED first starts writeback of the dirty range (WB_SYNC_NONE), then drops only pages that are
/// already clean — sync_file_range(SYNC_FILE_RANGE_WRITE) without unsafe code. Failure only costs speed.
fn start_writeback(file: &File, offset: u64, len: u64) {
    let (Ok(offset), Ok(len)) = (i64::try_from(offset), i64::try_from(len)) else {
        return;
    };
    if let Err(e) = nix::fcntl::posix_fadvise(
        file,
        offset,
        len,
        nix::fcntl::PosixFadviseAdvice::POSIX_FADV_DONTNEED,
    ) {
        tracing::debug!("early writeback of a received file: {e}");
    }
}

/// A page-aligned block of [`BLOCK`] bytes inside a slightly larger vector (no unsafe allocation needed).
struct Block {
    buf: Vec<u8>,
    start: usize,
}

impl Block {
    fn new() -> Self {
        let buf = vec![0u8; BLOCK + ALIGN];
        let start = buf.as_ptr().align_offset(ALIGN);
        Self { buf, start }
    }

    fn bytes(&self) -> &[u8] {
        &self.buf[self.start..self.start + BLOCK]
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.buf[self.start..self.start + BLOCK]
    }
}

/// A filled block (`len` bytes; only the last one of a file may be short) for the writer thread.
struct Job {
    block: Block,
    len: usize,
}

/// The direct-I/O side of [`FileWriter`]: the caller fills blocks, a thread writes them.
pub struct DirectWriter {
    current: Block,
    fill: usize,
    jobs: Option<Sender<Job>>,
    free: Receiver<Block>,
    spare: Vec<Block>,
    thread: Option<JoinHandle<io::Result<()>>>,
    /// Set when the transfer is dropped unfinished: the thread writes nothing more and skips the fsync.
    abandoned: Arc<AtomicBool>,
}

impl DirectWriter {
    /// Sets `O_DIRECT` on `file` and starts its thread. `Ok(Err(file))`: the file refuses `O_DIRECT`, write it
    /// buffered.
    fn start(file: File) -> io::Result<Result<Self, File>> {
        if let Err(e) = set_direct(&file, true) {
            tracing::debug!("no direct I/O for a received file: {e}");
            return Ok(Err(file));
        }
        let (jobs, job_rx) = channel::<Job>();
        let (free_tx, free) = channel::<Block>();
        let abandoned = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&abandoned);
        let thread = std::thread::Builder::new()
            .name("file-writer".into())
            .spawn(move || write_jobs(file, job_rx, free_tx, &flag))?;
        Ok(Ok(Self {
            current: Block::new(),
            fill: 0,
            jobs: Some(jobs),
            free,
            spare: (1..BUFFERS).map(|_| Block::new()).collect(),
            thread: Some(thread),
            abandoned,
        }))
    }

    fn write(&mut self, mut data: &[u8]) -> io::Result<()> {
        while !data.is_empty() {
            let room = self.room();
            let n = room.len().min(data.len());
            room[..n].copy_from_slice(&data[..n]);
            data = &data[n..];
            self.filled(n)?;
        }
        Ok(())
    }

    /// The unfilled rest of the current block (never empty: a full block is handed over at once).
    fn room(&mut self) -> &mut [u8] {
        &mut self.current.bytes_mut()[self.fill..]
    }

    /// `n` more bytes of the current block are filled; a full one goes to the thread.
    fn filled(&mut self, n: usize) -> io::Result<()> {
        if n > BLOCK - self.fill {
            return Err(io::Error::other("filled past the end of the block"));
        }
        self.fill += n;
        if self.fill == BLOCK {
            let next = self.next_block()?;
            let full = std::mem::replace(&mut self.current, next);
            self.send(full, BLOCK)?;
            self.fill = 0;
        }
        Ok(())
    }

    /// A free block: a spare one, else the next one the thread is done with (waits: the disk sets the pace).
    fn next_block(&mut self) -> io::Result<Block> {
        if let Some(b) = self.spare.pop() {
            return Ok(b);
        }
        match self.free.recv() {
            Ok(b) => Ok(b),
            Err(_) => Err(self.thread_error()),
        }
    }

    fn send(&mut self, block: Block, len: usize) -> io::Result<()> {
        let sent = self
            .jobs
            .as_ref()
            .is_some_and(|j| j.send(Job { block, len }).is_ok());
        if sent {
            Ok(())
        } else {
            Err(self.thread_error())
        }
    }

    /// The thread stopped early: its error.
    fn thread_error(&mut self) -> io::Error {
        self.jobs = None;
        match self.thread.take().map(JoinHandle::join) {
            Some(Ok(Err(e))) => e,
            Some(Err(_)) => io::Error::other("the file writer thread panicked"),
            Some(Ok(Ok(()))) | None => io::Error::other("the file writer thread is gone"),
        }
    }

    fn finish(mut self) -> io::Result<()> {
        if self.fill > 0 {
            let last = std::mem::replace(
                &mut self.current,
                Block {
                    buf: Vec::new(),
                    start: 0,
                },
            );
            self.send(last, self.fill)?;
        }
        self.jobs = None;
        match self.thread.take().map(JoinHandle::join) {
            Some(Ok(r)) => r,
            Some(Err(_)) => Err(io::Error::other("the file writer thread panicked")),
            None => Err(io::Error::other("the file writer thread is gone")),
        }
    }
}

impl Drop for DirectWriter {
    /// An abandoned transfer: the thread finishes the write it is in and stops, without writing the queued blocks
    /// or syncing a file the caller is about to remove.
    fn drop(&mut self) {
        self.abandoned.store(true, Ordering::SeqCst);
        self.jobs = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn set_direct(file: &File, on: bool) -> nix::Result<()> {
    let flags = OFlag::from_bits_truncate(fcntl(file.as_fd(), FcntlArg::F_GETFL)?);
    let flags = if on {
        flags | OFlag::O_DIRECT
    } else {
        flags - OFlag::O_DIRECT
    };
    fcntl(file.as_fd(), FcntlArg::F_SETFL(flags)).map(drop)
}

/// The writer thread: full blocks go to disk with direct I/O; the short last block's aligned part too, its
/// remainder buffered (O_DIRECT cleared); then fsync. Writes go to explicit offsets, so a direct write the device
/// refuses (EINVAL: a logical block larger than [`ALIGN`], a filesystem that takes the flag but not the I/O) is
/// simply done again buffered, and so is the rest of the file. Ends at the first other error, when the sender is
/// dropped (then fsync), or as soon as `abandoned` is set (then nothing more is written or synced).
fn write_jobs(
    file: File,
    jobs: Receiver<Job>,
    free: Sender<Block>,
    abandoned: &AtomicBool,
) -> io::Result<()> {
    use std::os::unix::fs::FileExt;
    let mut pos = 0u64;
    let mut direct = true;
    while let Ok(Job { block, len }) = jobs.recv() {
        if abandoned.load(Ordering::SeqCst) {
            return Ok(());
        }
        let data = &block.bytes()[..len];
        let aligned = len / ALIGN * ALIGN;
        match file.write_all_at(&data[..aligned], pos) {
            Err(e) if direct && e.raw_os_error() == Some(nix::errno::Errno::EINVAL as i32) => {
                tracing::info!(
                    "direct I/O refused ({e}): the rest of the file is written buffered"
                );
                set_direct(&file, false).map_err(io::Error::from)?;
                direct = false;
                file.write_all_at(&data[..aligned], pos)?;
            }
            r => r?,
        }
        if aligned < len {
            if direct {
                set_direct(&file, false).map_err(io::Error::from)?;
                direct = false;
            }
            file.write_all_at(&data[aligned..], pos + aligned as u64)?;
        }
        pos += len as u64;
        if len < BLOCK {
            // Only the last block is short: nothing may follow it.
            return file.sync_all();
        }
        // Fails only when the caller is gone; `abandoned` then ends the loop.
        let _ = free.send(block);
    }
    if abandoned.load(Ordering::SeqCst) {
        return Ok(());
    }
    file.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pattern(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i % 251) as u8).collect()
    }

    /// Sizes around block and alignment edges, written in odd pieces, come out whole, in both modes.
    #[test]
    fn content_is_exact_in_both_modes() {
        let dir = tempfile::tempdir().unwrap();
        for (i, size) in [
            0,
            1,
            ALIGN - 1,
            ALIGN,
            BLOCK - 1,
            BLOCK,
            BLOCK + 1,
            3 * BLOCK + ALIGN + 17,
            (BUFFERS + 3) * BLOCK,
        ]
        .into_iter()
        .enumerate()
        {
            for mode in [WriteMode::Buffered, WriteMode::Direct] {
                let path = dir.path().join(format!("f{i}-{mode:?}"));
                let file = File::create(&path).unwrap();
                let mut w = FileWriter::new(file, size as u64, mode).unwrap();
                let data = pattern(size);
                for piece in data.chunks(65_536 + 7) {
                    w.write(piece).unwrap();
                }
                w.finish().unwrap();
                assert_eq!(
                    std::fs::read(&path).unwrap(),
                    data,
                    "{size} bytes, {mode:?}"
                );
            }
        }
    }

    /// The test directory is on the machine's disk (ext4 here): direct I/O is really used there.
    #[test]
    fn direct_io_is_used_on_a_local_disk() {
        let dir = tempfile::tempdir().unwrap();
        let file = File::create(dir.path().join("f")).unwrap();
        if !local_disk(&file) {
            eprintln!("the temp dir is not on ext4/xfs: nothing to check");
            return;
        }
        let w = FileWriter::new(file, DIRECT_MIN, WriteMode::Auto).unwrap();
        assert!(w.is_direct());
        w.finish().unwrap();
        let small = File::create(dir.path().join("g")).unwrap();
        assert!(!FileWriter::new(small, DIRECT_MIN - 1, WriteMode::Auto)
            .unwrap()
            .is_direct());
    }

    /// A direct write the kernel refuses (here: a block that is not page-aligned in memory, as a device with
    /// larger logical blocks would refuse ours) is done again buffered, and the file switches to buffered.
    #[test]
    fn refused_direct_io_falls_back_to_buffered() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let file = File::create(&path).unwrap();
        if !local_disk(&file) || set_direct(&file, true).is_err() {
            eprintln!("no direct I/O in the temp dir: nothing to check");
            return;
        }
        let data = pattern(BLOCK + 100);
        let (jobs, rx) = channel();
        let (free, _returned) = channel();
        let writer = {
            let file = file.try_clone().unwrap();
            std::thread::spawn(move || write_jobs(file, rx, free, &AtomicBool::new(false)))
        };
        for piece in data.chunks(BLOCK) {
            let mut block = Block::new();
            block.start += 1; // misaligned: O_DIRECT refuses it with EINVAL
            block.bytes_mut()[..piece.len()].copy_from_slice(piece);
            jobs.send(Job {
                block,
                len: piece.len(),
            })
            .unwrap();
        }
        writer.join().unwrap().unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), data);
        let flags = OFlag::from_bits_truncate(fcntl(file.as_fd(), FcntlArg::F_GETFL).unwrap());
        assert!(!flags.contains(OFlag::O_DIRECT));
    }

    /// Once a transfer is abandoned, the blocks still queued are not written (the file is about to be removed).
    #[test]
    fn abandoned_writer_writes_no_queued_block() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let (jobs, rx) = channel();
        let (free, _returned) = channel();
        for _ in 0..3 {
            jobs.send(Job {
                block: Block::new(),
                len: BLOCK,
            })
            .unwrap();
        }
        drop(jobs);
        let r = write_jobs(
            File::create(&path).unwrap(),
            rx,
            free,
            &AtomicBool::new(true),
        );
        assert!(r.is_ok());
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 0);
    }

    /// A write error in the thread comes back from a later write or from finish, and an abandoned writer does
    /// not hang. (A descriptor opened read-only takes O_DIRECT but fails every write with EBADF.)
    #[test]
    fn thread_errors_come_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ro");
        File::create(&path).unwrap();
        let mut w = FileWriter::new(
            File::open(&path).unwrap(),
            8 * BLOCK as u64,
            WriteMode::Direct,
        )
        .unwrap();
        let r = w.write(&pattern(2 * BLOCK)).and_then(|()| w.finish());
        assert_eq!(
            r.unwrap_err().raw_os_error(),
            Some(nix::errno::Errno::EBADF as i32)
        );
        // Buffered: the same error straight from the write.
        let mut w = FileWriter::new(File::open(&path).unwrap(), 1, WriteMode::Buffered).unwrap();
        assert_eq!(
            w.write(b"x").unwrap_err().raw_os_error(),
            Some(nix::errno::Errno::EBADF as i32)
        );
        let file = File::create(dir.path().join("f")).unwrap();
        let mut w = FileWriter::new(file, 8 * BLOCK as u64, WriteMode::Direct).unwrap();
        w.write(&pattern(3 * BLOCK)).unwrap();
        drop(w);
    }
}
