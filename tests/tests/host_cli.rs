//! The `guestlink` host CLI against real agents: Debian's qemu-ga (the reference) and guestlinkd, over their
//! unix-listen sockets. Freeze/quiesce are not run here (never freeze this machine); their state machine is
//! unit-tested in `host/src/quiesce.rs` and the real freeze belongs to the micro-VM suite.
//!
//! Run: `cargo test -p tests --test host_cli` (`-- qemu_ga` / `-- guestlinkd` for one agent).
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test target: unwrap is how a set-up step fails

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use guestlink_tests::{both_agents, QgaAgent, QgaAgentKind};
use serde_json::Value;
use sha2::{Digest, Sha256};

/// `guestlink`: `$GUESTLINK_BIN`, else built once per test process with `cargo build -p host`.
fn guestlink_bin() -> &'static PathBuf {
    guestlink_tests::bins::guestlink_path()
}

/// Runs `guestlink --socket SOCK ARGS…`, feeding `stdin` (none: /dev/null).
fn guestlink(sock: &Path, args: &[&str], stdin: Option<&[u8]>) -> Output {
    let mut cmd = Command::new(guestlink_bin());
    cmd.arg("--socket")
        .arg(sock)
        .args(args)
        .env_remove("GUESTLINK_SOCKET");
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    cmd.stdin(if stdin.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    });
    let mut child = cmd.spawn().expect("spawn guestlink");
    if let Some(data) = stdin {
        let mut pipe = child.stdin.take().expect("stdin pipe");
        pipe.write_all(data).expect("write stdin");
    }
    child.wait_with_output().expect("wait guestlink")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Runs guestlink and asserts success.
fn ok(sock: &Path, args: &[&str]) -> String {
    let out = guestlink(sock, args, None);
    assert!(
        out.status.success(),
        "guestlink {args:?}: {}\nstderr: {}",
        out.status,
        text(&out.stderr)
    );
    text(&out.stdout)
}

/// Runs guestlink with --json, asserts success and exactly one JSON document on stdout.
fn json(sock: &Path, args: &[&str]) -> Value {
    let mut a = vec!["--json"];
    a.extend_from_slice(args);
    let out = ok(sock, &a);
    let mut docs = serde_json::Deserializer::from_str(&out).into_iter::<Value>();
    let doc = docs
        .next()
        .expect("a JSON document")
        .unwrap_or_else(|e| panic!("bad JSON {out:?}: {e}"));
    assert!(docs.next().is_none(), "more than one JSON document: {out}");
    doc
}

/// Starts `kind` and waits until it answers (then releases the single unix-listen client slot).
fn start(kind: QgaAgentKind) -> Option<QgaAgent> {
    let mut agent = QgaAgent::start(kind, &[])?;
    drop(agent.connect());
    Some(agent)
}

fn sha256(data: &[u8]) -> String {
    Sha256::digest(data)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

both_agents!(
    fn queries(kind) {
        let Some(agent) = start(kind) else { return };
        let s = agent.sock.clone();
        assert!(ok(&s, &["ping"]).contains("agent answered"));
        assert_eq!(json(&s, &["ping"])["ok"], Value::Bool(true));

        let info = json(&s, &["info"]);
        let cmds = info["supported_commands"].as_array().expect("supported_commands");
        assert!(cmds.iter().any(|c| c["name"] == "guest-ping" && c["enabled"] == true), "{info}");
        assert!(ok(&s, &["info"]).contains(info["version"].as_str().expect("version")));

        let os = json(&s, &["osinfo"]);
        let uname_r = Command::new("uname").arg("-r").output().expect("uname");
        assert_eq!(os["kernel-release"].as_str(), Some(text(&uname_r.stdout).trim()), "{os}");
        assert!(ok(&s, &["osinfo"]).contains(text(&uname_r.stdout).trim()));

        let fs = json(&s, &["fsinfo"]);
        assert!(fs.as_array().is_some_and(|a| a.iter().any(|f| f["mountpoint"] == "/")), "{fs}");
        assert!(ok(&s, &["fsinfo"]).contains("MOUNTPOINT"));

        let net = json(&s, &["network"]);
        let lo = net.as_array().and_then(|a| a.iter().find(|n| n["name"] == "lo")).expect("lo interface");
        assert!(lo["ip-addresses"].as_array().is_some_and(|a| a.iter().any(|ip| ip["ip-address"] == "127.0.0.1")));
        assert!(ok(&s, &["network"]).contains("127.0.0.1/8"));

        assert!(json(&s, &["users"]).is_array());
        ok(&s, &["users"]);

        let t = json(&s, &["time"]);
        let host_ns = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock").as_nanos() as i64;
        let guest_ns = t["nanoseconds"].as_i64().expect("nanoseconds");
        assert!((host_ns - guest_ns).abs() < 60_000_000_000, "{t}");
        assert!(t["offset_from_host_ms"].as_f64().expect("offset").abs() < 60_000.0);
        assert!(ok(&s, &["time"]).contains('Z'));
        agent.stop();
    }
);

both_agents!(
    fn exec(kind) {
        let Some(agent) = start(kind) else { return };
        let s = agent.sock.clone();
        let out = guestlink(&s, &["exec", "--", "sh", "-c", "printf 'to out'; printf 'to err' >&2; exit 7"], None);
        assert_eq!(out.status.code(), Some(7), "stderr: {}", text(&out.stderr));
        assert_eq!(text(&out.stdout), "to out");
        assert!(text(&out.stderr).contains("to err"));

        let input = b"line one\nline two\n\x00\xffbinary";
        let out = guestlink(&s, &["exec", "--", "cat"], Some(input));
        assert!(out.status.success(), "{}", text(&out.stderr));
        assert_eq!(out.stdout, input);

        let out = guestlink(&s, &["exec", "--no-stdin", "--", "cat"], Some(b"ignored"));
        assert!(out.status.success());
        assert!(out.stdout.is_empty());

        let out = guestlink(&s, &["exec", "--", "sh", "-c", "kill -TERM $$"], None);
        assert_eq!(out.status.code(), Some(128 + 15));

        let out = guestlink(&s, &["--json", "exec", "--", "sh", "-c", "echo hello; exit 3"], None);
        assert_eq!(out.status.code(), Some(3));
        let doc: Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
        assert_eq!(doc["status"], 3);
        assert_eq!(doc["exitcode"], 3);
        assert_eq!(doc["stdout"], "hello\n");

        let out = guestlink(&s, &["exec", "--", "/nonexistent/guestlink-test"], None);
        assert_eq!(out.status.code(), Some(1));
        assert!(text(&out.stderr).contains("guest-exec failed"), "{}", text(&out.stderr));
        agent.stop();
    }
);

both_agents!(
    fn file_push_pull(kind) {
        let Some(agent) = start(kind) else { return };
        let s = agent.sock.clone();
        let dir = tempfile::tempdir().expect("tempdir");
        // 3 MiB + 123 bytes: several 1 MiB chunks and a short tail.
        let data: Vec<u8> = (0..(3 << 20) + 123u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
        let src = dir.path().join("src.bin");
        std::fs::write(&src, &data).expect("write src");
        let guest_dir = dir.path().join("guest");
        std::fs::create_dir(&guest_dir).expect("guest dir");
        let guest = guest_dir.join("pushed.bin");
        let push = json(&s, &["file", "push", src.to_str().expect("utf8"), guest.to_str().expect("utf8")]);
        assert_eq!(push["bytes"], data.len());
        assert_eq!(push["sha256"], sha256(&data));
        // guestlinkd's extensions (atomic rename, guest-side sha256) vs plain QGA (exec mv, read-back).
        let (placement, verified) = match kind {
            QgaAgentKind::Guestlinkd => ("rename", "guest-sha256"),
            QgaAgentKind::QemuGa => ("exec-mv", "reread"),
        };
        assert_eq!(push["placement"], placement, "{push}");
        assert_eq!(push["verified"], verified, "{push}");
        assert_eq!(std::fs::read(&guest).expect("pushed file"), data);
        // Only the final file is left: the temp name was renamed away.
        let names: Vec<_> = std::fs::read_dir(&guest_dir).expect("ls").map(|e| e.expect("entry").file_name()).collect();
        assert_eq!(names, [std::ffi::OsString::from("pushed.bin")]);

        let back = dir.path().join("back.bin");
        let pull = json(&s, &["file", "pull", "--chunk-size", "700000", guest.to_str().expect("utf8"), back.to_str().expect("utf8")]);
        assert_eq!(pull["sha256"], sha256(&data));
        assert_eq!(pull["chunk_size"], 700000);
        assert_eq!(pull["verified"], verified, "{pull}");
        assert_eq!(sha256(&std::fs::read(&back).expect("pulled file")), sha256(&data));

        // "DIR/" as the guest path keeps the host file name.
        let dir_arg = format!("{}/", guest_dir.display());
        let into_dir = json(&s, &["file", "push", src.to_str().expect("utf8"), &dir_arg]);
        assert_eq!(into_dir["destination"], format!("{dir_arg}src.bin"));
        assert_eq!(std::fs::read(guest_dir.join("src.bin")).expect("pushed into dir"), data);

        // Edge sizes: empty, and an exact multiple of the chunk (the last full read does not see EOF yet).
        for (len, chunk) in [(0usize, "4096"), (8192, "4096"), (4097, "4096")] {
            let data = &data[..len];
            let src = dir.path().join(format!("edge-{len}"));
            std::fs::write(&src, data).expect("write edge");
            let guest = guest_dir.join(format!("edge-{len}"));
            let back = dir.path().join(format!("edge-{len}.back"));
            let (s_src, s_guest, s_back) = (src.to_str().expect("utf8"), guest.to_str().expect("utf8"), back.to_str().expect("utf8"));
            assert_eq!(json(&s, &["file", "push", "--chunk-size", chunk, s_src, s_guest])["bytes"], len);
            assert_eq!(json(&s, &["file", "pull", "--chunk-size", chunk, s_guest, s_back])["bytes"], len);
            assert_eq!(std::fs::read(&back).expect("edge back"), data);
        }

        // A failed pull leaves nothing under the final name (and no temp file).
        let missing = dir.path().join("missing.bin");
        let out = guestlink(&s, &["file", "pull", "/nonexistent/guestlink/x", missing.to_str().expect("utf8")], None);
        assert_eq!(out.status.code(), Some(1));
        assert!(text(&out.stderr).contains("guest-file-open failed"), "{}", text(&out.stderr));
        assert!(!missing.exists());
        let leftovers = std::fs::read_dir(dir.path()).expect("ls").filter(|e| {
            e.as_ref().is_ok_and(|e| e.file_name().to_string_lossy().ends_with(".part"))
        });
        assert_eq!(leftovers.count(), 0);
        agent.stop();
    }
);

both_agents!(
    fn raw(kind) {
        let Some(agent) = start(kind) else { return };
        let s = agent.sock.clone();
        let host = text(&Command::new("hostname").output().expect("hostname").stdout).trim().to_owned();
        let doc = json(&s, &["raw", "guest-get-host-name"]);
        assert_eq!(doc["return"]["host-name"], host.as_str());
        let doc = json(&s, &["raw", r#"{"execute":"guest-sync","arguments":{"id":4242}}"#]);
        assert_eq!(doc["return"], 4242);
        let out = guestlink(&s, &["--json", "raw", r#"{"execute":"guest-no-such-command"}"#], None);
        assert_eq!(out.status.code(), Some(1));
        let doc: Value = serde_json::from_slice(&out.stdout).expect("JSON");
        assert_eq!(doc["error"]["class"], "CommandNotFound");
        // Blocked dangerous commands answer CommandNotFound through raw too.
        let doc: Value = serde_json::from_slice(&guestlink(&s, &["--json", "raw", "guest-fsfreeze-thaw"], None).stdout).expect("JSON");
        assert_eq!(doc["error"]["class"], "CommandNotFound", "{doc}");
        agent.stop();
    }
);

#[test]
fn no_agent_errors() {
    let dir = tempfile::tempdir().expect("tempdir");
    // A path that does not exist.
    let out = guestlink(&dir.path().join("absent.sock"), &["ping"], None);
    assert_eq!(out.status.code(), Some(69));
    assert!(
        text(&out.stderr).contains("does not exist"),
        "{}",
        text(&out.stderr)
    );

    // A socket file with no listener: refused until the sync timeout.
    let dead = dir.path().join("dead.sock");
    drop(UnixListener::bind(&dead).expect("bind"));
    let out = guestlink(&dead, &["--connect-timeout", "1", "ping"], None);
    assert_eq!(out.status.code(), Some(69));
    let err = text(&out.stderr);
    assert!(
        err.contains(&format!(
            "no agent answered on {} within 1 s",
            dead.display()
        )),
        "{err}"
    );

    // A listener that accepts and never answers (QEMU with no agent in the guest): the default 5 s sync timeout.
    let mute = dir.path().join("mute.sock");
    let listener = UnixListener::bind(&mute).expect("bind");
    let holder = std::thread::spawn(move || {
        let conn: Option<UnixStream> = listener.accept().ok().map(|(c, _)| c);
        std::thread::sleep(Duration::from_secs(8));
        drop(conn);
    });
    let t = Instant::now();
    let out = guestlink(&mute, &["--json", "ping"], None);
    let took = t.elapsed();
    assert_eq!(out.status.code(), Some(69));
    let err = text(&out.stderr);
    let expected = format!(
        "no agent answered on {} within 5 s: is guestlinkd or qemu-ga running in the guest?",
        mute.display()
    );
    assert!(err.contains(&expected), "{err}");
    assert!(
        took >= Duration::from_secs(5) && took < Duration::from_secs(30),
        "{took:?}"
    );
    let doc: Value = serde_json::from_slice(&out.stdout).expect("JSON error document");
    assert_eq!(doc["error"]["exit_code"], 69);
    holder.join().expect("holder thread");
}

#[test]
fn man_and_completions() {
    let out = Command::new(guestlink_bin())
        .arg("man")
        .output()
        .expect("man");
    assert!(out.status.success());
    assert!(text(&out.stdout).contains(".TH guestlink"));
    let out = Command::new(guestlink_bin())
        .args(["completions", "bash"])
        .output()
        .expect("completions");
    assert!(out.status.success());
    assert!(text(&out.stdout).contains("_guestlink()"));
}

both_agents!(
    /// Freeze is on the block list of every agent this suite starts: quiesce must refuse to run the command,
    /// exit 123, and say why. (A real freeze happens only in the micro-VM suite.)
    fn quiesce_refuses_when_freeze_is_blocked(kind) {
        let Some(agent) = start(kind) else { return };
        let s = agent.sock.clone();
        let dir = tempfile::tempdir().expect("tempdir");
        let marker = dir.path().join("ran");
        let cmd = format!("touch {}", marker.display());
        let out = guestlink(&s, &["--json", "quiesce", "--timeout", "30", "--", "sh", "-c", &cmd], None);
        assert_eq!(out.status.code(), Some(123), "stderr: {}", text(&out.stderr));
        assert!(!marker.exists(), "the command ran although the freeze failed");
        let doc: Value = serde_json::from_slice(&out.stdout).expect("JSON");
        assert!(doc["freeze_error"].as_str().is_some_and(|e| e.contains("disabled")), "{doc}");
        assert_eq!(doc["command"]["result"], "not-run");
        let out = guestlink(&s, &["fsfreeze", "status"], None);
        assert_eq!(text(&out.stdout).trim(), "thawed", "{}", text(&out.stderr));
        agent.stop();
    }
);

/// A stand-in for `virsh` that checks the argument shape guestlink uses and relays the JSON to a real agent
/// socket (given in FAKE_VIRSH_SOCKET), printing the reply like `virsh qemu-agent-command` does.
const FAKE_VIRSH: &str = r#"#!/usr/bin/env python3
import json, os, socket, sys
a = sys.argv[1:]
uri = None
if a[:1] == ["-c"]:
    uri = a[1]; a = a[2:]
assert a[0] == "qemu-agent-command" and a[1] == "--domain" and a[3] == "--timeout" and a[5] == "--cmd", a
if a[2] != "vm1":
    sys.stderr.write("error: failed to get domain '%s'\n" % a[2]); sys.exit(1)
with open(os.environ["FAKE_VIRSH_LOG"], "a") as log:
    log.write(json.dumps({"uri": uri, "timeout": a[4], "cmd": a[6]}) + "\n")
s = socket.socket(socket.AF_UNIX); s.connect(os.environ["FAKE_VIRSH_SOCKET"]); s.settimeout(int(a[4]) + 5)
s.sendall(b'{"execute":"guest-sync","arguments":{"id":777}}\n' + a[6].encode() + b"\n")
buf = b""
while buf.count(b"\n") < 2:
    chunk = s.recv(1 << 20)
    if not chunk: break
    buf += chunk
reply = json.loads(buf.split(b"\n")[1])
if "error" in reply:
    sys.stderr.write("error: internal error: unable to execute QEMU agent command '%s': %s\n"
                     % (json.loads(a[6])["execute"], reply["error"]["desc"])); sys.exit(1)
print(json.dumps(reply))
"#;

#[test]
fn domain_goes_through_virsh_qemu_agent_command() {
    let Some(agent) = start(QgaAgentKind::QemuGa) else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let virsh = dir.path().join("virsh");
    std::fs::write(&virsh, FAKE_VIRSH).expect("write fake virsh");
    std::fs::set_permissions(&virsh, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("chmod");
    let log = dir.path().join("virsh.log");
    let run = |args: &[&str]| {
        Command::new(guestlink_bin())
            .args(args)
            .env("GUESTLINK_VIRSH", &virsh)
            .env("FAKE_VIRSH_SOCKET", &agent.sock)
            .env("FAKE_VIRSH_LOG", &log)
            .env_remove("GUESTLINK_SOCKET")
            .stdin(Stdio::null())
            .output()
            .expect("guestlink")
    };
    let out = run(&[
        "--domain",
        "vm1",
        "--libvirt-uri",
        "qemu:///system",
        "--json",
        "osinfo",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let os: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert!(os["kernel-release"].is_string(), "{os}");
    let calls: Vec<Value> = std::fs::read_to_string(&log)
        .expect("log")
        .lines()
        .map(|l| serde_json::from_str(l).expect("log line"))
        .collect();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0]["uri"], "qemu:///system");
    assert_eq!(calls[0]["timeout"], "5");
    let cmd: Value =
        serde_json::from_str(calls[0]["cmd"].as_str().expect("cmd")).expect("cmd JSON");
    assert_eq!(cmd["execute"], "guest-get-osinfo");

    // exec + file transfer work through the same path (each chunk is one virsh call).
    let out = run(&[
        "--domain",
        "vm1",
        "exec",
        "--",
        "sh",
        "-c",
        "echo via-virsh; exit 4",
    ]);
    assert_eq!(out.status.code(), Some(4), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "via-virsh\n");

    // libvirt errors come through once, with virsh's text.
    let out = run(&["--domain", "nope", "ping"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("failed to get domain 'nope'"),
        "{}",
        text(&out.stderr)
    );
    agent.stop();
}

/// guestlinkd streams exec output (guestlink-exec-read): the first line arrives while the process still runs.
#[test]
fn exec_streams_with_guestlinkd() {
    let Some(agent) = start(QgaAgentKind::Guestlinkd) else {
        return;
    };
    let t = Instant::now();
    let mut child = Command::new(guestlink_bin())
        .arg("--socket")
        .arg(&agent.sock)
        .args(["exec", "--", "sh", "-c", "echo first; sleep 3; echo second"])
        .env_remove("GUESTLINK_SOCKET")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn guestlink");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    assert_eq!(lines.next().expect("a line").expect("read"), "first");
    let first_at = t.elapsed();
    assert_eq!(lines.next().expect("a line").expect("read"), "second");
    let second_at = t.elapsed();
    assert!(child.wait().expect("wait").success());
    assert!(
        second_at - first_at >= Duration::from_secs(2),
        "first {first_at:?}, second {second_at:?}"
    );
    agent.stop();
}

/// `--proxmox VMID` reaches `<dir>/VMID.qga` (dir overridden for the test) and works like a socket target.
#[test]
fn proxmox_target() {
    let Some(agent) = start(QgaAgentKind::QemuGa) else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    std::os::unix::fs::symlink(&agent.sock, dir.path().join("4242.qga")).expect("symlink");
    let run = |args: &[&str]| {
        Command::new(guestlink_bin())
            .args(["--proxmox", "4242"])
            .args(args)
            .env("GUESTLINK_PROXMOX_DIR", dir.path())
            .env_remove("GUESTLINK_SOCKET")
            .stdin(Stdio::null())
            .output()
            .expect("guestlink")
    };
    let out = run(&["ping"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = run(&["exec", "--", "sh", "-c", "echo pve; exit 5"]);
    assert_eq!(out.status.code(), Some(5), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "pve\n");
    let out = run(&["--proxmox", "4243", "ping"]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "two --proxmox flags are a usage error"
    );
    let missing = Command::new(guestlink_bin())
        .args(["--proxmox", "4243", "ping"])
        .env("GUESTLINK_PROXMOX_DIR", dir.path())
        .output()
        .expect("guestlink");
    assert_eq!(missing.status.code(), Some(69));
    assert!(
        text(&missing.stderr).contains("4243.qga does not exist"),
        "{}",
        text(&missing.stderr)
    );
    agent.stop();
}

/// Waits until a `*.part` file with data shows up in `dir` (the transfer is under way), up to 60 s.
fn wait_part(dir: &Path, child: &mut std::process::Child) -> bool {
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return false;
        }
        let found = std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .flatten()
            .any(|e| {
                e.file_name().to_string_lossy().ends_with(".part")
                    && e.metadata().is_ok_and(|m| m.len() > 0)
            });
        if found {
            return true;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    false
}

fn parts(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .expect("ls")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".part"))
        .collect()
}

both_agents!(
    /// SIGINT during a transfer: exit 130, the temp file is removed on both sides, nothing under the final name.
    fn interrupted_transfers_clean_up(kind) {
        let Some(agent) = start(kind) else { return };
        let dir = tempfile::tempdir().expect("tempdir");
        let big = dir.path().join("big.bin");
        std::fs::write(&big, vec![0x5a; 32 << 20]).expect("write big");
        let guest_dir = dir.path().join("guest");
        std::fs::create_dir(&guest_dir).expect("guest dir");
        let small_chunks = ["--chunk-size", "4096", "--in-flight", "1"];
        for pull in [true, false] {
            let (src, dst, watch) = if pull {
                (big.clone(), dir.path().join("pulled.bin"), dir.path().to_path_buf())
            } else {
                (big.clone(), guest_dir.join("pushed.bin"), guest_dir.clone())
            };
            let mut args = vec!["--socket", agent.sock.to_str().expect("utf8"), "file"];
            args.push(if pull { "pull" } else { "push" });
            args.extend_from_slice(&small_chunks);
            args.push(src.to_str().expect("utf8"));
            args.push(dst.to_str().expect("utf8"));
            let mut child = Command::new(guestlink_bin())
                .args(&args)
                .env_remove("GUESTLINK_SOCKET")
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawn");
            if !wait_part(&watch, &mut child) {
                let out = child.wait_with_output().expect("wait");
                panic!("transfer never started or finished too fast: {}", text(&out.stderr));
            }
            nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), nix::sys::signal::Signal::SIGINT)
                .expect("SIGINT");
            let out = child.wait_with_output().expect("wait");
            assert_eq!(out.status.code(), Some(130), "pull={pull}: {}", text(&out.stderr));
            assert!(text(&out.stderr).contains("interrupted"), "{}", text(&out.stderr));
            assert!(!dst.exists(), "pull={pull}: partial file under the final name");
            assert_eq!(parts(&watch), Vec::<String>::new(), "pull={pull}: temp file left");
        }
        agent.stop();
    }
);
