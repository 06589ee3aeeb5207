//! The one place that decides whether a test whose peer is missing skips or fails.
//!
//! Gates (environment variables; CI's `scripts/test` sets the first two): a gate is *on* when its variable is set to
//! anything but `""` or `"0"`.
//!
//! | gate | variable | covers |
//! |---|---|---|
//! | [`Gate::Peers`] | `GUESTLINK_REQUIRE_PEERS` | reference agents, X servers, compositors, dbus, python, root |
//! | [`Gate::Vm`] | `GUESTLINK_REQUIRE_VM` | QEMU, the micro-VM and the Debian guest |
//! | [`Gate::Libvirt`] | `GUESTLINK_REQUIRE_LIBVIRT` | libvirtd; follows `GUESTLINK_REQUIRE_VM` when unset |
//!
//! With the gate off, a missing peer prints one loud `*** SKIPPED: … ***` line and the test returns early (a
//! developer without QEMU can still run the rest). With it on, the same call panics, so a green CI run means every
//! peer test really ran; `scripts/test` also fails if any `*** SKIPPED` line reaches its log.

/// A class of peers a test may need.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gate {
    /// Real reference peers and tools on this host.
    Peers,
    /// QEMU guests.
    Vm,
    /// A libvirt daemon driving a QEMU guest.
    Libvirt,
}

impl Gate {
    /// The environment variable that turns the gate on.
    pub fn variable(self) -> &'static str {
        match self {
            Gate::Peers => "GUESTLINK_REQUIRE_PEERS",
            Gate::Vm => "GUESTLINK_REQUIRE_VM",
            Gate::Libvirt => "GUESTLINK_REQUIRE_LIBVIRT",
        }
    }

    /// Whether a missing peer of this class must fail the test.
    pub fn required(self) -> bool {
        match (self, flag(self.variable())) {
            (Gate::Libvirt, None) => Gate::Vm.required(),
            (_, on) => on.unwrap_or(false),
        }
    }
}

/// `Some(on)` when `var` is set: on unless it is empty or "0".
fn flag(var: &str) -> Option<bool> {
    std::env::var_os(var).map(|v| !(v.is_empty() || v == "0"))
}

/// A missing peer: panics when `gate` is on, else prints a loud skip line. Callers return right after it.
pub fn skip(gate: Gate, reason: &str) {
    if gate.required() {
        panic!(
            "{reason} — and {} is set, so this test must not skip",
            gate.variable()
        );
    }
    eprintln!("\n*** SKIPPED: {reason} ***\n");
}

/// `true` when `ok`; else [`skip`]s with `reason` and returns `false` (`if !require_or_skip(..) { return; }`).
pub fn require_or_skip(gate: Gate, ok: bool, reason: &str) -> bool {
    if !ok {
        skip(gate, reason);
    }
    ok
}

/// Where `tool` is: a path as given if it exists, else the first match on `PATH`, then in the system directories
/// (`/usr/sbin`, `/usr/bin`, `/sbin`, `/bin`; a non-root `PATH` often lacks the sbin ones).
pub fn which(tool: &str) -> Option<std::path::PathBuf> {
    if tool.contains('/') {
        let p = std::path::PathBuf::from(tool);
        return p.exists().then_some(p);
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/usr/bin", "/sbin", "/bin"].map(std::path::PathBuf::from))
        .map(|d| d.join(tool))
        .find(|p| p.is_file())
}

/// `tool` in the system directories only (`/usr/sbin`, `/usr/bin`, `/sbin`, `/bin`): for a program a test runs as
/// another uid, which cannot use an interpreter or shim under root's home that `PATH` may point at first.
pub fn system_which(tool: &str) -> Option<std::path::PathBuf> {
    ["/usr/sbin", "/usr/bin", "/sbin", "/bin"]
        .iter()
        .map(|d| std::path::Path::new(d).join(tool))
        .find(|p| p.is_file())
}

/// Whether `tool` is installed ([`which`]).
pub fn have_tool(tool: &str) -> bool {
    which(tool).is_some()
}

/// `true` when every one of `tools` is installed; else [`skip`]s naming the missing ones and where they come from
/// (`hint`, e.g. "apt-get install xvfb" or ".ci/apt.d/session.txt").
pub fn require_tools(gate: Gate, tools: &[&str], hint: &str) -> bool {
    let missing: Vec<&str> = tools.iter().copied().filter(|t| !have_tool(t)).collect();
    require_or_skip(
        gate,
        missing.is_empty(),
        &format!("missing {missing:?} ({hint})"),
    )
}

/// `true` when the test runs as root (needed to run a peer or an attacker as another uid); else [`skip`]s.
pub fn require_root(gate: Gate, why: &str) -> bool {
    require_or_skip(
        gate,
        nix::unistd::geteuid().is_root(),
        &format!("needs root: {why}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flag_values() {
        std::env::set_var("GUESTLINK_GATE_TEST_A", "1");
        std::env::set_var("GUESTLINK_GATE_TEST_B", "0");
        std::env::set_var("GUESTLINK_GATE_TEST_C", "");
        assert_eq!(flag("GUESTLINK_GATE_TEST_A"), Some(true));
        assert_eq!(flag("GUESTLINK_GATE_TEST_B"), Some(false));
        assert_eq!(flag("GUESTLINK_GATE_TEST_C"), Some(false));
        assert_eq!(flag("GUESTLINK_GATE_TEST_UNSET"), None);
    }

    #[test]
    fn have_tool_finds_sh_not_nonsense() {
        assert!(have_tool("sh"));
        assert!(!have_tool("guestlink-no-such-tool-xyz"));
        assert!(have_tool("/bin/sh"));
    }
}
