//! Dispatch-core tests with a fake backend and the fake freezer ioctls.

use std::sync::{Arc, Mutex};

use guestlink_protocol::qga::schema::Command;
use serde_json::{json, Value};

use super::dispatch::{Backend, Dispatcher};
use super::output::{Output, StreamedReply};
use crate::commands::CommandError;
use super::policy::Policy;
use super::{new_streamer, process};
use crate::cli::HookFailure;
use crate::freeze::ops::fake::FakeOps;
use crate::freeze::{FreezeConfig, Freezer};
use crate::state::StateDir;

#[derive(Debug, Default)]
struct FakeBackend {
    seen: Mutex<Vec<String>>,
}

impl Backend for Arc<FakeBackend> {
    async fn execute(&self, cmd: Command) -> Result<Output, CommandError> {
        self.seen.lock().unwrap().push(cmd.name().to_owned());
        match cmd {
            Command::GuestGetTime => Ok(Output::Value(json!(1234))),
            Command::GuestFileRead(_) => Ok(Output::Streamed(Box::new(FakeStreamed))),
            Command::GuestSuspendRam => Err(CommandError::generic("suspend failed")),
            _ => Ok(Output::Value(json!({}))),
        }
    }
}

struct Fx {
    _dir: tempfile::TempDir,
    backend: Arc<FakeBackend>,
    d: Dispatcher<Arc<FakeBackend>>,
}

fn fx(policy: Policy, start_frozen: bool) -> Fx {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("mountinfo"),
        "22 1 8:1 / / rw - ext4 /dev/sda1 rw\n",
    )
    .unwrap();
    let st = StateDir::new(dir.path());
    if start_frozen {
        st.mark_frozen().unwrap();
    }
    let freezer = Freezer::new(
        Arc::new(FakeOps::default()),
        FreezeConfig {
            mountinfo: dir.path().join("mountinfo"),
            hook: None,
            hook_failure: HookFailure::Abort,
            auto_thaw: None,
        },
        st,
        Arc::new(|_| {}),
    )
    .unwrap();
    let backend = Arc::new(FakeBackend::default());
    let d = Dispatcher::new(Arc::clone(&backend), freezer, policy, "9.9.9".into());
    Fx {
        _dir: dir,
        backend,
        d,
    }
}

async fn wire(f: &Fx, input: &[u8]) -> Vec<u8> {
    let mut s = new_streamer();
    let mut out = Vec::new();
    process(&mut s, &f.d, input, &mut out).await;
    out
}

fn lines(out: &[u8]) -> Vec<Value> {
    out.split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_slice(l.strip_prefix(&[0xFF]).unwrap_or(l)).unwrap())
        .collect()
}

#[tokio::test]
async fn ping_sync_and_id_echo() {
    let f = fx(Policy::default(), false);
    let out = wire(
        &f,
        br#"{"execute":"guest-ping","id":"__qmp#00001"}{"execute":"guest-sync","arguments":{"id":42}}"#,
    )
    .await;
    assert_eq!(
        out,
        b"{\"return\": {}, \"id\": \"__qmp#00001\"}\n{\"return\": 42}\n"
    );
}

#[tokio::test]
async fn sync_delimited_gets_the_0xff_and_next_command_follows() {
    let f = fx(Policy::default(), false);
    let out = wire(
        &f,
        b"{\"execute\":\"guest-sync-delimited\",\"arguments\":{\"id\":7}}\n{\"execute\":\"guest-get-time\"}\n",
    )
    .await;
    assert_eq!(out, b"\xff{\"return\": 7}\n{\"return\": 1234}\n");
    // A failed sync-delimited (bad argument) has no 0xFF.
    let out = wire(
        &f,
        br#"{"execute":"guest-sync-delimited","arguments":{"id":"x"}}"#,
    )
    .await;
    assert_eq!(out[0], b'{');
}

#[tokio::test]
async fn no_reply_for_successful_no_response_commands() {
    let f = fx(Policy::default(), false);
    let out = wire(
        &f,
        br#"{"execute":"guest-shutdown"}{"execute":"guest-suspend-ram","id":1}"#,
    )
    .await;
    let l = lines(&out);
    assert_eq!(l.len(), 1, "only the failed suspend answers: {l:?}");
    assert_eq!(l[0]["error"]["desc"], "suspend failed");
    assert_eq!(l[0]["id"], 1);
    assert_eq!(
        *f.backend.seen.lock().unwrap(),
        ["guest-shutdown", "guest-suspend-ram"]
    );
}

#[tokio::test]
async fn errors_unknown_blocked_args_envelope() {
    let f = fx(
        Policy::new(&["guest-get-time".to_owned()], &[], None),
        false,
    );
    let l = lines(&wire(&f, br#"{"execute":"guest-nonexistent","id":3}"#).await);
    assert_eq!(l[0]["error"]["class"], "CommandNotFound");
    assert_eq!(
        l[0]["error"]["desc"],
        "The command guest-nonexistent has not been found"
    );
    assert_eq!(l[0]["id"], 3);
    // Windows-only: a disabled stub, as in qemu-ga 7.2 on Linux (checked before the arguments).
    for req in [
        &br#"{"execute":"guest-get-devices"}"#[..],
        br#"{"execute":"guest-get-devices","arguments":{"x":1}}"#,
    ] {
        let l = lines(&wire(&f, req).await);
        assert_eq!(l[0]["error"]["class"], "CommandNotFound");
        assert_eq!(
            l[0]["error"]["desc"],
            "Command guest-get-devices has been disabled"
        );
    }
    let l = lines(&wire(&f, br#"{"execute":"guest-get-time"}"#).await);
    assert_eq!(
        l[0]["error"]["desc"],
        "Command guest-get-time has been disabled"
    );
    let l = lines(&wire(&f, br#"{"execute":"guest-ping","arguments":{"foo":42}}"#).await);
    assert_eq!(l[0]["error"]["desc"], "Parameter 'foo' is unexpected");
    let l = lines(&wire(&f, br#"{"exec-oob":"guest-ping"}"#).await);
    assert_eq!(l[0]["error"]["class"], "GenericError");
    let l = lines(&wire(&f, b"garbage\n").await);
    assert_eq!(
        l[0]["error"]["desc"],
        "JSON parse error, invalid keyword 'garbage'"
    );
    assert!(l[0].get("id").is_none());
    assert!(f.backend.seen.lock().unwrap().is_empty());
}

#[tokio::test]
async fn guest_info_lists_every_linux_command_reversed() {
    let f = fx(Policy::new(&["guest-exec".to_owned()], &[], None), false);
    let l = lines(&wire(&f, br#"{"execute":"guest-info"}"#).await);
    let info = &l[0]["return"];
    assert_eq!(info["version"], "9.9.9");
    let cmds = info["supported_commands"].as_array().unwrap();
    let names: Vec<&str> = cmds.iter().map(|c| c["name"].as_str().unwrap()).collect();
    assert_eq!(names.last(), Some(&"guest-sync-delimited"));
    assert!(names.contains(&"guestlink-exec-read"));
    let get = |n: &str| cmds.iter().find(|c| c["name"] == n).unwrap().clone();
    assert_eq!(get("guest-get-devices")["enabled"], false);
    assert_eq!(get("guest-exec")["enabled"], false);
    assert_eq!(get("guest-ping")["enabled"], true);
    assert_eq!(get("guest-shutdown")["success-response"], false);
}

#[tokio::test]
async fn frozen_state_restricts_commands_and_thaw_restores() {
    // Started with the marker present (restart while frozen): only the allow-list runs.
    let f = fx(Policy::default(), true);
    let l = lines(
        &wire(
            &f,
            br#"{"execute":"guest-fsfreeze-status"}{"execute":"guest-get-time"}{"execute":"guest-fsfreeze-freeze"}"#,
        )
        .await,
    );
    assert_eq!(l[0]["return"], "frozen");
    assert_eq!(l[1]["error"]["class"], "CommandNotFound");
    assert_eq!(
        l[1]["error"]["desc"],
        "Command guest-get-time has been disabled: the agent is in frozen state"
    );
    assert_eq!(
        l[2]["error"]["desc"],
        "Command guest-fsfreeze-freeze has been disabled: the agent is in frozen state"
    );
    let info = lines(&wire(&f, br#"{"execute":"guest-info"}"#).await);
    let cmds = info[0]["return"]["supported_commands"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(
        cmds.iter().find(|c| c["name"] == "guest-get-time").unwrap()["enabled"],
        false
    );
    let l = lines(
        &wire(
            &f,
            br#"{"execute":"guest-fsfreeze-thaw"}{"execute":"guest-fsfreeze-status"}{"execute":"guest-get-time"}"#,
        )
        .await,
    );
    assert_eq!(l[0]["return"], 0);
    assert_eq!(l[1]["return"], "thawed");
    assert_eq!(l[2]["return"], 1234);
}

#[tokio::test]
async fn freeze_and_thaw_through_the_core() {
    let f = fx(Policy::default(), false);
    let l = lines(&wire(&f, br#"{"execute":"guest-fsfreeze-freeze-list","arguments":{"mountpoints":["/"]}}{"execute":"guest-fsfreeze-status"}{"execute":"guest-fsfreeze-thaw"}"#).await);
    assert_eq!(l[0]["return"], 1);
    assert_eq!(l[1]["return"], "frozen");
    assert_eq!(l[2]["return"], 1);
}

#[tokio::test]
async fn allow_list_reason_on_the_wire() {
    let f = fx(
        Policy::new(
            &[],
            &["guest-ping".to_owned(), "guest-get-time".to_owned()],
            None,
        ),
        false,
    );
    let l = lines(
        &wire(
            &f,
            br#"{"execute":"guest-ping"}{"execute":"guest-get-fsinfo"}"#,
        )
        .await,
    );
    assert_eq!(l[0]["return"], json!({}));
    assert_eq!(
        l[1]["error"]["desc"],
        "Command guest-get-fsinfo has been disabled: the command is not allowed"
    );
}

#[derive(Debug)]
struct FakeStreamed;

impl StreamedReply for FakeStreamed {
    fn reply_parts(&self, id: Option<Value>, delimited: bool) -> (Vec<u8>, Vec<u8>) {
        (
            format!("P{id:?}{delimited}|").into_bytes(),
            b"|S\n".to_vec(),
        )
    }

    fn chunks(&self) -> Box<dyn Iterator<Item = String> + '_> {
        Box::new(["ab", "cd", "ef"].into_iter().map(String::from))
    }
}

#[tokio::test]
async fn streamed_replies_are_written_in_order_between_others() {
    let f = fx(Policy::default(), false);
    let req = br#"{"execute":"guest-ping"}{"execute":"guest-file-read","arguments":{"handle":1000},"id":"r1"}{"execute":"guest-ping"}"#;
    let out = wire(&f, req).await;
    assert_eq!(
        String::from_utf8_lossy(&out),
        "{\"return\": {}}\nPSome(String(\"r1\"))false|abcdef|S\n{\"return\": {}}\n"
    );
}
