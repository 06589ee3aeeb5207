//! guest-get-users: the USER_PROCESS entries of the utmp file (`/var/run/utmp`), parsed from the binary
//! `struct utmp` of glibc on Linux (384 bytes, native endian) without libc calls. One entry per user name, with the
//! earliest login time, in order of first appearance (like qemu-ga).

use std::path::Path;

use serde_json::{json, Value};

use super::error::{CommandError, CommandResult};

/// Size of glibc's `struct utmp` on Linux (all 64-bit ABIs and i386 use 32-bit time fields here).
pub const UTMP_SIZE: usize = 384;
const USER_PROCESS: i16 = 7;
const OFF_USER: usize = 44;
const USER_LEN: usize = 32;
const OFF_TV_SEC: usize = 340;
const OFF_TV_USEC: usize = 344;

fn i32_at(rec: &[u8], off: usize) -> i32 {
    let mut b = [0u8; 4];
    b.copy_from_slice(&rec[off..off + 4]);
    i32::from_ne_bytes(b)
}

/// Users and login times from a utmp image.
pub fn parse_utmp(data: &[u8]) -> Vec<(String, f64)> {
    let mut users: Vec<(String, f64)> = Vec::new();
    for rec in data.chunks_exact(UTMP_SIZE) {
        let ut_type = i16::from_ne_bytes([rec[0], rec[1]]);
        if ut_type != USER_PROCESS {
            continue;
        }
        let raw = &rec[OFF_USER..OFF_USER + USER_LEN];
        let name = raw.split(|&b| b == 0).next().unwrap_or_default();
        let name = String::from_utf8_lossy(name).into_owned();
        // tv_sec is unsigned in the 32-bit on-disk layout (y2038-safe reading).
        let secs = f64::from(i32_at(rec, OFF_TV_SEC) as u32);
        let usecs = f64::from(i32_at(rec, OFF_TV_USEC));
        let t = secs + usecs / 1_000_000.0;
        match users.iter_mut().find(|(u, _)| *u == name) {
            Some((_, old)) if t < *old => *old = t,
            Some(_) => {}
            None => users.push((name, t)),
        }
    }
    users
}

/// `guest-get-users`; a missing utmp file gives an empty list (like getutxent on a system without one).
pub fn get_users(utmp: &Path) -> CommandResult<Value> {
    let data = match std::fs::read(utmp) {
        Ok(d) => d,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => {
            return Err(CommandError::io(
                format!("failed to read '{}'", utmp.display()),
                &e,
            ))
        }
    };
    Ok(Value::Array(
        parse_utmp(&data)
            .into_iter()
            .map(|(user, t)| json!({ "user": user, "login-time": t }))
            .collect(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(ut_type: i16, user: &str, sec: i32, usec: i32) -> Vec<u8> {
        let mut r = vec![0u8; UTMP_SIZE];
        r[0..2].copy_from_slice(&ut_type.to_ne_bytes());
        r[OFF_USER..OFF_USER + user.len()].copy_from_slice(user.as_bytes());
        r[OFF_TV_SEC..OFF_TV_SEC + 4].copy_from_slice(&sec.to_ne_bytes());
        r[OFF_TV_USEC..OFF_TV_USEC + 4].copy_from_slice(&usec.to_ne_bytes());
        r
    }

    #[test]
    fn fixture_dedup_earliest() {
        let mut d = rec(2, "reboot", 100, 0); // BOOT_TIME
        d.extend(rec(USER_PROCESS, "alice", 2000, 500_000));
        d.extend(rec(USER_PROCESS, "bob", 1500, 0));
        d.extend(rec(USER_PROCESS, "alice", 1000, 250_000));
        d.extend(rec(8, "alice", 10, 0)); // DEAD_PROCESS
        d.extend([1, 2, 3]); // a torn trailing record is ignored
        let u = parse_utmp(&d);
        assert_eq!(u, vec![("alice".into(), 1000.25), ("bob".into(), 1500.0)]);
    }

    #[test]
    fn real_utmp_is_a_list() {
        let v = get_users(Path::new("/var/run/utmp")).unwrap();
        assert!(v.is_array());
        let v = get_users(Path::new("/nonexistent/utmp")).unwrap();
        assert_eq!(v, json!([]));
    }
}
