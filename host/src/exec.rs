//! `guest-exec`: start a process in the guest, stream its output (`guestlink-exec-read` when the agent has
//! it) or poll `guest-exec-status` with backoff, and report how it ended.

use std::time::Duration;

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use serde_json::{json, Value};
use tracing::debug;

use crate::error::{Error, Result};
use crate::session::Session;

/// Upper bound for data piped to the guest process as `input-data` (it travels in one request).
pub const MAX_INPUT_BYTES: usize = 8 << 20;

/// Longest wait per `guestlink-exec-read` call (the extension caps `wait-ms` at 5000).
const EXEC_READ_WAIT_MS: u64 = 1000;

/// What to run in the guest.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExecRequest {
    /// Program (searched in the agent's PATH).
    pub path: String,
    /// Arguments after the program.
    pub args: Vec<String>,
    /// Complete environment, if given (replaces the agent's).
    pub env: Option<Vec<String>>,
    /// Bytes fed to the process's stdin.
    pub input: Option<Vec<u8>>,
}

/// Which output stream a chunk belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutStream {
    /// The process's stdout.
    Stdout,
    /// The process's stderr.
    Stderr,
}

/// How the guest process ended.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct ExecOutcome {
    /// Guest PID.
    pub pid: i64,
    /// Exit status, when it exited normally.
    pub exitcode: Option<i64>,
    /// Terminating signal, when killed.
    pub signal: Option<i64>,
    /// The agent dropped stdout beyond its buffer cap.
    pub out_truncated: bool,
    /// The agent dropped stderr beyond its buffer cap.
    pub err_truncated: bool,
    /// Output arrived while the process ran (`guestlink-exec-read`), not only at exit.
    pub streamed: bool,
}

impl ExecOutcome {
    /// Shell-style status: the exit code, or 128 + signal number.
    pub fn status(&self) -> i32 {
        match (self.exitcode, self.signal) {
            (Some(code), _) => i32::try_from(code).unwrap_or(1),
            (None, Some(sig)) => 128 + i32::try_from(sig).unwrap_or(0),
            (None, None) => 1,
        }
    }
}

fn decode_field(command: &str, v: &Value, key: &str) -> Result<Vec<u8>> {
    match v.get(key).and_then(Value::as_str) {
        None | Some("") => Ok(Vec::new()),
        Some(s) => B64.decode(s).map_err(|e| Error::BadReply {
            command: command.to_owned(),
            detail: format!("{key}: {e}"),
        }),
    }
}

fn flag(v: &Value, key: &str) -> bool {
    v.get(key).and_then(Value::as_bool).unwrap_or(false)
}

/// Start `req` in the guest and wait for it, handing output to `sink` as it arrives.
pub fn run(
    session: &mut Session,
    req: &ExecRequest,
    sink: &mut dyn FnMut(OutStream, &[u8]) -> std::io::Result<()>,
) -> Result<ExecOutcome> {
    let stream = session.supports("guestlink-exec-read")?;
    let mut args = json!({"path": req.path, "arg": req.args, "capture-output": true});
    if let Some(env) = &req.env {
        args["env"] = json!(env);
    }
    if let Some(input) = req.input.as_deref().filter(|i| !i.is_empty()) {
        if input.len() > MAX_INPUT_BYTES {
            return Err(Error::BadRequest(format!(
                "stdin input is {} bytes; at most {MAX_INPUT_BYTES} can be passed to guest-exec",
                input.len()
            )));
        }
        args["input-data"] = json!(B64.encode(input));
    }
    let started = session.call("guest-exec", Some(args))?;
    let pid = started
        .get("pid")
        .and_then(Value::as_i64)
        .ok_or_else(|| Error::BadReply {
            command: "guest-exec".into(),
            detail: format!("no pid in {started}"),
        })?;
    debug!(pid, stream, "guest process started");
    let out = |e: std::io::Error| Error::Local {
        what: "cannot write output",
        path: "stdout".into(),
        source: e,
    };
    let mut outcome = ExecOutcome {
        pid,
        streamed: stream,
        ..ExecOutcome::default()
    };
    if stream {
        let (mut out_off, mut err_off) = (0i64, 0i64);
        let timeout = session.timeouts().default + Duration::from_millis(EXEC_READ_WAIT_MS);
        loop {
            let cmd = "guestlink-exec-read";
            let st = session.call_timeout(
                cmd,
                Some(json!({"pid": pid, "out-offset": out_off, "err-offset": err_off, "wait-ms": EXEC_READ_WAIT_MS})),
                timeout,
            )?;
            let o = decode_field(cmd, &st, "out-data")?;
            let e = decode_field(cmd, &st, "err-data")?;
            if !o.is_empty() {
                sink(OutStream::Stdout, &o).map_err(out)?;
            }
            if !e.is_empty() {
                sink(OutStream::Stderr, &e).map_err(out)?;
            }
            out_off = st
                .get("out-offset")
                .and_then(Value::as_i64)
                .unwrap_or(out_off + o.len() as i64);
            err_off = st
                .get("err-offset")
                .and_then(Value::as_i64)
                .unwrap_or(err_off + e.len() as i64);
            outcome.out_truncated |= flag(&st, "out-truncated");
            outcome.err_truncated |= flag(&st, "err-truncated");
            if flag(&st, "exited") && o.is_empty() && e.is_empty() {
                outcome.exitcode = st.get("exitcode").and_then(Value::as_i64);
                outcome.signal = st.get("signal").and_then(Value::as_i64);
                return Ok(outcome);
            }
        }
    }
    let mut delay = Duration::from_millis(5);
    loop {
        let cmd = "guest-exec-status";
        let st = session.call(cmd, Some(json!({"pid": pid})))?;
        if flag(&st, "exited") {
            let o = decode_field(cmd, &st, "out-data")?;
            let e = decode_field(cmd, &st, "err-data")?;
            sink(OutStream::Stdout, &o).map_err(out)?;
            sink(OutStream::Stderr, &e).map_err(out)?;
            outcome.exitcode = st.get("exitcode").and_then(Value::as_i64);
            outcome.signal = st.get("signal").and_then(Value::as_i64);
            outcome.out_truncated = flag(&st, "out-truncated");
            outcome.err_truncated = flag(&st, "err-truncated");
            return Ok(outcome);
        }
        std::thread::sleep(delay);
        delay = (delay * 2).min(Duration::from_secs(1));
    }
}

/// Run `req` and collect its output (used for helper commands such as `mv`).
pub fn run_collect(
    session: &mut Session,
    req: &ExecRequest,
) -> Result<(ExecOutcome, Vec<u8>, Vec<u8>)> {
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let outcome = run(session, req, &mut |s, d| {
        match s {
            OutStream::Stdout => out.extend_from_slice(d),
            OutStream::Stderr => err.extend_from_slice(d),
        }
        Ok(())
    })?;
    Ok((outcome, out, err))
}
