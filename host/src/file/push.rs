//! `push`: a host file into the guest, written under a temp name and renamed (guestlink-file-rename, else
//! `guest-exec mv`) once the guest's hash matches; in place only when the agent offers neither.

use std::fs::File;
use std::io::Read;
use std::path::Path;
use std::time::Instant;

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use tracing::{debug, warn};

use super::{
    guest_sha256, hex, local, read_full, split_guest_path, GuestFile, Placement, Progress,
    TransferReport, Tuning, Verification, MAX_PUSH_CHUNK_LIBVIRT,
};
use crate::error::{Error, Result};
use crate::exec::{self, ExecRequest};
use crate::session::{Pipeline, Session};

/// Pipelined writes of `input` to one guest handle.
struct Writer<'a> {
    handle: i64,
    buf: Vec<u8>,
    input: &'a mut dyn Read,
    host: &'a Path,
    /// Lengths of the writes in flight, oldest first.
    pending: std::collections::VecDeque<usize>,
    done: bool,
    sink: &'a mut dyn FnMut(&[u8]) -> Result<()>,
}

impl Pipeline for Writer<'_> {
    fn next_request(&mut self, _in_flight: usize) -> Result<Option<(&'static str, Value)>> {
        if self.done {
            return Ok(None);
        }
        let n = read_full(self.input, &mut self.buf).map_err(local("cannot read", self.host))?;
        if n == 0 {
            self.done = true;
            return Ok(None);
        }
        (self.sink)(&self.buf[..n])?;
        self.pending.push_back(n);
        Ok(Some((
            "guest-file-write",
            json!({"handle": self.handle, "buf-b64": B64.encode(&self.buf[..n])}),
        )))
    }

    fn on_reply(&mut self, command: &'static str, value: Value) -> Result<()> {
        let want = self.pending.pop_front().unwrap_or(0);
        let n = value.get("count").and_then(Value::as_u64).unwrap_or(0);
        if n != want as u64 {
            return Err(Error::BadReply {
                command: command.into(),
                detail: format!("short write: {n} of {want} bytes"),
            });
        }
        Ok(())
    }
}

fn temp_sibling(dir: &str, name: &str) -> String {
    let tag = format!(".{name}.guestlink-{:08x}.part", rand::random::<u32>());
    if dir.is_empty() {
        tag
    } else if dir == "/" {
        format!("/{tag}")
    } else {
        format!("{dir}/{tag}")
    }
}

fn exec_ok(session: &mut Session, path: &str, args: &[&str]) -> Result<()> {
    let req = ExecRequest {
        path: path.into(),
        args: args.iter().map(|s| (*s).to_owned()).collect(),
        ..ExecRequest::default()
    };
    let (outcome, _, err) = exec::run_collect(session, &req)?;
    if outcome.status() != 0 {
        return Err(Error::Unsupported(format!(
            "{path} {} failed in the guest (status {}): {}",
            args.join(" "),
            outcome.status(),
            String::from_utf8_lossy(&err).trim()
        )));
    }
    Ok(())
}

/// Copy host file `host` to guest path `guest`. `on_warning` receives notes such as "written in place".
pub fn push(
    session: &mut Session,
    host: &Path,
    guest: &str,
    tuning: Tuning,
    progress: &mut dyn Progress,
    on_warning: &mut dyn FnMut(&str),
) -> Result<TransferReport> {
    let started = Instant::now();
    let mut tuning = tuning;
    if session.via_libvirt() {
        tuning.chunk = tuning.chunk.min(MAX_PUSH_CHUNK_LIBVIRT);
    }
    // "DIR/" in the guest keeps the host file name.
    let guest_full;
    let guest = match (guest.ends_with('/'), host.file_name()) {
        (true, Some(name)) => {
            guest_full = format!("{guest}{}", name.to_string_lossy());
            guest_full.as_str()
        }
        _ => guest,
    };
    let mut input = File::open(host).map_err(local("cannot open", host))?;
    let size = input.metadata().map_err(local("cannot stat", host))?.len();
    let placement = if session.supports("guestlink-file-rename")? {
        Placement::Rename
    } else if session.supports("guest-exec")? && session.supports("guest-exec-status")? {
        Placement::ExecMv
    } else {
        on_warning("the agent has neither guestlink-file-rename nor guest-exec: writing in place, a failed push leaves a partial file");
        Placement::InPlace
    };
    let (dir, name) = split_guest_path(guest);
    let target = if placement == Placement::InPlace {
        guest.to_owned()
    } else {
        temp_sibling(dir, name)
    };
    debug!(%target, ?placement, "pushing");
    let result = (|| -> Result<(u64, String, Verification)> {
        let f = GuestFile::open(session, &target, "wb")?;
        let body = (|| -> Result<(u64, String)> {
            progress.start(Some(size));
            let mut hasher = Sha256::new();
            let mut total = 0u64;
            let mut sink = |d: &[u8]| {
                if progress.interrupted() {
                    return Err(Error::Interrupted);
                }
                hasher.update(d);
                total += d.len() as u64;
                progress.advance(d.len() as u64);
                Ok(())
            };
            let mut w = Writer {
                handle: f.handle,
                buf: vec![0u8; tuning.chunk],
                input: &mut input,
                host,
                pending: std::collections::VecDeque::new(),
                done: false,
                sink: &mut sink,
            };
            session.run_pipeline(tuning.in_flight, &mut w)?;
            Ok((total, hex(hasher.finalize())))
        })();
        let closed = f.close(session);
        let (total, sent) = body?;
        closed?;
        debug!(bytes = total, "written, verifying");
        progress.message("verifying");
        let (actual, how) = guest_sha256(session, &target, tuning)?;
        debug!(?how, "verified");
        if actual != sent {
            return Err(Error::ChecksumMismatch {
                path: target.clone(),
                expected: sent,
                actual,
            });
        }
        match placement {
            Placement::Rename => {
                session.call(
                    "guestlink-file-rename",
                    Some(json!({"from": target, "to": guest})),
                )?;
            }
            Placement::ExecMv => exec_ok(session, "mv", &["-f", "--", &target, guest])?,
            Placement::InPlace | Placement::HostRename => {}
        }
        Ok((total, sent, how))
    })();
    progress.finish();
    let (bytes, sha256, verified) = match result {
        Ok(r) => r,
        Err(e) => {
            if placement != Placement::InPlace {
                let cleaned = session.supports("guest-exec").unwrap_or(false)
                    && exec_ok(session, "rm", &["-f", "--", &target]).is_ok();
                if !cleaned {
                    warn!(%target, "could not remove the partial upload in the guest");
                    on_warning(&format!("partial upload left in the guest at {target}"));
                }
            }
            return Err(e);
        }
    };
    Ok(TransferReport {
        source: host.display().to_string(),
        destination: guest.to_owned(),
        bytes,
        sha256,
        verified,
        placement,
        chunk_size: tuning.chunk,
        in_flight: tuning.in_flight,
        seconds: started.elapsed().as_secs_f64(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn temp_names_are_hidden_siblings() {
        assert!(temp_sibling("/", "a").starts_with("/.a.guestlink-"));
        assert!(temp_sibling("/tmp", "a").starts_with("/tmp/.a.guestlink-"));
        assert!(temp_sibling("/tmp", "a").ends_with(".part"));
    }
}
