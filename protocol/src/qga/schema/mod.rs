//! The typed QGA command schema: every command's arguments and returns, the command table, and [`Command::parse`].
//!
//! Mirrors `qga/qapi-schema.json` (≈ QEMU 10.x/11.0, 44 commands) plus guestlink's `guestlink-*` extensions.

pub mod args;
pub mod ghash;
pub mod storage;
pub mod types;
pub mod visit;

pub use args::*;
pub use storage::*;
pub use types::*;

use serde_json::{Map, Value};

use self::visit::{check_struct, Path};
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
}

const fn req(name: &'static str, ty: &'static str) -> ParamSpec {
    ParamSpec {
        name,
        ty,
        optional: false,
    }
}

const fn opt(name: &'static str, ty: &'static str) -> ParamSpec {
    ParamSpec {
        name,
        ty,
        optional: true,
    }
}

const fn cmd(
    name: &'static str,
    params: &'static [ParamSpec],
    returns: &'static str,
    since: &'static str,
    linux: bool,
) -> CommandSpec {
    CommandSpec {
        name,
        success_response: true,
        params,
        returns,
        since,
        linux,
    }
}

const fn no_resp(
    name: &'static str,
    params: &'static [ParamSpec],
    since: &'static str,
) -> CommandSpec {
    CommandSpec {
        name,
        success_response: false,
        params,
        returns: "{}",
        since,
        linux: true,
    }
}

/// Every command, in `qapi-schema.json` order, followed by the guestlink extensions.
pub const COMMANDS: &[CommandSpec] = &[
    cmd(
        "guest-sync-delimited",
        &[req("id", "int")],
        "int",
        "1.1",
        true,
    ),
    cmd("guest-sync", &[req("id", "int")], "int", "0.15", true),
    cmd("guest-ping", &[], "{}", "0.15", true),
    cmd("guest-get-time", &[], "int", "1.5", true),
    cmd("guest-set-time", &[opt("time", "int")], "{}", "1.5", true),
    cmd("guest-info", &[], "GuestAgentInfo", "0.15", true),
    no_resp("guest-shutdown", &[opt("mode", "str")], "0.15"),
    cmd(
        "guest-file-open",
        &[req("path", "str"), opt("mode", "str")],
        "int",
        "0.15",
        true,
    ),
    cmd(
        "guest-file-close",
        &[req("handle", "int")],
        "{}",
        "0.15",
        true,
    ),
    cmd(
        "guest-file-read",
        &[req("handle", "int"), opt("count", "int")],
        "GuestFileRead",
        "0.15",
        true,
    ),
    cmd(
        "guest-file-write",
        &[
            req("handle", "int"),
            req("buf-b64", "str"),
            opt("count", "int"),
        ],
        "GuestFileWrite",
        "0.15",
        true,
    ),
    cmd(
        "guest-file-seek",
        &[
            req("handle", "int"),
            req("offset", "int"),
            req("whence", "GuestFileWhence"),
        ],
        "GuestFileSeek",
        "0.15",
        true,
    ),
    cmd(
        "guest-file-flush",
        &[req("handle", "int")],
        "{}",
        "0.15",
        true,
    ),
    cmd(
        "guest-fsfreeze-status",
        &[],
        "GuestFsfreezeStatus",
        "0.15",
        true,
    ),
    cmd("guest-fsfreeze-freeze", &[], "int", "0.15", true),
    cmd(
        "guest-fsfreeze-freeze-list",
        &[opt("mountpoints", "['str']")],
        "int",
        "2.2",
        true,
    ),
    cmd("guest-fsfreeze-thaw", &[], "int", "0.15", true),
    cmd(
        "guest-fstrim",
        &[opt("minimum", "int")],
        "GuestFilesystemTrimResponse",
        "1.2",
        true,
    ),
    no_resp("guest-suspend-disk", &[], "1.1"),
    no_resp("guest-suspend-ram", &[], "1.1"),
    no_resp("guest-suspend-hybrid", &[], "1.1"),
    cmd(
        "guest-network-get-interfaces",
        &[],
        "['GuestNetworkInterface']",
        "1.1",
        true,
    ),
    cmd(
        "guest-get-vcpus",
        &[],
        "['GuestLogicalProcessor']",
        "1.5",
        true,
    ),
    cmd(
        "guest-set-vcpus",
        &[req("vcpus", "['GuestLogicalProcessor']")],
        "int",
        "1.5",
        true,
    ),
    cmd("guest-get-disks", &[], "['GuestDiskInfo']", "5.2", true),
    cmd(
        "guest-get-fsinfo",
        &[],
        "['GuestFilesystemInfo']",
        "2.2",
        true,
    ),
    cmd(
        "guest-set-user-password",
        &[
            req("username", "str"),
            req("password", "str"),
            req("crypted", "bool"),
        ],
        "{}",
        "2.3",
        true,
    ),
    cmd(
        "guest-get-memory-blocks",
        &[],
        "['GuestMemoryBlock']",
        "2.3",
        true,
    ),
    cmd(
        "guest-set-memory-blocks",
        &[req("mem-blks", "['GuestMemoryBlock']")],
        "['GuestMemoryBlockResponse']",
        "2.3",
        true,
    ),
    cmd(
        "guest-get-memory-block-info",
        &[],
        "GuestMemoryBlockInfo",
        "2.3",
        true,
    ),
    cmd(
        "guest-exec-status",
        &[req("pid", "int")],
        "GuestExecStatus",
        "2.5",
        true,
    ),
    cmd(
        "guest-exec",
        &[
            req("path", "str"),
            opt("arg", "['str']"),
            opt("env", "['str']"),
            opt("input-data", "str"),
            opt("capture-output", "GuestExecCaptureOutput"),
        ],
        "GuestExec",
        "2.5",
        true,
    ),
    cmd("guest-get-host-name", &[], "GuestHostName", "2.10", true),
    cmd("guest-get-users", &[], "['GuestUser']", "2.10", true),
    cmd("guest-get-timezone", &[], "GuestTimezone", "2.10", true),
    cmd("guest-get-osinfo", &[], "GuestOSInfo", "2.10", true),
    cmd(
        "guest-get-devices",
        &[],
        "['GuestDeviceInfo']",
        "5.2",
        false,
    ),
    cmd(
        "guest-ssh-get-authorized-keys",
        &[req("username", "str")],
        "GuestAuthorizedKeys",
        "5.2",
        true,
    ),
    cmd(
        "guest-ssh-add-authorized-keys",
        &[
            req("username", "str"),
            req("keys", "['str']"),
            opt("reset", "bool"),
        ],
        "{}",
        "5.2",
        true,
    ),
    cmd(
        "guest-ssh-remove-authorized-keys",
        &[req("username", "str"), req("keys", "['str']")],
        "{}",
        "5.2",
        true,
    ),
    cmd(
        "guest-get-diskstats",
        &[],
        "['GuestDiskStatsInfo']",
        "7.1",
        true,
    ),
    cmd("guest-get-cpustats", &[], "['GuestCpuStats']", "7.1", true),
    cmd("guest-get-load", &[], "GuestLoadAverage", "10.0", true),
    cmd(
        "guest-network-get-route",
        &[],
        "['GuestNetworkRoute']",
        "9.1",
        true,
    ),
    cmd(
        "guestlink-exec-read",
        &[
            req("pid", "int"),
            req("out-offset", "uint64"),
            req("err-offset", "uint64"),
            opt("wait-ms", "int"),
        ],
        "GuestlinkExecRead",
        "guestlink",
        true,
    ),
    cmd(
        "guestlink-file-rename",
        &[req("from", "str"), req("to", "str")],
        "{}",
        "guestlink",
        true,
    ),
    cmd(
        "guestlink-file-sha256",
        &[req("path", "str")],
        "GuestlinkFileSha256",
        "guestlink",
        true,
    ),
];

/// Number of upstream qemu-ga commands in [`COMMANDS`] (the rest are `guestlink-*` extensions).
pub const QGA_COMMAND_COUNT: usize = 44;

/// Looks a command up by name.
pub fn find_command(name: &str) -> Option<&'static CommandSpec> {
    COMMANDS.iter().find(|c| c.name == name)
}

macro_rules! commands {
    (
        unit { $($uvar:ident = $uname:literal),* $(,)? }
        args { $($avar:ident($aty:ty) = $aname:literal),* $(,)? }
    ) => {
        /// One parsed QGA command with typed arguments.
        #[derive(Debug, Clone, PartialEq)]
        pub enum Command {
            $(
                #[doc = concat!("`", $uname, "`")]
                $uvar,
            )*
            $(
                #[doc = concat!("`", $aname, "`")]
                $avar($aty),
            )*
        }

        impl Command {
            /// The command's wire name.
            pub fn name(&self) -> &'static str {
                match self {
                    $(Command::$uvar => $uname,)*
                    $(Command::$avar(_) => $aname,)*
                }
            }

            /// Parses `execute` + `arguments` like QEMU's generated marshallers.
            ///
            /// Unknown names give `CommandNotFound` "The command X has not been found"; argument problems give
            /// qobject-input-visitor's texts ("Parameter 'foo' is unexpected", "Parameter 'id' is missing",
            /// "Invalid parameter type for 'id', expected: integer"). Absent arguments count as `{}`.
            pub fn parse(execute: &str, arguments: Option<&Map<String, Value>>) -> Result<Command, QgaError> {
                let empty = Map::new();
                let obj = arguments.unwrap_or(&empty);
                let root = Path::Root;
                match execute {
                    $($uname => {
                        check_struct(obj, &[], &root)?;
                        Ok(Command::$uvar)
                    })*
                    $($aname => {
                        Ok(Command::$avar(<$aty>::from_qapi_map(obj, &root)?))
                    })*
                    _ => Err(QgaError::not_found(execute)),
                }
            }

            /// The arguments as a JSON object (`None` for commands without arguments), e.g. for a host encoder.
            pub fn arguments(&self) -> Option<Map<String, Value>> {
                match self {
                    $(Command::$uvar => None,)*
                    $(Command::$avar(a) => match serde_json::to_value(a) {
                        Ok(Value::Object(m)) => Some(m),
                        _ => Some(Map::new()),
                    },)*
                }
            }
        }
    };
}

commands! {
    unit {
        GuestPing = "guest-ping",
        GuestGetTime = "guest-get-time",
        GuestInfo = "guest-info",
        GuestFsfreezeStatus = "guest-fsfreeze-status",
        GuestFsfreezeFreeze = "guest-fsfreeze-freeze",
        GuestFsfreezeThaw = "guest-fsfreeze-thaw",
        GuestSuspendDisk = "guest-suspend-disk",
        GuestSuspendRam = "guest-suspend-ram",
        GuestSuspendHybrid = "guest-suspend-hybrid",
        GuestNetworkGetInterfaces = "guest-network-get-interfaces",
        GuestGetVcpus = "guest-get-vcpus",
        GuestGetDisks = "guest-get-disks",
        GuestGetFsinfo = "guest-get-fsinfo",
        GuestGetMemoryBlocks = "guest-get-memory-blocks",
        GuestGetMemoryBlockInfo = "guest-get-memory-block-info",
        GuestGetHostName = "guest-get-host-name",
        GuestGetUsers = "guest-get-users",
        GuestGetTimezone = "guest-get-timezone",
        GuestGetOsinfo = "guest-get-osinfo",
        GuestGetDevices = "guest-get-devices",
        GuestGetDiskstats = "guest-get-diskstats",
        GuestGetCpustats = "guest-get-cpustats",
        GuestGetLoad = "guest-get-load",
        GuestNetworkGetRoute = "guest-network-get-route",
    }
    args {
        GuestSyncDelimited(GuestSyncArgs) = "guest-sync-delimited",
        GuestSync(GuestSyncArgs) = "guest-sync",
        GuestSetTime(GuestSetTimeArgs) = "guest-set-time",
        GuestShutdown(GuestShutdownArgs) = "guest-shutdown",
        GuestFileOpen(GuestFileOpenArgs) = "guest-file-open",
        GuestFileClose(GuestFileHandleArgs) = "guest-file-close",
        GuestFileRead(GuestFileReadArgs) = "guest-file-read",
        GuestFileWrite(GuestFileWriteArgs) = "guest-file-write",
        GuestFileSeek(GuestFileSeekArgs) = "guest-file-seek",
        GuestFileFlush(GuestFileHandleArgs) = "guest-file-flush",
        GuestFsfreezeFreezeList(GuestFsfreezeFreezeListArgs) = "guest-fsfreeze-freeze-list",
        GuestFstrim(GuestFstrimArgs) = "guest-fstrim",
        GuestSetVcpus(GuestSetVcpusArgs) = "guest-set-vcpus",
        GuestSetUserPassword(GuestSetUserPasswordArgs) = "guest-set-user-password",
        GuestSetMemoryBlocks(GuestSetMemoryBlocksArgs) = "guest-set-memory-blocks",
        GuestExecStatus(GuestExecStatusArgs) = "guest-exec-status",
        GuestExec(GuestExecArgs) = "guest-exec",
        GuestSshGetAuthorizedKeys(GuestSshGetAuthorizedKeysArgs) = "guest-ssh-get-authorized-keys",
        GuestSshAddAuthorizedKeys(GuestSshAddAuthorizedKeysArgs) = "guest-ssh-add-authorized-keys",
        GuestSshRemoveAuthorizedKeys(GuestSshRemoveAuthorizedKeysArgs) = "guest-ssh-remove-authorized-keys",
        GuestlinkExecRead(GuestlinkExecReadArgs) = "guestlink-exec-read",
        GuestlinkFileRename(GuestlinkFileRenameArgs) = "guestlink-file-rename",
        GuestlinkFileSha256(GuestlinkFileSha256Args) = "guestlink-file-sha256",
    }
}

impl Command {
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
