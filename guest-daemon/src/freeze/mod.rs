//! fsfreeze: qemu-ga's freeze/thaw algorithm (`commands-linux.c`), its frozen state, the hooks, and guestlink's
//! auto-thaw watchdog.
//!
//! Freeze: run the `freeze` hook (a failure aborts unless `--hook-failure ignore`), list block-backed mounts, enter
//! the frozen state (commands restricted, logging buffered, `qga.state.isfrozen` created) *before* the first
//! FIFREEZE, then open and freeze in reverse mount order (EOPNOTSUPP/EBUSY skipped and not counted, any other error
//! thaws everything). The opened mount points are held until a thaw succeeds, so a thaw needs no new descriptor.
//!
//! Thaw: FITHAW each held mount point (and, like qemu-ga, each other mount of the list, best effort) in mount order
//! until the kernel says it is not frozen, then leave the frozen state and run the `thaw` hook. A thaw that cannot
//! thaw everything (FITHAW fails, or a mount cannot be opened or listed while frozen) keeps the frozen state and
//! the marker, says so in its error, and is retried by the watchdog. The watchdog ([`watchdog`], its own OS
//! thread) also thaws by itself when no thaw arrives within `--auto-thaw` seconds.

pub mod hook;
pub mod mounts;
pub mod ops;
pub mod watchdog;

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
use ops::{FreezeOps, OpError, OpenMount};
use watchdog::{Fire, Watchdog};

/// A thaw is attempted at most this many times per mount (the kernel fails once the fs is thawed; this only bounds
/// a misbehaving driver).
const MAX_THAWS_PER_MOUNT: u32 = 1024;
/// Longest wait between two attempts of a thaw that failed.
const MAX_THAW_RETRY: Duration = Duration::from_secs(60);

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
    /// A thaw left something frozen (or could not find out): the agent stays in the frozen state.
    #[error("unable to thaw {what}; the filesystems may still be frozen, so the agent stays frozen and retries the thaw in {retry_secs} s")]
    Thaw {
        /// The mount points and what failed.
        what: String,
        /// Seconds until the watchdog's next attempt.
        retry_secs: u64,
    },
    /// Internal failure (a worker task died).
    #[error("internal error: {0}")]
    Internal(String),
}

/// qemu-ga's `qmp_guest_fsfreeze_do_freeze_list`: open and freeze in reverse mount order; returns the number
/// frozen. Every mount point it opened (except those that cannot be frozen at all) is added to `held`, in mount
/// order, also when it fails: the thaw uses exactly these descriptors.
pub fn freeze_walk(
    ops: &dyn FreezeOps,
    mounts: &[Mount],
    only: Option<&[String]>,
    held: &mut Vec<OpenMount>,
) -> Result<i64, FreezeError> {
    let mut opened = Vec::new();
    let r = freeze_each(ops, mounts, only, &mut opened);
    opened.reverse();
    held.extend(opened);
    r
}

fn freeze_each(
    ops: &dyn FreezeOps,
    mounts: &[Mount],
    only: Option<&[String]>,
    opened: &mut Vec<OpenMount>,
) -> Result<i64, FreezeError> {
    let mut count = 0;
    for m in mounts.iter().rev() {
        if let Some(list) = only {
            if !list.contains(&m.dirname) {
                continue;
            }
        }
        let open = ops.open(&m.dirname).map_err(|e| match e {
            OpError::Open(e) | OpError::Ioctl(e) => FreezeError::Open {
                dir: m.dirname.clone(),
                reason: strerror(e),
            },
        })?;
        match ops.freeze(&open) {
            Ok(()) => count += 1,
            // Not freezable: nothing to thaw later.
            Err(OpError::Ioctl(Errno::EOPNOTSUPP)) => continue,
            // Already frozen (a second mount of the same fs, or someone else's freeze): skipped, not counted, but
            // thawed with the rest like qemu-ga does.
            Err(OpError::Ioctl(Errno::EBUSY)) => {}
            Err(OpError::Open(e)) => {
                opened.push(open);
                return Err(FreezeError::Open {
                    dir: m.dirname.clone(),
                    reason: strerror(e),
                });
            }
            Err(OpError::Ioctl(e)) => {
                opened.push(open);
                return Err(FreezeError::Freeze {
                    dir: m.dirname.clone(),
                    reason: strerror(e),
                });
            }
        }
        opened.push(open);
    }
    Ok(count)
}

/// A mount point the thaw could not thaw (or could not even open).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThawFailure {
    /// The mount point.
    pub dir: String,
    /// What failed, as text.
    pub reason: String,
}

/// qemu-ga's `qmp_guest_fsfreeze_do_thaw` on held mount points: FITHAW each (mount order) until the kernel says
/// it is not frozen (EINVAL); returns the number of filesystems on which at least one FITHAW succeeded, and the
/// mounts where FITHAW failed otherwise (those may still be frozen).
pub fn thaw_walk(ops: &dyn FreezeOps, held: &[OpenMount]) -> (i64, Vec<ThawFailure>) {
    let mut count = 0;
    let mut failed = Vec::new();
    for m in held {
        let mut thawed = false;
        for _ in 0..MAX_THAWS_PER_MOUNT {
            match ops.thaw(m) {
                Ok(()) => thawed = true,
                // Not frozen (any more), or not freezable: done with this one.
                Err(OpError::Ioctl(Errno::EINVAL | Errno::EOPNOTSUPP)) => break,
                Err(OpError::Open(e) | OpError::Ioctl(e)) => {
                    failed.push(ThawFailure {
                        dir: m.dir.clone(),
                        reason: format!("FITHAW: {}", strerror(e)),
                    });
                    break;
                }
            }
        }
        if thawed {
            count += 1;
        }
    }
    (count, failed)
}

/// Opens the mounts of `mounts` that are not held yet (a thaw after a restart, or mounts frozen by someone else),
/// adding them to `held`; returns the ones that could not be opened.
fn open_more(ops: &dyn FreezeOps, mounts: &[Mount], held: &mut Vec<OpenMount>) -> Vec<ThawFailure> {
    let mut failed = Vec::new();
    for m in mounts {
        if held.iter().any(|h| h.dir == m.dirname) {
            continue;
        }
        match ops.open(&m.dirname) {
            Ok(o) => held.push(o),
            Err(OpError::Open(e) | OpError::Ioctl(e)) => failed.push(ThawFailure {
                dir: m.dirname.clone(),
                reason: format!("open: {}", strerror(e)),
            }),
        }
    }
    failed
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
    /// The mount points opened by the freeze, kept open until a thaw succeeds.
    held: Vec<OpenMount>,
    /// Failed thaws in a row (sets the retry delay).
    failed_thaws: u32,
    /// Started frozen from the marker of a previous instance: what it froze is unknown (not held), so every
    /// mount of the list must be opened and thawed.
    from_marker: bool,
}

/// Observer of frozen-state changes (the logger buffers while frozen).
pub type FrozenHook = Arc<dyn Fn(bool) + Send + Sync>;

/// The freeze state machine. Shared (`Arc`) between the command core, the watchdog thread, and the signal handler.
pub struct Freezer {
    ops: Arc<dyn FreezeOps>,
    cfg: FreezeConfig,
    state: StateDir,
    frozen: AtomicBool,
    on_change: FrozenHook,
    inner: tokio::sync::Mutex<Inner>,
    watchdog: Watchdog,
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
    /// A freezer, with its watchdog thread. If `<statedir>/qga.state.isfrozen` exists (a previous instance exited
    /// frozen), it starts frozen, like qemu-ga, and arms the watchdog from now.
    pub fn new(
        ops: Arc<dyn FreezeOps>,
        cfg: FreezeConfig,
        state: StateDir,
        on_change: FrozenHook,
    ) -> std::io::Result<Arc<Freezer>> {
        let was_frozen = state.is_marked_frozen()?;
        let mut spawn_error = None;
        let f = Arc::new_cyclic(|me: &Weak<Freezer>| {
            let watchdog = match Watchdog::spawn(me.clone()) {
                Ok(w) => w,
                Err(e) => {
                    spawn_error = Some(e);
                    Watchdog::disabled()
                }
            };
            Freezer {
                ops,
                cfg,
                state,
                frozen: AtomicBool::new(false),
                on_change,
                inner: tokio::sync::Mutex::new(Inner::default()),
                watchdog,
                me: me.clone(),
            }
        });
        if let Some(e) = spawn_error {
            return Err(e);
        }
        if was_frozen {
            tracing::warn!(
                "previous instance appears to have exited with frozen filesystems. deferring logging/pidfile \
                 creation and disabling non-fsfreeze-safe commands until guest-fsfreeze-thaw is issued, or \
                 filesystems are manually unfrozen and the file {} is removed",
                f.state.isfrozen_path().display()
            );
            f.set_frozen_flag(true);
            if let Ok(mut inner) = f.inner.try_lock() {
                inner.from_marker = true;
            }
            if let Some(delay) = f.cfg.auto_thaw {
                f.watchdog.arm(0, delay, Fire::AutoThaw);
            }
        }
        Ok(f)
    }

    /// Whether the agent is in the frozen state.
    pub fn is_frozen(&self) -> bool {
        self.frozen.load(Ordering::SeqCst)
    }

    /// `guest-fsfreeze-status`: "thawed" only once every filesystem the agent froze is known to be thawed.
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
        let held = std::mem::take(&mut inner.held);
        let (held, result) = self
            .blocking(move |ops| {
                let mut held = held;
                let r = freeze_walk(ops, &mounts, only.as_deref(), &mut held);
                (held, r)
            })
            .await?;
        inner.held = held;
        match result {
            Ok(0) if !inner.from_marker => {
                // (Mounts frozen by someone else, EBUSY, are left as qemu-ga leaves them.)
                inner.held.clear();
                // Nothing frozen: just leave the state. (qemu-ga skips the thaw hook here; we run it so a hook that
                // took locks in `freeze` always gets its `thaw`.)
                self.leave_frozen();
                self.run_thaw_hook_logged().await;
                Ok(0)
            }
            Ok(n) => {
                tracing::info!("froze {n} filesystem(s)");
                if let Some(delay) = self.cfg.auto_thaw {
                    self.watchdog.arm(inner.generation, delay, Fire::AutoThaw);
                }
                Ok(n)
            }
            Err(e) => {
                tracing::warn!("{e}; thawing everything");
                let _ = self.thaw_locked(&mut inner).await;
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
        self.thaw_locked(&mut inner).await
    }

    /// Thaws every held mount point (and, best effort, every other mount of the list, like qemu-ga). Only when
    /// nothing is left frozen is the frozen state left (marker deleted, "thawed"); otherwise the state stays
    /// frozen, the mount points stay held, the error says so, and the watchdog retries.
    async fn thaw_locked(&self, inner: &mut Inner) -> Result<i64, FreezeError> {
        self.watchdog.disarm();
        inner.generation += 1;
        let frozen = self.is_frozen();
        // The mount list is only needed for mounts not held (after a restart while frozen, or a thaw while
        // thawed): a thaw of what this instance froze needs no new descriptor.
        let mounts = match self.read_mounts() {
            Ok(m) => m,
            Err(e) if !frozen => return Err(e),
            Err(e) if inner.from_marker => return Err(self.thaw_failed(inner, e.to_string())),
            Err(e) => {
                tracing::warn!("{e}; thawing the mount points held since the freeze");
                Vec::new()
            }
        };
        let held = std::mem::take(&mut inner.held);
        // Mounts this instance did not open were not frozen by it (unless it started from the marker): failing to
        // open them now is not a failed thaw.
        let must_open = inner.from_marker;
        let (held, count, failed) = self
            .blocking(move |ops| {
                let mut held = held;
                let unopened = open_more(ops, &mounts, &mut held);
                let (count, mut failed) = thaw_walk(ops, &held);
                if must_open {
                    failed.extend(unopened);
                } else if !unopened.is_empty() {
                    tracing::debug!("thaw: {} other mount(s) not opened", unopened.len());
                }
                (held, count, failed)
            })
            .await?;
        if frozen && !failed.is_empty() {
            inner.held = held;
            let what: Vec<String> = failed
                .iter()
                .map(|f| format!("{} ({})", f.dir, f.reason))
                .collect();
            return Err(self.thaw_failed(inner, what.join(", ")));
        }
        // Closing the directories is cheap and never blocks on a frozen fs, but keep it off the async thread.
        let _ = self.blocking(move |_| drop(held)).await;
        inner.failed_thaws = 0;
        inner.from_marker = false;
        self.leave_frozen();
        tracing::info!("thawed {count} filesystem(s)");
        if let Some(hook) = &self.cfg.hook {
            hook.run("thaw").await?;
        }
        Ok(count)
    }

    /// A thaw that could not thaw: stay frozen, schedule a retry, and say so.
    fn thaw_failed(&self, inner: &mut Inner, what: String) -> FreezeError {
        inner.failed_thaws = inner.failed_thaws.saturating_add(1);
        let delay = retry_delay(inner.failed_thaws);
        self.watchdog.arm(inner.generation, delay, Fire::Retry);
        let e = FreezeError::Thaw {
            what,
            retry_secs: delay.as_secs(),
        };
        tracing::error!("{e}");
        e
    }

    async fn run_thaw_hook_logged(&self) {
        if let Some(hook) = &self.cfg.hook {
            let _ = hook.run("thaw").await;
        }
    }

    /// The watchdog fired (see [`watchdog`]): thaw unless a later freeze or thaw made this timer stale.
    async fn fired(&self, generation: u64, why: Fire) {
        let mut inner = self.inner.lock().await;
        if inner.generation != generation || !self.is_frozen() {
            return;
        }
        match (why, self.cfg.auto_thaw) {
            (Fire::AutoThaw, Some(d)) => tracing::warn!(
                "auto-thaw: no guest-fsfreeze-thaw within {} s of the freeze; thawing now (--auto-thaw)",
                d.as_secs()
            ),
            _ => tracing::warn!("retrying the thaw that failed"),
        }
        match self.thaw_locked(&mut inner).await {
            Ok(n) => tracing::warn!("thawed {n} filesystem(s) (watchdog)"),
            // Already logged (and retried) by `thaw_failed`.
            Err(FreezeError::Thaw { .. }) => {}
            Err(e) => tracing::error!("watchdog thaw: {e}"),
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
        match self.thaw_locked(&mut inner).await {
            Ok(n) => tracing::info!("thawed {n} filesystem(s) before exit"),
            Err(e) => tracing::error!("thaw before exit: {e}"),
        }
    }
}

/// The delay before retrying a failed thaw: 1 s, doubling up to [`MAX_THAW_RETRY`].
fn retry_delay(failures: u32) -> Duration {
    let secs = 1u64 << failures.saturating_sub(1).min(6);
    Duration::from_secs(secs).min(MAX_THAW_RETRY)
}

#[cfg(test)]
mod tests;
