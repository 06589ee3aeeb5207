//! guestlinkd: the guest's root daemon, a drop-in replacement for qemu-ga (same command line, key file, wire
//! protocol) with freeze safety: an auto-thaw watchdog, hook timeouts, thaw on SIGTERM, no disk writes while frozen.
//!
//! This file is wiring only. Start-up: command line → configuration (→ `-D`/`-V`/`-b help` exit here) → frozen
//! marker check → daemonize → logging → descriptor limit → with `--spice-path` only: closer threads and SPICE
//! thread ([`runtimes`]) → QGA runtime → freezer (its watchdog thread), command handlers, dispatcher → the QGA loop
//! ([`qga_loop`]: transport, sd_notify READY=1, dispatch; SIGTERM/SIGINT thaw and exit 0).

mod cli;
mod closer;
mod commands;
mod config;
mod daemon;
mod freeze;
mod keyfile;
mod logging;
mod qga_loop;
mod runtimes;
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
use guestlink_protocol::qga::schema::COMMANDS;

use config::Config;
use freeze::hook::Hook;
use freeze::{FreezeConfig, Freezer};
use server::dispatch::Dispatcher;
use server::policy::Policy;
use state::StateDir;

/// guestlinkd's version, reported by `-V` and (unless `info-version` overrides it) by `guest-info`.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

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
    match sys::raise_nofile_limit() {
        Ok(n) => tracing::debug!("descriptor limit: {n}"),
        Err(e) => tracing::warn!("cannot raise the descriptor limit: {e}"),
    }
    // Only the SPICE side closes through the closer: without it (a server guest) its threads are not started.
    if spice.is_some() {
        closer::start();
    }
    let spice = spice.map(runtimes::spawn_spice).transpose()?;
    let rt = runtimes::qga_runtime()?;
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
    spice: Option<runtimes::SpiceSide>,
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
    let d: Dispatcher<_> = Dispatcher::new(services, Arc::clone(&freezer), policy, version);

    qga_loop::serve(&cfg, &d, &freezer, spice).await
}
