//! The GKeyFile subset used by FILE_XFER_START: `[vdagent-file-xfer]` with `name=`, `size=` and the optional batch
//! keys `file-xfer-nr=` / `file-xfer-total=`.
//!
//! Values use GLib's string escapes (`\s \n \t \r \\`); any other escape, or a backslash at the end of a value, is
//! rejected like `g_key_file_get_string` does, which makes spice-vdagent answer STATUS ERROR.

use super::error::VdagentError;

/// The key-file group spice-gtk writes.
pub(crate) const FILE_XFER_GROUP: &str = "vdagent-file-xfer";

/// The fields of a FILE_XFER_START key file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct KeyfileFields {
    pub(crate) name: String,
    pub(crate) size: u64,
    pub(crate) file_xfer_nr: Option<u32>,
    pub(crate) file_xfer_total: Option<u32>,
}

fn err(text: impl Into<String>) -> VdagentError {
    VdagentError::Keyfile(text.into())
}

pub use crate::keyfile::escape_value;

/// Undoes [`escape_value`]; invalid escapes are errors (the shared [`crate::keyfile::unescape_value`]).
pub fn unescape_value(raw: &str) -> Result<String, VdagentError> {
    crate::keyfile::unescape_value(raw, &[]).map_err(|e| err(e.to_string()))
}

fn parse_u64(key: &str, value: &str) -> Result<u64, VdagentError> {
    let value = value.trim_end();
    if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
        return Err(err(format!("key '{key}' is not an unsigned integer")));
    }
    value
        .parse()
        .map_err(|_| err(format!("key '{key}' is out of range")))
}

fn parse_u32(key: &str, value: &str) -> Result<u32, VdagentError> {
    u32::try_from(parse_u64(key, value)?).map_err(|_| err(format!("key '{key}' is out of range")))
}

/// Parses the key file text (without its NUL terminator).
pub(crate) fn parse(text: &str) -> Result<KeyfileFields, VdagentError> {
    let mut group: Option<&str> = None;
    let mut seen_group = false;
    let (mut name, mut size, mut nr, mut total) = (None, None, None, None);
    for raw_line in text.split('\n') {
        let line = raw_line.strip_suffix('\r').unwrap_or(raw_line).trim_start();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if let Some(rest) = line.strip_prefix('[') {
            let g = rest
                .trim_end()
                .strip_suffix(']')
                .ok_or_else(|| err("invalid group header"))?;
            if g.is_empty() || g.contains(['[', ']']) {
                return Err(err("invalid group name"));
            }
            seen_group |= g == FILE_XFER_GROUP;
            group = Some(g);
            continue;
        }
        let (key, value) = line
            .split_once('=')
            .ok_or_else(|| err("line is neither a group nor a key"))?;
        let key = key.trim_end();
        if key.is_empty() {
            return Err(err("empty key"));
        }
        let Some(current) = group else {
            return Err(err("key file does not start with a group"));
        };
        if current != FILE_XFER_GROUP {
            continue;
        }
        let value = value.trim_start_matches(|c: char| c.is_ascii_whitespace());
        match key {
            "name" => name = Some(value),
            "size" => size = Some(value),
            "file-xfer-nr" => nr = Some(value),
            "file-xfer-total" => total = Some(value),
            _ => {}
        }
    }
    if !seen_group {
        return Err(err(format!("no group '{FILE_XFER_GROUP}'")));
    }
    let name = unescape_value(name.ok_or_else(|| err("missing key 'name'"))?)?;
    let size = parse_u64("size", size.ok_or_else(|| err("missing key 'size'"))?)?;
    let file_xfer_nr = nr.map(|v| parse_u32("file-xfer-nr", v)).transpose()?;
    let file_xfer_total = total.map(|v| parse_u32("file-xfer-total", v)).transpose()?;
    Ok(KeyfileFields {
        name,
        size,
        file_xfer_nr,
        file_xfer_total,
    })
}

/// Writes the key file text (without the NUL terminator).
pub(crate) fn write(fields: &KeyfileFields) -> String {
    let mut out = format!(
        "[{FILE_XFER_GROUP}]\nname={}\nsize={}\n",
        escape_value(&fields.name),
        fields.size
    );
    if let Some(nr) = fields.file_xfer_nr {
        out.push_str(&format!("file-xfer-nr={nr}\n"));
    }
    if let Some(total) = fields.file_xfer_total {
        out.push_str(&format!("file-xfer-total={total}\n"));
    }
    out
}
