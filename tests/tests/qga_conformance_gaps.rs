//! Wire behaviour beyond upstream's test-qga.c (docs/protocol/qga.md#gaps-the-upstream-suite-leaves): framing,
//! resets, limits, handle persistence, the 48 MiB read cap, exec truncation, the frozen allow-list, config-file
//! block lists, guest-info, malformed requests and id echo. Each runs against qemu-ga and guestlinkd.
//!
//! Run: `cargo test -p tests --test qga_conformance_gaps` (`-- qemu_ga` / `-- guestlinkd`).
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test target: unwrap is how a set-up step fails

use std::time::Duration;

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use guestlink_tests::qga_agent::DANGEROUS;
use guestlink_tests::{both_agents, error_of, Client, QgaAgent, QgaAgentKind};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

fn setup(kind: QgaAgentKind) -> Option<(QgaAgent, Client)> {
    let mut agent = QgaAgent::start(kind, &[])?;
    let client = agent.connect();
    Some((agent, client))
}

fn finish(agent: QgaAgent, client: Client) {
    drop(client);
    agent.stop();
}

fn desc_of(v: &Value) -> String {
    error_of(v)
        .unwrap_or_else(|| panic!("expected an error reply: {v}"))
        .1
}

both_agents! {
    /// A lone 0xFF (no guest-sync) resets a half-received request; qemu-ga answers the 0xFF itself with one
    /// id-less "stray" error, then parsing resumes.
    fn ff_only_reset(kind) {
        let Some((agent, mut c)) = setup(kind) else { return };
        c.send_raw(b"{\"execute\":\"guest-ping\",\"arguments\":{\"x\":[1,");
        c.send_raw(b"\xff{\"execute\":\"guest-ping\",\"id\":\"after\"}");
        loop {
            let r = c.recv();
            if r.get("id").is_some() {
                assert_eq!(r, json!({"return": {}, "id": "after"}));
                break;
            }
            let (class, desc) = error_of(&r).expect("only error noise before the reply");
            assert_eq!(class, "GenericError");
            assert_eq!(desc, "JSON parse error, stray '\u{FFFD}'", "noise for the 0xFF");
        }
        c.ping();
        finish(agent, c);
    }
}

both_agents! {
    fn pipelining(kind) {
        let Some((agent, mut c)) = setup(kind) else { return };
        c.send_raw(br#"{"execute":"guest-ping"}{"execute":"guest-ping","id":2}{"execute":"guest-sync","arguments":{"id":3}}"#);
        assert_eq!(c.recv(), json!({"return": {}}));
        assert_eq!(c.recv(), json!({"return": {}, "id": 2}));
        assert_eq!(c.recv(), json!({"return": 3}));
        finish(agent, c);
    }
}

both_agents! {
    /// A request split byte by byte is answered once, as soon as its closing brace arrives (no newline needed).
    fn byte_by_byte(kind) {
        let Some((agent, mut c)) = setup(kind) else { return };
        let req = br#"{"execute": "guest-sync", "arguments": {"id": 77}, "id": "bytes"}"#;
        for b in &req[..req.len() - 1] {
            c.send_raw(std::slice::from_ref(b));
        }
        c.expect_silence(Duration::from_millis(300));
        c.send_raw(b"}");
        assert_eq!(c.recv(), json!({"return": 77, "id": "bytes"}));
        finish(agent, c);
    }
}

both_agents! {
    /// Parser state across connections. qemu-ga keeps it (the half request of client A swallows client B's
    /// first bytes), which is why clients start with 0xFF. guestlinkd may do the same (virtio-serial has no
    /// connections) or reset per unix connection; either is accepted, anything else fails, and the outcome is
    /// printed.
    fn parser_state_across_connections(kind) {
        let Some(mut agent) = QgaAgent::start(kind, &[]) else { return };
        let mut a = agent.connect();
        a.send_raw(br#"{"execute":"guest-ping","id":"from-A","arguments":"#);
        drop(a);
        let mut b = Client::connect(&agent.sock, Duration::from_secs(10)).expect("second connection");
        b.send_raw(b"{}}");
        let first = b.recv();
        let carried = first == json!({"return": {}, "id": "from-A"});
        match kind {
            QgaAgentKind::QemuGa => assert!(carried, "qemu-ga is known to carry parser state: {first}"),
            QgaAgentKind::Guestlinkd if carried => {}
            QgaAgentKind::Guestlinkd => {
                assert_eq!(desc_of(&first), "QMP input lacks member 'execute'", "fresh parser: {first}");
                assert_eq!(desc_of(&b.recv()), "JSON parse error, expecting value");
            }
        }
        eprintln!("{}: parser state across connections {}", kind.name(), if carried { "CARRIED" } else { "RESET" });
        b.sync();
        b.ping();
        finish(agent, b);
    }
}

fn nested(depth: usize) -> Vec<u8> {
    let mut v = vec![b'['; depth];
    v.extend(std::iter::repeat_n(b']', depth));
    v
}

both_agents! {
    /// Nesting depth: 1023 and 1024 levels parse, 1025 is rejected; the agent keeps serving.
    fn nesting_limit(kind) {
        let Some((agent, mut c)) = setup(kind) else { return };
        for depth in [1023, 1024] {
            c.send_raw(&nested(depth));
            assert_eq!(desc_of(&c.recv()), "QMP input must be a JSON object", "depth {depth}");
        }
        // inside a request: 2 levels of envelope + 1021 = 1023
        let mut req = br#"{"execute":"guest-ping","arguments":{"a":"#.to_vec();
        req.extend(nested(1021));
        req.extend(b"}}");
        c.send_raw(&req);
        assert_eq!(desc_of(&c.recv()), "Parameter 'a' is unexpected");
        c.send_raw(&nested(1025));
        assert_eq!(desc_of(&c.recv()), "JSON nesting depth limit exceeded");
        c.sync();
        c.ping();
        finish(agent, c);
    }
}

both_agents! {
    /// A token beyond 64 MiB is rejected with QEMU's text; after a 0xFF reset the agent serves again.
    fn token_size_limit(kind) {
        let Some((agent, mut c)) = setup(kind) else { return };
        let mut req = br#"{"execute":"guest-ping","arguments":{"x":""#.to_vec();
        req.extend(std::iter::repeat_n(b'A', 64 * 1024 * 1024 + 16));
        req.extend(b"\"}}");
        let mut w = c.try_clone_writer();
        let sender = std::thread::spawn(move || {
            use std::io::Write;
            w.write_all(&req).expect("send the big request");
        });
        assert_eq!(desc_of(&c.recv()), "JSON token size limit exceeded");
        sender.join().expect("sender");
        c.sync();
        c.ping();
        finish(agent, c);
    }
}

both_agents! {
    /// Handles start at ≥ 1000, increase, and keep increasing across a restart on the same statedir.
    fn file_handles_persist(kind) {
        let state = tempfile::tempdir().expect("statedir");
        let Some(mut agent) = QgaAgent::builder(kind).statedir(state.path()).start() else { return };
        let mut c = agent.connect();
        let h1 = c.ok("guest-file-open", Some(json!({"path": "/etc/hostname"}))).as_i64().expect("int");
        let h2 = c.ok("guest-file-open", Some(json!({"path": "/etc/hostname"}))).as_i64().expect("int");
        assert!(h1 >= 1000 && h2 > h1, "{h1} {h2}");
        finish(agent, c);
        let mut agent = QgaAgent::builder(kind).statedir(state.path()).start().expect("restart");
        let mut c = agent.connect();
        let h3 = c.ok("guest-file-open", Some(json!({"path": "/etc/hostname"}))).as_i64().expect("int");
        assert!(h3 > h2, "handle after restart {h3} must exceed {h2}");
        let (_, desc) = c.err("guest-file-close", Some(json!({"handle": h1})));
        assert_eq!(desc, format!("handle '{h1}' has not been found"), "old handles are gone");
        finish(agent, c);
    }
}

const MAX_READ: usize = 48 * 1024 * 1024;

both_agents! {
    /// count = 48 MiB is accepted (and the data is right); 48 MiB + 1 and -1 are rejected with QEMU's text.
    fn read_count_boundary(kind) {
        let Some((agent, mut c)) = setup(kind) else { return };
        let path = agent.scratch().join("big");
        let data: Vec<u8> = (0..MAX_READ + 4096).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
        std::fs::write(&path, &data).expect("write big file");
        let h = c.ok("guest-file-open", Some(json!({"path": path.to_str().expect("utf-8")})));
        for bad in [MAX_READ as i64 + 1, -1] {
            let (class, desc) = c.err("guest-file-read", Some(json!({"handle": h, "count": bad})));
            assert_eq!((class.as_str(), desc), ("GenericError", format!("value '{bad}' is invalid for argument count")));
        }
        let r = c.ok("guest-file-read", Some(json!({"handle": h, "count": MAX_READ})));
        assert_eq!(r["count"], json!(MAX_READ));
        assert_eq!(r["eof"], json!(false));
        let got = B64.decode(r["buf-b64"].as_str().expect("b64")).expect("base64");
        assert_eq!(Sha256::digest(&got), Sha256::digest(&data[..MAX_READ]), "48 MiB content");
        let r = c.ok("guest-file-read", Some(json!({"handle": h, "count": MAX_READ})));
        assert_eq!((r["count"].clone(), r["eof"].clone()), (json!(4096), json!(true)));
        c.ok("guest-file-close", Some(json!({"handle": h})));
        finish(agent, c);
    }
}

/// Polls guest-exec-status until `exited` (≤ 60 s); returns the final status.
fn exec_wait(c: &mut Client, pid: &Value) -> Value {
    c.exec_wait(pid, Duration::from_secs(60))
}

both_agents! {
    /// Captured output is capped at 16 MiB per stream with `out-truncated: true`; small output is not truncated.
    fn exec_output_truncation(kind) {
        let Some((agent, mut c)) = setup(kind) else { return };
        let r = c.ok("guest-exec", Some(json!({"path": "head", "arg": ["-c", "20000000", "/dev/zero"], "capture-output": true})));
        let st = exec_wait(&mut c, &r["pid"]);
        assert_eq!(st["exitcode"], json!(0));
        assert_eq!(st["out-truncated"], json!(true), "{}", st["out-truncated"]);
        let out = B64.decode(st["out-data"].as_str().expect("out-data")).expect("b64");
        assert_eq!(out.len(), 16 * 1024 * 1024);
        let r = c.ok("guest-exec", Some(json!({"path": "echo", "arg": ["x"], "capture-output": true})));
        let st = exec_wait(&mut c, &r["pid"]);
        assert_eq!(st, json!({"exitcode": 0, "out-data": "eAo=", "out-truncated": false, "exited": true}));
        finish(agent, c);
    }
}

const FROZEN_ALLOWED: &[&str] = &[
    "guest-ping",
    "guest-info",
    "guest-sync",
    "guest-sync-delimited",
    "guest-fsfreeze-status",
    "guest-fsfreeze-thaw",
];

both_agents! {
    /// A pre-created `qga.state.isfrozen` makes the agent start "frozen" (no FIFREEZE is ever issued): only the
    /// allow-list runs. guest-fsfreeze-thaw stays blocked by the safety block list, so no agent can touch the
    /// host's filesystems; the agent is stopped with SIGKILL.
    fn frozen_allow_list(kind) {
        // guestlinkd arms its auto-thaw watchdog (default 600 s) when it starts frozen: disable it so nothing
        // ever calls FITHAW on this host's filesystems.
        let extra: &[&str] = if kind == QgaAgentKind::Guestlinkd { &["--auto-thaw", "0"] } else { &[] };
        let Some(mut agent) = QgaAgent::builder(kind).frozen().args(extra).start() else { return };
        let mut c = agent.connect();
        assert_eq!(c.ok("guest-fsfreeze-status", None), json!("frozen"));
        c.ping();
        let info = c.ok("guest-info", None);
        for e in info["supported_commands"].as_array().expect("list") {
            let name = e["name"].as_str().expect("name");
            let want = FROZEN_ALLOWED.contains(&name) && !DANGEROUS.contains(&name);
            assert_eq!(e["enabled"], json!(want), "{name} enabled while frozen");
        }
        for cmd in ["guest-get-time", "guest-file-open", "guest-exec", "guest-get-osinfo"] {
            let (class, desc) = c.err(cmd, None);
            assert_eq!(class, "CommandNotFound");
            assert_eq!(desc, format!("Command {cmd} has been disabled: the agent is in frozen state"));
        }
        for cmd in ["guest-fsfreeze-thaw", "guest-fsfreeze-freeze"] {
            let (class, desc) = c.err(cmd, None);
            assert_eq!((class.as_str(), desc), ("CommandNotFound", format!("Command {cmd} has been disabled")));
        }
        assert!(agent.statedir.join("qga.state.isfrozen").exists(), "marker kept while frozen");
        drop(c);
        agent.stop();
    }
}

both_agents! {
    /// The config file's list separator is a comma; a GLib-style `a;b` list silently blocks nothing.
    fn config_block_list_separator(kind) {
        let Some(mut agent) = QgaAgent::builder(kind).config("block-rpcs=guest-ping;guest-get-time\n").start() else { return };
        let mut c = agent.connect();
        c.ping();
        c.ok("guest-get-time", None);
        finish(agent, c);
        let Some(mut agent) = QgaAgent::builder(kind).config("block-rpcs=guest-ping,guest-get-time\n").start() else { return };
        let mut c = agent.connect();
        for cmd in ["guest-ping", "guest-get-time"] {
            let (class, desc) = c.err(cmd, None);
            assert_eq!((class.as_str(), desc), ("CommandNotFound", format!("Command {cmd} has been disabled")));
        }
        c.ok("guest-get-host-name", None);
        finish(agent, c);
    }
}

/// The Linux commands Debian's qemu-ga 7.2 implements (42 minus the Windows-only guest-get-devices).
const LINUX_72: &[&str] = &[
    "guest-sync-delimited",
    "guest-sync",
    "guest-ping",
    "guest-get-time",
    "guest-set-time",
    "guest-info",
    "guest-shutdown",
    "guest-file-open",
    "guest-file-close",
    "guest-file-read",
    "guest-file-write",
    "guest-file-seek",
    "guest-file-flush",
    "guest-fsfreeze-status",
    "guest-fsfreeze-freeze",
    "guest-fsfreeze-freeze-list",
    "guest-fsfreeze-thaw",
    "guest-fstrim",
    "guest-suspend-disk",
    "guest-suspend-ram",
    "guest-suspend-hybrid",
    "guest-network-get-interfaces",
    "guest-get-vcpus",
    "guest-set-vcpus",
    "guest-get-disks",
    "guest-get-fsinfo",
    "guest-set-user-password",
    "guest-get-memory-blocks",
    "guest-set-memory-blocks",
    "guest-get-memory-block-info",
    "guest-exec",
    "guest-exec-status",
    "guest-get-host-name",
    "guest-get-users",
    "guest-get-timezone",
    "guest-get-osinfo",
    "guest-ssh-get-authorized-keys",
    "guest-ssh-add-authorized-keys",
    "guest-ssh-remove-authorized-keys",
    "guest-get-diskstats",
    "guest-get-cpustats",
];

both_agents! {
    /// guest-info lists every command once as {name, enabled, success-response}; only shutdown/suspend are
    /// no-response; blocked commands stay listed with enabled:false.
    fn guest_info_lists_everything(kind) {
        let Some((agent, mut c)) = setup(kind) else { return };
        let info = c.ok("guest-info", None);
        let list = info["supported_commands"].as_array().expect("list");
        let mut seen = std::collections::BTreeSet::new();
        for e in list {
            let keys: Vec<&String> = e.as_object().expect("object").keys().collect();
            assert_eq!(keys.len(), 3, "{e}");
            let name = e["name"].as_str().expect("name");
            assert!(seen.insert(name.to_string()), "{name} listed twice");
            let no_resp = name == "guest-shutdown" || name.starts_with("guest-suspend-");
            assert_eq!(e["success-response"], json!(!no_resp), "{e}");
            let enabled = !DANGEROUS.contains(&name) && name != "guest-get-devices";
            assert_eq!(e["enabled"], json!(enabled), "{e}");
        }
        for name in LINUX_72 {
            assert!(seen.contains(*name), "{name} missing from guest-info");
        }
        finish(agent, c);
    }
}

/// (raw request, expected id or None, expected desc of the first reply).
const MALFORMED: &[(&[u8], Option<i64>, &str)] = &[
    (
        b"garbage\n",
        None,
        "JSON parse error, invalid keyword 'garbage'",
    ),
    (b"}", None, "JSON parse error, expecting value"),
    (b"\"x\"\n", None, "QMP input must be a JSON object"),
    (b"[]", None, "QMP input must be a JSON object"),
    (b"{\"id\":3}", Some(3), "QMP input lacks member 'execute'"),
    (
        b"{\"execute\":1}",
        None,
        "QMP input member 'execute' must be a string",
    ),
    (
        b"{\"execute\":\"guest-ping\",\"arguments\":null}",
        None,
        "QMP input member 'arguments' must be an object",
    ),
    (
        b"{\"execute\":\"guest-ping\",\"arguments\":[]}",
        None,
        "QMP input member 'arguments' must be an object",
    ),
    (
        b"{\"execute\":\"guest-ping\",\"id\":1,\"foo\":2}",
        Some(1),
        "QMP input member 'foo' is unexpected",
    ),
    (
        b"{\"execute\":\"guest-ping\",\"execute\":\"guest-ping\"}",
        None,
        "JSON parse error, duplicate key",
    ),
    (
        b"{\"execute\":\"guest-sync\",\"arguments\":{\"id\":\"x\"}}",
        None,
        "Invalid parameter type for 'id', expected: integer",
    ),
    (
        b"{\"execute\":\"guest-sync\",\"arguments\":{\"id\":1.5}}",
        None,
        "Invalid parameter type for 'id', expected: integer",
    ),
    (
        b"{\"execute\":\"guest-sync\",\"arguments\":{\"id\":18446744073709551615}}",
        None,
        "Invalid parameter type for 'id', expected: integer",
    ),
    (
        b"{\"execute\":\"guest-sync\",\"arguments\":{}}",
        None,
        "Parameter 'id' is missing",
    ),
    (
        b"{\"execute\":\"guest-sync-delimited\",\"arguments\":{\"id\":true}}",
        None,
        "Invalid parameter type for 'id', expected: integer",
    ),
    (
        b"{\"execute\":\"guest-file-open\",\"arguments\":{\"path\":\"/x\",\"mode\":\"rw\"}}",
        None,
        "invalid file open mode 'rw'",
    ),
    (
        b"{\"execute\":\"guest-file-close\",\"arguments\":{\"handle\":999}}",
        None,
        "handle '999' has not been found",
    ),
    (
        b"{\"execute\":\"guest-ping\",\"id\":\"\x01\"}",
        None,
        "JSON parse error, stray '\"\u{1}'",
    ),
];

both_agents! {
    /// Malformed, mistyped and invalid requests get an error reply with QEMU's text, and the agent keeps serving.
    fn malformed_requests(kind) {
        let Some((agent, mut c)) = setup(kind) else { return };
        for (raw, id, desc) in MALFORMED {
            c.send_raw(raw);
            let r = c.recv();
            let shown = String::from_utf8_lossy(raw);
            assert_eq!(error_of(&r), Some(("GenericError".to_string(), desc.to_string())), "{shown}: {r}");
            assert_eq!(r.get("id").cloned(), id.map(|i| json!(i)), "{shown}: id of {r}");
            c.sync();
            c.ping();
        }
        // int64 bounds: −2^63 is accepted
        assert_eq!(c.ok("guest-sync", Some(json!({"id": i64::MIN}))), json!(i64::MIN));
        // single-quoted strings are a QEMU extension
        c.send_raw(b"{'execute':'guest-ping','id':'sq'}");
        assert_eq!(c.recv(), json!({"return": {}, "id": "sq"}));
        finish(agent, c);
    }
}

both_agents! {
    /// The id is echoed verbatim whatever its JSON type, on success and on error; non-ASCII as upper-case \uXXXX.
    fn id_echo_every_type(kind) {
        let Some((agent, mut c)) = setup(kind) else { return };
        let ids = [json!("s"), json!(0), json!(-7), json!(1.5), json!(true), json!(null), json!({"a": [1, null]}),
            json!([1, "x", {}]), json!(u64::MAX), json!("__qmp#00001")];
        for id in ids {
            c.send(&json!({"execute": "guest-ping", "id": id}));
            assert_eq!(c.recv(), json!({"return": {}, "id": id}));
            c.send(&json!({"execute": "guest-nonexistent", "id": id}));
            let r = c.recv();
            assert_eq!(r["id"], id, "{r}");
            assert_eq!(desc_of(&r), "The command guest-nonexistent has not been found");
        }
        c.send(&json!({"execute": "guest-ping", "id": "é€"}));
        let line = c.recv_line();
        let text = String::from_utf8(line).expect("ASCII reply");
        assert!(text.contains(r#""\u00E9\u20AC""#), "{text}");
        finish(agent, c);
    }
}

both_agents! {
    /// Files created by guest-file-open: qemu-ga fchmods them to 0666 regardless of umask (CVE-2013-2007
    /// lesson); guestlinkd deliberately creates them 0600 by default, and `--file-mode 0666` restores qemu-ga's
    /// behaviour. An existing file keeps its mode in both.
    fn created_file_mode(kind) {
        use std::os::unix::fs::PermissionsExt;
        let mode_of = |p: &std::path::Path| std::fs::metadata(p).expect("stat").permissions().mode() & 0o7777;
        let cases: &[(&[&str], u32)] = match kind {
            QgaAgentKind::QemuGa => &[(&[], 0o666)],
            QgaAgentKind::Guestlinkd => &[(&[], 0o600), (&["--file-mode", "0666"], 0o666)],
        };
        for (args, want) in cases {
            let Some(mut agent) = QgaAgent::start(kind, args) else { return };
            let mut c = agent.connect();
            let path = agent.scratch().join("created");
            let h = c.ok("guest-file-open", Some(json!({"path": path.to_str().expect("utf-8"), "mode": "w"})));
            c.ok("guest-file-close", Some(json!({"handle": h})));
            assert_eq!(mode_of(&path), *want, "{args:?}: mode {:o}", mode_of(&path));
            let existing = agent.scratch().join("existing");
            std::fs::write(&existing, b"x").expect("write");
            std::fs::set_permissions(&existing, std::fs::Permissions::from_mode(0o640)).expect("chmod");
            let h = c.ok("guest-file-open", Some(json!({"path": existing.to_str().expect("utf-8"), "mode": "a"})));
            c.ok("guest-file-close", Some(json!({"handle": h})));
            assert_eq!(mode_of(&existing), 0o640, "existing file keeps its mode");
            finish(agent, c);
        }
    }
}

/// The `[general]` group of a `-D` dump as key → value.
fn general_group(dump: &str) -> std::collections::BTreeMap<String, String> {
    let mut in_general = false;
    let mut map = std::collections::BTreeMap::new();
    for line in dump.lines() {
        if line.starts_with('[') {
            in_general = line == "[general]";
        } else if let (true, Some((k, v))) = (in_general, line.split_once('=')) {
            map.insert(k.to_string(), v.to_string());
        }
    }
    map
}

/// `-D` with the same command lines: guestlinkd's `[general]` group carries every key qemu-ga prints with the same
/// value (block-rpcs compared as a set: qemu-ga prints it reversed). Extra keys: only `allow-rpcs` (qemu-ga ≥ 8.1),
/// and only empty when no `-a` was given. guestlinkd's own settings live in a separate `[guestlink]` group.
#[test]
fn config_dump_matches_reference() {
    let arg_sets: &[&[&str]] = &[
        &[],
        &["-b", "guest-ping,guest-get-time"],
        &[
            "-v",
            "-m",
            "unix-listen",
            "-p",
            "/run/x.sock",
            "-t",
            "/run/st",
            "-f",
            "/run/p.pid",
            "-r",
        ],
    ];
    for args in arg_sets {
        let Some(reference) =
            guestlink_tests::qga_agent::dump_config(QgaAgentKind::QemuGa, "", args)
        else {
            return;
        };
        let ours = guestlink_tests::qga_agent::dump_config(QgaAgentKind::Guestlinkd, "", args)
            .expect("guestlinkd -D");
        assert!(
            ours.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&ours.stderr)
        );
        let (r, mut o) = (
            general_group(&String::from_utf8_lossy(&reference.stdout)),
            general_group(&String::from_utf8_lossy(&ours.stdout)),
        );
        if o.get("allow-rpcs").is_some_and(String::is_empty) && !r.contains_key("allow-rpcs") {
            o.remove("allow-rpcs");
        }
        let set = |m: &std::collections::BTreeMap<String, String>| {
            let mut v: Vec<String> = m
                .get("block-rpcs")
                .map(|s| s.split(',').map(String::from).collect())
                .unwrap_or_default();
            v.sort();
            v
        };
        assert_eq!(set(&r), set(&o), "{args:?}: block-rpcs");
        let strip = |mut m: std::collections::BTreeMap<String, String>| {
            m.remove("block-rpcs");
            m
        };
        assert_eq!(strip(r), strip(o), "{args:?}: [general] differs");
    }
}

both_agents! {
    /// A `-D` dump fed back as the config file reproduces the configuration (here: guest-ping blocked).
    fn config_dump_roundtrip(kind) {
        let Some(out) = guestlink_tests::qga_agent::dump_config(kind, "", &["-b", "guest-ping"]) else { return };
        assert!(out.status.success());
        let dump = String::from_utf8(out.stdout).expect("utf-8");
        let body = dump.strip_prefix("[general]\n").expect("dump starts with [general]");
        let mut agent = QgaAgent::builder(kind).config(body).start().expect("start with the dumped config");
        let mut c = agent.connect();
        let (class, desc) = c.err("guest-ping", None);
        assert_eq!((class.as_str(), desc.as_str()), ("CommandNotFound", "Command guest-ping has been disabled"));
        c.ok("guest-get-time", None);
        finish(agent, c);
    }
}

both_agents! {
    /// Proxmox's framing (QMPClient.pm): a fresh connection per command, sync-delimited and the command in one
    /// write without a leading 0xFF; the reply must be `\xff<sync reply>\n<command reply>\n`. libvirt's framing:
    /// plain guest-sync with a millisecond timestamp id (beyond 32 bits).
    fn host_client_framings(kind) {
        let Some(mut agent) = QgaAgent::start(kind, &[]) else { return };
        drop(agent.connect());
        for seq in 1..=3 {
            let mut c = Client::connect(&agent.sock, Duration::from_secs(10)).expect("connect");
            let id = format!("{}0{seq}", std::process::id()).parse::<i64>().expect("id");
            let req = format!(
                "{{\"execute\":\"guest-sync-delimited\",\"arguments\":{{\"id\":{id}}}}}\n{{\"execute\":\"guest-get-host-name\"}}\n"
            );
            c.send_raw(req.as_bytes());
            let before = c.read_through_ff();
            assert_eq!(before, vec![0xFF], "nothing may precede the 0xFF on a clean stream");
            assert_eq!(c.recv(), json!({ "return": id }));
            assert!(c.recv()["return"]["host-name"].is_string());
            drop(c);
        }
        let mut c = Client::connect(&agent.sock, Duration::from_secs(10)).expect("connect");
        let ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock").as_millis() as i64;
        c.send(&json!({"execute": "guest-sync", "arguments": {"id": ms}}));
        assert_eq!(c.recv(), json!({ "return": ms }));
        c.ping();
        finish(agent, c);
    }
}
