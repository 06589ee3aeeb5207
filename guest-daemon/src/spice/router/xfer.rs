//! File transfers on the router: a client START creates a transfer bound to the active agent (checked name,
//! capped count, refused while the session is locked or file transfer is disabled for it), statuses go back in
//! the client's detail format, and transfers end with the client, the agent or a decode failure.

use guestlink_protocol::session::SessionMessage;
use guestlink_protocol::vdagent::file_xfer::{
    ERROR_TYPE_GLIB_IO, G_IO_ERROR_INVALID_FILENAME, G_IO_ERROR_TOO_MANY_OPEN_FILES,
};
use guestlink_protocol::vdagent::{
    validate_file_name, Capability, FileXferDetail, FileXferResult, FileXferStatus, Message,
    MessageType, Port, RawMessage,
};

use super::{Action, Router, MAX_TRANSFERS};
use crate::spice::log_limit::{log_limited, truncated};

impl Router {
    pub(super) fn status(
        &self,
        out: &mut Vec<Action>,
        id: u32,
        result: FileXferResult,
        detail: FileXferDetail,
    ) {
        let detailed = self
            .client
            .as_ref()
            .is_some_and(|c| c.has(Capability::FileXferDetailedErrors));
        let st = if detailed {
            FileXferStatus { id, result, detail }
        } else {
            FileXferStatus {
                id,
                result: result.downgrade(),
                detail: FileXferDetail::None,
            }
        };
        self.send(out, Port::Client, &Message::FileXferStatus(st));
    }

    /// Cancels every transfer (client gone or new client): the owning agents drop their partial files.
    pub(super) fn drop_transfers(&mut self, out: &mut Vec<Action>) {
        for (id, agent) in std::mem::take(&mut self.xfers) {
            if self.agents.contains_key(&agent) {
                out.push(Action::Agent(agent, SessionMessage::FileXferCancel { id }));
            }
        }
    }

    pub(super) fn xfer_start(
        &mut self,
        out: &mut Vec<Action>,
        start: guestlink_protocol::vdagent::FileXferStart,
    ) {
        let id = start.id;
        if self.xfers.contains_key(&id) {
            // Duplicate id: refused, the running transfer is left alone.
            let detail = FileXferDetail::None;
            self.status(out, id, FileXferResult::Error, detail);
            return;
        }
        if self.xfers.len() >= MAX_TRANSFERS {
            let detail = FileXferDetail::Error {
                error_type: ERROR_TYPE_GLIB_IO,
                error_code: G_IO_ERROR_TOO_MANY_OPEN_FILES,
            };
            self.status(out, id, FileXferResult::Error, detail);
            return;
        }
        let Some(agent) = self.active_agent() else {
            self.status(
                out,
                id,
                FileXferResult::VdagentNotConnected,
                FileXferDetail::None,
            );
            return;
        };
        if self.session_locked {
            self.status(out, id, FileXferResult::SessionLocked, FileXferDetail::None);
            return;
        }
        if !self.user_class {
            self.status(out, id, FileXferResult::Disabled, FileXferDetail::None);
            return;
        }
        if let Err(e) = validate_file_name(&start.name) {
            log_limited!(warn, name = ?truncated(&start.name), "file transfer refused: {e}");
            let detail = FileXferDetail::Error {
                error_type: ERROR_TYPE_GLIB_IO,
                error_code: G_IO_ERROR_INVALID_FILENAME,
            };
            self.status(out, id, FileXferResult::Error, detail);
            return;
        }
        self.xfers.insert(id, agent);
        out.push(Action::Agent(
            agent,
            SessionMessage::FileXferStart {
                id,
                name: start.name,
                size: start.size,
            },
        ));
    }

    /// A message that failed to decode: a START or DATA with a readable id still gets its transfer failed.
    pub(super) fn invalid_message(&mut self, out: &mut Vec<Action>, raw: &RawMessage) {
        let id = raw
            .payload
            .first_chunk::<4>()
            .map(|b| u32::from_le_bytes(*b));
        let (Some(id), Some(t)) = (id, MessageType::from_u32(raw.header.msg_type)) else {
            return;
        };
        match t {
            MessageType::FileXferStart if !self.xfers.contains_key(&id) => {
                self.status(out, id, FileXferResult::Error, FileXferDetail::None);
            }
            MessageType::FileXferData => {
                if let Some(agent) = self.xfers.remove(&id) {
                    out.push(Action::Agent(agent, SessionMessage::FileXferCancel { id }));
                    self.status(out, id, FileXferResult::Error, FileXferDetail::None);
                }
            }
            _ => {}
        }
    }
}
