//! The real [`CmdRunner`]: runs the host command in its own process group, forwards SIGINT/SIGTERM/SIGHUP to
//! it, and kills it on timeout. Signals are caught from the moment the runner is armed (before the freeze), so
//! a Ctrl-C at any point still leads to a thaw.

use std::io::ErrorKind;
use std::os::fd::AsFd;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, Command};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use tracing::{debug, warn};

use crate::quiesce::{CmdOutcome, CmdRunner, EXIT_CANNOT_EXECUTE, EXIT_NOT_FOUND};

/// After forwarding a signal, how long the command may take to exit before it gets SIGKILL.
const GRACE: Duration = Duration::from_secs(30);
/// After the timeout's SIGTERM, how long before SIGKILL.
const KILL_AFTER: Duration = Duration::from_secs(5);

/// Catches termination signals and runs commands.
#[derive(Debug)]
pub struct HostRunner {
    signals: Receiver<i32>,
    stdout_to_stderr: bool,
}

impl HostRunner {
    /// Send the command's stdout to guestlink's stderr (keeps stdout for guestlink's own JSON document).
    pub fn stdout_to_stderr(mut self, yes: bool) -> Self {
        self.stdout_to_stderr = yes;
        self
    }

    /// Install the signal listeners (SIGINT, SIGTERM, SIGHUP); from now on they no longer kill guestlink.
    pub fn arm() -> std::io::Result<Self> {
        // The handlers are installed here, on the caller's thread, before `arm` returns; a thread forwards them.
        let mut signals = signal_hook::iterator::Signals::new([
            Signal::SIGINT as i32,
            Signal::SIGTERM as i32,
            Signal::SIGHUP as i32,
        ])?;
        let (tx, rx) = mpsc::channel();
        std::thread::Builder::new()
            .name("signals".into())
            .spawn(move || {
                for sig in signals.forever() {
                    if tx.send(sig).is_err() {
                        return;
                    }
                }
            })?;
        Ok(Self {
            signals: rx,
            stdout_to_stderr: false,
        })
    }
}

fn signal_group(pid: u32, sig: Signal) {
    let Ok(pid) = i32::try_from(pid) else { return };
    if let Err(e) = killpg(Pid::from_raw(pid), sig) {
        debug!(error = %e, ?sig, "killpg failed (command already gone?)");
    }
}

fn outcome_of(status: std::process::ExitStatus) -> CmdOutcome {
    match (status.code(), status.signal()) {
        (Some(code), _) => CmdOutcome::Exited { code },
        (None, Some(signal)) => CmdOutcome::Signaled { signal },
        (None, None) => CmdOutcome::Exited { code: 1 },
    }
}

/// One step of waiting for the command.
enum Wait {
    Done(CmdOutcome),
    Signal(i32),
    Deadline,
}

impl HostRunner {
    /// Wait for the child until it exits, a signal arrives, or `deadline` passes.
    fn wait_step(&self, child: &mut Child, deadline: Instant) -> Wait {
        loop {
            match child.try_wait() {
                Ok(Some(st)) => return Wait::Done(outcome_of(st)),
                Ok(None) => {}
                Err(e) => {
                    warn!(error = %e, "waiting for the command failed");
                    return Wait::Done(CmdOutcome::Exited { code: 1 });
                }
            }
            let now = Instant::now();
            if now >= deadline {
                return Wait::Deadline;
            }
            match self
                .signals
                .recv_timeout((deadline - now).min(Duration::from_millis(20)))
            {
                Ok(sig) => return Wait::Signal(sig),
                Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => {}
            }
        }
    }

    /// SIGKILL the group and reap.
    fn kill(child: &mut Child) {
        signal_group(child.id(), Signal::SIGKILL);
        let _ = child.wait();
    }
}

impl CmdRunner for HostRunner {
    fn pending_signal(&mut self) -> Option<i32> {
        self.signals.try_recv().ok()
    }

    fn run(&mut self, cmd: &[String], timeout: Duration) -> CmdOutcome {
        let Some((prog, args)) = cmd.split_first() else {
            return CmdOutcome::SpawnFailed {
                error: "empty command".into(),
                code: EXIT_CANNOT_EXECUTE,
            };
        };
        // Own process group: Ctrl-C reaches only guestlink, which forwards it (no double delivery).
        let mut command = Command::new(prog);
        command.args(args).process_group(0);
        if self.stdout_to_stderr {
            match std::io::stderr().as_fd().try_clone_to_owned() {
                Ok(fd) => {
                    command.stdout(std::process::Stdio::from(fd));
                }
                Err(e) => warn!(error = %e, "cannot redirect the command's stdout to stderr"),
            }
        }
        let mut child = match command.spawn() {
            Ok(c) => c,
            Err(e) => {
                let code = if e.kind() == ErrorKind::NotFound {
                    EXIT_NOT_FOUND
                } else {
                    EXIT_CANNOT_EXECUTE
                };
                return CmdOutcome::SpawnFailed {
                    error: format!("{prog}: {e}"),
                    code,
                };
            }
        };
        let mut deadline = Instant::now() + timeout;
        let mut received: Option<i32> = None;
        loop {
            match self.wait_step(&mut child, deadline) {
                Wait::Done(outcome) => {
                    return match received {
                        Some(signal) => CmdOutcome::Interrupted { signal },
                        None => outcome,
                    }
                }
                Wait::Signal(sig) => match received {
                    Some(_) => Self::kill(&mut child),
                    None => {
                        warn!(
                            signal = sig,
                            "forwarding signal to the command, will thaw when it ends"
                        );
                        signal_group(child.id(), Signal::try_from(sig).unwrap_or(Signal::SIGTERM));
                        received = Some(sig);
                        deadline = Instant::now() + GRACE;
                    }
                },
                Wait::Deadline => {
                    if let Some(signal) = received {
                        warn!("command ignored the forwarded signal, killing it");
                        Self::kill(&mut child);
                        return CmdOutcome::Interrupted { signal };
                    }
                    warn!("command timed out, killing it");
                    signal_group(child.id(), Signal::SIGTERM);
                    let until = Instant::now() + KILL_AFTER;
                    // A signal during the grace period escalates to SIGKILL right away.
                    if !matches!(self.wait_step(&mut child, until), Wait::Done(_)) {
                        Self::kill(&mut child);
                    }
                    return CmdOutcome::TimedOut;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_commands_and_enforces_timeout() {
        let mut r = HostRunner::arm().expect("arm");
        let sh = |s: &str| vec!["sh".to_owned(), "-c".to_owned(), s.to_owned()];
        assert_eq!(
            r.run(&sh("exit 3"), Duration::from_secs(60)),
            CmdOutcome::Exited { code: 3 }
        );
        assert_eq!(
            r.run(&sh("kill -9 $$"), Duration::from_secs(60)),
            CmdOutcome::Signaled { signal: 9 }
        );
        let t = Instant::now();
        assert_eq!(
            r.run(&sh("sleep 30"), Duration::from_millis(300)),
            CmdOutcome::TimedOut
        );
        assert!(t.elapsed() < Duration::from_secs(20));
        assert!(matches!(
            r.run(
                &["/nonexistent/guestlink-test".to_owned()],
                Duration::from_secs(5)
            ),
            CmdOutcome::SpawnFailed { code: 127, .. }
        ));
        assert_eq!(r.pending_signal(), None);

        // A real SIGINT to guestlink while the command runs: caught (guestlink survives), forwarded to the
        // command's process group, reported as Interrupted once the command has exited.
        let me = nix::unistd::getpid();
        let sender = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(500));
            nix::sys::signal::kill(me, Signal::SIGINT).expect("kill self");
        });
        let t = Instant::now();
        let outcome = r.run(
            &sh("trap 'exit 42' INT; sleep 20 & wait"),
            Duration::from_secs(60),
        );
        sender.join().expect("sender");
        assert_eq!(outcome, CmdOutcome::Interrupted { signal: 2 });
        assert!(t.elapsed() < Duration::from_secs(15), "{:?}", t.elapsed());

        // A signal before the command starts (e.g. during the freeze) is reported, not lost.
        nix::sys::signal::kill(me, Signal::SIGTERM).expect("kill self");
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut got = None;
        while got.is_none() && Instant::now() < deadline {
            got = r.pending_signal();
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(got, Some(15));
    }
}
