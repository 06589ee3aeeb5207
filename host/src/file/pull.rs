//! `pull`: a guest file to the host, into a temp sibling renamed over the destination once its hash matches.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use sha2::{Digest, Sha256};

use super::{
    guest_sha256, hex, host_temp_sibling, local, split_guest_path, GuestFile, Placement, Progress,
    TransferReport, Tuning, Verification,
};
use crate::error::{Error, Result};
use crate::session::Session;

/// Copy guest file `guest` to host path `host` (a directory gets the guest file's name).
pub fn pull(
    session: &mut Session,
    guest: &str,
    host: &Path,
    tuning: Tuning,
    progress: &mut dyn Progress,
) -> Result<TransferReport> {
    let started = Instant::now();
    let (_, name) = split_guest_path(guest);
    let dest: PathBuf = if host.is_dir() {
        host.join(name)
    } else {
        host.to_owned()
    };
    let tmp = host_temp_sibling(&dest);
    let mut out = File::options()
        .write(true)
        .create_new(true)
        .open(&tmp)
        .map_err(local("cannot create", &tmp))?;
    let result = (|| -> Result<(u64, String, Verification)> {
        let f = GuestFile::open(session, guest, "rb")?;
        let body = (|| -> Result<(u64, String)> {
            let size = f.size(session)?;
            progress.start(size);
            let mut hasher = Sha256::new();
            let mut total = 0u64;
            f.read_all(session, tuning, size, &mut |data| {
                out.write_all(data).map_err(local("cannot write", &tmp))?;
                hasher.update(data);
                total += data.len() as u64;
                progress.advance(data.len() as u64);
                if progress.interrupted() {
                    return Err(Error::Interrupted);
                }
                Ok(())
            })?;
            Ok((total, hex(hasher.finalize())))
        })();
        let closed = f.close(session);
        let (total, sent) = body?;
        closed?;
        out.sync_all().map_err(local("cannot write", &tmp))?;
        progress.message("verifying");
        let (actual, how) = if session.supports("guestlink-file-sha256")? {
            guest_sha256(session, guest, tuning)?
        } else {
            let mut h = Sha256::new();
            let mut f = File::open(&tmp).map_err(local("cannot read", &tmp))?;
            std::io::copy(&mut f, &mut h).map_err(local("cannot read", &tmp))?;
            (hex(h.finalize()), Verification::Reread)
        };
        if actual != sent {
            return Err(Error::ChecksumMismatch {
                path: guest.to_owned(),
                expected: actual,
                actual: sent,
            });
        }
        Ok((total, sent, how))
    })();
    progress.finish();
    drop(out);
    let (bytes, sha256, verified) = match result {
        Ok(r) => r,
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            return Err(e);
        }
    };
    if let Err(e) = std::fs::rename(&tmp, &dest) {
        let _ = std::fs::remove_file(&tmp);
        return Err(local("cannot rename into", &dest)(e));
    }
    Ok(TransferReport {
        source: guest.to_owned(),
        destination: dest.display().to_string(),
        bytes,
        sha256,
        verified,
        placement: Placement::HostRename,
        chunk_size: tuning.chunk,
        in_flight: tuning.in_flight,
        seconds: started.elapsed().as_secs_f64(),
    })
}
