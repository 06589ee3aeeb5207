//! The typed QGA command schema: every command's arguments and returns, the command table, and [`Command::parse`].
//!
//! Mirrors `qga/qapi-schema.json` (≈ QEMU 10.x/11.0, 44 commands) plus guestlink's `guestlink-*` extensions.

pub mod args;
pub mod declare;
pub mod ghash;
pub mod storage;
pub mod types;
pub mod visit;

pub use args::*;
pub use storage::*;
pub use types::*;

pub use declare::{CommandSet, Outcome, Run};

use serde_json::{Map, Value};

use crate::qga::error::QgaError;

/// One parameter of a command, as in the QAPI schema.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParamSpec {
    /// Member name on the wire.
    pub name: &'static str,
    /// QAPI type (`int`, `str`, `bool`, `uint64`, `['str']`, `GuestFileWhence`, ...).
    pub ty: &'static str,
    /// Whether the member may be absent.
    pub optional: bool,
}

/// One command of the schema.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CommandSpec {
    /// Command name.
    pub name: &'static str,
    /// `false` for commands that send nothing back on success (shutdown, suspend-*).
    pub success_response: bool,
    /// Argument members in schema order.
    pub params: &'static [ParamSpec],
    /// QAPI return type (`{}` for none).
    pub returns: &'static str,
    /// QEMU version that introduced the command (`guestlink` for extensions).
    pub since: &'static str,
    /// Whether qemu-ga implements the command on Linux.
    pub linux: bool,
    /// Whether the reply is preceded by a 0xFF byte (guest-sync-delimited).
    pub delimited: bool,
}

impl ParamSpec {
    /// A required member.
    pub const fn req(name: &'static str, ty: &'static str) -> ParamSpec {
        ParamSpec {
            name,
            ty,
            optional: false,
        }
    }

    /// An optional member.
    pub const fn opt(name: &'static str, ty: &'static str) -> ParamSpec {
        ParamSpec {
            name,
            ty,
            optional: true,
        }
    }
}

/// A command's argument struct: its members as the schema lists them. Implemented by [`visit::qapi_args!`], which
/// also gives the struct its QEMU-compatible reader, so each member's wire name is written once.
pub trait QapiArgs {
    /// Argument members in schema order.
    const PARAMS: &'static [ParamSpec];
}

crate::qga_commands! {
    pub enum Command; pub trait CoreHandlers; pub trait Handlers; pub const COMMANDS;
    GuestSyncDelimited(GuestSyncArgs) = "guest-sync-delimited" => guest_sync_delimited in core -> "int", since "1.1", delimited;
    GuestSync(GuestSyncArgs) = "guest-sync" => guest_sync in core -> "int", since "0.15";
    GuestPing = "guest-ping" => guest_ping in core -> "{}", since "0.15";
    GuestGetTime = "guest-get-time" => guest_get_time -> "int", since "1.5";
    GuestSetTime(GuestSetTimeArgs) = "guest-set-time" => guest_set_time -> "{}", since "1.5";
    GuestInfo = "guest-info" => guest_info in core -> "GuestAgentInfo", since "0.15";
    GuestShutdown(GuestShutdownArgs) = "guest-shutdown" => guest_shutdown -> "{}", since "0.15", no_response;
    GuestFileOpen(GuestFileOpenArgs) = "guest-file-open" => guest_file_open -> "int", since "0.15";
    GuestFileClose(GuestFileHandleArgs) = "guest-file-close" => guest_file_close -> "{}", since "0.15";
    GuestFileRead(GuestFileReadArgs) = "guest-file-read" => guest_file_read -> "GuestFileRead", since "0.15";
    GuestFileWrite(GuestFileWriteArgs) = "guest-file-write" => guest_file_write -> "GuestFileWrite", since "0.15";
    GuestFileSeek(GuestFileSeekArgs) = "guest-file-seek" => guest_file_seek -> "GuestFileSeek", since "0.15";
    GuestFileFlush(GuestFileHandleArgs) = "guest-file-flush" => guest_file_flush -> "{}", since "0.15";
    GuestFsfreezeStatus = "guest-fsfreeze-status" => guest_fsfreeze_status in core -> "GuestFsfreezeStatus", since "0.15";
    GuestFsfreezeFreeze = "guest-fsfreeze-freeze" => guest_fsfreeze_freeze in core -> "int", since "0.15";
    GuestFsfreezeFreezeList(GuestFsfreezeFreezeListArgs) = "guest-fsfreeze-freeze-list" => guest_fsfreeze_freeze_list in core -> "int", since "2.2";
    GuestFsfreezeThaw = "guest-fsfreeze-thaw" => guest_fsfreeze_thaw in core -> "int", since "0.15";
    GuestFstrim(GuestFstrimArgs) = "guest-fstrim" => guest_fstrim -> "GuestFilesystemTrimResponse", since "1.2";
    GuestSuspendDisk = "guest-suspend-disk" => guest_suspend_disk -> "{}", since "1.1", no_response;
    GuestSuspendRam = "guest-suspend-ram" => guest_suspend_ram -> "{}", since "1.1", no_response;
    GuestSuspendHybrid = "guest-suspend-hybrid" => guest_suspend_hybrid -> "{}", since "1.1", no_response;
    GuestNetworkGetInterfaces = "guest-network-get-interfaces" => guest_network_get_interfaces -> "['GuestNetworkInterface']", since "1.1";
    GuestGetVcpus = "guest-get-vcpus" => guest_get_vcpus -> "['GuestLogicalProcessor']", since "1.5";
    GuestSetVcpus(GuestSetVcpusArgs) = "guest-set-vcpus" => guest_set_vcpus -> "int", since "1.5";
    GuestGetDisks = "guest-get-disks" => guest_get_disks -> "['GuestDiskInfo']", since "5.2";
    GuestGetFsinfo = "guest-get-fsinfo" => guest_get_fsinfo -> "['GuestFilesystemInfo']", since "2.2";
    GuestSetUserPassword(GuestSetUserPasswordArgs) = "guest-set-user-password" => guest_set_user_password -> "{}", since "2.3";
    GuestGetMemoryBlocks = "guest-get-memory-blocks" => guest_get_memory_blocks -> "['GuestMemoryBlock']", since "2.3";
    GuestSetMemoryBlocks(GuestSetMemoryBlocksArgs) = "guest-set-memory-blocks" => guest_set_memory_blocks -> "['GuestMemoryBlockResponse']", since "2.3";
    GuestGetMemoryBlockInfo = "guest-get-memory-block-info" => guest_get_memory_block_info -> "GuestMemoryBlockInfo", since "2.3";
    GuestExecStatus(GuestExecStatusArgs) = "guest-exec-status" => guest_exec_status -> "GuestExecStatus", since "2.5";
    GuestExec(GuestExecArgs) = "guest-exec" => guest_exec -> "GuestExec", since "2.5";
    GuestGetHostName = "guest-get-host-name" => guest_get_host_name -> "GuestHostName", since "2.10";
    GuestGetUsers = "guest-get-users" => guest_get_users -> "['GuestUser']", since "2.10";
    GuestGetTimezone = "guest-get-timezone" => guest_get_timezone -> "GuestTimezone", since "2.10";
    GuestGetOsinfo = "guest-get-osinfo" => guest_get_osinfo -> "GuestOSInfo", since "2.10";
    GuestGetDevices = "guest-get-devices" => guest_get_devices -> "['GuestDeviceInfo']", since "5.2", not_on_linux;
    GuestSshGetAuthorizedKeys(GuestSshGetAuthorizedKeysArgs) = "guest-ssh-get-authorized-keys" => guest_ssh_get_authorized_keys -> "GuestAuthorizedKeys", since "5.2";
    GuestSshAddAuthorizedKeys(GuestSshAddAuthorizedKeysArgs) = "guest-ssh-add-authorized-keys" => guest_ssh_add_authorized_keys -> "{}", since "5.2";
    GuestSshRemoveAuthorizedKeys(GuestSshRemoveAuthorizedKeysArgs) = "guest-ssh-remove-authorized-keys" => guest_ssh_remove_authorized_keys -> "{}", since "5.2";
    GuestGetDiskstats = "guest-get-diskstats" => guest_get_diskstats -> "['GuestDiskStatsInfo']", since "7.1";
    GuestGetCpustats = "guest-get-cpustats" => guest_get_cpustats -> "['GuestCpuStats']", since "7.1";
    GuestGetLoad = "guest-get-load" => guest_get_load -> "GuestLoadAverage", since "10.0";
    GuestNetworkGetRoute = "guest-network-get-route" => guest_network_get_route -> "['GuestNetworkRoute']", since "9.1";
    GuestlinkExecRead(GuestlinkExecReadArgs) = "guestlink-exec-read" => guestlink_exec_read -> "GuestlinkExecRead", since "guestlink";
    GuestlinkFileRename(GuestlinkFileRenameArgs) = "guestlink-file-rename" => guestlink_file_rename -> "{}", since "guestlink";
    GuestlinkFileSha256(GuestlinkFileSha256Args) = "guestlink-file-sha256" => guestlink_file_sha256 -> "GuestlinkFileSha256", since "guestlink";
}

/// Number of upstream qemu-ga commands in [`COMMANDS`] (the rest are `guestlink-*` extensions).
pub const QGA_COMMAND_COUNT: usize = 44;

/// Looks a command up by name.
pub fn find_command(name: &str) -> Option<&'static CommandSpec> {
    COMMANDS.iter().find(|c| c.name == name)
}

impl Command {
    /// The command's wire name.
    pub fn name(&self) -> &'static str {
        CommandSet::name(self)
    }

    /// Parses `execute` + `arguments` like QEMU's generated marshallers.
    ///
    /// Unknown names give `CommandNotFound` "The command X has not been found"; argument problems give
    /// qobject-input-visitor's texts ("Parameter 'foo' is unexpected", "Parameter 'id' is missing",
    /// "Invalid parameter type for 'id', expected: integer"). Absent arguments count as `{}`.
    pub fn parse(
        execute: &str,
        arguments: Option<&Map<String, Value>>,
    ) -> Result<Command, QgaError> {
        <Command as CommandSet>::parse(execute, arguments)
    }

    /// The schema entry of this command.
    pub fn spec(&self) -> &'static CommandSpec {
        // Every variant's name is in COMMANDS (checked by the `every_variant_has_a_spec` test); the fallback only
        // keeps this total.
        find_command(self.name()).unwrap_or(&COMMANDS[0])
    }

    /// Whether a reply is sent on success (false for guest-shutdown and guest-suspend-*).
    pub fn success_response(&self) -> bool {
        self.spec().success_response
    }
}

#[cfg(test)]
mod tests;
