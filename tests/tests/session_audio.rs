//! AUDIO_VOLUME_SYNC in guestlink-session against a real PulseAudio 16 (a user-session server on a temporary
//! `XDG_RUNTIME_DIR`, with a null sink and a null source as the defaults) on an Xvfb session: the sink's and
//! source's volume and mute, as `pactl` reads them back, follow the messages of a fake guestlinkd, and a
//! host peer's AUDIO_VOLUME_SYNC through a real guestlinkd (which announces the capability).
//!
//! Run: `cargo test -p tests --test session_audio` (needs pulseaudio, pulseaudio-utils; listed in
//! `.ci/apt.d/session.txt`).
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test target: unwrap is how a set-up step fails

use guestlink_tests::spice as spice_common;
use guestlink_tests::x11 as support;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use guestlink_protocol::session::SessionMessage;
use guestlink_protocol::vdagent::{AudioVolumeSync, Capability, Message, Port};
use spice_common::daemon_peers::{Host, Setup};
use support::{Harness, Xvfb};

/// A PulseAudio server of its own (no default script: only the native protocol, a null sink and a null source).
struct Pulse {
    child: Child,
    _dir: tempfile::TempDir,
    runtime: PathBuf,
    home: PathBuf,
}

impl Pulse {
    fn start() -> Pulse {
        let dir = tempfile::tempdir().expect("tempdir");
        let runtime = dir.path().join("runtime");
        let home = dir.path().join("home");
        std::fs::create_dir_all(&runtime).expect("runtime");
        // A real XDG_RUNTIME_DIR is private (0700); guestlink-session keeps its instance lock only in such a one.
        std::fs::set_permissions(&runtime, std::fs::Permissions::from_mode(0o700)).expect("chmod");
        std::fs::create_dir_all(&home).expect("home");
        let log = std::fs::File::create(dir.path().join("pulse.log")).expect("log");
        let child = Command::new("pulseaudio")
            .args([
                "-n",
                "--daemonize=no",
                "--exit-idle-time=-1",
                "--use-pid-file=no",
                "--log-target=stderr",
                "-L",
                "module-native-protocol-unix",
                "-L",
                "module-null-sink sink_name=guestlink_null",
                "-L",
                "module-null-source source_name=guestlink_null_source",
            ])
            .env("XDG_RUNTIME_DIR", &runtime)
            .env("HOME", &home)
            .env_remove("PULSE_SERVER")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawning pulseaudio");
        let p = Pulse {
            child,
            _dir: dir,
            runtime,
            home,
        };
        let deadline = Instant::now() + support::WAIT;
        while !p.pactl(&["info"]).contains("Default Sink: guestlink_null") {
            assert!(Instant::now() < deadline, "pulseaudio did not start");
            std::thread::sleep(Duration::from_millis(100));
        }
        p
    }

    fn pactl(&self, args: &[&str]) -> String {
        Command::new("pactl")
            .args(args)
            .env("XDG_RUNTIME_DIR", &self.runtime)
            .env("HOME", &self.home)
            .env_remove("PULSE_SERVER")
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default()
    }

    /// Waits until `pactl args` prints every one of `wanted` (`log`: the agent's, shown on failure).
    fn wait_for(&self, args: &[&str], wanted: &[&str], log: &dyn Fn() -> String) {
        let deadline = Instant::now() + support::WAIT;
        loop {
            let out = self.pactl(args);
            if wanted.iter().all(|w| out.contains(w)) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "pactl {args:?} never showed {wanted:?}; last:\n{out}\nagent log:\n{}",
                log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Pulse {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn volume(is_playback: bool, mute: bool, volumes: &[u16]) -> SessionMessage {
    SessionMessage::AudioVolumeSync {
        is_playback,
        mute,
        volumes: volumes.to_vec(),
    }
}

fn peers_present() -> bool {
    support::tools_present()
        && support::common::tools_present(
            &["pulseaudio", "pactl"],
            "session.txt",
            "pulseaudio pulseaudio-utils",
        )
}

#[test]
fn volume_sync_sets_the_default_sink_and_source_of_pulseaudio() {
    if !peers_present() {
        return;
    }
    let pulse = Pulse::start();
    let x = Xvfb::start(1024, 768);
    let dir = tempfile::tempdir().expect("tempdir");
    let env: [(&str, &Path); 2] = [("XDG_RUNTIME_DIR", &pulse.runtime), ("HOME", &pulse.home)];
    let mut h = Harness::start_in(&x, dir, &env);
    let sink = ["get-sink-volume", "@DEFAULT_SINK@"];
    let sink_mute = ["get-sink-mute", "@DEFAULT_SINK@"];
    let source = ["get-source-volume", "@DEFAULT_SOURCE@"];
    let source_mute = ["get-source-mute", "@DEFAULT_SOURCE@"];

    // Playback, stereo, muted: each channel scaled to PA's 100 % = 65536.
    h.send(&volume(true, true, &[32768, 16384]));
    pulse.wait_for(
        &sink,
        &["front-left: 32769 ", "front-right: 16384 "],
        &|| h.log(),
    );
    pulse.wait_for(&sink_mute, &["Mute: yes"], &|| h.log());
    // Unmuted at full volume.
    h.send(&volume(true, false, &[65535, 65535]));
    pulse.wait_for(
        &sink,
        &["front-left: 65536 ", "front-right: 65536 "],
        &|| h.log(),
    );
    pulse.wait_for(&sink_mute, &["Mute: no"], &|| h.log());
    // Record, mono on a stereo source: one value for every channel; muted.
    h.send(&volume(false, true, &[49151]));
    pulse.wait_for(
        &source,
        &["front-left: 49152 ", "front-right: 49152 "],
        &|| h.log(),
    );
    pulse.wait_for(&source_mute, &["Mute: yes"], &|| h.log());
    // Three channels for a two-channel source: refused per channel, then the loudest for all.
    h.send(&volume(false, false, &[1000, 3000, 2000]));
    pulse.wait_for(
        &source,
        &["front-left: 3000 ", "front-right: 3000 "],
        &|| h.log(),
    );
    pulse.wait_for(&source_mute, &["Mute: no"], &|| h.log());
    // The sink was left alone by the record messages.
    pulse.wait_for(&sink, &["front-left: 65536 "], &|| h.log());
    assert!(h.alive());
}

/// The whole path: a host peer's AUDIO_VOLUME_SYNC on the client port → guestlinkd → guestlink-session →
/// PulseAudio's default sink.
#[test]
fn volume_from_a_host_peer_reaches_pulseaudio_through_guestlinkd() {
    if !peers_present() {
        return;
    }
    let pulse = Pulse::start();
    let x = Xvfb::start(1024, 768);
    let s = Setup::start();
    let log_path = s.dir.path().join("session.log");
    std::fs::create_dir(s.dir.path().join("downloads")).expect("downloads");
    let _agent = spice_common::Procs(vec![Command::new(support::session_binary())
        .arg("--socket")
        .arg(s.session_socket())
        .arg("--download-dir")
        .arg(s.dir.path().join("downloads"))
        .arg("-v")
        .env("DISPLAY", &x.display)
        .env("XDG_RUNTIME_DIR", &pulse.runtime)
        .env("HOME", &pulse.home)
        .env_remove("WAYLAND_DISPLAY")
        .env_remove("PULSE_SERVER")
        .stderr(std::fs::File::create(&log_path).expect("log"))
        .spawn()
        .expect("spawning guestlink-session")]);
    let mut host = Host::accept(&s.listener);
    let caps = host.handshake();
    assert!(
        caps.has(Capability::AudioVolumeSync),
        "guestlinkd must announce AUDIO_VOLUME_SYNC (spice-gtk sends volumes only then)"
    );
    host.send(
        Port::Client,
        &Message::AudioVolumeSync(AudioVolumeSync {
            is_playback: true,
            mute: true,
            volumes: vec![16384, 16384],
        }),
    );
    let log = || std::fs::read_to_string(&log_path).unwrap_or_default();
    let sink = ["get-sink-volume", "@DEFAULT_SINK@"];
    pulse.wait_for(&sink, &["front-left: 16384 ", "front-right: 16384 "], &log);
    pulse.wait_for(&["get-sink-mute", "@DEFAULT_SINK@"], &["Mute: yes"], &log);
}
