//! guestlink-session: the per-user desktop agent. It connects to guestlinkd's session socket and does, for the
//! desktop session it runs in, what the host asks: clipboard both ways, resize from monitors configs, and saving
//! received files in the download directory.

mod audio;
mod backend;
mod connection;
mod dirs;
mod display_map;
mod file_writer;
mod files;
mod instance;
mod outgoing;

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Parser;
use tracing_subscriber::filter::{LevelFilter, Targets};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

/// The per-user desktop agent of guestlink (clipboard, resize, received files).
#[derive(Debug, Parser)]
#[command(name = "guestlink-session", version)]
struct Cli {
    /// guestlinkd's session socket.
    #[arg(
        long,
        value_name = "PATH",
        default_value = "/run/guestlinkd/session.sock"
    )]
    socket: PathBuf,
    /// Where received files are saved [default: the XDG download directory, else ~/Downloads].
    #[arg(long, value_name = "DIR")]
    download_dir: Option<PathBuf>,
    /// Write received files through the page cache even where direct I/O is used by default (files of 4 MiB or
    /// more on ext4/xfs).
    #[arg(long)]
    buffered_writes: bool,
    /// More logging (-v debug, -vv trace); GUESTLINK_LOG overrides.
    #[arg(short, long, action = clap::ArgAction::Count)]
    verbose: u8,
}

fn init_logging(verbose: u8) {
    let level = match verbose {
        0 => LevelFilter::INFO,
        1 => LevelFilter::DEBUG,
        _ => LevelFilter::TRACE,
    };
    // GUESTLINK_LOG, as for guestlinkd and guestlink: `level` or `target=level,…` (tracing's `Targets`).
    let filter = std::env::var("GUESTLINK_LOG")
        .ok()
        .and_then(|s| s.parse::<Targets>().ok())
        .unwrap_or_else(|| Targets::new().with_default(level));
    // The filter is the subscriber's only level gate (`fmt()` alone would also cap at INFO).
    tracing_subscriber::registry()
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                // No colour codes in the journal (user unit) or a redirected log.
                .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr())),
        )
        .with(filter)
        .init();
}

/// Tells systemd (`Type=notify` user unit) that the agent is up, if `$NOTIFY_SOCKET` is set.
fn notify_ready() {
    if let Err(e) = sd_notify::notify(false, &[sd_notify::NotifyState::Ready]) {
        tracing::warn!("sd_notify READY: {e}");
    }
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    init_logging(cli.verbose);
    let Some(lock) = instance::acquire()? else {
        tracing::info!("another guestlink-session runs for this user and display; exiting");
        return Ok(());
    };
    tracing::debug!(lock = %lock.path().display(), "single-instance lock held");
    let download_dir = dirs::download_dir(cli.download_dir);
    match &download_dir {
        Some(d) => tracing::info!(dir = %d.display(), "download directory"),
        None => tracing::warn!("no download directory: file transfers disabled"),
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("tokio runtime")?;
    rt.block_on(async move {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let backend = backend::select(tx);
        tracing::info!(backend = backend.name(), features = ?backend.features(), "backend");
        notify_ready();
        let mut files = files::FileReceiver::new(download_dir);
        if cli.buffered_writes {
            files.buffered_only();
        }
        let mut connection = connection::Connection::new(cli.socket, backend, rx, files);
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        tokio::select! {
            r = connection.run() => r,
            _ = tokio::signal::ctrl_c() => { tracing::info!("interrupted"); Ok(()) }
            _ = term.recv() => { tracing::info!("terminated"); Ok(()) }
        }
    })
}
