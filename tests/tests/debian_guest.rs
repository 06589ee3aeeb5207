//! The installable guest packages in a real Debian 12 guest: runs `tests/debian-guest/run`, which builds the .debs
//! (`packaging/build-debs`, lintian included), checks that the server package `guestlinkd` holds no desktop code,
//! debootstraps bookworm (cached in /var/cache/guestlink-debian-guest), installs `guestlinkd`, `guestlink-desktop`
//! and the `guestlink-guest` metapackage, and boots it twice under QEMU/TCG with systemd as init:
//! - both ports: `guestlinkd.service` and the confined `guestlink-spice.service` each started by its own port
//!   (udev), their units, both sandboxes as the kernel sees them, `systemd-analyze security guestlink-spice.service`
//!   recorded and its exposure below `SECURITY_MAX` (check.py), the user unit, a real freeze/thaw of `/`;
//! - the SPICE port only: guestlinkd never starts, guestlink-spice serves the X session's agent, and the host
//!   (`guestlink --spice-socket`) gets clipboard both ways and a resize, seen in the guest by xclip and xrandr;
//!   the real uinput tablet under the session's Xorg (libinput): `guestlink mouse` positions land (xdotool), the
//!   first after the agent started and the first after a resize included, and a click arrives (xinput test-xi2).
//!
//! Needs root, debootstrap, qemu-system-x86_64, mkfs.ext4, busybox-static and a Debian kernel in /boot; skips
//! loudly without them unless `GUESTLINK_REQUIRE_VM=1` (set by CI), which turns the skip into a failure.
//! Takes about 4–7 min warm and 8–12 min cold (release build and debootstrap) on 2 cores.
//!
//! Run: `cargo test -p tests --test debian_guest -- --nocapture`
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test target: unwrap is how a set-up step fails

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;

/// Upper bound for the whole script (cold: cargo release build + debootstrap + two boots under TCG on a loaded box).
const TIMEOUT: Duration = Duration::from_secs(40 * 60);

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("debian-guest")
        .join("run")
}

/// `Some(reason)` when this machine cannot run the test.
fn missing_prerequisite() -> Option<String> {
    if !nix::unistd::Uid::effective().is_root() {
        return Some("not root (debootstrap and chroot need root)".to_owned());
    }
    for tool in [
        "debootstrap",
        "qemu-system-x86_64",
        "mkfs.ext4",
        "dpkg-buildpackage",
        "python3",
    ] {
        let found = Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !found {
            return Some(format!(
                "{tool} is not installed (.ci/install-deps installs it)"
            ));
        }
    }
    let has_kernel = std::fs::read_dir("/boot").is_ok_and(|d| {
        d.flatten()
            .any(|e| e.file_name().to_string_lossy().starts_with("vmlinuz-"))
    });
    if !has_kernel {
        return Some("no Debian kernel in /boot (linux-image-amd64)".to_owned());
    }
    None
}

#[test]
fn guest_package_in_debian_guest() {
    if let Some(reason) = missing_prerequisite() {
        guestlink_tests::gate::skip(
            guestlink_tests::gate::Gate::Vm,
            &format!("debian_guest: {reason}"),
        );
        return;
    }
    let started = Instant::now();
    // Own process group, so a timeout kills the script, QEMU and the checker together.
    let mut child = Command::new("bash")
        .arg(script())
        .process_group(0)
        .stdin(Stdio::null())
        .spawn()
        .expect("starting tests/debian-guest/run");
    let pgid = Pid::from_raw(i32::try_from(child.id()).expect("pid fits in i32"));
    let status = loop {
        match child
            .try_wait()
            .expect("waiting for tests/debian-guest/run")
        {
            Some(status) => break status,
            None if started.elapsed() > TIMEOUT => {
                let _ = killpg(pgid, Signal::SIGTERM);
                std::thread::sleep(Duration::from_secs(5));
                let _ = killpg(pgid, Signal::SIGKILL);
                let _ = child.wait();
                panic!("tests/debian-guest/run did not finish within {TIMEOUT:?}");
            }
            None => std::thread::sleep(Duration::from_millis(500)),
        }
    };
    eprintln!(
        "debian_guest: tests/debian-guest/run finished in {:.0}s: {status}",
        started.elapsed().as_secs_f64()
    );
    assert!(
        status.success(),
        "tests/debian-guest/run failed ({status}); its output above shows the failing step"
    );
}
