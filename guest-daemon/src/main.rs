//! guestlinkd: the guest's root daemon, a drop-in replacement for qemu-ga (same command line, key file, wire
//! protocol) with freeze safety: an auto-thaw watchdog, hook timeouts, thaw on SIGTERM, no disk writes while frozen.
//!
//! Start-up: command line → configuration (→ `-D`/`-V`/`-b help` exit here) → frozen marker check → daemonize →
//! logging → tokio runtime → transport → sd_notify READY=1 → dispatch loop; SIGTERM/SIGINT thaw and exit 0.
#![deny(unsafe_code)]

mod cli;
mod commands;
mod config;
mod daemon;
mod freeze;
mod keyfile;
mod logging;
mod server;
mod spice;
mod state;
mod sys;
mod transport;

use std::io::Write;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result};
use guestlink_protocol::qga::schema::{Command, COMMANDS};
use guestlink_protocol::qga::QgaError;
use serde_json::Value;
use tokio::signal::unix::{signal, SignalKind};

use config::Config;
use freeze::hook::Hook;
use freeze::{FreezeConfig, Freezer};
use server::dispatch::{Backend, Dispatcher, Output, StreamedReply};
use server::policy::Policy;
use state::StateDir;

/// guestlinkd's version, reported by `-V` and (unless `info-version` overrides it) by `guest-info`.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The command handlers as the core's backend; [`commands::CommandError::to_qga`] is the one error mapping.
#[derive(Debug)]
struct ServicesBackend(commands::Services);

impl Backend for ServicesBackend {
    async fn execute(&self, cmd: Command) -> Result<Output, QgaError> {
        let out = match cmd {
            // guest-file-read's answer is written in pieces (no 64 MiB JSON string).
            read @ Command::GuestFileRead(_) => match self.0.execute_payload(read).await {
                Ok(commands::Payload::FileRead(r)) => {
                    Ok(Output::Streamed(Box::new(FileReadReply(r))))
                }
                Ok(commands::Payload::Value(v)) => Ok(Output::Value(v)),
                Err(e) => Err(e),
            },
            other => self.0.execute(other).await.map(Output::Value),
        };
        out.map_err(|e| e.to_qga())
    }
}

/// guest-file-read's answer written in pieces: base64-encoded chunk by chunk straight into the channel.
#[derive(Debug)]
struct FileReadReply(commands::file_read::FileRead);

/// Raw bytes per base64 chunk (a multiple of 3, so the chunks concatenate without padding).
const FILE_READ_CHUNK: usize = 3 << 20;

impl StreamedReply for FileReadReply {
    fn reply_parts(&self, id: Option<Value>, delimited: bool) -> (Vec<u8>, Vec<u8>) {
        self.0.reply_parts(id, delimited)
    }

    fn chunks(&self) -> Box<dyn Iterator<Item = String> + '_> {
        Box::new(self.0.b64_chunks(FILE_READ_CHUNK))
    }
}

fn env_var(k: &str) -> Option<String> {
    std::env::var(k).ok()
}

fn main() -> ExitCode {
    let cli = cli::parse();
    if cli.version {
        // A closed stdout (`| head`) is not worth a panic: ignore write errors here and below.
        let _ = writeln!(
            std::io::stdout(),
            "guestlinkd {VERSION} (QEMU Guest Agent compatible)"
        );
        return ExitCode::SUCCESS;
    }
    if cli.block_rpcs.iter().any(|b| b == "help" || b == "?") {
        let mut out = std::io::stdout().lock();
        for c in COMMANDS.iter().filter(|c| c.linux) {
            let _ = writeln!(out, "{}", c.name);
        }
        return ExitCode::SUCCESS;
    }
    let cfg = match Config::load(&cli, &env_var) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("guestlinkd: {e}");
            return ExitCode::FAILURE;
        }
    };
    if cli.dump_conf {
        let _ = std::io::stdout().write_all(cfg.dump().as_bytes());
        return ExitCode::SUCCESS;
    }
    let spice = spice::SpiceOptions::from_cli(&cli);
    match start(cfg, spice) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            if logging::is_initialized() {
                tracing::error!("{e:#}");
            } else {
                eprintln!("guestlinkd: {e:#}");
            }
            ExitCode::FAILURE
        }
    }
}

fn start(cfg: Config, spice: Option<spice::SpiceOptions>) -> Result<()> {
    let statedir = StateDir::new(&cfg.statedir);
    let start_frozen = statedir.is_marked_frozen().with_context(|| {
        format!(
            "unable to access state file at path {}",
            statedir.isfrozen_path().display()
        )
    })?;
    // Started frozen: the pid file and log file are created only after the thaw (nothing may touch a frozen fs).
    let deferred_pidfile = Arc::new(Mutex::new(None::<String>));
    if cfg.daemonize {
        if start_frozen {
            *deferred_pidfile.lock().unwrap_or_else(|p| p.into_inner()) = Some(cfg.pidfile.clone());
            daemon::daemonize(None)?;
        } else {
            daemon::daemonize(Some(&cfg.pidfile))?;
        }
    }
    logging::init(
        cfg.logfile.as_ref().map(Into::into),
        cfg.verbose,
        start_frozen,
    );
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("tokio runtime")?;
    let r = rt.block_on(run(cfg, statedir, deferred_pidfile, spice));
    daemon::remove_pidfile();
    r
}

fn secs(s: u64) -> Option<Duration> {
    (s > 0).then(|| Duration::from_secs(s))
}

async fn run(
    cfg: Config,
    statedir: StateDir,
    deferred_pidfile: Arc<Mutex<Option<String>>>,
    spice: Option<spice::SpiceOptions>,
) -> Result<()> {
    let g = &cfg.guestlink;
    let on_change: freeze::FrozenHook = Arc::new(move |frozen| {
        logging::set_frozen(frozen);
        if !frozen {
            if let Some(p) = deferred_pidfile
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .take()
            {
                if let Err(e) = daemon::write_pidfile(&p) {
                    tracing::error!("{e:#}");
                }
            }
        }
    });
    let freezer = Freezer::new(
        Arc::new(freeze::ops::RealOps),
        FreezeConfig {
            mountinfo: "/proc/self/mountinfo".into(),
            hook: cfg.fsfreeze_hook.as_ref().map(|p| Hook {
                path: p.into(),
                timeout: secs(g.hook_timeout_secs),
            }),
            hook_failure: g.hook_failure,
            auto_thaw: secs(g.auto_thaw_secs),
        },
        statedir.clone(),
        on_change,
    )
    .context("freeze state")?;
    let services = commands::Services::new(commands::ServicesConfig {
        statedir: statedir.path().to_owned(),
        file_mode: g.file_mode,
        exec: commands::ExecLimits {
            max_output: g.exec_max_output,
            max_records: g.exec_max_processes,
            ..Default::default()
        },
        ..Default::default()
    })
    .map_err(|e| anyhow::anyhow!("failed to initialize the command handlers: {e}"))?;
    let profile = g.profile.as_deref().and_then(config::profile_commands);
    let policy = Policy::new(&cfg.block_rpcs, &cfg.allow_rpcs, profile);
    for name in &cfg.block_rpcs {
        tracing::debug!("disabling command: {name}");
    }
    let version = g.info_version.clone().unwrap_or_else(|| VERSION.to_owned());
    let d = Dispatcher::new(
        ServicesBackend(services),
        Arc::clone(&freezer),
        policy,
        version,
    );

    let mut sigterm = signal(SignalKind::terminate()).context("SIGTERM handler")?;
    let mut sigint = signal(SignalKind::interrupt()).context("SIGINT handler")?;
    let spice_task = spice.map(|o| tokio::spawn(spice::run_logged(o)));
    if cfg.method == "none" {
        // SPICE only: no QGA channel; exit with the SPICE side or on a signal.
        let task = spice_task.context("-m none needs --spice-path (nothing to serve)")?;
        let _ = sd_notify::notify(false, &[sd_notify::NotifyState::Ready]);
        tokio::select! {
            r = task => return r.context("SPICE task")?,
            _ = sigterm.recv() => {}
            _ = sigint.recv() => {}
        }
        tracing::info!("exiting");
        return Ok(());
    }
    let mut activation = transport::listen::activation_fd(&env_var)?;
    let mut streamer = server::new_streamer();
    let mut notified = false;
    loop {
        let activated = activation.is_some();
        let opened = transport::open(
            &cfg.method,
            cfg.path.as_deref(),
            activation.take(),
            &cfg.guestlink.vsock_allow_cids,
        );
        let mut channel = match opened {
            Ok(c) => c,
            Err(e) if cfg.retry_path => {
                tracing::warn!("{e}; waiting for channel path...");
                tokio::select! {
                    _ = tokio::time::sleep(transport::RETRY_INTERVAL) => continue,
                    _ = sigterm.recv() => break,
                    _ = sigint.recv() => break,
                }
            }
            Err(e) => return Err(e).context("failed to initialize guest agent channel"),
        };
        if !notified {
            notified = true;
            if let Err(e) = sd_notify::notify(false, &[sd_notify::NotifyState::Ready]) {
                tracing::debug!("sd_notify: {e}");
            }
            if activated {
                tracing::info!("guestlinkd {VERSION} ready (socket activation)");
            } else {
                tracing::info!(method = %cfg.method, path = ?cfg.path, "guestlinkd {VERSION} ready");
            }
        }
        let err = tokio::select! {
            e = server::serve(&mut channel, &d, &mut streamer) => e,
            _ = sigterm.recv() => break,
            _ = sigint.recv() => break,
        };
        drop(channel);
        if !cfg.retry_path {
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
