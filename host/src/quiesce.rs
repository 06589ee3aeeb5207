//! Quiesce: freeze the guest's filesystems, run a host command (snapshot/backup), and ALWAYS thaw — after
//! the command fails, on SIGINT/SIGTERM/SIGHUP (forwarded to it first), and on timeout (it is killed).
//!
//! The flow is written against two small traits so it can be tested with an in-memory agent and runner.

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tracing::{info, warn};

use crate::error::{Error, Result};
use crate::session::Session;

/// Exit code when the freeze failed and the command was not run.
pub const EXIT_FREEZE_FAILED: i32 = 123;
/// Exit code when the command hit the timeout and was killed (the guest was thawed).
pub const EXIT_TIMEOUT: i32 = 124;
/// Exit code when the thaw failed: the guest may still be frozen.
pub const EXIT_THAW_FAILED: i32 = 125;
/// Exit code when the command could not be executed.
pub const EXIT_CANNOT_EXECUTE: i32 = 126;
/// Exit code when the command was not found.
pub const EXIT_NOT_FOUND: i32 = 127;

/// The freeze side of an agent.
pub trait FreezeAgent {
    /// Freeze all filesystems, or only `mountpoints` when non-empty; returns the number frozen.
    fn freeze(&mut self, mountpoints: &[String]) -> Result<i64>;
    /// Thaw; returns the number thawed.
    fn thaw(&mut self) -> Result<i64>;
    /// Called while the command runs: per-batch targets release the socket.
    fn end_batch(&mut self) {}
}

impl FreezeAgent for Session {
    fn freeze(&mut self, mountpoints: &[String]) -> Result<i64> {
        let v = if mountpoints.is_empty() {
            self.call("guest-fsfreeze-freeze", None)?
        } else {
            self.call(
                "guest-fsfreeze-freeze-list",
                Some(json!({"mountpoints": mountpoints})),
            )?
        };
        count("guest-fsfreeze-freeze", &v)
    }

    fn thaw(&mut self) -> Result<i64> {
        let v = self.call("guest-fsfreeze-thaw", None)?;
        count("guest-fsfreeze-thaw", &v)
    }

    fn end_batch(&mut self) {
        Session::end_batch(self);
    }
}

fn count(command: &str, v: &Value) -> Result<i64> {
    v.as_i64().ok_or_else(|| Error::BadReply {
        command: command.to_owned(),
        detail: format!("expected a count, got {v}"),
    })
}

/// How the host command ended.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "result", rename_all = "kebab-case")]
pub enum CmdOutcome {
    /// Exited with this status.
    Exited {
        /// Exit status.
        code: i32,
    },
    /// Killed by a signal it did not get from us.
    Signaled {
        /// Signal number.
        signal: i32,
    },
    /// Ran past the timeout and was killed.
    TimedOut,
    /// We received `signal`, forwarded it, and the command ended (with `status`, if it exited).
    Interrupted {
        /// The signal we received.
        signal: i32,
    },
    /// It never started.
    SpawnFailed {
        /// Why.
        error: String,
        /// 126 (not executable) or 127 (not found).
        code: i32,
    },
    /// It was not run (freeze failed, or a signal arrived first).
    NotRun,
}

/// Runs the host command with signal forwarding and a timeout.
pub trait CmdRunner {
    /// A termination signal received since the runner was armed and not yet reported.
    fn pending_signal(&mut self) -> Option<i32>;
    /// Run `cmd` to completion, forwarding signals and killing it after `timeout`.
    fn run(&mut self, cmd: &[String], timeout: Duration) -> CmdOutcome;
}

/// What happened during a quiesce.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct QuiesceReport {
    /// Filesystems frozen (None when the freeze failed).
    pub frozen: Option<i64>,
    /// The freeze error, if any.
    pub freeze_error: Option<String>,
    /// Filesystems thawed (None when the thaw failed or was not needed).
    pub thawed: Option<i64>,
    /// The thaw error, if any: the guest may still be frozen.
    pub thaw_error: Option<String>,
    /// The host command's outcome.
    pub command: CmdOutcome,
    /// From the freeze reply to the thaw reply, in milliseconds.
    pub frozen_ms: Option<u64>,
    /// The exit status guestlink should return.
    pub exit_code: i32,
}

fn chain(e: &Error) -> String {
    let mut s = e.to_string();
    let mut src = std::error::Error::source(e);
    while let Some(c) = src {
        s.push_str(": ");
        s.push_str(&c.to_string());
        src = c.source();
    }
    s
}

/// Thaw, retrying transport failures (not agent errors) twice.
fn thaw_with_retry(agent: &mut dyn FreezeAgent) -> Result<i64> {
    let mut attempt = 0;
    loop {
        attempt += 1;
        match agent.thaw() {
            Ok(n) => return Ok(n),
            Err(e) if e.agent_error().is_none() && attempt < 3 => {
                warn!(error = %chain(&e), attempt, "thaw failed, retrying");
                std::thread::sleep(Duration::from_millis(500));
            }
            Err(e) => return Err(e),
        }
    }
}

/// Freeze, run `cmd`, always thaw.
pub fn quiesce(
    agent: &mut dyn FreezeAgent,
    runner: &mut dyn CmdRunner,
    mountpoints: &[String],
    cmd: &[String],
    timeout: Duration,
) -> QuiesceReport {
    let mut report = QuiesceReport {
        frozen: None,
        freeze_error: None,
        thawed: None,
        thaw_error: None,
        command: CmdOutcome::NotRun,
        frozen_ms: None,
        exit_code: 0,
    };
    if let Some(sig) = runner.pending_signal() {
        report.exit_code = 128 + sig;
        report.command = CmdOutcome::Interrupted { signal: sig };
        return report;
    }
    match agent.freeze(mountpoints) {
        Ok(n) => {
            info!(filesystems = n, "frozen");
            report.frozen = Some(n);
        }
        Err(e) => {
            report.freeze_error = Some(chain(&e));
            report.exit_code = EXIT_FREEZE_FAILED;
            // A freeze that timed out or lost its connection may still complete in the guest: thaw to be sure.
            // An agent error (disabled, failed to freeze) leaves nothing frozen (qemu-ga thaws itself).
            if e.agent_error().is_none() {
                if let Err(te) = thaw_with_retry(agent) {
                    report.thaw_error = Some(chain(&te));
                    report.exit_code = EXIT_THAW_FAILED;
                }
            }
            return report;
        }
    }
    let frozen_at = Instant::now();
    agent.end_batch();
    report.command = match runner.pending_signal() {
        Some(signal) => CmdOutcome::Interrupted { signal },
        None => runner.run(cmd, timeout),
    };
    match thaw_with_retry(agent) {
        Ok(n) => report.thawed = Some(n),
        Err(e) => report.thaw_error = Some(chain(&e)),
    }
    agent.end_batch();
    report.frozen_ms = Some(u64::try_from(frozen_at.elapsed().as_millis()).unwrap_or(u64::MAX));
    report.exit_code = if report.thaw_error.is_some() {
        EXIT_THAW_FAILED
    } else {
        match &report.command {
            CmdOutcome::Exited { code } => *code,
            CmdOutcome::Signaled { signal } | CmdOutcome::Interrupted { signal } => 128 + signal,
            CmdOutcome::TimedOut => EXIT_TIMEOUT,
            CmdOutcome::SpawnFailed { code, .. } => *code,
            CmdOutcome::NotRun => 1,
        }
    };
    report
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::{AgentError, Channel};

    /// In-memory agent: tracks the frozen state and records calls.
    #[derive(Debug, Default)]
    struct FakeAgent {
        frozen: bool,
        calls: Vec<&'static str>,
        freeze_fails: Option<Error>,
        thaw_failures: u32,
    }

    impl FreezeAgent for FakeAgent {
        fn freeze(&mut self, _m: &[String]) -> Result<i64> {
            self.calls.push("freeze");
            match self.freeze_fails.take() {
                Some(e) => Err(e),
                None => {
                    self.frozen = true;
                    Ok(2)
                }
            }
        }
        fn thaw(&mut self) -> Result<i64> {
            self.calls.push("thaw");
            if self.thaw_failures > 0 {
                self.thaw_failures -= 1;
                return Err(Error::Closed(Channel::Qga));
            }
            let n = if self.frozen { 2 } else { 0 };
            self.frozen = false;
            Ok(n)
        }
    }

    /// Scripted runner: returns a fixed outcome and checks it runs only while frozen.
    #[derive(Debug)]
    struct FakeRunner {
        outcome: CmdOutcome,
        signal_before: Option<i32>,
        ran: bool,
    }

    impl CmdRunner for FakeRunner {
        fn pending_signal(&mut self) -> Option<i32> {
            self.signal_before.take()
        }
        fn run(&mut self, _cmd: &[String], _t: Duration) -> CmdOutcome {
            self.ran = true;
            self.outcome.clone()
        }
    }

    fn runner(outcome: CmdOutcome) -> FakeRunner {
        FakeRunner {
            outcome,
            signal_before: None,
            ran: false,
        }
    }

    fn go(agent: &mut FakeAgent, r: &mut FakeRunner) -> QuiesceReport {
        quiesce(agent, r, &[], &["snap".into()], Duration::from_secs(1))
    }

    #[test]
    fn success_thaws_and_returns_status() {
        let (mut a, mut r) = (FakeAgent::default(), runner(CmdOutcome::Exited { code: 0 }));
        let rep = go(&mut a, &mut r);
        assert_eq!(a.calls, ["freeze", "thaw"]);
        assert!(!a.frozen && r.ran);
        assert_eq!(
            (rep.frozen, rep.thawed, rep.exit_code),
            (Some(2), Some(2), 0)
        );
        assert!(rep.frozen_ms.is_some());
    }

    #[test]
    fn failing_command_thaws_and_propagates_status() {
        let (mut a, mut r) = (FakeAgent::default(), runner(CmdOutcome::Exited { code: 3 }));
        let rep = go(&mut a, &mut r);
        assert!(!a.frozen);
        assert_eq!(rep.exit_code, 3);
    }

    #[test]
    fn signal_during_command_thaws() {
        let (mut a, mut r) = (
            FakeAgent::default(),
            runner(CmdOutcome::Interrupted { signal: 15 }),
        );
        let rep = go(&mut a, &mut r);
        assert_eq!(a.calls, ["freeze", "thaw"]);
        assert!(!a.frozen);
        assert_eq!(rep.exit_code, 143);
    }

    #[test]
    fn command_killed_by_signal_thaws() {
        let (mut a, mut r) = (
            FakeAgent::default(),
            runner(CmdOutcome::Signaled { signal: 9 }),
        );
        let rep = go(&mut a, &mut r);
        assert!(!a.frozen);
        assert_eq!(rep.exit_code, 137);
    }

    #[test]
    fn signal_during_freeze_skips_command_and_thaws() {
        let (mut a, mut r) = (FakeAgent::default(), runner(CmdOutcome::Exited { code: 0 }));
        r.signal_before = None;
        // The signal arrives after the first check (i.e. while the freeze runs).
        struct Late(FakeRunner, u32);
        impl CmdRunner for Late {
            fn pending_signal(&mut self) -> Option<i32> {
                self.1 += 1;
                (self.1 == 2).then_some(2)
            }
            fn run(&mut self, c: &[String], t: Duration) -> CmdOutcome {
                self.0.run(c, t)
            }
        }
        let mut late = Late(r, 0);
        let rep = quiesce(
            &mut a,
            &mut late,
            &[],
            &["x".into()],
            Duration::from_secs(1),
        );
        assert!(!late.0.ran);
        assert!(!a.frozen);
        assert_eq!(rep.exit_code, 130);
    }

    #[test]
    fn timeout_thaws_with_distinct_code() {
        let (mut a, mut r) = (FakeAgent::default(), runner(CmdOutcome::TimedOut));
        let rep = go(&mut a, &mut r);
        assert!(!a.frozen);
        assert_eq!(rep.exit_code, EXIT_TIMEOUT);
    }

    #[test]
    fn freeze_error_from_agent_does_not_run_command() {
        let mut a = FakeAgent {
            freeze_fails: Some(Error::Agent {
                command: "guest-fsfreeze-freeze".into(),
                source: AgentError {
                    class: "GenericError".into(),
                    desc: "failed to freeze /: Device busy".into(),
                },
            }),
            ..FakeAgent::default()
        };
        let mut r = runner(CmdOutcome::Exited { code: 0 });
        let rep = go(&mut a, &mut r);
        assert!(!r.ran);
        assert_eq!(a.calls, ["freeze"]);
        assert_eq!(rep.exit_code, EXIT_FREEZE_FAILED);
        assert!(rep
            .freeze_error
            .as_deref()
            .is_some_and(|e| e.contains("Device busy")));
    }

    #[test]
    fn freeze_timeout_does_not_run_command_but_thaws() {
        let mut a = FakeAgent {
            freeze_fails: Some(Error::Timeout {
                channel: Channel::Qga,
                what: "guest-fsfreeze-freeze".into(),
                timeout: Duration::from_secs(1),
            }),
            ..FakeAgent::default()
        };
        let mut r = runner(CmdOutcome::Exited { code: 0 });
        let rep = go(&mut a, &mut r);
        assert!(!r.ran);
        assert_eq!(a.calls, ["freeze", "thaw"]);
        assert_eq!(rep.exit_code, EXIT_FREEZE_FAILED);
    }

    #[test]
    fn thaw_is_retried_then_reported() {
        let mut a = FakeAgent {
            thaw_failures: 1,
            ..FakeAgent::default()
        };
        let mut r = runner(CmdOutcome::Exited { code: 0 });
        let rep = go(&mut a, &mut r);
        assert_eq!(a.calls, ["freeze", "thaw", "thaw"]);
        assert_eq!(rep.exit_code, 0);

        let mut a = FakeAgent {
            thaw_failures: 5,
            ..FakeAgent::default()
        };
        let rep = go(&mut a, &mut runner(CmdOutcome::Exited { code: 0 }));
        assert_eq!(rep.exit_code, EXIT_THAW_FAILED);
        assert!(rep.thaw_error.is_some());
    }
}
