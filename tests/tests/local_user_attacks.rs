//! Local-user attacks on guestlinkd's QGA side and on guestlink-session (issue 16, findings 6, 8 and 9), each run
//! by a real unprivileged uid (`setpriv --reuid --regid --clear-groups`) against the real binaries:
//!
//! - `new_file_never_readable_by_a_watcher`: a watcher (uid 65534) spinning on `open()` of the next file name in a
//!   1777 directory never gets a descriptor on a file `guest-file-open` creates, nor sees it with a mode wider
//!   than the configured 0600 (the old code created it 0666 & ~umask and fchmod-ed it afterwards).
//! - `planted_symlink_at_old_state_temp_name_is_not_followed`: a symlink planted by the owner of the statedir at
//!   the old predictable temp name `.qga.state.<pid>.tmp` is neither written through nor renamed into place.
//! - `session_lock_cannot_be_blocked_from_tmp`: another uid's file at the old fallback name
//!   `/tmp/<uid>-guestlink-session-none.lock` does not block the agent: with a private `XDG_RUNTIME_DIR` it runs,
//!   without one (or with an unsafe one) it refuses with a clear error instead of using a shared directory.
//!
//! The tests need root (to create the attackers); without root they skip loudly, and fail under
//! `GUESTLINK_REQUIRE_PEERS=1`.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test target: unwrap is how a set-up step fails

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use guestlink_tests::gate::{self, which, Gate};
use guestlink_tests::{QgaAgent, QgaAgentKind};
use serde_json::json;

/// The attacker: `nobody`.
const ATTACKER: u32 = 65534;
/// The victim of the lock test: an unprivileged uid with no other files on the machine.
const VICTIM: u32 = 64990;

/// Whether the attacker can be created (root); `false` after a loud message when that is allowed to be missing.
fn can_drop_privileges(test: &str) -> bool {
    gate::require_root(
        Gate::Peers,
        &format!("{test} runs the attacker as another uid"),
    ) && gate::require_tools(Gate::Peers, &["setpriv"], "util-linux")
}

/// `setpriv` running `program` as `uid`:`uid` with no supplementary groups and a minimal environment.
fn as_uid(uid: u32, program: &Path) -> Command {
    let mut c = Command::new("setpriv");
    c.arg(format!("--reuid={uid}"))
        .arg(format!("--regid={uid}"))
        .arg("--clear-groups")
        .arg(program)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("HOME", "/nonexistent");
    c
}

fn chmod(p: &Path, mode: u32) {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode))
        .unwrap_or_else(|e| panic!("chmod {}: {e}", p.display()));
}

/// The watcher, run as the attacker: for each name it announces `ready I`, then spins on `open(O_RDONLY)` until
/// the file exists. A descriptor it gets is kept (and read at the end: the contents written after the open);
/// a refused open records the mode the file had. Ends when stdin says `done`.
const WATCHER: &str = r#"
import os, sys
d, n = sys.argv[1], int(sys.argv[2])
fds = {}
for i in range(n):
    p = os.path.join(d, "f%d" % i)
    print("ready %d" % i, flush=True)
    while True:
        try:
            fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK)
        except FileNotFoundError:
            continue
        except PermissionError:
            try:
                print("denied %d %o" % (i, os.lstat(p).st_mode & 0o7777), flush=True)
            except OSError:
                print("denied %d gone" % i, flush=True)
            break
        fds[i] = fd
        print("opened %d %o" % (i, os.fstat(fd).st_mode & 0o7777), flush=True)
        break
sys.stdin.readline()
for i, fd in fds.items():
    print("leak %d %r" % (i, os.read(fd, 4096)), flush=True)
print("end", flush=True)
"#;

fn read_line(r: &mut impl BufRead, what: &str) -> String {
    let mut line = String::new();
    let n = r.read_line(&mut line).expect("read watcher output");
    assert!(n > 0, "watcher ended early (waiting for {what})");
    line.trim_end().to_owned()
}

#[test]
fn new_file_never_readable_by_a_watcher() {
    if !can_drop_privileges("new_file_never_readable_by_a_watcher") {
        return;
    }
    let python = ["/usr/bin/python3", "/bin/python3"]
        .into_iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
        .expect("python3 (the watcher) is not installed");
    // A service's usual umask: without the fix, new files appear 0644 until the fchmod to 0600.
    nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o022));
    let shared = tempfile::Builder::new()
        .prefix("gl-shared-")
        .tempdir()
        .expect("tempdir");
    chmod(shared.path(), 0o1777);
    let mut agent = QgaAgent::builder(QgaAgentKind::Guestlinkd)
        .args(&["--file-mode", "0600"])
        .start()
        .expect("guestlinkd");
    let mut c = agent.connect();
    const TRIES: usize = 150;
    let mut watcher: Child = as_uid(ATTACKER, &python)
        .arg("-c")
        .arg(WATCHER)
        .arg(shared.path())
        .arg(TRIES.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn the watcher");
    let mut out = BufReader::new(watcher.stdout.take().expect("stdout"));
    let mut verdicts = Vec::new();
    for i in 0..TRIES {
        assert_eq!(read_line(&mut out, "ready"), format!("ready {i}"));
        let path = shared.path().join(format!("f{i}"));
        let h = c.ok(
            "guest-file-open",
            Some(json!({"path": path.to_str().unwrap(), "mode": "w"})),
        );
        let secret = base64_of(format!("secret {i}").as_bytes());
        c.ok(
            "guest-file-write",
            Some(json!({"handle": h, "buf-b64": secret})),
        );
        c.ok("guest-file-close", Some(json!({ "handle": h })));
        let mode = std::fs::metadata(&path).expect("created").mode() & 0o7777;
        assert_eq!(mode, 0o600, "final mode of {}", path.display());
        verdicts.push(read_line(&mut out, "verdict"));
    }
    let mut stdin = watcher.stdin.take().expect("stdin");
    writeln!(stdin, "done").expect("tell the watcher");
    let mut leaks = Vec::new();
    loop {
        let l = read_line(&mut out, "end");
        if l == "end" {
            break;
        }
        leaks.push(l);
    }
    let _ = watcher.wait();
    let opened: Vec<&String> = verdicts
        .iter()
        .filter(|v| v.starts_with("opened"))
        .collect();
    let wide: Vec<&String> = verdicts
        .iter()
        .filter(|v| v.starts_with("denied") && !v.ends_with(" 600"))
        .collect();
    eprintln!(
        "watcher: {} tries, {} opened, {} saw a mode other than 0600",
        TRIES,
        opened.len(),
        wide.len()
    );
    assert!(
        opened.is_empty() && leaks.is_empty(),
        "uid {ATTACKER} opened {} of {TRIES} new files: {opened:?}; read: {leaks:?}",
        opened.len()
    );
    assert!(wide.is_empty(), "modes seen: {wide:?}");
    drop(c);
    agent.stop();
}

fn base64_of(data: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(data)
}

#[test]
fn planted_symlink_at_old_state_temp_name_is_not_followed() {
    if !can_drop_privileges("planted_symlink_at_old_state_temp_name_is_not_followed") {
        return;
    }
    let top = tempfile::Builder::new()
        .prefix("gl-statedir-")
        .tempdir()
        .expect("tempdir");
    chmod(top.path(), 0o711);
    // A statedir the attacker owns (e.g. -t pointed at a user-writable directory); root's files elsewhere.
    let statedir = top.path().join("state");
    std::fs::create_dir(&statedir).expect("statedir");
    std::os::unix::fs::chown(&statedir, Some(ATTACKER), Some(ATTACKER)).expect("chown");
    chmod(&statedir, 0o755);
    let victim = top.path().join("victim");
    std::fs::write(&victim, b"precious\n").expect("victim");
    let mut agent = QgaAgent::builder(QgaAgentKind::Guestlinkd)
        .statedir(&statedir)
        .start()
        .expect("guestlinkd");
    let mut c = agent.connect();
    let old_name = statedir.join(format!(".qga.state.{}.tmp", agent.pid()));
    let ln = which("ln").expect("ln");
    let st = as_uid(ATTACKER, &ln)
        .arg("-s")
        .arg(&victim)
        .arg(&old_name)
        .status()
        .expect("ln as the attacker");
    assert!(st.success(), "planting the symlink failed: {st}");
    // Every guest-file-open rewrites qga.state.
    let target = agent.scratch().join("opened");
    let h = c.ok(
        "guest-file-open",
        Some(json!({"path": target.to_str().unwrap(), "mode": "w"})),
    );
    c.ok("guest-file-close", Some(json!({ "handle": h })));
    assert_eq!(
        std::fs::read(&victim).expect("victim"),
        b"precious\n",
        "the daemon wrote through the planted symlink"
    );
    let state = statedir.join("qga.state");
    let meta = std::fs::symlink_metadata(&state).expect("qga.state");
    assert!(
        meta.file_type().is_file(),
        "qga.state is not a regular file (the planted symlink was renamed into place?)"
    );
    assert_eq!(meta.uid(), 0);
    assert_eq!(
        std::fs::read_to_string(&state).expect("read qga.state"),
        format!("[global]\nfd_counter={}\n", h.as_i64().expect("handle") + 1)
    );
    assert!(
        std::fs::symlink_metadata(&old_name).is_ok_and(|m| m.file_type().is_symlink()),
        "the planted symlink is left alone"
    );
    let leftovers: Vec<String> = std::fs::read_dir(&statedir)
        .expect("readdir")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".qga.state.") && !n.ends_with(".tmp"))
        .collect();
    assert!(
        leftovers.is_empty(),
        "temp files left behind: {leftovers:?}"
    );
    drop(c);
    agent.stop();
}

/// Runs guestlink-session as [`VICTIM`] with `xdg` as `XDG_RUNTIME_DIR` (or none) and no display.
fn session_as_victim(xdg: Option<&Path>, socket: &Path) -> Child {
    let mut c = as_uid(VICTIM, guestlink_tests::bins::session_path());
    c.arg("--socket").arg(socket);
    if let Some(d) = xdg {
        c.env("XDG_RUNTIME_DIR", d);
    }
    c.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn guestlink-session")
}

/// Waits for `child` to exit (≤ 20 s) and returns its status code and stderr.
fn exit_and_stderr(mut child: Child) -> (Option<i32>, String) {
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(st) = child.try_wait().expect("wait") {
            break st;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("guestlink-session did not exit");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut err = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = std::io::Read::read_to_string(&mut e, &mut err);
    }
    (status.code(), err)
}

#[test]
fn session_lock_cannot_be_blocked_from_tmp() {
    if !can_drop_privileges("session_lock_cannot_be_blocked_from_tmp") {
        return;
    }
    let per_user = PathBuf::from(format!("/run/user/{VICTIM}"));
    assert!(
        !per_user.exists(),
        "{} exists on this machine; the test needs a uid without one",
        per_user.display()
    );
    // The attacker holds the old fallback name (mode 0600: the victim can neither open nor lock it).
    let old = std::env::temp_dir().join(format!("{VICTIM}-guestlink-session-none.lock"));
    let _ = std::fs::remove_file(&old);
    let touch = which("touch").expect("touch");
    let st = as_uid(ATTACKER, &touch).arg(&old).status().expect("touch");
    assert!(st.success());
    chmod(&old, 0o600);
    let top = tempfile::Builder::new()
        .prefix("gl-lock-")
        .tempdir()
        .expect("tempdir");
    chmod(top.path(), 0o711);
    let socket = top.path().join("no-daemon.sock");

    // 1. A private runtime dir: the agent starts and locks there, whatever sits in /tmp.
    let rt = top.path().join("rt");
    std::fs::create_dir(&rt).expect("rt");
    std::os::unix::fs::chown(&rt, Some(VICTIM), Some(VICTIM)).expect("chown");
    chmod(&rt, 0o700);
    let mut child = session_as_victim(Some(&rt), &socket);
    let lock = rt.join("guestlink-session-none.lock");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !lock.exists() {
        if let Ok(Some(_)) = child.try_wait() {
            let (code, err) = exit_and_stderr(child);
            panic!("guestlink-session exited ({code:?}) with a private runtime dir:\n{err}");
        }
        assert!(
            Instant::now() < deadline,
            "no lock file in {}",
            rt.display()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        matches!(child.try_wait(), Ok(None)),
        "the agent must keep running (waiting for guestlinkd)"
    );
    let _ = child.kill();
    let _ = child.wait();

    // 2. No XDG_RUNTIME_DIR and no /run/user/<uid>: a clear refusal, not the shared /tmp.
    let (code, err) = exit_and_stderr(session_as_victim(None, &socket));
    assert_ne!(code, Some(0), "{err}");
    assert!(
        err.contains("no safe directory for the instance lock") && err.contains("XDG_RUNTIME_DIR"),
        "unclear refusal: {err}"
    );
    assert!(!err.contains(old.to_str().unwrap()), "{err}");

    // 3. An XDG_RUNTIME_DIR others can write (here the attacker's 1777 dir, lock name pre-created): refused.
    let shared = top.path().join("shared");
    std::fs::create_dir(&shared).expect("shared");
    std::os::unix::fs::chown(&shared, Some(ATTACKER), Some(ATTACKER)).expect("chown");
    chmod(&shared, 0o1777);
    let planted = shared.join("guestlink-session-none.lock");
    let st = as_uid(ATTACKER, &touch)
        .arg(&planted)
        .status()
        .expect("touch");
    assert!(st.success());
    let (code, err) = exit_and_stderr(session_as_victim(Some(&shared), &socket));
    assert_ne!(code, Some(0), "{err}");
    assert!(
        err.contains("is not safe for the instance lock"),
        "unclear refusal: {err}"
    );
    let _ = std::fs::remove_file(&old);
}
