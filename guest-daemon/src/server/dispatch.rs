//! One request, start to finish: envelope → schema lookup → policy → argument parsing → handler → reply.
//!
//! guest-sync, guest-sync-delimited, guest-ping, guest-info and guest-fsfreeze-* are answered here; everything
//! else goes to the command handlers ([`Backend`], i.e. `commands::Services`).

use std::future::Future;
use std::sync::Arc;

use guestlink_protocol::qga::schema::{find_command, Command, COMMANDS};
use guestlink_protocol::qga::{QgaError, Request};
use serde_json::{json, Value};

use super::output::Output;
use super::policy::Policy;
use crate::commands::CommandError;
use crate::freeze::Freezer;

/// What the core sends for one request: the reply's id, its body, and whether it is framed with 0xFF
/// (guest-sync-delimited).
#[derive(Debug)]
pub struct Response {
    /// The request id.
    pub id: Option<Value>,
    /// The return value, or the wire error.
    pub body: Result<Output, QgaError>,
    /// Whether the reply starts with 0xFF.
    pub delimited: bool,
}

impl Response {
    fn err(id: Option<Value>, e: QgaError) -> Self {
        Response {
            id,
            body: Err(e),
            delimited: false,
        }
    }
}

/// The command handlers behind the core.
pub trait Backend: Send + Sync {
    /// Run one parsed command.
    fn execute(&self, cmd: Command) -> impl Future<Output = Result<Output, CommandError>> + Send;
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
            Err(e) => return Some(Response::err(e.id, e.error)),
        };
        let id = req.id.clone();
        let name = req.execute.as_str();
        let Some(spec) = find_command(name) else {
            tracing::debug!(command = name, "unknown command");
            return Some(Response::err(id, QgaError::not_found(name)));
        };
        // Commands qemu-ga has no Linux implementation of (guest-get-devices) are stubs it disables at start:
        // "Command guest-get-devices has been disabled", before any argument check (qemu-ga 7.2, measured).
        if !spec.linux {
            tracing::debug!(command = name, "not implemented on Linux: disabled");
            return Some(Response::err(id, QgaError::disabled(name, None),
            ));
        }
        if let Err(e) = self.policy.check(name, self.freezer.is_frozen()) {
            tracing::debug!(command = name, "refused: {}", e.desc);
            return Some(Response::err(id, e));
        }
        let cmd = match req.command() {
            Ok(c) => c,
            Err(e) => return Some(Response::err(id, e)),
        };
        tracing::debug!(command = name, id = ?req.id, "executing");
        let success_response = cmd.success_response();
        let delimited = matches!(cmd, Command::GuestSyncDelimited(_));
        let result: Result<Output, CommandError> = match cmd {
            Command::GuestSync(a) | Command::GuestSyncDelimited(a) => Ok(json!(a.id).into()),
            Command::GuestPing => Ok(json!({}).into()),
            Command::GuestInfo => Ok(self.guest_info().into()),
            Command::GuestFsfreezeStatus => Ok(json!(self.freezer.status()).into()),
            Command::GuestFsfreezeFreeze => self.freeze(None).await,
            Command::GuestFsfreezeFreezeList(a) => self.freeze(a.mountpoints).await,
            Command::GuestFsfreezeThaw => self.thaw().await,
            other => self.backend.execute(other).await,
        };
        match &result {
            Ok(_) => tracing::debug!(command = name, "ok"),
            Err(e) => tracing::debug!(command = name, "error: {e}"),
        }
        match result {
            Ok(_) if !success_response => None,
            body => Some(Response {
                id,
                delimited: delimited && body.is_ok(),
                body: body.map_err(QgaError::from),
            }),
        }
    }

    async fn thaw(&self) -> Result<Output, CommandError> {
        Ok(json!(self.freezer.thaw().await?).into())
    }

    async fn freeze(&self, only: Option<Vec<String>>) -> Result<Output, CommandError> {
        Ok(json!(self.freezer.freeze(only).await?).into())
    }
}
