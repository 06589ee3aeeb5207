//! Every case of QEMU's `tests/unit/test-qga.c` (docs/protocol/qga.md#upstream-test-suite), run against qemu-ga
//! (validating the test) and guestlinkd. The gaps beyond upstream's suite live in `qga_conformance_gaps.rs`.
//!
//! Run: `cargo test -p tests --test qga_conformance` (`-- qemu_ga` / `-- guestlinkd` for one agent).
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test target: unwrap is how a set-up step fails

use std::time::Duration;

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use guestlink_tests::client::random_u32;
use guestlink_tests::qga_agent::{dump_config, supports_allow_rpcs};
use guestlink_tests::{both_agents, error_of, Client, QgaAgent, QgaAgentKind};
use serde_json::{json, Value};

/// Starts `kind` with extra args and connects; `None` = skipped (reference peer missing).
fn setup(kind: QgaAgentKind, args: &[&str]) -> Option<(QgaAgent, Client)> {
    let mut agent = QgaAgent::start(kind, args)?;
    let client = agent.connect();
    Some((agent, client))
}

fn finish(agent: QgaAgent, client: Client) {
    drop(client);
    agent.stop();
}

/// Polls guest-exec-status until `exited` (≤ 30 s); returns the final status.
fn exec_wait(c: &mut Client, pid: &Value) -> Value {
    c.exec_wait(pid, Duration::from_secs(30))
}

fn b64(v: &Value) -> Vec<u8> {
    B64.decode(
        v.as_str()
            .unwrap_or_else(|| panic!("not a base64 string: {v}")),
    )
    .expect("valid base64")
}

both_agents! {
    fn sync_delimited(kind) {
        let Some((agent, mut c)) = setup(kind, &[]) else { return };
        // Raw 0xFF first, then guest-sync-delimited with a random id; garbage before the 0xFF reply is allowed,
        // but it may only be id-less error replies (qemu-ga: one "stray" error for the 0xFF).
        let skipped = c.sync();
        for line in skipped.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
            let v: Value = serde_json::from_slice(line).expect("noise before 0xFF is JSON");
            let (class, desc) = error_of(&v).expect("noise is an error reply");
            assert_eq!(class, "GenericError");
            assert!(desc.starts_with("JSON parse error"), "{desc}");
            assert!(v.get("id").is_none());
        }
        finish(agent, c);
    }
}

both_agents! {
    fn sync(kind) {
        let Some((agent, mut c)) = setup(kind, &[]) else { return };
        let id = random_u32();
        assert_eq!(c.ok("guest-sync", Some(json!({"id": id}))), json!(id));
        finish(agent, c);
    }
}

both_agents! {
    fn ping(kind) {
        let Some((agent, mut c)) = setup(kind, &[]) else { return };
        assert_eq!(c.ok("guest-ping", None), json!({}));
        finish(agent, c);
    }
}

both_agents! {
    fn info(kind) {
        let Some((agent, mut c)) = setup(kind, &[]) else { return };
        let info = c.ok("guest-info", None);
        let version = info["version"].as_str().expect("version string");
        match kind {
            // upstream asserts version == QEMU_VERSION: the plain version, e.g. "7.2.22"
            QgaAgentKind::QemuGa => {
                let out = std::process::Command::new(guestlink_tests::qga_agent::qemu_ga_path().expect("qemu-ga"))
                    .arg("-V").output().expect("qemu-ga -V");
                let text = String::from_utf8_lossy(&out.stdout).to_string();
                assert!(text.contains(&format!("QEMU Guest Agent {version}")), "{text:?} vs {version}");
            }
            // deliberate: guestlinkd reports its own version, still a plain dotted number
            QgaAgentKind::Guestlinkd => assert!(
                !version.is_empty() && version.split('.').all(|p| p.parse::<u32>().is_ok()),
                "version {version:?}"
            ),
        }
        finish(agent, c);
    }
}

both_agents! {
    fn network_get_interfaces(kind) {
        let Some((agent, mut c)) = setup(kind, &[]) else { return };
        let r = c.ok("guest-network-get-interfaces", None);
        assert!(r[0]["name"].is_string(), "{r}");
        finish(agent, c);
    }
}

both_agents! {
    fn get_vcpus(kind) {
        if !std::path::Path::new("/sys/devices/system/cpu/cpu0").exists() {
            return;
        }
        let Some((agent, mut c)) = setup(kind, &[]) else { return };
        let r = c.ok("guest-get-vcpus", None);
        assert!(r[0]["online"].is_boolean() && r[0]["logical-id"].is_i64(), "{r}");
        finish(agent, c);
    }
}

both_agents! {
    fn get_fsinfo(kind) {
        let Some((agent, mut c)) = setup(kind, &[]) else { return };
        let r = c.ok("guest-get-fsinfo", None);
        if let Some(first) = r.as_array().and_then(|a| a.first()) {
            for k in ["name", "mountpoint", "type", "disk"] {
                assert!(first.get(k).is_some(), "fsinfo lacks {k}: {first}");
            }
        }
        finish(agent, c);
    }
}

both_agents! {
    fn get_load(kind) {
        let Some((agent, mut c)) = setup(kind, &[]) else { return };
        let info = c.ok("guest-info", None);
        let listed = info["supported_commands"].as_array().expect("list").iter().any(|e| e["name"] == "guest-get-load");
        // guest-get-load is new in QEMU 10.0: Debian's 7.2 lacks it; guestlinkd implements the latest schema.
        assert_eq!(listed, kind == QgaAgentKind::Guestlinkd, "guest-get-load listed");
        if listed {
            let r = c.ok("guest-get-load", None);
            for k in ["load1m", "load5m", "load15m"] {
                assert!(r[k].is_number(), "{k} in {r}");
            }
        } else {
            let (class, desc) = c.err("guest-get-load", None);
            assert_eq!((class.as_str(), desc.as_str()), ("CommandNotFound", "The command guest-get-load has not been found"));
        }
        finish(agent, c);
    }
}

both_agents! {
    fn get_memory_block_info(kind) {
        let Some((agent, mut c)) = setup(kind, &[]) else { return };
        let r = c.call("guest-get-memory-block-info", None);
        if r.get("error").is_none() {
            assert!(r["return"]["size"].as_u64().unwrap_or(0) > 0, "{r}");
        }
        finish(agent, c);
    }
}

both_agents! {
    fn get_memory_blocks(kind) {
        let Some((agent, mut c)) = setup(kind, &[]) else { return };
        let r = c.call("guest-get-memory-blocks", None);
        if let Some(first) = r.get("return").and_then(|v| v.as_array()).and_then(|a| a.first()) {
            assert!(first["phys-index"].is_u64() && first["online"].is_boolean(), "{first}");
        }
        finish(agent, c);
    }
}

const HELLO: &[u8] = b"Hello World!\n\0";

both_agents! {
    fn file_ops(kind) {
        let Some((agent, mut c)) = setup(kind, &[]) else { return };
        let path = agent.scratch().join("foo");
        let p = path.to_str().expect("utf-8 path");
        let h = c.ok("guest-file-open", Some(json!({"path": p, "mode": "w+"})));
        assert!(h.as_i64().unwrap_or(0) >= 1000, "handle {h}");
        let w = c.ok("guest-file-write", Some(json!({"handle": h, "buf-b64": B64.encode(HELLO)})));
        assert_eq!(w, json!({"count": 14, "eof": false}));
        assert_eq!(c.ok("guest-file-flush", Some(json!({"handle": h}))), json!({}));
        assert_eq!(c.ok("guest-file-close", Some(json!({"handle": h}))), json!({}));
        assert_eq!(std::fs::read(&path).expect("file on disk"), HELLO);

        let h = c.ok("guest-file-open", Some(json!({"path": p, "mode": "r"})));
        let r = c.ok("guest-file-read", Some(json!({"handle": h})));
        assert_eq!(r, json!({"count": 14, "buf-b64": B64.encode(HELLO), "eof": true}));
        let r = c.ok("guest-file-read", Some(json!({"handle": h})));
        assert_eq!(r, json!({"count": 0, "buf-b64": "", "eof": true}));
        let s = c.ok("guest-file-seek", Some(json!({"handle": h, "offset": 6, "whence": "set"})));
        assert_eq!(s, json!({"position": 6, "eof": false}));
        let r = c.ok("guest-file-read", Some(json!({"handle": h})));
        assert_eq!(r, json!({"count": 8, "buf-b64": B64.encode(&HELLO[6..]), "eof": true}));
        assert_eq!(c.ok("guest-file-close", Some(json!({"handle": h}))), json!({}));
        finish(agent, c);
    }
}

both_agents! {
    fn file_write_read(kind) {
        let Some((agent, mut c)) = setup(kind, &[]) else { return };
        let p = agent.scratch().join("foo").to_str().expect("utf-8").to_string();
        let h = c.ok("guest-file-open", Some(json!({"path": p, "mode": "w+"})));
        let w = c.ok("guest-file-write", Some(json!({"handle": h, "buf-b64": B64.encode(HELLO)})));
        assert_eq!(w, json!({"count": 14, "eof": false}));
        // read after write without flush: implicit flush, position at the end
        let r = c.ok("guest-file-read", Some(json!({"handle": h})));
        assert_eq!(r, json!({"count": 0, "buf-b64": "", "eof": true}));
        let s = c.ok("guest-file-seek", Some(json!({"handle": h, "offset": 0, "whence": "set"})));
        assert_eq!(s, json!({"position": 0, "eof": false}));
        let r = c.ok("guest-file-read", Some(json!({"handle": h})));
        assert_eq!(r, json!({"count": 14, "buf-b64": B64.encode(HELLO), "eof": true}));
        c.ok("guest-file-close", Some(json!({"handle": h})));
        finish(agent, c);
    }
}

both_agents! {
    fn get_time(kind) {
        let Some((agent, mut c)) = setup(kind, &[]) else { return };
        let t = c.ok("guest-get-time", None).as_i64().expect("int");
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock").as_nanos() as i64;
        assert!(t > 0 && (now - t).abs() < 60_000_000_000, "get-time {t} vs now {now}");
        finish(agent, c);
    }
}

both_agents! {
    fn id(kind) {
        let Some((agent, mut c)) = setup(kind, &[]) else { return };
        c.send(&json!({"execute": "guest-ping", "id": 1}));
        assert_eq!(c.recv(), json!({"return": {}, "id": 1}));
        finish(agent, c);
    }
}

both_agents! {
    fn invalid_oob(kind) {
        let Some((agent, mut c)) = setup(kind, &[]) else { return };
        c.send_raw(b"{'exec-oob':'guest-ping'}");
        let (class, desc) = error_of(&c.recv()).expect("error");
        assert_eq!(class, "GenericError");
        assert_eq!(desc, "QMP input member 'exec-oob' is unexpected");
        c.ping();
        finish(agent, c);
    }
}

both_agents! {
    fn invalid_cmd(kind) {
        let Some((agent, mut c)) = setup(kind, &[]) else { return };
        let (class, desc) = c.err("guest-invalid-cmd", None);
        assert_eq!(class, "CommandNotFound");
        assert_eq!(desc, "The command guest-invalid-cmd has not been found");
        finish(agent, c);
    }
}

both_agents! {
    fn invalid_args(kind) {
        let Some((agent, mut c)) = setup(kind, &[]) else { return };
        let (class, desc) = c.err("guest-ping", Some(json!({"foo": 42})));
        assert_eq!((class.as_str(), desc.as_str()), ("GenericError", "Parameter 'foo' is unexpected"));
        finish(agent, c);
    }
}

both_agents! {
    fn fsfreeze_status(kind) {
        let Some((agent, mut c)) = setup(kind, &[]) else { return };
        assert_eq!(c.ok("guest-fsfreeze-status", None), json!("thawed"));
        finish(agent, c);
    }
}

fn assert_disabled(c: &mut Client, cmd: &str, reason: Option<&str>) {
    let (class, desc) = c.err(cmd, None);
    assert_eq!(class, "CommandNotFound", "{cmd}: {desc}");
    assert!(desc.contains("has been disabled"), "{cmd}: {desc}");
    // qemu-ga 7.2 gives no reason; latest upstream appends ": <reason>" for frozen/allow-list
    if let Some(reason) = reason {
        let base = format!("Command {cmd} has been disabled");
        assert!(
            desc == base || desc == format!("{base}: {reason}"),
            "{cmd}: {desc}"
        );
    }
}

both_agents! {
    fn blockedrpcs(kind) {
        let Some((agent, mut c)) = setup(kind, &["-b", "guest-ping,guest-get-time"]) else { return };
        for cmd in ["guest-ping", "guest-get-time"] {
            let (class, desc) = c.err(cmd, None);
            assert_eq!((class.as_str(), desc), ("CommandNotFound", format!("Command {cmd} has been disabled")));
        }
        c.ok("guest-get-fsinfo", None);
        finish(agent, c);
    }
}

both_agents! {
    fn allowedrpcs(kind) {
        if !supports_allow_rpcs(kind) {
            // Not a missing peer: this qemu-ga predates the option, so there is nothing to compare.
            eprintln!("[n/a] {}: no -a/--allow-rpcs (added in QEMU 8.1)", kind.name());
            return;
        }
        let Some(mut agent) = QgaAgent::builder(kind).allow("guest-ping,guest-get-time").start() else { return };
        // everything outside the list is disabled, guest-sync-delimited and guest-info included (upstream
        // ga_command_is_allowed), so no 0xFF reset here
        let mut c = agent.connect_raw();
        c.ping();
        c.ok("guest-get-time", None);
        assert_disabled(&mut c, "guest-get-fsinfo", Some("the command is not allowed"));
        assert_disabled(&mut c, "guest-sync-delimited", Some("the command is not allowed"));
        finish(agent, c);
    }
}

/// Upstream's `tests/data/test-qga-config`, with a GLib-style `;` list (see qga_conformance_gaps for its effect).
const TEST_CONFIG: &str = "[general]\ndaemon=false\nmethod=virtio-serial\npath=/path/to/org.qemu.guest_agent.0\n\
pidfile=/var/foo/qemu-ga.pid\nstatedir=/var/state\nverbose=true\nblock-rpcs=guest-ping;guest-get-time\n";

both_agents! {
    fn config_dump(kind) {
        let Some(out) = dump_config(kind, TEST_CONFIG, &[]) else { return };
        assert!(out.status.success(), "-D exit {}: {}", out.status, String::from_utf8_lossy(&out.stderr));
        assert_eq!(String::from_utf8_lossy(&out.stderr), "", "stderr must be empty");
        let text = String::from_utf8(out.stdout).expect("utf-8");
        assert!(text.starts_with("[general]\n"), "{text}");
        let kv: std::collections::BTreeMap<&str, &str> = text.lines().filter_map(|l| l.split_once('=')).collect();
        for (k, v) in [("daemon", "false"), ("method", "virtio-serial"), ("path", "/path/to/org.qemu.guest_agent.0"),
            ("pidfile", "/var/foo/qemu-ga.pid"), ("statedir", "/var/state"), ("verbose", "true")] {
            assert_eq!(kv.get(k), Some(&v), "{k} in {text}");
        }
        let list: Vec<&str> = kv.get("block-rpcs").expect("block-rpcs").split(';').collect();
        assert!(list.contains(&"guest-ping") && list.contains(&"guest-get-time"), "{text}");
    }
}

both_agents! {
    fn guest_exec(kind) {
        let Some((agent, mut c)) = setup(kind, &[]) else { return };
        let r = c.ok("guest-exec", Some(json!({"path": "echo", "arg": ["-n", "\" test_str \""], "capture-output": true})));
        assert!(r["pid"].as_i64().unwrap_or(0) > 0, "{r}");
        let st = exec_wait(&mut c, &r["pid"]);
        assert_eq!(st["exitcode"], json!(0), "{st}");
        assert_eq!(b64(&st["out-data"]), b"\" test_str \"");
        finish(agent, c);
    }
}

const ALTERNATE: &str =
    "for i in $(seq 4); do if (( $i % 2 )); then echo stdout; else echo stderr 1>&2; fi; done;";

both_agents! {
    fn guest_exec_separated(kind) {
        let Some((agent, mut c)) = setup(kind, &[]) else { return };
        let mut args = json!({"path": "bash", "arg": ["-c", ALTERNATE], "capture-output": "separated"});
        let mut r = c.call("guest-exec", Some(args.clone()));
        if kind == QgaAgentKind::QemuGa && error_of(&r).is_some_and(|(_, d)| d.contains("expected: boolean")) {
            // capture modes are new in 8.0; 7.2 has only the boolean (true ≡ "separated")
            args["capture-output"] = json!(true);
            r = c.call("guest-exec", Some(args));
        }
        assert!(r.get("return").is_some(), "guest-exec: {r}");
        let st = exec_wait(&mut c, &r["return"]["pid"]);
        assert_eq!(b64(&st["out-data"]), b"stdout\nstdout\n", "{st}");
        assert_eq!(b64(&st["err-data"]), b"stderr\nstderr\n", "{st}");
        finish(agent, c);
    }
}

both_agents! {
    fn guest_exec_merged(kind) {
        let Some((agent, mut c)) = setup(kind, &[]) else { return };
        let r = c.call("guest-exec", Some(json!({"path": "bash", "arg": ["-c", ALTERNATE], "capture-output": "merged"})));
        if kind == QgaAgentKind::QemuGa && error_of(&r).is_some_and(|(_, d)| d.contains("expected: boolean")) {
            eprintln!("[n/a] qemu-ga: capture-output modes need QEMU 8.0");
            finish(agent, c);
            return;
        }
        assert!(r.get("return").is_some(), "guest-exec: {r}");
        let st = exec_wait(&mut c, &r["return"]["pid"]);
        assert_eq!(b64(&st["out-data"]), b"stdout\nstderr\nstdout\nstderr\n", "{st}");
        assert!(st.get("err-data").is_none(), "{st}");
        finish(agent, c);
    }
}

both_agents! {
    fn guest_exec_invalid(kind) {
        let Some((agent, mut c)) = setup(kind, &[]) else { return };
        let (class, desc) = c.err("guest-exec", Some(json!({"path": "/bin/invalid-cmd42"})));
        assert_eq!(class, "GenericError");
        assert!(!desc.is_empty());
        let (class, desc) = c.err("guest-exec-status", Some(json!({"pid": 0})));
        assert_eq!(class, "GenericError");
        assert!(!desc.is_empty());
        finish(agent, c);
    }
}

/// Upstream's `tests/data/test-qga-os-release`.
const OS_RELEASE: &str =
    "ID=qemu-ga-test\nNAME=QEMU-GA\nPRETTY_NAME=\"QEMU Guest Agent test\"\nVERSION=\"Test 1\"\n\
VERSION_ID=1\nVARIANT=\"Unit test \\\"\\'\\$\\`\\\\ and \\\\\\\\ etc.\"\nVARIANT_ID=unit-test\n";

both_agents! {
    fn guest_get_osinfo(kind) {
        let dir = tempfile::tempdir().expect("tmp");
        let path = dir.path().join("os-release");
        std::fs::write(&path, OS_RELEASE).expect("write");
        let Some(mut agent) = QgaAgent::builder(kind).env("QGA_OS_RELEASE", path.to_str().expect("utf-8")).start() else { return };
        let mut c = agent.connect();
        let r = c.ok("guest-get-osinfo", None);
        let want = [("id", "qemu-ga-test"), ("name", "QEMU-GA"), ("pretty-name", "QEMU Guest Agent test"),
            ("version", "Test 1"), ("version-id", "1"), ("variant", "Unit test \"'$`\\ and \\\\ etc."),
            ("variant-id", "unit-test")];
        for (k, v) in want {
            assert_eq!(r[k], json!(v), "{k} in {r}");
        }
        for k in ["kernel-release", "kernel-version", "machine"] {
            assert!(r[k].is_string(), "{k} in {r}");
        }
        finish(agent, c);
    }
}

both_agents! {
    fn guest_get_host_name(kind) {
        let Some((agent, mut c)) = setup(kind, &[]) else { return };
        assert!(c.ok("guest-get-host-name", None)["host-name"].is_string());
        finish(agent, c);
    }
}

both_agents! {
    fn guest_get_timezone(kind) {
        let Some((agent, mut c)) = setup(kind, &[]) else { return };
        assert!(c.ok("guest-get-timezone", None)["offset"].is_i64());
        finish(agent, c);
    }
}

both_agents! {
    fn guest_get_users(kind) {
        let Some((agent, mut c)) = setup(kind, &[]) else { return };
        assert!(c.ok("guest-get-users", None).is_array());
        finish(agent, c);
    }
}
