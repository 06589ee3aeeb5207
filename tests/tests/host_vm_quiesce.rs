//! `guestlink fsfreeze` and `guestlink quiesce` against a real agent doing real FIFREEZE inside the QEMU
//! micro-VM (never on this host). One VM boot; each step checks the guest ends up thawed:
//! success (the guest writer stalls while CMD runs), CMD failure, timeout, SIGTERM to guestlink.
//!
//! Run: `cargo test -p tests --test host_vm_quiesce` (skips loudly without QEMU/kernel/busybox unless
//! `GUESTLINK_REQUIRE_VM=1`; `GUESTLINK_VM_AGENT=qemu-ga` runs it against Debian's qemu-ga in the guest).
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test target: unwrap is how a set-up step fails

use guestlink_tests::vm as harness;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use harness::Vm;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::Value;

/// `guestlink`: `$GUESTLINK_BIN`, else built once with `cargo build -p host`.
fn guestlink_bin() -> &'static PathBuf {
    guestlink_tests::bins::guestlink_path()
}

/// guestlink on the VM's agent socket, with generous timeouts for TCG on a loaded machine.
fn cmd(vm: &Vm, args: &[&str]) -> Command {
    let mut c = Command::new(guestlink_bin());
    c.arg("--socket")
        .arg(vm.path("qga.sock"))
        .args(["--agent-timeout", "60", "--connect-timeout", "60"])
        .args(args)
        .env_remove("GUESTLINK_SOCKET")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

fn run(vm: &Vm, args: &[&str]) -> Output {
    cmd(vm, args).output().expect("run guestlink")
}

fn doc(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {}\nstderr: {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

fn status(vm: &Vm) -> String {
    let out = run(vm, &["--json", "fsfreeze", "status"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    doc(&out)["status"].as_str().unwrap_or_default().to_owned()
}

fn wait_file(p: &Path, child: &mut Child) {
    let deadline = Instant::now() + Duration::from_secs(180);
    while !p.exists() {
        if let Ok(Some(st)) = child.try_wait() {
            panic!("guestlink exited ({st}) before CMD started");
        }
        assert!(Instant::now() < deadline, "CMD never started");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn step(name: &str) {
    eprintln!("[vm] {name}");
}

#[test]
fn vm_host_quiesce() {
    let Some(env) = harness::gate("vm_host_quiesce") else {
        return;
    };
    let mut vm = Vm::boot(&env, "");
    vm.wait_agent_port_open();
    let scratch = tempfile::tempdir().expect("tempdir");
    let resume = Duration::from_secs(30);
    assert_eq!(status(&vm), "thawed");

    step("quiesce: frozen while CMD runs (the guest writer stalls), thawed after");
    let started = scratch.path().join("started");
    // CMD's own stdout must not end up in guestlink's JSON document (it goes to stderr with --json).
    let script = format!("echo from-cmd; touch {}; sleep 4", started.display());
    let mut child = cmd(
        &vm,
        &[
            "--json",
            "quiesce",
            "--timeout",
            "300",
            "--",
            "sh",
            "-c",
            &script,
        ],
    )
    .spawn()
    .expect("spawn quiesce");
    wait_file(&started, &mut child);
    let p1 = vm.progress();
    std::thread::sleep(Duration::from_millis(1500));
    let p2 = vm.progress();
    let out = child.wait_with_output().expect("quiesce");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rep = doc(&out);
    assert!(
        p2 <= p1 + 1,
        "guest writer kept writing during quiesce: {p1} -> {p2}"
    );
    assert!(rep["frozen"].as_i64().is_some_and(|n| n > 0), "{rep}");
    assert_eq!(rep["thawed"], rep["frozen"], "{rep}");
    assert!(
        rep["frozen_ms"].as_u64().is_some_and(|ms| ms >= 4000),
        "{rep}"
    );
    assert_eq!(status(&vm), "thawed");
    assert!(
        vm.progress_moves(p2, resume),
        "writer did not resume after quiesce"
    );

    step("quiesce: CMD fails -> its status, thawed");
    let out = run(&vm, &["quiesce", "--", "sh", "-c", "exit 3"]);
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(status(&vm), "thawed");

    step("quiesce: timeout -> CMD killed, 124, thawed");
    let t = Instant::now();
    let out = run(
        &vm,
        &["--json", "quiesce", "--timeout", "2", "--", "sleep", "120"],
    );
    assert_eq!(
        out.status.code(),
        Some(124),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(doc(&out)["command"]["result"], "timed-out");
    assert!(t.elapsed() < Duration::from_secs(100), "{:?}", t.elapsed());
    assert_eq!(status(&vm), "thawed");

    step("quiesce: SIGTERM to guestlink -> forwarded to CMD, thawed, 143");
    let started = scratch.path().join("started2");
    let script = format!("touch {}; sleep 120", started.display());
    let mut child = cmd(&vm, &["--json", "quiesce", "--", "sh", "-c", &script])
        .spawn()
        .expect("spawn quiesce");
    wait_file(&started, &mut child);
    kill(Pid::from_raw(child.id() as i32), Signal::SIGTERM).expect("SIGTERM guestlink");
    let out = child.wait_with_output().expect("quiesce");
    assert_eq!(
        out.status.code(),
        Some(143),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rep = doc(&out);
    assert_eq!(rep["command"]["result"], "interrupted", "{rep}");
    assert!(rep["thawed"].as_i64().is_some_and(|n| n > 0), "{rep}");
    assert_eq!(status(&vm), "thawed");

    step("fsfreeze freeze / status / thaw through the CLI");
    let out = run(&vm, &["--json", "fsfreeze", "freeze"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let frozen = doc(&out)["frozen"].as_i64().expect("count");
    assert!(frozen > 0);
    assert_eq!(status(&vm), "frozen");
    let out = run(&vm, &["--json", "fsfreeze", "thaw"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(doc(&out)["thawed"].as_i64(), Some(frozen));
    assert_eq!(status(&vm), "thawed");
}
