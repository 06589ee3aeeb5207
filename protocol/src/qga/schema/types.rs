//! Return types (and shared structs/enums) of the QGA commands, with the exact QAPI member names.
//!
//! Rust names follow Rust casing (`GuestPciAddress` for QAPI `GuestPCIAddress`, `GuestOsInfo` for `GuestOSInfo`).
//! Optional members are `Option` and are omitted from the JSON when `None`.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::visit::{qapi_enum_visit, qapi_struct_visit, FromQapi, Path};
use crate::qga::error::QgaError;

/// One entry of `guest-info`'s `supported_commands`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct GuestAgentCommandInfo {
    /// Command name.
    pub name: String,
    /// Whether the command is currently enabled.
    pub enabled: bool,
    /// Whether the command sends a reply on success.
    pub success_response: bool,
}

/// Return of `guest-info`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GuestAgentInfo {
    /// Agent version (plain QEMU-style version, e.g. "7.2.22").
    pub version: String,
    /// All commands (qemu-ga lists them in reverse registration order).
    pub supported_commands: Vec<GuestAgentCommandInfo>,
}

/// Return of `guest-file-read`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct GuestFileRead {
    /// Bytes read (before base64).
    pub count: i64,
    /// The bytes, base64-encoded ("" at EOF).
    pub buf_b64: String,
    /// Whether EOF was hit.
    pub eof: bool,
}

/// Return of `guest-file-write`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct GuestFileWrite {
    /// Bytes written.
    pub count: i64,
    /// Whether EOF was hit.
    pub eof: bool,
}

/// Return of `guest-file-seek`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct GuestFileSeek {
    /// Position after the seek.
    pub position: i64,
    /// Whether EOF is set.
    pub eof: bool,
}

/// QAPI `QGASeek`: symbolic whence names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum QgaSeek {
    /// SEEK_SET (0).
    Set,
    /// SEEK_CUR (1).
    Cur,
    /// SEEK_END (2).
    End,
}
qapi_enum_visit!(QgaSeek { Set = "set", Cur = "cur", End = "end" });

/// Return of `guest-fsfreeze-status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum GuestFsfreezeStatus {
    /// Filesystems are not frozen.
    Thawed,
    /// Filesystems are frozen.
    Frozen,
}
qapi_enum_visit!(GuestFsfreezeStatus { Thawed = "thawed", Frozen = "frozen" });

/// QAPI `GuestIpAddressType`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum GuestIpAddressType {
    /// IPv4.
    Ipv4,
    /// IPv6.
    Ipv6,
}
qapi_enum_visit!(GuestIpAddressType { Ipv4 = "ipv4", Ipv6 = "ipv6" });

/// QAPI `GuestIpAddress`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct GuestIpAddress {
    /// The address.
    pub ip_address: String,
    /// Its family.
    pub ip_address_type: GuestIpAddressType,
    /// Prefix length.
    pub prefix: i64,
}

/// QAPI `GuestNetworkInterfaceStat`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct GuestNetworkInterfaceStat {
    /// Bytes received.
    pub rx_bytes: u64,
    /// Packets received.
    pub rx_packets: u64,
    /// Receive errors.
    pub rx_errs: u64,
    /// Receive drops.
    pub rx_dropped: u64,
    /// Bytes sent.
    pub tx_bytes: u64,
    /// Packets sent.
    pub tx_packets: u64,
    /// Transmit errors.
    pub tx_errs: u64,
    /// Transmit drops.
    pub tx_dropped: u64,
}

/// One entry of `guest-network-get-interfaces`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct GuestNetworkInterface {
    /// Interface name.
    pub name: String,
    /// MAC address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hardware_address: Option<String>,
    /// Addresses.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ip_addresses: Option<Vec<GuestIpAddress>>,
    /// Counters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub statistics: Option<GuestNetworkInterfaceStat>,
}

/// QAPI `GuestLogicalProcessor` (returned by `guest-get-vcpus`, argument of `guest-set-vcpus`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct GuestLogicalProcessor {
    /// CPU id.
    pub logical_id: i64,
    /// Whether it is online.
    pub online: bool,
    /// Whether it can be offlined (ignored on input).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub can_offline: Option<bool>,
}
qapi_struct_visit!(GuestLogicalProcessor {
    logical_id: "logical-id",
    online: "online",
    can_offline: "can-offline"
});

/// QAPI `GuestMemoryBlock` (returned by `guest-get-memory-blocks`, argument of `guest-set-memory-blocks`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct GuestMemoryBlock {
    /// Block index.
    pub phys_index: u64,
    /// Whether it is online.
    pub online: bool,
    /// Whether it can be offlined (ignored on input).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub can_offline: Option<bool>,
}
qapi_struct_visit!(GuestMemoryBlock {
    phys_index: "phys-index",
    online: "online",
    can_offline: "can-offline"
});

/// QAPI `GuestMemoryBlockResponseType`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum GuestMemoryBlockResponseType {
    /// Done.
    Success,
    /// No such block in sysfs.
    NotFound,
    /// The kernel can't do it.
    OperationNotSupported,
    /// The operation failed (see `error-code`).
    OperationFailed,
}
qapi_enum_visit!(GuestMemoryBlockResponseType {
    Success = "success",
    NotFound = "not-found",
    OperationNotSupported = "operation-not-supported",
    OperationFailed = "operation-failed",
});

/// One entry of `guest-set-memory-blocks`' result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct GuestMemoryBlockResponse {
    /// Block index.
    pub phys_index: u64,
    /// Outcome.
    pub response: GuestMemoryBlockResponseType,
    /// errno on failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_code: Option<i64>,
}

/// Return of `guest-get-memory-block-info`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct GuestMemoryBlockInfo {
    /// Block size in bytes.
    pub size: u64,
}

/// Return of `guest-exec-status`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct GuestExecStatus {
    /// Whether the process was reaped and its pipes hit EOF.
    pub exited: bool,
    /// Exit code when it exited normally.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exitcode: Option<i64>,
    /// Signal number when it was killed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<i64>,
    /// Captured stdout, base64.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub out_data: Option<String>,
    /// Captured stderr, base64.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub err_data: Option<String>,
    /// Stdout exceeded the capture limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub out_truncated: Option<bool>,
    /// Stderr exceeded the capture limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub err_truncated: Option<bool>,
}

/// Return of `guest-exec`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct GuestExec {
    /// Pid of the child.
    pub pid: i64,
}

/// QAPI `GuestExecCaptureOutputMode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum GuestExecCaptureOutputMode {
    /// Capture nothing.
    None,
    /// Capture stdout only.
    Stdout,
    /// Capture stderr only.
    Stderr,
    /// Capture both, separately.
    Separated,
    /// Capture both into out-data.
    Merged,
}
qapi_enum_visit!(GuestExecCaptureOutputMode {
    None = "none",
    Stdout = "stdout",
    Stderr = "stderr",
    Separated = "separated",
    Merged = "merged",
});

/// QAPI alternate `GuestExecCaptureOutput`: a boolean flag (true = separated) or a mode name (since 8.0).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum GuestExecCaptureOutput {
    /// Legacy flag.
    Flag(bool),
    /// Mode name.
    Mode(GuestExecCaptureOutputMode),
}

impl FromQapi for GuestExecCaptureOutput {
    fn from_qapi(value: &Value, path: &Path<'_>) -> Result<Self, QgaError> {
        match value {
            Value::Bool(b) => Ok(GuestExecCaptureOutput::Flag(*b)),
            Value::String(_) => {
                GuestExecCaptureOutputMode::from_qapi(value, path).map(GuestExecCaptureOutput::Mode)
            }
            _ => Err(QgaError::param_type(
                &path.last_name(),
                "GuestExecCaptureOutput",
            )),
        }
    }
}

/// Return of `guest-get-host-name`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct GuestHostName {
    /// The host name.
    pub host_name: String,
}

/// One entry of `guest-get-users`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct GuestUser {
    /// User name.
    pub user: String,
    /// Earliest login, fractional seconds since the epoch.
    pub login_time: f64,
    /// Logon domain (Windows).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub domain: Option<String>,
}

/// Return of `guest-get-timezone`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct GuestTimezone {
    /// Zone abbreviation (e.g. "UTC").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zone: Option<String>,
    /// Offset to UTC in seconds (east positive).
    pub offset: i64,
}

/// Return of `guest-get-osinfo` (QAPI `GuestOSInfo`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct GuestOsInfo {
    /// uname release.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel_release: Option<String>,
    /// uname version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel_version: Option<String>,
    /// uname machine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine: Option<String>,
    /// os-release ID.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// os-release NAME.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// os-release PRETTY_NAME.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pretty_name: Option<String>,
    /// os-release VERSION.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// os-release VERSION_ID.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version_id: Option<String>,
    /// os-release VARIANT.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variant: Option<String>,
    /// os-release VARIANT_ID.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variant_id: Option<String>,
}

/// QAPI `GuestDeviceIdPCI` (Windows only).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct GuestDeviceIdPci {
    /// Vendor id.
    pub vendor_id: u16,
    /// Device id.
    pub device_id: u16,
}

/// QAPI union `GuestDeviceId` (Windows only).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum GuestDeviceId {
    /// A PCI device.
    Pci(GuestDeviceIdPci),
}

/// One entry of `guest-get-devices` (Windows only).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct GuestDeviceInfo {
    /// Driver name.
    pub driver_name: String,
    /// Driver date, ns since the epoch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub driver_date: Option<i64>,
    /// Driver version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub driver_version: Option<String>,
    /// Device id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<GuestDeviceId>,
}

/// Return of `guest-ssh-get-authorized-keys`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct GuestAuthorizedKeys {
    /// The keys.
    pub keys: Vec<String>,
}

/// QAPI `GuestLinuxCpuStats` (milliseconds).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[allow(missing_docs)]
pub struct GuestLinuxCpuStats {
    pub cpu: i64,
    pub user: u64,
    pub nice: u64,
    pub system: u64,
    pub idle: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iowait: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub irq: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub softirq: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steal: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guest: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guestnice: Option<u64>,
}

/// QAPI union `GuestCpuStats`, discriminated by `type` (only `linux`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum GuestCpuStats {
    /// Linux /proc/stat counters.
    Linux(GuestLinuxCpuStats),
}

/// Return of `guest-get-load`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct GuestLoadAverage {
    /// 1-minute load average.
    pub load1m: f64,
    /// 5-minute load average.
    pub load5m: f64,
    /// 15-minute load average.
    pub load15m: f64,
}

/// One entry of `guest-network-get-route`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[allow(missing_docs)]
pub struct GuestNetworkRoute {
    pub iface: String,
    pub destination: String,
    pub metric: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mask: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub irtt: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flags: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refcnt: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub r#use: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mtu: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub desprefixlen: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub srcprefixlen: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nexthop: Option<String>,
    pub version: i64,
}

/// Return of the extension `guestlink-exec-read`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct GuestlinkExecRead {
    /// Whether the process was reaped and its pipes hit EOF.
    pub exited: bool,
    /// Exit code when it exited normally.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exitcode: Option<i64>,
    /// Signal number when it was killed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<i64>,
    /// Stdout from `out-offset` (request) on, base64.
    pub out_data: String,
    /// Stderr from `err-offset` (request) on, base64.
    pub err_data: String,
    /// Stdout offset after this data (the next request's `out-offset`).
    pub out_offset: u64,
    /// Stderr offset after this data.
    pub err_offset: u64,
    /// Stdout output was dropped because the buffer limit was hit.
    pub out_truncated: bool,
    /// Stderr output was dropped because the buffer limit was hit.
    pub err_truncated: bool,
}

/// Return of the extension `guestlink-file-sha256`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct GuestlinkFileSha256 {
    /// Lower-case hex SHA-256.
    pub sha256: String,
    /// File size in bytes.
    pub size: u64,
}
