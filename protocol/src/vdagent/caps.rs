//! Capability bits (`VD_AGENT_CAP_*`) and the [`Capabilities`] bitset carried by ANNOUNCE_CAPABILITIES.

/// One of the 18 known capability bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Capability {
    /// Bit 0: MOUSE_STATE.
    MouseState,
    /// Bit 1: MONITORS_CONFIG.
    MonitorsConfig,
    /// Bit 2: REPLY.
    Reply,
    /// Bit 3: legacy push clipboard.
    Clipboard,
    /// Bit 4: DISPLAY_CONFIG.
    DisplayConfig,
    /// Bit 5: grab/request/data clipboard model.
    ClipboardByDemand,
    /// Bit 6: 4-byte selection prefix on clipboard messages.
    ClipboardSelection,
    /// Bit 7: monitor arrays indexed by display id, w=h=0 = disabled.
    SparseMonitorsConfig,
    /// Bit 8: guest text uses LF line ends.
    GuestLineendLf,
    /// Bit 9: guest text uses CRLF line ends.
    GuestLineendCrlf,
    /// Bit 10: MAX_CLIPBOARD understood.
    MaxClipboard,
    /// Bit 11: AUDIO_VOLUME_SYNC understood.
    AudioVolumeSync,
    /// Bit 12: monitor positions honoured.
    MonitorsConfigPosition,
    /// Bit 13: file transfer disabled (set by spice-server).
    FileXferDisabled,
    /// Bit 14: detail payloads in FILE_XFER_STATUS understood.
    FileXferDetailedErrors,
    /// Bit 15: GRAPHICS_DEVICE_INFO understood.
    GraphicsDeviceInfo,
    /// Bit 16: an owner change is a plain GRAB, no RELEASE first.
    ClipboardNoReleaseOnRegrab,
    /// Bit 17: serial number in CLIPBOARD_GRAB.
    ClipboardGrabSerial,
}

impl Capability {
    /// All known capabilities, by bit index.
    pub const ALL: [Capability; 18] = [
        Self::MouseState,
        Self::MonitorsConfig,
        Self::Reply,
        Self::Clipboard,
        Self::DisplayConfig,
        Self::ClipboardByDemand,
        Self::ClipboardSelection,
        Self::SparseMonitorsConfig,
        Self::GuestLineendLf,
        Self::GuestLineendCrlf,
        Self::MaxClipboard,
        Self::AudioVolumeSync,
        Self::MonitorsConfigPosition,
        Self::FileXferDisabled,
        Self::FileXferDetailedErrors,
        Self::GraphicsDeviceInfo,
        Self::ClipboardNoReleaseOnRegrab,
        Self::ClipboardGrabSerial,
    ];

    /// The bit index (0..=17).
    pub fn bit(self) -> u32 {
        // ALL has 18 entries, so the index fits in u32.
        Self::ALL
            .iter()
            .position(|c| *c == self)
            .map_or(0, |i| i as u32)
    }

    /// The capability at `bit`, if known.
    pub fn from_bit(bit: u32) -> Option<Self> {
        Self::ALL.get(usize::try_from(bit).ok()?).copied()
    }

    /// The spice-protocol name without the `VD_AGENT_CAP_` prefix.
    pub fn name(self) -> &'static str {
        match self {
            Self::MouseState => "MOUSE_STATE",
            Self::MonitorsConfig => "MONITORS_CONFIG",
            Self::Reply => "REPLY",
            Self::Clipboard => "CLIPBOARD",
            Self::DisplayConfig => "DISPLAY_CONFIG",
            Self::ClipboardByDemand => "CLIPBOARD_BY_DEMAND",
            Self::ClipboardSelection => "CLIPBOARD_SELECTION",
            Self::SparseMonitorsConfig => "SPARSE_MONITORS_CONFIG",
            Self::GuestLineendLf => "GUEST_LINEEND_LF",
            Self::GuestLineendCrlf => "GUEST_LINEEND_CRLF",
            Self::MaxClipboard => "MAX_CLIPBOARD",
            Self::AudioVolumeSync => "AUDIO_VOLUME_SYNC",
            Self::MonitorsConfigPosition => "MONITORS_CONFIG_POSITION",
            Self::FileXferDisabled => "FILE_XFER_DISABLED",
            Self::FileXferDetailedErrors => "FILE_XFER_DETAILED_ERRORS",
            Self::GraphicsDeviceInfo => "GRAPHICS_DEVICE_INFO",
            Self::ClipboardNoReleaseOnRegrab => "CLIPBOARD_NO_RELEASE_ON_REGRAB",
            Self::ClipboardGrabSerial => "CLIPBOARD_GRAB_SERIAL",
        }
    }
}

/// A capability bitset as announced on the wire: `caps` words, bit `n` in word `n / 32`.
///
/// Unknown bits and extra words are kept, so a decoded announcement re-encodes byte for byte.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Capabilities {
    words: Vec<u32>,
}

impl Capabilities {
    /// An empty set with one word (`VD_AGENT_CAPS_SIZE` = 1).
    pub fn new() -> Self {
        Self { words: vec![0] }
    }

    /// The set described by wire words.
    pub fn from_words(words: &[u32]) -> Self {
        Self {
            words: words.to_vec(),
        }
    }

    /// The wire words (as many as were decoded or needed by the highest set bit).
    pub fn to_words(&self) -> Vec<u32> {
        self.words.clone()
    }

    /// The wire words, borrowed.
    pub fn words(&self) -> &[u32] {
        &self.words
    }

    /// Whether raw bit `bit` is set (`VD_AGENT_HAS_CAPABILITY`).
    pub fn has_bit(&self, bit: u32) -> bool {
        let Ok(word) = usize::try_from(bit / 32) else {
            return false;
        };
        self.words
            .get(word)
            .is_some_and(|w| w & (1 << (bit % 32)) != 0)
    }

    /// Whether `cap` is set.
    pub fn has(&self, cap: Capability) -> bool {
        self.has_bit(cap.bit())
    }

    /// Sets `cap`, growing the word list when needed.
    pub fn set(&mut self, cap: Capability) {
        let bit = cap.bit();
        let word = (bit / 32) as usize;
        if self.words.len() <= word {
            self.words.resize(word + 1, 0);
        }
        self.words[word] |= 1 << (bit % 32);
    }

    /// Clears `cap`.
    pub fn clear(&mut self, cap: Capability) {
        let bit = cap.bit();
        if let Some(w) = self.words.get_mut((bit / 32) as usize) {
            *w &= !(1 << (bit % 32));
        }
    }

    /// Builder form of [`Capabilities::set`].
    pub fn with(mut self, cap: Capability) -> Self {
        self.set(cap);
        self
    }

    /// The known capabilities that are set, in bit order.
    pub fn iter(&self) -> impl Iterator<Item = Capability> + '_ {
        Capability::ALL.into_iter().filter(|c| self.has(*c))
    }

    /// Whether both `self` and `peer` have `cap` (the rule for optional wire fields).
    pub(crate) fn both_have(&self, peer: &Capabilities, cap: Capability) -> bool {
        self.has(cap) && peer.has(cap)
    }
}

impl FromIterator<Capability> for Capabilities {
    fn from_iter<T: IntoIterator<Item = Capability>>(iter: T) -> Self {
        let mut caps = Self::new();
        for cap in iter {
            caps.set(cap);
        }
        caps
    }
}
