//! Clipboard selections and data types, and the grab-serial bookkeeping of `VD_AGENT_CAP_CLIPBOARD_GRAB_SERIAL`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// A clipboard selection (`VD_AGENT_CLIPBOARD_SELECTION_*`), carried in byte 0 of the selection prefix.
/// Serialized as its wire number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(from = "u8", into = "u8")]
pub enum Selection {
    /// 0: CLIPBOARD.
    Clipboard,
    /// 1: PRIMARY.
    Primary,
    /// 2: SECONDARY.
    Secondary,
    /// Any other value, kept as is.
    Other(u8),
}

impl Selection {
    /// Parses the wire byte.
    pub fn from_u8(value: u8) -> Self {
        match value {
            0 => Self::Clipboard,
            1 => Self::Primary,
            2 => Self::Secondary,
            other => Self::Other(other),
        }
    }

    /// The wire byte.
    pub fn as_u8(self) -> u8 {
        match self {
            Self::Clipboard => 0,
            Self::Primary => 1,
            Self::Secondary => 2,
            Self::Other(v) => v,
        }
    }
}

/// A clipboard data type (`VD_AGENT_CLIPBOARD_*`). Serialized as its wire number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(from = "u32", into = "u32")]
pub enum ClipboardType {
    /// 0: no data (empty answer).
    None,
    /// 1: UTF-8 text without a trailing NUL.
    Utf8Text,
    /// 2: PNG image.
    ImagePng,
    /// 3: BMP image.
    ImageBmp,
    /// 4: TIFF image.
    ImageTiff,
    /// 5: JPEG image.
    ImageJpg,
    /// 6: NUL-separated file list ("copy"/"cut", then paths).
    FileList,
    /// Any other value, kept as is.
    Other(u32),
}

impl ClipboardType {
    /// Parses the wire value.
    pub fn from_u32(value: u32) -> Self {
        match value {
            0 => Self::None,
            1 => Self::Utf8Text,
            2 => Self::ImagePng,
            3 => Self::ImageBmp,
            4 => Self::ImageTiff,
            5 => Self::ImageJpg,
            6 => Self::FileList,
            other => Self::Other(other),
        }
    }

    /// The wire value.
    pub fn as_u32(self) -> u32 {
        match self {
            Self::None => 0,
            Self::Utf8Text => 1,
            Self::ImagePng => 2,
            Self::ImageBmp => 3,
            Self::ImageTiff => 4,
            Self::ImageJpg => 5,
            Self::FileList => 6,
            Self::Other(v) => v,
        }
    }
}

impl From<u8> for Selection {
    fn from(value: u8) -> Self {
        Self::from_u8(value)
    }
}

impl From<Selection> for u8 {
    fn from(value: Selection) -> Self {
        value.as_u8()
    }
}

impl From<u32> for ClipboardType {
    fn from(value: u32) -> Self {
        Self::from_u32(value)
    }
}

impl From<ClipboardType> for u32 {
    fn from(value: ClipboardType) -> Self {
        value.as_u32()
    }
}

/// Which peer's acceptance rule [`GrabSerials::accept`] applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SerialRule {
    /// spice-vdagentd (guest side): accept `serial == counter` (then increment) or `serial == counter - 1`
    /// ("client grab wins" after a simultaneous grab).
    Guest,
    /// spice-gtk (client side): accept only `serial == counter` (then increment).
    Client,
}

/// Per-selection grab-serial counters (vd_agent.h `VD_AGENT_CAP_CLIPBOARD_GRAB_SERIAL`,
/// docs/protocol/vdagent.md#grab-serials).
///
/// One counter per selection is shared by both directions: a sender puts the current value in its GRAB and
/// increments; a receiver accepts a GRAB whose serial matches and increments too, so both ends stay in step.
/// All counters go back to 0 whenever capabilities are negotiated with `request = 1`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GrabSerials {
    counters: BTreeMap<u8, u32>,
}

impl GrabSerials {
    /// All counters at 0.
    pub fn new() -> Self {
        Self::default()
    }

    /// Resets every counter to 0 (call on ANNOUNCE_CAPABILITIES with `request = 1`, sent or received).
    pub fn reset(&mut self) {
        self.counters.clear();
    }

    /// The current counter of `selection`.
    pub fn current(&self, selection: Selection) -> u32 {
        self.counters.get(&selection.as_u8()).copied().unwrap_or(0)
    }

    /// The serial to put in an outgoing GRAB; increments the counter.
    pub fn next_outgoing(&mut self, selection: Selection) -> u32 {
        let counter = self.counters.entry(selection.as_u8()).or_insert(0);
        let serial = *counter;
        *counter = counter.wrapping_add(1);
        serial
    }

    /// Whether an incoming GRAB with `serial` is accepted under `rule`; updates the counter when it is.
    pub fn accept(&mut self, selection: Selection, serial: u32, rule: SerialRule) -> bool {
        let counter = self.counters.entry(selection.as_u8()).or_insert(0);
        if serial == *counter {
            *counter = counter.wrapping_add(1);
            true
        } else {
            rule == SerialRule::Guest && serial == counter.wrapping_sub(1)
        }
    }
}
