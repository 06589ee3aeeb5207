//! guestlink-session's X11 clipboard against a real Xvfb and xclip, driven by a fake guestlinkd.
//!
//! Host → guest: a GRAB makes the agent own the selection; `xclip -o` pastes, the agent asks the fake daemon for
//! the data and serves it (INCR for 16 MiB). Guest → host: `xclip -i` owns the selection; the agent sends a GRAB
//! and answers REQUESTs with the data (INCR read for 16 MiB), honours the max-clipboard cap and sends a RELEASE
//! when the owner goes away. Run: `cargo test -p tests --test session_x11_clipboard`.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test target: unwrap is how a set-up step fails

use guestlink_tests::x11 as support;

use std::time::Instant;

use guestlink_protocol::session::SessionMessage;
use guestlink_protocol::vdagent::{ClipboardType, Selection};
use support::{tools_present, Harness, Xvfb};

fn sel_name(s: Selection) -> &'static str {
    if s == Selection::Primary {
        "primary"
    } else {
        "clipboard"
    }
}

/// Host grab → paste with xclip → the agent requests → data served.
fn host_to_guest(
    h: &mut Harness,
    x: &Xvfb,
    sel: Selection,
    ty: ClipboardType,
    target: &str,
    data: &[u8],
) {
    h.send(&SessionMessage::ClipboardGrab {
        selection: sel,
        types: vec![ty],
    });
    x.wait_for_target(sel_name(sel), target);
    let paste = std::thread::scope(|s| {
        let t = s.spawn(|| x.paste(sel_name(sel), Some(target)));
        h.expect("clipboard request", |m| {
            matches!(m, SessionMessage::ClipboardRequest { selection, data_type } if *selection == sel && *data_type == ty)
        });
        h.send(&SessionMessage::ClipboardData {
            selection: sel,
            data_type: ty,
            data: data.to_vec(),
        });
        t.join().expect("paste thread")
    });
    let paste = paste.expect("xclip -o failed");
    assert_eq!(paste.len(), data.len(), "pasted length");
    assert!(paste == data, "pasted bytes differ");
}

#[test]
fn host_text_reaches_guest_clipboard_and_primary() {
    if !tools_present() {
        return;
    }
    let x = Xvfb::start(1024, 768);
    let mut h = Harness::start(&x);
    let text = "héllo from the host ✓\nline 2";
    host_to_guest(
        &mut h,
        &x,
        Selection::Clipboard,
        ClipboardType::Utf8Text,
        "UTF8_STRING",
        text.as_bytes(),
    );
    host_to_guest(
        &mut h,
        &x,
        Selection::Primary,
        ClipboardType::Utf8Text,
        "UTF8_STRING",
        b"primary text",
    );
    // The data is cached for the grab: another paste (as STRING, Latin-1) needs no new request.
    let latin1 = x.paste("clipboard", Some("STRING")).expect("STRING paste");
    let expected: Vec<u8> = text
        .chars()
        .map(|c| u8::try_from(u32::from(c)).unwrap_or(b'?'))
        .collect();
    assert_eq!(latin1, expected);
    let targets = String::from_utf8(x.paste("clipboard", Some("TARGETS")).unwrap()).unwrap();
    for t in [
        "TARGETS",
        "UTF8_STRING",
        "text/plain;charset=utf-8",
        "STRING",
        "TEXT",
    ] {
        assert!(
            targets.lines().any(|l| l == t),
            "{t} missing from TARGETS: {targets}"
        );
    }
    // Host release → the agent gives the selection up: xclip finds nothing.
    h.send(&SessionMessage::ClipboardRelease {
        selection: Selection::Clipboard,
    });
    let deadline = Instant::now() + support::WAIT;
    while x.paste("clipboard", Some("TARGETS")).is_some() {
        assert!(
            Instant::now() < deadline,
            "selection still owned after RELEASE"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

#[test]
fn host_16_mib_text_is_served_with_incr() {
    if !tools_present() {
        return;
    }
    let x = Xvfb::start(1024, 768);
    let mut h = Harness::start(&x);
    let data: Vec<u8> = (0..16 * 1024 * 1024u32)
        .map(|i| b'a' + (i % 26) as u8)
        .collect();
    let t = Instant::now();
    host_to_guest(
        &mut h,
        &x,
        Selection::Clipboard,
        ClipboardType::Utf8Text,
        "UTF8_STRING",
        &data,
    );
    eprintln!(
        "16 MiB host→guest paste (grab..xclip exit): {:.2?}",
        t.elapsed()
    );
    assert!(h.log().contains("serving with INCR"), "INCR was not used");
}

#[test]
fn host_png_image_target() {
    if !tools_present() {
        return;
    }
    let x = Xvfb::start(1024, 768);
    let mut h = Harness::start(&x);
    // A PNG signature plus arbitrary bytes: the agent must not alter image data.
    let mut png = b"\x89PNG\r\n\x1a\n".to_vec();
    png.extend((0..300_000u32).map(|i| (i * 7 % 251) as u8));
    host_to_guest(
        &mut h,
        &x,
        Selection::Clipboard,
        ClipboardType::ImagePng,
        "image/png",
        &png,
    );
    h.send(&SessionMessage::ClipboardGrab {
        selection: Selection::Clipboard,
        types: vec![ClipboardType::ImageBmp],
    });
    x.wait_for_target("clipboard", "image/x-MS-bmp");
}

#[test]
fn host_empty_or_missing_answers_refuse_the_paste() {
    if !tools_present() {
        return;
    }
    let x = Xvfb::start(1024, 768);
    let mut h = Harness::start(&x);
    h.send(&SessionMessage::ClipboardGrab {
        selection: Selection::Clipboard,
        types: vec![ClipboardType::Utf8Text],
    });
    // Not UTF8_STRING: xclip retries a refused UTF8_STRING as STRING, which would be a second request.
    const T: &str = "text/plain;charset=utf-8";
    x.wait_for_target("clipboard", T);
    // An empty NONE answer refuses the paste at once.
    let paste = std::thread::scope(|s| {
        let t = s.spawn(|| x.paste("clipboard", Some(T)));
        h.expect("request", |m| {
            matches!(m, SessionMessage::ClipboardRequest { .. })
        });
        h.send(&SessionMessage::ClipboardData {
            selection: Selection::Clipboard,
            data_type: ClipboardType::None,
            data: Vec::new(),
        });
        t.join().unwrap()
    });
    assert_eq!(paste, None, "an empty answer must refuse the paste");
    // No answer at all: refused after the agent's 15 s request timeout, not hung.
    let t = Instant::now();
    let paste = std::thread::scope(|s| {
        let t = s.spawn(|| x.paste("clipboard", Some(T)));
        h.expect("request", |m| {
            matches!(m, SessionMessage::ClipboardRequest { .. })
        });
        t.join().unwrap()
    });
    let took = t.elapsed();
    assert_eq!(paste, None);
    assert!(
        took >= std::time::Duration::from_secs(14),
        "refused after {took:?}"
    );
    // The selection still works afterwards.
    let text = b"late but fine";
    let paste = std::thread::scope(|s| {
        let t = s.spawn(|| x.paste("clipboard", Some(T)));
        h.expect("request", |m| {
            matches!(m, SessionMessage::ClipboardRequest { .. })
        });
        h.send(&SessionMessage::ClipboardData {
            selection: Selection::Clipboard,
            data_type: ClipboardType::Utf8Text,
            data: text.to_vec(),
        });
        t.join().unwrap()
    });
    assert_eq!(paste.as_deref(), Some(&text[..]));
}

/// xclip copies in the guest → GRAB to the host → REQUEST → the data comes back.
fn guest_to_host(h: &mut Harness, x: &Xvfb, sel: Selection, data: &[u8]) -> std::process::Child {
    let xclip = x.copy(sel_name(sel), None, data);
    h.expect("grab", |m| {
        matches!(m, SessionMessage::ClipboardGrab { selection, types } if *selection == sel && types.contains(&ClipboardType::Utf8Text))
    });
    let t = Instant::now();
    h.send(&SessionMessage::ClipboardRequest {
        selection: sel,
        data_type: ClipboardType::Utf8Text,
    });
    let m = h.expect(
        "data",
        |m| matches!(m, SessionMessage::ClipboardData { selection, .. } if *selection == sel),
    );
    let SessionMessage::ClipboardData {
        data_type,
        data: got,
        ..
    } = m
    else {
        unreachable!()
    };
    if data.len() > 1 << 20 {
        eprintln!(
            "{} MiB guest→host (request..data): {:.2?}",
            data.len() >> 20,
            t.elapsed()
        );
    }
    assert_eq!(data_type, ClipboardType::Utf8Text);
    assert_eq!(got.len(), data.len());
    assert!(got == data, "guest data differs");
    xclip
}

#[test]
fn guest_copy_becomes_grab_and_is_served_both_selections() {
    if !tools_present() {
        return;
    }
    let x = Xvfb::start(1024, 768);
    let mut h = Harness::start(&x);
    let mut c = guest_to_host(
        &mut h,
        &x,
        Selection::Clipboard,
        "guest says hi ✓".as_bytes(),
    );
    let mut p = guest_to_host(&mut h, &x, Selection::Primary, b"guest primary");
    // The owner exits → RELEASE.
    c.kill().unwrap();
    c.wait().unwrap();
    h.expect("release", |m| {
        matches!(
            m,
            SessionMessage::ClipboardRelease {
                selection: Selection::Clipboard
            }
        )
    });
    // A host request for a selection nobody owns gets an empty NONE answer.
    h.send(&SessionMessage::ClipboardRequest {
        selection: Selection::Clipboard,
        data_type: ClipboardType::Utf8Text,
    });
    h.expect("empty data", |m| {
        matches!(m, SessionMessage::ClipboardData { selection: Selection::Clipboard, data_type: ClipboardType::None, data } if data.is_empty())
    });
    p.kill().unwrap();
    p.wait().unwrap();
}

#[test]
fn guest_image_and_latin1_string_copies() {
    if !tools_present() {
        return;
    }
    let x = Xvfb::start(1024, 768);
    let mut h = Harness::start(&x);
    let mut png = b"\x89PNG\r\n\x1a\n".to_vec();
    png.extend((0..100_000u32).map(|i| (i * 13 % 256) as u8));
    let mut c = x.copy("clipboard", Some("image/png"), &png);
    h.expect("image grab", |m| {
        matches!(m, SessionMessage::ClipboardGrab { selection: Selection::Clipboard, types } if types == &[ClipboardType::ImagePng])
    });
    h.send(&SessionMessage::ClipboardRequest {
        selection: Selection::Clipboard,
        data_type: ClipboardType::ImagePng,
    });
    let m = h.expect("image data", |m| {
        matches!(m, SessionMessage::ClipboardData { .. })
    });
    assert!(
        matches!(m, SessionMessage::ClipboardData { data_type: ClipboardType::ImagePng, data, .. } if data == png)
    );
    c.kill().unwrap();
    c.wait().unwrap();
    // An owner offering only STRING (ISO 8859-1): the host gets UTF-8.
    let mut c = x.copy("clipboard", Some("STRING"), &[b'c', b'a', b'f', 0xe9]);
    h.expect("text grab", |m| {
        matches!(m, SessionMessage::ClipboardGrab { types, .. } if types == &[ClipboardType::Utf8Text])
    });
    h.send(&SessionMessage::ClipboardRequest {
        selection: Selection::Clipboard,
        data_type: ClipboardType::Utf8Text,
    });
    let m = h.expect("text data", |m| {
        matches!(m, SessionMessage::ClipboardData { .. })
    });
    assert!(matches!(m, SessionMessage::ClipboardData { data, .. } if data == "café".as_bytes()));
    c.kill().unwrap();
    c.wait().unwrap();
}

#[test]
fn guest_16_mib_read_with_incr_and_max_clipboard_cap() {
    if !tools_present() {
        return;
    }
    let x = Xvfb::start(1024, 768);
    let mut h = Harness::start(&x);
    let data: Vec<u8> = (0..16 * 1024 * 1024u32)
        .map(|i| b'A' + (i % 23) as u8)
        .collect();
    let mut c = guest_to_host(&mut h, &x, Selection::Clipboard, &data);
    assert!(h.log().contains("reading with INCR"), "INCR read not used");
    // With a 1 MiB cap the same data is refused (empty NONE), and the agent keeps working.
    h.send(&SessionMessage::MaxClipboard { max: 1 << 20 });
    h.send(&SessionMessage::ClipboardRequest {
        selection: Selection::Clipboard,
        data_type: ClipboardType::Utf8Text,
    });
    h.expect("capped data", |m| {
        matches!(m, SessionMessage::ClipboardData { data_type: ClipboardType::None, data, .. } if data.is_empty())
    });
    c.kill().unwrap();
    c.wait().unwrap();
    h.send(&SessionMessage::MaxClipboard { max: -1 });
    let mut c = guest_to_host(&mut h, &x, Selection::Clipboard, b"small after cap");
    c.kill().unwrap();
    c.wait().unwrap();
    assert!(h.alive());
}
