//! Human-readable output of query results and of the quiesce report.

use std::io::{Result, Write};

use serde_json::Value;

use guestlink_host::quiesce::{CmdOutcome, QuiesceReport};

fn s<'a>(v: &'a Value, k: &str) -> &'a str {
    v.get(k).and_then(Value::as_str).unwrap_or("-")
}

fn list(v: &Value) -> &[Value] {
    v.as_array().map_or(&[], Vec::as_slice)
}

/// `guest-info`.
pub fn info(v: &Value, out: &mut dyn Write) -> Result<()> {
    writeln!(out, "version: {}", s(v, "version"))?;
    let cmds = list(v.get("supported_commands").unwrap_or(&Value::Null));
    let mut enabled: Vec<&str> = Vec::new();
    let mut disabled: Vec<&str> = Vec::new();
    for c in cmds {
        let name = s(c, "name");
        if c.get("enabled").and_then(Value::as_bool).unwrap_or(false) {
            enabled.push(name);
        } else {
            disabled.push(name);
        }
    }
    enabled.sort_unstable();
    disabled.sort_unstable();
    writeln!(out, "enabled ({}): {}", enabled.len(), enabled.join(" "))?;
    writeln!(out, "disabled ({}): {}", disabled.len(), disabled.join(" "))
}

/// `guest-get-osinfo`.
pub fn osinfo(v: &Value, out: &mut dyn Write) -> Result<()> {
    for k in [
        "pretty-name",
        "id",
        "version-id",
        "kernel-release",
        "kernel-version",
        "machine",
    ] {
        if let Some(x) = v.get(k).and_then(Value::as_str) {
            writeln!(out, "{k:15} {x}")?;
        }
    }
    Ok(())
}

/// A byte count from `v[k]` in binary units with one decimal (`512B`, `31.0M`, `1.5G`), or `-` when absent.
fn gib(v: &Value, k: &str) -> String {
    v.get(k)
        .and_then(Value::as_u64)
        .map_or_else(|| "-".into(), human_size)
}

fn human_size(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["K", "M", "G", "T", "P"];
    if bytes < 1024 {
        return format!("{bytes}B");
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1}{}", UNITS[unit])
}

/// `guest-get-fsinfo`.
pub fn fsinfo(v: &Value, out: &mut dyn Write) -> Result<()> {
    writeln!(
        out,
        "{:24} {:8} {:10} {:>8} {:>8}",
        "MOUNTPOINT", "TYPE", "DEVICE", "USED", "TOTAL"
    )?;
    for fs in list(v) {
        writeln!(
            out,
            "{:24} {:8} {:10} {:>8} {:>8}",
            s(fs, "mountpoint"),
            s(fs, "type"),
            s(fs, "name"),
            gib(fs, "used-bytes"),
            gib(fs, "total-bytes")
        )?;
    }
    Ok(())
}

/// `guest-network-get-interfaces`.
pub fn network(v: &Value, out: &mut dyn Write) -> Result<()> {
    for nic in list(v) {
        writeln!(out, "{} {}", s(nic, "name"), s(nic, "hardware-address"))?;
        for ip in list(nic.get("ip-addresses").unwrap_or(&Value::Null)) {
            let prefix = ip.get("prefix").and_then(Value::as_i64).unwrap_or(0);
            writeln!(
                out,
                "    {} {}/{prefix}",
                s(ip, "ip-address-type"),
                s(ip, "ip-address")
            )?;
        }
    }
    Ok(())
}

/// `guest-get-users`.
pub fn users(v: &Value, out: &mut dyn Write) -> Result<()> {
    if list(v).is_empty() {
        writeln!(out, "no users logged in")?;
    }
    for u in list(v) {
        let t = u.get("login-time").and_then(Value::as_f64).unwrap_or(0.0);
        writeln!(out, "{:16} since {}", s(u, "user"), utc((t * 1e9) as i64))?;
    }
    Ok(())
}

/// Nanoseconds since the epoch as an RFC 3339 UTC string (civil-from-days, proleptic Gregorian).
pub fn utc(ns: i64) -> String {
    let secs = ns.div_euclid(1_000_000_000);
    let nanos = ns.rem_euclid(1_000_000_000);
    let days = secs.div_euclid(86_400);
    let sod = secs.rem_euclid(86_400);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        sod / 3600,
        sod % 3600 / 60,
        sod % 60,
        nanos / 1_000_000
    )
}

/// Summary of a quiesce on stderr (stdout stays free for the command's own output).
pub fn quiesce(r: &QuiesceReport, quiet: bool) {
    if let Some(e) = &r.freeze_error {
        eprintln!("guestlink: freeze failed, command not run: {e}");
    }
    if let Some(e) = &r.thaw_error {
        eprintln!("guestlink: THAW FAILED, the guest may still be frozen: {e}");
    }
    match &r.command {
        CmdOutcome::TimedOut => eprintln!("guestlink: the command timed out and was killed"),
        CmdOutcome::SpawnFailed { error, .. } => {
            eprintln!("guestlink: cannot run the command: {error}");
        }
        CmdOutcome::Interrupted { signal } => {
            eprintln!("guestlink: interrupted by signal {signal}");
        }
        _ => {}
    }
    if !quiet {
        if let (Some(f), Some(ms)) = (r.frozen, r.frozen_ms) {
            eprintln!(
                "guestlink: {f} filesystem(s) frozen for {ms} ms, {} thawed; exit status {}",
                r.thawed.map_or_else(|| "none".into(), |t| t.to_string()),
                r.exit_code
            );
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn sizes_pick_a_readable_unit() {
        assert_eq!(super::human_size(512), "512B");
        assert_eq!(super::human_size(31 << 20), "31.0M");
        assert_eq!(super::human_size(3 << 29), "1.5G");
    }

    use super::utc;

    #[test]
    fn formats_utc() {
        assert_eq!(utc(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(utc(1_709_251_199_123_000_000), "2024-02-29T23:59:59.123Z");
        assert_eq!(utc(951_782_400_000_000_000), "2000-02-29T00:00:00.000Z");
    }
}
