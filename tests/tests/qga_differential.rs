//! Differential test: the same request corpus goes to qemu-ga and guestlinkd; reply *shapes* must match (keys
//! present/absent recursively, JSON types), error classes must match, and error texts must match where they are
//! fixed texts. Values that legitimately differ (times, pids, handles, temp paths) are not compared.
//!
//! Run: `cargo test -p tests --test qga_differential -- --nocapture` (prints a readable diff).
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test target: unwrap is how a set-up step fails

use std::time::{Duration, Instant};

use guestlink_tests::shape::shape_diff;
use guestlink_tests::{error_of, QgaAgent, QgaAgentKind};
use serde_json::{json, Value};

/// How two replies are compared.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Cmp {
    /// Keys and JSON types, recursively.
    Shape,
    /// Whole reply equal after normalising handles, pids and the temp dir.
    Exact,
    /// Both errors with the same class (desc differs between QEMU versions).
    Class,
    /// guest-exec-status: repeat until `exited`, then compare exactly.
    ExecDone,
}

/// A request: JSON (with `$H`, `$PID`, `$DIR…` placeholders) or raw bytes.
#[derive(Debug)]
enum Req {
    Json(Value),
    Raw(&'static [u8]),
}

fn j(execute: &str, args: Value) -> Req {
    if args.is_null() {
        Req::Json(json!({ "execute": execute }))
    } else {
        Req::Json(json!({ "execute": execute, "arguments": args }))
    }
}

fn corpus() -> Vec<(&'static str, Req, Cmp)> {
    use Cmp::*;
    let n = Value::Null;
    vec![
        // every read-only command
        ("ping", j("guest-ping", n.clone()), Exact),
        ("sync", j("guest-sync", json!({"id": 4242})), Exact),
        (
            "sync-delimited-no-ff",
            j("guest-sync", json!({"id": -5})),
            Exact,
        ),
        ("info", j("guest-info", n.clone()), Shape),
        ("get-time", j("guest-get-time", n.clone()), Shape),
        ("get-host-name", j("guest-get-host-name", n.clone()), Shape),
        ("get-timezone", j("guest-get-timezone", n.clone()), Shape),
        ("get-osinfo", j("guest-get-osinfo", n.clone()), Shape),
        ("get-users", j("guest-get-users", n.clone()), Shape),
        ("get-vcpus", j("guest-get-vcpus", n.clone()), Shape),
        ("get-fsinfo", j("guest-get-fsinfo", n.clone()), Shape),
        // Windows-only: qemu-ga 7.2 on Linux answers with its disabled stub, arguments unchecked.
        ("get-devices", j("guest-get-devices", n.clone()), Exact),
        (
            "get-devices-args",
            j("guest-get-devices", json!({"bogus": 1})),
            Exact,
        ),
        ("get-disks", j("guest-get-disks", n.clone()), Shape),
        (
            "network-get-interfaces",
            j("guest-network-get-interfaces", n.clone()),
            Shape,
        ),
        (
            "get-memory-blocks",
            j("guest-get-memory-blocks", n.clone()),
            Shape,
        ),
        (
            "get-memory-block-info",
            j("guest-get-memory-block-info", n.clone()),
            Shape,
        ),
        ("get-diskstats", j("guest-get-diskstats", n.clone()), Shape),
        ("get-cpustats", j("guest-get-cpustats", n.clone()), Shape),
        (
            "fsfreeze-status",
            j("guest-fsfreeze-status", n.clone()),
            Exact,
        ),
        (
            "ssh-get-authorized-keys-nobody",
            j(
                "guest-ssh-get-authorized-keys",
                json!({"username": "nobody"}),
            ),
            Shape,
        ),
        (
            "ssh-get-authorized-keys-nouser",
            j(
                "guest-ssh-get-authorized-keys",
                json!({"username": "no-such-user-x"}),
            ),
            Exact,
        ),
        // argument errors of each kind
        ("arg-unexpected", j("guest-ping", json!({"foo": 42})), Exact),
        ("arg-missing", j("guest-sync", json!({})), Exact),
        (
            "arg-type-string",
            j("guest-sync", json!({"id": "x"})),
            Exact,
        ),
        ("arg-type-float", j("guest-sync", json!({"id": 1.5})), Exact),
        ("arg-type-null", j("guest-sync", json!({"id": null})), Exact),
        (
            "arg-type-u64max",
            j("guest-sync", json!({"id": u64::MAX})),
            Exact,
        ),
        (
            "arg-int-min",
            j("guest-sync", json!({"id": i64::MIN})),
            Exact,
        ),
        (
            "arg-type-path",
            j("guest-file-open", json!({"path": 5})),
            Exact,
        ),
        ("arg-missing-handle", j("guest-file-read", json!({})), Exact),
        (
            "arg-type-array",
            j("guest-exec", json!({"path": "echo", "arg": "x"})),
            Exact,
        ),
        (
            "arg-type-array-elem",
            j("guest-exec", json!({"path": "echo", "arg": [1]})),
            Exact,
        ),
        ("arg-missing-path", j("guest-exec", json!({})), Exact),
        (
            "arg-unexpected-after-valid",
            j("guest-file-read", json!({"handle": 1, "cnt": 3})),
            Exact,
        ),
        // parse / envelope errors
        ("parse-garbage", Req::Raw(b"garbage\n"), Exact),
        ("parse-close-brace", Req::Raw(b"}"), Exact),
        ("parse-array", Req::Raw(b"[]"), Exact),
        ("parse-string", Req::Raw(b"\"x\"\n"), Exact),
        ("parse-number", Req::Raw(b"5\n"), Exact),
        ("parse-no-execute", Req::Raw(b"{\"id\":3}"), Exact),
        ("parse-execute-int", Req::Raw(b"{\"execute\":1}"), Exact),
        (
            "parse-arguments-null",
            Req::Raw(b"{\"execute\":\"guest-ping\",\"arguments\":null}"),
            Exact,
        ),
        (
            "parse-unexpected-member",
            Req::Raw(b"{\"execute\":\"guest-ping\",\"id\":[1],\"foo\":2}"),
            Exact,
        ),
        (
            "parse-exec-oob",
            Req::Raw(b"{\"exec-oob\":\"guest-ping\"}"),
            Exact,
        ),
        (
            "parse-duplicate-key",
            Req::Raw(b"{\"execute\":\"guest-ping\",\"execute\":\"guest-ping\"}"),
            Exact,
        ),
        (
            "quirk-single-quotes",
            Req::Raw(b"{'execute':'guest-ping','id':'sq'}"),
            Exact,
        ),
        (
            "parse-bad-escape",
            Req::Raw(b"{\"execute\":\"guest-ping\",\"id\":\"\\x\"}"),
            Exact,
        ),
        (
            "quirk-non-ascii-id",
            Req::Raw("{\"execute\":\"guest-ping\",\"id\":\"\u{e9}\"}".as_bytes()),
            Exact,
        ),
        // unknown / blocked commands
        ("unknown", j("guest-nonexistent", n.clone()), Exact),
        ("unknown-empty", j("", n.clone()), Exact),
        (
            "blocked-freeze",
            j("guest-fsfreeze-freeze", n.clone()),
            Exact,
        ),
        ("blocked-thaw", j("guest-fsfreeze-thaw", n.clone()), Exact),
        ("blocked-shutdown", j("guest-shutdown", n.clone()), Exact),
        (
            "blocked-set-time",
            j("guest-set-time", json!({"time": 0})),
            Exact,
        ),
        ("blocked-fstrim", j("guest-fstrim", n.clone()), Exact),
        // file ops in a temp dir
        (
            "open-missing",
            j("guest-file-open", json!({"path": "$DIR/missing"})),
            Exact,
        ),
        (
            "open-bad-mode",
            j("guest-file-open", json!({"path": "$DIR/f", "mode": "rw"})),
            Exact,
        ),
        (
            "open-w+",
            j("guest-file-open", json!({"path": "$DIR/f", "mode": "w+"})),
            Shape,
        ),
        (
            "write",
            j(
                "guest-file-write",
                json!({"handle": "$H", "buf-b64": "SGVsbG8gV29ybGQhCgA="}),
            ),
            Exact,
        ),
        (
            "write-count",
            j(
                "guest-file-write",
                json!({"handle": "$H", "buf-b64": "YWJj", "count": 2}),
            ),
            Exact,
        ),
        (
            "write-count-too-big",
            j(
                "guest-file-write",
                json!({"handle": "$H", "buf-b64": "YWJj", "count": 4}),
            ),
            Exact,
        ),
        (
            "write-bad-b64",
            j(
                "guest-file-write",
                json!({"handle": "$H", "buf-b64": "!!!"}),
            ),
            Exact,
        ),
        (
            "flush",
            j("guest-file-flush", json!({"handle": "$H"})),
            Exact,
        ),
        (
            "seek-set",
            j(
                "guest-file-seek",
                json!({"handle": "$H", "offset": 6, "whence": "set"}),
            ),
            Exact,
        ),
        (
            "seek-int-end",
            j(
                "guest-file-seek",
                json!({"handle": "$H", "offset": -2, "whence": 2}),
            ),
            Exact,
        ),
        (
            "seek-bad-whence",
            j(
                "guest-file-seek",
                json!({"handle": "$H", "offset": 0, "whence": 7}),
            ),
            Exact,
        ),
        (
            "seek-bad-whence-name",
            j(
                "guest-file-seek",
                json!({"handle": "$H", "offset": 0, "whence": "middle"}),
            ),
            Exact,
        ),
        (
            "seek-cur",
            j(
                "guest-file-seek",
                json!({"handle": "$H", "offset": -16, "whence": "cur"}),
            ),
            Exact,
        ),
        ("read", j("guest-file-read", json!({"handle": "$H"})), Exact),
        (
            "read-at-eof",
            j("guest-file-read", json!({"handle": "$H", "count": 10})),
            Exact,
        ),
        (
            "read-count-too-big",
            j(
                "guest-file-read",
                json!({"handle": "$H", "count": 50_331_649}),
            ),
            Exact,
        ),
        (
            "close",
            j("guest-file-close", json!({"handle": "$H"})),
            Exact,
        ),
        (
            "close-again",
            j("guest-file-close", json!({"handle": "$H"})),
            Exact,
        ),
        (
            "open-r",
            j("guest-file-open", json!({"path": "$DIR/f", "mode": "r"})),
            Shape,
        ),
        (
            "write-to-r",
            j(
                "guest-file-write",
                json!({"handle": "$H", "buf-b64": "YWJj"}),
            ),
            Exact,
        ),
        (
            "read-count-0",
            j("guest-file-read", json!({"handle": "$H", "count": 0})),
            Exact,
        ),
        (
            "read-count-4",
            j("guest-file-read", json!({"handle": "$H", "count": 4})),
            Exact,
        ),
        (
            "close-r",
            j("guest-file-close", json!({"handle": "$H"})),
            Exact,
        ),
        (
            "read-unknown-handle",
            j("guest-file-read", json!({"handle": 999})),
            Exact,
        ),
        // exec
        (
            "exec-echo",
            j(
                "guest-exec",
                json!({"path": "echo", "arg": ["hi"], "capture-output": true}),
            ),
            Shape,
        ),
        (
            "exec-echo-status",
            j("guest-exec-status", json!({"pid": "$PID"})),
            ExecDone,
        ),
        (
            "exec-status-reaped",
            j("guest-exec-status", json!({"pid": "$PID"})),
            Class,
        ),
        (
            "exec-exit3",
            j("guest-exec", json!({"path": "sh", "arg": ["-c", "exit 3"]})),
            Shape,
        ),
        (
            "exec-exit3-status",
            j("guest-exec-status", json!({"pid": "$PID"})),
            ExecDone,
        ),
        (
            "exec-signal",
            j(
                "guest-exec",
                json!({"path": "sh", "arg": ["-c", "kill -9 $$"]}),
            ),
            Shape,
        ),
        (
            "exec-signal-status",
            j("guest-exec-status", json!({"pid": "$PID"})),
            ExecDone,
        ),
        (
            "exec-stdin",
            j(
                "guest-exec",
                json!({"path": "cat", "input-data": "aW5wdXQ=", "capture-output": true}),
            ),
            Shape,
        ),
        (
            "exec-stdin-status",
            j("guest-exec-status", json!({"pid": "$PID"})),
            ExecDone,
        ),
        (
            "exec-env",
            j(
                "guest-exec",
                json!({"path": "/usr/bin/env", "env": ["A=1"], "capture-output": true}),
            ),
            Shape,
        ),
        (
            "exec-env-status",
            j("guest-exec-status", json!({"pid": "$PID"})),
            ExecDone,
        ),
        (
            "exec-stderr",
            j(
                "guest-exec",
                json!({"path": "sh", "arg": ["-c", "echo e >&2"], "capture-output": true}),
            ),
            Shape,
        ),
        (
            "exec-stderr-status",
            j("guest-exec-status", json!({"pid": "$PID"})),
            ExecDone,
        ),
        (
            "exec-missing-binary",
            j("guest-exec", json!({"path": "/bin/invalid-cmd42"})),
            Class,
        ),
        (
            "exec-status-pid0",
            j("guest-exec-status", json!({"pid": 0})),
            Class,
        ),
    ]
}

/// Per-agent substitution state.
#[derive(Debug, Default)]
struct Vars {
    dir: String,
    handle: Option<i64>,
    pid: Option<i64>,
}

impl Vars {
    fn subst(&self, v: &Value) -> Value {
        match v {
            Value::String(s) if s == "$H" => json!(self.handle.expect("$H before an open")),
            Value::String(s) if s == "$PID" => json!(self.pid.expect("$PID before an exec")),
            Value::String(s) if s.starts_with("$DIR") => json!(s.replacen("$DIR", &self.dir, 1)),
            Value::Array(a) => Value::Array(a.iter().map(|x| self.subst(x)).collect()),
            Value::Object(m) => {
                Value::Object(m.iter().map(|(k, x)| (k.clone(), self.subst(x))).collect())
            }
            other => other.clone(),
        }
    }

    /// Replaces this agent's handle, pid and temp dir in error texts so both agents' texts compare.
    fn normalise(&self, mut reply: Value) -> Value {
        if let Some(Value::String(d)) = reply.pointer_mut("/error/desc") {
            let mut s = d.replace(&self.dir, "$DIR");
            if let Some(h) = self.handle {
                s = s.replace(&format!("'{h}'"), "'$H'");
            }
            *d = s;
        }
        reply
    }
}

/// Runs the corpus on one agent; one (request sent, normalised reply) per case.
fn run_corpus(kind: QgaAgentKind) -> Option<Vec<(String, Value)>> {
    let mut agent = QgaAgent::start(kind, &[])?;
    let mut c = agent.connect();
    let mut vars = Vars {
        dir: agent.scratch().to_str().expect("utf-8").to_string(),
        ..Vars::default()
    };
    let mut out = Vec::new();
    for (name, req, cmp) in corpus() {
        let (shown, reply) = match &req {
            Req::Raw(bytes) => {
                c.send_raw(bytes);
                let r = c.recv();
                c.sync(); // discard follow-up noise of parse errors
                (String::from_utf8_lossy(bytes).to_string(), r)
            }
            Req::Json(v) => {
                let v = vars.subst(v);
                let deadline = Instant::now() + Duration::from_secs(20);
                let r = loop {
                    c.send(&v);
                    let r = c.recv();
                    if cmp != Cmp::ExecDone
                        || r["return"]["exited"] == json!(true)
                        || Instant::now() > deadline
                    {
                        break r;
                    }
                    std::thread::sleep(Duration::from_millis(20));
                };
                (v.to_string(), r)
            }
        };
        let reply = vars.normalise(reply);
        if name.starts_with("open-") && reply["return"].is_i64() {
            vars.handle = reply["return"].as_i64();
        }
        if name.starts_with("exec-") && reply["return"]["pid"].is_i64() {
            vars.pid = reply["return"]["pid"].as_i64();
        }
        out.push((shown, reply));
    }
    drop(c);
    agent.stop();
    Some(out)
}

/// Compares one case; returns the difference lines (empty = match).
fn compare(cmp: Cmp, a: &Value, b: &Value) -> Vec<String> {
    let (ea, eb) = (error_of(a), error_of(b));
    if ea.is_some() != eb.is_some() {
        return vec!["one side is an error, the other is not".to_string()];
    }
    match cmp {
        Cmp::Exact | Cmp::ExecDone if a != b => {
            let mut d = shape_diff(a, b);
            d.push("values differ".to_string());
            d
        }
        Cmp::Class => match (ea, eb) {
            (Some((ca, _)), Some((cb, _))) if ca != cb => vec![format!("class {ca} vs {cb}")],
            _ => shape_diff(a, b),
        },
        Cmp::Shape => match (ea, eb) {
            (Some(x), Some(y)) if x != y => vec![format!("error {x:?} vs {y:?}")],
            _ => shape_diff(a, b),
        },
        _ => Vec::new(),
    }
}

/// Reply keys newer than the reference (Debian's qemu-ga 7.2) that guestlinkd deliberately implements from the
/// latest QAPI schema; removed from guestlinkd's replies before comparing.
const NEWER_SCHEMA_KEYS: &[&str] = &[
    "total-bytes-privileged", // guest-get-fsinfo, since 9.1
];

fn strip_keys(v: &mut Value) {
    match v {
        Value::Object(m) => {
            m.retain(|k, _| !NEWER_SCHEMA_KEYS.contains(&k.as_str()));
            m.values_mut().for_each(strip_keys);
        }
        Value::Array(a) => a.iter_mut().for_each(strip_keys),
        _ => {}
    }
}

#[test]
fn differential_corpus() {
    let cases = corpus();
    assert!(cases.len() >= 60, "corpus has {} requests", cases.len());
    let Some(reference) = run_corpus(QgaAgentKind::QemuGa) else {
        return;
    };
    // validate the corpus against the reference: every Shape/Exact success case really succeeded etc.
    let mut ours = run_corpus(QgaAgentKind::Guestlinkd).expect("guestlinkd");
    ours.iter_mut().for_each(|(_, reply)| strip_keys(reply));
    let mut mismatches = 0;
    for ((name, _, cmp), ((sent, a), (_, b))) in cases.iter().zip(reference.iter().zip(ours.iter()))
    {
        let diff = compare(*cmp, a, b);
        if diff.is_empty() {
            continue;
        }
        mismatches += 1;
        eprintln!(
            "\n=== {name} ({cmp:?})\n  request:    {sent}\n  qemu-ga:    {a}\n  guestlinkd: {b}"
        );
        for line in diff {
            eprintln!("    - {line}");
        }
    }
    assert_eq!(
        mismatches,
        0,
        "{mismatches} of {} requests differ (diff above)",
        cases.len()
    );
}

#[test]
fn corpus_is_valid_against_the_reference() {
    let Some(reference) = run_corpus(QgaAgentKind::QemuGa) else {
        return;
    };
    for ((name, _, cmp), (sent, reply)) in corpus().iter().zip(reference.iter()) {
        if *cmp == Cmp::ExecDone {
            assert_eq!(
                reply["return"]["exited"],
                json!(true),
                "{name}: {sent} -> {reply}"
            );
        }
        if name.starts_with("open-w") || name.starts_with("open-r") || *name == "exec-echo" {
            assert!(reply.get("return").is_some(), "{name}: {sent} -> {reply}");
        }
        if name.starts_with("parse-") || name.starts_with("arg-") && *name != "arg-int-min" {
            assert!(error_of(reply).is_some(), "{name}: {sent} -> {reply}");
        }
    }
}
