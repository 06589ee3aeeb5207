//! The QGA side's main loop: open the channel (retrying with `-r`, or while a SPICE side runs in this process),
//! serve it, and on SIGTERM/SIGINT thaw (if frozen) and return. With `-m none` it only waits for the SPICE side or a
//! signal.

use anyhow::{Context, Result};
use tokio::signal::unix::{signal, SignalKind};

use crate::config::Config;
use crate::freeze::Freezer;
use crate::runtimes::SpiceSide;
use crate::server::dispatch::Handle;
use crate::transport::Method;
use crate::{server, transport, VERSION};

/// Runs the QGA side until a signal (or, without `-r` and without a SPICE side, a channel failure).
pub async fn serve<D: Handle>(
    cfg: &Config,
    d: &D,
    freezer: &Freezer,
    spice: Option<SpiceSide>,
) -> Result<()> {
    let env_var = |k: &str| std::env::var(k).ok();
    let mut sigterm = signal(SignalKind::terminate()).context("SIGTERM handler")?;
    let mut sigint = signal(SignalKind::interrupt()).context("SIGINT handler")?;
    let has_spice = spice.is_some();
    if cfg.method == Method::None {
        // SPICE only: no QGA channel; exit with the SPICE side or on a signal.
        let side = spice.context("-m none needs --spice-path (nothing to serve)")?;
        let _ = sd_notify::notify(false, &[sd_notify::NotifyState::Ready]);
        tokio::select! {
            r = side.done => return r.context("SPICE thread")?,
            _ = sigterm.recv() => {}
            _ = sigint.recv() => {}
        }
        tracing::info!("exiting");
        return Ok(());
    }
    // With the SPICE side in this process, a missing or failing QGA channel is never fatal: it is retried.
    let retry = cfg.retry_path || has_spice;
    // With a SPICE side, READY=1 does not wait for the QGA channel.
    let notified = has_spice;
    if notified {
        let _ = sd_notify::notify(false, &[sd_notify::NotifyState::Ready]);
    }
    let mut announced = false;
    let mut warned_missing = false;
    let mut activation = transport::listen::activation_fd(&env_var)?;
    let mut streamer = server::new_streamer();
    loop {
        let activated = activation.is_some();
        let opened = transport::open(
            cfg.method,
            cfg.path.as_deref(),
            activation.take(),
            &cfg.guestlink.vsock_allow_cids,
        );
        let mut channel = match opened {
            Ok(c) => c,
            Err(e) if retry => {
                if cfg.retry_path {
                    tracing::warn!("{e}; waiting for channel path...");
                } else if !std::mem::replace(&mut warned_missing, true) {
                    tracing::warn!("{e}; the SPICE side keeps running, the QGA channel is retried");
                }
                tokio::select! {
                    _ = tokio::time::sleep(transport::RETRY_INTERVAL) => continue,
                    _ = sigterm.recv() => break,
                    _ = sigint.recv() => break,
                }
            }
            Err(e) => return Err(e).context("failed to initialize guest agent channel"),
        };
        warned_missing = false;
        if !std::mem::replace(&mut announced, true) {
            if !notified {
                if let Err(e) = sd_notify::notify(false, &[sd_notify::NotifyState::Ready]) {
                    tracing::debug!("sd_notify: {e}");
                }
            }
            if activated {
                tracing::info!("guestlinkd {VERSION} ready (socket activation)");
            } else {
                tracing::info!(method = %cfg.method, path = ?cfg.path, "guestlinkd {VERSION} ready");
            }
        }
        let err = tokio::select! {
            e = server::serve(&mut channel, d, &mut streamer) => e,
            _ = sigterm.recv() => break,
            _ = sigint.recv() => break,
        };
        drop(channel);
        if !retry {
            freezer.thaw_for_exit().await;
            return Err(err).context("channel failed");
        }
        tracing::warn!("{err}; agent stopped unexpectedly, restarting...");
        tokio::select! {
            _ = tokio::time::sleep(transport::RETRY_INTERVAL) => {}
            _ = sigterm.recv() => break,
            _ = sigint.recv() => break,
        }
    }
    // Unlike qemu-ga (which ignores SIGTERM while frozen until systemd SIGKILLs it), thaw first, then exit 0.
    freezer.thaw_for_exit().await;
    tracing::info!("exiting");
    Ok(())
}
