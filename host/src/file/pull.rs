//! `pull`: a guest file to the host, into a temp sibling ([`HostPart`]) renamed over the destination once its hash
//! matches.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::Instant;

use sha2::{Digest, Sha256};

use super::{
    guest_sha256, hex, local, split_guest_path, GuestFile, HostPart, Placement, Progress,
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
    let mut out = HostPart::create(&dest)?;
    let result = (|| -> Result<(u64, String, Verification)> {
        let f = GuestFile::open(session, guest, "rb")?;
        let body = (|| -> Result<(u64, String)> {
            let size = f.size(session)?;
            progress.start(size);
            let mut hasher = Sha256::new();
            let mut total = 0u64;
            f.read_all(session, tuning, size, &mut |data| {
                out.write(data)?;
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
        progress.message("verifying");
        let (actual, how) = if session.supports("guestlink-file-sha256")? {
            guest_sha256(session, guest, tuning)?
        } else {
            let mut h = Sha256::new();
            let tmp = out.path();
            let mut f = File::open(tmp).map_err(local("cannot read", tmp))?;
            std::io::copy(&mut f, &mut h).map_err(local("cannot read", tmp))?;
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
    // A failure drops `out`, which removes the temp file.
    let (bytes, sha256, verified) = result?;
    out.commit(&dest)?;
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
