//! The workspace's binaries under test: the path in an environment variable when set (e.g. a release build for a
//! measurement), else `cargo build` once per test process so a test never runs a stale binary.

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

use crate::qga_agent::{target_dir, workspace_root};

/// `$env` if set; else builds `bin` of `package` (debug) and returns `<target>/debug/<bin>`.
pub fn workspace_binary(env: &[&str], package: &str, bin: &str) -> PathBuf {
    if let Some(p) = env.iter().find_map(std::env::var_os) {
        return PathBuf::from(p);
    }
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let status = Command::new(cargo)
        .args(["build", "-p", package, "--bin", bin])
        .current_dir(workspace_root())
        .status()
        .unwrap_or_else(|e| panic!("running cargo build -p {package}: {e}"));
    assert!(
        status.success(),
        "cargo build -p {package} failed: {status}"
    );
    let p = target_dir().join("debug").join(bin);
    assert!(p.exists(), "{} missing after the build", p.display());
    p
}

/// `guestlink` (`$GUESTLINK_BIN` or built).
pub fn guestlink_path() -> &'static PathBuf {
    static P: OnceLock<PathBuf> = OnceLock::new();
    P.get_or_init(|| workspace_binary(&["GUESTLINK_BIN"], "host", "guestlink"))
}

/// `guestlink-session` (`$GUESTLINK_SESSION` or `$GUESTLINK_SESSION_BIN`, or built).
pub fn session_path() -> &'static PathBuf {
    static P: OnceLock<PathBuf> = OnceLock::new();
    P.get_or_init(|| {
        workspace_binary(
            &["GUESTLINK_SESSION", "GUESTLINK_SESSION_BIN"],
            "guest-session",
            "guestlink-session",
        )
    })
}
