//! Dispatch-core tests: the real dispatcher, core handlers and fake freezer ioctls, with a command set of their own
//! (the core's commands, a few others answered by a fake, and a toy command) declared the way the schema is.

use std::sync::{Arc, Mutex};

use guestlink_protocol::qga::schema::{
    CoreHandlers, GuestFileReadArgs, GuestFsfreezeFreezeListArgs, GuestShutdownArgs, GuestSyncArgs,
    Outcome,
};
use serde::Serialize;
use serde_json::{json, Value};

use super::core::Core;
use super::dispatch::Dispatcher;
use super::output::{Output, StreamedReply};
use super::policy::Policy;
use super::{new_streamer, process};
use crate::cli::HookFailure;
use crate::commands::CommandError;
use crate::freeze::ops::fake::FakeOps;
use crate::freeze::{FreezeConfig, Freezer};
use crate::state::StateDir;

/// Arguments of the toy command: one declaration gives its reader and its parameter specs.
#[derive(Debug, Clone, PartialEq, Serialize)]
struct ToyEchoArgs {
    text: String,
    times: Option<i64>,
}
guestlink_protocol::qapi_args!(ToyEchoArgs {
    text: "text" req "str",
    times: "times" opt "int"
});

// The test's command set. A new command is one line here plus its handler method below (`toy_echo`).
guestlink_protocol::qga_commands! {
    enum TestCommand; trait TestCore; trait TestHandlers; const TEST_COMMANDS;
    GuestSyncDelimited(GuestSyncArgs) = "guest-sync-delimited" => guest_sync_delimited in core -> "int", since "1.1", delimited;
    GuestSync(GuestSyncArgs) = "guest-sync" => guest_sync in core -> "int", since "0.15";
    GuestPing = "guest-ping" => guest_ping in core -> "{}", since "0.15";
    GuestGetTime = "guest-get-time" => guest_get_time -> "int", since "1.5";
    GuestInfo = "guest-info" => guest_info in core -> "GuestAgentInfo", since "0.15";
    GuestShutdown(GuestShutdownArgs) = "guest-shutdown" => guest_shutdown -> "{}", since "0.15", no_response;
    GuestFileRead(GuestFileReadArgs) = "guest-file-read" => guest_file_read -> "GuestFileRead", since "0.15";
    GuestFsfreezeStatus = "guest-fsfreeze-status" => guest_fsfreeze_status in core -> "GuestFsfreezeStatus", since "0.15";
    GuestFsfreezeFreeze = "guest-fsfreeze-freeze" => guest_fsfreeze_freeze in core -> "int", since "0.15";
    GuestFsfreezeFreezeList(GuestFsfreezeFreezeListArgs) = "guest-fsfreeze-freeze-list" => guest_fsfreeze_freeze_list in core -> "int", since "2.2";
    GuestFsfreezeThaw = "guest-fsfreeze-thaw" => guest_fsfreeze_thaw in core -> "int", since "0.15";
    GuestSuspendRam = "guest-suspend-ram" => guest_suspend_ram -> "{}", since "1.1", no_response;
    GuestGetFsinfo = "guest-get-fsinfo" => guest_get_fsinfo -> "['GuestFilesystemInfo']", since "2.2";
    GuestGetDevices = "guest-get-devices" => guest_get_devices -> "['GuestDeviceInfo']", since "5.2", not_on_linux;
    GuestlinkToyEcho(ToyEchoArgs) = "guestlink-toy-echo" => toy_echo -> "str", since "guestlink";
}

type Answer = Result<Output, CommandError>;

/// The real core's handlers serve the test set's core commands.
impl TestCore for Core {
    async fn guest_sync_delimited(&self, a: GuestSyncArgs) -> Answer {
        CoreHandlers::guest_sync_delimited(self, a).await
    }
    async fn guest_sync(&self, a: GuestSyncArgs) -> Answer {
        CoreHandlers::guest_sync(self, a).await
    }
    async fn guest_ping(&self) -> Answer {
        CoreHandlers::guest_ping(self).await
    }
    async fn guest_info(&self) -> Answer {
        CoreHandlers::guest_info(self).await
    }
    async fn guest_fsfreeze_status(&self) -> Answer {
        CoreHandlers::guest_fsfreeze_status(self).await
    }
    async fn guest_fsfreeze_freeze(&self) -> Answer {
        CoreHandlers::guest_fsfreeze_freeze(self).await
    }
    async fn guest_fsfreeze_freeze_list(&self, a: GuestFsfreezeFreezeListArgs) -> Answer {
        CoreHandlers::guest_fsfreeze_freeze_list(self, a).await
    }
    async fn guest_fsfreeze_thaw(&self) -> Answer {
        CoreHandlers::guest_fsfreeze_thaw(self).await
    }
}

/// Fake handlers for the others (guest-shutdown and guest-suspend-* must never really run here).
#[derive(Debug, Default)]
struct FakeHandlers {
    seen: Arc<Mutex<Vec<String>>>,
}

impl FakeHandlers {
    fn saw(&self, name: &str) {
        self.seen.lock().unwrap().push(name.to_owned());
    }
}

impl Outcome for FakeHandlers {
    type Output = Output;
    type Error = CommandError;
}

impl TestHandlers for FakeHandlers {
    async fn guest_get_time(&self) -> Answer {
        self.saw("guest-get-time");
        Ok(json!(1234).into())
    }
    async fn guest_shutdown(&self, _: GuestShutdownArgs) -> Answer {
        self.saw("guest-shutdown");
        Ok(json!({}).into())
    }
    async fn guest_file_read(&self, _: GuestFileReadArgs) -> Answer {
        self.saw("guest-file-read");
        Ok(Output::Streamed(Box::new(FakeStreamed)))
    }
    async fn guest_suspend_ram(&self) -> Answer {
        self.saw("guest-suspend-ram");
        Err(CommandError::generic("suspend failed"))
    }
    async fn guest_get_fsinfo(&self) -> Answer {
        self.saw("guest-get-fsinfo");
        Ok(json!([]).into())
    }
    async fn guest_get_devices(&self) -> Answer {
        self.saw("guest-get-devices");
        Err(CommandError::Unsupported)
    }
    /// The toy command's handler.
    async fn toy_echo(&self, a: ToyEchoArgs) -> Answer {
        self.saw("guestlink-toy-echo");
        if a.times.is_some_and(|n| n < 0) {
            return Err(CommandError::invalid_value(a.times.unwrap_or(0), "times"));
        }
        Ok(json!(a.text.repeat(a.times.unwrap_or(1) as usize)).into())
    }
}

struct Fx {
    _dir: tempfile::TempDir,
    seen: Arc<Mutex<Vec<String>>>,
    d: Dispatcher<FakeHandlers, TestCommand>,
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
    let handlers = FakeHandlers::default();
    let seen = Arc::clone(&handlers.seen);
    let d = Dispatcher::new(handlers, freezer, policy, "9.9.9".into());
    assert_eq!(TEST_COMMANDS.len(), 15);
    Fx { _dir: dir, seen, d }
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
        *f.seen.lock().unwrap(),
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
    assert!(f.seen.lock().unwrap().is_empty());
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

#[tokio::test]
async fn a_command_added_in_one_declaration_runs_through_the_dispatcher() {
    let f = fx(Policy::default(), false);
    let l = lines(
        &wire(
            &f,
            br#"{"execute":"guestlink-toy-echo","arguments":{"text":"ab","times":3},"id":5}
                {"execute":"guestlink-toy-echo","arguments":{"text":"ab","times":-1}}
                {"execute":"guestlink-toy-echo","arguments":{"txt":"ab"}}
                {"execute":"guestlink-toy-echo","arguments":{"text":"ab","extra":1}}"#,
        )
        .await,
    );
    assert_eq!(l[0], json!({"return": "ababab", "id": 5}));
    // The handler's error goes through the one mapping.
    assert_eq!(
        l[1]["error"]["desc"],
        "value '-1' is invalid for argument times"
    );
    // The declaration's parameter specs drive the reader: QEMU's texts for a missing or an unexpected member.
    assert_eq!(l[2]["error"]["desc"], "Parameter 'text' is missing");
    assert_eq!(l[3]["error"]["desc"], "Parameter 'extra' is unexpected");
    assert_eq!(
        *f.seen.lock().unwrap(),
        ["guestlink-toy-echo", "guestlink-toy-echo"]
    );
    // The schema entry comes from the same declaration, and the policy applies to it like to any command.
    let spec = TEST_COMMANDS
        .iter()
        .find(|c| c.name == "guestlink-toy-echo")
        .unwrap();
    assert_eq!(spec.returns, "str");
    assert_eq!(
        spec.params
            .iter()
            .map(|p| (p.name, p.ty, p.optional))
            .collect::<Vec<_>>(),
        [("text", "str", false), ("times", "int", true)]
    );
    let f = fx(
        Policy::new(&["guestlink-toy-echo".to_owned()], &[], None),
        false,
    );
    let l = lines(
        &wire(
            &f,
            br#"{"execute":"guestlink-toy-echo","arguments":{"text":"x"}}"#,
        )
        .await,
    );
    assert_eq!(
        l[0]["error"]["desc"],
        "Command guestlink-toy-echo has been disabled"
    );
}
