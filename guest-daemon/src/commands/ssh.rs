//! guest-ssh-{get,add,remove}-authorized-keys and guest-set-user-password, with qemu-ga's semantics and texts.
//!
//! `~/.ssh` is created 0700 and `authorized_keys` is written 0600, both owned by the user. Unlike qemu-ga the file
//! gets its owner and mode *before* it is renamed into place (no window where root owns it or it is too open).

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use super::error::{errno_text, CommandError, CommandResult};
use super::file::decode_base64;
use super::run::run_command;

/// The parts of a passwd entry the key commands need.
#[derive(Debug, Clone)]
pub struct Account {
    /// Home directory.
    pub home: PathBuf,
    /// User id.
    pub uid: u32,
    /// Group id.
    pub gid: u32,
}

/// Looks a user up in the passwd database.
pub fn lookup(username: &str) -> CommandResult<Account> {
    match nix::unistd::User::from_name(username) {
        Ok(Some(u)) => Ok(Account {
            home: u.dir,
            uid: u.uid.as_raw(),
            gid: u.gid.as_raw(),
        }),
        // qemu-ga (GLib) reports errno, which is 0 for "no such user".
        Ok(None) => Err(CommandError::generic(format!(
            "failed to lookup user '{username}': Success"
        ))),
        Err(e) => Err(CommandError::generic(format!(
            "failed to lookup user '{username}': {}",
            errno_text(e as i32)
        ))),
    }
}

/// qemu-ga's order for add/remove: the keys are checked before the user is looked up.
pub fn lookup_after_key_check(username: &str, keys: &[String]) -> CommandResult<Account> {
    check_keys(keys)?;
    lookup(username)
}

fn check_keys(keys: &[String]) -> CommandResult<()> {
    for k in keys {
        if k.starts_with('#') || k.contains('\n') {
            return Err(CommandError::generic(format!(
                "invalid OpenSSH public key: '{k}'"
            )));
        }
    }
    Ok(())
}

fn read_authkeys(path: &Path) -> CommandResult<Vec<String>> {
    match std::fs::read(path) {
        Ok(b) => Ok(String::from_utf8_lossy(&b)
            .split('\n')
            .map(str::to_owned)
            .collect()),
        Err(e) => Err(CommandError::generic(format!(
            "failed to read '{p}': Failed to open file \u{201c}{p}\u{201d}: {}",
            errno_text(e.raw_os_error().unwrap_or(libc::EIO)),
            p = path.display()
        ))),
    }
}

fn io_text(e: &std::io::Error) -> String {
    e.raw_os_error().map_or_else(|| e.to_string(), errno_text)
}

fn write_authkeys(path: &Path, keys: &[String], acct: &Account) -> CommandResult<()> {
    let dir = path.parent().unwrap_or_else(|| Path::new("."));
    let tmp = dir.join(format!(".authorized_keys.guestlink.{}", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    let res = (|| -> Result<(), String> {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&tmp)
            .map_err(|e| format!("failed to write to '{}': {}", path.display(), io_text(&e)))?;
        std::os::unix::fs::fchown(&f, Some(acct.uid), Some(acct.gid)).map_err(|e| {
            format!(
                "failed to set ownership of directory '{}': {}",
                path.display(),
                io_text(&e)
            )
        })?;
        f.set_permissions(std::fs::Permissions::from_mode(0o600))
            .map_err(|e| {
                format!(
                    "failed to set permissions of '{}': {}",
                    path.display(),
                    io_text(&e)
                )
            })?;
        f.write_all(keys.join("\n").as_bytes())
            .and_then(|()| f.sync_all())
            .map_err(|e| format!("failed to write to '{}': {}", path.display(), io_text(&e)))?;
        std::fs::rename(&tmp, path)
            .map_err(|e| format!("failed to write to '{}': {}", path.display(), io_text(&e)))
    })();
    if let Err(msg) = res {
        let _ = std::fs::remove_file(&tmp);
        return Err(CommandError::generic(msg));
    }
    Ok(())
}

/// guest-ssh-get-authorized-keys for an account (keys in reverse file order, like qemu-ga's list prepend).
pub fn get_keys(acct: &Account) -> CommandResult<Value> {
    let path = acct.home.join(".ssh/authorized_keys");
    let mut keys: Vec<String> = read_authkeys(&path)?
        .iter()
        .map(|l| l.trim().to_owned())
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    keys.reverse();
    Ok(json!({ "keys": keys }))
}

/// guest-ssh-add-authorized-keys for an account.
pub fn add_keys(acct: &Account, keys: &[String], reset: bool) -> CommandResult<()> {
    check_keys(keys)?;
    let ssh = acct.home.join(".ssh");
    let path = ssh.join("authorized_keys");
    let existing = if reset {
        None
    } else {
        read_authkeys(&path).ok()
    };
    if existing.is_none() && !ssh.is_dir() {
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&ssh)
            .map_err(|e| {
                CommandError::generic(format!(
                    "failed to create directory '{}': {}",
                    ssh.display(),
                    io_text(&e)
                ))
            })?;
        std::os::unix::fs::chown(&ssh, Some(acct.uid), Some(acct.gid)).map_err(|e| {
            CommandError::generic(format!(
                "failed to set ownership of directory '{}': {}",
                ssh.display(),
                io_text(&e)
            ))
        })?;
        std::fs::set_permissions(&ssh, std::fs::Permissions::from_mode(0o700)).map_err(|e| {
            CommandError::generic(format!(
                "failed to set permissions of directory '{}': {}",
                ssh.display(),
                io_text(&e)
            ))
        })?;
    }
    let mut all = existing.unwrap_or_default();
    for k in keys {
        if !all.contains(k) {
            all.push(k.clone());
        }
    }
    write_authkeys(&path, &all, acct)
}

/// guest-ssh-remove-authorized-keys for an account (a missing file or key is not an error).
pub fn remove_keys(acct: &Account, keys: &[String]) -> CommandResult<()> {
    check_keys(keys)?;
    let path = acct.home.join(".ssh/authorized_keys");
    if !path.exists() {
        return Ok(());
    }
    let kept: Vec<String> = read_authkeys(&path)?
        .into_iter()
        .filter(|l| !keys.contains(l))
        .collect();
    write_authkeys(&path, &kept, acct)
}

/// The checks of guest-set-user-password; returns the line for chpasswd's stdin.
pub fn chpasswd_input(username: &str, password_b64: &str) -> CommandResult<Vec<u8>> {
    let mut raw = decode_base64(password_b64)?;
    // qemu-ga treats the decoded password as a C string.
    if let Some(nul) = raw.iter().position(|&b| b == 0) {
        raw.truncate(nul);
    }
    if raw.contains(&b'\n') {
        return Err(CommandError::generic(
            "forbidden characters in raw password",
        ));
    }
    if username.contains(['\n', ':']) {
        return Err(CommandError::generic("forbidden characters in username"));
    }
    let mut line = Vec::with_capacity(username.len() + raw.len() + 2);
    line.extend_from_slice(username.as_bytes());
    line.push(b':');
    line.extend_from_slice(&raw);
    line.push(b'\n');
    Ok(line)
}

/// guest-set-user-password: `user:password\n` into `chpasswd [-e]`.
pub async fn set_user_password(
    chpasswd: &Path,
    username: &str,
    password_b64: &str,
    crypted: bool,
) -> CommandResult<()> {
    let input = chpasswd_input(username, password_b64)?;
    let args: &[&str] = if crypted { &["-e"] } else { &[] };
    run_command(chpasswd, args, Some(&input), "set user password").await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn me(home: &Path) -> Account {
        Account {
            home: home.to_owned(),
            uid: nix::unistd::getuid().as_raw(),
            gid: nix::unistd::getgid().as_raw(),
        }
    }

    fn contents(home: &Path) -> String {
        std::fs::read_to_string(home.join(".ssh/authorized_keys")).unwrap()
    }

    fn keys(k: &[&str]) -> Vec<String> {
        k.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn invalid_user_and_key() {
        assert!(lookup("").is_err());
        assert_eq!(
            lookup("no-such-user-guestlink").unwrap_err().to_string(),
            "failed to lookup user 'no-such-user-guestlink': Success"
        );
        let d = tempfile::tempdir().unwrap();
        let e = add_keys(&me(d.path()), &keys(&["not a valid\nkey"]), false).unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid OpenSSH public key: 'not a valid\nkey'"
        );
        assert!(remove_keys(&me(d.path()), &keys(&["# comment"])).is_err());
    }

    #[test]
    fn add_and_reset_like_upstream() {
        let d = tempfile::tempdir().unwrap();
        let a = me(d.path());
        add_keys(&a, &keys(&["algo key2 comments"]), false).unwrap();
        assert_eq!(contents(d.path()), "algo key2 comments");
        let ssh = std::fs::metadata(d.path().join(".ssh")).unwrap();
        assert_eq!(ssh.permissions().mode() & 0o777, 0o700);
        let f = std::fs::metadata(d.path().join(".ssh/authorized_keys")).unwrap();
        assert_eq!(f.permissions().mode() & 0o777, 0o600);
        add_keys(
            &a,
            &keys(&["algo key1 comments", "algo key2 comments"]),
            false,
        )
        .unwrap();
        assert_eq!(contents(d.path()), "algo key2 comments\nalgo key1 comments");
        add_keys(&a, &keys(&["algo key2 comments"]), true).unwrap();
        assert_eq!(contents(d.path()), "algo key2 comments");
        add_keys(&a, &[], true).unwrap();
        assert_eq!(contents(d.path()), "");
    }

    #[test]
    fn remove_and_get_like_upstream() {
        let d = tempfile::tempdir().unwrap();
        let a = me(d.path());
        // removing from a missing file is fine
        remove_keys(&a, &keys(&["algo key1 comments"])).unwrap();
        assert!(get_keys(&a)
            .unwrap_err()
            .to_string()
            .starts_with("failed to read '"));
        std::fs::create_dir(d.path().join(".ssh")).unwrap();
        let authkeys =
            "algo key1 comments\nalgo key1 comments\n# a commented line\nalgo some-key another\n";
        std::fs::write(d.path().join(".ssh/authorized_keys"), authkeys).unwrap();
        remove_keys(&a, &keys(&["algo key2 comments"])).unwrap();
        assert_eq!(contents(d.path()), authkeys);
        remove_keys(&a, &keys(&["algo key1 comments", "algo key2 comments"])).unwrap();
        assert_eq!(
            contents(d.path()),
            "# a commented line\nalgo some-key another\n"
        );
        std::fs::write(
            d.path().join(".ssh/authorized_keys"),
            "algo key1 comments\n# a commented line\n  algo some-key another \n",
        )
        .unwrap();
        assert_eq!(
            get_keys(&a).unwrap(),
            json!({"keys": ["algo some-key another", "algo key1 comments"]})
        );
    }

    #[tokio::test]
    async fn password_checks_and_chpasswd_stdin() {
        use base64::Engine;
        let b64 = |s: &[u8]| base64::engine::general_purpose::STANDARD.encode(s);
        assert_eq!(
            chpasswd_input("root", &b64(b"a\nb"))
                .unwrap_err()
                .to_string(),
            "forbidden characters in raw password"
        );
        assert_eq!(
            chpasswd_input("ro:ot", &b64(b"x")).unwrap_err().to_string(),
            "forbidden characters in username"
        );
        assert_eq!(
            chpasswd_input("bob", &b64(b"s3cret")).unwrap(),
            b"bob:s3cret\n"
        );
        let d = tempfile::tempdir().unwrap();
        let out = d.path().join("stdin");
        let prog = d.path().join("chpasswd");
        std::fs::write(
            &prog,
            format!(
                "#!/bin/sh\necho \"$*\" > {0}.args\ncat > {0}\n",
                out.display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&prog, std::fs::Permissions::from_mode(0o755)).unwrap();
        set_user_password(&prog, "bob", &b64(b"$6$hash"), true)
            .await
            .unwrap();
        assert_eq!(std::fs::read_to_string(&out).unwrap(), "bob:$6$hash\n");
        assert_eq!(
            std::fs::read_to_string(d.path().join("stdin.args")).unwrap(),
            "-e\n"
        );
    }
}
