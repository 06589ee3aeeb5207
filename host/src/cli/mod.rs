//! The `guestlink` command line. It belongs to the binary, not to the `guestlink_host` library: the clap
//! definitions ([`args`]), one handler function per subcommand ([`qga`] for the agent channel; [`spice`], with its clap definitions, for the
//! SPICE port), text rendering ([`render`]) and the indicatif progress bars ([`progress`]).

pub mod args;
mod progress;
mod qga;
mod render;
mod spice;

use std::io::Write;

use anyhow::{Context, Result};
use clap::CommandFactory;

pub use args::{Cli, Cmd};

/// Runs the chosen subcommand and returns the exit status.
pub fn run(cli: &Cli, out: &mut dyn Write) -> Result<i32> {
    match &cli.command {
        Cmd::Man => man(out),
        Cmd::Completions { shell } => completions(*shell, out),
        Cmd::Spice(cmd) => spice::run(cli, cmd, out),
        _ => qga::run(cli, out),
    }
}

/// `guestlink man`: the man page (roff), generated from the clap definitions.
fn man(out: &mut dyn Write) -> Result<i32> {
    clap_mangen::Man::new(Cli::command()).render(out)?;
    Ok(0)
}

/// `guestlink completions SHELL`: a completion script, generated from the clap definitions.
fn completions(shell: clap_complete::Shell, out: &mut dyn Write) -> Result<i32> {
    // Generate into memory: clap_complete panics on a write error (e.g. a closed pipe).
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "guestlink", &mut script);
    out.write_all(&script)?;
    Ok(0)
}

/// Prints one JSON document (`--json`) on its own line.
fn emit(out: &mut dyn Write, v: &serde_json::Value) -> Result<()> {
    writeln!(out, "{v}").context("cannot write to stdout")
}
