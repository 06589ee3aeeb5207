//! File transfer payloads (FILE_XFER_START / STATUS / DATA) and the file-name validator.

use super::error::{FileNameError, VdagentError};
use super::header::MessageType;
use super::keyfile::{self, KeyfileFields};
use super::wire::{Put, Reader};

/// `VD_AGENT_FILE_XFER_STATUS_ERROR_GLIB_IO`: the error detail carries a `GIOErrorEnum` code.
pub const ERROR_TYPE_GLIB_IO: u8 = 0;
/// `G_IO_ERROR_INVALID_FILENAME` (spice-gtk shows a specific text for it).
pub const G_IO_ERROR_INVALID_FILENAME: u32 = 10;
/// `G_IO_ERROR_TOO_MANY_OPEN_FILES` (vdagentd: more than 128 active transfers).
pub const G_IO_ERROR_TOO_MANY_OPEN_FILES: u32 = 31;
/// Longest accepted file name in bytes (NAME_MAX).
pub(crate) const MAX_FILE_NAME_LEN: usize = 255;

/// FILE_XFER_START: transfer id plus the key-file metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileXferStart {
    /// Transfer id chosen by the client.
    pub id: u32,
    /// File name as sent (unescaped; not validated: see [`validate_file_name`]).
    pub name: String,
    /// File size in bytes.
    pub size: u64,
    /// Position in a batch (`file-xfer-nr`), if sent.
    pub file_xfer_nr: Option<u32>,
    /// Batch size (`file-xfer-total`), if sent.
    pub file_xfer_total: Option<u32>,
}

impl FileXferStart {
    /// Decodes `id u32` + key-file text. The text ends at the first NUL (a missing terminator is tolerated).
    pub(crate) fn decode(payload: &[u8]) -> Result<Self, VdagentError> {
        let mut r = Reader::new(payload, MessageType::FileXferStart, "at least 4");
        let id = r.u32()?;
        let rest = r.rest();
        let text = &rest[..rest.iter().position(|b| *b == 0).unwrap_or(rest.len())];
        let text = std::str::from_utf8(text)
            .map_err(|_| VdagentError::Keyfile("key file is not UTF-8".into()))?;
        let f = keyfile::parse(text)?;
        Ok(Self {
            id,
            name: f.name,
            size: f.size,
            file_xfer_nr: f.file_xfer_nr,
            file_xfer_total: f.file_xfer_total,
        })
    }

    pub(crate) fn encode(&self, out: &mut Vec<u8>) -> Result<(), VdagentError> {
        if self.name.contains('\0') {
            return Err(VdagentError::Encode("file name contains a NUL byte"));
        }
        out.put_u32(self.id);
        let text = keyfile::write(&KeyfileFields {
            name: self.name.clone(),
            size: self.size,
            file_xfer_nr: self.file_xfer_nr,
            file_xfer_total: self.file_xfer_total,
        });
        out.extend_from_slice(text.as_bytes());
        out.put_u8(0);
        Ok(())
    }
}

/// `VD_AGENT_FILE_XFER_STATUS_*` result codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FileXferResult {
    /// 0: the agent is ready for DATA.
    CanSendData,
    /// 1: cancelled by either side.
    Cancelled,
    /// 2: failed.
    Error,
    /// 3: all bytes received and stored.
    Success,
    /// 4: not enough disk space (detail: u64 free bytes).
    NotEnoughSpace,
    /// 5: the session is locked.
    SessionLocked,
    /// 6: no session agent.
    VdagentNotConnected,
    /// 7: file transfer disabled.
    Disabled,
    /// Any other value.
    Other(u32),
}

impl FileXferResult {
    /// Parses the wire value.
    pub fn from_u32(value: u32) -> Self {
        match value {
            0 => Self::CanSendData,
            1 => Self::Cancelled,
            2 => Self::Error,
            3 => Self::Success,
            4 => Self::NotEnoughSpace,
            5 => Self::SessionLocked,
            6 => Self::VdagentNotConnected,
            7 => Self::Disabled,
            other => Self::Other(other),
        }
    }

    /// The wire value.
    pub fn as_u32(self) -> u32 {
        match self {
            Self::CanSendData => 0,
            Self::Cancelled => 1,
            Self::Error => 2,
            Self::Success => 3,
            Self::NotEnoughSpace => 4,
            Self::SessionLocked => 5,
            Self::VdagentNotConnected => 6,
            Self::Disabled => 7,
            Self::Other(v) => v,
        }
    }

    /// The code to send to a peer without FILE_XFER_DETAILED_ERRORS: codes above SUCCESS become ERROR.
    pub fn downgrade(self) -> Self {
        if self.as_u32() > 3 {
            Self::Error
        } else {
            self
        }
    }
}

/// The optional detail after a FILE_XFER_STATUS (only with FILE_XFER_DETAILED_ERRORS).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FileXferDetail {
    /// No detail bytes.
    None,
    /// NOT_ENOUGH_SPACE: free bytes on the target file system.
    NotEnoughSpace {
        /// Free bytes.
        disk_free_space: u64,
    },
    /// ERROR: `{error_type u8, error_code u32}` packed (5 bytes).
    Error {
        /// [`ERROR_TYPE_GLIB_IO`] in practice.
        error_type: u8,
        /// A `GIOErrorEnum` value.
        error_code: u32,
    },
    /// Detail bytes that match no known layout for the result, kept verbatim.
    Other(Vec<u8>),
}

/// FILE_XFER_STATUS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileXferStatus {
    /// Transfer id.
    pub id: u32,
    /// Result code.
    pub result: FileXferResult,
    /// Optional detail.
    pub detail: FileXferDetail,
}

impl FileXferStatus {
    pub(crate) fn decode(payload: &[u8]) -> Result<Self, VdagentError> {
        let mut r = Reader::new(payload, MessageType::FileXferStatus, "at least 8");
        let id = r.u32()?;
        let result = FileXferResult::from_u32(r.u32()?);
        let rest = r.rest();
        let detail = match (result, rest.len()) {
            (_, 0) => FileXferDetail::None,
            (FileXferResult::NotEnoughSpace, 8) => FileXferDetail::NotEnoughSpace {
                disk_free_space: r.u64()?,
            },
            (FileXferResult::Error, 5) => FileXferDetail::Error {
                error_type: r.u8()?,
                error_code: r.u32()?,
            },
            _ => FileXferDetail::Other(rest.to_vec()),
        };
        Ok(Self { id, result, detail })
    }

    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        out.put_u32(self.id);
        out.put_u32(self.result.as_u32());
        match &self.detail {
            FileXferDetail::None => {}
            FileXferDetail::NotEnoughSpace { disk_free_space } => out.put_u64(*disk_free_space),
            FileXferDetail::Error {
                error_type,
                error_code,
            } => {
                out.put_u8(*error_type);
                out.put_u32(*error_code);
            }
            FileXferDetail::Other(bytes) => out.extend_from_slice(bytes),
        }
    }
}

/// FILE_XFER_DATA: one piece of file content.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileXferData {
    /// Transfer id.
    pub id: u32,
    /// The bytes; their count is the wire `size` field.
    pub data: Vec<u8>,
}

impl FileXferData {
    /// Decodes `id u32, size u64, data`; the `size` field must equal the bytes really present
    /// (docs/protocol/vdagent.md#file-data-size-field).
    pub(crate) fn decode(payload: &[u8]) -> Result<Self, VdagentError> {
        let mut r = Reader::new(payload, MessageType::FileXferData, "at least 12");
        let id = r.u32()?;
        let declared = r.u64()?;
        let actual = r.remaining() as u64;
        if declared != actual {
            return Err(VdagentError::FileDataSizeMismatch { declared, actual });
        }
        Ok(Self {
            id,
            data: r.rest().to_vec(),
        })
    }

    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&Self::payload_head(self.id, self.data.len()));
        out.extend_from_slice(&self.data);
    }

    /// Bytes of the fixed fields before the data.
    pub const HEAD_SIZE: usize = 12;

    /// The fixed fields (`id`, data size) that precede `len` data bytes in a FILE_XFER_DATA payload, for a sender
    /// that reads file data straight in behind them instead of building a [`FileXferData`].
    pub fn payload_head(id: u32, len: usize) -> [u8; Self::HEAD_SIZE] {
        let mut head = [0u8; Self::HEAD_SIZE];
        head[..4].copy_from_slice(&id.to_le_bytes());
        head[4..].copy_from_slice(&(len as u64).to_le_bytes());
        head
    }
}

/// Checks that `name` is one safe relative path component to create under the download directory.
///
/// Refused: empty, `.`, `..`, any `/` (absolute or nested paths), `\`, NUL, other control characters, invisible
/// formatting characters ([`is_invisible_format`]: bidi controls and friends, which let a name display as
/// something it is not), and names longer than [`MAX_FILE_NAME_LEN`] bytes. Hidden names (`.hidden`) and shell
/// metacharacters are fine: the name is never passed to a shell.
pub fn validate_file_name(name: &str) -> Result<(), FileNameError> {
    if name.is_empty() {
        return Err(FileNameError::Empty);
    }
    if name.len() > MAX_FILE_NAME_LEN {
        return Err(FileNameError::TooLong(name.len()));
    }
    if name == "." || name == ".." {
        return Err(FileNameError::DotEntry);
    }
    for c in name.chars() {
        match c {
            '/' => return Err(FileNameError::Separator),
            '\\' => return Err(FileNameError::Backslash),
            '\0' => return Err(FileNameError::Nul),
            c if c.is_control() => return Err(FileNameError::Control),
            c if is_invisible_format(c) => return Err(FileNameError::InvisibleFormat(c)),
            _ => {}
        }
    }
    Ok(())
}

/// Whether `c` is an invisible formatting character refused in file names: the bidi embeddings and overrides
/// (U+202A–U+202E), isolates (U+2066–U+2069) and marks (U+200E, U+200F, U+061C), the zero-width space and word
/// joiner family (U+200B, U+2060–U+2064, U+FEFF, U+180E), the deprecated format characters U+206A–U+206F, the
/// line and paragraph separators (U+2028, U+2029) and the interlinear annotation marks (U+FFF9–U+FFFB).
///
/// ZWNJ and ZWJ (U+200C, U+200D) stay allowed: Persian, Indic scripts and emoji sequences need them, and they
/// cannot reorder text.
pub(crate) fn is_invisible_format(c: char) -> bool {
    matches!(
        c,
        '\u{061C}'
            | '\u{180E}'
            | '\u{200B}'
            | '\u{200E}'
            | '\u{200F}'
            | '\u{2028}'..='\u{202E}'
            | '\u{2060}'..='\u{2064}'
            | '\u{2066}'..='\u{206F}'
            | '\u{FEFF}'
            | '\u{FFF9}'..='\u{FFFB}'
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bidi_and_invisible_format_characters_are_refused() {
        // The classic disguise: "invoice\u{202E}fdp.exe" renders as "invoiceexe.pdf".
        for c in [
            '\u{202A}', '\u{202B}', '\u{202C}', '\u{202D}', '\u{202E}', '\u{2066}', '\u{2067}',
            '\u{2068}', '\u{2069}', '\u{200E}', '\u{200F}', '\u{061C}', '\u{200B}', '\u{2060}',
            '\u{FEFF}', '\u{2028}', '\u{2029}', '\u{180E}', '\u{206A}', '\u{FFF9}',
        ] {
            let name = format!("invoice{c}fdp.exe");
            assert_eq!(
                validate_file_name(&name),
                Err(FileNameError::InvisibleFormat(c)),
                "U+{:04X}",
                u32::from(c)
            );
        }
        assert_eq!(
            FileNameError::InvisibleFormat('\u{202E}').to_string(),
            "File name contains the invisible formatting character U+202E"
        );
        // Joiners that real scripts and emoji need stay valid, and so do ordinary RTL letters.
        for ok in [
            "\u{645}\u{6CC}\u{200C}\u{62E}\u{648}\u{627}\u{647}\u{645}.txt",
            "\u{1F468}\u{200D}\u{1F469}.png",
            "\u{5E9}\u{5DC}\u{5D5}\u{5DD}.txt",
        ] {
            assert_eq!(validate_file_name(ok), Ok(()), "{ok:?}");
        }
        // Neighbours of the refused ranges are ordinary characters.
        for c in ['\u{2027}', '\u{202F}', '\u{2065}', '\u{2070}', '\u{FFFC}'] {
            assert!(!is_invisible_format(c), "U+{:04X}", u32::from(c));
        }
    }
}
