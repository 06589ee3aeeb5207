//! A small GLib key-file (`GKeyFile`) reader and writer: the format of `/etc/qemu/qemu-ga.conf`, of `-D` output and
//! of guestlinkd's own `/etc/guestlink/guestlinkd.conf`.
//!
//! Semantics follow GLib: `#` comments and blank lines are skipped, `[group]` headers, `key=value` with whitespace
//! around `=` removed, escapes `\s \n \t \r \\` in values, localized keys (`key[de]`) ignored, and any other line is
//! an error. Booleans are `true`/`false`/`1`/`0` (anything else is an error). Lists are read by the caller (qemu-ga
//! splits its list keys on `,`, not GLib's `;`).

use guestlink_protocol::keyfile::{escape_value, unescape_value, UnescapeError};
use thiserror::Error;

/// A parse or conversion error, with GLib-like wording.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum KeyFileError {
    /// A line that is not a group, key-value pair or comment.
    #[error("Key file contains line “{0}” which is not a key-value pair, group, or comment")]
    BadLine(String),
    /// A key-value pair before the first group header.
    #[error("Key file does not start with a group")]
    NoGroup,
    /// A boolean key whose value is not true/false/1/0.
    #[error(
        "Key file contains key “{key}” which has a value that cannot be interpreted: “{value}”"
    )]
    BadBoolean {
        /// The key.
        key: String,
        /// The offending value.
        value: String,
    },
    /// An invalid escape in a value.
    #[error("Key file contains invalid escape sequence “{0}”")]
    BadEscape(String),
}

/// A parsed key file: groups in file order, each with its keys in file order (a repeated key keeps the last value).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct KeyFile {
    groups: Vec<(String, Vec<(String, String)>)>,
}

impl KeyFile {
    /// An empty key file.
    pub fn new() -> Self {
        Self::default()
    }

    /// Parse key-file text.
    pub fn parse(text: &str) -> Result<Self, KeyFileError> {
        let mut kf = KeyFile::new();
        let mut current: Option<usize> = None;
        for raw in text.lines() {
            let line = raw.trim_start();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            if line.starts_with('[') {
                let Some(end) = line.find(']') else {
                    return Err(KeyFileError::BadLine(raw.to_owned()));
                };
                if !line[end + 1..].trim().is_empty() {
                    return Err(KeyFileError::BadLine(raw.to_owned()));
                }
                let name = &line[1..end];
                current = Some(kf.group_index_or_insert(name));
                continue;
            }
            let Some(eq) = line.find('=') else {
                return Err(KeyFileError::BadLine(raw.to_owned()));
            };
            let key = line[..eq].trim_end();
            if key.is_empty() {
                return Err(KeyFileError::BadLine(raw.to_owned()));
            }
            let Some(gi) = current else {
                return Err(KeyFileError::NoGroup);
            };
            if key.contains('[') {
                // Localized value (`key[locale]=...`): never used by qemu-ga, ignored like an unknown key.
                continue;
            }
            let value = unescape(line[eq + 1..].trim_start())?;
            let entries = &mut kf.groups[gi].1;
            match entries.iter_mut().find(|(k, _)| k == key) {
                Some(entry) => entry.1 = value,
                None => entries.push((key.to_owned(), value)),
            }
        }
        Ok(kf)
    }

    fn group_index_or_insert(&mut self, name: &str) -> usize {
        if let Some(i) = self.groups.iter().position(|(g, _)| g == name) {
            return i;
        }
        self.groups.push((name.to_owned(), Vec::new()));
        self.groups.len() - 1
    }

    /// Whether `group` has `key`.
    pub fn has_key(&self, group: &str, key: &str) -> bool {
        self.get_string(group, key).is_some()
    }

    /// The (unescaped) string value of `key` in `group`.
    pub fn get_string(&self, group: &str, key: &str) -> Option<&str> {
        self.groups
            .iter()
            .find(|(g, _)| g == group)?
            .1
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// The boolean value of `key` (`true`/`false`/`1`/`0`, surrounding whitespace ignored); `Ok(None)` if absent.
    pub fn get_bool(&self, group: &str, key: &str) -> Result<Option<bool>, KeyFileError> {
        let Some(v) = self.get_string(group, key) else {
            return Ok(None);
        };
        match v.trim() {
            "true" | "1" => Ok(Some(true)),
            "false" | "0" => Ok(Some(false)),
            _ => Err(KeyFileError::BadBoolean {
                key: key.to_owned(),
                value: v.to_owned(),
            }),
        }
    }

    /// Set a string value (creating the group at the end if needed).
    pub fn set_string(&mut self, group: &str, key: &str, value: &str) {
        let gi = self.group_index_or_insert(group);
        let entries = &mut self.groups[gi].1;
        match entries.iter_mut().find(|(k, _)| k == key) {
            Some(entry) => value.clone_into(&mut entry.1),
            None => entries.push((key.to_owned(), value.to_owned())),
        }
    }

    /// Set a boolean value (`true`/`false`, like `g_key_file_set_boolean`).
    pub fn set_bool(&mut self, group: &str, key: &str, value: bool) {
        self.set_string(group, key, if value { "true" } else { "false" });
    }

    /// Serialize like `g_key_file_to_data`: `[group]` then `key=value` lines, a blank line between groups.
    pub fn to_data(&self) -> String {
        let mut out = String::new();
        for (i, (group, entries)) in self.groups.iter().enumerate() {
            if i > 0 {
                out.push('\n');
            }
            out.push('[');
            out.push_str(group);
            out.push_str("]\n");
            for (k, v) in entries {
                out.push_str(k);
                out.push('=');
                out.push_str(&escape_value(v));
                out.push('\n');
            }
        }
        out
    }
}

/// Split a qemu-ga list value on `,`, dropping empty items (like `split_list` + `g_strsplit`).
pub fn split_list(value: &str) -> Vec<String> {
    value
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}

/// GLib's value unescaping; `\;` and `\,` (GLib's list-separator escapes) are kept verbatim for our string reads.
fn unescape(v: &str) -> Result<String, KeyFileError> {
    unescape_value(v, &[';', ',']).map_err(|e| {
        KeyFileError::BadEscape(match e {
            UnescapeError::Invalid(c) => format!("\\{c}"),
            UnescapeError::AtEnd => "\\".to_owned(),
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_groups_keys_and_comments() {
        let kf = KeyFile::parse(
            "# comment\n\n[general]\n daemon = false\nmethod=virtio-serial\npath=/a\\sb\nname[de]=x\n[other]\nk=v\n",
        )
        .unwrap();
        assert_eq!(kf.get_bool("general", "daemon").unwrap(), Some(false));
        assert_eq!(kf.get_string("general", "method"), Some("virtio-serial"));
        assert_eq!(kf.get_string("general", "path"), Some("/a b"));
        assert_eq!(kf.get_string("general", "name"), None);
        assert_eq!(kf.get_string("other", "k"), Some("v"));
        assert!(!kf.has_key("other", "missing"));
    }

    #[test]
    fn booleans_follow_glib() {
        let kf = KeyFile::parse("[g]\na=true\nb=1\nc=0\nd=yes\ne=False\n").unwrap();
        assert_eq!(kf.get_bool("g", "a").unwrap(), Some(true));
        assert_eq!(kf.get_bool("g", "b").unwrap(), Some(true));
        assert_eq!(kf.get_bool("g", "c").unwrap(), Some(false));
        assert!(kf.get_bool("g", "d").is_err());
        assert!(kf.get_bool("g", "e").is_err());
        assert_eq!(kf.get_bool("g", "zzz").unwrap(), None);
    }

    #[test]
    fn malformed_files_are_errors() {
        assert!(matches!(
            KeyFile::parse("[g]\njunk line\n"),
            Err(KeyFileError::BadLine(_))
        ));
        assert_eq!(KeyFile::parse("k=v\n"), Err(KeyFileError::NoGroup));
        assert!(KeyFile::parse("[g\n").is_err());
    }

    #[test]
    fn writes_like_g_key_file_to_data() {
        let mut kf = KeyFile::new();
        kf.set_bool("general", "daemon", false);
        kf.set_string("general", "path", " lead");
        kf.set_string("x", "k", "a\\b");
        assert_eq!(
            kf.to_data(),
            "[general]\ndaemon=false\npath=\\slead\n\n[x]\nk=a\\\\b\n"
        );
        let back = KeyFile::parse(&kf.to_data()).unwrap();
        assert_eq!(back.get_string("general", "path"), Some(" lead"));
        assert_eq!(back.get_string("x", "k"), Some("a\\b"));
    }

    #[test]
    fn split_list_uses_commas_only() {
        assert_eq!(
            split_list("guest-ping,guest-get-time"),
            ["guest-ping", "guest-get-time"]
        );
        assert_eq!(
            split_list("guest-ping;guest-get-time"),
            ["guest-ping;guest-get-time"]
        );
        assert!(split_list("").is_empty());
    }
}
