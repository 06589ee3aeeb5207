//! The filesystem freeze primitives behind a trait, so the freeze algorithm is tested with a fake that records
//! calls and injects errnos. The real implementation opens the mount point once, at freeze time, and keeps that
//! descriptor until the thaw (a thaw never needs a new descriptor, so it works even at the fd limit); FIFREEZE and
//! FITHAW go through [`crate::sys`] and only ever run in production (the micro-VM tests), never in unit tests.

use std::os::fd::{AsFd, OwnedFd};

use nix::errno::Errno;

/// A failure of one freeze primitive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpError {
    /// `open(mountpoint, O_RDONLY)` failed.
    Open(Errno),
    /// The ioctl failed.
    Ioctl(Errno),
}

/// A mount point opened for freezing, held until the thaw.
#[derive(Debug)]
pub struct OpenMount {
    /// The mount point.
    pub dir: String,
    /// The open directory (`None` in the fake).
    pub fd: Option<OwnedFd>,
}

/// Open, FIFREEZE and FITHAW on mount points.
pub trait FreezeOps: Send + Sync + std::fmt::Debug {
    /// Open the mount point `dir` (the descriptor the ioctls act on).
    fn open(&self, dir: &str) -> Result<OpenMount, OpError>;
    /// Freeze the filesystem of an opened mount point.
    fn freeze(&self, m: &OpenMount) -> Result<(), OpError>;
    /// Thaw one level of the filesystem of an opened mount point.
    fn thaw(&self, m: &OpenMount) -> Result<(), OpError>;
}

/// The real ioctls.
#[derive(Debug, Default)]
pub struct RealOps;

fn fd_of(m: &OpenMount) -> Result<std::os::fd::BorrowedFd<'_>, OpError> {
    m.fd.as_ref()
        .map(AsFd::as_fd)
        .ok_or(OpError::Open(Errno::EBADF))
}

impl FreezeOps for RealOps {
    fn open(&self, dir: &str) -> Result<OpenMount, OpError> {
        let f = std::fs::File::open(dir)
            .map_err(|e| OpError::Open(Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO))))?;
        Ok(OpenMount {
            dir: dir.to_owned(),
            fd: Some(f.into()),
        })
    }

    fn freeze(&self, m: &OpenMount) -> Result<(), OpError> {
        crate::sys::fifreeze(fd_of(m)?).map_err(OpError::Ioctl)
    }

    fn thaw(&self, m: &OpenMount) -> Result<(), OpError> {
        crate::sys::fithaw(fd_of(m)?).map_err(OpError::Ioctl)
    }
}

#[cfg(test)]
pub mod fake {
    //! A fake that models per-filesystem freeze depth, records every call, and injects errnos: on FIFREEZE per
    //! mount, on FITHAW per mount, and on `open` (per mount, or every open: EMFILE at the fd limit).

    use std::collections::HashMap;
    use std::path::PathBuf;
    use std::sync::Mutex;

    use super::*;

    /// One recorded call.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub enum Call {
        /// `open` of a mount point.
        Open(String),
        /// FIFREEZE on a dir, with whether the frozen marker existed at that moment.
        Freeze(String, bool),
        /// FITHAW on a dir.
        Thaw(String),
    }

    /// The fake state.
    #[derive(Debug, Default)]
    pub struct FakeOps {
        /// Calls in order.
        pub calls: Mutex<Vec<Call>>,
        /// Freeze depth per dir.
        pub depth: Mutex<HashMap<String, u32>>,
        /// Errno injected on FIFREEZE per dir.
        pub freeze_errors: Mutex<HashMap<String, OpError>>,
        /// Errno injected on FITHAW per dir (the filesystem stays frozen).
        pub thaw_errors: Mutex<HashMap<String, Errno>>,
        /// Errno injected on `open` per dir.
        pub open_errors: Mutex<HashMap<String, Errno>>,
        /// Errno injected on every `open` (the daemon is out of descriptors).
        pub open_all_error: Mutex<Option<Errno>>,
        /// Marker file whose existence is recorded with each freeze call.
        pub marker: Mutex<Option<PathBuf>>,
    }

    impl FakeOps {
        /// Inject an error for FIFREEZE on `dir`.
        pub fn fail_freeze(&self, dir: &str, e: OpError) {
            self.freeze_errors.lock().unwrap().insert(dir.to_owned(), e);
        }
        /// Inject an error for FITHAW on `dir` (`None` removes it).
        pub fn fail_thaw(&self, dir: &str, e: Option<Errno>) {
            let mut m = self.thaw_errors.lock().unwrap();
            match e {
                Some(e) => m.insert(dir.to_owned(), e),
                None => m.remove(dir),
            };
        }
        /// Make every `open` fail with `e` (`None`: opens work again).
        pub fn fail_all_opens(&self, e: Option<Errno>) {
            *self.open_all_error.lock().unwrap() = e;
        }
        /// Calls so far.
        pub fn calls(&self) -> Vec<Call> {
            self.calls.lock().unwrap().clone()
        }
        /// Dirs currently frozen.
        pub fn frozen(&self) -> Vec<String> {
            let mut v: Vec<String> = self
                .depth
                .lock()
                .unwrap()
                .iter()
                .filter(|(_, d)| **d > 0)
                .map(|(k, _)| k.clone())
                .collect();
            v.sort();
            v
        }
    }

    impl FreezeOps for FakeOps {
        fn open(&self, dir: &str) -> Result<OpenMount, OpError> {
            self.calls.lock().unwrap().push(Call::Open(dir.to_owned()));
            if let Some(e) = *self.open_all_error.lock().unwrap() {
                return Err(OpError::Open(e));
            }
            if let Some(e) = self.open_errors.lock().unwrap().get(dir) {
                return Err(OpError::Open(*e));
            }
            Ok(OpenMount {
                dir: dir.to_owned(),
                fd: None,
            })
        }

        fn freeze(&self, m: &OpenMount) -> Result<(), OpError> {
            let dir = m.dir.as_str();
            let marked = self
                .marker
                .lock()
                .unwrap()
                .as_ref()
                .is_some_and(|m| m.exists());
            self.calls
                .lock()
                .unwrap()
                .push(Call::Freeze(dir.to_owned(), marked));
            if let Some(e) = self.freeze_errors.lock().unwrap().get(dir) {
                return Err(*e);
            }
            *self
                .depth
                .lock()
                .unwrap()
                .entry(dir.to_owned())
                .or_default() += 1;
            Ok(())
        }

        fn thaw(&self, m: &OpenMount) -> Result<(), OpError> {
            let dir = m.dir.as_str();
            self.calls.lock().unwrap().push(Call::Thaw(dir.to_owned()));
            if let Some(e) = self.thaw_errors.lock().unwrap().get(dir) {
                return Err(OpError::Ioctl(*e));
            }
            let mut depth = self.depth.lock().unwrap();
            match depth.get_mut(dir) {
                Some(d) if *d > 0 => {
                    *d -= 1;
                    Ok(())
                }
                _ => Err(OpError::Ioctl(Errno::EINVAL)),
            }
        }
    }
}
