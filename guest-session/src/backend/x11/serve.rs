//! Serving side: the guest selection is held for the host, and guest applications paste host data.
//!
//! A host GRAB makes the agent's window the selection owner (with a real server timestamp). A guest paste
//! (`SelectionRequest`) is answered from the data cached for the current grab, or queued while the host is asked
//! for it (at most [`REQUEST_TIMEOUT`]; a late or missing answer refuses the paste with property `None`). Data
//! larger than the connection's request size goes out with INCR: one chunk per `PropertyNotify(Delete)` on the
//! requestor, then a zero-length property; a stalled requestor is dropped after [`INCR_TIMEOUT`].

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Result;
use guestlink_protocol::vdagent::ClipboardType;
use x11rb::protocol::xproto::{
    Atom, ChangeWindowAttributesAux, ConnectionExt as _, EventMask, PropMode, PropertyNotifyEvent,
    SelectionClearEvent, SelectionNotifyEvent, SelectionRequestEvent, Window,
    SELECTION_NOTIFY_EVENT,
};
use x11rb::wrapper::ConnectionExt as _;
use x11rb::NONE;

use super::atoms::utf8_to_latin1;
use super::{DesktopEvent, SELECTIONS, X11};

/// How long a guest paste waits for the host's data.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(15);
/// How long an INCR transfer may stall before it is dropped.
pub const INCR_TIMEOUT: Duration = Duration::from_secs(30);

/// A selection held for the host.
#[derive(Debug)]
struct Owned {
    types: Vec<ClipboardType>,
    time: u32,
    cache: HashMap<ClipboardType, Arc<Vec<u8>>>,
}

/// A guest paste waiting for host data.
#[derive(Debug)]
struct Waiting {
    sel: usize,
    data_type: ClipboardType,
    request: SelectionRequestEvent,
    property: Atom,
    deadline: Instant,
}

/// An outgoing INCR transfer.
#[derive(Debug)]
struct IncrOut {
    requestor: Window,
    property: Atom,
    type_: Atom,
    data: Arc<Vec<u8>>,
    offset: usize,
    done: bool,
    deadline: Instant,
}

/// Serving-side state.
#[derive(Debug, Default)]
pub struct ServeState {
    owned: [Option<Owned>; 2],
    waiting: Vec<Waiting>,
    /// Host requests sent and not answered yet: (selection, type, deadline).
    asked: Vec<(usize, ClipboardType, Instant)>,
    incr: Vec<IncrOut>,
}

impl ServeState {
    pub(super) fn next_deadline(&self) -> Option<Instant> {
        let w = self.waiting.iter().map(|w| w.deadline);
        let i = self.incr.iter().map(|i| i.deadline);
        w.chain(i).min()
    }
}

impl X11 {
    /// Host GRAB: own the selection for the host.
    pub(super) fn host_grab(&mut self, sel: usize, types: Vec<ClipboardType>) -> Result<()> {
        let types: Vec<ClipboardType> = types
            .into_iter()
            .filter(|t| !self.atoms.targets_for(*t).is_empty())
            .collect();
        if types.is_empty() {
            return self.host_release(sel);
        }
        let time = self.server_time()?;
        let atom = self.sel_atom(sel);
        self.conn.set_selection_owner(self.win, atom, time)?;
        let owner = self.conn.get_selection_owner(atom)?.reply()?.owner;
        if owner != self.win {
            tracing::warn!(sel, "could not take the selection for the host");
            return Ok(());
        }
        tracing::debug!(sel, ?types, "host grab");
        self.refuse_waiting(sel)?;
        self.serve.asked.retain(|a| a.0 != sel);
        self.serve.owned[sel] = Some(Owned {
            types,
            time,
            cache: HashMap::new(),
        });
        // The guest owner (if any) lost the selection to us; nothing to release towards the host.
        self.read.forget_guest(sel);
        Ok(())
    }

    /// Host RELEASE: give the selection up if it is still held for the host.
    pub(super) fn host_release(&mut self, sel: usize) -> Result<()> {
        if let Some(owned) = self.serve.owned[sel].take() {
            let atom = self.sel_atom(sel);
            if self.conn.get_selection_owner(atom)?.reply()?.owner == self.win {
                self.conn.set_selection_owner(NONE, atom, owned.time)?;
            }
            tracing::debug!(sel, "host selection released");
        }
        self.refuse_waiting(sel)?;
        self.serve.asked.retain(|a| a.0 != sel);
        Ok(())
    }

    /// Host data answering an earlier request.
    pub(super) fn host_data(&mut self, sel: usize, t: ClipboardType, data: Vec<u8>) -> Result<()> {
        let pos = self
            .serve
            .asked
            .iter()
            .position(|a| a.0 == sel && a.1 == t)
            .or_else(|| self.serve.asked.iter().position(|a| a.0 == sel));
        let Some(pos) = pos else {
            tracing::debug!(sel, ?t, "unrequested clipboard data dropped");
            return Ok(());
        };
        let (_, asked_type, _) = self.serve.asked.remove(pos);
        let ok = t == asked_type && !data.is_empty();
        let data = Arc::new(data);
        if ok {
            if let Some(owned) = self.serve.owned[sel].as_mut() {
                owned.cache.insert(t, Arc::clone(&data));
            }
        }
        let (ready, rest): (Vec<Waiting>, Vec<Waiting>) = std::mem::take(&mut self.serve.waiting)
            .into_iter()
            .partition(|w| w.sel == sel && w.data_type == asked_type);
        self.serve.waiting = rest;
        for w in ready {
            if ok {
                self.send_data(&w.request, w.property, Arc::clone(&data))?;
            } else {
                self.notify(&w.request, NONE)?;
            }
        }
        Ok(())
    }

    fn notify(&self, req: &SelectionRequestEvent, property: Atom) -> Result<()> {
        let ev = SelectionNotifyEvent {
            response_type: SELECTION_NOTIFY_EVENT,
            sequence: 0,
            time: req.time,
            requestor: req.requestor,
            selection: req.selection,
            target: req.target,
            property,
        };
        self.conn
            .send_event(false, req.requestor, EventMask::NO_EVENT, ev)?;
        Ok(())
    }

    fn refuse_waiting(&mut self, sel: usize) -> Result<()> {
        let (gone, rest): (Vec<Waiting>, Vec<Waiting>) = std::mem::take(&mut self.serve.waiting)
            .into_iter()
            .partition(|w| w.sel == sel);
        self.serve.waiting = rest;
        for w in gone {
            self.notify(&w.request, NONE)?;
        }
        Ok(())
    }

    pub(super) fn on_selection_request(&mut self, req: &SelectionRequestEvent) -> Result<()> {
        let property = if req.property == NONE {
            req.target
        } else {
            req.property
        };
        let Some(sel) = self.sel_of_atom(req.selection) else {
            return self.notify(req, NONE);
        };
        let Some(owned) = self.serve.owned[sel].as_ref() else {
            return self.notify(req, NONE);
        };
        if req.time != x11rb::CURRENT_TIME && req.time < owned.time {
            return self.notify(req, NONE);
        }
        let a = &self.atoms;
        if req.target == a.TARGETS {
            let mut list = vec![a.TARGETS, a.TIMESTAMP];
            for t in &owned.types {
                list.extend(a.targets_for(*t));
            }
            self.conn.change_property32(
                PropMode::REPLACE,
                req.requestor,
                property,
                a.ATOM,
                &list,
            )?;
            return self.notify(req, property);
        }
        if req.target == a.TIMESTAMP {
            let time = owned.time;
            self.conn.change_property32(
                PropMode::REPLACE,
                req.requestor,
                property,
                a.INTEGER,
                &[time],
            )?;
            return self.notify(req, property);
        }
        let Some(t) = a.type_of(req.target).filter(|t| owned.types.contains(t)) else {
            return self.notify(req, NONE);
        };
        if let Some(data) = owned.cache.get(&t).cloned() {
            return self.send_data(req, property, data);
        }
        let deadline = Instant::now() + REQUEST_TIMEOUT;
        self.serve.waiting.push(Waiting {
            sel,
            data_type: t,
            request: *req,
            property,
            deadline,
        });
        if !self.serve.asked.iter().any(|x| x.0 == sel && x.1 == t) {
            self.serve.asked.push((sel, t, deadline));
            self.emit(DesktopEvent::ClipboardRequest {
                selection: SELECTIONS[sel],
                data_type: t,
            });
        }
        Ok(())
    }

    /// Writes `data` for a request, directly or with INCR.
    fn send_data(
        &mut self,
        req: &SelectionRequestEvent,
        property: Atom,
        data: Arc<Vec<u8>>,
    ) -> Result<()> {
        let a = &self.atoms;
        let (type_, data) = if req.target == a.STRING {
            (a.STRING, Arc::new(utf8_to_latin1(&data)))
        } else if req.target == a.TEXT {
            (a.UTF8_STRING, data)
        } else {
            (req.target, data)
        };
        if data.len() <= self.chunk {
            self.conn
                .change_property8(PropMode::REPLACE, req.requestor, property, type_, &data)?;
            return self.notify(req, property);
        }
        let Ok(len) = u32::try_from(data.len()) else {
            return self.notify(req, NONE);
        };
        tracing::debug!(len, requestor = req.requestor, "serving with INCR");
        self.conn.change_window_attributes(
            req.requestor,
            &ChangeWindowAttributesAux::new().event_mask(EventMask::PROPERTY_CHANGE),
        )?;
        self.conn.change_property32(
            PropMode::REPLACE,
            req.requestor,
            property,
            self.atoms.INCR,
            &[len],
        )?;
        self.serve
            .incr
            .retain(|i| !(i.requestor == req.requestor && i.property == property));
        self.serve.incr.push(IncrOut {
            requestor: req.requestor,
            property,
            type_,
            data,
            offset: 0,
            done: false,
            deadline: Instant::now() + INCR_TIMEOUT,
        });
        self.notify(req, property)
    }

    /// `PropertyNotify(Delete)`: an INCR requestor consumed a chunk.
    pub(super) fn on_property_delete(&mut self, e: &PropertyNotifyEvent) -> Result<()> {
        let Some(pos) = self
            .serve
            .incr
            .iter()
            .position(|i| i.requestor == e.window && i.property == e.atom)
        else {
            return Ok(());
        };
        let chunk = self.chunk;
        let x = &mut self.serve.incr[pos];
        if x.done {
            self.serve.incr.remove(pos);
            return Ok(());
        }
        let end = (x.offset + chunk).min(x.data.len());
        let piece = &x.data[x.offset..end];
        self.conn
            .change_property8(PropMode::REPLACE, x.requestor, x.property, x.type_, piece)?;
        x.done = piece.is_empty();
        x.offset = end;
        x.deadline = Instant::now() + INCR_TIMEOUT;
        if x.done {
            tracing::debug!(requestor = x.requestor, "INCR transfer complete");
            self.serve.incr.remove(pos);
        }
        Ok(())
    }

    pub(super) fn on_selection_clear(&mut self, e: &SelectionClearEvent) {
        if let Some(sel) = self.sel_of_atom(e.selection) {
            if e.owner == self.win && self.serve.owned[sel].take().is_some() {
                tracing::debug!(sel, "host selection taken over by a guest application");
                self.serve.asked.retain(|a| a.0 != sel);
                let _ = self.refuse_waiting(sel);
            }
        }
    }

    pub(super) fn expire_serve(&mut self, now: Instant) -> Result<()> {
        let (late, rest): (Vec<Waiting>, Vec<Waiting>) = std::mem::take(&mut self.serve.waiting)
            .into_iter()
            .partition(|w| w.deadline <= now);
        self.serve.waiting = rest;
        for w in late {
            tracing::warn!(sel = w.sel, ty = ?w.data_type, "host did not answer a clipboard request in time");
            self.notify(&w.request, NONE)?;
        }
        self.serve.asked.retain(|a| a.2 > now);
        self.serve.incr.retain(|i| {
            let keep = i.deadline > now;
            if !keep {
                tracing::warn!(
                    requestor = i.requestor,
                    "INCR requestor stalled; transfer dropped"
                );
            }
            keep
        });
        Ok(())
    }
}
