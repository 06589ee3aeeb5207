//! guestlinkd's threads and runtimes, so that nothing a local user controls can stall the QGA core:
//! - the QGA side (transport, dispatch, signals, freeze/thaw): a current-thread runtime on the main thread, with
//!   its own blocking pool (FIFREEZE/FITHAW, file and exec commands);
//! - the SPICE side (when `--spice-path` is given): its own OS thread with its own current-thread runtime (and
//!   blocking pool), so its session socket — open to every local user — shares nothing with the QGA side;
//! - the freeze watchdog: its own OS thread ([`crate::freeze::watchdog`]);
//! - the closer threads ([`crate::closer`]): closes of descriptors passed in by local users (started only with the
//!   SPICE side, the only caller).
//!
//! A fatal error of the SPICE side is logged and leaves the QGA side running; a missing or failing QGA channel
//! leaves the SPICE side running (the QGA side keeps retrying its channel).

use anyhow::{Context, Result};
use tokio::sync::oneshot;

use crate::spice::{self, SpiceOptions};

/// The running SPICE side.
#[derive(Debug)]
pub struct SpiceSide {
    /// Its result, once it stops (only on a fatal set-up error).
    pub done: oneshot::Receiver<Result<()>>,
}

/// Starts the SPICE side on its own thread and runtime.
pub fn spawn_spice(opts: SpiceOptions) -> Result<SpiceSide> {
    let (tx, done) = oneshot::channel();
    std::thread::Builder::new()
        .name("guestlinkd-spice".into())
        .spawn(move || {
            let r = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .thread_name("guestlinkd-spice-blocking")
                .build()
                .context("SPICE runtime")
                .and_then(|rt| rt.block_on(spice::run_logged(opts)));
            let _ = tx.send(r);
        })
        .context("SPICE thread")?;
    Ok(SpiceSide { done })
}

/// The QGA side's runtime (run on the calling thread with `block_on`).
pub fn qga_runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .thread_name("guestlinkd-qga-blocking")
        .build()
        .context("tokio runtime")
}
