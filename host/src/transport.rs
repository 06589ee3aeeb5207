//! Transports that carry one request and bring back its reply: a direct stream (unix socket or character
//! device, with the 0xFF + guest-sync-delimited handshake) and `virsh qemu-agent-command` for libvirt domains.

use std::collections::VecDeque;
use std::fs::{File, OpenOptions};
use std::io::{ErrorKind, Read, Write};
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::fs::FileTypeExt;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use serde_json::{json, Map, Value};
use tracing::{debug, trace, warn};

use guestlink_protocol::qga::{encode_request, Reply, ReplyDecoder, ReplyEvent};

use crate::error::{Channel, Error, Result};

/// Upper bound for one reply line: a 32 MiB chunk is 43 MiB of base64; a 48 MiB read (qemu-ga's cap through
/// `raw`) is 64 MiB plus JSON overhead.
pub const MAX_REPLY_BYTES: usize = 80 << 20;

/// Carries requests to the agent.
pub trait Transport: std::fmt::Debug {
    /// Send one request object and return the agent's reply object (`{"return": …}` or `{"error": …}`).
    fn exchange(&mut self, request: Map<String, Value>, timeout: Duration) -> Result<Value>;
    /// True when [`Transport::send`]/[`Transport::receive`] can keep several requests in flight.
    fn can_pipeline(&self) -> bool {
        false
    }
    /// Send a request without waiting for its reply; returns the id to pass to [`Transport::receive`].
    fn send(&mut self, _request: Map<String, Value>) -> Result<Value> {
        Err(Error::Unsupported(
            "this transport cannot pipeline requests".into(),
        ))
    }
    /// Wait for the reply to the request sent with `id` (replies arrive in request order).
    fn receive(&mut self, _id: &Value, command: &str, timeout: Duration) -> Result<Value> {
        Err(Error::Timeout {
            channel: Channel::Qga,
            what: command.to_owned(),
            timeout,
        })
    }
    /// Close a per-batch connection; the next exchange reconnects (and re-syncs).
    fn release(&mut self) {}
    /// Connect and sync now instead of on the first exchange.
    fn connect(&mut self) -> Result<()> {
        Ok(())
    }
}

/// The open channel.
#[derive(Debug)]
enum Conn {
    Unix(UnixStream),
    Device(File),
}

impl Conn {
    fn fd(&self) -> BorrowedFd<'_> {
        match self {
            Conn::Unix(s) => s.as_fd(),
            Conn::Device(f) => f.as_fd(),
        }
    }

    fn write_all(&mut self, data: &[u8]) -> std::io::Result<()> {
        match self {
            Conn::Unix(s) => s.write_all(data),
            Conn::Device(f) => f.write_all(data),
        }
    }

    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Conn::Unix(s) => s.read(buf),
            Conn::Device(f) => f.read(buf),
        }
    }
}

/// A direct byte stream to the agent: unix socket (QEMU chardev, Proxmox) or character device.
#[derive(Debug)]
pub struct StreamTransport {
    path: PathBuf,
    sync_timeout: Duration,
    conn: Option<Conn>,
    decoder: ReplyDecoder,
    events: VecDeque<ReplyEvent>,
    next_id: u64,
}

impl StreamTransport {
    /// A transport for `path`; nothing is opened until [`Transport::connect`] or the first exchange.
    pub fn new(path: PathBuf, sync_timeout: Duration) -> Self {
        Self {
            path,
            sync_timeout,
            conn: None,
            decoder: ReplyDecoder::with_max_reply(MAX_REPLY_BYTES),
            events: VecDeque::new(),
            next_id: u64::from(rand::random::<u32>()),
        }
    }

    fn no_agent(&self, source: Option<std::io::Error>) -> Error {
        Error::NoAgent {
            channel: Channel::Qga,
            target: self.path.display().to_string(),
            timeout: self.sync_timeout,
            source,
        }
    }

    /// Open the path, retrying a refused connection until `deadline` (QEMU may be restarting).
    fn open(&self, deadline: Instant) -> Result<Conn> {
        let meta = match std::fs::metadata(&self.path) {
            Ok(m) => m,
            Err(e) if e.kind() == ErrorKind::NotFound => {
                return Err(Error::NoSuchPath(self.path.clone()))
            }
            Err(source) => {
                return Err(Error::Open {
                    path: self.path.clone(),
                    source,
                })
            }
        };
        if !meta.file_type().is_socket() {
            return OpenOptions::new()
                .read(true)
                .write(true)
                .open(&self.path)
                .map(Conn::Device)
                .map_err(|source| Error::Open {
                    path: self.path.clone(),
                    source,
                });
        }
        loop {
            match UnixStream::connect(&self.path) {
                Ok(s) => return Ok(Conn::Unix(s)),
                Err(e)
                    if matches!(
                        e.kind(),
                        ErrorKind::ConnectionRefused | ErrorKind::WouldBlock
                    ) && Instant::now() < deadline =>
                {
                    debug!(path = %self.path.display(), error = %e, "connect refused, retrying");
                    std::thread::sleep(Duration::from_millis(200).min(deadline - Instant::now()));
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        ErrorKind::ConnectionRefused | ErrorKind::WouldBlock
                    ) =>
                {
                    return Err(self.no_agent(Some(e)));
                }
                Err(source) => {
                    return Err(Error::Open {
                        path: self.path.clone(),
                        source,
                    })
                }
            }
        }
    }

    /// Read until the decoder yields an event or `deadline` passes (`Ok(None)`).
    fn read_event(&mut self, deadline: Instant) -> Result<Option<ReplyEvent>> {
        let mut buf = vec![0u8; 256 * 1024];
        loop {
            if let Some(ev) = self.events.pop_front() {
                return Ok(Some(ev));
            }
            let conn = self.conn.as_mut().ok_or(Error::Closed(Channel::Qga))?;
            let now = Instant::now();
            if now >= deadline {
                return Ok(None);
            }
            let wait = PollTimeout::try_from(deadline - now).unwrap_or(PollTimeout::MAX);
            let mut fds = [PollFd::new(conn.fd(), PollFlags::POLLIN)];
            match poll(&mut fds, wait) {
                Ok(0) => continue,
                Ok(_) => {}
                Err(nix::errno::Errno::EINTR) => continue,
                Err(e) => return Err(Error::Io(Channel::Qga, e.into())),
            }
            match conn.read(&mut buf) {
                Ok(0) => {
                    self.conn = None;
                    return Err(Error::Closed(Channel::Qga));
                }
                Ok(n) => {
                    trace!(bytes = n, "read from agent");
                    self.events.extend(self.decoder.feed(&buf[..n]));
                }
                Err(e) if matches!(e.kind(), ErrorKind::Interrupted | ErrorKind::WouldBlock) => {}
                Err(e) => {
                    self.conn = None;
                    return Err(Error::Io(Channel::Qga, e));
                }
            }
        }
    }

    /// Send 0xFF + guest-sync-delimited with a random id and discard everything up to its reply.
    fn sync(&mut self, deadline: Instant) -> Result<()> {
        let id = i64::from(rand::random::<u32>() >> 1) + 1;
        let mut args = Map::new();
        args.insert("id".into(), json!(id));
        let mut msg = vec![0xFFu8];
        msg.extend_from_slice(&encode_request("guest-sync-delimited", Some(&args), None));
        self.decoder = ReplyDecoder::with_max_reply(MAX_REPLY_BYTES);
        self.decoder.expect_delimiter();
        self.events.clear();
        let conn = self.conn.as_mut().ok_or(Error::Closed(Channel::Qga))?;
        conn.write_all(&msg)
            .map_err(|e| Error::Io(Channel::Qga, e))?;
        debug!(id, "sent guest-sync-delimited");
        loop {
            match self.read_event(deadline) {
                Ok(Some(ReplyEvent::Reply(Reply { body: Ok(v), .. })))
                    if v.as_i64() == Some(id) =>
                {
                    debug!(id, "agent in sync");
                    return Ok(());
                }
                Ok(Some(ev)) => debug!(?ev, "skipping stale output while syncing"),
                Ok(None) | Err(Error::Closed(Channel::Qga)) => return Err(self.no_agent(None)),
                Err(e) => return Err(e),
            }
        }
    }

    fn ensure_connected(&mut self) -> Result<()> {
        if self.conn.is_some() {
            return Ok(());
        }
        let deadline = Instant::now() + self.sync_timeout;
        self.conn = Some(self.open(deadline)?);
        let res = self.sync(deadline);
        if res.is_err() {
            self.conn = None;
        }
        res
    }
}

/// The `execute` name of a request, for errors and logs ("request" when it has none).
fn command_name(request: &Map<String, Value>) -> String {
    request
        .get("execute")
        .and_then(Value::as_str)
        .unwrap_or("request")
        .to_owned()
}

impl Transport for StreamTransport {
    fn exchange(&mut self, request: Map<String, Value>, timeout: Duration) -> Result<Value> {
        let command = command_name(&request);
        let id = self.send(request)?;
        self.receive(&id, &command, timeout)
    }

    fn can_pipeline(&self) -> bool {
        true
    }

    fn send(&mut self, mut request: Map<String, Value>) -> Result<Value> {
        self.ensure_connected()?;
        let id = match request.get("id") {
            Some(id) => id.clone(),
            None => {
                self.next_id += 1;
                let id = json!(self.next_id);
                request.insert("id".into(), id.clone());
                id
            }
        };
        let mut bytes =
            serde_json::to_vec(&request).map_err(|e| Error::BadRequest(e.to_string()))?;
        bytes.push(b'\n');
        let conn = self.conn.as_mut().ok_or(Error::Closed(Channel::Qga))?;
        if let Err(e) = conn.write_all(&bytes) {
            self.conn = None;
            return Err(Error::Io(Channel::Qga, e));
        }
        Ok(id)
    }

    fn receive(&mut self, id: &Value, command: &str, timeout: Duration) -> Result<Value> {
        let deadline = Instant::now() + timeout;
        loop {
            match self.read_event(deadline)? {
                Some(ReplyEvent::Reply(reply)) if reply.id.as_ref() == Some(id) => {
                    return Ok(reply_value(reply))
                }
                Some(ReplyEvent::Reply(reply)) => debug!(?reply, "ignoring reply with another id"),
                Some(ReplyEvent::Garbage { line, error }) => {
                    warn!(%line, %error, "ignoring garbage from the agent");
                }
                Some(ReplyEvent::TooLarge { limit }) => {
                    self.conn = None;
                    return Err(Error::ReplyTooLarge(limit));
                }
                None => {
                    // Out of sync now: a late reply may still arrive. Re-sync on the next exchange.
                    self.conn = None;
                    return Err(Error::Timeout {
                        channel: Channel::Qga,
                        what: command.to_owned(),
                        timeout,
                    });
                }
            }
        }
    }

    fn release(&mut self) {
        self.conn = None;
    }

    fn connect(&mut self) -> Result<()> {
        self.ensure_connected()
    }
}

/// A decoded reply as the JSON object the agent sent (`return` or `error`, plus `id`).
fn reply_value(reply: Reply) -> Value {
    let mut m = Map::new();
    match reply.body {
        Ok(v) => {
            m.insert("return".into(), v);
        }
        Err(e) => {
            m.insert(
                "error".into(),
                json!({"class": e.class.as_str(), "desc": e.desc}),
            );
        }
    }
    if let Some(id) = reply.id {
        m.insert("id".into(), id);
    }
    Value::Object(m)
}

/// Linux's MAX_ARG_STRLEN: the longest single argument execve accepts, NUL included.
const MAX_VIRSH_ARG: usize = 128 << 10;

/// A libvirt domain reached through `virsh qemu-agent-command` (libvirt does its own guest-sync).
#[derive(Debug)]
pub struct VirshTransport {
    domain: String,
    uri: Option<String>,
    program: PathBuf,
}

impl VirshTransport {
    /// A transport for `domain`; `GUESTLINK_VIRSH` overrides the virsh program (used by tests).
    pub fn new(domain: String, uri: Option<String>) -> Self {
        let program = std::env::var_os("GUESTLINK_VIRSH")
            .map_or_else(|| PathBuf::from("virsh"), PathBuf::from);
        Self {
            domain,
            uri,
            program,
        }
    }
}

impl Transport for VirshTransport {
    fn exchange(&mut self, request: Map<String, Value>, timeout: Duration) -> Result<Value> {
        let command = command_name(&request);
        let json = Value::Object(request).to_string();
        // The request is one virsh argument; Linux refuses (E2BIG) an argument of 128 KiB or more.
        if json.len() >= MAX_VIRSH_ARG {
            return Err(Error::BadRequest(format!(
                "{command} request of {} bytes is too large for virsh (one argument is limited to 128 KiB)",
                json.len()
            )));
        }
        let secs = timeout.as_secs().max(1);
        let mut cmd = Command::new(&self.program);
        if let Some(uri) = &self.uri {
            cmd.arg("-c").arg(uri);
        }
        cmd.args([
            "qemu-agent-command",
            "--domain",
            &self.domain,
            "--timeout",
            &secs.to_string(),
            "--cmd",
            &json,
        ]);
        debug!(?cmd, "running virsh");
        let out = cmd.output().map_err(Error::VirshSpawn)?;
        if !out.status.success() {
            let stderr = String::from_utf8_lossy(&out.stderr);
            let text = stderr
                .trim()
                .trim_start_matches("error: ")
                .replace("\nerror: ", ": ");
            return Err(Error::Virsh(text));
        }
        let reply: Value = serde_json::from_slice(&out.stdout).map_err(|e| Error::BadReply {
            command,
            detail: format!("virsh printed non-JSON output: {e}"),
        })?;
        Ok(reply)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{BufRead, BufReader};
    use std::os::unix::net::UnixListener;

    /// Reads one JSON request line from the peer side (skipping a leading 0xFF).
    fn read_request(r: &mut BufReader<UnixStream>) -> Value {
        let mut line = Vec::new();
        r.read_until(b'\n', &mut line).expect("read request");
        let start = usize::from(line.first() == Some(&0xFF));
        serde_json::from_slice(&line[start..]).expect("request JSON")
    }

    /// A scripted peer (real agents cannot be made to queue stale replies on unix-listen): stale output before
    /// and after the 0xFF, a stale delimited sync reply, garbage, and a reply with a foreign id must all be
    /// skipped.
    #[test]
    fn sync_and_exchange_skip_stale_replies() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("peer.sock");
        let listener = UnixListener::bind(&path).expect("bind");
        let peer = std::thread::spawn(move || {
            let (conn, _) = listener.accept().expect("accept");
            let mut w = conn.try_clone().expect("clone");
            let mut r = BufReader::new(conn);
            let sync = read_request(&mut r);
            assert_eq!(sync["execute"], "guest-sync-delimited");
            let id = sync["arguments"]["id"].as_i64().expect("sync id");
            let mut out = b"{\"return\": {}, \"id\": 99}\n{\"error\": {\"class\": \"GenericError\", \"desc\": \"JSON parse error, stray '\\\\uFFFD'\"}}\n".to_vec();
            out.extend_from_slice(b"\xff{\"return\": 12345}\ngarbage\n");
            out.push(0xFF);
            out.extend_from_slice(format!("{{\"return\": {id}}}\n").as_bytes());
            w.write_all(&out).expect("write sync replies");
            let req = read_request(&mut r);
            assert_eq!(req["execute"], "guest-get-host-name");
            let rid = req["id"].clone();
            let reply = format!("{{\"return\": {{\"host-name\": \"stale\"}}, \"id\": \"other\"}}\n{{\"return\": {{\"host-name\": \"right\"}}, \"id\": {rid}}}\n");
            w.write_all(reply.as_bytes()).expect("write reply");
        });
        let mut t = StreamTransport::new(path, Duration::from_secs(10));
        t.connect().expect("sync");
        let mut req = Map::new();
        req.insert("execute".into(), json!("guest-get-host-name"));
        let reply = t.exchange(req, Duration::from_secs(10)).expect("reply");
        assert_eq!(reply["return"]["host-name"], "right");
        peer.join().expect("peer");
    }

    #[test]
    fn silent_peer_gives_the_no_agent_error() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("mute.sock");
        let listener = UnixListener::bind(&path).expect("bind");
        let mut t = StreamTransport::new(path.clone(), Duration::from_millis(300));
        let err = t.connect().expect_err("nobody answers");
        drop(listener);
        assert_eq!(
            err.to_string(),
            format!("no agent answered on {} within 0.3 s: is guestlinkd or qemu-ga running in the guest?", path.display())
        );
    }
}
