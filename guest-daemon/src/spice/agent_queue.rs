//! The queue from the core to one session agent's writer task, bounded twice: in frames ([`AGENT_QUEUE`]) and in
//! data bytes ([`QUEUE_BYTES`]). A frame holds its share of the byte budget until the writer has written it, so
//! a host that sends huge messages (FILE_XFER_DATA may be 64 MiB each) while the agent is slow or stopped cannot
//! make guestlinkd hold more than about that much for the agent: a frame that does not fit waits in the core's
//! backlog, and the core stops reading the port meanwhile (see the module doc of [`super`]).

use std::sync::Arc;

use guestlink_protocol::session::SessionMessage;
use tokio::sync::mpsc::error::TrySendError;
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore, TryAcquireError};

/// Most frames queued for one agent.
pub const AGENT_QUEUE: usize = 256;
/// Most data bytes queued for one agent (or being written to it). A larger frame takes the whole budget, so it
/// is queued alone.
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
}

/// The writer's end.
pub type AgentRx = mpsc::Receiver<Queued>;

/// Room for one frame, reserved by [`AgentTx::room`].
#[derive(Debug)]
pub struct Room {
    slot: mpsc::OwnedPermit<Queued>,
    bytes: Option<OwnedSemaphorePermit>,
}

/// A new queue.
pub fn channel() -> (AgentTx, AgentRx) {
    let (tx, rx) = mpsc::channel(AGENT_QUEUE);
    let bytes = Arc::new(Semaphore::new(QUEUE_BYTES));
    (AgentTx { tx, bytes }, rx)
}

/// The budget a frame with `data_len` data bytes holds.
fn share(data_len: usize) -> u32 {
    // QUEUE_BYTES fits in u32.
    data_len.min(QUEUE_BYTES) as u32
}

impl AgentTx {
    /// Queues `msg` if there is room for it now, in frames and in bytes (`Full` otherwise).
    pub fn try_send(&self, msg: SessionMessage) -> Result<(), TrySendError<SessionMessage>> {
        let bytes = match share(msg.data().len()) {
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

    /// Waits for room for a frame of `data_len` data bytes (cancel-safe: dropping the wait reserves nothing);
    /// `Err` when the writer is gone.
    pub async fn room(&self, data_len: usize) -> Result<Room, ()> {
        let bytes = match share(data_len) {
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

    fn data(len: usize) -> SessionMessage {
        SessionMessage::FileXferData {
            id: 1,
            data: vec![7; len],
        }
    }

    #[tokio::test]
    async fn frames_wait_for_the_byte_budget_until_the_writer_took_them() {
        let (tx, mut rx) = channel();
        let quarter = QUEUE_BYTES / 4;
        for _ in 0..4 {
            tx.try_send(data(quarter)).unwrap();
        }
        // The budget is used up: data waits, a frame without data still goes.
        assert!(matches!(tx.try_send(data(1)), Err(TrySendError::Full(_))));
        tx.try_send(SessionMessage::ClientConnected).unwrap();
        let first = rx.recv().await.unwrap();
        assert!(
            matches!(tx.try_send(data(1)), Err(TrySendError::Full(_))),
            "held until written"
        );
        drop(first);
        tx.try_send(data(quarter)).unwrap();
        // A frame larger than the budget takes all of it, so it waits until everything else was written.
        let wait = tokio::spawn({
            let tx = tx.clone();
            async move {
                let room = tx.room(QUEUE_BYTES * 3).await.unwrap();
                room.send(data(QUEUE_BYTES * 3));
            }
        });
        for _ in 0..5 {
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

    #[tokio::test]
    async fn a_dropped_wait_reserves_nothing_and_a_gone_writer_is_reported() {
        let (tx, rx) = channel();
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
}
