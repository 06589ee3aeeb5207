//! The list of freezable mounts, built exactly like qemu-ga's `build_fs_mount_list` from `/proc/self/mountinfo`:
//! block-backed filesystems only (device major != 0), with the btrfs exception (its anonymous device is replaced by
//! the source device's `st_rdev`), octal escapes (`\040`) decoded, in mount order. This is the daemon's one
//! mountinfo parser: guest-get-fsinfo and guest-fstrim (`commands::fsinfo::mount_list`) use it too.

use std::os::unix::fs::{FileTypeExt, MetadataExt};

/// One mounted filesystem that may be frozen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    /// The mount point (decoded).
    pub dirname: String,
    /// The filesystem type.
    pub devtype: String,
    /// Device major number.
    pub devmajor: u32,
    /// Device minor number.
    pub devminor: u32,
}

/// Decode the octal escapes the kernel uses in mountinfo (`\040` for space, `\011`, `\012`, `\134`) and `\\`,
/// like qemu-ga's `decode_mntname`.
pub fn decode_mntname(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' {
            if b.get(i + 1) == Some(&b'\\') {
                out.push(b'\\');
                i += 2;
                continue;
            }
            if let (Some(&a), Some(&c), Some(&d)) = (b.get(i + 1), b.get(i + 2), b.get(i + 3)) {
                if (b'0'..=b'3').contains(&a)
                    && (b'0'..=b'7').contains(&c)
                    && (b'0'..=b'7').contains(&d)
                {
                    out.push((a - b'0') * 64 + (c - b'0') * 8 + (d - b'0'));
                    i += 4;
                    continue;
                }
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The major/minor of a block device node (used for btrfs, whose mountinfo device is anonymous).
pub fn block_dev_of(path: &str) -> Option<(u32, u32)> {
    let meta = std::fs::metadata(path).ok()?;
    if !meta.file_type().is_block_device() {
        return None;
    }
    let rdev = meta.rdev();
    Some((
        nix::sys::stat::major(rdev) as u32,
        nix::sys::stat::minor(rdev) as u32,
    ))
}

/// Parse mountinfo text into the freezable mounts, in file (mount) order.
///
/// `dev_lookup` resolves a btrfs source device to its major/minor (a stat in production, a table in tests).
pub fn parse_mountinfo(text: &str, dev_lookup: &dyn Fn(&str) -> Option<(u32, u32)>) -> Vec<Mount> {
    let mut mounts = Vec::new();
    for line in text.lines() {
        // "<id> <parent> <major:minor> <root> <mount point> <options> [optional...] - <fstype> <source> ..."
        let Some((left, right)) = line.split_once(" - ") else {
            continue;
        };
        let l: Vec<&str> = left.split(' ').collect();
        let mut r = right.split(' ');
        let (Some(mntpoint), Some(devtype), Some(source)) = (l.get(4), r.next(), r.next()) else {
            continue;
        };
        let Some((maj, min)) = l[2].split_once(':') else {
            continue;
        };
        let (Ok(mut devmajor), Ok(mut devminor)) = (maj.parse::<u32>(), min.parse::<u32>()) else {
            continue;
        };
        let dirname = decode_mntname(mntpoint);
        let devname = decode_mntname(source);
        if devmajor == 0 && devtype == "btrfs" {
            if let Some((ma, mi)) = dev_lookup(&devname) {
                devmajor = ma;
                devminor = mi;
            }
        }
        if devmajor == 0 {
            continue;
        }
        mounts.push(Mount {
            dirname,
            devtype: devtype.to_owned(),
            devmajor,
            devminor,
        });
    }
    mounts
}

/// Read and parse `path` (normally `/proc/self/mountinfo`).
pub fn read_mounts(path: &std::path::Path) -> std::io::Result<Vec<Mount>> {
    let text = std::fs::read_to_string(path)?;
    Ok(parse_mountinfo(&text, &block_dev_of))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "\
22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
23 22 0:21 / /proc rw,nosuid shared:5 - proc proc rw
24 22 0:5 / /dev rw shared:2 - devtmpfs udev rw,size=1k
25 22 0:23 / /run rw shared:6 - tmpfs tmpfs rw
26 22 8:2 / /var/my\\040data rw,relatime shared:7 master:3 - xfs /dev/sda2 rw
27 22 0:45 / /home rw,relatime shared:8 - btrfs /dev/vdb rw
28 22 0:46 / /srv rw,relatime shared:9 - btrfs /dev/gone rw
29 22 8:1 /sub /bind rw - ext4 /dev/sda1 rw
30 22 0:50 / /mnt/nfs rw - nfs4 server:/x rw
bogus line
";

    #[test]
    fn keeps_block_backed_in_order_with_btrfs_and_escapes() {
        let lookup = |dev: &str| {
            if dev == "/dev/vdb" {
                Some((252, 16))
            } else {
                None
            }
        };
        let m = parse_mountinfo(SAMPLE, &lookup);
        let names: Vec<&str> = m.iter().map(|m| m.dirname.as_str()).collect();
        assert_eq!(names, ["/", "/var/my data", "/home", "/bind"]);
        assert_eq!((m[2].devmajor, m[2].devminor), (252, 16));
        assert_eq!(m[1].devtype, "xfs");
    }

    #[test]
    fn octal_unescape() {
        assert_eq!(decode_mntname("/a\\040b\\011c\\134d\\012"), "/a b\tc\\d\n");
        assert_eq!(decode_mntname("/plain\\"), "/plain\\");
        assert_eq!(decode_mntname("/x\\09"), "/x\\09");
    }

    #[test]
    fn reads_this_hosts_mountinfo() {
        // Only parsing: never freezes anything.
        let m = read_mounts(std::path::Path::new("/proc/self/mountinfo")).unwrap();
        assert!(m.iter().all(|m| m.devmajor != 0));
    }
}
