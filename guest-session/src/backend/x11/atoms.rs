//! Interned atoms and the mapping between X11 selection targets and vdagent clipboard types.

use guestlink_protocol::vdagent::ClipboardType;
use x11rb::protocol::xproto::Atom;

x11rb::atom_manager! {
    /// The atoms the X11 backend uses.
    pub Atoms: AtomsCookie {
        CLIPBOARD,
        PRIMARY,
        TARGETS,
        TIMESTAMP,
        MULTIPLE,
        INCR,
        ATOM,
        INTEGER,
        UTF8_STRING,
        STRING,
        TEXT,
        TEXT_PLAIN_UTF8: b"text/plain;charset=utf-8",
        TEXT_PLAIN: b"text/plain",
        IMAGE_PNG: b"image/png",
        IMAGE_BMP: b"image/bmp",
        IMAGE_X_BMP: b"image/x-bmp",
        IMAGE_X_MS_BMP: b"image/x-MS-bmp",
        IMAGE_X_WIN_BITMAP: b"image/x-win-bitmap",
        IMAGE_TIFF: b"image/tiff",
        IMAGE_JPEG: b"image/jpeg",
        GUESTLINK_CLIPBOARD,
        GUESTLINK_PRIMARY,
        GUESTLINK_TIMESTAMP,
    }
}

impl Atoms {
    /// The targets offered for a vdagent type, best first.
    pub fn targets_for(&self, t: ClipboardType) -> Vec<Atom> {
        match t {
            ClipboardType::Utf8Text => vec![
                self.UTF8_STRING,
                self.TEXT_PLAIN_UTF8,
                self.STRING,
                self.TEXT,
                self.TEXT_PLAIN,
            ],
            ClipboardType::ImagePng => vec![self.IMAGE_PNG],
            ClipboardType::ImageBmp => vec![
                self.IMAGE_BMP,
                self.IMAGE_X_BMP,
                self.IMAGE_X_MS_BMP,
                self.IMAGE_X_WIN_BITMAP,
            ],
            ClipboardType::ImageTiff => vec![self.IMAGE_TIFF],
            ClipboardType::ImageJpg => vec![self.IMAGE_JPEG],
            _ => Vec::new(),
        }
    }

    /// The vdagent type a target stands for.
    pub fn type_of(&self, target: Atom) -> Option<ClipboardType> {
        [
            ClipboardType::Utf8Text,
            ClipboardType::ImagePng,
            ClipboardType::ImageBmp,
            ClipboardType::ImageTiff,
            ClipboardType::ImageJpg,
        ]
        .into_iter()
        .find(|t| self.targets_for(*t).contains(&target))
    }

    /// The best target among `offered` to read `t` with (TEXT is skipped: it may be COMPOUND_TEXT).
    pub fn best_target(&self, t: ClipboardType, offered: &[Atom]) -> Option<Atom> {
        self.targets_for(t)
            .into_iter()
            .filter(|a| *a != self.TEXT)
            .find(|a| offered.contains(a))
    }

    /// The vdagent types `offered` targets can provide, in a stable order (images first, then text).
    pub fn types_of(&self, offered: &[Atom]) -> Vec<ClipboardType> {
        [
            ClipboardType::ImagePng,
            ClipboardType::ImageBmp,
            ClipboardType::ImageTiff,
            ClipboardType::ImageJpg,
            ClipboardType::Utf8Text,
        ]
        .into_iter()
        .filter(|t| self.best_target(*t, offered).is_some())
        .collect()
    }
}

/// UTF-8 → ISO 8859-1 for the `STRING` target (unrepresentable characters become `?`).
pub fn utf8_to_latin1(data: &[u8]) -> Vec<u8> {
    String::from_utf8_lossy(data)
        .chars()
        .map(|c| u8::try_from(u32::from(c)).unwrap_or(b'?'))
        .collect()
}

/// ISO 8859-1 → UTF-8 for data read as `STRING`.
pub fn latin1_to_utf8(data: &[u8]) -> Vec<u8> {
    data.iter()
        .map(|b| char::from(*b))
        .collect::<String>()
        .into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latin1_round_trip() {
        assert_eq!(utf8_to_latin1("aé€".as_bytes()), vec![b'a', 0xe9, b'?']);
        assert_eq!(latin1_to_utf8(&[b'a', 0xe9]), "aé".as_bytes());
    }
}
