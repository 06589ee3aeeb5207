//! The download directory: `--download-dir`, else `$XDG_DOWNLOAD_DIR`, else `XDG_DOWNLOAD_DIR` from
//! `$XDG_CONFIG_HOME/user-dirs.dirs` (xdg-user-dirs), else `~/Downloads`.

use std::path::{Path, PathBuf};

/// Resolves the download directory (`None`: no candidate at all, e.g. no `$HOME`).
pub fn download_dir(cli: Option<PathBuf>) -> Option<PathBuf> {
    if let Some(d) = cli {
        return Some(d);
    }
    if let Some(d) = std::env::var_os("XDG_DOWNLOAD_DIR").filter(|d| !d.is_empty()) {
        return Some(PathBuf::from(d));
    }
    let home = std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(PathBuf::from);
    let config = std::env::var_os("XDG_CONFIG_HOME")
        .filter(|c| !c.is_empty())
        .map(PathBuf::from)
        .or_else(|| home.as_ref().map(|h| h.join(".config")));
    if let (Some(config), Some(home)) = (&config, &home) {
        if let Ok(text) = std::fs::read_to_string(config.join("user-dirs.dirs")) {
            if let Some(d) = parse_user_dirs(&text, "XDG_DOWNLOAD_DIR", home) {
                return Some(d);
            }
        }
    }
    home.map(|h| h.join("Downloads"))
}

/// Reads `KEY="$HOME/sub"` or `KEY="/abs"` from a user-dirs.dirs text.
pub fn parse_user_dirs(text: &str, key: &str, home: &Path) -> Option<PathBuf> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split_once('='))
        .filter(|(k, _)| k.trim() == key)
        .filter_map(|(_, v)| {
            let v = v.trim().strip_prefix('"')?.strip_suffix('"')?;
            if v == "$HOME" {
                Some(home.to_owned())
            } else if let Some(rest) = v.strip_prefix("$HOME/") {
                Some(home.join(rest))
            } else if v.starts_with('/') {
                Some(PathBuf::from(v))
            } else {
                None
            }
        })
        .next_back()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_dirs() {
        let text = "# comment\nXDG_DESKTOP_DIR=\"$HOME/Desktop\"\nXDG_DOWNLOAD_DIR=\"$HOME/Téléchargements\"\n";
        let home = Path::new("/home/u");
        assert_eq!(
            parse_user_dirs(text, "XDG_DOWNLOAD_DIR", home),
            Some(PathBuf::from("/home/u/Téléchargements"))
        );
        assert_eq!(
            parse_user_dirs("XDG_DOWNLOAD_DIR=\"/srv/dl\"", "XDG_DOWNLOAD_DIR", home),
            Some(PathBuf::from("/srv/dl"))
        );
        assert_eq!(
            parse_user_dirs("XDG_DOWNLOAD_DIR=rel", "XDG_DOWNLOAD_DIR", home),
            None
        );
    }
}
