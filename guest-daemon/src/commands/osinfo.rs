//! guest-get-osinfo: uname plus os-release, parsed like qemu-ga (a GLib key-file with one implicit group, then
//! qemu-ga's shell-style unquoting of double-quoted values). `QGA_OS_RELEASE` overrides the file, as in qemu-ga.

use std::collections::HashMap;
use std::path::Path;

use serde_json::{Map, Value};

/// Parses os-release text like `g_key_file_load_from_data`; `None` when GLib would reject the file.
pub fn parse_os_release(text: &str) -> Option<HashMap<String, String>> {
    let mut map = HashMap::new();
    for line in text.lines() {
        let trimmed = line.trim_start();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        if trimmed.starts_with('[') {
            // A group header: os-release has none; later groups are not read by qemu-ga's lookups.
            return Some(map);
        }
        let (k, v) = line.split_once('=')?;
        let key = k.trim_end();
        if key.is_empty() {
            return None;
        }
        map.insert(key.to_owned(), v.trim_start().to_owned());
    }
    Some(map)
}

/// qemu-ga's `ga_osrelease_replace_special`: unquoted values end at the first space or ';'; double-quoted values
/// have `\$ \' \" \\ \`` unescaped and end at the closing quote. (Single quotes get no special treatment, exactly
/// like qemu-ga.)
pub fn unquote(value: &str) -> String {
    let mut chars = value.chars();
    if !value.starts_with('"') {
        let end = value.find([' ', ';']).unwrap_or(value.len());
        return value[..end].to_owned();
    }
    chars.next();
    let mut out = String::new();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                let mut look = chars.clone();
                match look.next() {
                    Some(n @ ('$' | '\'' | '"' | '\\' | '`')) => {
                        out.push(n);
                        chars = look;
                    }
                    _ => out.push('\\'),
                }
            }
            '"' => break,
            c => out.push(c),
        }
    }
    out
}

fn read_release(path: &Path) -> Option<HashMap<String, String>> {
    let bytes = std::fs::read(path).ok()?;
    let text = String::from_utf8(bytes).ok()?;
    parse_os_release(&text)
}

/// `guest-get-osinfo`.
pub fn get_osinfo() -> Value {
    let mut m = Map::new();
    if let Ok(u) = nix::sys::utsname::uname() {
        m.insert(
            "kernel-release".into(),
            u.release().to_string_lossy().into(),
        );
        m.insert(
            "kernel-version".into(),
            u.version().to_string_lossy().into(),
        );
        m.insert("machine".into(), u.machine().to_string_lossy().into());
    }
    let release = match std::env::var_os("QGA_OS_RELEASE") {
        Some(p) => read_release(Path::new(&p)),
        None => read_release(Path::new("/etc/os-release"))
            .or_else(|| read_release(Path::new("/usr/lib/os-release"))),
    };
    if let Some(r) = release {
        fill_release(&mut m, &r);
    }
    Value::Object(m)
}

fn fill_release(m: &mut Map<String, Value>, r: &HashMap<String, String>) {
    for (field, key) in [
        ("id", "ID"),
        ("name", "NAME"),
        ("pretty-name", "PRETTY_NAME"),
        ("version", "VERSION"),
        ("version-id", "VERSION_ID"),
        ("variant", "VARIANT"),
        ("variant-id", "VARIANT_ID"),
    ] {
        if let Some(v) = r.get(key) {
            m.insert(field.into(), Value::String(unquote(v)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// upstream tests/data/test-qga-os-release
    const FIXTURE: &str = "ID=qemu-ga-test\nNAME=QEMU-GA\nPRETTY_NAME=\"QEMU Guest Agent test\"\nVERSION=\"Test 1\"\nVERSION_ID=1\nVARIANT=\"Unit test \\\"\\'\\$\\`\\\\ and \\\\\\\\ etc.\"\nVARIANT_ID=unit-test\n";

    #[test]
    fn upstream_fixture() {
        let r = parse_os_release(FIXTURE).unwrap();
        let mut m = Map::new();
        fill_release(&mut m, &r);
        assert_eq!(m["id"], "qemu-ga-test");
        assert_eq!(m["name"], "QEMU-GA");
        assert_eq!(m["pretty-name"], "QEMU Guest Agent test");
        assert_eq!(m["version"], "Test 1");
        assert_eq!(m["version-id"], "1");
        assert_eq!(m["variant"], "Unit test \"'$`\\ and \\\\ etc.");
        assert_eq!(m["variant-id"], "unit-test");
    }

    #[test]
    fn unquoting_rules() {
        assert_eq!(unquote("plain value;x"), "plain");
        assert_eq!(unquote("a;b"), "a");
        assert_eq!(unquote("\"x\\ny\""), "x\\ny");
        assert_eq!(unquote("\"open"), "open");
        assert_eq!(unquote("'single quoted'"), "'single");
        assert!(parse_os_release("no equals sign\n").is_none());
        assert!(parse_os_release("# c\n\nA = b \n").unwrap()["A"] == "b ");
    }

    #[test]
    fn real_machine_and_env_override() {
        let v = get_osinfo();
        assert!(!v["kernel-release"].as_str().unwrap().is_empty());
        assert!(!v["machine"].as_str().unwrap().is_empty());
        if Path::new("/etc/os-release").exists() {
            assert!(v["id"].is_string());
        }
    }
}
