//! The dispatch core's own commands: guest-sync(-delimited), guest-ping, guest-info and guest-fsfreeze-*. They are
//! declared `method in core` in the schema (`protocol/src/qga/schema/mod.rs`), so they reach [`Core`] and never
//! the command handlers.

use std::sync::Arc;

use guestlink_protocol::qga::schema::{
    CoreHandlers, GuestFsfreezeFreezeListArgs, GuestSyncArgs, Outcome, COMMANDS,
};
use serde_json::{json, Value};

use super::output::Output;
use super::policy::Policy;
use crate::commands::CommandError;
use crate::freeze::Freezer;

/// The core's state: the freezer, the command policy, and the version `guest-info` reports.
#[derive(Debug)]
pub struct Core {
    /// The freeze state machine.
    pub freezer: Arc<Freezer>,
    /// Which commands may run (block/allow lists, profile, frozen state).
    pub policy: Policy,
    /// What `guest-info` reports as `version`.
    pub version: String,
}

impl Core {
    /// `guest-info`: every command of the schema, in qemu-ga's (reversed) order. Commands qemu-ga does not
    /// implement on Linux (guest-get-devices) are listed disabled, as qemu-ga 7.2 does.
    pub fn guest_info_value(&self) -> Value {
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
}

impl Outcome for Core {
    type Output = Output;
    type Error = CommandError;
}

type Answer = Result<Output, CommandError>;

impl CoreHandlers for Core {
    async fn guest_sync_delimited(&self, args: GuestSyncArgs) -> Answer {
        Ok(json!(args.id).into())
    }

    async fn guest_sync(&self, args: GuestSyncArgs) -> Answer {
        Ok(json!(args.id).into())
    }

    async fn guest_ping(&self) -> Answer {
        Ok(json!({}).into())
    }

    async fn guest_info(&self) -> Answer {
        Ok(self.guest_info_value().into())
    }

    async fn guest_fsfreeze_status(&self) -> Answer {
        Ok(json!(self.freezer.status()).into())
    }

    async fn guest_fsfreeze_freeze(&self) -> Answer {
        Ok(json!(self.freezer.freeze(None).await?).into())
    }

    async fn guest_fsfreeze_freeze_list(&self, args: GuestFsfreezeFreezeListArgs) -> Answer {
        Ok(json!(self.freezer.freeze(args.mountpoints).await?).into())
    }

    async fn guest_fsfreeze_thaw(&self) -> Answer {
        Ok(json!(self.freezer.thaw().await?).into())
    }
}
