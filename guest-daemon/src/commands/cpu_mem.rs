//! CPU and memory: guest-get/set-vcpus, guest-get/set-memory-blocks, guest-get-memory-block-info,
//! guest-get-cpustats, guest-get-diskstats — sysfs/procfs readers with qemu-ga's field rules and error texts.

use std::io::{ErrorKind, Read, Seek, SeekFrom, Write};
use std::path::Path;

use serde_json::{json, Map, Value};

use super::error::{CommandError, CommandResult};

fn errno_of(e: &std::io::Error) -> i32 {
    e.raw_os_error().unwrap_or(libc::EIO)
}

/// Leading decimal number after `prefix` (sscanf "%ld"-like: trailing garbage is allowed).
fn leading_number(name: &str, prefix: &str) -> Option<i64> {
    let rest = name.strip_prefix(prefix)?;
    let end = rest
        .char_indices()
        .find(|&(i, c)| !(c.is_ascii_digit() || (i == 0 && (c == '-' || c == '+'))))
        .map_or(rest.len(), |(i, _)| i);
    rest[..end].parse().ok()
}

/// `guest-get-vcpus` (readdir order, like qemu-ga).
pub fn get_vcpus(sys: &Path) -> CommandResult<Value> {
    let dir = sys.join("devices/system/cpu");
    let entries = std::fs::read_dir(&dir)
        .map_err(|e| CommandError::io(format!("failed to list entries: {}", dir.display()), &e))?;
    let mut out = Vec::new();
    for ent in entries.flatten() {
        let name = ent.file_name().to_string_lossy().into_owned();
        let Some(id) = leading_number(&name, "cpu") else {
            continue;
        };
        let path = format!("{}/cpu{id}/", dir.display());
        let online_path = format!("{path}online");
        if let Err(e) = std::fs::metadata(&path) {
            return Err(CommandError::io(format!("open(\"{path}\")"), &e));
        }
        let (online, can_offline) = match std::fs::read(&online_path) {
            Ok(b) => match b.first() {
                Some(&c) => (c != b'0', true),
                None => {
                    return Err(CommandError::generic(format!(
                        "pread(\"{path}/online\"): unexpected EOF"
                    )))
                }
            },
            Err(e) if e.kind() == ErrorKind::NotFound => (true, false),
            Err(e) => return Err(CommandError::io(format!("open(\"{path}/online\")"), &e)),
        };
        out.push(json!({ "logical-id": id, "online": online, "can-offline": can_offline }));
    }
    Ok(Value::Array(out))
}

/// `guest-set-vcpus`: returns how many entries were applied before the first failure (an error only if none was).
pub fn set_vcpus(sys: &Path, vcpus: &[(i64, bool)]) -> CommandResult<i64> {
    let mut processed = 0i64;
    for &(id, online) in vcpus {
        if let Err(e) = set_vcpu(sys, id, online) {
            if processed == 0 {
                return Err(e);
            }
            break;
        }
        processed += 1;
    }
    Ok(processed)
}

fn set_vcpu(sys: &Path, id: i64, online: bool) -> CommandResult<()> {
    let path = format!("{}/devices/system/cpu/cpu{id}/", sys.display());
    if let Err(e) = std::fs::metadata(&path) {
        return Err(CommandError::io(format!("open(\"{path}\")"), &e));
    }
    let mut f = match std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(format!("{path}online"))
    {
        Ok(f) => f,
        Err(e) if e.kind() == ErrorKind::NotFound => {
            if !online {
                return Err(CommandError::generic(format!(
                    "logical processor #{id} can't be offlined"
                )));
            }
            return Ok(());
        }
        Err(e) => return Err(CommandError::io(format!("open(\"{path}/online\")"), &e)),
    };
    let mut b = [0u8; 1];
    match f.read(&mut b) {
        Ok(0) => Err(CommandError::generic(format!(
            "pread(\"{path}/online\"): unexpected EOF"
        ))),
        Err(e) => Err(CommandError::io(format!("pread(\"{path}/online\")"), &e)),
        Ok(_) if (b[0] != b'0') == online => Ok(()),
        Ok(_) => {
            let _ = f.seek(SeekFrom::Start(0));
            f.write_all(if online { b"1" } else { b"0" })
                .map_err(|e| CommandError::io(format!("pwrite(\"{path}/online\")"), &e))
        }
    }
}

/// `guest-get-memory-blocks`.
pub fn get_memory_blocks(sys: &Path) -> CommandResult<Value> {
    let dir = sys.join("devices/system/memory");
    let entries = match std::fs::read_dir(&dir) {
        Ok(e) => e,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(json!([])),
        Err(e) => {
            return Err(CommandError::io(
                "Can't open directory\"/sys/devices/system/memory/\"",
                &e,
            ))
        }
    };
    let mut out = Vec::new();
    for ent in entries.flatten() {
        let name = ent.file_name().to_string_lossy().into_owned();
        if !name.starts_with("memory") || !ent.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        let idx: u64 = name[6..]
            .chars()
            .take_while(char::is_ascii_digit)
            .collect::<String>()
            .parse()
            .unwrap_or(0);
        let bdir = ent.path();
        let (online, can_offline) = match std::fs::read(bdir.join("state")) {
            Ok(s) => {
                let online = s.starts_with(b"online");
                let can = match std::fs::read(bdir.join("removable")) {
                    Ok(r) => r.first().is_some_and(|&c| c != b'0'),
                    Err(e) if e.kind() == ErrorKind::NotFound => false,
                    Err(e) => {
                        return Err(CommandError::io("open sysfs file \"removable\"", &e));
                    }
                };
                (online, can)
            }
            Err(e) if e.kind() == ErrorKind::NotFound => (true, false),
            Err(e) => return Err(CommandError::io("open sysfs file \"state\"", &e)),
        };
        out.push(json!({ "phys-index": idx, "online": online, "can-offline": can_offline }));
    }
    if out.is_empty() {
        return Err(CommandError::generic("guest reported zero memory blocks!"));
    }
    Ok(Value::Array(out))
}

/// `guest-set-memory-blocks`: one response per requested block.
pub fn set_memory_blocks(sys: &Path, blocks: &[(u64, bool)]) -> Value {
    let root = sys.join("devices/system/memory");
    let out = blocks
        .iter()
        .map(|&(idx, online)| {
            let (response, errno) = set_memory_block(&root, idx, online);
            let mut m = Map::new();
            m.insert("phys-index".into(), json!(idx));
            m.insert("response".into(), json!(response));
            if let Some(e) = errno {
                m.insert("error-code".into(), json!(e));
            }
            Value::Object(m)
        })
        .collect();
    Value::Array(out)
}

fn set_memory_block(root: &Path, idx: u64, online: bool) -> (&'static str, Option<i32>) {
    if let Err(e) = std::fs::read_dir(root) {
        let resp = if e.kind() == ErrorKind::NotFound {
            "operation-not-supported"
        } else {
            // qemu-ga leaves the response at its zero value here.
            "success"
        };
        return (resp, Some(errno_of(&e)));
    }
    let dir = root.join(format!("memory{idx}"));
    if let Err(e) = std::fs::read_dir(&dir) {
        let resp = if e.kind() == ErrorKind::NotFound {
            "not-found"
        } else {
            "operation-failed"
        };
        return (resp, Some(errno_of(&e)));
    }
    match std::fs::read(dir.join("state")) {
        Err(e) if e.kind() == ErrorKind::NotFound => {
            if online {
                ("success", Some(errno_of(&e)))
            } else {
                ("operation-not-supported", Some(errno_of(&e)))
            }
        }
        Err(e) => ("operation-failed", Some(errno_of(&e))),
        Ok(s) if s.starts_with(b"online") == online => ("success", None),
        Ok(_) => {
            let new = if online { "online" } else { "offline" };
            match std::fs::OpenOptions::new()
                .write(true)
                .open(dir.join("state"))
                .and_then(|mut f| f.write_all(new.as_bytes()))
            {
                Ok(()) => ("success", None),
                Err(e) => ("operation-failed", Some(errno_of(&e))),
            }
        }
    }
}

/// `guest-get-memory-block-info`: `block_size_bytes` (hex).
pub fn get_memory_block_info(sys: &Path) -> CommandResult<Value> {
    let dir = sys.join("devices/system/memory");
    if let Err(e) = std::fs::read_dir(&dir) {
        return Err(CommandError::io(
            "open(\"/sys/devices/system/memory/\")",
            &e,
        ));
    }
    let text = std::fs::read_to_string(dir.join("block_size_bytes"))
        .map_err(|e| CommandError::io("open sysfs file \"block_size_bytes\"", &e))?;
    let hex: String = text
        .trim()
        .chars()
        .take_while(char::is_ascii_hexdigit)
        .collect();
    let size = u64::from_str_radix(&hex, 16).unwrap_or(0);
    Ok(json!({ "size": size }))
}

/// `guest-get-cpustats` from /proc/stat text, in milliseconds.
pub fn parse_cpustats(text: &str, clk_tck: u64) -> Value {
    let clk = clk_tck.max(1);
    let mut out = Vec::new();
    for line in text.lines() {
        let mut tok = line.split_ascii_whitespace();
        let Some(name) = tok.next() else { continue };
        let Some(cpu) = name.strip_prefix("cpu") else {
            continue;
        };
        if cpu.is_empty() {
            continue;
        }
        let vals: Vec<u64> = tok.map_while(|t| t.parse().ok()).take(10).collect();
        let i = vals.len() + 1;
        if i < 5 {
            break;
        }
        let ms = |k: usize| vals[k] * 1000 / clk;
        let mut m = Map::new();
        m.insert("type".into(), json!("linux"));
        m.insert(
            "cpu".into(),
            json!(leading_number(name, "cpu").unwrap_or(0)),
        );
        for (k, f) in ["user", "nice", "system", "idle"].iter().enumerate() {
            m.insert((*f).into(), json!(ms(k)));
        }
        if i > 5 {
            m.insert("iowait".into(), json!(ms(4)));
        }
        if i > 6 {
            m.insert("irq".into(), json!(ms(5)));
            m.insert(
                "softirq".into(),
                json!(vals.get(6).map_or(0, |v| v * 1000 / clk)),
            );
        }
        if i > 8 {
            m.insert("steal".into(), json!(ms(7)));
        }
        if i > 9 {
            m.insert("guest".into(), json!(ms(8)));
        }
        if i > 10 {
            m.insert("guestnice".into(), json!(ms(9)));
        }
        out.push(Value::Object(m));
    }
    Value::Array(out)
}

/// `guest-get-cpustats`.
pub fn get_cpustats(proc_root: &Path) -> CommandResult<Value> {
    let text = std::fs::read_to_string(proc_root.join("stat"))
        .map_err(|e| CommandError::io("open(\"/proc/stat\")", &e))?;
    let clk = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .and_then(|v| u64::try_from(v).ok())
        .unwrap_or(100);
    Ok(parse_cpustats(&text, clk))
}

/// `guest-get-diskstats` from /proc/diskstats text.
pub fn parse_diskstats(text: &str) -> Value {
    const FULL: [&str; 17] = [
        "read-ios",
        "read-merges",
        "read-sectors",
        "read-ticks",
        "write-ios",
        "write-merges",
        "write-sectors",
        "write-ticks",
        "ios-pgr",
        "total-ticks",
        "weight-ticks",
        "discard-ios",
        "discard-merges",
        "discard-sectors",
        "discard-ticks",
        "flush-ios",
        "flush-ticks",
    ];
    let mut out = Vec::new();
    for line in text.lines() {
        let mut tok = line.split_ascii_whitespace();
        let (Some(major), Some(minor), Some(name)) = (
            tok.next().and_then(|t| t.parse::<u32>().ok()),
            tok.next().and_then(|t| t.parse::<u32>().ok()),
            tok.next(),
        ) else {
            continue;
        };
        let vals: Vec<u64> = tok.map_while(|t| t.parse().ok()).take(17).collect();
        let i = vals.len() + 3;
        if i < 7 {
            continue;
        }
        let mut st = Map::new();
        if i == 7 {
            // Old partition format: reads, read sectors, writes, write sectors.
            for (k, f) in ["read-ios", "read-sectors", "write-ios", "write-sectors"]
                .iter()
                .enumerate()
            {
                st.insert((*f).into(), json!(vals[k]));
            }
        }
        let upto = if i >= 20 {
            17
        } else if i >= 18 {
            15
        } else if i >= 14 {
            11
        } else {
            0
        };
        for (k, f) in FULL.iter().enumerate().take(upto) {
            st.insert((*f).into(), json!(vals[k]));
        }
        out.push(json!({ "name": name, "major": major, "minor": minor, "stats": st }));
    }
    Value::Array(out)
}

/// `guest-get-diskstats`.
pub fn get_diskstats(proc_root: &Path) -> CommandResult<Value> {
    let text = std::fs::read_to_string(proc_root.join("diskstats"))
        .map_err(|e| CommandError::io("open(\"/proc/diskstats\")", &e))?;
    Ok(parse_diskstats(&text))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn real_vcpus_and_cpustats() {
        if Path::new("/sys/devices/system/cpu/cpu0").exists() {
            let v = get_vcpus(Path::new("/sys")).unwrap();
            let a = v.as_array().unwrap();
            assert!(!a.is_empty());
            assert!(a[0]["online"].is_boolean() && a[0]["logical-id"].is_i64());
        }
        let v = get_cpustats(Path::new("/proc")).unwrap();
        let a = v.as_array().unwrap();
        assert!(!a.is_empty());
        assert_eq!(a[0]["type"], "linux");
        assert!(a[0]["idle"].is_u64() && a[0]["guestnice"].is_u64());
    }

    #[test]
    fn cpustats_fixture() {
        let t = "cpu  10 20 30 40 50 60 70 80 90 100\ncpu0 100 200 300 400 500 600 700 800 900 1000\ncpu1 1 2 3 4\nintr 1\n";
        let v = parse_cpustats(t, 100);
        assert_eq!(v.as_array().unwrap().len(), 2);
        assert_eq!(v[0]["cpu"], 0);
        assert_eq!(v[0]["user"], 1000);
        assert_eq!(v[0]["guestnice"], 10000);
        assert_eq!(v[1]["idle"], 40);
        assert!(v[1].get("iowait").is_none());
    }

    #[test]
    fn diskstats_fixture_and_real() {
        let t = "   8       0 sda 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17\n   8       1 sda1 1 2 3 4\n 7 0 loop0 1 2 3 4 5 6 7 8 9 10 11\n";
        let v = parse_diskstats(t);
        assert_eq!(v[0]["name"], "sda");
        assert_eq!(v[0]["stats"].as_object().unwrap().len(), 17);
        assert_eq!(v[0]["stats"]["flush-ticks"], 17);
        assert_eq!(v[1]["stats"]["read-sectors"], 2);
        assert_eq!(v[1]["stats"]["write-ios"], 3);
        assert_eq!(v[2]["stats"].as_object().unwrap().len(), 11);
        if Path::new("/proc/diskstats").exists() {
            assert!(get_diskstats(Path::new("/proc")).unwrap().is_array());
        }
    }

    #[test]
    fn fake_sysfs_vcpus_and_memory() {
        let d = tempfile::tempdir().unwrap();
        let cpu = d.path().join("devices/system/cpu");
        std::fs::create_dir_all(cpu.join("cpu0")).unwrap();
        std::fs::create_dir_all(cpu.join("cpu1")).unwrap();
        std::fs::create_dir_all(cpu.join("cpufreq")).unwrap();
        std::fs::write(cpu.join("cpu1/online"), "1\n").unwrap();
        let v = get_vcpus(d.path()).unwrap();
        assert_eq!(v.as_array().unwrap().len(), 2);
        assert_eq!(set_vcpus(d.path(), &[(1, false)]).unwrap(), 1);
        assert_eq!(std::fs::read(cpu.join("cpu1/online")).unwrap()[0], b'0');
        let e = set_vcpus(d.path(), &[(0, false)]).unwrap_err();
        assert_eq!(e.to_string(), "logical processor #0 can't be offlined");
        assert_eq!(set_vcpus(d.path(), &[(0, true), (0, false)]).unwrap(), 1);
        assert!(set_vcpus(d.path(), &[(7, true)])
            .unwrap_err()
            .to_string()
            .contains("No such file"));

        assert_eq!(get_memory_blocks(d.path()).unwrap(), json!([]));
        let mem = d.path().join("devices/system/memory");
        std::fs::create_dir_all(mem.join("memory32")).unwrap();
        std::fs::write(mem.join("memory32/state"), "online\n").unwrap();
        std::fs::write(mem.join("memory32/removable"), "1\n").unwrap();
        std::fs::write(mem.join("block_size_bytes"), "8000000\n").unwrap();
        let v = get_memory_blocks(d.path()).unwrap();
        assert_eq!(
            v,
            json!([{"phys-index": 32, "online": true, "can-offline": true}])
        );
        assert_eq!(
            get_memory_block_info(d.path()).unwrap(),
            json!({"size": 134217728})
        );
        let r = set_memory_blocks(d.path(), &[(32, false), (5, true)]);
        assert_eq!(r[0]["response"], "success");
        assert_eq!(
            std::fs::read_to_string(mem.join("memory32/state")).unwrap(),
            "offline"
        );
        assert_eq!(r[1]["response"], "not-found");
        assert_eq!(r[1]["error-code"], libc::ENOENT);
    }
}
