//! guestlink: host CLI for QEMU guest agents (guestlinkd or qemu-ga) and SPICE agents. This file is the entry
//! point: parse, log setup, run the subcommand ([`cli`]), map the library's error to the exit status.

mod cli;

use std::io::{IsTerminal, Write};
use std::process::ExitCode;

use clap::Parser;
use tracing_subscriber::filter::{LevelFilter, Targets};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

use cli::Cli;
use guestlink_host::Error;

/// Exit status: generic failure (agent error, I/O, checksum mismatch).
pub const EXIT_FAILURE: u8 = 1;
/// Exit status: no agent reachable (socket missing, refused, nothing answered the sync).
pub const EXIT_UNAVAILABLE: u8 = 69;
/// Exit status: an agent command timed out.
pub const EXIT_TIMEOUT: u8 = 75;
/// Exit status: stopped by SIGINT/SIGTERM (a transfer cleaned up its temp files).
pub const EXIT_INTERRUPTED: u8 = 130;

fn init_tracing(verbose: u8) {
    let level = match verbose {
        0 => LevelFilter::WARN,
        1 => LevelFilter::DEBUG,
        _ => LevelFilter::TRACE,
    };
    // GUESTLINK_LOG, as for guestlinkd and guestlink-session: `level` or `target=level,…` (tracing's `Targets`).
    let filter = std::env::var("GUESTLINK_LOG")
        .ok()
        .and_then(|s| s.parse::<Targets>().ok())
        .unwrap_or_else(|| {
            Targets::new()
                .with_target("guestlink", level)
                .with_target("guestlink_host", level)
        });
    // The filter is the subscriber's only level gate (`fmt()` alone would also cap at INFO).
    tracing_subscriber::registry()
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                .with_ansi(std::io::stderr().is_terminal()),
        )
        .with(filter)
        .init();
}

/// The exit status for an error, by its root kind: the one mapping from the library's [`Error`] to exit codes.
fn exit_for(err: &anyhow::Error) -> u8 {
    match err.chain().find_map(|e| e.downcast_ref::<Error>()) {
        Some(
            Error::NoAgent { .. } | Error::NoSuchPath(_) | Error::Open { .. } | Error::NoSpicePath,
        ) => EXIT_UNAVAILABLE,
        Some(Error::Timeout { .. }) => EXIT_TIMEOUT,
        Some(Error::Interrupted) => EXIT_INTERRUPTED,
        _ => EXIT_FAILURE,
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_tracing(cli.verbose);
    let mut stdout = std::io::stdout().lock();
    let result = cli::run(&cli, &mut stdout);
    let _ = stdout.flush();
    match result {
        Ok(code) => ExitCode::from(u8::try_from(code).unwrap_or(EXIT_FAILURE)),
        Err(err) => {
            let msg = format!("{err:#}");
            if cli.json {
                let doc =
                    serde_json::json!({"error": {"message": msg, "exit_code": exit_for(&err)}});
                let _ = writeln!(stdout, "{doc}");
            }
            eprintln!("guestlink: error: {msg}");
            ExitCode::from(exit_for(&err))
        }
    }
}
