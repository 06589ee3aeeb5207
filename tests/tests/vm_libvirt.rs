//! Real libvirt against the agent in the micro-VM: a transient `qemu` (TCG) domain with `<kernel>`/`<initrd>` and a
//! unix `<channel>` named `org.qemu.guest_agent.0`, driven with `virsh domfsfreeze/domfsthaw`,
//! `qemu-agent-command`, `guestinfo`, `domtime`, `domfsinfo` and `snapshot-create-as --disk-only --quiesce` (the
//! frozen base image must be a clean ext4 that needs no journal recovery). The same domain is then driven by the
//! built `guestlink` CLI with `--libvirt-uri qemu:///system --domain NAME` (queries, exec, file push/pull and
//! `quiesce` around a host command that checks the guest writer is stalled).
//!
//! Needs virsh and a reachable `qemu:///system`; where no service manager runs libvirtd, `tests/vm/libvirt-up`
//! starts one for the test (with an idle timeout) and stops it afterwards. Skips loudly otherwise, unless
//! `GUESTLINK_REQUIRE_LIBVIRT=1` or `GUESTLINK_REQUIRE_VM=1` (opt out with `GUESTLINK_REQUIRE_LIBVIRT=0`).
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test target: unwrap is how a set-up step fails

use guestlink_tests::vm as harness;

use harness::{Control, VmEnv};
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const URI: &str = "qemu:///system";

fn virsh(args: &[&str]) -> (bool, String) {
    let out = Command::new("timeout")
        .arg("120")
        .arg("virsh")
        .arg("-c")
        .arg(URI)
        .args(args)
        .output()
        .expect("run virsh");
    let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text.trim().to_string())
}

fn virsh_ok(args: &[&str]) -> String {
    let (ok, text) = virsh(args);
    assert!(ok, "virsh {args:?} failed: {text}");
    text
}

/// Starts libvirtd if needed; the returned guard stops what it started.
struct Libvirt {
    state: tempfile::TempDir,
    script: PathBuf,
}

impl Drop for Libvirt {
    fn drop(&mut self) {
        let _ = Command::new(&self.script)
            .arg("stop")
            .arg(self.state.path())
            .status();
    }
}

fn libvirt_gate(env: &VmEnv) -> Option<Libvirt> {
    let script = env.vm_dir.join("libvirt-up");
    let state = tempfile::tempdir().expect("tempdir");
    let out = Command::new(&script)
        .arg("start")
        .arg(state.path())
        .output();
    match out {
        Ok(o) if o.status.success() => {
            eprintln!("[libvirt] {}", String::from_utf8_lossy(&o.stdout).trim());
            Some(Libvirt { state, script })
        }
        other => {
            let why = match other {
                Ok(o) => String::from_utf8_lossy(&o.stderr).into_owned(),
                Err(e) => e.to_string(),
            };
            // Gate::Libvirt follows GUESTLINK_REQUIRE_VM unless GUESTLINK_REQUIRE_LIBVIRT is set (0 opts out).
            guestlink_tests::gate::skip(
                guestlink_tests::gate::Gate::Libvirt,
                &format!("vm_libvirt: qemu:///system not available: {}", why.trim()),
            );
            None
        }
    }
}

/// A transient libvirt domain running the micro-VM; destroyed on drop.
struct Domain {
    name: String,
    dir: tempfile::TempDir,
}

impl Domain {
    fn create(env: &VmEnv) -> Domain {
        let initrd = harness::initramfs(env);
        let kernel = std::fs::read_to_string(format!("{}.kernel", initrd.display()))
            .expect("initrd.kernel")
            .trim()
            .to_string();
        let dir = tempfile::Builder::new()
            .prefix("guestlink-virt.")
            .tempdir()
            .expect("tempdir");
        // qemu runs as libvirt-qemu: it must reach the images (dynamic_ownership chowns the files themselves).
        let st = Command::new("chmod")
            .arg("0755")
            .arg(dir.path())
            .status()
            .expect("chmod");
        assert!(st.success());
        for (img, size) in [("data.img", "32M"), ("data2.img", "16M")] {
            let p = dir.path().join(img);
            let st = Command::new("sh")
                .arg("-c")
                .arg(format!(
                    "truncate -s {size} '{0}' && mkfs.ext4 -q -F '{0}'",
                    p.display()
                ))
                .status()
                .expect("mkfs");
            assert!(st.success(), "mkfs.ext4 {img}");
        }
        let name = format!("guestlink-test-{}", std::process::id());
        let d = dir.path().display();
        let xml = format!(
            r#"<domain type='qemu'>
  <name>{name}</name>
  <memory unit='MiB'>256</memory>
  <vcpu>1</vcpu>
  <os>
    <type arch='x86_64' machine='pc'>hvm</type>
    <kernel>{kernel}</kernel>
    <initrd>{initrd}</initrd>
    <cmdline>console=ttyS0 panic=-1 quiet</cmdline>
  </os>
  <on_poweroff>destroy</on_poweroff><on_reboot>destroy</on_reboot><on_crash>destroy</on_crash>
  <devices>
    <disk type='file' device='disk'><driver name='qemu' type='raw'/><source file='{d}/data.img'/><target dev='vda' bus='virtio'/><serial>gl-data</serial></disk>
    <disk type='file' device='disk'><driver name='qemu' type='raw'/><source file='{d}/data2.img'/><target dev='vdb' bus='virtio'/><serial>gl-data2</serial></disk>
    <serial type='file'><source path='{d}/console.log'/><target port='0'/></serial>
    <channel type='unix'><source mode='bind'/><target type='virtio' name='org.qemu.guest_agent.0'/></channel>
    <channel type='unix'><source mode='bind'/><target type='virtio' name='org.guestlink.test.0'/></channel>
    <memballoon model='none'/>
  </devices>
</domain>
"#,
            initrd = initrd.display()
        );
        let xml_path = dir.path().join("domain.xml");
        std::fs::write(&xml_path, xml).expect("write domain.xml");
        let _ = virsh(&["destroy", &name]);
        virsh_ok(&["create", &xml_path.to_string_lossy()]);
        Domain { name, dir }
    }

    fn channel_path(&self, target: &str) -> PathBuf {
        let xml = virsh_ok(&["dumpxml", &self.name]);
        let needle = format!("/{target}'");
        let line = xml
            .lines()
            .find(|l| l.contains("<source mode='bind' path='") && l.contains(&needle))
            .unwrap_or_else(|| panic!("no channel {target} in dumpxml"));
        let start = line.find("path='").expect("path attr") + 6;
        let end = line[start..].find('\'').expect("quote") + start;
        PathBuf::from(&line[start..end])
    }

    fn agent(&self, json: &str) -> Result<Value, String> {
        let (ok, text) = virsh(&["qemu-agent-command", &self.name, json, "--timeout", "30"]);
        if !ok {
            return Err(text);
        }
        let v: Value = serde_json::from_str(&text).map_err(|e| format!("{e}: {text}"))?;
        Ok(v["return"].clone())
    }

    fn console(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("console.log")).unwrap_or_default()
    }
}

impl Drop for Domain {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("--- guest console ---\n{}", self.console());
        }
        let _ = virsh(&["destroy", &self.name]);
    }
}

fn count_in(text: &str, prefix: &str) -> u64 {
    // "Froze 2 filesystem(s)" / "Thawed 2 filesystem(s)"
    text.lines()
        .find_map(|l| l.trim().strip_prefix(prefix))
        .and_then(|r| r.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no '{prefix} N' in: {text}"))
}

/// `guestlink`: `$GUESTLINK_BIN`, else built once with `cargo build -p host`.
fn guestlink_bin() -> &'static PathBuf {
    guestlink_tests::bins::guestlink_path()
}

/// `guestlink --libvirt-uri qemu:///system --domain NAME ARGS…` with generous timeouts (TCG, loaded machine).
fn guestlink(domain: &str, args: &[&str]) -> Output {
    let out = Command::new(guestlink_bin())
        .args(["--libvirt-uri", URI, "--domain", domain])
        .args(["--agent-timeout", "60"])
        .args(args)
        .env_remove("GUESTLINK_SOCKET")
        .env_remove("GUESTLINK_VIRSH")
        .stdin(Stdio::null())
        .output()
        .expect("run guestlink");
    // The quiesce host command is long: log the options up to `--`.
    let shown: Vec<&str> = args.iter().copied().take_while(|a| *a != "--").collect();
    eprintln!(
        "[guestlink] {shown:?} -> {} ({} bytes stdout)",
        out.status,
        out.stdout.len()
    );
    out
}

/// Like [`guestlink`], asserting exit status 0; returns stdout.
fn guestlink_ok(domain: &str, args: &[&str]) -> String {
    let out = guestlink(domain, args);
    assert!(
        out.status.success(),
        "guestlink {args:?} failed ({}): {}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn json_doc(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

fn sha256_hex(data: &[u8]) -> String {
    Sha256::digest(data)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[test]
fn vm_libvirt_virsh() {
    let Some(env) = harness::gate("vm_libvirt_virsh") else {
        return;
    };
    let Some(_libvirt) = libvirt_gate(&env) else {
        return;
    };
    let dom = Domain::create(&env);
    let name = dom.name.clone();

    eprintln!("[libvirt] waiting for the agent (virsh qemu-agent-command guest-ping)");
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        match dom.agent(r#"{"execute":"guest-ping"}"#) {
            Ok(v) if v == serde_json::json!({}) => break,
            other => {
                assert!(
                    Instant::now() < deadline,
                    "agent never answered libvirt: {other:?}"
                );
                std::thread::sleep(Duration::from_secs(1));
            }
        }
    }
    let xml = virsh_ok(&["dumpxml", &name]);
    assert!(
        xml.contains("name='org.qemu.guest_agent.0' state='connected'"),
        "libvirt does not see the agent channel as connected"
    );
    let mut ctl = Control::connect(Path::new(&dom.channel_path("org.guestlink.test.0")));

    eprintln!("[libvirt] qemu-agent-command");
    let info = dom
        .agent(r#"{"execute":"guest-info"}"#)
        .expect("guest-info");
    assert!(info["version"].is_string(), "{info}");
    let uname = ctl.run_ok("uname -r");
    let os = dom
        .agent(r#"{"execute":"guest-get-osinfo"}"#)
        .expect("osinfo");
    assert_eq!(os["kernel-release"], uname.as_str());

    eprintln!("[libvirt] virsh guestinfo / domfsinfo / domtime");
    let gi = virsh_ok(&["guestinfo", &name]);
    for want in [
        "hostname            : guestlink-vm",
        "os.id               : guestlink-vm",
        &format!("os.kernel-release   : {uname}"),
        "fs.count            : 3",
        "timezone.offset",
    ] {
        assert!(gi.contains(want), "guestinfo lacks {want:?}:\n{gi}");
    }
    let fsinfo = virsh_ok(&["domfsinfo", &name]);
    // Three entries, the bind mount /mnt/bind of /mnt/data included, as with qemu-ga.
    let rows: Vec<Vec<&str>> = fsinfo
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .filter(|w| w.first().is_some_and(|m| m.starts_with('/')))
        .collect();
    assert_eq!(rows.len(), 3, "domfsinfo:\n{fsinfo}");
    for want in [
        ["/mnt/data", "vda", "ext4", "vda"],
        ["/mnt/data2", "vdb", "ext4", "vdb"],
        ["/mnt/bind", "vda", "ext4", "vda"],
    ] {
        assert!(
            rows.iter().any(|r| r[..] == want[..]),
            "domfsinfo lacks {want:?}:\n{fsinfo}"
        );
    }
    let t = virsh_ok(&["domtime", &name]);
    let guest_s: i64 = t
        .trim()
        .strip_prefix("Time:")
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or_else(|| panic!("domtime: {t}"));
    let host_s = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs() as i64;
    assert!(
        (guest_s - host_s).abs() < 600,
        "domtime {guest_s} vs host {host_s}"
    );

    eprintln!("[libvirt] domfsfreeze / domfsthaw");
    let p0 = ctl.progress();
    assert!(
        ctl.progress_moves(p0, Duration::from_secs(30)),
        "writer not running"
    );
    assert_eq!(count_in(&virsh_ok(&["domfsfreeze", &name]), "Froze"), 2);
    let st = dom
        .agent(r#"{"execute":"guest-fsfreeze-status"}"#)
        .expect("status");
    assert_eq!(st, "frozen");
    let p1 = ctl.progress();
    std::thread::sleep(Duration::from_millis(1500));
    let p2 = ctl.progress();
    assert!(
        p2 <= p1 + 1,
        "writer kept writing while frozen: {p1} -> {p2}"
    );
    assert_eq!(count_in(&virsh_ok(&["domfsthaw", &name]), "Thawed"), 2);
    assert!(
        ctl.progress_moves(p2, Duration::from_secs(30)),
        "writer did not resume"
    );

    assert_eq!(
        count_in(
            &virsh_ok(&["domfsfreeze", &name, "--mountpoint", "/mnt/data"]),
            "Froze"
        ),
        1
    );
    assert_eq!(
        ctl.run_ok("echo ok > /mnt/data2/x && cat /mnt/data2/x"),
        "ok"
    );
    assert_eq!(count_in(&virsh_ok(&["domfsthaw", &name]), "Thawed"), 1);
    let st = dom
        .agent(r#"{"execute":"guest-fsfreeze-status"}"#)
        .expect("status");
    assert_eq!(st, "thawed");

    eprintln!("[libvirt] the agent restarts inside the guest; libvirt reconnects by itself");
    let old = ctl.run_ok("cat /run/agent.pid");
    ctl.run_ok(&format!("kill -9 {old}"));
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let pid = ctl.run_ok("cat /run/agent.pid");
        if pid != old {
            if let Ok(v) = dom.agent(r#"{"execute":"guest-ping"}"#) {
                assert_eq!(v, serde_json::json!({}));
                break;
            }
        }
        assert!(
            Instant::now() < deadline,
            "libvirt did not reach the restarted agent"
        );
        std::thread::sleep(Duration::from_millis(500));
    }

    let mut ctl = guestlink_cli_over_libvirt(&env, &dom, ctl, &info);

    eprintln!(
        "[libvirt] snapshot-create-as --disk-only --quiesce (libvirt's freeze → snapshot → thaw)"
    );
    ctl.run_ok(": > /run/hook.log");
    let d = dom.dir.path();
    let spec_a = format!("vda,file={}/overlay-a.qcow2", d.display());
    let spec_b = format!("vdb,file={}/overlay-b.qcow2", d.display());
    virsh_ok(&[
        "snapshot-create-as",
        &name,
        "quiesced",
        "--disk-only",
        "--quiesce",
        "--no-metadata",
        "--diskspec",
        &spec_a,
        "--diskspec",
        &spec_b,
    ]);
    let hooks = ctl.run_ok("cat /run/hook.log");
    assert_eq!(
        hooks.lines().collect::<Vec<_>>(),
        ["freeze", "thaw"],
        "hook calls: {hooks}"
    );
    let st = dom
        .agent(r#"{"execute":"guest-fsfreeze-status"}"#)
        .expect("status");
    assert_eq!(st, "thawed");
    let p3 = ctl.progress();
    assert!(
        ctl.progress_moves(p3, Duration::from_secs(30)),
        "writer did not resume after the snapshot"
    );
    // The frozen image is now the read-only backing file. ext4's freeze flushes the journal and clears
    // needs_recovery, which a mounted, unfrozen ext4 always has set: so the base image must not need recovery.
    let dump = Command::new("dumpe2fs")
        .arg("-h")
        .arg(d.join("data.img"))
        .output()
        .expect("dumpe2fs");
    let dump = String::from_utf8_lossy(&dump.stdout);
    let features = dump
        .lines()
        .find(|l| l.starts_with("Filesystem features:"))
        .unwrap_or_else(|| panic!("dumpe2fs: {dump}"));
    assert!(
        !features.contains("needs_recovery"),
        "quiesced snapshot needs journal recovery: {features}"
    );
    let fsck = Command::new("e2fsck")
        .arg("-fn")
        .arg(d.join("data.img"))
        .output()
        .expect("e2fsck");
    assert!(
        fsck.status.success(),
        "quiesced snapshot is not clean: {}{}",
        String::from_utf8_lossy(&fsck.stdout),
        String::from_utf8_lossy(&fsck.stderr)
    );
}

/// Host command for `quiesce`: reads the guest writer's counter twice, 1.5 s apart, through the control port
/// (`tests/vm/guestctl`, `$1` = guestctl, `$2` = the port's socket) and exits 0 only if it stalled (one tick of
/// slack); it also checks that `/mnt/data2`, not frozen, stays writable.
const STALL_CHECK: &str = r#"c() { "$1" "$2" "$3"; }
p() { for i in 1 2 3 4 5 6 7 8 9 10; do v=$(c "$1" "$2" 'cat /run/progress'); case "$v" in ''|*[!0-9]*) sleep 0.2;; *) echo "$v"; return 0;; esac; done; return 1; }
p1=$(p "$1" "$2") || exit 10
sleep 1.5
p2=$(p "$1" "$2") || exit 10
[ "$(c "$1" "$2" 'echo ok > /mnt/data2/q && cat /mnt/data2/q')" = ok ] || exit 11
echo "stall-check: writer $p1 -> $p2" >&2
[ "$p2" -le $((p1 + 1)) ]"#;

/// The built `guestlink` CLI through real libvirt (`--libvirt-uri qemu:///system --domain NAME`) on the same
/// domain: queries, exec, file push/pull and quiesce. The control connection `ctl` is closed while the stall check
/// talks to the guest through the same port (one client at a time); a new connection is returned.
fn guestlink_cli_over_libvirt(
    env: &VmEnv,
    dom: &Domain,
    ctl: Control,
    virsh_info: &Value,
) -> Control {
    let name = dom.name.as_str();
    let mut ctl = ctl;
    let uname = ctl.run_ok("uname -r");

    eprintln!("[libvirt] guestlink --domain: ping, info, osinfo, fsinfo");
    let ping = guestlink_ok(name, &["ping"]);
    assert!(ping.starts_with("agent answered in "), "ping: {ping}");
    eprintln!("[libvirt] guestlink ping: {}", ping.trim());
    // virsh errors are passed through: a missing domain, and an agent error reply.
    let out = guestlink("guestlink-no-such-domain", &["ping"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("guestlink-no-such-domain"), "{stderr}");
    let out = guestlink(name, &["raw", "guest-no-such-command"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("guest-no-such-command"), "{stderr}");
    eprintln!("[libvirt] agent error through virsh: {}", stderr.trim());
    assert_eq!(
        json_doc(&guestlink_ok(name, &["--json", "ping"]))["ok"],
        true
    );

    let info = json_doc(&guestlink_ok(name, &["--json", "info"]));
    let version = info["version"]
        .as_str()
        .unwrap_or_else(|| panic!("info: {info}"));
    assert_eq!(info["version"], virsh_info["version"], "{info}");
    let names = |v: &Value| -> Vec<String> {
        v["supported_commands"]
            .as_array()
            .unwrap_or_else(|| panic!("no supported_commands: {v}"))
            .iter()
            .map(|c| {
                c["name"]
                    .as_str()
                    .unwrap_or_else(|| panic!("{c}"))
                    .to_owned()
            })
            .collect()
    };
    let cmds = names(&info);
    assert_eq!(
        cmds,
        names(virsh_info),
        "guestlink info vs virsh guest-info"
    );
    for want in [
        "guest-ping",
        "guest-info",
        "guest-exec",
        "guest-exec-status",
        "guest-file-open",
        "guest-file-read",
        "guest-file-write",
        "guest-fsfreeze-freeze-list",
        "guest-fsfreeze-thaw",
        "guest-get-fsinfo",
        "guest-get-osinfo",
    ] {
        assert!(
            cmds.iter().any(|c| c == want),
            "info lacks {want}: {cmds:?}"
        );
    }
    let human = guestlink_ok(name, &["info"]);
    assert!(human.contains(version), "info: {human}");

    let os = guestlink_ok(name, &["osinfo"]);
    assert!(os.contains(&uname), "osinfo lacks {uname}: {os}");
    let os = json_doc(&guestlink_ok(name, &["--json", "osinfo"]));
    assert_eq!(os["kernel-release"], uname.as_str(), "{os}");
    assert_eq!(os["id"], "guestlink-vm", "{os}");

    let fs = guestlink_ok(name, &["fsinfo"]);
    assert!(
        fs.lines().any(|l| {
            let w: Vec<_> = l.split_whitespace().collect();
            w.first() == Some(&"/mnt/data") && w.contains(&"ext4")
        }),
        "fsinfo lacks /mnt/data ext4:\n{fs}"
    );
    let fs = json_doc(&guestlink_ok(name, &["--json", "fsinfo"]));
    let mounts: Vec<&str> = fs
        .as_array()
        .unwrap_or_else(|| panic!("fsinfo: {fs}"))
        .iter()
        .filter_map(|f| f["mountpoint"].as_str())
        .collect();
    assert!(mounts.contains(&"/mnt/data"), "{mounts:?}");
    assert!(mounts.contains(&"/mnt/data2"), "{mounts:?}");

    eprintln!("[libvirt] guestlink --domain exec");
    let out = guestlink(name, &["exec", "--", "/bin/echo", "hi"]);
    assert_eq!(
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).as_ref()
        ),
        (Some(0), "hi\n"),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = guestlink(name, &["exec", "--", "/bin/sh", "-c", "exit 3"]);
    assert_eq!(
        out.status.code(),
        Some(3),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );

    eprintln!("[libvirt] guestlink --domain file push / pull");
    let scratch = tempfile::tempdir().expect("tempdir");
    let mut data = vec![0u8; (1 << 20) + 17];
    std::io::Read::read_exact(
        &mut std::fs::File::open("/dev/urandom").expect("urandom"),
        &mut data,
    )
    .expect("read urandom");
    let sum = sha256_hex(&data);
    let src = scratch.path().join("src.bin");
    std::fs::write(&src, &data).expect("write src");
    let src_s = src.to_string_lossy().into_owned();
    // Default chunk sizes: push in 90 KiB chunks (one virsh argument each, 12 calls), pull in one 4 MiB chunk
    // (the reply comes on virsh's stdout).
    let push = json_doc(&guestlink_ok(
        name,
        &["--json", "file", "push", &src_s, "/run/gl-cli.bin"],
    ));
    assert_eq!(push["sha256"], sum.as_str(), "{push}");
    assert_eq!(push["bytes"], data.len(), "{push}");
    let guest_sum = ctl.run_ok("sha256sum /run/gl-cli.bin");
    assert_eq!(guest_sum.split_whitespace().next(), Some(sum.as_str()));
    let back = scratch.path().join("back.bin");
    let back_s = back.to_string_lossy().into_owned();
    let pull = json_doc(&guestlink_ok(
        name,
        &["--json", "file", "pull", "/run/gl-cli.bin", &back_s],
    ));
    assert_eq!(pull["sha256"], sum.as_str(), "{pull}");
    eprintln!(
        "[libvirt] {} bytes: push {} s ({}, chunk {}), pull {} s ({}, chunk {})",
        data.len(),
        push["seconds"],
        push["verified"],
        push["chunk_size"],
        pull["seconds"],
        pull["verified"],
        pull["chunk_size"]
    );
    let got = std::fs::read(&back).expect("read pulled file");
    assert_eq!(sha256_hex(&got), sum, "pulled file differs");
    let mut left: Vec<String> = std::fs::read_dir(scratch.path())
        .expect("readdir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(left, ["back.bin", "src.bin"], "host leftovers");
    // Requests that cannot be one virsh argument (Linux: 128 KiB) fail with a clear error, not E2BIG.
    let out = Command::new(guestlink_bin())
        .args([
            "--libvirt-uri",
            URI,
            "--domain",
            name,
            "exec",
            "--",
            "/bin/cat",
        ])
        .stdin(std::fs::File::open(&src).expect("open src"))
        .output()
        .expect("run guestlink exec");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("too large for virsh"), "{stderr}");
    let guest_left = ctl.run_ok("ls -a /run");
    assert!(
        !guest_left.contains(".guestlink-"),
        "guest leftovers: {guest_left}"
    );
    ctl.run_ok("rm -f /run/gl-cli.bin");

    eprintln!("[libvirt] guestlink --domain quiesce --mountpoint /mnt/data -- <stall check>");
    let sock = dom.channel_path("org.guestlink.test.0");
    let sock_s = sock.to_string_lossy().into_owned();
    let guestctl = env.vm_dir.join("guestctl");
    let guestctl_s = guestctl.to_string_lossy().into_owned();
    let p0 = ctl.progress();
    assert!(
        ctl.progress_moves(p0, Duration::from_secs(30)),
        "writer not running"
    );
    drop(ctl);
    // The check must be able to fail: unfrozen, the writer moves and the same command exits non-zero.
    let unfrozen = Command::new("sh")
        .args(["-c", STALL_CHECK, "sh", &guestctl_s, &sock_s])
        .output()
        .expect("run stall check");
    eprintln!(
        "[libvirt] unfrozen: {}",
        String::from_utf8_lossy(&unfrozen.stderr).trim()
    );
    assert_eq!(
        unfrozen.status.code(),
        Some(1),
        "stall check on a running guest: {}",
        String::from_utf8_lossy(&unfrozen.stderr)
    );
    let quiesce = |json: bool| -> Output {
        let mut args: Vec<&str> = Vec::new();
        if json {
            args.push("--json");
        }
        args.extend([
            "quiesce",
            "--mountpoint",
            "/mnt/data",
            "--timeout",
            "300",
            "--",
            "sh",
            "-c",
            STALL_CHECK,
            "sh",
            &guestctl_s,
            &sock_s,
        ]);
        let out = guestlink(name, &args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        eprintln!("{}", stderr.trim_end());
        assert_eq!(out.status.code(), Some(0), "quiesce: {stderr}");
        out
    };
    // --json: the report document.
    let rep = json_doc(&String::from_utf8_lossy(&quiesce(true).stdout));
    assert_eq!(rep["frozen"], 1, "{rep}");
    assert_eq!(rep["thawed"], 1, "{rep}");
    assert_eq!(
        rep["command"],
        serde_json::json!({"result": "exited", "code": 0}),
        "{rep}"
    );
    assert_eq!(rep["exit_code"], 0, "{rep}");
    let frozen_ms = rep["frozen_ms"].as_u64().unwrap_or_else(|| panic!("{rep}"));
    assert!(
        frozen_ms >= 1500,
        "frozen window {frozen_ms} ms shorter than the check"
    );
    // Human mode: the summary line on stderr reports the frozen window.
    let out = quiesce(false);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let summary = stderr
        .lines()
        .find_map(|l| l.strip_prefix("guestlink: 1 filesystem(s) frozen for "))
        .unwrap_or_else(|| panic!("no frozen-window summary: {stderr}"));
    let (ms, rest) = summary
        .split_once(" ms, ")
        .unwrap_or_else(|| panic!("summary: {summary}"));
    assert_eq!(rest, "1 thawed; exit status 0", "summary: {summary}");
    let ms: u64 = ms.parse().unwrap_or_else(|e| panic!("{e}: {summary}"));
    assert!(ms >= 1500, "frozen window {ms} ms shorter than the check");
    eprintln!("[libvirt] quiesce frozen window: {frozen_ms} ms (--json), {ms} ms (human)");
    let mut ctl = Control::connect(&sock);
    let st = json_doc(&guestlink_ok(name, &["--json", "fsfreeze", "status"]));
    assert_eq!(st["status"], "thawed", "{st}");
    let st = dom
        .agent(r#"{"execute":"guest-fsfreeze-status"}"#)
        .expect("status");
    assert_eq!(st, "thawed");
    let p = ctl.progress();
    assert!(
        ctl.progress_moves(p, Duration::from_secs(30)),
        "writer did not resume after quiesce"
    );
    ctl
}
