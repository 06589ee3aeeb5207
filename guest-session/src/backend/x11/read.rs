//! Reading side: a guest application owns a selection and the host wants its data.
//!
//! XFixes reports every owner change of CLIPBOARD and PRIMARY. A new foreign owner is asked for `TARGETS`; the
//! vdagent types it can provide become a GRAB to the host (the agent's own window is ignored: loop guard). A
//! vanished owner becomes a RELEASE. Host requests are converted one at a time per selection (a few more wait in a
//! short queue); replies of type `INCR` are collected chunk by chunk. Every read has a size cap (the daemon's
//! max-clipboard, at most [`HARD_MAX_CLIPBOARD`](crate::backend::HARD_MAX_CLIPBOARD)) and an inactivity timeout
//! ([`READ_TIMEOUT`]); a failed read answers the host with an empty NONE.

use std::collections::VecDeque;
use std::fs::File;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Result;
use guestlink_protocol::vdagent::ClipboardType;
use x11rb::protocol::xfixes::{SelectionEvent, SelectionNotifyEvent as XfixesSelectionNotifyEvent};
use x11rb::protocol::xproto::{
    Atom, AtomEnum, ConnectionExt as _, PropertyNotifyEvent, SelectionNotifyEvent, Window,
};
use x11rb::NONE;

use super::atoms::latin1_to_utf8;
use super::{DesktopEvent, SELECTIONS, X11};
use crate::backend::ClipboardMemfd;

/// How long one conversion step (the reply, or the next INCR chunk) may take. Generous: the owner may be serving
/// another requestor first — GNOME's mutter copies every new text selection (its clipboard persistence), and xclip
/// sends INCR transfers one at a time, so on a slow guest a 1 MiB copy to mutter delays our reply by seconds.
pub const READ_TIMEOUT: Duration = Duration::from_secs(15);
/// Host requests queued behind a running read, per selection.
const MAX_QUEUED: usize = 8;

/// A selection owned by a guest application.
#[derive(Debug)]
struct GuestOwner {
    owner: Window,
    targets: Vec<Atom>,
    types: Vec<ClipboardType>,
    announced: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Purpose {
    Targets,
    Data(ClipboardType),
}

/// A conversion in progress.
#[derive(Debug)]
struct Reading {
    purpose: Purpose,
    target: Atom,
    deadline: Instant,
    incr: Option<IncrBuf>,
}

/// INCR data collected so far: written straight into a memfd when one can be made (the copy then overlaps the
/// owner's next chunk instead of following the whole transfer, and the daemon can take the memfd as it is),
/// else kept in memory.
#[derive(Debug)]
enum IncrBuf {
    Mem(Vec<u8>),
    File(File, usize),
}

impl IncrBuf {
    fn new() -> Self {
        match ClipboardMemfd::create_file() {
            Ok(f) => Self::File(f, 0),
            Err(_) => Self::Mem(Vec::new()),
        }
    }

    fn len(&self) -> usize {
        match self {
            Self::Mem(v) => v.len(),
            Self::File(_, n) => *n,
        }
    }

    fn push(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        match self {
            Self::Mem(v) => v.extend_from_slice(bytes),
            Self::File(f, n) => {
                f.write_all(bytes)?;
                *n += bytes.len();
            }
        }
        Ok(())
    }

    /// The collected bytes in memory.
    fn into_bytes(self) -> std::io::Result<Vec<u8>> {
        match self {
            Self::Mem(v) => Ok(v),
            Self::File(f, n) => {
                let mut v = vec![0u8; n];
                f.read_exact_at(&mut v, 0)?;
                Ok(v)
            }
        }
    }
}

/// Reading-side state.
#[derive(Debug, Default)]
pub struct ReadState {
    guest: [Option<GuestOwner>; 2],
    reading: [Option<Reading>; 2],
    queue: [VecDeque<ClipboardType>; 2],
}

impl ReadState {
    pub(super) fn next_deadline(&self) -> Option<Instant> {
        self.reading.iter().flatten().map(|r| r.deadline).min()
    }

    /// The agent took `sel` for the host: the guest owner is gone without a RELEASE to the host.
    pub(super) fn forget_guest(&mut self, sel: usize) {
        self.guest[sel] = None;
    }
}

impl X11 {
    fn prop(&self, sel: usize) -> Atom {
        if sel == 0 {
            self.atoms.GUESTLINK_CLIPBOARD
        } else {
            self.atoms.GUESTLINK_PRIMARY
        }
    }

    /// XFixes: the owner of a selection changed.
    pub(super) fn on_owner_change(&mut self, e: &XfixesSelectionNotifyEvent) -> Result<()> {
        let Some(sel) = self.sel_of_atom(e.selection) else {
            return Ok(());
        };
        if e.owner == self.win {
            return Ok(());
        }
        let was_announced = self.read.guest[sel].as_ref().is_some_and(|g| g.announced);
        self.abort_read(sel);
        // Window-destroy and client-close notifications mean the selection has no owner any more.
        if e.owner == NONE || e.subtype != SelectionEvent::SET_SELECTION_OWNER {
            self.read.guest[sel] = None;
            if was_announced {
                tracing::debug!(sel, "guest selection owner gone");
                self.emit(DesktopEvent::ClipboardRelease {
                    selection: SELECTIONS[sel],
                });
            }
            return Ok(());
        }
        tracing::debug!(sel, owner = e.owner, "guest application owns the selection");
        self.read.guest[sel] = Some(GuestOwner {
            owner: e.owner,
            targets: Vec::new(),
            types: Vec::new(),
            announced: was_announced,
        });
        let targets = self.atoms.TARGETS;
        self.start_read(sel, Purpose::Targets, targets)
    }

    fn start_read(&mut self, sel: usize, purpose: Purpose, target: Atom) -> Result<()> {
        let (win, atom, prop) = (self.win, self.sel_atom(sel), self.prop(sel));
        self.conn.delete_property(win, prop)?;
        self.conn
            .convert_selection(win, atom, target, prop, x11rb::CURRENT_TIME)?;
        self.read.reading[sel] = Some(Reading {
            purpose,
            target,
            deadline: Instant::now() + READ_TIMEOUT,
            incr: None,
        });
        Ok(())
    }

    /// Drops a running read and every queued host request of `sel` (each answered empty).
    fn abort_read(&mut self, sel: usize) {
        if let Some(r) = self.read.reading[sel].take() {
            if let Purpose::Data(_) = r.purpose {
                self.answer(sel, None);
            }
        }
        while self.read.queue[sel].pop_front().is_some() {
            self.answer(sel, None);
        }
    }

    fn answer(&self, sel: usize, data: Option<(ClipboardType, Vec<u8>)>) {
        let (data_type, data) = data.unwrap_or((ClipboardType::None, Vec::new()));
        self.emit(DesktopEvent::ClipboardData {
            selection: SELECTIONS[sel],
            data_type,
            data,
        });
    }

    /// Host REQUEST for a guest-owned selection.
    pub(super) fn host_request(&mut self, sel: usize, t: ClipboardType) -> Result<()> {
        let offered = self.read.guest[sel]
            .as_ref()
            .is_some_and(|g| g.types.contains(&t));
        if !offered {
            tracing::debug!(sel, ?t, "host request for a type the guest does not offer");
            self.answer(sel, None);
            return Ok(());
        }
        if self.read.reading[sel].is_some() {
            if self.read.queue[sel].len() >= MAX_QUEUED {
                self.answer(sel, None);
            } else {
                self.read.queue[sel].push_back(t);
            }
            return Ok(());
        }
        self.start_data_read(sel, t)
    }

    fn start_data_read(&mut self, sel: usize, t: ClipboardType) -> Result<()> {
        let target = self.read.guest[sel]
            .as_ref()
            .and_then(|g| self.atoms.best_target(t, &g.targets));
        match target {
            Some(target) => self.start_read(sel, Purpose::Data(t), target),
            None => {
                self.answer(sel, None);
                Ok(())
            }
        }
    }

    /// Core `SelectionNotify` on the agent's window: the owner answered a conversion.
    pub(super) fn on_selection_notify(&mut self, e: &SelectionNotifyEvent) -> Result<()> {
        let Some(sel) = self.sel_of_atom(e.selection) else {
            return Ok(());
        };
        if e.requestor != self.win {
            return Ok(());
        }
        let Some(r) = self.read.reading[sel].as_ref() else {
            return Ok(());
        };
        if r.target != e.target || r.incr.is_some() {
            return Ok(());
        }
        if e.property == NONE {
            return self.finish_read(sel, None);
        }
        let (win, prop) = (self.win, self.prop(sel));
        let head = self
            .conn
            .get_property(false, win, prop, AtomEnum::ANY, 0, 0)?
            .reply()?;
        if head.type_ == self.atoms.INCR {
            self.conn.delete_property(win, prop)?;
            if let Some(r) = self.read.reading[sel].as_mut() {
                r.incr = Some(IncrBuf::new());
                r.deadline = Instant::now() + READ_TIMEOUT;
            }
            tracing::debug!(sel, "reading with INCR");
            return Ok(());
        }
        let size = head.bytes_after as usize;
        if size > self.max_clipboard {
            tracing::warn!(
                sel,
                size,
                max = self.max_clipboard,
                "guest clipboard data too large"
            );
            self.conn.delete_property(win, prop)?;
            return self.finish_read(sel, None);
        }
        let len = u32::try_from(size.div_ceil(4)).unwrap_or(u32::MAX);
        let reply = self
            .conn
            .get_property(true, win, prop, AtomEnum::ANY, 0, len)?
            .reply()?;
        self.finish_read(sel, Some((reply.type_, reply.value)))
    }

    /// `PropertyNotify(NewValue)` on the agent's window: the next INCR chunk.
    pub(super) fn on_property_new_value(&mut self, e: &PropertyNotifyEvent) -> Result<()> {
        let sel = if e.atom == self.atoms.GUESTLINK_CLIPBOARD {
            0
        } else if e.atom == self.atoms.GUESTLINK_PRIMARY {
            1
        } else {
            return Ok(());
        };
        let incr_len = match self.read.reading[sel]
            .as_ref()
            .and_then(|r| r.incr.as_ref())
        {
            Some(buf) => buf.len(),
            None => return Ok(()),
        };
        let (win, prop) = (self.win, self.prop(sel));
        let room = self.max_clipboard.saturating_sub(incr_len);
        let len = u32::try_from(room.div_ceil(4) + 1).unwrap_or(u32::MAX);
        let reply = self
            .conn
            .get_property(true, win, prop, AtomEnum::ANY, 0, len)?
            .reply()?;
        if reply.value.len() > room || reply.bytes_after > 0 {
            tracing::warn!(sel, max = self.max_clipboard, "guest INCR data too large");
            self.conn.delete_property(win, prop)?;
            return self.finish_read(sel, None);
        }
        if reply.value.is_empty() {
            let Some(buf) = self.read.reading[sel].as_mut().and_then(|r| r.incr.take()) else {
                return self.finish_read(sel, None);
            };
            return self.finish_incr(sel, reply.type_, buf);
        }
        let mut pushed = Ok(());
        if let Some(r) = self.read.reading[sel].as_mut() {
            if let Some(buf) = r.incr.as_mut() {
                pushed = buf.push(&reply.value);
            }
            r.deadline = Instant::now() + READ_TIMEOUT;
        }
        if let Err(e) = pushed {
            tracing::warn!(sel, "cannot keep the guest's INCR data: {e}");
            self.conn.delete_property(win, prop)?;
            return self.finish_read(sel, None);
        }
        Ok(())
    }

    /// The last INCR chunk arrived: data already in a memfd goes out as it is; anything else (targets, STRING
    /// to convert) is read back into memory.
    fn finish_incr(&mut self, sel: usize, type_: Atom, buf: IncrBuf) -> Result<()> {
        let data_read = self.read.reading[sel]
            .as_ref()
            .and_then(|r| match r.purpose {
                Purpose::Data(t) if r.target != self.atoms.STRING => Some(t),
                _ => None,
            });
        match (buf, data_read) {
            (IncrBuf::File(file, len), Some(t)) if len > 0 => {
                self.read.reading[sel] = None;
                tracing::debug!(sel, ?t, len, "guest clipboard data read into a memfd");
                self.emit(DesktopEvent::ClipboardFile {
                    selection: SELECTIONS[sel],
                    data_type: t,
                    memfd: ClipboardMemfd {
                        file: Arc::new(file),
                        len,
                    },
                });
                self.read_next(sel)
            }
            (buf, _) => match buf.into_bytes() {
                Ok(bytes) => self.finish_read(sel, Some((type_, bytes))),
                Err(e) => {
                    tracing::warn!(sel, "cannot read back the guest's INCR data: {e}");
                    self.finish_read(sel, None)
                }
            },
        }
    }

    fn finish_read(&mut self, sel: usize, result: Option<(Atom, Vec<u8>)>) -> Result<()> {
        let Some(r) = self.read.reading[sel].take() else {
            return Ok(());
        };
        match r.purpose {
            Purpose::Targets => self.got_targets(sel, result),
            Purpose::Data(t) => {
                let data = result.map(|(_, bytes)| {
                    if r.target == self.atoms.STRING {
                        latin1_to_utf8(&bytes)
                    } else {
                        bytes
                    }
                });
                match data {
                    Some(d) if !d.is_empty() => {
                        tracing::debug!(sel, ?t, len = d.len(), "guest clipboard data read");
                        self.answer(sel, Some((t, d)));
                    }
                    _ => self.answer(sel, None),
                }
            }
        }
        self.read_next(sel)
    }

    /// Starts the next queued host request of `sel`, if any.
    fn read_next(&mut self, sel: usize) -> Result<()> {
        if let Some(next) = self.read.queue[sel].pop_front() {
            self.start_data_read(sel, next)?;
        }
        Ok(())
    }

    fn got_targets(&mut self, sel: usize, result: Option<(Atom, Vec<u8>)>) {
        let targets: Vec<Atom> = match result {
            Some((_, bytes)) => bytes
                .chunks_exact(4)
                .map(|c| u32::from_ne_bytes([c[0], c[1], c[2], c[3]]))
                .collect(),
            None => Vec::new(),
        };
        let types = self.atoms.types_of(&targets);
        let Some(g) = self.read.guest[sel].as_mut() else {
            return;
        };
        g.targets = targets;
        g.types = types.clone();
        if types.is_empty() {
            tracing::debug!(
                sel,
                owner = g.owner,
                "guest selection offers no supported type"
            );
            if std::mem::take(&mut g.announced) {
                self.emit(DesktopEvent::ClipboardRelease {
                    selection: SELECTIONS[sel],
                });
            }
            return;
        }
        g.announced = true;
        tracing::debug!(sel, ?types, "guest grab");
        self.emit(DesktopEvent::ClipboardGrab {
            selection: SELECTIONS[sel],
            types,
        });
    }

    /// After a reconnect: announce guest-owned selections again.
    pub(super) fn reannounce(&mut self) {
        for (g, selection) in self.read.guest.iter().zip(SELECTIONS) {
            if let Some(g) = g.as_ref().filter(|g| !g.types.is_empty()) {
                self.emit(DesktopEvent::ClipboardGrab {
                    selection,
                    types: g.types.clone(),
                });
            }
        }
    }

    pub(super) fn expire_read(&mut self, now: Instant) -> Result<()> {
        for sel in 0..2 {
            let late = self.read.reading[sel]
                .as_ref()
                .is_some_and(|r| r.deadline <= now);
            if late {
                tracing::warn!(sel, "guest selection owner did not answer in time");
                let prop = self.prop(sel);
                self.conn.delete_property(self.win, prop)?;
                self.finish_read(sel, None)?;
            }
        }
        Ok(())
    }
}
