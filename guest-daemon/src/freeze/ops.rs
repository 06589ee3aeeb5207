//! The filesystem freeze primitives behind a trait, so the freeze algorithm is tested with a fake that records
//! calls and injects errnos. The real implementation opens the mount point and issues FIFREEZE/FITHAW through
//! [`crate::sys`]; it only ever runs in production (the micro-VM tests), never in unit tests.

use std::os::fd::AsFd;

use nix::errno::Errno;

/// A failure of one freeze primitive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpError {
    /// `open(mountpoint, O_RDONLY)` failed.
    Open(Errno),
    /// The ioctl failed.
    Ioctl(Errno),
}

/// FIFREEZE/FITHAW on a mount point.
pub trait FreezeOps: Send + Sync + std::fmt::Debug {
    /// Freeze the filesystem mounted at `dir`.
    fn freeze(&self, dir: &str) -> Result<(), OpError>;
    /// Thaw one level of the filesystem mounted at `dir`.
    fn thaw(&self, dir: &str) -> Result<(), OpError>;
}

/// The real ioctls.
#[derive(Debug, Default)]
pub struct RealOps;

fn open_dir(dir: &str) -> Result<std::fs::File, OpError> {
    std::fs::File::open(dir)
        .map_err(|e| OpError::Open(Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO))))
}

impl FreezeOps for RealOps {
    fn freeze(&self, dir: &str) -> Result<(), OpError> {
        let f = open_dir(dir)?;
        crate::sys::fifreeze(f.as_fd()).map_err(OpError::Ioctl)
    }

    fn thaw(&self, dir: &str) -> Result<(), OpError> {
        let f = open_dir(dir)?;
        crate::sys::fithaw(f.as_fd()).map_err(OpError::Ioctl)
    }
}

#[cfg(test)]
pub mod fake {
    //! A fake that models per-filesystem freeze depth, records every call, and injects errnos.

    use std::collections::HashMap;
    use std::path::PathBuf;
    use std::sync::Mutex;

    use super::*;

    /// One recorded call.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub enum Call {
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
        /// Marker file whose existence is recorded with each freeze call.
        pub marker: Mutex<Option<PathBuf>>,
    }

    impl FakeOps {
        /// Inject an error for FIFREEZE on `dir`.
        pub fn fail_freeze(&self, dir: &str, e: OpError) {
            self.freeze_errors.lock().unwrap().insert(dir.to_owned(), e);
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
        fn freeze(&self, dir: &str) -> Result<(), OpError> {
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

        fn thaw(&self, dir: &str) -> Result<(), OpError> {
            self.calls.lock().unwrap().push(Call::Thaw(dir.to_owned()));
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
