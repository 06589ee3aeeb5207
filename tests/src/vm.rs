//! QEMU micro-VM harness for the `vm_*` integration tests.
//!
//! Boots `tests/vm/launch --exec` (QEMU under TCG) with an initramfs from `tests/vm/build-initramfs`, and gives
//! the tests three host-side channels into the guest:
//! - [`Qga`]: the agent port `org.qemu.guest_agent.0` (unix chardev `qga.sock`), spoken like a real host;
//! - [`Qmp`]: QEMU's monitor, with a reader thread that records every event (VSERPORT_CHANGE, SHUTDOWN);
//! - [`Vm::guest`]: the test control port `org.guestlink.test.0`, a shell loop inside the guest.
//!
//! Gate ([`crate::gate`], [`Gate::Vm`]): without qemu-system-x86_64, a kernel, busybox-static or the agent binary
//! the tests print a loud skip and pass, unless `GUESTLINK_REQUIRE_VM` (CI) turns that into a failure.

use serde_json::{json, Value};

use crate::gate::{which, Gate};
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// Generous default timeout for one reply on a loaded 2-core machine under TCG.
pub const REPLY_TIMEOUT: Duration = Duration::from_secs(60);
/// Time allowed from QEMU start to the agent opening its port.
pub const BOOT_TIMEOUT: Duration = Duration::from_secs(120);

/// Which agent runs in the guest; the reference qemu-ga lacks guestlinkd's improvements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QgaAgentKind {
    /// Ours.
    Guestlinkd,
    /// Debian's qemu-ga.
    QemuGa,
}

/// Everything needed to boot a VM: the agent binary and its kind.
#[derive(Debug, Clone)]
pub struct VmEnv {
    /// The agent binary put into the guest.
    pub agent: PathBuf,
    /// Which agent it is.
    pub kind: QgaAgentKind,
    /// `tests/vm/`: the launch and initramfs scripts.
    pub vm_dir: PathBuf,
}

fn newest_kernel() -> Option<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir("/boot")
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("vmlinuz-"))
        })
        .collect();
    v.sort();
    v.pop()
}

/// The guestlinkd built next to this test binary (target/<profile>/guestlinkd), or `GUESTLINK_VM_AGENT`.
fn find_agent() -> Option<(PathBuf, QgaAgentKind)> {
    if let Some(a) = std::env::var_os("GUESTLINK_VM_AGENT").filter(|a| !a.is_empty()) {
        let p = PathBuf::from(a);
        let p = if p.components().count() == 1 {
            which(&p.to_string_lossy()).unwrap_or(p)
        } else {
            p
        };
        let kind = if p.file_name().is_some_and(|n| n == "qemu-ga") {
            QgaAgentKind::QemuGa
        } else {
            QgaAgentKind::Guestlinkd
        };
        return p.is_file().then_some((p, kind));
    }
    let exe = std::env::current_exe().ok()?;
    // target/<profile>/deps/vm_qga-<hash> -> target/<profile>/guestlinkd
    let profile_dir = exe.parent()?.parent()?;
    let cand = profile_dir.join("guestlinkd");
    cand.is_file().then_some((cand, QgaAgentKind::Guestlinkd))
}

/// Returns the VM environment, or `None` after printing a loud SKIP (a panic under `GUESTLINK_REQUIRE_VM=1`).
pub fn gate(test: &str) -> Option<VmEnv> {
    let vm_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("vm");
    let mut missing = Vec::new();
    if which("qemu-system-x86_64").is_none() {
        missing.push("qemu-system-x86_64 (apt-get install qemu-system-x86)".to_string());
    }
    if newest_kernel().is_none() {
        missing.push("/boot/vmlinuz-* (apt-get install linux-image-amd64)".to_string());
    }
    if !Path::new("/bin/busybox").is_file() {
        missing.push("/bin/busybox (apt-get install busybox-static)".to_string());
    }
    if which("mkfs.ext4").is_none() && !Path::new("/usr/sbin/mkfs.ext4").is_file() {
        missing.push("mkfs.ext4 (apt-get install e2fsprogs)".to_string());
    }
    let agent = find_agent();
    if agent.is_none() {
        missing.push(
            "the agent binary (cargo build -p guest-daemon, or set GUESTLINK_VM_AGENT)".to_string(),
        );
    }
    if missing.is_empty() {
        let (agent, kind) = agent?;
        return Some(VmEnv {
            agent,
            kind,
            vm_dir,
        });
    }
    crate::gate::skip(
        Gate::Vm,
        &format!(
            "{test}: the micro-VM cannot run: missing {}",
            missing.join(", ")
        ),
    );
    None
}

/// The same VM environment with Debian's qemu-ga as the agent, for side-by-side comparisons; `None` after a
/// loud SKIP when qemu-ga is not installed (a panic under `GUESTLINK_REQUIRE_VM=1` or `GUESTLINK_REQUIRE_PEERS`).
pub fn qemu_ga_env(env: &VmEnv) -> Option<VmEnv> {
    let found = ["/usr/sbin/qemu-ga", "/usr/bin/qemu-ga"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file());
    match found {
        Some(agent) => Some(VmEnv {
            agent,
            kind: QgaAgentKind::QemuGa,
            vm_dir: env.vm_dir.clone(),
        }),
        None => {
            crate::gate::skip(
                Gate::Vm,
                "qemu-ga is not installed (apt-get install qemu-guest-agent)",
            );
            None
        }
    }
}

/// Builds (or reuses) the initramfs for `env.agent`.
pub fn initramfs(env: &VmEnv) -> PathBuf {
    let out = Command::new(env.vm_dir.join("build-initramfs"))
        .arg(&env.agent)
        .stderr(Stdio::inherit())
        .output()
        .expect("run tests/vm/build-initramfs");
    assert!(out.status.success(), "build-initramfs failed");
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

/// A QMP connection whose reader thread records every message.
#[derive(Debug)]
pub struct Qmp {
    stream: UnixStream,
    inbox: Arc<(Mutex<Vec<Value>>, Condvar)>,
}

impl Qmp {
    /// Connects to QEMU's monitor socket and starts the event recorder.
    pub fn connect(path: &Path) -> std::io::Result<Qmp> {
        let stream = UnixStream::connect(path)?;
        let inbox = Arc::new((Mutex::new(Vec::new()), Condvar::new()));
        let reader = BufReader::new(stream.try_clone()?);
        let sink = inbox.clone();
        std::thread::spawn(move || {
            for line in reader.lines() {
                let Ok(line) = line else { break };
                if let Ok(v) = serde_json::from_str::<Value>(&line) {
                    let (m, c) = &*sink;
                    m.lock().expect("qmp inbox").push(v);
                    c.notify_all();
                }
            }
        });
        let mut q = Qmp { stream, inbox };
        q.wait_for(Duration::from_secs(30), |v| v.get("QMP").is_some())
            .expect("QMP greeting");
        q.command("qmp_capabilities", json!({}));
        Ok(q)
    }

    /// Sends a command and waits for a return/error (QMP answers in order; we send one at a time).
    pub fn command(&mut self, name: &str, args: Value) -> Value {
        let before = self.count(|v| v.get("return").is_some() || v.get("error").is_some());
        let msg = json!({"execute": name, "arguments": args});
        writeln!(self.stream, "{msg}").expect("write QMP");
        let deadline = Instant::now() + REPLY_TIMEOUT;
        loop {
            let replies: Vec<Value> =
                self.snapshot(|v| v.get("return").is_some() || v.get("error").is_some());
            if replies.len() > before {
                return replies[before].clone();
            }
            assert!(Instant::now() < deadline, "QMP {name}: no reply");
            self.wait_change(Duration::from_millis(200));
        }
    }

    fn snapshot(&self, f: impl Fn(&Value) -> bool) -> Vec<Value> {
        let (m, _) = &*self.inbox;
        m.lock()
            .expect("qmp inbox")
            .iter()
            .filter(|v| f(v))
            .cloned()
            .collect()
    }

    fn count(&self, f: impl Fn(&Value) -> bool) -> usize {
        self.snapshot(f).len()
    }

    fn wait_change(&self, d: Duration) {
        let (m, c) = &*self.inbox;
        let g = m.lock().expect("qmp inbox");
        let _ = c.wait_timeout(g, d).expect("qmp inbox");
    }

    /// Waits until any recorded message satisfies `f` (also ones that arrived earlier).
    pub fn wait_for(&self, timeout: Duration, f: impl Fn(&Value) -> bool) -> Option<Value> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(v) = self.snapshot(&f).into_iter().next() {
                return Some(v);
            }
            if Instant::now() >= deadline {
                return None;
            }
            self.wait_change(Duration::from_millis(200));
        }
    }

    /// All recorded events with this name.
    pub fn events(&self, name: &str) -> Vec<Value> {
        self.snapshot(|v| v.get("event").and_then(Value::as_str) == Some(name))
    }
}

/// A QGA error reply: `(class, desc)`.
pub type QgaErr = (String, String);

/// A host-side QGA client on the agent chardev, speaking like qemu.qmp/Proxmox (0xFF + guest-sync-delimited).
#[derive(Debug)]
pub struct Qga {
    /// The chardev socket.
    pub stream: UnixStream,
    buf: Vec<u8>,
}

impl Qga {
    /// Connects to the agent's chardev socket.
    pub fn connect(path: &Path) -> Qga {
        let stream = UnixStream::connect(path).expect("connect to qga.sock");
        stream
            .set_read_timeout(Some(Duration::from_millis(500)))
            .expect("timeout");
        Qga {
            stream,
            buf: Vec::new(),
        }
    }

    /// Writes `bytes` as they are.
    pub fn send_raw(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).expect("write to qga.sock");
    }

    fn fill(&mut self, deadline: Instant) -> bool {
        let mut tmp = [0u8; 65536];
        loop {
            match self.stream.read(&mut tmp) {
                Ok(0) => panic!("qga.sock closed by QEMU"),
                Ok(n) => {
                    self.buf.extend_from_slice(&tmp[..n]);
                    return true;
                }
                Err(e)
                    if e.kind() == std::io::ErrorKind::WouldBlock
                        || e.kind() == std::io::ErrorKind::TimedOut =>
                {
                    if Instant::now() >= deadline {
                        return false;
                    }
                }
                Err(e) => panic!("read qga.sock: {e}"),
            }
        }
    }

    /// Next reply line (without the newline), or `None` on timeout.
    pub fn read_line(&mut self, timeout: Duration) -> Option<Vec<u8>> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(i) = self.buf.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = self.buf.drain(..=i).collect();
                return Some(line[..line.len() - 1].to_vec());
            }
            if !self.fill(deadline) {
                return None;
            }
        }
    }

    /// 0xFF + guest-sync-delimited with a fresh id; discards everything before the 0xFF-prefixed matching reply.
    pub fn resync(&mut self, timeout: Duration) -> bool {
        let id = (std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(7)
            % 1_000_000_000) as u64;
        let msg = json!({"execute": "guest-sync-delimited", "arguments": {"id": id}});
        let mut bytes = vec![0xFFu8];
        bytes.extend_from_slice(msg.to_string().as_bytes());
        bytes.push(b'\n');
        self.send_raw(&bytes);
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(i) = self.buf.iter().position(|&b| b == 0xFF) {
                self.buf.drain(..=i);
                let left = deadline.saturating_duration_since(Instant::now());
                let Some(line) = self.read_line(left) else {
                    return false;
                };
                let v: Value = serde_json::from_slice(&line).unwrap_or(Value::Null);
                if v.get("return").and_then(Value::as_u64) == Some(id) {
                    return true;
                }
                continue;
            }
            self.buf.clear();
            if !self.fill(deadline) {
                return false;
            }
        }
    }

    /// Sends one command and returns its reply object.
    pub fn request(&mut self, execute: &str, args: Option<Value>, timeout: Duration) -> Value {
        let msg = match args {
            Some(a) => json!({"execute": execute, "arguments": a}),
            None => json!({"execute": execute}),
        };
        self.send_raw(format!("{msg}\n").as_bytes());
        let line = self
            .read_line(timeout)
            .unwrap_or_else(|| panic!("{execute}: no reply within {timeout:?}"));
        serde_json::from_slice(&line).unwrap_or_else(|e| {
            panic!(
                "{execute}: bad reply {:?}: {e}",
                String::from_utf8_lossy(&line)
            )
        })
    }

    /// Sends one command; `Ok(return)` or `Err((class, desc))`.
    pub fn call(&mut self, execute: &str, args: Option<Value>) -> Result<Value, QgaErr> {
        let v = self.request(execute, args, REPLY_TIMEOUT);
        if let Some(r) = v.get("return") {
            return Ok(r.clone());
        }
        let e = v
            .get("error")
            .unwrap_or_else(|| panic!("{execute}: neither return nor error: {v}"));
        Err((
            e["class"].as_str().unwrap_or_default().to_string(),
            e["desc"].as_str().unwrap_or_default().to_string(),
        ))
    }

    /// Like [`Qga::call`] but panics on an error reply.
    pub fn ok(&mut self, execute: &str, args: Option<Value>) -> Value {
        self.call(execute, args)
            .unwrap_or_else(|e| panic!("{execute} failed: {e:?}"))
    }
}

/// The test control port `org.guestlink.test.0`: a shell loop in the guest, one command line per request.
#[derive(Debug)]
pub struct Control {
    w: UnixStream,
    r: BufReader<UnixStream>,
}

impl Control {
    /// Connects to the guest's control port.
    pub fn connect(path: &Path) -> Control {
        let w =
            UnixStream::connect(path).unwrap_or_else(|e| panic!("connect {}: {e}", path.display()));
        w.set_read_timeout(Some(REPLY_TIMEOUT)).expect("timeout");
        let r = BufReader::new(w.try_clone().expect("clone"));
        Control { w, r }
    }

    /// Runs a shell command inside the guest; returns (output, exit status).
    pub fn run(&mut self, cmd: &str) -> (String, i32) {
        assert!(!cmd.contains('\n'), "one line per guest command");
        writeln!(self.w, "{cmd}").expect("write test.sock");
        let mut out = String::new();
        loop {
            let mut line = String::new();
            let n = self
                .r
                .read_line(&mut line)
                .unwrap_or_else(|e| panic!("guest `{cmd}`: {e}"));
            assert!(n > 0, "control port closed during `{cmd}`");
            if let Some(rc) = line.trim_end().strip_prefix("@@RC=") {
                let rc = rc.trim_end_matches("@@").parse().unwrap_or(-1);
                return (out.trim_end().to_string(), rc);
            }
            out.push_str(&line);
        }
    }

    /// Like [`Control::run`] but asserts exit status 0.
    pub fn run_ok(&mut self, cmd: &str) -> String {
        let (out, rc) = self.run(cmd);
        assert_eq!(rc, 0, "guest `{cmd}` failed: {out}");
        out
    }

    /// The writer's counter (it appends to /mnt/data/progress and then publishes the value in /run/progress).
    pub fn progress(&mut self) -> u64 {
        for _ in 0..20 {
            let (out, _) = self.run("cat /run/progress");
            if let Ok(n) = out.trim().parse() {
                return n;
            }
        }
        panic!("no progress counter in the guest");
    }

    /// Polls until the counter moves past `from` (true) or `timeout` passes (false).
    pub fn progress_moves(&mut self, from: u64, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if self.progress() > from {
                return true;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        false
    }

    /// Best-effort dump of the agent log (for failure reports).
    pub fn dump_agent_log(&mut self) {
        let _ = self.w.set_read_timeout(Some(Duration::from_secs(5)));
        let _ = writeln!(self.w, "tail -n 30 /run/agent.log");
        let mut s = String::new();
        for _ in 0..40 {
            s.clear();
            if self.r.read_line(&mut s).unwrap_or(0) == 0 || s.starts_with("@@RC=") {
                break;
            }
            eprint!("agent.log: {s}");
        }
    }
}

/// A running micro-VM; dropping it stops QEMU (QMP quit, then SIGKILL) and removes the scratch dir.
#[derive(Debug)]
pub struct Vm {
    /// What was booted.
    pub env: VmEnv,
    /// The VM's scratch directory (sockets, disks, console log).
    pub dir: tempfile::TempDir,
    /// The QEMU process.
    pub child: Child,
    /// The monitor.
    pub qmp: Qmp,
    control: Option<Control>,
    /// When QEMU was started.
    pub booted_at: Instant,
}

impl Vm {
    /// Starts QEMU with the agent's extra arguments (space separated; empty for the defaults).
    pub fn boot(env: &VmEnv, agent_args: &str) -> Vm {
        let initrd = initramfs(env);
        let dir = tempfile::Builder::new()
            .prefix("guestlink-vm.")
            .tempdir()
            .expect("scratch dir");
        let mut cmd = Command::new(env.vm_dir.join("launch"));
        cmd.arg("--exec")
            .arg("--dir")
            .arg(dir.path())
            .arg("--initrd")
            .arg(&initrd)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit());
        if !agent_args.is_empty() {
            cmd.arg("--args").arg(agent_args);
        }
        let booted_at = Instant::now();
        let mut child = cmd.spawn().expect("spawn tests/vm/launch");
        let qmp_path = dir.path().join("qmp.sock");
        let deadline = Instant::now() + Duration::from_secs(30);
        let qmp = loop {
            if let Ok(q) = Qmp::connect(&qmp_path) {
                break q;
            }
            if let Ok(Some(st)) = child.try_wait() {
                panic!("QEMU exited early: {st}");
            }
            assert!(Instant::now() < deadline, "QMP socket never appeared");
            std::thread::sleep(Duration::from_millis(50));
        };
        Vm {
            env: env.clone(),
            dir,
            child,
            qmp,
            control: None,
            booted_at,
        }
    }

    /// A file in the VM's scratch directory.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// The guest console so far.
    pub fn console(&self) -> String {
        std::fs::read_to_string(self.path("console.log")).unwrap_or_default()
    }

    /// Waits for QEMU's VSERPORT_CHANGE open=true on the agent port (channel0): the agent opened it.
    pub fn wait_agent_port_open(&mut self) -> Duration {
        let deadline = Instant::now() + BOOT_TIMEOUT;
        loop {
            let ev = self.qmp.wait_for(Duration::from_secs(1), |v| {
                v["event"] == "VSERPORT_CHANGE"
                    && v["data"]["id"] == "channel0"
                    && v["data"]["open"] == true
            });
            if ev.is_some() {
                return self.booted_at.elapsed();
            }
            let exited = matches!(self.child.try_wait(), Ok(Some(_)));
            assert!(
                !exited && Instant::now() < deadline,
                "agent never opened its port (QEMU exited: {exited}); console:\n{}",
                self.console()
            );
        }
    }

    /// A fresh host connection to the agent, resynchronised.
    pub fn qga(&self) -> Qga {
        let mut q = Qga::connect(&self.path("qga.sock"));
        assert!(
            q.resync(REPLY_TIMEOUT),
            "agent did not answer guest-sync-delimited"
        );
        q
    }

    fn control(&mut self) -> &mut Control {
        if self.control.is_none() {
            self.control = Some(Control::connect(&self.path("test.sock")));
        }
        self.control.as_mut().expect("control connected above")
    }

    /// Runs a shell command inside the guest; returns (output, exit status).
    pub fn guest(&mut self, cmd: &str) -> (String, i32) {
        self.control().run(cmd)
    }

    /// Like [`Vm::guest`] but asserts exit status 0.
    pub fn guest_ok(&mut self, cmd: &str) -> String {
        self.control().run_ok(cmd)
    }

    /// The guest writer's progress counter.
    pub fn progress(&mut self) -> u64 {
        self.control().progress()
    }

    /// Polls until the counter moves past `from` (true) or `timeout` passes (false).
    pub fn progress_moves(&mut self, from: u64, timeout: Duration) -> bool {
        self.control().progress_moves(from, timeout)
    }

    /// The current agent pid inside the guest (from the supervise loop).
    pub fn agent_pid(&mut self) -> u32 {
        self.guest_ok("cat /run/agent.pid")
            .trim()
            .parse()
            .expect("agent pid")
    }

    /// Waits until the supervise loop has started an agent other than `old`.
    pub fn wait_new_agent(&mut self, old: u32) -> u32 {
        let deadline = Instant::now() + REPLY_TIMEOUT;
        loop {
            let (out, _) = self.guest("cat /run/agent.pid");
            if let Ok(p) = out.trim().parse::<u32>() {
                if p != old && self.guest(&format!("kill -0 {p}")).1 == 0 {
                    return p;
                }
            }
            assert!(Instant::now() < deadline, "agent was not restarted");
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Restarts the agent with new arguments (stops it with `signal`, the loop restarts it).
    pub fn restart_agent(&mut self, args: &str, signal: &str) -> u32 {
        let old = self.agent_pid();
        self.guest_ok(&format!(
            "echo '{args}' > /run/agent.args && kill -{signal} {old}"
        ));
        self.wait_new_agent(old)
    }

    /// The agent's default command line in this VM.
    pub fn default_agent_args() -> &'static str {
        "-m virtio-serial -p /dev/virtio-ports/org.qemu.guest_agent.0 -t /run/agent-state -F/etc/guestlink-vm/hooks/ok"
    }

    /// Sends QMP quit and waits for QEMU to exit.
    pub fn stop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = writeln!(self.qmp.stream, "{}", json!({"execute": "quit"}));
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = self.child.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }

    /// Waits for QEMU to exit by itself (e.g. after guest-shutdown).
    pub fn wait_exit(&mut self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        false
    }
}

impl Drop for Vm {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("--- guest console ---\n{}", self.console());
            if let Some(c) = self.control.as_mut() {
                c.dump_agent_log();
            }
        }
        self.stop();
    }
}
