//! Which commands may run: the block-list (`-b`), the allow-list (`-a` and `--profile`), and the frozen state.
//!
//! Disabled commands answer `CommandNotFound` "Command X has been disabled[: reason]" like qemu-ga ≥ 8.1: the
//! reason is "the agent is in frozen state" while frozen, "the command is not allowed" outside the allow-list, and
//! absent for the block-list. Combined semantics (qemu-ga's documentation): start from all commands, or from the
//! allow-list if one is given (`-a` ∪ the profile's list), then remove the block-list. While frozen only
//! [`FROZEN_ALLOWED`] commands run (and only if the lists above enable them).

use std::collections::HashSet;

use guestlink_protocol::qga::error::{QgaError, DISABLED_FROZEN, DISABLED_NOT_ALLOWED};

/// Commands that stay enabled while the filesystems are frozen (qemu-ga's `ga_freeze_allowlist`).
pub const FROZEN_ALLOWED: &[&str] = &[
    "guest-ping",
    "guest-info",
    "guest-sync",
    "guest-sync-delimited",
    "guest-fsfreeze-status",
    "guest-fsfreeze-thaw",
];

/// The static part of the policy (lists); the frozen state is passed per check.
#[derive(Debug, Clone, Default)]
pub struct Policy {
    blocked: HashSet<String>,
    allowed: Option<HashSet<String>>,
}

impl Policy {
    /// Build from the block-list, the allow-list and an optional profile (another allow-list).
    pub fn new(block: &[String], allow: &[String], profile: Option<&[&str]>) -> Policy {
        let allowed = if allow.is_empty() && profile.is_none() {
            None
        } else {
            let mut set: HashSet<String> = allow.iter().cloned().collect();
            set.extend(profile.unwrap_or(&[]).iter().map(|s| (*s).to_owned()));
            Some(set)
        };
        Policy {
            blocked: block.iter().cloned().collect(),
            allowed,
        }
    }

    /// `Ok(())` if `name` may run now, else the "has been disabled" error to send.
    ///
    /// When several rules disable a command, the text is the one qemu-ga (7.2 – 9.0) ends up with, as it applies
    /// the frozen filter, then the allow-list, then the block-list, each overwriting the reason: a blocked command
    /// says plain "has been disabled" even while frozen.
    pub fn check(&self, name: &str, frozen: bool) -> Result<(), QgaError> {
        if self.blocked.contains(name) {
            return Err(QgaError::disabled(name, None));
        }
        if let Some(allowed) = &self.allowed {
            if !allowed.contains(name) {
                return Err(QgaError::disabled(name, Some(DISABLED_NOT_ALLOWED)));
            }
        }
        if frozen && !FROZEN_ALLOWED.contains(&name) {
            return Err(QgaError::disabled(name, Some(DISABLED_FROZEN)));
        }
        Ok(())
    }

    /// Whether `name` is enabled (for `guest-info`).
    pub fn is_enabled(&self, name: &str, frozen: bool) -> bool {
        self.check(name, frozen).is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use guestlink_protocol::qga::error::ErrorClass;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| (*x).to_owned()).collect()
    }

    #[test]
    fn block_list_has_no_reason() {
        let p = Policy::new(&s(&["guest-ping", "guest-get-time"]), &[], None);
        let e = p.check("guest-ping", false).unwrap_err();
        assert_eq!(e.class, ErrorClass::CommandNotFound);
        assert_eq!(e.desc, "Command guest-ping has been disabled");
        assert!(p.check("guest-get-fsinfo", false).is_ok());
    }

    #[test]
    fn allow_list_reason() {
        let p = Policy::new(&[], &s(&["guest-ping", "guest-get-time"]), None);
        assert!(p.check("guest-ping", false).is_ok());
        assert_eq!(
            p.check("guest-get-fsinfo", false).unwrap_err().desc,
            "Command guest-get-fsinfo has been disabled: the command is not allowed"
        );
    }

    #[test]
    fn allow_then_block() {
        let p = Policy::new(&s(&["guest-ping"]), &s(&["guest-ping", "guest-info"]), None);
        assert_eq!(
            p.check("guest-ping", false).unwrap_err().desc,
            "Command guest-ping has been disabled"
        );
        assert!(p.check("guest-info", false).is_ok());
    }

    #[test]
    fn backup_profile() {
        let prof = crate::config::profile_commands("backup").unwrap();
        let p = Policy::new(&[], &[], Some(prof));
        for ok in [
            "guest-ping",
            "guest-fsfreeze-freeze-list",
            "guest-get-fsinfo",
            "guest-sync-delimited",
        ] {
            assert!(p.check(ok, false).is_ok(), "{ok}");
        }
        for no in [
            "guest-exec",
            "guest-file-open",
            "guest-set-user-password",
            "guest-shutdown",
        ] {
            assert!(
                p.check(no, false)
                    .unwrap_err()
                    .desc
                    .ends_with("the command is not allowed"),
                "{no}"
            );
        }
        // A profile plus -a extends the allow-list.
        let p = Policy::new(&[], &s(&["guest-get-users"]), Some(prof));
        assert!(p.check("guest-get-users", false).is_ok());
        assert!(p.check("guest-ping", false).is_ok());
    }

    #[test]
    fn frozen_allow_list() {
        let p = Policy::new(&[], &[], None);
        for ok in FROZEN_ALLOWED {
            assert!(p.check(ok, true).is_ok(), "{ok}");
        }
        for no in [
            "guest-fsfreeze-freeze",
            "guest-fsfreeze-freeze-list",
            "guest-exec",
            "guest-get-time",
        ] {
            assert_eq!(
                p.check(no, true).unwrap_err().desc,
                format!("Command {no} has been disabled: the agent is in frozen state")
            );
            assert!(p.check(no, false).is_ok());
        }
        // Blocked stays blocked while frozen, and says so without a reason (qemu-ga's override order).
        let p = Policy::new(&s(&["guest-ping", "guest-fsfreeze-freeze"]), &[], None);
        assert_eq!(
            p.check("guest-ping", true).unwrap_err().desc,
            "Command guest-ping has been disabled"
        );
        assert_eq!(
            p.check("guest-fsfreeze-freeze", true).unwrap_err().desc,
            "Command guest-fsfreeze-freeze has been disabled"
        );
        // Outside the allow-list while frozen: the allow-list's reason.
        let p = Policy::new(&[], &s(&["guest-ping"]), None);
        assert!(p
            .check("guest-exec", true)
            .unwrap_err()
            .desc
            .ends_with("the command is not allowed"));
    }
}
