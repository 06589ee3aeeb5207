//! Small system queries and the clock: guest-get-time, guest-set-time, guest-get-host-name, guest-get-timezone
//! (a TZif reader instead of libc's localtime), guest-get-load.

use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};

use super::error::{CommandError, CommandResult};
use super::run::run_command;

/// `guest-get-time`: nanoseconds since the epoch.
pub fn get_time() -> i64 {
    match SystemTime::now().duration_since(UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_nanos()).unwrap_or(i64::MAX),
        Err(e) => -i64::try_from(e.duration().as_nanos()).unwrap_or(i64::MAX),
    }
}

/// `guest-get-host-name`: gethostname(), "localhost" when that fails.
pub fn get_host_name() -> Value {
    let name = nix::unistd::gethostname()
        .ok()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "localhost".to_owned());
    json!({ "host-name": name })
}

/// `guest-get-load` from `/proc/loadavg` (what getloadavg() reads).
pub fn get_load(proc_root: &Path) -> CommandResult<Value> {
    let text = std::fs::read_to_string(proc_root.join("loadavg"))
        .map_err(|e| CommandError::io("cannot query load average", &e))?;
    let vals = parse_loadavg(&text).ok_or_else(|| CommandError::Os {
        msg: "cannot query load average".into(),
        errno: libc::EINVAL,
    })?;
    Ok(json!({ "load1m": vals[0], "load5m": vals[1], "load15m": vals[2] }))
}

fn parse_loadavg(text: &str) -> Option<[f64; 3]> {
    let mut it = text.split_ascii_whitespace().map(|s| s.parse::<f64>().ok());
    Some([it.next()??, it.next()??, it.next()??])
}

/// The checks and steps of `guest-set-time`, with the program paths injectable.
#[derive(Debug, Clone)]
pub struct SetTime {
    /// `/sbin/hwclock`.
    pub hwclock: PathBuf,
}

/// Validates a `guest-set-time` argument like qemu-ga: the year must be 1970..=2069.
pub fn check_time(time_ns: i64) -> CommandResult<()> {
    let secs = time_ns.div_euclid(1_000_000_000);
    let year = year_of(secs);
    if !(1970..2070).contains(&year) {
        // qemu-ga uses error_setg_errno() with whatever errno holds (normally 0 → "Success").
        return Err(CommandError::generic("Invalid time: Success"));
    }
    Ok(())
}

/// Gregorian year of a Unix time (days-from-civil, inverse).
fn year_of(secs: i64) -> i64 {
    let days = secs.div_euclid(86_400);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    yoe + era * 400 + i64::from(m <= 2)
}

impl SetTime {
    /// The hwclock arguments: `-w` (system → RTC) after setting a time, `-s` (RTC → system) without one.
    pub fn hwclock_args(time: Option<i64>) -> &'static [&'static str] {
        if time.is_some() {
            &["-w"]
        } else {
            &["-s"]
        }
    }

    /// `guest-set-time`. NEVER called in tests on the build host: it changes the clock.
    pub async fn run(&self, time: Option<i64>) -> CommandResult<()> {
        // qemu-ga checks for hwclock first: without it the command is unsupported and nothing changes.
        if !self.hwclock.exists() {
            return Err(CommandError::Unsupported);
        }
        if let Some(ns) = time {
            check_time(ns)?;
            let ts = nix::sys::time::TimeSpec::new(
                ns.div_euclid(1_000_000_000),
                ns.rem_euclid(1_000_000_000),
            );
            nix::time::clock_settime(nix::time::ClockId::CLOCK_REALTIME, ts)
                .map_err(|e| CommandError::errno("Failed to set time to guest", e))?;
        }
        run_command(
            &self.hwclock,
            Self::hwclock_args(time),
            None,
            "set hardware clock to system time",
        )
        .await
    }
}

/// `guest-get-timezone`: `{zone (abbreviation), offset (seconds east of UTC)}` for the current instant.
pub fn get_timezone() -> Value {
    let now = get_time().div_euclid(1_000_000_000);
    let (offset, zone) = local_zone(std::env::var("TZ").ok().as_deref(), now);
    match zone {
        Some(z) => json!({ "zone": z, "offset": offset }),
        None => json!({ "offset": offset }),
    }
}

/// Offset and abbreviation of the local zone at `now` (TZ like GLib: unset → /etc/localtime, `:name` or `name` →
/// the zoneinfo file, otherwise a POSIX TZ string).
pub fn local_zone(tz: Option<&str>, now: i64) -> (i64, Option<String>) {
    let file = match tz {
        None => Some(PathBuf::from("/etc/localtime")),
        Some(s) => {
            let s = s.strip_prefix(':').unwrap_or(s);
            if s.starts_with('/') {
                Some(PathBuf::from(s))
            } else {
                let p = Path::new("/usr/share/zoneinfo").join(s);
                if !s.is_empty() && !s.contains("..") && p.is_file() {
                    Some(p)
                } else {
                    return super::posix_tz::eval(s, now).unwrap_or_else(utc);
                }
            }
        }
    };
    file.and_then(|p| std::fs::read(p).ok())
        .and_then(|data| tzif_lookup(&data, now))
        .unwrap_or_else(utc)
}

fn utc() -> (i64, Option<String>) {
    (0, Some("UTC".to_owned()))
}

/// Looks `now` up in a TZif file: the last transition at or before it, or the footer's standard time.
pub fn tzif_lookup(data: &[u8], now: i64) -> Option<(i64, Option<String>)> {
    let be32 = |b: &[u8], o: usize| -> Option<u32> {
        Some(u32::from_be_bytes(b.get(o..o + 4)?.try_into().ok()?))
    };
    if data.get(0..4)? != b"TZif" {
        return None;
    }
    let version = *data.get(4)?;
    let counts = |base: usize| -> Option<[usize; 6]> {
        let mut c = [0usize; 6];
        for (i, v) in c.iter_mut().enumerate() {
            *v = be32(data, base + 20 + 4 * i)? as usize;
        }
        Some(c)
    };
    let [isut, isstd, leap, timecnt, typecnt, charcnt] = counts(0)?;
    let v1_len = timecnt * 5 + typecnt * 6 + charcnt + leap * 8 + isstd + isut;
    let (base, tsize, c) = if version >= b'2' {
        let base = 44 + v1_len;
        (base, 8usize, counts(base)?)
    } else {
        (0, 4usize, [isut, isstd, leap, timecnt, typecnt, charcnt])
    };
    let [isut, isstd, leap, timecnt, typecnt, charcnt] = c;
    let times = base + 44;
    let idxs = times + timecnt * tsize;
    let types = idxs + timecnt;
    let chars = types + typecnt * 6;
    let end = chars + charcnt + leap * (tsize + 4) + isstd + isut;
    if typecnt == 0 || data.len() < end {
        return None;
    }
    let time_at = |i: usize| -> Option<i64> {
        let o = times + i * tsize;
        Some(if tsize == 8 {
            i64::from_be_bytes(data.get(o..o + 8)?.try_into().ok()?)
        } else {
            i64::from(i32::from_be_bytes(data.get(o..o + 4)?.try_into().ok()?))
        })
    };
    let ttinfo = |t: usize| -> Option<(i64, Option<String>)> {
        let o = types + t * 6;
        let off = i64::from(i32::from_be_bytes(data.get(o..o + 4)?.try_into().ok()?));
        let ai = *data.get(o + 5)? as usize;
        let abbr = data.get(chars + ai..chars + charcnt)?;
        let abbr = abbr.split(|&b| b == 0).next().unwrap_or_default();
        Some((off, Some(String::from_utf8_lossy(abbr).into_owned())))
    };
    let mut last = None;
    for i in 0..timecnt {
        if time_at(i)? <= now {
            last = Some(i);
        } else {
            break;
        }
    }
    let footer = if version >= b'2' {
        data.get(end..).and_then(|f| {
            let f = std::str::from_utf8(f).ok()?;
            let f = f.strip_prefix('\n')?;
            Some(f.split('\n').next()?.to_owned())
        })
    } else {
        None
    };
    match last {
        Some(i) if i + 1 == timecnt => {
            // After the last transition the footer rule applies (slim TZif files end early).
            if let Some(r) = footer
                .as_deref()
                .and_then(|f| super::posix_tz::eval(f, now))
            {
                return Some(r);
            }
            ttinfo(*data.get(idxs + i)? as usize)
        }
        Some(i) => ttinfo(*data.get(idxs + i)? as usize),
        None => ttinfo(0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_is_recent() {
        assert!(get_time() > 1_600_000_000_000_000_000);
    }

    #[test]
    fn host_name_present() {
        let v = get_host_name();
        assert!(!v["host-name"].as_str().unwrap().is_empty());
    }

    #[test]
    fn load_from_real_proc() {
        let v = get_load(Path::new("/proc")).unwrap();
        for k in ["load1m", "load5m", "load15m"] {
            assert!(v[k].as_f64().unwrap() >= 0.0, "{k}");
        }
        assert_eq!(
            parse_loadavg("0.15 0.20 1.5 1/2 3\n"),
            Some([0.15, 0.2, 1.5])
        );
        assert_eq!(parse_loadavg("x"), None);
    }

    #[test]
    fn year_range() {
        assert_eq!(year_of(0), 1970);
        assert_eq!(year_of(951_782_400), 2000); // 2000-02-29
        assert_eq!(year_of(-1), 1969);
        assert!(check_time(0).is_ok());
        assert!(check_time(-1).is_err());
        // 2070-01-01T00:00:00Z
        assert!(check_time(3_155_760_000 * 1_000_000_000).is_err());
        assert!(check_time(3_155_759_999 * 1_000_000_000).is_ok());
        assert_eq!(SetTime::hwclock_args(Some(1)), ["-w"]);
        assert_eq!(SetTime::hwclock_args(None), ["-s"]);
    }

    #[tokio::test]
    async fn set_time_without_hwclock_is_unsupported() {
        // Only `None` (read the RTC) is ever exercised here, and with a missing hwclock nothing runs at all.
        let st = SetTime {
            hwclock: PathBuf::from("/nonexistent/hwclock"),
        };
        let e = st.run(None).await.unwrap_err();
        assert_eq!(
            e.to_string(),
            "this feature or command is not currently supported"
        );
    }

    #[test]
    fn zoneinfo_files_if_installed() {
        let now = get_time() / 1_000_000_000;
        let utc = Path::new("/usr/share/zoneinfo/UTC");
        if utc.exists() {
            let (off, zone) = tzif_lookup(&std::fs::read(utc).unwrap(), now).unwrap();
            assert_eq!((off, zone.as_deref()), (0, Some("UTC")));
        }
        let tokyo = Path::new("/usr/share/zoneinfo/Asia/Tokyo");
        if tokyo.exists() {
            let (off, zone) = tzif_lookup(&std::fs::read(tokyo).unwrap(), now).unwrap();
            assert_eq!((off, zone.as_deref()), (32400, Some("JST")));
        }
        let (off, zone) = local_zone(Some("JST-9"), now);
        assert_eq!((off, zone.as_deref()), (32400, Some("JST")));
        let v = get_timezone();
        assert!(v["offset"].is_i64());
    }
}
