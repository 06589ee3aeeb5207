//! A private `dbus-daemon` for tests, killed on drop.
//!
//! It is started with `--print-address` and is ready when it has printed it: the daemon prints its address once
//! it listens, whereas its socket file appears at bind(2), before listen(2), and a connection made in between is
//! refused (`ECONNREFUSED`: the flake of `logind_tests::identify_our_own_peer_through_logind`, 2026-12-08).

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

/// A running `dbus-daemon`; dropping it kills the daemon.
#[derive(Debug)]
pub struct DbusDaemon {
    child: Child,
    address: String,
}

impl DbusDaemon {
    /// Runs `dbus-daemon --nofork --print-address ARGS` (`ARGS`: a `--config-file=…`, or `--session --address …`)
    /// and returns once it listens.
    pub fn start(args: &[&str]) -> DbusDaemon {
        let mut child = Command::new("dbus-daemon")
            .args(["--nofork", "--print-address"])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start dbus-daemon (package dbus)");
        let out = child.stdout.take().unwrap();
        // Killed on drop from here on, also when the assertion below fails.
        let mut bus = DbusDaemon {
            child,
            address: String::new(),
        };
        let mut line = String::new();
        BufReader::new(out)
            .read_line(&mut line)
            .expect("read dbus-daemon's address");
        bus.address = line.trim().to_owned();
        assert!(
            !bus.address.is_empty(),
            "dbus-daemon exited without printing its address"
        );
        bus
    }

    /// The address it printed (`unix:path=…,guid=…`).
    pub fn address(&self) -> &str {
        &self.address
    }
}

impl Drop for DbusDaemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
