//! guest-get-disks: every non-empty block device in /sys/block with its partitions, device-mapper alias,
//! dependencies (`slaves`) and disk address, built in qemu-ga's (reverse, prepend) order. NVMe SMART data is not
//! reported (it needs an admin ioctl).

use std::path::Path;

use serde_json::{json, Map, Value};

use super::error::{CommandError, CommandResult};
use super::fsinfo::{device_disks, devnode, is_virtual, udev_property};

fn is_partition_of(disk: &str, entry: &str) -> bool {
    let Some(rest) = entry.strip_prefix(disk) else {
        return false;
    };
    let mut c = rest.chars();
    match c.next() {
        Some('p') => c.next().is_some_and(|d| d.is_ascii_digit()),
        Some(d) => d.is_ascii_digit(),
        None => false,
    }
}

/// `guest-get-disks`.
pub fn get_disks(sys_root: &Path) -> CommandResult<Value> {
    let block = sys_root.join("block");
    let entries = std::fs::read_dir(&block)
        .map_err(|e| CommandError::io("Can't open directory \"/sys/block\"", &e))?;
    let mut ret: Vec<Value> = Vec::new();
    for ent in entries.flatten() {
        if !ent.file_type().is_ok_and(|t| t.is_symlink()) {
            continue;
        }
        let name = ent.file_name().to_string_lossy().into_owned();
        let disk_dir = block.join(&name);
        match std::fs::read_to_string(disk_dir.join("size")) {
            Ok(s) if s != "0\n" => {}
            _ => continue,
        }
        let Some(dev_name) = devnode(&disk_dir) else {
            continue;
        };
        let mut disk = Map::new();
        disk.insert("name".into(), json!(dev_name));
        disk.insert("partition".into(), json!(false));
        // dependencies
        if let Ok(deps) = std::fs::read_dir(disk_dir.join("slaves")) {
            let mut list: Vec<Value> = Vec::new();
            for d in deps.flatten() {
                if let Some(n) = devnode(&d.path()) {
                    list.insert(0, json!(n));
                }
            }
            disk.insert("dependencies".into(), Value::Array(list));
        }
        let real = std::fs::canonicalize(&disk_dir).ok();
        if let Some(real) = real.as_deref().filter(|r| !is_virtual(r)) {
            let mut n = None;
            let mut disks = Vec::new();
            if device_disks(real, &mut n, &mut disks).is_ok() {
                if let Some(a) = disks.into_iter().next() {
                    disk.insert("address".into(), a);
                }
            }
        }
        let alias = udev_property(&disk_dir, "DM_NAME").or_else(|| {
            std::fs::read_to_string(disk_dir.join("dm/name"))
                .ok()
                .map(|s| s.trim().to_owned())
                .filter(|s| !s.is_empty())
        });
        if let Some(a) = alias {
            disk.insert("alias".into(), json!(a));
        }
        ret.insert(0, Value::Object(disk));
        // partitions
        if let Ok(parts) = std::fs::read_dir(&disk_dir) {
            for p in parts.flatten() {
                let pname = p.file_name().to_string_lossy().into_owned();
                if !p.file_type().is_ok_and(|t| t.is_dir()) || !is_partition_of(&name, &pname) {
                    continue;
                }
                let Some(pdev) = devnode(&p.path()) else {
                    continue;
                };
                ret.insert(
                    0,
                    json!({ "name": pdev, "partition": true, "dependencies": [dev_name.clone()] }),
                );
            }
        }
    }
    Ok(Value::Array(ret))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partition_names() {
        assert!(is_partition_of("sda", "sda1"));
        assert!(is_partition_of("nvme0n1", "nvme0n1p2"));
        assert!(!is_partition_of("sda", "sdaa"));
        assert!(!is_partition_of("sda", "queue"));
        assert!(!is_partition_of("sda", "sda"));
    }

    #[test]
    fn real_machine_structure() {
        let v = get_disks(Path::new("/sys")).unwrap();
        for d in v.as_array().unwrap() {
            assert!(d["name"].as_str().unwrap().starts_with("/dev/"));
            assert!(d["partition"].is_boolean());
            if d["partition"] == true {
                assert_eq!(d["dependencies"].as_array().unwrap().len(), 1);
            }
        }
    }
}
