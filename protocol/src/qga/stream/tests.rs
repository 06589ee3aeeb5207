//! Unit tests of the streamer against qemu-ga's measured behaviour (docs/protocol/qga.md#parse-errors-and-recovery,
//! #parser-limits, #reference-transcript).

use super::*;
use serde_json::json;

fn feed_all(input: &[u8]) -> Vec<StreamEvent> {
    JsonStreamer::default().feed(input)
}

fn err(desc: &str) -> StreamEvent {
    StreamEvent::Error(QgaError::generic(desc))
}

fn val(v: Value) -> StreamEvent {
    StreamEvent::Value(v)
}

#[test]
fn transcript_requests() {
    let mut s = JsonStreamer::default();
    assert_eq!(
        s.feed(b"{\"execute\":\"guest-sync-delimited\",\"arguments\":{\"id\":42}}\n"),
        [val(
            json!({"execute": "guest-sync-delimited", "arguments": {"id": 42}})
        )]
    );
    // Dispatched at the closing brace, no newline needed.
    assert_eq!(
        s.feed(b"{\"execute\":\"guest-ping\",\"id\":7}"),
        [val(json!({"execute": "guest-ping", "id": 7}))]
    );
    assert_eq!(
        s.feed(b"garbage\n"),
        [err("JSON parse error, invalid keyword 'garbage'")]
    );
    assert_eq!(
        s.feed(b"\xff{\"execute\":\"guest-ping\"}\n"),
        [
            err("JSON parse error, stray '\u{FFFD}'"),
            val(json!({"execute": "guest-ping"}))
        ]
    );
    assert!(s.is_idle());
}

#[test]
fn ff_resets_a_partial_request() {
    let mut s = JsonStreamer::default();
    assert_eq!(s.feed(b"{\"execute\":\"guest-pi"), []);
    assert!(!s.is_idle());
    assert_eq!(
        s.feed(b"\xff{\"execute\":\"guest-ping\"}"),
        [
            err("JSON parse error, stray '\"guest-pi\u{FFFD}'"),
            val(json!({"execute": "guest-ping"}))
        ]
    );
    let mut s = JsonStreamer::default();
    assert_eq!(s.feed(b"{\"execute\":"), []);
    assert_eq!(
        s.feed(b"\xff\xfe{}"),
        [
            err("JSON parse error, stray '\u{FFFD}'"),
            err("JSON parse error, stray '\u{FFFD}'"),
            val(json!({}))
        ]
    );
}

#[test]
fn pipelined_and_bare_numbers() {
    let mut s = JsonStreamer::default();
    assert_eq!(
        s.feed(b"{}[1,2]\"x\" true 12"),
        [
            val(json!({})),
            val(json!([1, 2])),
            val(json!("x")),
            val(json!(true))
        ]
    );
    // The bare number is only known to be complete once a following byte ends it.
    assert_eq!(s.feed(b"3"), []);
    assert_eq!(s.feed(b" "), [val(json!(123))]);
}

#[test]
fn parse_errors_and_recovery() {
    assert_eq!(feed_all(b"}"), [err("JSON parse error, expecting value")]);
    assert_eq!(
        feed_all(b"garbage}"),
        [
            err("JSON parse error, invalid keyword 'garbage'"),
            err("JSON parse error, expecting value")
        ]
    );
    assert_eq!(
        feed_all(b"{\"a\":1,\"a\":2}"),
        [err("JSON parse error, duplicate key")]
    );
    assert_eq!(
        feed_all(b"{\"a\"}"),
        [err("JSON parse error, missing : in object pair")]
    );
    assert_eq!(
        feed_all(b"{1:2}"),
        [err("JSON parse error, key is not a string in object")]
    );
    assert_eq!(
        feed_all(b"[1 2]"),
        [err("JSON parse error, expected separator in list")]
    );
    assert_eq!(
        feed_all(b"{\"a\":1 \"b\":2}"),
        [err("JSON parse error, expected separator in dict")]
    );
    assert_eq!(
        feed_all(b"[1,]"),
        [err("JSON parse error, expecting value")]
    );
    assert_eq!(
        feed_all(b"{\"a\":}"),
        [err("JSON parse error, expecting value")]
    );
    // Lexical error: the stray token, then everything up to a structural/control character is skipped.
    assert_eq!(
        feed_all(b"Abc def\n{\"k\":'v'}"),
        [err("JSON parse error, stray 'A'"), val(json!({"k": "v"}))]
    );
    assert_eq!(feed_all(b"01 "), [err("JSON parse error, stray '01'")]);
    // Recovery stops at the ',' which is then a token of its own.
    assert_eq!(
        feed_all(b"-x yz,[]"),
        [
            err("JSON parse error, stray '-x'"),
            err("JSON parse error, expecting value"),
            val(json!([]))
        ]
    );
    // A raw control character inside a string.
    assert_eq!(
        feed_all(b"[\"a\x01b\"]"),
        [
            err("JSON parse error, stray '\"a\u{1}'"),
            err("JSON parse error, expecting value")
        ]
    );
    // A NUL ends the C string QEMU formats the message from.
    assert_eq!(
        feed_all(b"\"ab\x00"),
        [err("JSON parse error, stray '\"ab'")]
    );
}

#[test]
fn strings_like_qemu() {
    let one = |input: &[u8]| match feed_all(input).as_slice() {
        [StreamEvent::Value(Value::String(s))] => Ok(s.clone()),
        [StreamEvent::Error(e)] => Err(e.desc.clone()),
        other => panic!("{other:?}"),
    };
    assert_eq!(one(br#"'it\'s "q"'"#).unwrap(), "it's \"q\"");
    assert_eq!(
        one(br#""\"\\\/\b\f\n\r\t\'""#).unwrap(),
        "\"\\/\u{8}\u{c}\n\r\t'"
    );
    assert_eq!(one(br#""\u00e9\u20AC\ud83d\ude00""#).unwrap(), "é€😀");
    assert_eq!(one(br#""\u0000""#).unwrap(), "\0");
    assert_eq!(one(b"\"\xc0\x80\"").unwrap(), "\0");
    assert_eq!(one("\"é\"".as_bytes()).unwrap(), "é");
    assert_eq!(
        one(br#""\ud800""#).unwrap_err(),
        "JSON parse error, \\ud800 is not a valid Unicode character"
    );
    assert_eq!(
        one(br#""\ud800\u0041""#).unwrap_err(),
        "JSON parse error, \\ud800 is not a valid Unicode character"
    );
    assert_eq!(
        one(br#""\udc00""#).unwrap_err(),
        "JSON parse error, \\udc00 is not a valid Unicode character"
    );
    assert_eq!(
        one(br#""\uFFFF""#).unwrap_err(),
        "JSON parse error, \\uFFFF is not a valid Unicode character"
    );
    assert_eq!(
        one(br#""\u12""#).unwrap_err(),
        "JSON parse error, \\u12\" is not a valid Unicode character"
    );
    assert_eq!(
        one(br#""\x""#).unwrap_err(),
        "JSON parse error, invalid escape sequence in string"
    );
    assert_eq!(
        one(b"\"\xc3\x28\"").unwrap_err(),
        "JSON parse error, invalid UTF-8 sequence in string"
    );
    assert_eq!(
        one(b"\"\xef\xbf\xbe\"").unwrap_err(),
        "JSON parse error, invalid UTF-8 sequence in string"
    );
    assert_eq!(
        one(b"\"\xed\xa0\x80\"").unwrap_err(),
        "JSON parse error, invalid UTF-8 sequence in string"
    );
}

#[test]
fn numbers_like_qemu() {
    let one = |input: &str| match feed_all(format!("[{input}]").as_bytes()).as_slice() {
        [StreamEvent::Value(Value::Array(a))] => a[0].clone(),
        other => panic!("{other:?}"),
    };
    assert_eq!(one("-9223372036854775808").as_i64(), Some(i64::MIN));
    assert_eq!(one("18446744073709551615").as_u64(), Some(u64::MAX));
    let big = one("18446744073709551616");
    assert!(big.is_f64());
    assert_eq!(big.as_f64(), Some(18446744073709551616.0));
    assert!(one("-9223372036854775809").is_f64());
    assert!(one("1.0").is_f64());
    assert_eq!(one("-0").as_i64(), Some(0));
    assert_eq!(one("1.5e3").as_f64(), Some(1500.0));
    assert_eq!(one("1e999").as_f64(), Some(f64::MAX));
}

#[test]
fn split_feed_invariance() {
    let input: &[u8] = b"{'execute':'guest-sync','arguments':{'id':-5}}[1, 2.5e1, \"\\u00e9\\ud83d\\ude00\"]garbage \xff x\t\
        {\"a\":{\"b\":[true,false,null]}} 17 \"\xc3\xa9\" }";
    let whole = feed_all(input);
    assert!(whole.len() >= 7, "{whole:?}");
    for cut in 0..=input.len() {
        let mut s = JsonStreamer::default();
        let mut got = s.feed(&input[..cut]);
        got.extend(s.feed(&input[cut..]));
        assert_eq!(got, whole, "split at {cut}");
    }
    let mut s = JsonStreamer::default();
    let got: Vec<_> = input
        .iter()
        .flat_map(|b| s.feed(std::slice::from_ref(b)))
        .collect();
    assert_eq!(got, whole);
}

fn nested(depth: usize) -> Vec<u8> {
    let mut v = vec![b'['; depth];
    v.extend(std::iter::repeat_n(b']', depth));
    v
}

#[test]
fn depth_limit() {
    for depth in [1023, 1024] {
        match feed_all(&nested(depth)).as_slice() {
            [StreamEvent::Value(_)] => {}
            other => panic!("depth {depth}: {other:?}"),
        }
    }
    let events = feed_all(&nested(1025));
    assert_eq!(events[0], err("JSON nesting depth limit exceeded"));
    // The rest of the message is garbage: the 1025th '[' is dropped, so 1024 stray ']' follow, each an error.
    assert_eq!(events.len(), 1 + 1025);
    assert!(events[1..]
        .iter()
        .all(|e| *e == err("JSON parse error, expecting value")));
    // Recovery: a valid request right after still parses.
    let mut s = JsonStreamer::default();
    s.feed(&nested(1025));
    assert_eq!(s.feed(b"{}"), [val(json!({}))]);
}

#[test]
fn token_size_and_count_limits() {
    let limits = Limits {
        max_token_bytes: 100,
        max_tokens: 10,
        max_depth: 1024,
    };
    let mut s = JsonStreamer::new(limits);
    // 10 tokens are fine, the 11th is not.
    assert_eq!(s.feed(b"[1,2,3,[]]"), [val(json!([1, 2, 3, []]))]);
    // The 11th token is the ',' after 5; what follows the limit error is parsed on its own.
    assert_eq!(
        s.feed(b"[1,2,3,4,5,6]"),
        [
            err("JSON token count limit exceeded"),
            val(json!(6)),
            err("JSON parse error, expecting value")
        ]
    );
    let mut s = JsonStreamer::new(limits);
    let long = format!("[\"{}\",\"{}\"]", "a".repeat(60), "b".repeat(60));
    let ev = s.feed(long.as_bytes());
    assert_eq!(ev[0], err("JSON token size limit exceeded"));
    // An unterminated string grows to the limit, then is cut off.
    let mut s = JsonStreamer::new(limits);
    let mut events = s.feed(b"\"");
    for _ in 0..50 {
        events.extend(s.feed(&[b'x'; 7]));
        assert!(s.buffered() <= 101);
    }
    assert_eq!(events[0], err("JSON token size limit exceeded"));
}

#[test]
fn hostile_streams_stay_bounded() {
    // 64 MiB of '[' and of an unterminated string with the default limits: memory held never exceeds the limits.
    let limits = Limits::default();
    let chunk = vec![b'['; 1 << 20];
    let mut s = JsonStreamer::new(limits);
    let mut errors = 0;
    for _ in 0..64 {
        errors += s.feed(&chunk).len();
        assert!(s.buffered() <= limits.max_depth * 2);
    }
    assert_eq!(errors, (64 << 20) / 1025);
    let mut s = JsonStreamer::new(limits);
    s.feed(b"'");
    let chunk = vec![b'z'; 1 << 20];
    let mut events = Vec::new();
    for _ in 0..70 {
        events.extend(s.feed(&chunk));
        assert!(s.buffered() <= limits.max_token_bytes + 1);
    }
    assert_eq!(events.len(), 1);
    assert_eq!(events[0], err("JSON token size limit exceeded"));
}
