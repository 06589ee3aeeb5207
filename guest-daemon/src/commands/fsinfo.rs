//! guest-get-fsinfo: the block-backed mounts of /proc/self/mountinfo (qemu-ga's `build_fs_mount_list`), statvfs
//! sizes, and disk addresses from /sys/dev/block (PCI virtio-blk / virtio-scsi / IDE / SATA / NVMe / USB, CCW,
//! device-mapper slaves). udev properties (devnode, ID_SERIAL) come from sysfs uevent files and the udev database
//! instead of libudev. The list is in reverse mount order, like qemu-ga.

use std::path::{Path, PathBuf};

use serde_json::{json, Map, Value};

use super::error::{CommandError, CommandResult};

use crate::freeze::mounts::Mount;

/// Parses mountinfo text into the list qemu-ga freezes/trims/reports: block devices (major ≠ 0, or btrfs whose
/// source is a block device, see [`crate::freeze::mounts`]), one entry per mountinfo line. Like qemu-ga's
/// `build_fs_mount_list` (qga/commands-linux.c), nothing is deduplicated: a bind mount, or a second mount of the
/// same device, is listed (and trimmed) under each of its mountpoints.
pub fn parse_mountinfo(text: &str) -> Vec<Mount> {
    crate::freeze::mounts::parse_mountinfo(text, &crate::freeze::mounts::block_dev_of)
}

/// The mount list of this process.
pub fn mount_list(proc_root: &Path) -> CommandResult<Vec<Mount>> {
    let p = proc_root.join("self/mountinfo");
    let text = std::fs::read_to_string(&p)
        .map_err(|_| CommandError::generic("failed to open mtab file: '/proc/self/mounts'"))?;
    Ok(parse_mountinfo(&text))
}

/// `KEY=value` from a sysfs uevent file.
fn uevent(syspath: &Path, key: &str) -> Option<String> {
    let text = std::fs::read_to_string(syspath.join("uevent")).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix('='))
        .map(str::to_owned)
}

/// libudev's devnode: `/dev/` + DEVNAME.
pub fn devnode(syspath: &Path) -> Option<String> {
    uevent(syspath, "DEVNAME").map(|n| format!("/dev/{n}"))
}

/// A property from the udev database (`/run/udev/data/b<maj>:<min>`, lines `E:KEY=value`).
pub fn udev_property(syspath: &Path, key: &str) -> Option<String> {
    let dev = std::fs::read_to_string(syspath.join("dev")).ok()?;
    let db = std::fs::read_to_string(format!("/run/udev/data/b{}", dev.trim())).ok()?;
    db.lines()
        .find_map(|l| l.strip_prefix("E:")?.strip_prefix(key)?.strip_prefix('='))
        .filter(|v| !v.is_empty())
        .map(str::to_owned)
}

/// sscanf-like: leading `%x` fields separated by the given literal characters; returns values and bytes used.
fn scan_hex(s: &str, seps: &[char]) -> Option<(Vec<u32>, usize)> {
    let mut vals = Vec::new();
    let mut pos = 0;
    for (i, sep) in std::iter::once(None)
        .chain(seps.iter().map(Some))
        .enumerate()
    {
        if let Some(c) = sep {
            if !s[pos..].starts_with(*c) {
                return None;
            }
            pos += c.len_utf8();
        }
        let digits = s[pos..].chars().take_while(char::is_ascii_hexdigit).count();
        if digits == 0 {
            return None;
        }
        vals.push(u32::from_str_radix(&s[pos..pos + digits], 16).ok()?);
        pos += digits;
        let _ = i;
    }
    Some((vals, pos))
}

fn scan_dec(s: &str) -> Option<u32> {
    let d: String = s.chars().take_while(char::is_ascii_digit).collect();
    d.parse().ok()
}

/// The `h:c:t:l` numbers after "/target" → (channel, target, lun).
fn scsi_target(syspath: &str) -> Option<[u32; 3]> {
    let p = syspath.find("/target")?;
    let rest = &syspath[p + 7..];
    let slash = rest.find('/')?;
    let hctl: Vec<u32> = rest[slash + 1..]
        .split(['/', ':'])
        .take(4)
        .map(|s| s.parse().ok())
        .collect::<Option<Vec<u32>>>()?;
    (hctl.len() == 4).then(|| [hctl[1], hctl[2], hctl[3]])
}

fn host_index(syspath: &str) -> Option<(u32, usize, bool)> {
    let (p, off, ata) = match syspath.find("/ata") {
        Some(p) => (p, 4, true),
        None => (syspath.find("/host")?, 5, false),
    };
    Some((scan_dec(&syspath[p + off..])?, p, ata))
}

fn sibling_hosts(dir: &Path, ata: bool) -> Vec<u32> {
    let prefix = if ata { "ata" } else { "host" };
    let mut v: Vec<u32> = std::fs::read_dir(dir)
        .map(|it| {
            it.flatten()
                .filter_map(|e| scan_dec(e.file_name().to_str()?.strip_prefix(prefix)?))
                .take(8)
                .collect()
        })
        .unwrap_or_default();
    v.sort_unstable();
    v
}

/// Fills `addr` for a PCI device path; false if the controller is not recognised.
fn pci_address(syspath: &str, addr: &mut Map<String, Value>) -> bool {
    const DRIVERS: [&str; 7] = [
        "ata_piix",
        "sym53c8xx",
        "virtio-pci",
        "ahci",
        "nvme",
        "xhci_hcd",
        "ehci-pci",
    ];
    let Some(p) = syspath.find("/devices/pci") else {
        return false;
    };
    // "%*x:%*x/%x:%x:%x.%x"
    let after = &syspath[p + 12..];
    let Some(slash) = after.find('/') else {
        return false;
    };
    let Some((mut pci, n)) = scan_hex(&after[slash + 1..], &[':', ':', '.']) else {
        return false;
    };
    let mut end = p + 12 + slash + 1 + n;
    let driver = loop {
        let drv = std::fs::read_link(format!("{}/driver", &syspath[..end]))
            .ok()
            .and_then(|l| Some(l.file_name()?.to_string_lossy().into_owned()));
        if let Some(d) = drv.filter(|d| DRIVERS.contains(&d.as_str())) {
            break d;
        }
        match syspath[end..]
            .strip_prefix('/')
            .and_then(|s| scan_hex(s, &[':', ':', '.']))
        {
            Some((v, n)) => {
                pci = v;
                end += 1 + n;
            }
            None => return false,
        }
    };
    let tgt = scsi_target(syspath);
    let host = host_index(syspath);
    let hosts = host.map(|(_, p, ata)| sibling_hosts(Path::new(&syspath[..p]), ata));
    addr.insert(
        "pci-controller".into(),
        json!({ "domain": pci[0], "bus": pci[1], "slot": pci[2], "function": pci[3] }),
    );
    let idx_of_host = || -> Option<usize> {
        let (h, _, _) = host?;
        hosts.as_ref()?.iter().position(|&x| x == h)
    };
    let (bus_type, bus, unit) = match driver.as_str() {
        "ata_piix" => match (idx_of_host(), tgt) {
            (Some(i), Some(t)) => ("ide", i as u32, t[1]),
            _ => return false,
        },
        "sym53c8xx" => match tgt {
            Some(t) => ("scsi", 0, t[1]),
            None => return false,
        },
        "virtio-pci" => match tgt {
            Some(t) => ("scsi", 0, t[2]),
            None => ("virtio", 0, 0),
        },
        "ahci" => match (idx_of_host(), tgt) {
            (Some(i), Some(_)) => ("sata", 0, i as u32),
            _ => return false,
        },
        "nvme" => ("nvme", 0, 0),
        _ => ("usb", 0, 0),
    };
    addr.insert("bus-type".into(), json!(bus_type));
    addr.insert("bus".into(), json!(bus));
    addr.insert("unit".into(), json!(unit));
    true
}

fn nonpci_virtio(syspath: &str, addr: &mut Map<String, Value>) -> bool {
    if !syspath.contains("/virtio") || !syspath.contains("/block") {
        return false;
    }
    match scsi_target(syspath) {
        Some(t) => {
            addr.insert("bus-type".into(), json!("scsi"));
            addr.insert("bus".into(), json!(t[0]));
            addr.insert("target".into(), json!(t[1]));
            addr.insert("unit".into(), json!(t[2]));
        }
        None => {
            addr.insert("bus-type".into(), json!("virtio"));
        }
    }
    true
}

fn ccw_address(syspath: &str, addr: &mut Map<String, Value>) -> bool {
    let Some(p) = syspath.find("/devices/css") else {
        return false;
    };
    let parts: Vec<&str> = syspath[p + 12..].split('/').collect();
    let (Some(a), Some(b)) = (parts.get(1), parts.get(2)) else {
        return false;
    };
    let (Some((v1, _)), Some((v2, _))) = (scan_hex(a, &['.', '.']), scan_hex(b, &['.', '.']))
    else {
        return false;
    };
    addr.insert(
        "ccw-address".into(),
        json!({ "cssid": v1[0], "ssid": v1[1], "subchno": v1[2], "devno": v2[2] }),
    );
    if syspath[p..].contains("/virtio") {
        nonpci_virtio(syspath, addr);
    }
    true
}

/// The GuestDiskAddress of a real (non-virtual) block device, if anything is known about it.
pub fn real_device_address(syspath: &Path) -> Option<Value> {
    let s = syspath.to_string_lossy().into_owned();
    let mut addr = Map::new();
    addr.insert(
        "pci-controller".into(),
        json!({ "domain": -1, "bus": -1, "slot": -1, "function": -1 }),
    );
    addr.insert("bus-type".into(), json!("unknown"));
    addr.insert("bus".into(), json!(0));
    addr.insert("target".into(), json!(0));
    addr.insert("unit".into(), json!(0));
    let serial = udev_property(syspath, "ID_SERIAL");
    let dev = devnode(syspath);
    let hw = if s.contains("/devices/pci") {
        pci_address(&s, &mut addr)
    } else if s.contains("/devices/css") {
        ccw_address(&s, &mut addr)
    } else if s.contains("/virtio") {
        nonpci_virtio(&s, &mut addr)
    } else {
        false
    };
    if let Some(v) = serial.clone() {
        addr.insert("serial".into(), json!(v));
    }
    if let Some(v) = dev.clone() {
        addr.insert("dev".into(), json!(v));
    }
    // keep QAPI member order: ccw-address last
    if let Some(ccw) = addr.remove("ccw-address") {
        addr.insert("ccw-address".into(), ccw);
    }
    (hw || dev.is_some() || serial.is_some()).then_some(Value::Object(addr))
}

/// qemu-ga's `build_guest_fsinfo_for_device`: sets `name` (if unset) and prepends disk addresses; virtual devices
/// (dm, md) are followed through their `slaves`.
pub fn device_disks(
    devpath: &Path,
    name: &mut Option<String>,
    disks: &mut Vec<Value>,
) -> CommandResult<()> {
    let syspath = match std::fs::canonicalize(devpath) {
        Ok(p) => p,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if name.is_none() {
                *name = devpath
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned());
            }
            return Ok(());
        }
        Err(e) => {
            return Err(CommandError::io(
                format!("realpath(\"{}\")", devpath.display()),
                &e,
            ))
        }
    };
    if name.is_none() {
        *name = syspath
            .file_name()
            .map(|n| n.to_string_lossy().into_owned());
    }
    if is_virtual(&syspath) {
        let slaves = syspath.join("slaves");
        let entries = match std::fs::read_dir(&slaves) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => {
                return Err(CommandError::io(
                    format!("opendir(\"{}\")", slaves.display()),
                    &e,
                ))
            }
        };
        for ent in entries.flatten() {
            if ent.file_type().is_ok_and(|t| t.is_symlink()) {
                device_disks(&ent.path(), name, disks)?;
            }
        }
    } else if let Some(a) = real_device_address(&syspath) {
        disks.insert(0, a);
    }
    Ok(())
}

/// Whether a sysfs block path is virtual (dm, md, loop...).
pub fn is_virtual(syspath: &Path) -> bool {
    syspath
        .to_string_lossy()
        .contains("/devices/virtual/block/")
}

fn fsinfo_for(m: &Mount, sys_root: &Path) -> CommandResult<Value> {
    let devpath: PathBuf = sys_root.join(format!("dev/block/{}:{}", m.devmajor, m.devminor));
    let mut name = None;
    let mut disks = Vec::new();
    device_disks(&devpath, &mut name, &mut disks)?;
    let mut o = Map::new();
    o.insert("name".into(), json!(name.unwrap_or_default()));
    o.insert("mountpoint".into(), json!(m.dirname));
    o.insert("type".into(), json!(m.devtype));
    if let Ok(st) = nix::sys::statvfs::statvfs(m.dirname.as_str()) {
        let fr = st.fragment_size();
        let blocks = st.blocks();
        let used = blocks.saturating_sub(st.blocks_free());
        let nonroot_total = used + st.blocks_available();
        o.insert("used-bytes".into(), json!(used * fr));
        o.insert("total-bytes".into(), json!(nonroot_total * fr));
        o.insert("total-bytes-privileged".into(), json!(blocks * fr));
    }
    o.insert("disk".into(), Value::Array(disks));
    Ok(Value::Object(o))
}

/// `guest-get-fsinfo`.
pub fn get_fsinfo(proc_root: &Path, sys_root: &Path) -> CommandResult<Value> {
    let mounts = mount_list(proc_root)?;
    let mut out = Vec::with_capacity(mounts.len());
    for m in &mounts {
        out.push(fsinfo_for(m, sys_root)?);
    }
    out.reverse();
    Ok(Value::Array(out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::freeze::mounts::decode_mntname;

    const MOUNTINFO: &str = "\
22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
23 22 0:21 / /proc rw - proc proc rw
24 22 8:1 /home /home\\040dir rw - ext4 /dev/sda1 rw
25 22 253:0 / /var rw shared:5 - xfs /dev/mapper/vg-var rw
26 22 0:45 / /run rw - tmpfs tmpfs rw
27 22 252:16 / /mnt/a\\134b rw - ext4 /dev/vdb rw
";

    #[test]
    fn mountinfo_fixture() {
        let m = parse_mountinfo(MOUNTINFO);
        let dirs: Vec<&str> = m.iter().map(|m| m.dirname.as_str()).collect();
        // proc/tmpfs skipped; the bind mount of 8:1 on /home dir is kept, like qemu-ga
        assert_eq!(dirs, ["/", "/home dir", "/var", "/mnt/a\\b"]);
        assert_eq!((m[1].devmajor, m[1].devminor), (8, 1));
        assert_eq!(m[2].devtype, "xfs");
        assert_eq!((m[2].devmajor, m[2].devminor), (253, 0));
        assert_eq!(decode_mntname("a\\040b\\\\c\\9"), "a b\\c\\9");
    }

    #[test]
    fn scsi_and_pci_parsing() {
        let p = "/sys/devices/pci0000:00/0000:00:05.0/virtio2/host2/target2:0:3/2:0:3:7/block/sda";
        assert_eq!(scsi_target(p), Some([0, 3, 7]));
        assert_eq!(host_index(p).map(|h| h.0), Some(2));
        assert_eq!(
            scan_hex("0000:00:05.0/virtio2", &[':', ':', '.']),
            Some((vec![0, 0, 5, 0], 12))
        );
        let mut a = Map::new();
        assert!(nonpci_virtio(
            "/sys/devices/css0/0.0.0001/0.0.0002/virtio0/block/vda",
            &mut a
        ));
        assert_eq!(a["bus-type"], "virtio");
        let mut a = Map::new();
        assert!(ccw_address(
            "/sys/devices/css0/0.0.0001/0.0.0002/virtio0/block/vda",
            &mut a
        ));
        assert_eq!(
            a["ccw-address"],
            json!({"cssid": 0, "ssid": 0, "subchno": 1, "devno": 2})
        );
    }

    #[test]
    fn real_machine_structure() {
        let v = get_fsinfo(Path::new("/proc"), Path::new("/sys")).unwrap();
        for fs in v.as_array().unwrap() {
            assert!(
                fs["name"].is_string() && fs["mountpoint"].is_string() && fs["type"].is_string()
            );
            assert!(fs["disk"].is_array());
            if let Some(t) = fs.get("total-bytes") {
                assert!(t.as_u64().unwrap() >= fs["used-bytes"].as_u64().unwrap());
            }
        }
    }
}
