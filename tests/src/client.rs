//! A minimal QGA client over a unix socket: 0xFF + guest-sync-delimited reset, then JSON lines.
//!
//! Independent of `guestlink_protocol` on purpose: the suite is black-box and must not share bugs with the code
//! under test.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime};

use serde_json::{json, Value};

/// Generous per-read timeout for a loaded 2-core machine (big file reads take seconds).
pub const READ_TIMEOUT: Duration = Duration::from_secs(120);

/// A random u32 (no `rand` dependency needed for ids).
pub fn random_u32() -> u32 {
    let mut h = RandomState::new().build_hasher();
    h.write_u128(
        SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    (h.finish() & 0x7fff_ffff) as u32
}

/// One connection to an agent.
#[derive(Debug)]
pub struct Client {
    writer: UnixStream,
    reader: BufReader<UnixStream>,
}

impl Client {
    /// Connects, retrying for up to `timeout` while the agent starts.
    pub fn connect(path: &Path, timeout: Duration) -> io::Result<Client> {
        let deadline = Instant::now() + timeout;
        let stream = loop {
            match UnixStream::connect(path) {
                Ok(s) => break s,
                Err(e) if Instant::now() > deadline => return Err(e),
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        };
        stream.set_read_timeout(Some(READ_TIMEOUT))?;
        let reader = BufReader::with_capacity(1 << 20, stream.try_clone()?);
        Ok(Client {
            writer: stream,
            reader,
        })
    }

    /// A second handle on the socket for writing from another thread (for requests larger than the socket
    /// buffer while the reply is read here).
    pub fn try_clone_writer(&self) -> UnixStream {
        self.writer.try_clone().expect("clone socket")
    }

    /// Writes raw bytes.
    pub fn send_raw(&mut self, bytes: &[u8]) {
        self.writer.write_all(bytes).expect("write to agent");
    }

    /// Writes one JSON value (compact, newline-terminated).
    pub fn send(&mut self, v: &Value) {
        let mut s = serde_json::to_vec(v).expect("serialize");
        s.push(b'\n');
        self.send_raw(&s);
    }

    /// Reads one raw reply line, including a leading 0xFF if any and without the `\n`.
    pub fn recv_line(&mut self) -> Vec<u8> {
        let mut buf = Vec::new();
        match self.reader.read_until(b'\n', &mut buf) {
            Ok(0) => panic!(
                "agent closed the connection (partial: {:?})",
                String::from_utf8_lossy(&buf)
            ),
            Ok(_) => {}
            Err(e) => panic!(
                "reading a reply: {e} (partial: {:?})",
                String::from_utf8_lossy(&buf)
            ),
        }
        assert_eq!(buf.pop(), Some(b'\n'), "reply not newline-terminated");
        buf
    }

    /// Reads one reply and parses it (a leading 0xFF is an error here).
    pub fn recv(&mut self) -> Value {
        let line = self.recv_line();
        assert_ne!(line.first(), Some(&0xFF), "unexpected 0xFF before a reply");
        serde_json::from_slice(&line).unwrap_or_else(|e| {
            panic!(
                "reply is not JSON ({e}): {:?}",
                String::from_utf8_lossy(&line)
            )
        })
    }

    /// Asserts that nothing arrives within `wait`.
    pub fn expect_silence(&mut self, wait: Duration) {
        self.reader
            .get_ref()
            .set_read_timeout(Some(wait))
            .expect("timeout");
        let r = self.reader.fill_buf().map(|b| b.to_vec());
        self.reader
            .get_ref()
            .set_read_timeout(Some(READ_TIMEOUT))
            .expect("timeout");
        match r {
            Ok(b) if b.is_empty() => panic!("agent closed the connection"),
            Ok(b) => panic!("unexpected data: {:?}", String::from_utf8_lossy(&b)),
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) => {}
            Err(e) => panic!("read: {e}"),
        }
    }

    /// Reads and returns everything up to and including the next 0xFF.
    pub fn read_through_ff(&mut self) -> Vec<u8> {
        let mut skipped = Vec::new();
        let n = self
            .reader
            .read_until(0xFF, &mut skipped)
            .expect("read up to 0xFF");
        assert!(
            n > 0 && skipped.last() == Some(&0xFF),
            "EOF before 0xFF: {:?}",
            String::from_utf8_lossy(&skipped)
        );
        skipped
    }

    /// Resets the agent's parser: sends 0xFF + guest-sync-delimited with a random id, discards everything up to
    /// the 0xFF reply prefix and checks the echoed id. Returns the discarded bytes (without the 0xFF).
    pub fn sync(&mut self) -> Vec<u8> {
        let id = random_u32();
        let mut req = vec![0xFF];
        req.extend(
            serde_json::to_vec(
                &json!({"execute": "guest-sync-delimited", "arguments": {"id": id}}),
            )
            .expect("json"),
        );
        req.push(b'\n');
        self.send_raw(&req);
        self.reader
            .get_ref()
            .set_read_timeout(Some(Duration::from_secs(30)))
            .expect("timeout");
        let mut skipped = self.read_through_ff();
        self.reader
            .get_ref()
            .set_read_timeout(Some(READ_TIMEOUT))
            .expect("timeout");
        skipped.pop();
        let reply = self.recv();
        assert_eq!(reply, json!({"return": id}), "guest-sync-delimited reply");
        skipped
    }

    /// Sends `{"execute": .., "arguments": ..}` and returns the whole reply.
    pub fn call(&mut self, execute: &str, arguments: Option<Value>) -> Value {
        let mut req = json!({ "execute": execute });
        if let Some(a) = arguments {
            req["arguments"] = a;
        }
        self.send(&req);
        self.recv()
    }

    /// Like [`Client::call`] but asserts success and returns `return`.
    pub fn ok(&mut self, execute: &str, arguments: Option<Value>) -> Value {
        let r = self.call(execute, arguments.clone());
        match r.get("return") {
            Some(v) if r.get("error").is_none() => v.clone(),
            _ => panic!("{execute} {arguments:?} failed: {r}"),
        }
    }

    /// Like [`Client::call`] but asserts an error and returns (class, desc).
    pub fn err(&mut self, execute: &str, arguments: Option<Value>) -> (String, String) {
        let r = self.call(execute, arguments.clone());
        error_of(&r).unwrap_or_else(|| panic!("{execute} {arguments:?} should fail: {r}"))
    }

    /// Polls `guest-exec-status` for `pid` every 20 ms until `exited` (panics after `timeout`); returns the final
    /// status.
    pub fn exec_wait(&mut self, pid: &Value, timeout: Duration) -> Value {
        let deadline = Instant::now() + timeout;
        loop {
            let st = self.ok("guest-exec-status", Some(json!({ "pid": pid })));
            if st["exited"] == json!(true) {
                return st;
            }
            assert!(
                Instant::now() < deadline,
                "process {pid} did not exit: {st}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Asserts `guest-ping` still works (the agent keeps serving).
    pub fn ping(&mut self) {
        assert_eq!(
            self.call("guest-ping", None),
            json!({"return": {}}),
            "guest-ping after the previous request"
        );
    }

    /// Reads all remaining bytes until EOF or `wait` of silence.
    pub fn drain(&mut self, wait: Duration) -> Vec<u8> {
        self.reader
            .get_ref()
            .set_read_timeout(Some(wait))
            .expect("timeout");
        let mut all = Vec::new();
        let _ = self.reader.read_to_end(&mut all);
        self.reader
            .get_ref()
            .set_read_timeout(Some(READ_TIMEOUT))
            .expect("timeout");
        all
    }
}

/// (class, desc) of an error reply, `None` for a success reply.
pub fn error_of(reply: &Value) -> Option<(String, String)> {
    let e = reply.get("error")?;
    Some((
        e["class"].as_str()?.to_string(),
        e["desc"].as_str()?.to_string(),
    ))
}
