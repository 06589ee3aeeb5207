//! The clipboard while the active session is locked or is a login screen (docs/spice.md#locked-sessions-and-the-login-screen):
//! no guest data leaves the guest and no grab crosses either way; the newest withheld grab of each selection is
//! offered when the same agent's session unlocks, so the lock screen is not a clipboard bypass and unlocking needs
//! no reconnect.

use guestlink_protocol::session::SessionMessage;
use guestlink_protocol::vdagent::{Capability, ClipboardType, Message, Port, Selection};

use super::{Action, Router};

/// A clipboard grab that arrived while the clipboard was blocked, kept until it is offered or superseded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Withheld {
    /// The host grabbed the selection: offered to the agent on unlock.
    Host(Vec<ClipboardType>),
    /// The guest grabbed it: announced to the client on unlock.
    Guest(Vec<ClipboardType>),
}

impl Router {
    /// No clipboard crosses: the active session is locked, or is a greeter (login screen).
    pub(super) fn clipboard_blocked(&self) -> bool {
        self.session_locked || !self.user_class
    }

    /// Keeps `grab` as the newest grab of `selection` while the clipboard is blocked (it replaces an older one,
    /// from either side: the newest owner is the current one).
    pub(super) fn withhold(&mut self, selection: Selection, grab: Withheld) {
        tracing::debug!(
            ?selection,
            "clipboard blocked (locked or login screen): grab withheld"
        );
        self.withheld.insert(selection.as_u8(), grab);
    }

    /// `selection`'s withheld grab by the host (`host`) or the guest is gone: its owner released it.
    pub(super) fn forget_withheld(&mut self, selection: Selection, host: bool) {
        let sel = selection.as_u8();
        if matches!(
            (self.withheld.get(&sel), host),
            (Some(Withheld::Host(_)), true) | (Some(Withheld::Guest(_)), false)
        ) {
            self.withheld.remove(&sel);
        }
    }

    /// Announces a guest grab of `selection` to the client (with the next serial where negotiated).
    pub(super) fn forward_guest_grab(
        &mut self,
        out: &mut Vec<Action>,
        selection: Selection,
        types: Vec<ClipboardType>,
    ) {
        if self.client_has(Capability::ClipboardByDemand) {
            let serial = self
                .wire
                .grab_serial
                .then(|| self.serials.next_outgoing(selection));
            self.guest_owned.insert(selection.as_u8());
            let msg = Message::ClipboardGrab {
                selection,
                serial,
                types,
            };
            self.send(out, Port::Client, &msg);
        }
    }

    /// The clipboard of the same active agent was blocked and no longer is (unlock): offers the withheld grabs.
    pub(super) fn offer_withheld(&mut self, out: &mut Vec<Action>) {
        for (sel, grab) in std::mem::take(&mut self.withheld) {
            let selection = Selection::from_u8(sel);
            match grab {
                Withheld::Host(types) => {
                    self.to_active(out, SessionMessage::ClipboardGrab { selection, types });
                }
                Withheld::Guest(types) if self.port_open && self.selection_crosses(selection) => {
                    self.forward_guest_grab(out, selection, types);
                }
                Withheld::Guest(_) => {}
            }
        }
    }
}
