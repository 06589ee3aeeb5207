//! The queue from the core to one session agent's writer task, bounded twice: in frames ([`AGENT_QUEUE`]) and in
//! bytes ([`QUEUE_BYTES`]). Every frame counts with all the memory it holds, metadata included
//! ([`SessionMessage::held_bytes`]: a CLIPBOARD_GRAB's types, a MONITORS_CONFIG's monitors, not only clipboard or
//! file data), and holds that share of the budget until the writer has written it, so a host that sends huge
//! messages (FILE_XFER_DATA may be 64 MiB each) while the agent is slow or stopped cannot make guestlinkd hold
//! more than about that much for the agent: a frame that does not fit waits in the core's backlog (the active
//! agent: the core stops reading the port meanwhile) or gets the agent dropped (see the module doc of [`super`]).
//! The queue also carries the core's order to end the connection ([`AgentTx::kill`]).

use std::sync::Arc;

use guestlink_protocol::session::SessionMessage;
use tokio::sync::mpsc::error::TrySendError;
use tokio::sync::{mpsc, Notify, OwnedSemaphorePermit, Semaphore, TryAcquireError};

/// Most frames queued for one agent.
pub const AGENT_QUEUE: usize = 256;
/// Most bytes queued for one agent (or being written to it), counted by [`SessionMessage::held_bytes`]. A larger
/// frame takes the whole budget, so it is queued alone.
pub const QUEUE_BYTES: usize = 16 * 1024 * 1024;

/// A frame on its way to the writer, with its share of the byte budget (released when it is dropped).
#[derive(Debug)]
pub struct Queued {
    /// The frame.
    pub msg: SessionMessage,
    _bytes: Option<OwnedSemaphorePermit>,
}

/// The core's end of an agent's queue.
#[derive(Debug, Clone)]
pub struct AgentTx {
    tx: mpsc::Sender<Queued>,
    bytes: Arc<Semaphore>,
    kill: Arc<Notify>,
}

/// The connection's end of [`AgentTx::kill`].
#[derive(Debug, Clone)]
pub struct KillSwitch(Arc<Notify>);

impl KillSwitch {
    /// Resolves once the core ordered the connection closed (also if that happened before this call).
    pub async fn killed(&self) {
        self.0.notified().await;
    }
}

/// The writer's end.
pub type AgentRx = mpsc::Receiver<Queued>;

/// Room for one frame, reserved by [`AgentTx::room`].
#[derive(Debug)]
pub struct Room {
    slot: mpsc::OwnedPermit<Queued>,
    bytes: Option<OwnedSemaphorePermit>,
}

/// A new queue, and the switch its connection watches.
pub fn channel() -> (AgentTx, AgentRx, KillSwitch) {
    let (tx, rx) = mpsc::channel(AGENT_QUEUE);
    let bytes = Arc::new(Semaphore::new(QUEUE_BYTES));
    let kill = Arc::new(Notify::new());
    (
        AgentTx {
            tx,
            bytes,
            kill: Arc::clone(&kill),
        },
        rx,
        KillSwitch(kill),
    )
}

/// The budget a frame holding `held` bytes takes.
fn share(held: usize) -> u32 {
    // QUEUE_BYTES fits in u32.
    held.min(QUEUE_BYTES) as u32
}

/// The budget share of `msg` (see [`SessionMessage::held_bytes`]).
pub fn share_of(msg: &SessionMessage) -> usize {
    share(msg.held_bytes()) as usize
}

impl AgentTx {
    /// Bytes of the budget in use (queued or being written).
    pub fn queued_bytes(&self) -> usize {
        QUEUE_BYTES.saturating_sub(self.bytes.available_permits())
    }

    /// Orders the connection closed: its reader stops, the socket is shut down and the writer task aborted, so
    /// the queued frames are freed and the connection no longer counts against the limit.
    pub fn kill(&self) {
        self.kill.notify_one();
    }

    /// Queues `msg` if there is room for it now, in frames and in bytes (`Full` otherwise).
    pub fn try_send(&self, msg: SessionMessage) -> Result<(), TrySendError<SessionMessage>> {
        let bytes = match share(msg.held_bytes()) {
            0 => None,
            n => match Arc::clone(&self.bytes).try_acquire_many_owned(n) {
                Ok(p) => Some(p),
                Err(TryAcquireError::NoPermits) => return Err(TrySendError::Full(msg)),
                Err(TryAcquireError::Closed) => return Err(TrySendError::Closed(msg)),
            },
        };
        self.tx
            .try_send(Queued { msg, _bytes: bytes })
            .map_err(|e| match e {
                TrySendError::Full(q) => TrySendError::Full(q.msg),
                TrySendError::Closed(q) => TrySendError::Closed(q.msg),
            })
    }

    /// Waits for room for a frame holding `held` bytes ([`share_of`]; cancel-safe: dropping the wait reserves
    /// nothing); `Err` when the writer is gone.
    pub async fn room(&self, held: usize) -> Result<Room, ()> {
        let bytes = match share(held) {
            0 => None,
            n => Some(
                Arc::clone(&self.bytes)
                    .acquire_many_owned(n)
                    .await
                    .map_err(|_| ())?,
            ),
        };
        let slot = self.tx.clone().reserve_owned().await.map_err(|_| ())?;
        Ok(Room { slot, bytes })
    }
}

impl Room {
    /// Queues `msg`, the frame the room was reserved for.
    pub fn send(self, msg: SessionMessage) {
        self.slot.send(Queued {
            msg,
            _bytes: self.bytes,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use guestlink_protocol::vdagent::{ClipboardType, Selection};

    /// Size of a message without heap data.
    const S: usize = std::mem::size_of::<SessionMessage>();

    fn data(len: usize) -> SessionMessage {
        SessionMessage::FileXferData {
            id: 1,
            data: vec![7; len],
        }
    }

    #[tokio::test]
    async fn frames_wait_for_the_byte_budget_until_the_writer_took_them() {
        let (tx, mut rx, _kill) = channel();
        let quarter = QUEUE_BYTES / 4;
        for _ in 0..4 {
            tx.try_send(data(quarter - S)).unwrap();
        }
        assert_eq!(tx.queued_bytes(), QUEUE_BYTES);
        // The budget is used up: data waits, and so does a frame without data (it holds memory too).
        assert!(matches!(tx.try_send(data(1)), Err(TrySendError::Full(_))));
        assert!(matches!(
            tx.try_send(SessionMessage::ClientConnected),
            Err(TrySendError::Full(_))
        ));
        let first = rx.recv().await.unwrap();
        assert!(
            matches!(tx.try_send(data(1)), Err(TrySendError::Full(_))),
            "held until written"
        );
        drop(first);
        tx.try_send(data(quarter - S)).unwrap();
        // A frame larger than the budget takes all of it, so it waits until everything else was written.
        let wait = tokio::spawn({
            let tx = tx.clone();
            async move {
                let big = data(QUEUE_BYTES * 3);
                let room = tx.room(share_of(&big)).await.unwrap();
                room.send(big);
            }
        });
        for _ in 0..4 {
            drop(rx.recv().await.unwrap());
        }
        // Only the big frame remains, and it holds the whole budget.
        let big = rx.recv().await.unwrap();
        assert_eq!(big.msg.data().len(), QUEUE_BYTES * 3);
        wait.await.unwrap();
        assert!(matches!(tx.try_send(data(1)), Err(TrySendError::Full(_))));
        drop(big);
        tx.try_send(data(1)).unwrap();
    }

    /// Issue 16 finding 5: a CLIPBOARD_GRAB with a huge type list holds megabytes without any data bytes; it
    /// must use the budget like data does (it used to count 0, so 256 of them fit).
    #[test]
    fn metadata_counts_against_the_byte_budget() {
        let (tx, _rx, _kill) = channel();
        let grab = SessionMessage::ClipboardGrab {
            selection: Selection::Clipboard,
            types: vec![ClipboardType::Utf8Text; QUEUE_BYTES / 16],
        };
        let held = grab.held_bytes();
        assert!(held >= QUEUE_BYTES / 2, "{held}");
        tx.try_send(grab.clone()).unwrap();
        assert!(tx.queued_bytes() >= held);
        assert!(
            matches!(tx.try_send(grab), Err(TrySendError::Full(_))),
            "a second grab of half the budget must not fit"
        );
    }

    #[tokio::test]
    async fn a_dropped_wait_reserves_nothing_and_a_gone_writer_is_reported() {
        let (tx, rx, _kill) = channel();
        tx.try_send(data(QUEUE_BYTES)).unwrap();
        let waited = tokio::time::timeout(std::time::Duration::from_millis(50), tx.room(10)).await;
        assert!(waited.is_err(), "no room while the budget is used");
        drop(rx);
        assert!(tx.room(0).await.is_err());
        assert!(matches!(
            tx.try_send(SessionMessage::ClientConnected),
            Err(TrySendError::Closed(_))
        ));
    }

    #[tokio::test]
    async fn kill_reaches_the_connection_even_before_it_waits() {
        let (tx, _rx, kill) = channel();
        tx.kill();
        tokio::time::timeout(std::time::Duration::from_secs(5), kill.killed())
            .await
            .expect("the kill order is kept until the connection looks");
    }
}
