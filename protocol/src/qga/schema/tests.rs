//! Unit tests of the command schema and argument parsing.

use super::*;
use serde_json::json;

fn parse(name: &str, args: Value) -> Result<Command, QgaError> {
    Command::parse(name, args.as_object())
}

fn perr(name: &str, args: Value) -> String {
    parse(name, args).unwrap_err().desc
}

#[test]
fn command_table_has_44_upstream_commands_and_unique_names() {
    let upstream = COMMANDS
        .iter()
        .filter(|c| c.name.starts_with("guest-"))
        .count();
    assert_eq!(upstream, QGA_COMMAND_COUNT);
    let mut names: Vec<_> = COMMANDS.iter().map(|c| c.name).collect();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), COMMANDS.len());
    let no_resp: Vec<_> = COMMANDS
        .iter()
        .filter(|c| !c.success_response)
        .map(|c| c.name)
        .collect();
    assert_eq!(
        no_resp,
        [
            "guest-shutdown",
            "guest-suspend-disk",
            "guest-suspend-ram",
            "guest-suspend-hybrid"
        ]
    );
}

#[test]
fn every_variant_has_a_spec() {
    // Build a minimal valid argument object from each spec and check the parsed variant maps back to it.
    for spec in COMMANDS {
        let mut args = Map::new();
        for p in spec.params.iter().filter(|p| !p.optional) {
            let v = match p.ty {
                "int" | "uint64" => json!(1),
                "str" => json!("x"),
                "bool" => json!(true),
                "GuestFileWhence" => json!("set"),
                t if t.starts_with('[') => json!([]),
                t => panic!("no sample for {t}"),
            };
            args.insert(p.name.to_owned(), v);
        }
        let c =
            Command::parse(spec.name, Some(&args)).unwrap_or_else(|e| panic!("{}: {e}", spec.name));
        assert_eq!(c.name(), spec.name);
        assert_eq!(c.spec(), spec);
        // Each required param is really required.
        for p in spec.params.iter().filter(|p| !p.optional) {
            let mut a = args.clone();
            a.remove(p.name);
            let e = Command::parse(spec.name, Some(&a)).unwrap_err();
            assert_eq!(e.desc, format!("Parameter '{}' is missing", p.name));
        }
        let mut a = args.clone();
        a.insert("bogus-member".to_owned(), json!(0));
        let e = Command::parse(spec.name, Some(&a)).unwrap_err();
        assert_eq!(e.desc, "Parameter 'bogus-member' is unexpected");
    }
}

#[test]
fn test_qga_invalid_args_and_unknown_command() {
    assert_eq!(
        perr("guest-ping", json!({"foo": 42})),
        "Parameter 'foo' is unexpected"
    );
    let e = parse("guest-invalid-cmd", json!({})).unwrap_err();
    assert_eq!(e.class, crate::qga::ErrorClass::CommandNotFound);
    assert_eq!(e.desc, "The command guest-invalid-cmd has not been found");
    assert_eq!(
        Command::parse("guest-ping", None).unwrap(),
        Command::GuestPing
    );
}

#[test]
fn int64_range_like_qemu() {
    assert_eq!(perr("guest-sync", json!({})), "Parameter 'id' is missing");
    let expect = "Invalid parameter type for 'id', expected: integer";
    assert_eq!(perr("guest-sync", json!({"id": u64::MAX})), expect);
    assert_eq!(perr("guest-sync", json!({"id": 1.5})), expect);
    assert_eq!(perr("guest-sync", json!({"id": 1.0})), expect);
    assert_eq!(perr("guest-sync", json!({"id": "1"})), expect);
    assert_eq!(
        parse("guest-sync", json!({"id": i64::MIN})).unwrap(),
        Command::GuestSync(GuestSyncArgs { id: i64::MIN })
    );
    assert_eq!(
        parse("guest-sync-delimited", json!({"id": i64::MAX})).unwrap(),
        Command::GuestSyncDelimited(GuestSyncArgs { id: i64::MAX })
    );
}

#[test]
fn missing_wins_over_unexpected_and_schema_order() {
    assert_eq!(
        perr("guest-file-write", json!({"zzz": 1, "buf-b64": 3})),
        "Parameter 'handle' is missing"
    );
    assert_eq!(
        perr("guest-file-write", json!({"handle": 1, "buf-b64": 3})),
        "Invalid parameter type for 'buf-b64', expected: string"
    );
}

#[test]
fn nested_names_and_uint64() {
    assert_eq!(
        perr(
            "guest-set-vcpus",
            json!({"vcpus": [{"logical-id": 0, "online": true}, {"online": true}]})
        ),
        "Parameter 'vcpus[1].logical-id' is missing"
    );
    assert_eq!(
        perr(
            "guest-set-vcpus",
            json!({"vcpus": [{"logical-id": 0, "online": 1}]})
        ),
        "Invalid parameter type for 'vcpus[0].online', expected: boolean"
    );
    assert_eq!(
        perr(
            "guest-set-vcpus",
            json!({"vcpus": [{"logical-id": 0, "online": true, "x": 1}]})
        ),
        "Parameter 'vcpus[0].x' is unexpected"
    );
    assert_eq!(
        perr("guest-set-vcpus", json!({"vcpus": {}})),
        "Invalid parameter type for 'vcpus', expected: array"
    );
    assert_eq!(
        perr("guest-set-vcpus", json!({"vcpus": [3]})),
        "Invalid parameter type for 'vcpus[0]', expected: object"
    );
    assert_eq!(
        perr(
            "guest-fsfreeze-freeze-list",
            json!({"mountpoints": ["/", 3]})
        ),
        "Invalid parameter type for 'mountpoints[1]', expected: string"
    );
    let c = parse(
        "guest-set-memory-blocks",
        json!({"mem-blks": [{"phys-index": u64::MAX, "online": false}]}),
    )
    .unwrap();
    let Command::GuestSetMemoryBlocks(a) = c else {
        panic!()
    };
    assert_eq!(a.mem_blks[0].phys_index, u64::MAX);
    // Negative values are accepted for uint64 (QEMU's backward compatibility) and wrap.
    let c = parse(
        "guest-set-memory-blocks",
        json!({"mem-blks": [{"phys-index": -1, "online": false}]}),
    )
    .unwrap();
    let Command::GuestSetMemoryBlocks(a) = c else {
        panic!()
    };
    assert_eq!(a.mem_blks[0].phys_index, u64::MAX);
    assert_eq!(
        perr(
            "guest-set-memory-blocks",
            json!({"mem-blks": [{"phys-index": 1.5, "online": false}]})
        ),
        "Parameter 'mem-blks[0].phys-index' expects uint64"
    );
}

#[test]
fn alternates() {
    let seek = |w: Value| {
        parse(
            "guest-file-seek",
            json!({"handle": 1000, "offset": 6, "whence": w}),
        )
    };
    let Command::GuestFileSeek(a) = seek(json!("set")).unwrap() else {
        panic!()
    };
    assert_eq!(a.whence, GuestFileWhence::Name(QgaSeek::Set));
    let Command::GuestFileSeek(a) = seek(json!(7)).unwrap() else {
        panic!()
    };
    assert_eq!(a.whence, GuestFileWhence::Value(7));
    assert_eq!(
        seek(json!("middle")).unwrap_err().desc,
        "Parameter 'whence' does not accept value 'middle'"
    );
    assert_eq!(
        seek(json!(true)).unwrap_err().desc,
        "Invalid parameter type for 'whence', expected: GuestFileWhence"
    );
    let exec = |c: Value| {
        parse(
            "guest-exec",
            json!({"path": "/bin/true", "capture-output": c}),
        )
    };
    let Command::GuestExec(a) = exec(json!(true)).unwrap() else {
        panic!()
    };
    assert_eq!(a.capture_mode(), GuestExecCaptureOutputMode::Separated);
    let Command::GuestExec(a) = exec(json!("merged")).unwrap() else {
        panic!()
    };
    assert_eq!(a.capture_mode(), GuestExecCaptureOutputMode::Merged);
    assert_eq!(
        exec(json!("all")).unwrap_err().desc,
        "Parameter 'capture-output' does not accept value 'all'"
    );
}

#[test]
fn serde_names_are_qapi_names() {
    let a = GuestFileWriteArgs {
        handle: 1000,
        buf_b64: "SGk=".into(),
        count: None,
    };
    assert_eq!(
        serde_json::to_string(&a).unwrap(),
        r#"{"handle":1000,"buf-b64":"SGk="}"#
    );
    let info = GuestAgentInfo {
        version: "7.2.22".into(),
        supported_commands: vec![GuestAgentCommandInfo {
            name: "guest-ping".into(),
            enabled: true,
            success_response: true,
        }],
    };
    assert_eq!(
        serde_json::to_string(&info).unwrap(),
        r#"{"version":"7.2.22","supported_commands":[{"name":"guest-ping","enabled":true,"success-response":true}]}"#
    );
    let r = GuestNetworkRoute {
        r#use: Some(1),
        ..Default::default()
    };
    assert!(serde_json::to_string(&r).unwrap().contains(r#""use":1"#));
    let cpu = GuestCpuStats::Linux(GuestLinuxCpuStats {
        cpu: 0,
        ..Default::default()
    });
    assert!(serde_json::to_string(&cpu)
        .unwrap()
        .starts_with(r#"{"type":"linux","cpu":0,"#));
    let fs: GuestFilesystemInfo = serde_json::from_value(json!({
        "name": "vda1", "mountpoint": "/", "type": "ext4", "used-bytes": 1, "disk": [{
            "pci-controller": {"domain": 0, "bus": 0, "slot": 4, "function": 0},
            "bus-type": "virtio", "bus": 0, "target": 0, "unit": 0, "dev": "/dev/vda1"}]
    }))
    .unwrap();
    assert_eq!(fs.disk[0].bus_type, GuestDiskBusType::Virtio);
    let st: GuestExecStatus = serde_json::from_value(
        json!({"exitcode": 0, "out-data": "eAo=", "out-truncated": false, "exited": true}),
    )
    .unwrap();
    assert!(st.exited);
    assert_eq!(st.out_data.as_deref(), Some("eAo="));
}

#[test]
fn command_arguments_round_trip() {
    let c = parse(
        "guest-exec",
        json!({"path": "ls", "arg": ["-l"], "capture-output": "stdout"}),
    )
    .unwrap();
    let args = c.arguments().unwrap();
    assert_eq!(Command::parse(c.name(), Some(&args)).unwrap(), c);
    assert_eq!(Command::GuestPing.arguments(), None);
}
