//! Subcommand handlers: open the session, call the library, print text or one JSON document.

use std::io::{IsTerminal, Read, Write};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};
use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde_json::{json, Map, Value};

use guestlink_host::exec::{self, ExecRequest, OutStream, MAX_INPUT_BYTES};
use guestlink_host::file::{self, Progress};
use guestlink_host::host_cmd::HostRunner;
use guestlink_host::quiesce::{self, CmdRunner};
use guestlink_host::{Session, Target, Timeouts};

use crate::cli::{Cli, Cmd, FileCmd, FreezeAction};
use crate::render;

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

fn emit(out: &mut dyn Write, v: &Value) -> Result<()> {
    writeln!(out, "{v}").context("cannot write to stdout")
}

/// Run the agent subcommand and return the exit status.
pub fn run(cli: &Cli, out: &mut dyn Write) -> Result<i32> {
    let mut s = open(cli)?;
    let query = |s: &mut Session, cmd: &str| s.call(cmd, None).map_err(anyhow::Error::from);
    let code = match &cli.command {
        Cmd::Ping => {
            let t = Instant::now();
            query(&mut s, "guest-ping")?;
            let ms = t.elapsed().as_secs_f64() * 1e3;
            if cli.json {
                emit(out, &json!({"ok": true, "rtt_ms": ms}))?;
            } else {
                writeln!(out, "agent answered in {ms:.2} ms")?;
            }
            0
        }
        Cmd::Info => print_query(cli, out, query(&mut s, "guest-info")?, render::info)?,
        Cmd::Osinfo => print_query(cli, out, query(&mut s, "guest-get-osinfo")?, render::osinfo)?,
        Cmd::Fsinfo => print_query(cli, out, query(&mut s, "guest-get-fsinfo")?, render::fsinfo)?,
        Cmd::Network => print_query(
            cli,
            out,
            query(&mut s, "guest-network-get-interfaces")?,
            render::network,
        )?,
        Cmd::Users => print_query(cli, out, query(&mut s, "guest-get-users")?, render::users)?,
        Cmd::Time => {
            let v = query(&mut s, "guest-get-time")?;
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
            0
        }
        Cmd::Exec(a) => exec_cmd(cli, out, &mut s, a)?,
        Cmd::File(f) => file_cmd(cli, out, &mut s, f)?,
        Cmd::Fsfreeze(a) => {
            let (key, v) = match a.action {
                FreezeAction::Status => ("status", query(&mut s, "guest-fsfreeze-status")?),
                FreezeAction::Thaw => ("thawed", query(&mut s, "guest-fsfreeze-thaw")?),
                FreezeAction::Freeze if a.mountpoints.is_empty() => {
                    ("frozen", query(&mut s, "guest-fsfreeze-freeze")?)
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
            0
        }
        Cmd::Quiesce(a) => {
            let mut runner = HostRunner::arm()
                .context("cannot install signal handlers")?
                .stdout_to_stderr(cli.json);
            let rep = quiesce::quiesce(
                &mut s,
                &mut runner,
                &a.mountpoints,
                &a.command,
                secs(a.timeout)?,
            );
            if cli.json {
                emit(out, &serde_json::to_value(&rep)?)?;
            } else {
                render::quiesce(&rep, cli.quiet);
            }
            rep.exit_code
        }
        Cmd::Raw(a) => {
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
            i32::from(reply.get("error").is_some())
        }
        Cmd::Man | Cmd::Completions { .. } | Cmd::Spice(_) => 0,
    };
    s.end_batch();
    Ok(code)
}

fn print_query(
    cli: &Cli,
    out: &mut dyn Write,
    v: Value,
    human: fn(&Value, &mut dyn Write) -> std::io::Result<()>,
) -> Result<i32> {
    if cli.json {
        emit(out, &v)?;
    } else {
        human(&v, out).context("cannot write to stdout")?;
    }
    Ok(0)
}

fn exec_cmd(
    cli: &Cli,
    out: &mut dyn Write,
    s: &mut Session,
    a: &crate::cli::ExecArgs,
) -> Result<i32> {
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

/// indicatif bar on stderr when it is a terminal; also reports SIGINT/SIGTERM so a transfer stops cleanly.
struct Bar(ProgressBar, Option<HostRunner>);

impl Bar {
    fn new(visible: bool) -> Self {
        let pb = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
        if !visible {
            pb.set_draw_target(ProgressDrawTarget::hidden());
        }
        if let Ok(style) = ProgressStyle::with_template(
            "{msg:10} [{bar:30}] {bytes}/{total_bytes} {binary_bytes_per_sec} eta {eta}",
        ) {
            pb.set_style(style.progress_chars("=> "));
        }
        // Without the signal thread a Ctrl-C still stops guestlink, only without cleaning up temp files.
        Self(pb, HostRunner::arm().ok())
    }
}

impl Progress for Bar {
    fn start(&mut self, total: Option<u64>) {
        if let Some(t) = total {
            self.0.set_length(t);
        }
        self.0.set_message("copying");
    }
    fn advance(&mut self, n: u64) {
        self.0.inc(n);
    }
    fn message(&mut self, msg: &str) {
        self.0.set_message(msg.to_owned());
    }
    fn finish(&mut self) {
        self.0.finish_and_clear();
    }
    fn interrupted(&mut self) -> bool {
        self.1
            .as_mut()
            .is_some_and(|r| r.pending_signal().is_some())
    }
}

fn file_cmd(cli: &Cli, out: &mut dyn Write, s: &mut Session, f: &FileCmd) -> Result<i32> {
    let mut bar = Bar::new(std::io::stderr().is_terminal() && !cli.json && !cli.quiet);
    let quiet = cli.quiet;
    let mut warn = |m: &str| {
        if !quiet {
            eprintln!("guestlink: warning: {m}");
        }
    };
    let rep = match f {
        FileCmd::Pull(a) => {
            let tuning = file::effective_tuning(s, a.chunk_size, a.in_flight);
            file::pull(s, &a.guest, &a.host, tuning, &mut bar)
                .with_context(|| format!("cannot pull {} to {}", a.guest, a.host.display()))?
        }
        FileCmd::Push(a) => {
            let tuning = file::effective_tuning(s, a.chunk_size, a.in_flight);
            file::push(s, &a.host, &a.guest, tuning, &mut bar, &mut warn)
                .with_context(|| format!("cannot push {} to {}", a.host.display(), a.guest))?
        }
    };
    if cli.json {
        emit(out, &serde_json::to_value(&rep)?)?;
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
