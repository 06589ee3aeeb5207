//! guest-fstrim: FITRIM on every block-backed mount (reverse mount order), with qemu-ga's per-path results.

use std::path::Path;

use serde_json::{json, Map, Value};

use super::error::{errno_text, CommandResult};
use super::fsinfo::mount_list;

/// `guest-fstrim`. NEVER called in tests on the build host.
pub fn fstrim(proc_root: &Path, minimum: Option<i64>) -> CommandResult<Value> {
    let mounts = mount_list(proc_root)?;
    let mut paths = Vec::with_capacity(mounts.len());
    for m in &mounts {
        let mut r = Map::new();
        r.insert("path".into(), json!(m.dirname));
        match std::fs::File::open(&m.dirname) {
            Err(e) => {
                let errno = e.raw_os_error().unwrap_or(libc::EIO);
                r.insert(
                    "error".into(),
                    json!(format!("failed to open: {}", errno_text(errno))),
                );
            }
            Ok(f) => {
                let minlen = minimum.unwrap_or(0) as u64;
                let mut range = crate::sys::FstrimRange {
                    start: 0,
                    len: u64::MAX,
                    minlen,
                };
                match crate::sys::fitrim(std::os::fd::AsFd::as_fd(&f), &mut range) {
                    Ok(()) => {
                        r.insert("trimmed".into(), json!(range.len as i64));
                        r.insert("minimum".into(), json!(range.minlen as i64));
                    }
                    Err(nix::errno::Errno::ENOTTY | nix::errno::Errno::EOPNOTSUPP) => {
                        r.insert("error".into(), json!("trim not supported"));
                    }
                    Err(e) => {
                        r.insert(
                            "error".into(),
                            json!(format!("failed to trim: {}", errno_text(e as i32))),
                        );
                    }
                }
            }
        }
        paths.insert(0, Value::Object(r));
    }
    Ok(json!({ "paths": paths }))
}
