//! One request, start to finish: envelope → schema lookup → policy → argument parsing → handler → reply.
//!
//! Which handler runs is decided by the command's declaration (`protocol/src/qga/schema/mod.rs`): commands declared
//! `method in core` (guest-sync, guest-sync-delimited, guest-ping, guest-info, guest-fsfreeze-*) go to [`Core`],
//! every other to the command handlers `H` (`commands::Services`). The reply's framing (no reply on success,
//! 0xFF before it) comes from the command's schema entry too.

use std::future::Future;
use std::marker::PhantomData;
use std::sync::Arc;

use guestlink_protocol::qga::schema::{Command, Outcome, Run};
use guestlink_protocol::qga::{QgaError, Request};
use serde_json::Value;

use super::core::Core;
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

/// Something that answers requests: the dispatch loop's view of a [`Dispatcher`].
pub trait Handle: Sync {
    /// Handle one top-level JSON value; `None` when nothing is to be sent (success of a no-response command).
    fn handle(&self, value: Value) -> impl Future<Output = Option<Response>> + Send;
}

/// The dispatch core: the command set `C` (the schema's [`Command`] unless a test declares its own), its core
/// handlers and its command handlers `H`.
#[derive(Debug)]
pub struct Dispatcher<H, C = Command> {
    core: Core,
    handlers: H,
    set: PhantomData<fn() -> C>,
}

impl<H, C> Dispatcher<H, C> {
    /// A dispatcher. `version` is what `guest-info` reports.
    pub fn new(handlers: H, freezer: Arc<Freezer>, policy: Policy, version: String) -> Self {
        Dispatcher {
            core: Core {
                freezer,
                policy,
                version,
            },
            handlers,
            set: PhantomData,
        }
    }
}

impl<H, C> Handle for Dispatcher<H, C>
where
    H: Outcome<Output = Output, Error = CommandError> + Sync,
    C: Run<Core, H>,
{
    async fn handle(&self, value: Value) -> Option<Response> {
        let req = match Request::from_value(value) {
            Ok(r) => r,
            Err(e) => return Some(Response::err(e.id, e.error)),
        };
        let id = req.id.clone();
        let name = req.execute.as_str();
        let Some(spec) = C::find(name) else {
            tracing::debug!(command = name, "unknown command");
            return Some(Response::err(id, QgaError::not_found(name)));
        };
        // Commands qemu-ga has no Linux implementation of (guest-get-devices) are stubs it disables at start:
        // "Command guest-get-devices has been disabled", before any argument check (qemu-ga 7.2, measured).
        if !spec.linux {
            tracing::debug!(command = name, "not implemented on Linux: disabled");
            return Some(Response::err(id, QgaError::disabled(name, None)));
        }
        if let Err(e) = self.core.policy.check(name, self.core.freezer.is_frozen()) {
            tracing::debug!(command = name, "refused: {}", e.desc);
            return Some(Response::err(id, e));
        }
        let cmd = match C::parse(name, req.arguments.as_ref()) {
            Ok(c) => c,
            Err(e) => return Some(Response::err(id, e)),
        };
        tracing::debug!(command = name, id = ?req.id, "executing");
        let result = cmd.run(&self.core, &self.handlers).await;
        match &result {
            Ok(_) => tracing::debug!(command = name, "ok"),
            Err(e) => tracing::debug!(command = name, "error: {e}"),
        }
        match result {
            Ok(_) if !spec.success_response => None,
            body => Some(Response {
                id,
                delimited: spec.delimited && body.is_ok(),
                body: body.map_err(QgaError::from),
            }),
        }
    }
}
