//! Running helper programs like qemu-ga's `ga_run_command`: optional stdin text, stdout+stderr captured into one
//! message, and qemu-ga's error texts ("child process has failed to ACTION: OUTPUT").

use std::path::Path;
use std::process::Stdio;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::Command;

use super::error::{CommandError, CommandResult};

/// Runs `program args...`, feeding `input` on stdin, and succeeds only on exit status 0.
///
/// `action` names the operation in error texts, e.g. "shutdown" or "set user password".
pub async fn run_command(
    program: &Path,
    args: &[&str],
    input: Option<&[u8]>,
    action: &str,
) -> CommandResult<()> {
    let mut cmd = Command::new(program);
    cmd.args(args)
        .stdin(if input.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Own process group, so a terminal signal to the daemon doesn't reach the helper (qemu-ga uses setsid()).
        .process_group(0)
        .kill_on_drop(false);
    let mut spawned = cmd.spawn();
    // ETXTBSY: a freshly written helper may still be open for writing in a concurrently forked child; retry.
    for _ in 0..20 {
        match &spawned {
            Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) => {
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                spawned = cmd.spawn();
            }
            _ => break,
        }
    }
    let mut child = match spawned {
        Ok(c) => c,
        Err(e) => {
            // qemu-ga forks and the child reports "failed to exec 'X': strerror" through the output pipe, then
            // exits 1.
            let reason = match e.raw_os_error() {
                Some(errno) => super::error::errno_text(errno),
                None => e.to_string(),
            };
            return Err(CommandError::generic(format!(
                "child process has failed to {action}: failed to exec '{}': {reason}\n",
                program.display()
            )));
        }
    };
    if let (Some(data), Some(mut stdin)) = (input, child.stdin.take()) {
        if let Err(e) = stdin.write_all(data).await {
            let _ = child.kill().await;
            return Err(CommandError::io(
                format!("{action}: cannot write to stdin pipe"),
                &e,
            ));
        }
        drop(stdin);
    }
    let mut out = Vec::new();
    let mut err = Vec::new();
    let (mut so, mut se) = (child.stdout.take(), child.stderr.take());
    let read_out = async {
        if let Some(s) = so.as_mut() {
            let _ = s.read_to_end(&mut out).await;
        }
    };
    let read_err = async {
        if let Some(s) = se.as_mut() {
            let _ = s.read_to_end(&mut err).await;
        }
    };
    tokio::join!(read_out, read_err);
    let status = child.wait().await.map_err(|e| {
        CommandError::io(
            format!("failed to wait for child (pid: {:?})", child.id()),
            &e,
        )
    })?;
    out.extend_from_slice(&err);
    let text = String::from_utf8_lossy(&out).into_owned();
    match status.code() {
        Some(0) => Ok(()),
        Some(code) if text.is_empty() => Err(CommandError::generic(format!(
            "child process has failed to {action}: exit status {code}"
        ))),
        Some(_) => Err(CommandError::generic(format!(
            "child process has failed to {action}: {text}"
        ))),
        None if text.is_empty() => Err(CommandError::generic(
            "child process has terminated abnormally",
        )),
        None => Err(CommandError::generic(format!(
            "child process has terminated abnormally: {text}"
        ))),
    }
}

/// Runs `program args...` with output discarded and returns its exit code; `Ok(None)` when the program does not
/// exist (qemu-ga's `run_process_child`, used by the suspend probes).
pub async fn run_status(program: &str, args: &[&str]) -> CommandResult<Option<i32>> {
    let status = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .await;
    match status {
        Ok(s) => Ok(Some(s.code().unwrap_or(-1))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(CommandError::generic(format!(
            "failed to create child process, error '{e}'"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn success_failure_and_stdin() {
        run_command(Path::new("/bin/true"), &[], None, "x")
            .await
            .unwrap();
        let e = run_command(Path::new("/bin/false"), &[], None, "do it")
            .await
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "child process has failed to do it: exit status 1"
        );
        let e = run_command(
            Path::new("/bin/sh"),
            &["-c", "cat; exit 3"],
            Some(b"hello"),
            "echo",
        )
        .await
        .unwrap_err();
        assert_eq!(e.to_string(), "child process has failed to echo: hello");
        let e = run_command(Path::new("/nonexistent/prog"), &[], None, "run")
            .await
            .unwrap_err();
        assert!(e.to_string().contains("No such file or directory"), "{e}");
        assert_eq!(run_status("/nonexistent/prog", &[]).await.unwrap(), None);
        assert_eq!(
            run_status("/bin/sh", &["-c", "exit 3"]).await.unwrap(),
            Some(3)
        );
    }
}
