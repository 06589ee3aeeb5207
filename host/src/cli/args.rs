//! Command-line definition (clap derive) of the `guestlink` binary: global options, targets and the agent
//! subcommands; the SPICE subcommands are defined in `spice.rs` and flattened in here.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

/// Drive a QEMU guest agent (guestlinkd or qemu-ga) from the host.
#[derive(Debug, Parser)]
#[command(name = "guestlink", version, about, propagate_version = true)]
pub struct Cli {
    /// Where the agent is.
    #[command(flatten)]
    pub target: TargetArgs,
    /// Print one JSON document on stdout instead of human-readable text.
    #[arg(long, global = true)]
    pub json: bool,
    /// No progress bars or notes on stderr.
    #[arg(short, long, global = true)]
    pub quiet: bool,
    /// Log to stderr (-v debug, -vv trace).
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
    /// Timeout in seconds for commands without a specific one (default 5; freeze 3600, thaw 180, fstrim 600,
    /// file chunks 60).
    #[arg(long, global = true, value_name = "SECS")]
    pub agent_timeout: Option<f64>,
    /// Seconds to wait for the agent to answer the initial guest-sync-delimited.
    #[arg(long, global = true, value_name = "SECS", default_value_t = 5.0)]
    pub connect_timeout: f64,
    /// SPICE commands: the guest's com.redhat.spice.0 port (a QEMU chardev unix socket, or a character device).
    #[arg(
        long,
        global = true,
        value_name = "PATH",
        env = "GUESTLINK_SPICE_SOCKET"
    )]
    pub spice_socket: Option<PathBuf>,
    /// What to do.
    #[command(subcommand)]
    pub command: Cmd,
}

/// Target selection (exactly one for agent commands).
#[derive(Debug, Args)]
pub struct TargetArgs {
    /// QEMU chardev unix socket (`-chardev socket,path=PATH,server=on`) or a character device.
    #[arg(long, global = true, value_name = "PATH", env = "GUESTLINK_SOCKET", conflicts_with_all = ["domain", "proxmox"])]
    pub socket: Option<PathBuf>,
    /// libvirt domain (name, id or UUID); commands go through `virsh qemu-agent-command`.
    #[arg(long, global = true, value_name = "NAME", conflicts_with = "proxmox")]
    pub domain: Option<String>,
    /// libvirt connection URI for --domain (default: libvirt's default, e.g. LIBVIRT_DEFAULT_URI).
    #[arg(long, global = true, value_name = "URI", requires = "domain")]
    pub libvirt_uri: Option<String>,
    /// Proxmox VE VM id: /var/run/qemu-server/VMID.qga, connected per batch like Proxmox does.
    #[arg(long, global = true, value_name = "VMID")]
    pub proxmox: Option<u32>,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Cmd {
    /// Check that the agent answers (guest-ping).
    Ping,
    /// Agent version and supported commands (guest-info).
    Info,
    /// Guest OS and kernel (guest-get-osinfo).
    Osinfo,
    /// Mounted filesystems (guest-get-fsinfo).
    Fsinfo,
    /// Network interfaces and addresses (guest-network-get-interfaces).
    Network,
    /// Logged-in users (guest-get-users).
    Users,
    /// Guest clock (guest-get-time) and its offset from the host clock.
    Time,
    /// Run a command in the guest; output streams when the agent supports it; exits with its status.
    Exec(ExecArgs),
    /// Copy files between host and guest (chunked, sha256-verified, never a partial file under the final name).
    #[command(subcommand)]
    File(FileCmd),
    /// Freeze, thaw or query guest filesystems.
    Fsfreeze(FsfreezeArgs),
    /// Freeze the guest, run a host command (snapshot/backup), and always thaw.
    Quiesce(QuiesceArgs),
    /// Send any request: a command name, or a JSON object {"execute": …, "arguments": …}.
    Raw(RawArgs),
    /// Print the man page (roff) on stdout.
    Man,
    /// Print a shell completion script on stdout.
    Completions {
        /// Shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// SPICE agent commands (clipboard, resize, send-file, spice-state).
    #[command(flatten)]
    Spice(super::spice::SpiceCmd),
}

/// `exec` arguments.
#[derive(Debug, Args)]
pub struct ExecArgs {
    /// Environment for the process as NAME=VALUE (repeatable); when given it replaces the agent's.
    #[arg(long = "env", value_name = "NAME=VALUE")]
    pub env: Vec<String>,
    /// Do not pass stdin even when it is not a terminal.
    #[arg(long)]
    pub no_stdin: bool,
    /// Program and arguments.
    #[arg(required = true, last = true, value_name = "CMD")]
    pub command: Vec<String>,
}

/// `file` subcommands.
#[derive(Debug, Subcommand)]
pub enum FileCmd {
    /// Copy a guest file to the host.
    Pull(PullArgs),
    /// Copy a host file into the guest.
    Push(PushArgs),
}

/// `file pull`.
#[derive(Debug, Args)]
pub struct PullArgs {
    /// Guest path.
    pub guest: String,
    /// Host path (a directory keeps the guest file name).
    pub host: PathBuf,
    /// Bytes per guest-file-read (default 1 MiB, 4 MiB with --domain; at most 6 MiB with --domain, 32 MiB
    /// otherwise).
    #[arg(long, value_name = "BYTES")]
    pub chunk_size: Option<usize>,
    /// Requests kept in flight on direct sockets (default 2, at most 16; 1 = strict request/reply).
    #[arg(long, value_name = "N")]
    pub in_flight: Option<usize>,
}

/// `file push`.
#[derive(Debug, Args)]
pub struct PushArgs {
    /// Host path.
    pub host: PathBuf,
    /// Guest path (full file name).
    pub guest: String,
    /// Bytes per guest-file-write (default 1 MiB; at most 90 KiB with --domain, where each chunk is one virsh
    /// argument).
    #[arg(long, value_name = "BYTES")]
    pub chunk_size: Option<usize>,
    /// Requests kept in flight on direct sockets (default 2, at most 16; 1 = strict request/reply).
    #[arg(long, value_name = "N")]
    pub in_flight: Option<usize>,
}

/// `fsfreeze` actions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum FreezeAction {
    /// Freeze (all, or the given mountpoints).
    Freeze,
    /// Thaw everything.
    Thaw,
    /// Report "frozen" or "thawed".
    Status,
}

/// `fsfreeze` arguments.
#[derive(Debug, Args)]
pub struct FsfreezeArgs {
    /// What to do.
    #[arg(value_enum)]
    pub action: FreezeAction,
    /// Freeze only this mountpoint (repeatable; freeze only).
    #[arg(long = "mountpoint", value_name = "M")]
    pub mountpoints: Vec<String>,
}

/// `quiesce` arguments.
#[derive(Debug, Args)]
pub struct QuiesceArgs {
    /// Freeze only this mountpoint (repeatable).
    #[arg(long = "mountpoint", value_name = "M")]
    pub mountpoints: Vec<String>,
    /// Longest time the host command may run while the guest is frozen; then it is killed and the guest thawed.
    #[arg(long, value_name = "SECS", default_value_t = 300.0)]
    pub timeout: f64,
    /// Host command (snapshot/backup) to run while frozen.
    #[arg(required = true, last = true, value_name = "CMD")]
    pub command: Vec<String>,
}

/// `raw` arguments.
#[derive(Debug, Args)]
pub struct RawArgs {
    /// A JSON request object, or a bare command name such as guest-get-host-name.
    pub request: String,
    /// Timeout in seconds for this request.
    #[arg(long, value_name = "SECS")]
    pub timeout: Option<f64>,
}
