//! End-to-end tests of the guest agent over a real virtio-serial port in the QEMU micro-VM (TCG).
//!
//! Two VMs, booted once each: `vm_agent_protocol` (boot, read-only commands, reconnect/resync, guest-shutdown)
//! and `vm_freeze_lifecycle` (real FIFREEZE of the guest's ext4 disks observed through a writer process, hooks,
//! frozen allow-list, restarts while frozen, auto-thaw, a thaw with no descriptor left). The agent is guestlinkd
//! from the target dir; set `GUESTLINK_VM_AGENT=qemu-ga` to run the same checks against Debian's qemu-ga
//! (guestlinkd-only steps are skipped then). `vm_fs_lists_match_qemu_ga` boots one more VM per agent and compares
//! guest-get-fsinfo and guest-fstrim of guestlinkd with Debian's qemu-ga on the same guest (with its bind mount
//! `/mnt/bind`). Skips loudly without QEMU/kernel/busybox unless `GUESTLINK_REQUIRE_VM=1`.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test target: unwrap is how a set-up step fails

use guestlink_tests::vm as harness;

use harness::{Qga, QgaAgentKind, Vm, REPLY_TIMEOUT};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

fn step(name: &str) {
    eprintln!("[vm] {name}");
}

fn assert_disabled(q: &mut Qga, cmd: &str) {
    let err = q
        .call(cmd, None)
        .expect_err(&format!("{cmd} must be refused while frozen"));
    assert_eq!(err.0, "CommandNotFound", "{cmd} while frozen: {err:?}");
    assert!(err.1.contains("disabled"), "{cmd} while frozen: {err:?}");
}

fn b64(v: &Value) -> Vec<u8> {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD
        .decode(v.as_str().unwrap_or(""))
        .unwrap_or_else(|e| panic!("bad base64 {v}: {e}"))
}

/// Polls guest-exec-status on the same (open) connection until it reports `exited`, like libvirt does.
fn exec_status_until_exited(q: &mut Qga, pid: &Value, timeout: Duration) -> Value {
    let deadline = Instant::now() + timeout;
    loop {
        let st = q.ok("guest-exec-status", Some(json!({ "pid": pid })));
        if st["exited"] == true {
            return st;
        }
        assert_eq!(st["exited"], false, "{st}");
        assert!(
            Instant::now() < deadline,
            "guest-exec pid {pid} not reported exited within {timeout:?}: {st}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// CPU ticks (utime + stime) the agent used during `secs` seconds of guest time, with the host connected
/// but idle.
fn agent_idle_ticks(vm: &mut Vm, secs: u32) -> u64 {
    let out = vm.guest_ok(&format!(
        "P=$(cat /run/agent.pid); a=$(cut -d' ' -f14,15 /proc/$P/stat); sleep {secs}; \
         b=$(cut -d' ' -f14,15 /proc/$P/stat); echo $a $b"
    ));
    let t: Vec<u64> = out
        .split_whitespace()
        .map(|x| x.parse().unwrap_or_else(|_| panic!("ticks: {out:?}")))
        .collect();
    assert_eq!(t.len(), 4, "ticks: {out:?}");
    (t[2] + t[3]).saturating_sub(t[0] + t[1])
}

fn fs_entry<'a>(fsinfo: &'a Value, mountpoint: &str) -> &'a Value {
    fsinfo
        .as_array()
        .expect("fsinfo is an array")
        .iter()
        .find(|e| e["mountpoint"] == mountpoint)
        .unwrap_or_else(|| panic!("{mountpoint} missing in guest-get-fsinfo: {fsinfo}"))
}

#[test]
fn vm_agent_protocol() {
    let Some(env) = harness::gate("vm_agent_protocol") else {
        return;
    };
    let mut vm = Vm::boot(&env, "");

    step("the agent opens its port before any host connects, and answers the first host");
    let open_after = vm.wait_agent_port_open();
    eprintln!(
        "[vm] agent port open {:.1}s after QEMU start",
        open_after.as_secs_f64()
    );
    // Give the agent time to hit EOF on the not-yet-connected port a few times (it must keep retrying).
    std::thread::sleep(Duration::from_secs(1));
    let t = Instant::now();
    let mut q = vm.qga();
    eprintln!("[vm] first sync answered in {:?}", t.elapsed());
    assert_eq!(q.ok("guest-ping", None), json!({}));

    step("read-only commands return sane data");
    let info = q.ok("guest-info", None);
    assert!(
        info["version"].as_str().is_some_and(|v| !v.is_empty()),
        "{info}"
    );
    let cmds: Vec<&str> = info["supported_commands"]
        .as_array()
        .expect("supported_commands")
        .iter()
        .filter_map(|c| c["name"].as_str())
        .collect();
    for c in [
        "guest-ping",
        "guest-sync-delimited",
        "guest-fsfreeze-freeze",
        "guest-get-fsinfo",
    ] {
        assert!(cmds.contains(&c), "{c} not in guest-info");
    }
    let uname = vm.guest_ok("uname -r");
    let os = q.ok("guest-get-osinfo", None);
    assert_eq!(os["kernel-release"], uname.as_str(), "{os}");
    assert_eq!(os["id"], "guestlink-vm", "{os}");
    assert_eq!(os["machine"], "x86_64", "{os}");
    assert_eq!(
        q.ok("guest-get-host-name", None)["host-name"],
        "guestlink-vm"
    );
    let guest_ns = q
        .ok("guest-get-time", None)
        .as_i64()
        .expect("time is an integer");
    let host_ns = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_nanos() as i64;
    assert!(
        (guest_ns - host_ns).abs() < 600_000_000_000,
        "guest time {guest_ns} vs host {host_ns}"
    );
    let tz = q.ok("guest-get-timezone", None);
    assert!(tz["offset"].is_i64(), "{tz}");
    let vcpus = q.ok("guest-get-vcpus", None);
    let vcpus = vcpus.as_array().expect("vcpus");
    assert_eq!(vcpus.len(), 1, "{vcpus:?}");
    assert_eq!(vcpus[0]["online"], true);
    let ifaces = q.ok("guest-network-get-interfaces", None);
    assert!(
        ifaces
            .as_array()
            .expect("ifaces")
            .iter()
            .any(|i| i["name"] == "lo"),
        "{ifaces}"
    );
    assert!(q.ok("guest-get-users", None).is_array());
    assert_eq!(q.ok("guest-fsfreeze-status", None), "thawed");

    let fsinfo = q.ok("guest-get-fsinfo", None);
    // /mnt/bind is a bind mount of /mnt/data (tests/vm/guest/init): listed like qemu-ga does.
    let mounts: Vec<&str> = fsinfo
        .as_array()
        .expect("fsinfo")
        .iter()
        .filter_map(|e| e["mountpoint"].as_str())
        .collect();
    assert_eq!(
        mounts,
        ["/mnt/bind", "/mnt/data2", "/mnt/data"],
        "reverse mount order, bind mount included: {fsinfo}"
    );
    for (mp, dev) in [
        ("/mnt/data", "/dev/vda"),
        ("/mnt/data2", "/dev/vdb"),
        ("/mnt/bind", "/dev/vda"),
    ] {
        let e = fs_entry(&fsinfo, mp);
        assert_eq!(e["type"], "ext4", "{e}");
        assert!(
            e["total-bytes"].as_u64().is_some_and(|b| b > 8 << 20),
            "{e}"
        );
        let disk = &e["disk"][0];
        assert_eq!(disk["bus-type"], "virtio", "{e}");
        assert_eq!(disk["dev"], dev, "{e}");
        assert!(disk["pci-controller"]["slot"].as_u64().is_some(), "{e}");
    }
    assert!(
        fsinfo
            .as_array()
            .expect("fsinfo")
            .iter()
            .all(|e| e["type"] != "proc"),
        "virtual filesystems must not be listed: {fsinfo}"
    );
    if cmds.contains(&"guest-get-disks") {
        let disks = q.ok("guest-get-disks", None);
        let names: Vec<&str> = disks
            .as_array()
            .expect("disks")
            .iter()
            .filter_map(|d| d["name"].as_str())
            .collect();
        assert!(
            names.contains(&"/dev/vda") && names.contains(&"/dev/vdb"),
            "{disks}"
        );
    }

    // Newer read-only commands, checked where the agent lists them (qemu-ga 7.2 lacks some).
    let has = |c: &str| cmds.contains(&c);
    if has("guest-get-load") {
        let l = q.ok("guest-get-load", None);
        assert!(l["load1m"].as_f64().is_some_and(|v| v >= 0.0), "{l}");
    }
    if has("guest-get-cpustats") {
        let c = q.ok("guest-get-cpustats", None);
        let c = c.as_array().expect("cpustats");
        assert!(
            c.len() == 1 && c[0]["cpu"] == 0 && c[0]["type"] == "linux",
            "{c:?}"
        );
    }
    if has("guest-get-diskstats") {
        let d = q.ok("guest-get-diskstats", None);
        let names: Vec<&str> = d
            .as_array()
            .expect("diskstats")
            .iter()
            .filter_map(|e| e["name"].as_str())
            .collect();
        assert!(names.contains(&"vda") && names.contains(&"vdb"), "{d}");
    }
    if has("guest-get-memory-block-info") {
        let m = q.ok("guest-get-memory-block-info", None);
        assert!(m["size"].as_u64().is_some_and(|s| s > 0), "{m}");
    }
    if has("guest-get-memory-blocks") {
        let m = q.ok("guest-get-memory-blocks", None);
        assert!(m.as_array().is_some_and(|a| !a.is_empty()), "{m}");
    }
    if has("guest-network-get-route") {
        let r = q.ok("guest-network-get-route", None);
        assert!(
            r.as_array()
                .expect("routes")
                .iter()
                .all(|e| e["iface"] == "lo"),
            "only lo exists in the VM: {r}"
        );
    }

    // The port polled HUP before this host connected (the agent starts first): a stale HUP once made
    // guestlinkd spin on EAGAIN while a host stayed connected, so no spawned task ran and guest-exec-status
    // said `exited: false` forever. All of this runs on the first, still open connection.
    step("connected but idle, the agent does not spin");
    let ticks = agent_idle_ticks(&mut vm, 3);
    eprintln!("[vm] agent CPU while connected and idle: {ticks} ticks in 3 s");
    assert!(
        ticks < 60,
        "agent used {ticks} CPU ticks in 3 s while the host was connected and idle"
    );

    step("guest-exec: exit code and captured output, polled on the same connection");
    let st_timeout = Duration::from_secs(60);
    let pid = q.ok("guest-exec", Some(json!({"path": "/bin/true"})))["pid"].clone();
    let st = exec_status_until_exited(&mut q, &pid, st_timeout);
    assert_eq!(st["exitcode"], 0, "{st}");
    assert!(st.get("out-data").is_none(), "{st}");
    let pid = q.ok(
        "guest-exec",
        Some(json!({
            "path": "/bin/sh",
            "arg": ["-c", "sleep 1; echo out; echo err >&2; exit 3"],
            "capture-output": true
        })),
    )["pid"]
        .clone();
    assert_eq!(
        q.ok("guest-exec-status", Some(json!({ "pid": pid })))["exited"],
        false
    );
    let st = exec_status_until_exited(&mut q, &pid, st_timeout);
    assert_eq!(st["exitcode"], 3, "{st}");
    assert!(st.get("signal").is_none(), "{st}");
    assert_eq!(b64(&st["out-data"]), b"out\n", "{st}");
    assert_eq!(b64(&st["err-data"]), b"err\n", "{st}");
    let gone = q.call("guest-exec-status", Some(json!({ "pid": pid })));
    assert!(
        gone.is_err(),
        "record kept after the exited status: {gone:?}"
    );

    step("guest-exec: a child killed by a signal from inside the guest");
    let pid = q.ok(
        "guest-exec",
        Some(json!({"path": "/bin/sleep", "arg": ["600"]})),
    )["pid"]
        .clone();
    let pid_n = pid.as_u64().expect("pid is a number");
    assert_eq!(vm.guest_ok(&format!("cat /proc/{pid_n}/comm")), "sleep");
    assert_eq!(
        q.ok("guest-exec-status", Some(json!({ "pid": pid })))["exited"],
        false
    );
    vm.guest_ok(&format!("kill -TERM {pid_n}"));
    let st = exec_status_until_exited(&mut q, &pid, st_timeout);
    assert_eq!(st["signal"], 15, "{st}");
    assert!(st.get("exitcode").is_none(), "{st}");
    let left = vm.guest_ok(&format!("test -e /proc/{pid_n} && echo left || true"));
    assert!(left.is_empty(), "child {pid_n} not reaped");

    if cmds.contains(&"guestlink-exec-read") {
        step("guestlink-exec-read streams output while the child runs");
        let pid = q.ok(
            "guest-exec",
            Some(json!({
                "path": "/bin/sh",
                "arg": ["-c", "echo first; sleep 3; echo second; echo e >&2; exit 4"],
                "capture-output": true
            })),
        )["pid"]
            .clone();
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let (mut oo, mut eo) = (0u64, 0u64);
        let mut first_while_running = false;
        let deadline = Instant::now() + st_timeout;
        let last = loop {
            let r = q.ok(
                "guestlink-exec-read",
                Some(json!({"pid": pid, "out-offset": oo, "err-offset": eo, "wait-ms": 2000})),
            );
            out.extend(b64(&r["out-data"]));
            err.extend(b64(&r["err-data"]));
            oo = r["out-offset"].as_u64().expect("out-offset");
            eo = r["err-offset"].as_u64().expect("err-offset");
            assert_eq!(oo as usize, out.len(), "{r}");
            if r["exited"] == false && out == b"first\n" {
                first_while_running = true;
            }
            if r["exited"] == true && r["out-data"] == "" && r["err-data"] == "" {
                break r;
            }
            assert!(Instant::now() < deadline, "exec-read never finished: {r}");
        };
        assert!(
            first_while_running,
            "the first line was not delivered before the child exited"
        );
        assert_eq!(out, b"first\nsecond\n");
        assert_eq!(err, b"e\n");
        assert_eq!(last["exitcode"], 4, "{last}");
    }

    step("a host that disconnects mid-request; the next host resyncs with 0xFF + guest-sync-delimited");
    drop(q);
    let mut half = Qga::connect(&vm.path("qga.sock"));
    half.send_raw(br#"{"execute": "guest-get-fsinfo", "arguments": {"#);
    drop(half);
    let mut q = vm.qga();
    assert_eq!(q.ok("guest-ping", None), json!({}));
    // A complete request whose reply the host never reads: the next host must not see that stale reply.
    q.send_raw(b"{\"execute\":\"guest-get-fsinfo\"}\n{\"execute\":\"guest-info\"}\n");
    drop(q);
    let mut q = vm.qga();
    assert_eq!(
        q.ok("guest-get-host-name", None)["host-name"],
        "guestlink-vm"
    );
    assert_eq!(q.ok("guest-ping", None), json!({}));

    step("the agent kept its port open all along (libvirt drops its connection on every close)");
    let closes: Vec<_> = vm
        .qmp
        .events("VSERPORT_CHANGE")
        .into_iter()
        .filter(|e| e["data"]["id"] == "channel0" && e["data"]["open"] == false)
        .collect();
    assert!(closes.is_empty(), "agent closed its port: {closes:?}");

    step("guest-shutdown powers the VM off (QMP SHUTDOWN)");
    q.send_raw(b"{\"execute\":\"guest-shutdown\"}\n");
    let ev = vm
        .qmp
        .wait_for(Duration::from_secs(90), |v| v["event"] == "SHUTDOWN");
    assert!(
        ev.is_some(),
        "no SHUTDOWN event; console:\n{}",
        vm.console()
    );
    assert_eq!(ev.expect("checked")["data"]["guest"], true);
    assert!(
        vm.wait_exit(Duration::from_secs(30)),
        "QEMU still running after SHUTDOWN"
    );
}

#[test]
fn vm_freeze_lifecycle() {
    let Some(env) = harness::gate("vm_freeze_lifecycle") else {
        return;
    };
    let glink = env.kind == QgaAgentKind::Guestlinkd;
    let mut vm = Vm::boot(&env, "");
    vm.wait_agent_port_open();
    let mut q = vm.qga();
    let stall = Duration::from_millis(1500);
    let resume = Duration::from_secs(30);

    step("freeze: the guest writer stops; thaw: it resumes");
    let p0 = vm.progress();
    assert!(
        vm.progress_moves(p0, resume),
        "writer not running before the freeze"
    );
    assert_eq!(q.ok("guest-fsfreeze-status", None), "thawed");
    assert_eq!(
        q.ok("guest-fsfreeze-freeze", None),
        2,
        "both ext4 disks frozen"
    );
    assert_eq!(q.ok("guest-fsfreeze-status", None), "frozen");
    let p1 = vm.progress();
    std::thread::sleep(stall);
    let p2 = vm.progress();
    assert!(
        p2 <= p1 + 1,
        "writer kept writing while frozen: {p1} -> {p2}"
    );
    assert!(
        vm.guest_ok("cat /run/hook.log")
            .lines()
            .any(|l| l == "freeze"),
        "hook not run"
    );

    step("frozen allow-list");
    assert_eq!(q.ok("guest-ping", None), json!({}));
    assert!(q.ok("guest-info", None)["version"].is_string());
    assert_disabled(&mut q, "guest-get-osinfo");
    assert_disabled(&mut q, "guest-fsfreeze-freeze");
    assert_disabled(&mut q, "guest-get-fsinfo");
    assert!(
        q.resync(REPLY_TIMEOUT),
        "guest-sync-delimited allowed while frozen"
    );

    assert_eq!(q.ok("guest-fsfreeze-thaw", None), 2);
    assert_eq!(q.ok("guest-fsfreeze-status", None), "thawed");
    assert!(
        vm.progress_moves(p2, resume),
        "writer did not resume after thaw"
    );
    assert!(
        vm.guest_ok("cat /run/hook.log")
            .lines()
            .any(|l| l == "thaw"),
        "thaw hook not run"
    );

    step("freeze-list of one mountpoint freezes only that one");
    assert_eq!(
        q.ok(
            "guest-fsfreeze-freeze-list",
            Some(json!({"mountpoints": ["/mnt/data"]}))
        ),
        1
    );
    let p1 = vm.progress();
    assert_eq!(
        vm.guest_ok("echo ok > /mnt/data2/unfrozen && cat /mnt/data2/unfrozen"),
        "ok"
    );
    std::thread::sleep(stall);
    let p2 = vm.progress();
    assert!(p2 <= p1 + 1, "/mnt/data not frozen: {p1} -> {p2}");
    assert_eq!(q.ok("guest-fsfreeze-thaw", None), 1);
    assert!(vm.progress_moves(p2, resume), "writer did not resume");

    step("agent killed with SIGKILL while frozen: the restarted agent knows and can thaw");
    assert_eq!(q.ok("guest-fsfreeze-freeze", None), 2);
    let old = vm.agent_pid();
    vm.guest_ok(&format!("kill -9 {old}"));
    vm.wait_new_agent(old);
    assert!(q.resync(REPLY_TIMEOUT), "restarted agent does not answer");
    assert_eq!(q.ok("guest-fsfreeze-status", None), "frozen");
    assert_disabled(&mut q, "guest-get-osinfo");
    let p1 = vm.progress();
    let thawed = q.ok("guest-fsfreeze-thaw", None);
    assert!(
        thawed.as_u64().is_some_and(|n| n >= 1),
        "thaw after restart: {thawed}"
    );
    assert_eq!(q.ok("guest-fsfreeze-status", None), "thawed");
    assert!(vm.progress_moves(p1, resume), "writer did not resume");

    step("a failing freeze hook aborts the freeze; nothing is frozen");
    let fail_args = Vm::default_agent_args().replace("hooks/ok", "hooks/fail");
    vm.restart_agent(&fail_args, "TERM");
    assert!(q.resync(REPLY_TIMEOUT));
    let err = q
        .call("guest-fsfreeze-freeze", None)
        .expect_err("freeze must fail");
    assert!(err.1.contains("hook"), "{err:?}");
    assert_eq!(q.ok("guest-fsfreeze-status", None), "thawed");
    let p1 = vm.progress();
    assert!(
        vm.progress_moves(p1, resume),
        "writer blocked after a refused freeze"
    );
    assert_eq!(
        vm.guest_ok("echo ok > /mnt/data/after-refused && cat /mnt/data/after-refused"),
        "ok"
    );

    if !glink {
        eprintln!("[vm] qemu-ga: skipping SIGTERM-thaws and auto-thaw (guestlinkd features)");
        return;
    }

    step("SIGTERM while frozen thaws before exiting");
    vm.restart_agent(Vm::default_agent_args(), "TERM");
    assert!(q.resync(REPLY_TIMEOUT));
    assert_eq!(q.ok("guest-fsfreeze-freeze", None), 2);
    let p1 = vm.progress();
    let old = vm.agent_pid();
    vm.guest_ok(&format!("kill -TERM {old}"));
    assert!(
        vm.progress_moves(p1, resume),
        "SIGTERM while frozen did not thaw"
    );
    vm.wait_new_agent(old);
    assert!(q.resync(REPLY_TIMEOUT));
    assert_eq!(q.ok("guest-fsfreeze-status", None), "thawed");

    step("auto-thaw after 5 s with a host connected after the agent started; status says thawed");
    let args = format!("{} --auto-thaw 5", Vm::default_agent_args());
    // As at boot: the agent starts with no host on its port (it polls HUP), the host connects later and stays.
    drop(q);
    vm.restart_agent(&args, "TERM");
    std::thread::sleep(Duration::from_secs(1));
    q = vm.qga();
    assert_eq!(q.ok("guest-fsfreeze-freeze", None), 2);
    let frozen_at = Instant::now();
    let p1 = vm.progress();
    assert_eq!(q.ok("guest-fsfreeze-status", None), "frozen");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if q.ok("guest-fsfreeze-status", None) == "thawed" {
            break;
        }
        assert!(Instant::now() < deadline, "auto-thaw did not fire");
        std::thread::sleep(Duration::from_millis(250));
    }
    let after = frozen_at.elapsed();
    assert!(
        after >= Duration::from_secs(4),
        "auto-thaw too early: {after:?}"
    );
    eprintln!("[vm] auto-thawed after {after:?}");
    assert!(
        vm.progress_moves(p1, resume),
        "writer did not resume after auto-thaw"
    );

    step("thaw with no descriptor left (EMFILE): the writer resumes, status says thawed only then");
    // No hook here: a hook needs pipes, so its failure at EMFILE would turn the reply into an error.
    let args = "-m virtio-serial -p /dev/virtio-ports/org.qemu.guest_agent.0 -t /run/agent-state";
    drop(q);
    vm.restart_agent(args, "TERM");
    std::thread::sleep(Duration::from_secs(1));
    q = vm.qga();
    assert_eq!(q.ok("guest-fsfreeze-freeze", None), 2);
    let pid = vm.agent_pid();
    // The descriptor limit becomes the lowest free descriptor number: every open(), including
    // /proc/self/mountinfo and the mount points, now fails with EMFILE.
    let limit = vm.guest_ok(&format!(
        "i=0; while [ -e /proc/{pid}/fd/$i ]; do i=$((i+1)); done; \
         prlimit --pid {pid} --nofile=$i:$i && echo $i"
    ));
    eprintln!("[vm] agent {pid} descriptor limit lowered to {limit}");
    let p1 = vm.progress();
    std::thread::sleep(stall);
    assert!(vm.progress() <= p1 + 1, "not frozen before the thaw");
    let thawed = q.call("guest-fsfreeze-thaw", None);
    match thawed {
        Ok(n) => {
            assert_eq!(n, 2, "thaw at EMFILE");
            assert!(
                vm.progress_moves(p1, resume),
                "the thaw at EMFILE said {n} but the writer did not resume"
            );
            assert_eq!(q.ok("guest-fsfreeze-status", None), "thawed");
        }
        Err(e) => {
            // Allowed only if it says so and stays frozen; the watchdog must then thaw once descriptors are back.
            assert_eq!(q.ok("guest-fsfreeze-status", None), "frozen", "{e:?}");
            vm.guest_ok(&format!("prlimit --pid {pid} --nofile=1024:1024"));
            let deadline = Instant::now() + Duration::from_secs(90);
            while q.ok("guest-fsfreeze-status", None) != "thawed" {
                assert!(
                    Instant::now() < deadline,
                    "the failed thaw was not retried: {e:?}"
                );
                std::thread::sleep(Duration::from_millis(250));
            }
            assert!(vm.progress_moves(p1, resume), "writer did not resume");
        }
    }
    vm.guest_ok(&format!("prlimit --pid {pid} --nofile=1024:1024"));
    assert_eq!(q.ok("guest-ping", None), json!({}));
}

/// guest-get-fsinfo without the values that move while the guest writer runs (`used-bytes`) and without
/// `total-bytes-privileged` (QEMU 9.1; Debian's qemu-ga 7.2 predates it).
fn comparable_fsinfo(v: &Value) -> Value {
    let mut v = v.clone();
    for e in v.as_array_mut().expect("fsinfo is an array") {
        let o = e.as_object_mut().expect("fsinfo entry");
        o.remove("used-bytes");
        o.remove("total-bytes-privileged");
    }
    v
}

/// guest-fstrim with each `trimmed` count replaced by `true` (how much is free to trim depends on the writer).
fn comparable_fstrim(v: &Value) -> Value {
    let mut v = v.clone();
    for e in v["paths"].as_array_mut().expect("fstrim paths") {
        if let Some(t) = e.get_mut("trimmed") {
            *t = json!(true);
        }
    }
    v
}

/// The agent's guest-get-fsinfo and guest-fstrim in a freshly booted VM.
fn fs_lists(vm: &mut Vm) -> (Value, Value) {
    vm.wait_agent_port_open();
    let mut q = vm.qga();
    let fsinfo = q.ok("guest-get-fsinfo", None);
    let fstrim = q.ok("guest-fstrim", None);
    (fsinfo, fstrim)
}

#[test]
fn vm_fs_lists_match_qemu_ga() {
    let Some(env) = harness::gate("vm_fs_lists_match_qemu_ga") else {
        return;
    };
    if env.kind == QgaAgentKind::QemuGa {
        eprintln!("[vm] GUESTLINK_VM_AGENT=qemu-ga: nothing to compare qemu-ga with, skipped");
        return;
    }
    let Some(reference) = harness::qemu_ga_env(&env) else {
        return;
    };
    step(
        "boot the same guest (bind mount /mnt/data on /mnt/bind) with guestlinkd and with qemu-ga",
    );
    let mut ours = Vm::boot(&env, "");
    let mut theirs = Vm::boot(&reference, "");
    let (fsinfo, fstrim) = fs_lists(&mut ours);
    let (ref_fsinfo, ref_fstrim) = fs_lists(&mut theirs);
    eprintln!("[vm] qemu-ga fsinfo: {ref_fsinfo}\n[vm] qemu-ga fstrim: {ref_fstrim}");
    assert_eq!(
        ref_fsinfo.as_array().map(Vec::len),
        Some(3),
        "qemu-ga lists the bind mount too: {ref_fsinfo}"
    );
    step(
        "guest-get-fsinfo and guest-fstrim are the same value, entry for entry, in the same order",
    );
    assert_eq!(comparable_fsinfo(&fsinfo), comparable_fsinfo(&ref_fsinfo));
    assert_eq!(comparable_fstrim(&fstrim), comparable_fstrim(&ref_fstrim));
    let paths: Vec<&str> = fstrim["paths"]
        .as_array()
        .expect("paths")
        .iter()
        .filter_map(|p| p["path"].as_str())
        .collect();
    assert_eq!(paths, ["/mnt/bind", "/mnt/data2", "/mnt/data"], "{fstrim}");
    ours.stop();
    theirs.stop();
}
