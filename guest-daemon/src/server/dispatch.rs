//! One request, start to finish: envelope → schema lookup → policy → argument parsing → handler → reply.
//!
//! guest-sync, guest-sync-delimited, guest-ping, guest-info and guest-fsfreeze-* are answered here; everything
//! else goes to the command handlers ([`Backend`], i.e. `commands::Services`).

use std::future::Future;
use std::sync::Arc;

use guestlink_protocol::qga::schema::{find_command, Command, COMMANDS};
use guestlink_protocol::qga::{QgaError, Reply, Request};
use serde_json::{json, Value};

use super::policy::Policy;
use crate::freeze::Freezer;

/// A reply written in pieces so a large body (guest-file-read's base64) is never held as one JSON string.
pub trait StreamedReply: Send + Sync + std::fmt::Debug {
    /// The reply line split around the large member: `(prefix, suffix)`, framing (0xFF, `id`, member order)
    /// exactly as `encode_reply` would produce it.
    fn reply_parts(&self, id: Option<Value>, delimited: bool) -> (Vec<u8>, Vec<u8>);
    /// The large member's text, in order, already JSON-safe (base64).
    fn chunks(&self) -> Box<dyn Iterator<Item = String> + '_>;
}

/// What a handler returns.
#[derive(Debug)]
pub enum Output {
    /// Any return value.
    Value(Value),
    /// A reply to be written in pieces (guest-file-read).
    Streamed(Box<dyn StreamedReply>),
}

/// What the core sends for one request.
#[derive(Debug)]
pub enum Response {
    /// An ordinary reply.
    Reply(Reply),
    /// A reply written in pieces.
    Streamed {
        /// The request id.
        id: Option<Value>,
        /// The body.
        body: Box<dyn StreamedReply>,
    },
}

/// The command handlers behind the core.
pub trait Backend: Send + Sync {
    /// Run one parsed command.
    fn execute(&self, cmd: Command) -> impl Future<Output = Result<Output, QgaError>> + Send;
}

/// The dispatch core.
#[derive(Debug)]
pub struct Dispatcher<B> {
    backend: B,
    freezer: Arc<Freezer>,
    policy: Policy,
    version: String,
}

impl<B: Backend> Dispatcher<B> {
    /// A dispatcher. `version` is what `guest-info` reports.
    pub fn new(backend: B, freezer: Arc<Freezer>, policy: Policy, version: String) -> Self {
        Dispatcher {
            backend,
            freezer,
            policy,
            version,
        }
    }

    /// `guest-info`: every command of the schema, in qemu-ga's (reversed) order. Commands qemu-ga does not
    /// implement on Linux (guest-get-devices) are listed disabled, as qemu-ga 7.2 does.
    pub fn guest_info(&self) -> Value {
        let frozen = self.freezer.is_frozen();
        let cmds: Vec<Value> = COMMANDS
            .iter()
            .rev()
            .map(|c| {
                json!({
                    "enabled": c.linux && self.policy.is_enabled(c.name, frozen),
                    "name": c.name,
                    "success-response": c.success_response,
                })
            })
            .collect();
        json!({ "version": self.version, "supported_commands": cmds })
    }

    /// Handle one top-level JSON value; `None` when nothing is to be sent (success of a no-response command).
    pub async fn handle(&self, value: Value) -> Option<Response> {
        let req = match Request::from_value(value) {
            Ok(r) => r,
            Err(e) => return Some(Response::Reply(Reply::err(e.id, e.error))),
        };
        let id = req.id.clone();
        let name = req.execute.as_str();
        let Some(spec) = find_command(name) else {
            tracing::debug!(command = name, "unknown command");
            return Some(Response::Reply(Reply::err(id, QgaError::not_found(name))));
        };
        // Commands qemu-ga has no Linux implementation of (guest-get-devices) are stubs it disables at start:
        // "Command guest-get-devices has been disabled", before any argument check (qemu-ga 7.2, measured).
        if !spec.linux {
            tracing::debug!(command = name, "not implemented on Linux: disabled");
            return Some(Response::Reply(Reply::err(
                id,
                QgaError::disabled(name, None),
            )));
        }
        if let Err(e) = self.policy.check(name, self.freezer.is_frozen()) {
            tracing::debug!(command = name, "refused: {}", e.desc);
            return Some(Response::Reply(Reply::err(id, e)));
        }
        let cmd = match req.command() {
            Ok(c) => c,
            Err(e) => return Some(Response::Reply(Reply::err(id, e))),
        };
        tracing::debug!(command = name, id = ?req.id, "executing");
        let success_response = cmd.success_response();
        let mut delimited = false;
        let result = match cmd {
            Command::GuestSync(a) => Ok(json!(a.id)),
            Command::GuestSyncDelimited(a) => {
                delimited = true;
                Ok(json!(a.id))
            }
            Command::GuestPing => Ok(json!({})),
            Command::GuestInfo => Ok(self.guest_info()),
            Command::GuestFsfreezeStatus => Ok(json!(self.freezer.status())),
            Command::GuestFsfreezeFreeze => self.freeze(None).await,
            Command::GuestFsfreezeFreezeList(a) => self.freeze(a.mountpoints).await,
            Command::GuestFsfreezeThaw => self
                .freezer
                .thaw()
                .await
                .map(|n| json!(n))
                .map_err(|e| QgaError::generic(e.to_string())),
            other => match self.backend.execute(other).await {
                Ok(Output::Value(v)) => Ok(v),
                Ok(Output::Streamed(body)) => {
                    tracing::debug!(command = name, "ok");
                    return Some(Response::Streamed { id, body });
                }
                Err(e) => Err(e),
            },
        };
        match &result {
            Ok(_) => tracing::debug!(command = name, "ok"),
            Err(e) => tracing::debug!(command = name, "error: {}", e.desc),
        }
        match result {
            Ok(_) if !success_response => None,
            Ok(v) => Some(Response::Reply(Reply {
                id,
                body: Ok(v),
                delimited,
            })),
            Err(e) => Some(Response::Reply(Reply::err(id, e))),
        }
    }

    async fn freeze(&self, only: Option<Vec<String>>) -> Result<Value, QgaError> {
        self.freezer
            .freeze(only)
            .await
            .map(|n| json!(n))
            .map_err(|e| QgaError::generic(e.to_string()))
    }
}
