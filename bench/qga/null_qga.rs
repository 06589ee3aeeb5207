//! Null QGA agent for `bench/qga/run.py`'s ping phases: the floor of a guest-ping round trip.
//!
//! It does the least any agent must do per request and nothing else: one blocking thread, a blocking read of the
//! unix socket, a reply written with one write(2). It answers `guest-sync-delimited` (0xFF, then the id back) and
//! `guest-ping`; every other command gets a CommandNotFound error. No JSON parser, no event loop, no signal
//! handling (SIGTERM ends it with the default action). Whatever RTT it reaches is what the kernel's wake-ups and
//! the client cost; an agent's RTT ratio against qemu-ga cannot go below this one's (docs/BENCHMARKS.md, "Ping
//! floor").
//!
//! std only, built by run.py with plain `rustc -O`. Takes qemu-ga's `-p PATH` (unix-listen is the only method);
//! every other argument is ignored.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::{UnixListener, UnixStream};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let Some(path) = args
        .iter()
        .position(|a| a == "-p")
        .and_then(|i| args.get(i + 1))
    else {
        eprintln!("usage: null-qga -p SOCKET_PATH");
        std::process::exit(2);
    };
    let listener = match UnixListener::bind(path) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("null-qga: bind {path}: {e}");
            std::process::exit(1);
        }
    };
    // One client at a time, as qemu-ga serves its socket.
    for stream in listener.incoming().flatten() {
        serve(stream);
    }
}

fn serve(stream: UnixStream) {
    let Ok(mut out) = stream.try_clone() else {
        return;
    };
    let mut input = BufReader::with_capacity(64 * 1024, stream);
    let mut line = Vec::new();
    loop {
        line.clear();
        match input.read_until(b'\n', &mut line) {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        let reply = answer(&line);
        if out.write_all(&reply).is_err() {
            return;
        }
    }
}

/// The reply to one request line (the 0xFF of a sync request may precede it).
fn answer(line: &[u8]) -> Vec<u8> {
    let text = String::from_utf8_lossy(line);
    if text.contains("\"guest-sync-delimited\"") {
        let id: String = text
            .split("\"id\"")
            .nth(1)
            .unwrap_or("")
            .trim_start_matches([':', ' '])
            .chars()
            .take_while(|c| c.is_ascii_digit() || *c == '-')
            .collect();
        let mut reply = vec![0xff];
        reply.extend_from_slice(format!("{{\"return\": {id}}}\n").as_bytes());
        reply
    } else if text.contains("\"guest-ping\"") {
        b"{\"return\": {}}\n".to_vec()
    } else {
        b"{\"error\": {\"class\": \"CommandNotFound\", \"desc\": \"null-qga answers guest-ping only\"}}\n".to_vec()
    }
}
