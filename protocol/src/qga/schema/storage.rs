//! Storage-related QGA types: disks, filesystems, trim results and disk statistics.
//!
//! Rust names follow Rust casing (`GuestPciAddress` for QAPI `GuestPCIAddress`, `GuestNvmeSmart` for
//! `GuestNVMeSmart`); optional members are `Option` and are omitted from the JSON when `None`.

use serde::{Deserialize, Serialize};

use super::visit::qapi_enum_visit;

/// One path of `guest-fstrim`'s result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct GuestFilesystemTrimResult {
    /// The mountpoint.
    pub path: String,
    /// Bytes trimmed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trimmed: Option<i64>,
    /// Effective minimum.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub minimum: Option<i64>,
    /// Error text if the trim failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Return of `guest-fstrim`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct GuestFilesystemTrimResponse {
    /// Per-path results.
    pub paths: Vec<GuestFilesystemTrimResult>,
}

/// QAPI `GuestDiskBusType`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum GuestDiskBusType {
    /// IDE.
    Ide,
    /// Floppy.
    Fdc,
    /// SCSI.
    Scsi,
    /// virtio.
    Virtio,
    /// Xen.
    Xen,
    /// USB.
    Usb,
    /// UML.
    Uml,
    /// SATA.
    Sata,
    /// SD card.
    Sd,
    /// Unknown.
    Unknown,
    /// Windows IEEE 1394.
    Ieee1394,
    /// Windows SSA.
    Ssa,
    /// Windows fibre channel.
    Fibre,
    /// Windows RAID.
    Raid,
    /// Windows iSCSI.
    Iscsi,
    /// Windows SAS.
    Sas,
    /// Windows MMC.
    Mmc,
    /// Windows virtual.
    Virtual,
    /// Windows file-backed virtual.
    FileBackedVirtual,
    /// NVMe (since 7.1).
    Nvme,
}
qapi_enum_visit!(GuestDiskBusType {
    Ide = "ide",
    Fdc = "fdc",
    Scsi = "scsi",
    Virtio = "virtio",
    Xen = "xen",
    Usb = "usb",
    Uml = "uml",
    Sata = "sata",
    Sd = "sd",
    Unknown = "unknown",
    Ieee1394 = "ieee1394",
    Ssa = "ssa",
    Fibre = "fibre",
    Raid = "raid",
    Iscsi = "iscsi",
    Sas = "sas",
    Mmc = "mmc",
    Virtual = "virtual",
    FileBackedVirtual = "file-backed-virtual",
    Nvme = "nvme",
});

/// QAPI `GuestPCIAddress` (members are -1 when unknown).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct GuestPciAddress {
    /// PCI domain.
    pub domain: i64,
    /// Bus.
    pub bus: i64,
    /// Slot.
    pub slot: i64,
    /// Function.
    pub function: i64,
}

/// QAPI `GuestCCWAddress` (s390x).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct GuestCcwAddress {
    /// Channel subsystem image id.
    pub cssid: i64,
    /// Subchannel set id.
    pub ssid: i64,
    /// Subchannel number.
    pub subchno: i64,
    /// Device number.
    pub devno: i64,
}

/// QAPI `GuestDiskAddress`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct GuestDiskAddress {
    /// Controller PCI address.
    pub pci_controller: GuestPciAddress,
    /// Bus type.
    pub bus_type: GuestDiskBusType,
    /// Bus id.
    pub bus: i64,
    /// Target id.
    pub target: i64,
    /// Unit id.
    pub unit: i64,
    /// Serial number.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serial: Option<String>,
    /// Device node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dev: Option<String>,
    /// CCW address (s390x).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ccw_address: Option<GuestCcwAddress>,
}

/// QAPI `GuestNVMeSmart`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[allow(missing_docs)]
pub struct GuestNvmeSmart {
    pub critical_warning: i64,
    pub temperature: i64,
    pub available_spare: i64,
    pub available_spare_threshold: i64,
    pub percentage_used: i64,
    pub data_units_read_lo: u64,
    pub data_units_read_hi: u64,
    pub data_units_written_lo: u64,
    pub data_units_written_hi: u64,
    pub host_read_commands_lo: u64,
    pub host_read_commands_hi: u64,
    pub host_write_commands_lo: u64,
    pub host_write_commands_hi: u64,
    pub controller_busy_time_lo: u64,
    pub controller_busy_time_hi: u64,
    pub power_cycles_lo: u64,
    pub power_cycles_hi: u64,
    pub power_on_hours_lo: u64,
    pub power_on_hours_hi: u64,
    pub unsafe_shutdowns_lo: u64,
    pub unsafe_shutdowns_hi: u64,
    pub media_errors_lo: u64,
    pub media_errors_hi: u64,
    pub number_of_error_log_entries_lo: u64,
    pub number_of_error_log_entries_hi: u64,
}

/// QAPI union `GuestDiskSmart`, discriminated by `type` (a [`GuestDiskBusType`]); only `nvme` has members.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
#[allow(missing_docs)]
pub enum GuestDiskSmart {
    Ide,
    Fdc,
    Scsi,
    Virtio,
    Xen,
    Usb,
    Uml,
    Sata,
    Sd,
    Unknown,
    Ieee1394,
    Ssa,
    Fibre,
    Raid,
    Iscsi,
    Sas,
    Mmc,
    Virtual,
    FileBackedVirtual,
    Nvme(GuestNvmeSmart),
}

/// One entry of `guest-get-disks`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct GuestDiskInfo {
    /// Device node.
    pub name: String,
    /// Partition or whole disk.
    pub partition: bool,
    /// Devices this one depends on (e.g. PVs of an LV).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dependencies: Option<Vec<String>>,
    /// Hardware address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<GuestDiskAddress>,
    /// Device-mapper name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alias: Option<String>,
    /// SMART data.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub smart: Option<GuestDiskSmart>,
}

/// One entry of `guest-get-fsinfo`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct GuestFilesystemInfo {
    /// Disk name (e.g. "vda1" or "dm-0").
    pub name: String,
    /// Mount point.
    pub mountpoint: String,
    /// Filesystem type.
    #[serde(rename = "type")]
    pub fs_type: String,
    /// Used bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub used_bytes: Option<u64>,
    /// Capacity for unprivileged users.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_bytes: Option<u64>,
    /// Capacity for privileged users (since 9.1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_bytes_privileged: Option<u64>,
    /// Disks the filesystem lies on.
    pub disk: Vec<GuestDiskAddress>,
}

/// QAPI `GuestDiskStats`: counters from /proc/diskstats.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[allow(missing_docs)]
pub struct GuestDiskStats {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_sectors: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_ios: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_merges: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub write_sectors: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub write_ios: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub write_merges: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub discard_sectors: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub discard_ios: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub discard_merges: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flush_ios: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_ticks: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub write_ticks: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub discard_ticks: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flush_ticks: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ios_pgr: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_ticks: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight_ticks: Option<u64>,
}

/// One entry of `guest-get-diskstats`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct GuestDiskStatsInfo {
    /// Disk name.
    pub name: String,
    /// Major number.
    pub major: u64,
    /// Minor number.
    pub minor: u64,
    /// Counters.
    pub stats: GuestDiskStats,
}
