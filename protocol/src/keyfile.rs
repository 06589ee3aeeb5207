//! GLib key-file (`GKeyFile`) string escapes, shared by every guestlink key-file reader and writer (guestlinkd's
//! configuration files and the vdagent FILE_XFER_START key file).
//!
//! `g_key_file_set_string` escapes `\n \t \r \\` everywhere and a space only as the first character (`\s`);
//! `g_key_file_get_string` undoes that and rejects any other escape and a backslash at the end of a value.

use thiserror::Error;

/// An escape that `g_key_file_get_string` rejects.
#[derive(Debug, Clone, Copy, Error, PartialEq, Eq)]
pub enum UnescapeError {
    /// A backslash followed by a character that is not an escape (the character).
    #[error("invalid escape sequence \\{0}")]
    Invalid(char),
    /// A backslash at the end of the value.
    #[error("escape character at end of value")]
    AtEnd,
}

/// Escapes a string value the way `g_key_file_set_string` does.
pub fn escape_value(value: &str) -> String {
    let mut out = String::with_capacity(value.len() + 2);
    for (i, c) in value.chars().enumerate() {
        match c {
            ' ' if i == 0 => out.push_str("\\s"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            '\\' => out.push_str("\\\\"),
            other => out.push(other),
        }
    }
    out
}

/// Undoes [`escape_value`] (`\s \n \t \r \\`). A backslash followed by one of `verbatim` is kept as is, backslash
/// included (GLib's list separators `;`/`,` for a caller that splits lists itself); any other escape is an error.
pub fn unescape_value(raw: &str, verbatim: &[char]) -> Result<String, UnescapeError> {
    let mut out = String::with_capacity(raw.len());
    let mut chars = raw.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('s') => out.push(' '),
            Some('n') => out.push('\n'),
            Some('t') => out.push('\t'),
            Some('r') => out.push('\r'),
            Some('\\') => out.push('\\'),
            Some(other) if verbatim.contains(&other) => {
                out.push('\\');
                out.push(other);
            }
            Some(other) => return Err(UnescapeError::Invalid(other)),
            None => return Err(UnescapeError::AtEnd),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_glib_escapes() {
        let v = " lead\tmid \\ end\r\n";
        let e = escape_value(v);
        assert_eq!(e, "\\slead\\tmid \\\\ end\\r\\n");
        assert_eq!(unescape_value(&e, &[]).unwrap(), v);
    }

    #[test]
    fn rejects_unknown_escapes_unless_verbatim() {
        assert_eq!(
            unescape_value("a\\b", &[]),
            Err(UnescapeError::Invalid('b'))
        );
        assert_eq!(unescape_value("a\\", &[]), Err(UnescapeError::AtEnd));
        assert_eq!(
            unescape_value("a\\;b", &[]),
            Err(UnescapeError::Invalid(';'))
        );
        assert_eq!(
            unescape_value("a\\;b\\,c", &[';', ',']).unwrap(),
            "a\\;b\\,c"
        );
    }
}
