//! Argument types of every QGA command (the QAPI `data` members), with QEMU's input checks.
//!
//! Field names serialize to the exact QAPI member names; optional members are `Option` and are left out when
//! `None`. Reading from a request goes through [`FromQapi`](super::visit::FromQapi) so errors match qemu-ga.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::types::{
    GuestExecCaptureOutput, GuestExecCaptureOutputMode, GuestLogicalProcessor, GuestMemoryBlock,
    QgaSeek,
};
use super::visit::{qapi_args, FromQapi, Path};
use crate::qga::error::QgaError;

/// Arguments of `guest-sync` and `guest-sync-delimited`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct GuestSyncArgs {
    /// The value to echo back.
    pub id: i64,
}
qapi_args!(GuestSyncArgs {
    id: "id" req "int"
});

/// Arguments of `guest-set-time`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct GuestSetTimeArgs {
    /// Nanoseconds since the epoch (UTC); absent means "set the system clock from the RTC".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time: Option<i64>,
}
qapi_args!(GuestSetTimeArgs {
    time: "time" opt "int"
});

/// Arguments of `guest-shutdown`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct GuestShutdownArgs {
    /// "powerdown" (default), "halt" or "reboot" (a plain string in the schema, checked by the command).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
}
qapi_args!(GuestShutdownArgs {
    mode: "mode" opt "str"
});

/// Arguments of `guest-file-open`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct GuestFileOpenArgs {
    /// Path of the file in the guest.
    pub path: String,
    /// fopen() mode, default "r".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
}
qapi_args!(GuestFileOpenArgs {
    path: "path" req "str",
    mode: "mode" opt "str"
});

/// Arguments of `guest-file-close` and `guest-file-flush`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct GuestFileHandleArgs {
    /// Handle returned by `guest-file-open`.
    pub handle: i64,
}
qapi_args!(GuestFileHandleArgs {
    handle: "handle" req "int"
});

/// Arguments of `guest-file-read`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct GuestFileReadArgs {
    /// Handle returned by `guest-file-open`.
    pub handle: i64,
    /// Maximum bytes to read (default 4096, at most 48 MiB).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<i64>,
}
qapi_args!(GuestFileReadArgs {
    handle: "handle" req "int",
    count: "count" opt "int"
});

/// Arguments of `guest-file-write`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct GuestFileWriteArgs {
    /// Handle returned by `guest-file-open`.
    pub handle: i64,
    /// The data, base64-encoded.
    pub buf_b64: String,
    /// Bytes to write (≤ decoded length); default all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<i64>,
}
qapi_args!(GuestFileWriteArgs {
    handle: "handle" req "int",
    buf_b64: "buf-b64" req "str",
    count: "count" opt "int"
});

/// `GuestFileWhence`: an alternate of an integer (0/1/2) or a [`QgaSeek`] name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum GuestFileWhence {
    /// Numeric code: 0 = set, 1 = cur, 2 = end (anything else is rejected by the command).
    Value(i64),
    /// Symbolic name.
    Name(QgaSeek),
}

impl FromQapi for GuestFileWhence {
    fn from_qapi(value: &Value, path: &Path<'_>) -> Result<Self, QgaError> {
        match value {
            Value::Number(_) => i64::from_qapi(value, path).map(GuestFileWhence::Value),
            Value::String(_) => QgaSeek::from_qapi(value, path).map(GuestFileWhence::Name),
            _ => Err(QgaError::param_type(&path.last_name(), "GuestFileWhence")),
        }
    }
}

/// Arguments of `guest-file-seek`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct GuestFileSeekArgs {
    /// Handle returned by `guest-file-open`.
    pub handle: i64,
    /// Offset in bytes.
    pub offset: i64,
    /// Where the offset counts from.
    pub whence: GuestFileWhence,
}
qapi_args!(GuestFileSeekArgs {
    handle: "handle" req "int",
    offset: "offset" req "int",
    whence: "whence" req "GuestFileWhence"
});

/// Arguments of `guest-fsfreeze-freeze-list`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct GuestFsfreezeFreezeListArgs {
    /// Mountpoints to freeze; absent = all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mountpoints: Option<Vec<String>>,
}
qapi_args!(GuestFsfreezeFreezeListArgs {
    mountpoints: "mountpoints" opt "['str']"
});

/// Arguments of `guest-fstrim`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct GuestFstrimArgs {
    /// Minimum contiguous free range to discard, in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub minimum: Option<i64>,
}
qapi_args!(GuestFstrimArgs {
    minimum: "minimum" opt "int"
});

/// Arguments of `guest-set-vcpus`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct GuestSetVcpusArgs {
    /// The processors to reconfigure, in order.
    pub vcpus: Vec<GuestLogicalProcessor>,
}
qapi_args!(GuestSetVcpusArgs {
    vcpus: "vcpus" req "['GuestLogicalProcessor']"
});

/// Arguments of `guest-set-user-password`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct GuestSetUserPasswordArgs {
    /// The account.
    pub username: String,
    /// The password (or crypt() hash), base64-encoded.
    pub password: String,
    /// Whether `password` is already crypt()ed.
    pub crypted: bool,
}
qapi_args!(GuestSetUserPasswordArgs {
    username: "username" req "str",
    password: "password" req "str",
    crypted: "crypted" req "bool"
});

/// Arguments of `guest-set-memory-blocks`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct GuestSetMemoryBlocksArgs {
    /// The memory blocks to reconfigure, in order.
    pub mem_blks: Vec<GuestMemoryBlock>,
}
qapi_args!(GuestSetMemoryBlocksArgs {
    mem_blks: "mem-blks" req "['GuestMemoryBlock']"
});

/// Arguments of `guest-exec`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct GuestExecArgs {
    /// Program path or name (searched in PATH).
    pub path: String,
    /// argv[1..].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arg: Option<Vec<String>>,
    /// The complete environment (`NAME=value`), if given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env: Option<Vec<String>>,
    /// Base64 data written to the child's stdin.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_data: Option<String>,
    /// What output to capture (default: none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capture_output: Option<GuestExecCaptureOutput>,
}
qapi_args!(GuestExecArgs {
    path: "path" req "str",
    arg: "arg" opt "['str']",
    env: "env" opt "['str']",
    input_data: "input-data" opt "str",
    capture_output: "capture-output" opt "GuestExecCaptureOutput"
});

impl GuestExecArgs {
    /// The effective capture mode: absent = none, `true` = separated, `false` = none.
    pub fn capture_mode(&self) -> GuestExecCaptureOutputMode {
        match self.capture_output {
            None | Some(GuestExecCaptureOutput::Flag(false)) => GuestExecCaptureOutputMode::None,
            Some(GuestExecCaptureOutput::Flag(true)) => GuestExecCaptureOutputMode::Separated,
            Some(GuestExecCaptureOutput::Mode(m)) => m,
        }
    }
}

/// Arguments of `guest-exec-status`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct GuestExecStatusArgs {
    /// Pid returned by `guest-exec`.
    pub pid: i64,
}
qapi_args!(GuestExecStatusArgs {
    pid: "pid" req "int"
});

/// Arguments of `guest-ssh-get-authorized-keys`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct GuestSshGetAuthorizedKeysArgs {
    /// The account.
    pub username: String,
}
qapi_args!(GuestSshGetAuthorizedKeysArgs {
    username: "username" req "str"
});

/// Arguments of `guest-ssh-add-authorized-keys`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct GuestSshAddAuthorizedKeysArgs {
    /// The account.
    pub username: String,
    /// Keys in authorized_keys format.
    pub keys: Vec<String>,
    /// Replace the existing keys instead of appending.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reset: Option<bool>,
}
qapi_args!(GuestSshAddAuthorizedKeysArgs {
    username: "username" req "str",
    keys: "keys" req "['str']",
    reset: "reset" opt "bool"
});

/// Arguments of `guest-ssh-remove-authorized-keys`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct GuestSshRemoveAuthorizedKeysArgs {
    /// The account.
    pub username: String,
    /// Keys to remove (missing keys are not an error).
    pub keys: Vec<String>,
}
qapi_args!(GuestSshRemoveAuthorizedKeysArgs {
    username: "username" req "str",
    keys: "keys" req "['str']"
});

/// Largest `wait-ms` accepted by `guestlink-exec-read`.
pub const GUESTLINK_EXEC_READ_MAX_WAIT_MS: i64 = 5000;

/// Arguments of the extension `guestlink-exec-read`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct GuestlinkExecReadArgs {
    /// Pid returned by `guest-exec`.
    pub pid: i64,
    /// Stdout bytes already consumed by the host.
    pub out_offset: u64,
    /// Stderr bytes already consumed by the host.
    pub err_offset: u64,
    /// Wait up to this long (≤ [`GUESTLINK_EXEC_READ_MAX_WAIT_MS`]) for new output or exit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_ms: Option<i64>,
}
qapi_args!(GuestlinkExecReadArgs {
    pid: "pid" req "int",
    out_offset: "out-offset" req "uint64",
    err_offset: "err-offset" req "uint64",
    wait_ms: "wait-ms" opt "int"
});

/// Arguments of the extension `guestlink-file-rename`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct GuestlinkFileRenameArgs {
    /// Existing path.
    pub from: String,
    /// New path (replaced atomically if it exists).
    pub to: String,
}
qapi_args!(GuestlinkFileRenameArgs {
    from: "from" req "str",
    to: "to" req "str"
});

/// Arguments of the extension `guestlink-file-sha256`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct GuestlinkFileSha256Args {
    /// File to hash.
    pub path: String,
}
qapi_args!(GuestlinkFileSha256Args {
    path: "path" req "str"
});
