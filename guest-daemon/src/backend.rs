//! The command handlers ([`crate::commands::Services`]) as the dispatch core's backend, with guest-file-read's
//! answer written in pieces.

use guestlink_protocol::qga::schema::Command;
use guestlink_protocol::qga::QgaError;
use serde_json::Value;

use crate::commands;
use crate::server::dispatch::{Backend, Output, StreamedReply};

/// The command handlers as the core's backend; [`commands::CommandError::to_qga`] is the one error mapping.
#[derive(Debug)]
pub struct ServicesBackend(pub commands::Services);

impl Backend for ServicesBackend {
    async fn execute(&self, cmd: Command) -> Result<Output, QgaError> {
        let out = match cmd {
            // guest-file-read's answer is written in pieces (no 64 MiB JSON string).
            read @ Command::GuestFileRead(_) => match self.0.execute_payload(read).await {
                Ok(commands::Payload::FileRead(r)) => {
                    Ok(Output::Streamed(Box::new(FileReadReply(r))))
                }
                Ok(commands::Payload::Value(v)) => Ok(Output::Value(v)),
                Err(e) => Err(e),
            },
            other => self.0.execute(other).await.map(Output::Value),
        };
        out.map_err(|e| e.to_qga())
    }
}

/// guest-file-read's answer written in pieces: base64-encoded chunk by chunk straight into the channel.
#[derive(Debug)]
struct FileReadReply(commands::file_read::FileRead);

/// Raw bytes per base64 chunk (a multiple of 3, so the chunks concatenate without padding).
const FILE_READ_CHUNK: usize = 3 << 20;

impl StreamedReply for FileReadReply {
    fn reply_parts(&self, id: Option<Value>, delimited: bool) -> (Vec<u8>, Vec<u8>) {
        self.0.reply_parts(id, delimited)
    }

    fn chunks(&self) -> Box<dyn Iterator<Item = String> + '_> {
        Box::new(self.0.b64_chunks(FILE_READ_CHUNK))
    }
}
