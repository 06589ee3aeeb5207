//! Chunk reassembly: turns the byte stream of a vdagent port into whole messages, per chunk port.
//!
//! Rules (docs/protocol/vdagent.md#reassembly): a message may span many chunks and a chunk may split the 20-byte
//! message header; ports 1 and 2 interleave with independent state; a chunk carrying more bytes than its message still
//! needs is "lost sync". Every failure is fatal for the stream (spice-vdagentd reopens the port): the reassembler then
//! refuses input until [`Reassembler::reset`]. Payload memory grows only as bytes arrive; a header announcing a payload
//! above the configured maximum is refused before anything is allocated.

use super::error::VdagentError;
use super::header::{
    ChunkHeader, MessageHeader, Port, CHUNK_HEADER_SIZE, MAX_CHUNK_DATA_SIZE, MESSAGE_HEADER_SIZE,
};
use super::message::RawMessage;
use crate::growth::grow_ahead;

/// Default maximum payload size: 64 MiB of data plus 4 KiB for headers and selection prefixes.
pub(crate) const DEFAULT_MAX_MESSAGE_SIZE: u32 = 64 * 1024 * 1024 + 4096;

/// Reassembly limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReassemblerConfig {
    /// Largest accepted message payload (`VDAgentMessage.size`).
    pub max_message_size: u32,
    /// Largest accepted chunk body; `None` accepts any size (host side: the guest sends one chunk per message).
    pub max_chunk_size: Option<u32>,
}

impl ReassemblerConfig {
    /// Guest side (data from spice-server): chunks ≤ 2048 bytes, like spice-vdagentd.
    pub fn guest_side() -> Self {
        Self {
            max_message_size: DEFAULT_MAX_MESSAGE_SIZE,
            max_chunk_size: Some(MAX_CHUNK_DATA_SIZE as u32),
        }
    }

    /// Host side (data from the guest): chunks of any size.
    pub fn host_side() -> Self {
        Self::guest_side().accept_any_chunk_size()
    }

    /// Removes the chunk-size limit.
    pub(crate) fn accept_any_chunk_size(mut self) -> Self {
        self.max_chunk_size = None;
        self
    }

    /// Sets the maximum payload size.
    pub fn with_max_message_size(mut self, max: u32) -> Self {
        self.max_message_size = max;
        self
    }
}

impl Default for ReassemblerConfig {
    fn default() -> Self {
        Self::guest_side()
    }
}

/// Message assembly state of one port.
#[derive(Debug, Default)]
struct PortState {
    header_buf: [u8; MESSAGE_HEADER_SIZE],
    header_len: usize,
    header: Option<MessageHeader>,
    payload: Vec<u8>,
}

/// The chunk currently being consumed.
#[derive(Debug, Clone, Copy)]
struct CurrentChunk {
    port: Port,
    remaining: u32,
}

/// Per-stream reassembler (one per virtio port / socket).
#[derive(Debug)]
pub struct Reassembler {
    config: ReassemblerConfig,
    chunk_header: [u8; CHUNK_HEADER_SIZE],
    chunk_header_len: usize,
    current: Option<CurrentChunk>,
    ports: [PortState; 2],
    poisoned: bool,
}

/// One reassembly result: a whole message with the port it came on, or a fatal error.
pub type ReassemblyEvent = Result<(Port, RawMessage), VdagentError>;

impl Reassembler {
    /// A reassembler with `config`.
    pub fn new(config: ReassemblerConfig) -> Self {
        Self {
            config,
            chunk_header: [0; CHUNK_HEADER_SIZE],
            chunk_header_len: 0,
            current: None,
            ports: [PortState::default(), PortState::default()],
            poisoned: false,
        }
    }

    /// The limits in force.
    pub fn config(&self) -> ReassemblerConfig {
        self.config
    }

    /// Whether a fatal error stopped the reassembler.
    pub fn is_poisoned(&self) -> bool {
        self.poisoned
    }

    /// Forgets all state (call when the port is reopened).
    pub fn reset(&mut self) {
        *self = Self::new(self.config);
    }

    /// Drops a partly assembled message of `port` (spice-vdagentd resets port 1 on CLIENT_DISCONNECTED).
    pub fn reset_port(&mut self, port: Port) {
        self.ports[port.index()] = PortState::default();
    }

    /// Memory held for partly received messages: header bytes plus payload capacity (accounting, tests).
    pub fn buffered_bytes(&self) -> usize {
        self.ports
            .iter()
            .map(|p| p.header_len + p.payload.capacity())
            .sum::<usize>()
            + self.chunk_header_len
    }

    /// Feeds stream bytes; returns every message completed by them, in order. After a fatal error the rest of
    /// `input` is discarded and later calls return [`VdagentError::Poisoned`] until [`Reassembler::reset`].
    pub fn feed(&mut self, mut input: &[u8]) -> Vec<ReassemblyEvent> {
        let mut events = Vec::new();
        if self.poisoned {
            if !input.is_empty() {
                events.push(Err(VdagentError::Poisoned));
            }
            return events;
        }
        while !input.is_empty() {
            let step = match self.current {
                None => self.read_chunk_header(&mut input),
                Some(chunk) => self.read_chunk_data(chunk, &mut input, &mut events),
            };
            if let Err(e) = step {
                self.poisoned = true;
                events.push(Err(e));
                break;
            }
        }
        events
    }

    fn read_chunk_header(&mut self, input: &mut &[u8]) -> Result<(), VdagentError> {
        let n = (CHUNK_HEADER_SIZE - self.chunk_header_len).min(input.len());
        self.chunk_header[self.chunk_header_len..self.chunk_header_len + n]
            .copy_from_slice(&input[..n]);
        self.chunk_header_len += n;
        *input = &input[n..];
        if self.chunk_header_len < CHUNK_HEADER_SIZE {
            return Ok(());
        }
        self.chunk_header_len = 0;
        let header = ChunkHeader::decode(&self.chunk_header);
        let port = Port::from_u32(header.port)?;
        if let Some(max) = self.config.max_chunk_size {
            if header.size > max {
                return Err(VdagentError::ChunkTooLarge {
                    size: header.size,
                    max,
                });
            }
        }
        if header.size > 0 {
            self.current = Some(CurrentChunk {
                port,
                remaining: header.size,
            });
        }
        Ok(())
    }

    fn read_chunk_data(
        &mut self,
        mut chunk: CurrentChunk,
        input: &mut &[u8],
        events: &mut Vec<ReassemblyEvent>,
    ) -> Result<(), VdagentError> {
        let take = (chunk.remaining as usize).min(input.len());
        let (mut data, rest) = input.split_at(take);
        *input = rest;
        // `take` ≤ chunk.remaining, a u32.
        chunk.remaining -= take as u32;
        let max_message = self.config.max_message_size;
        let state = &mut self.ports[chunk.port.index()];
        while !data.is_empty() {
            if state.header.is_none() {
                let n = (MESSAGE_HEADER_SIZE - state.header_len).min(data.len());
                state.header_buf[state.header_len..state.header_len + n]
                    .copy_from_slice(&data[..n]);
                state.header_len += n;
                data = &data[n..];
                if state.header_len < MESSAGE_HEADER_SIZE {
                    break;
                }
                let header = MessageHeader::decode(&state.header_buf);
                if header.size > max_message {
                    return Err(VdagentError::MessageTooLarge {
                        size: header.size.into(),
                        max: max_message.into(),
                    });
                }
                state.header = Some(header);
            }
            let Some(header) = state.header else { break };
            let needed = header.size as usize - state.payload.len();
            let n = needed.min(data.len());
            // The rest of this read may hold more of the same message: room for it is taken in one step.
            let ahead = data.len() - n + input.len();
            grow_ahead(&mut state.payload, n, ahead, header.size as usize);
            state.payload.extend_from_slice(&data[..n]);
            data = &data[n..];
            if state.payload.len() == header.size as usize {
                let payload = std::mem::take(&mut state.payload);
                *state = PortState::default();
                let extra = data.len() as u64 + u64::from(chunk.remaining);
                if extra > 0 {
                    return Err(VdagentError::LostSync {
                        extra: u32::try_from(extra).unwrap_or(u32::MAX),
                    });
                }
                events.push(Ok((chunk.port, RawMessage { header, payload })));
            }
        }
        self.current = (chunk.remaining > 0).then_some(chunk);
        Ok(())
    }
}
