//! fsfreeze: qemu-ga's freeze/thaw algorithm (`commands-linux.c`), its frozen state, the hooks, and guestlink's
//! auto-thaw watchdog.
//!
//! Freeze: run the `freeze` hook (a failure aborts unless `--hook-failure ignore`), list block-backed mounts, enter
//! the frozen state (commands restricted, logging buffered, `qga.state.isfrozen` created) *before* the first
//! FIFREEZE, then freeze in reverse mount order (EOPNOTSUPP/EBUSY skipped and not counted, any other error thaws
//! everything). Thaw: FITHAW each mount in mount order until it fails, leave the frozen state, then run the `thaw`
//! hook. The watchdog thaws by itself when no thaw arrives within `--auto-thaw` seconds.

pub mod hook;
pub mod mounts;
pub mod ops;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use nix::errno::Errno;
use thiserror::Error;

use crate::cli::HookFailure;
use crate::state::StateDir;
use hook::{Hook, HookError};
use mounts::Mount;
use ops::{FreezeOps, OpError};

/// A thaw is attempted at most this many times per mount (the kernel fails once the fs is thawed; this only bounds
/// a misbehaving driver).
const MAX_THAWS_PER_MOUNT: u32 = 1024;

/// qemu's `strerror` text for an errno (without Rust's " (os error N)" suffix).
pub fn strerror(e: Errno) -> String {
    let s = std::io::Error::from_raw_os_error(e as i32).to_string();
    match s.find(" (os error") {
        Some(i) => s[..i].to_owned(),
        None => s,
    }
}

/// A freeze/thaw failure; the text is the reply's `desc`.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum FreezeError {
    /// The hook failed.
    #[error(transparent)]
    Hook(#[from] HookError),
    /// The mount list could not be read.
    #[error("failed to read {path}: {reason}")]
    Mounts {
        /// The mountinfo path.
        path: String,
        /// Why.
        reason: String,
    },
    /// `open` of a mount point failed.
    #[error("failed to open {dir}: {reason}")]
    Open {
        /// The mount point.
        dir: String,
        /// strerror.
        reason: String,
    },
    /// FIFREEZE failed with an errno other than EOPNOTSUPP/EBUSY.
    #[error("failed to freeze {dir}: {reason}")]
    Freeze {
        /// The mount point.
        dir: String,
        /// strerror.
        reason: String,
    },
    /// Internal failure (a worker task died).
    #[error("internal error: {0}")]
    Internal(String),
}

/// qemu-ga's `qmp_guest_fsfreeze_do_freeze_list`: freeze in reverse mount order; returns the number frozen.
pub fn freeze_walk(
    ops: &dyn FreezeOps,
    mounts: &[Mount],
    only: Option<&[String]>,
) -> Result<i64, FreezeError> {
    let mut count = 0;
    for m in mounts.iter().rev() {
        if let Some(list) = only {
            if !list.contains(&m.dirname) {
                continue;
            }
        }
        match ops.freeze(&m.dirname) {
            Ok(()) => count += 1,
            // Not freezable, or already frozen (a second mount of the same fs): skipped, not counted.
            Err(OpError::Ioctl(Errno::EOPNOTSUPP | Errno::EBUSY)) => {}
            Err(OpError::Open(e)) => {
                return Err(FreezeError::Open {
                    dir: m.dirname.clone(),
                    reason: strerror(e),
                })
            }
            Err(OpError::Ioctl(e)) => {
                return Err(FreezeError::Freeze {
                    dir: m.dirname.clone(),
                    reason: strerror(e),
                })
            }
        }
    }
    Ok(count)
}

/// qemu-ga's `qmp_guest_fsfreeze_do_thaw`: FITHAW every mount (mount order) until it fails; returns the number of
/// filesystems on which at least one FITHAW succeeded.
pub fn thaw_walk(ops: &dyn FreezeOps, mounts: &[Mount]) -> i64 {
    let mut count = 0;
    for m in mounts {
        let mut thawed = false;
        for _ in 0..MAX_THAWS_PER_MOUNT {
            if ops.thaw(&m.dirname).is_err() {
                break;
            }
            thawed = true;
        }
        if thawed {
            count += 1;
        }
    }
    count
}

/// Settings of the freezer.
#[derive(Debug, Clone)]
pub struct FreezeConfig {
    /// Normally `/proc/self/mountinfo`.
    pub mountinfo: PathBuf,
    /// The hook, if configured.
    pub hook: Option<Hook>,
    /// What a failing freeze hook does.
    pub hook_failure: HookFailure,
    /// The watchdog delay (`None` = disabled).
    pub auto_thaw: Option<Duration>,
}

#[derive(Debug, Default)]
struct Inner {
    /// Bumped on every state change so a stale watchdog never thaws a later freeze.
    generation: u64,
    watchdog: Option<tokio::task::JoinHandle<()>>,
}

/// Observer of frozen-state changes (the logger buffers while frozen).
pub type FrozenHook = Arc<dyn Fn(bool) + Send + Sync>;

/// The freeze state machine. Shared (`Arc`) between the command core, the watchdog, and the signal handler.
pub struct Freezer {
    ops: Arc<dyn FreezeOps>,
    cfg: FreezeConfig,
    state: StateDir,
    frozen: AtomicBool,
    on_change: FrozenHook,
    inner: tokio::sync::Mutex<Inner>,
    me: Weak<Freezer>,
}

impl std::fmt::Debug for Freezer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Freezer")
            .field("frozen", &self.is_frozen())
            .field("cfg", &self.cfg)
            .finish_non_exhaustive()
    }
}

impl Freezer {
    /// A freezer. If `<statedir>/qga.state.isfrozen` exists (a previous instance exited frozen), it starts frozen,
    /// like qemu-ga, and arms the watchdog from now. Must be called inside a tokio runtime.
    pub fn new(
        ops: Arc<dyn FreezeOps>,
        cfg: FreezeConfig,
        state: StateDir,
        on_change: FrozenHook,
    ) -> std::io::Result<Arc<Freezer>> {
        let was_frozen = state.is_marked_frozen()?;
        let f = Arc::new_cyclic(|me| Freezer {
            ops,
            cfg,
            state,
            frozen: AtomicBool::new(false),
            on_change,
            inner: tokio::sync::Mutex::new(Inner::default()),
            me: me.clone(),
        });
        if was_frozen {
            tracing::warn!(
                "previous instance appears to have exited with frozen filesystems. deferring logging/pidfile \
                 creation and disabling non-fsfreeze-safe commands until guest-fsfreeze-thaw is issued, or \
                 filesystems are manually unfrozen and the file {} is removed",
                f.state.isfrozen_path().display()
            );
            f.set_frozen_flag(true);
            if let Ok(mut inner) = f.inner.try_lock() {
                f.arm_watchdog(&mut inner);
            }
        }
        Ok(f)
    }

    /// Whether the agent is in the frozen state.
    pub fn is_frozen(&self) -> bool {
        self.frozen.load(Ordering::SeqCst)
    }

    /// `guest-fsfreeze-status`.
    pub fn status(&self) -> &'static str {
        if self.is_frozen() {
            "frozen"
        } else {
            "thawed"
        }
    }

    fn set_frozen_flag(&self, frozen: bool) {
        self.frozen.store(frozen, Ordering::SeqCst);
        (self.on_change)(frozen);
    }

    /// qemu-ga's `ga_set_frozen`: restrict commands, stop logging to disk, create the marker.
    fn enter_frozen(&self) {
        self.set_frozen_flag(true);
        if let Err(e) = self.state.mark_frozen() {
            tracing::warn!(
                "unable to create {}, fsfreeze may not function properly: {e}",
                self.state.isfrozen_path().display()
            );
        }
    }

    /// qemu-ga's `ga_unset_frozen`: delete the marker, re-enable commands, flush the buffered log.
    fn leave_frozen(&self) {
        if let Err(e) = self.state.clear_frozen() {
            tracing::warn!(
                "unable to delete {}: {e}",
                self.state.isfrozen_path().display()
            );
        }
        self.set_frozen_flag(false);
    }

    fn read_mounts(&self) -> Result<Vec<Mount>, FreezeError> {
        mounts::read_mounts(&self.cfg.mountinfo).map_err(|e| FreezeError::Mounts {
            path: self.cfg.mountinfo.display().to_string(),
            reason: e.to_string(),
        })
    }

    async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(&dyn FreezeOps) -> T + Send + 'static,
    ) -> Result<T, FreezeError> {
        let ops = Arc::clone(&self.ops);
        // FIFREEZE can block for a long time (it syncs the filesystem): keep it off the async workers.
        tokio::task::spawn_blocking(move || f(&*ops))
            .await
            .map_err(|e| FreezeError::Internal(e.to_string()))
    }

    /// Run `f` on this freezer in its own task: dropping the caller's future (SIGTERM arrived, the connection
    /// went away) never abandons a freeze or thaw half-way; a later [`Freezer::thaw_for_exit`] waits for it.
    async fn detached<T, F, Fut>(&self, f: F) -> Result<T, FreezeError>
    where
        T: Send + 'static,
        F: FnOnce(Arc<Freezer>) -> Fut,
        Fut: std::future::Future<Output = Result<T, FreezeError>> + Send + 'static,
    {
        let me = self
            .me
            .upgrade()
            .ok_or_else(|| FreezeError::Internal("freezer dropped".to_owned()))?;
        tokio::spawn(f(me))
            .await
            .map_err(|e| FreezeError::Internal(e.to_string()))?
    }

    /// `guest-fsfreeze-freeze` (`only = None`) and `guest-fsfreeze-freeze-list` (`only = Some(mountpoints)`).
    pub async fn freeze(&self, only: Option<Vec<String>>) -> Result<i64, FreezeError> {
        self.detached(|me| async move { me.freeze_now(only).await })
            .await
    }

    async fn freeze_now(&self, only: Option<Vec<String>>) -> Result<i64, FreezeError> {
        let mut inner = self.inner.lock().await;
        tracing::info!("guest-fsfreeze called");
        if let Some(hook) = &self.cfg.hook {
            if let Err(e) = hook.run("freeze").await {
                match self.cfg.hook_failure {
                    HookFailure::Abort => return Err(e.into()),
                    HookFailure::Ignore => {
                        tracing::warn!(
                            "freeze hook failed, freezing anyway (--hook-failure ignore): {e}"
                        );
                    }
                }
            }
        }
        let mounts = match self.read_mounts() {
            Ok(m) => m,
            Err(e) => {
                self.run_thaw_hook_logged().await;
                return Err(e);
            }
        };
        self.enter_frozen();
        inner.generation += 1;
        let walk_mounts = mounts.clone();
        let result = self
            .blocking(move |ops| freeze_walk(ops, &walk_mounts, only.as_deref()))
            .await
            .and_then(|r| r);
        match result {
            Ok(0) => {
                // Nothing frozen: just leave the state. (qemu-ga skips the thaw hook here; we run it so a hook that
                // took locks in `freeze` always gets its `thaw`.)
                self.leave_frozen();
                self.run_thaw_hook_logged().await;
                Ok(0)
            }
            Ok(n) => {
                tracing::info!("froze {n} filesystem(s)");
                self.arm_watchdog(&mut inner);
                Ok(n)
            }
            Err(e) => {
                tracing::warn!("{e}; thawing everything");
                let _ = self.thaw_locked(&mut inner, &mounts).await;
                Err(e)
            }
        }
    }

    /// `guest-fsfreeze-thaw`.
    pub async fn thaw(&self) -> Result<i64, FreezeError> {
        self.detached(|me| async move { me.thaw_now().await }).await
    }

    async fn thaw_now(&self) -> Result<i64, FreezeError> {
        let mut inner = self.inner.lock().await;
        let mounts = self.read_mounts()?;
        self.thaw_locked(&mut inner, &mounts).await
    }

    async fn thaw_locked(&self, inner: &mut Inner, mounts: &[Mount]) -> Result<i64, FreezeError> {
        if let Some(w) = inner.watchdog.take() {
            w.abort();
        }
        inner.generation += 1;
        let walk_mounts = mounts.to_vec();
        let count = self
            .blocking(move |ops| thaw_walk(ops, &walk_mounts))
            .await?;
        self.leave_frozen();
        tracing::info!("thawed {count} filesystem(s)");
        if let Some(hook) = &self.cfg.hook {
            hook.run("thaw").await?;
        }
        Ok(count)
    }

    async fn run_thaw_hook_logged(&self) {
        if let Some(hook) = &self.cfg.hook {
            let _ = hook.run("thaw").await;
        }
    }

    fn arm_watchdog(&self, inner: &mut Inner) {
        if let Some(w) = inner.watchdog.take() {
            w.abort();
        }
        let Some(delay) = self.cfg.auto_thaw else {
            return;
        };
        let generation = inner.generation;
        let me = self.me.clone();
        inner.watchdog = Some(tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            if let Some(f) = me.upgrade() {
                f.auto_thaw(generation, delay).await;
            }
        }));
    }

    async fn auto_thaw(&self, generation: u64, delay: Duration) {
        let mut inner = self.inner.lock().await;
        if inner.generation != generation || !self.is_frozen() {
            return;
        }
        // Our own handle: dropping it (not aborting) lets this task finish the thaw.
        inner.watchdog = None;
        tracing::warn!(
            "auto-thaw: no guest-fsfreeze-thaw within {} s of the freeze; thawing now (--auto-thaw)",
            delay.as_secs()
        );
        match self.read_mounts() {
            Ok(mounts) => match self.thaw_locked(&mut inner, &mounts).await {
                Ok(n) => tracing::warn!("auto-thaw: thawed {n} filesystem(s)"),
                Err(e) => tracing::error!("auto-thaw: {e}"),
            },
            Err(e) => tracing::error!("auto-thaw failed: {e}"),
        }
    }

    /// On SIGTERM/SIGINT: thaw if frozen (qemu-ga would refuse to exit), then the caller exits 0.
    pub async fn thaw_for_exit(&self) {
        // Taking the lock first waits for a freeze still in progress (hook or FIFREEZE walk), then decides.
        let mut inner = self.inner.lock().await;
        if !self.is_frozen() {
            return;
        }
        tracing::warn!("terminating while frozen: thawing filesystems first");
        let result = match self.read_mounts() {
            Ok(mounts) => self.thaw_locked(&mut inner, &mounts).await,
            Err(e) => Err(e),
        };
        match result {
            Ok(n) => tracing::info!("thawed {n} filesystem(s) before exit"),
            Err(e) => tracing::error!("thaw before exit: {e}"),
        }
    }
}

#[cfg(test)]
mod tests;
