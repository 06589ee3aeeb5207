//! The agent subcommands (QGA channel), one function each. [`run`] opens the session, calls the subcommand's
//! function (which calls the library and prints text or one JSON document) and ends the batch.

use std::io::{IsTerminal, Read, Write};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};
use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use serde_json::{json, Map, Value};

use guestlink_host::exec::{self, ExecRequest, OutStream, MAX_INPUT_BYTES};
use guestlink_host::file::{self, TransferReport};
use guestlink_host::host_cmd::HostRunner;
use guestlink_host::quiesce;
use guestlink_host::{Session, Target, Timeouts};

use super::args::{
    Cli, Cmd, ExecArgs, FileCmd, FreezeAction, FsfreezeArgs, PullArgs, PushArgs, QuiesceArgs,
    RawArgs,
};
use super::progress::Bar;
use super::{emit, render};

fn secs(s: f64) -> Result<Duration> {
    Duration::try_from_secs_f64(s).with_context(|| format!("invalid number of seconds: {s}"))
}

fn target(cli: &Cli) -> Result<Target> {
    let t = &cli.target;
    Ok(match (&t.socket, &t.domain, t.proxmox) {
        (Some(p), None, None) => Target::Socket(p.clone()),
        (None, Some(d), None) => Target::Domain {
            name: d.clone(),
            uri: t.libvirt_uri.clone(),
        },
        (None, None, Some(v)) => Target::Proxmox(v),
        _ => bail!(
            "choose the agent with exactly one of --socket PATH, --domain NAME or --proxmox VMID"
        ),
    })
}

fn open(cli: &Cli) -> Result<Session> {
    let target = target(cli)?;
    let mut timeouts = Timeouts {
        sync: secs(cli.connect_timeout)?,
        ..Timeouts::default()
    };
    if let Some(t) = cli.agent_timeout {
        timeouts.default = secs(t)?;
    }
    Ok(Session::open(&target, timeouts)?)
}

/// Opens the session, runs the agent subcommand, ends the batch; returns the exit status.
pub fn run(cli: &Cli, out: &mut dyn Write) -> Result<i32> {
    let mut s = open(cli)?;
    let s = &mut s;
    let code = match &cli.command {
        Cmd::Ping => ping(cli, s, out)?,
        Cmd::Info => query(cli, s, out, "guest-info", render::info)?,
        Cmd::Osinfo => query(cli, s, out, "guest-get-osinfo", render::osinfo)?,
        Cmd::Fsinfo => query(cli, s, out, "guest-get-fsinfo", render::fsinfo)?,
        Cmd::Network => query(cli, s, out, "guest-network-get-interfaces", render::network)?,
        Cmd::Users => query(cli, s, out, "guest-get-users", render::users)?,
        Cmd::Time => time(cli, s, out)?,
        Cmd::Exec(a) => exec(cli, s, out, a)?,
        Cmd::File(FileCmd::Pull(a)) => file_pull(cli, s, out, a)?,
        Cmd::File(FileCmd::Push(a)) => file_push(cli, s, out, a)?,
        Cmd::Fsfreeze(a) => fsfreeze(cli, s, out, a)?,
        Cmd::Quiesce(a) => quiesce(cli, s, out, a)?,
        Cmd::Raw(a) => raw(cli, s, out, a)?,
        Cmd::Man | Cmd::Completions { .. } | Cmd::Spice(_) => 0,
    };
    s.end_batch();
    Ok(code)
}

/// A query without arguments: the command's return value as JSON, or rendered by `human`.
fn query(
    cli: &Cli,
    s: &mut Session,
    out: &mut dyn Write,
    command: &str,
    human: fn(&Value, &mut dyn Write) -> std::io::Result<()>,
) -> Result<i32> {
    let v = s.call(command, None)?;
    if cli.json {
        emit(out, &v)?;
    } else {
        human(&v, out).context("cannot write to stdout")?;
    }
    Ok(0)
}

/// `ping`: guest-ping and its round-trip time.
fn ping(cli: &Cli, s: &mut Session, out: &mut dyn Write) -> Result<i32> {
    let t = Instant::now();
    s.call("guest-ping", None)?;
    let ms = t.elapsed().as_secs_f64() * 1e3;
    if cli.json {
        emit(out, &json!({"ok": true, "rtt_ms": ms}))?;
    } else {
        writeln!(out, "agent answered in {ms:.2} ms")?;
    }
    Ok(0)
}

/// `time`: guest-get-time and its offset from the host clock.
fn time(cli: &Cli, s: &mut Session, out: &mut dyn Write) -> Result<i32> {
    let v = s.call("guest-get-time", None)?;
    let guest_ns = v
        .as_i64()
        .context("guest-get-time did not return an integer")?;
    let host_ns = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i64);
    let offset_ms = (guest_ns - host_ns) as f64 / 1e6;
    let utc = render::utc(guest_ns);
    if cli.json {
        emit(
            out,
            &json!({"nanoseconds": guest_ns, "utc": utc, "offset_from_host_ms": offset_ms}),
        )?;
    } else {
        writeln!(out, "{utc} (guest - host: {offset_ms:+.1} ms)")?;
    }
    Ok(0)
}

/// `exec`: runs a guest process, streaming its output (or collecting it with `--json`); its status is ours.
fn exec(cli: &Cli, s: &mut Session, out: &mut dyn Write, a: &ExecArgs) -> Result<i32> {
    let (path, args) = a.command.split_first().context("no command given")?;
    let stdin = std::io::stdin();
    let input = if a.no_stdin || stdin.is_terminal() {
        None
    } else {
        let mut buf = Vec::new();
        stdin
            .lock()
            .take(MAX_INPUT_BYTES as u64 + 1)
            .read_to_end(&mut buf)
            .context("cannot read stdin")?;
        if buf.len() > MAX_INPUT_BYTES {
            bail!(
                "stdin is larger than {} MiB; copy the data with `guestlink file push` instead",
                MAX_INPUT_BYTES >> 20
            );
        }
        Some(buf)
    };
    let req = ExecRequest {
        path: path.clone(),
        args: args.to_vec(),
        env: (!a.env.is_empty()).then(|| a.env.clone()),
        input,
    };
    if cli.json {
        let (outcome, o, e) = exec::run_collect(s, &req)?;
        let text =
            |b: &[u8]| std::str::from_utf8(b).map_or(Value::Null, |t| Value::String(t.to_owned()));
        let mut doc = serde_json::to_value(&outcome)?;
        doc["status"] = json!(outcome.status());
        doc["stdout"] = text(&o);
        doc["stderr"] = text(&e);
        doc["stdout_b64"] = json!(B64.encode(&o));
        doc["stderr_b64"] = json!(B64.encode(&e));
        emit(out, &doc)?;
        return Ok(outcome.status());
    }
    let mut err = std::io::stderr();
    let outcome = exec::run(s, &req, &mut |which, data| match which {
        OutStream::Stdout => out.write_all(data).and_then(|()| out.flush()),
        OutStream::Stderr => err.write_all(data),
    })?;
    if (outcome.out_truncated || outcome.err_truncated) && !cli.quiet {
        eprintln!("guestlink: note: the agent truncated the process output");
    }
    Ok(outcome.status())
}

fn transfer_bar(cli: &Cli) -> Bar {
    Bar::new(std::io::stderr().is_terminal() && !cli.json && !cli.quiet)
}

/// `file pull`: a guest file to the host.
fn file_pull(cli: &Cli, s: &mut Session, out: &mut dyn Write, a: &PullArgs) -> Result<i32> {
    let mut bar = transfer_bar(cli);
    let tuning = file::effective_tuning(s, a.chunk_size, a.in_flight);
    let rep = file::pull(s, &a.guest, &a.host, tuning, &mut bar)
        .with_context(|| format!("cannot pull {} to {}", a.guest, a.host.display()))?;
    print_transfer(cli, out, &rep)
}

/// `file push`: a host file into the guest.
fn file_push(cli: &Cli, s: &mut Session, out: &mut dyn Write, a: &PushArgs) -> Result<i32> {
    let mut bar = transfer_bar(cli);
    let quiet = cli.quiet;
    let mut warn = |m: &str| {
        if !quiet {
            eprintln!("guestlink: warning: {m}");
        }
    };
    let tuning = file::effective_tuning(s, a.chunk_size, a.in_flight);
    let rep = file::push(s, &a.host, &a.guest, tuning, &mut bar, &mut warn)
        .with_context(|| format!("cannot push {} to {}", a.host.display(), a.guest))?;
    print_transfer(cli, out, &rep)
}

fn print_transfer(cli: &Cli, out: &mut dyn Write, rep: &TransferReport) -> Result<i32> {
    if cli.json {
        emit(out, &serde_json::to_value(rep)?)?;
    } else if !cli.quiet {
        let mb = rep.bytes as f64 / 1e6;
        writeln!(
            out,
            "{} -> {}: {} bytes in {:.2} s ({:.1} MB/s), sha256 {} verified",
            rep.source,
            rep.destination,
            rep.bytes,
            rep.seconds,
            mb / rep.seconds.max(1e-9),
            rep.sha256
        )?;
    }
    Ok(0)
}

/// `fsfreeze freeze|thaw|status`.
fn fsfreeze(cli: &Cli, s: &mut Session, out: &mut dyn Write, a: &FsfreezeArgs) -> Result<i32> {
    let (key, v) = match a.action {
        FreezeAction::Status => ("status", s.call("guest-fsfreeze-status", None)?),
        FreezeAction::Thaw => ("thawed", s.call("guest-fsfreeze-thaw", None)?),
        FreezeAction::Freeze if a.mountpoints.is_empty() => {
            ("frozen", s.call("guest-fsfreeze-freeze", None)?)
        }
        FreezeAction::Freeze => (
            "frozen",
            s.call(
                "guest-fsfreeze-freeze-list",
                Some(json!({"mountpoints": a.mountpoints})),
            )?,
        ),
    };
    if cli.json {
        emit(out, &json!({ key: v }))?;
    } else if key == "status" {
        writeln!(out, "{}", v.as_str().unwrap_or_default())?;
    } else {
        writeln!(out, "{key} {v} filesystem(s)")?;
    }
    Ok(0)
}

/// `quiesce`: freeze, run the host command, always thaw; the report decides the exit status.
fn quiesce(cli: &Cli, s: &mut Session, out: &mut dyn Write, a: &QuiesceArgs) -> Result<i32> {
    let mut runner = HostRunner::arm()
        .context("cannot install signal handlers")?
        .stdout_to_stderr(cli.json);
    let rep = quiesce::quiesce(s, &mut runner, &a.mountpoints, &a.command, secs(a.timeout)?);
    if cli.json {
        emit(out, &serde_json::to_value(&rep)?)?;
    } else {
        render::quiesce(&rep, cli.quiet);
    }
    Ok(rep.exit_code)
}

/// `raw`: any request; exits 1 when the agent answered with an error.
fn raw(cli: &Cli, s: &mut Session, out: &mut dyn Write, a: &RawArgs) -> Result<i32> {
    let req: Map<String, Value> = match serde_json::from_str::<Value>(&a.request) {
        Ok(Value::Object(m)) => m,
        Ok(other) => {
            bail!("the request must be a JSON object or a command name, not {other}")
        }
        Err(_) if !a.request.trim_start().starts_with(['{', '[']) => {
            let mut m = Map::new();
            m.insert("execute".into(), Value::String(a.request.trim().to_owned()));
            m
        }
        Err(e) => return Err(e).context("the request is not valid JSON"),
    };
    let timeout = a.timeout.map(secs).transpose()?;
    let reply = s.raw(req, timeout)?;
    let pretty = if cli.json {
        reply.to_string()
    } else {
        serde_json::to_string_pretty(&reply)?
    };
    writeln!(out, "{pretty}")?;
    Ok(i32::from(reply.get("error").is_some()))
}
