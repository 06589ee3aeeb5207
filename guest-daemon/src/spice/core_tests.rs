//! Unit tests of the SPICE core ([`super::core::Core`]) over in-memory streams: each time the core opens the
//! port it gets one end of a tokio duplex pipe and the test plays the host (spice-server) on the other; session
//! agents are real agent queues ([`super::agent_queue`]) whose writer end the test reads, or leaves unread. The
//! core runs its real loop ([`super::core::Core::serve`]) with tokio's clock paused, so the stall and reopen
//! timers pass at once. The host is a fake only in that it is this test: the bytes are the vdagent wire format of
//! the protocol crate, and the black-box tests in `tests/tests/spice_daemon*.rs` run the same paths against real
//! peers.

use std::collections::VecDeque;
use std::io;
use std::time::Duration;

use guestlink_protocol::session::{GeometryMonitor, SessionMessage};
use guestlink_protocol::vdagent::{
    encode_message, Capabilities, ChunkMode, ClipboardType, FileXferData, FileXferResult,
    FileXferStart, Message, Port, Reassembler, ReassemblerConfig, Selection, WireFormat,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream, ReadHalf, WriteHalf};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::{timeout, Instant};

use super::agent_queue::{self, AgentRx, KillSwitch, AGENT_QUEUE};
use super::agents::Event;
use super::core::Core;
use super::logind::ActiveSession;
use super::port::{Opener, Stream};
use super::router::{our_caps, AgentId};
use super::tablet::Sink;

/// Bytes the pipe between the core and the host holds: small, so a host that keeps writing while the core does
/// not read blocks soon, as QEMU's chardev does.
const PIPE: usize = 8 * 1024;
/// How long a test waits for something that must happen (on the paused clock: only while nothing else can run).
const WAIT: Duration = Duration::from_secs(60);
/// A spice-gtk client's capabilities (CLIPBOARD_SELECTION and GRAB_SERIAL among them).
const CLIENT_CAPS: u32 = 0x0003_5077;

/// Hands the core a fresh duplex pipe on every open and the other end to the test.
struct Pipes(mpsc::UnboundedSender<DuplexStream>);

impl Opener for Pipes {
    type Port = Stream<DuplexStream>;
    async fn open(&mut self) -> io::Result<Self::Port> {
        let (ours, host) = tokio::io::duplex(PIPE);
        self.0.send(host).map_err(|_| io::ErrorKind::BrokenPipe)?;
        Ok(Stream(ours))
    }
    fn name(&self) -> String {
        "in-memory pipe".into()
    }
}

/// A running core with one active session, "s1".
struct Rig {
    ev: mpsc::Sender<Event>,
    _active: watch::Sender<Option<ActiveSession>>,
    pipes: mpsc::UnboundedReceiver<DuplexStream>,
    core: JoinHandle<anyhow::Result<()>>,
    _dir: tempfile::TempDir,
}

/// One session agent as the core sees it: the reading end of its queue and its kill switch.
struct Agent {
    id: AgentId,
    rx: AgentRx,
    kill: KillSwitch,
}

/// The host end of one opening of the port.
struct Host {
    rd: ReadHalf<DuplexStream>,
    wr: Option<WriteHalf<DuplexStream>>,
    reasm: Reassembler,
    got: VecDeque<Message>,
    wire: WireFormat,
}

fn geometry() -> SessionMessage {
    SessionMessage::Geometry {
        monitors: vec![GeometryMonitor {
            display_id: 0,
            x: 0,
            y: 0,
            width: 800,
            height: 600,
        }],
    }
}

fn rig(stall: Duration) -> Rig {
    let dir = tempfile::tempdir().unwrap();
    let (tx, pipes) = mpsc::unbounded_channel();
    let core = Core::new(Pipes(tx), Sink::Fake(dir.path().join("uinput")), stall);
    let (ev, ev_rx) = mpsc::channel(256);
    let (active, active_rx) = watch::channel(Some(ActiveSession {
        id: "s1".into(),
        locked: false,
        file_xfer_allowed: true,
    }));
    Rig {
        ev,
        _active: active,
        pipes,
        core: tokio::spawn(core.serve(ev_rx, active_rx)),
        _dir: dir,
    }
}

impl Rig {
    /// Agent `id` of `session` connects and (if `geometry`) reports its desktop, which makes the core open the port.
    async fn agent(&self, id: AgentId, session: &str, geometry: bool) -> Agent {
        let (tx, rx, kill) = agent_queue::channel();
        self.send(Event::Connected {
            id,
            session: session.into(),
            tx,
        })
        .await;
        if geometry {
            self.send(Event::Message(id, self::geometry())).await;
        }
        Agent { id, rx, kill }
    }

    async fn send(&self, ev: Event) {
        self.ev.send(ev).await.unwrap();
    }

    /// The host end of the core's next opening of the port, after the core's caps (`request = 1`, checked) and
    /// the host's answer with `caps`.
    async fn host(&mut self, caps: u32) -> Host {
        let pipe = timeout(WAIT, self.pipes.recv()).await.unwrap().unwrap();
        let (rd, wr) = tokio::io::split(pipe);
        let mut host = Host {
            rd,
            wr: Some(wr),
            reasm: Reassembler::new(ReassemblerConfig::host_side()),
            got: VecDeque::new(),
            wire: WireFormat::default(),
        };
        match host.recv().await {
            Message::AnnounceCapabilities { request, caps } => {
                assert!(request, "the core announces its caps with request = 1");
                assert_eq!(caps, our_caps());
            }
            m => panic!("first message on a new port: {m:?}"),
        }
        let caps = Capabilities::from_words(&[caps]);
        host.send(&Message::AnnounceCapabilities {
            request: true,
            caps: caps.clone(),
        })
        .await;
        match host.recv().await {
            Message::AnnounceCapabilities { request: false, .. } => {}
            m => panic!("answer to the host's caps: {m:?}"),
        }
        host.wire = WireFormat::negotiate(&our_caps(), &caps);
        host
    }
}

impl Agent {
    /// The next frame the core queued for this agent.
    async fn recv(&mut self) -> SessionMessage {
        let q = timeout(WAIT, self.rx.recv())
            .await
            .unwrap_or_else(|_| panic!("agent {}: no frame", self.id))
            .unwrap_or_else(|| panic!("agent {}: queue closed", self.id));
        q.msg
    }

    /// Frames until (and without) the first one `want` accepts, which is returned.
    async fn recv_until(&mut self, want: impl Fn(&SessionMessage) -> bool) -> SessionMessage {
        loop {
            let m = self.recv().await;
            if want(&m) {
                return m;
            }
        }
    }
}

impl Host {
    fn encode(&self, m: &Message) -> Vec<u8> {
        encode_message(Port::Client, m, self.wire, ChunkMode::Split).unwrap()
    }

    async fn send(&mut self, m: &Message) {
        let bytes = self.encode(m);
        self.wr.as_mut().unwrap().write_all(&bytes).await.unwrap();
    }

    /// The next whole message from the core (panics on EOF).
    async fn recv(&mut self) -> Message {
        self.recv_raw().await.unwrap()
    }

    /// The next message from the core, or `None` at EOF (the core closed the port).
    async fn recv_raw(&mut self) -> Option<Message> {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            if let Some(m) = self.got.pop_front() {
                return Some(m);
            }
            let n = timeout(WAIT, self.rd.read(&mut buf))
                .await
                .expect("the core sent nothing")
                .unwrap();
            if n == 0 {
                return None;
            }
            for ev in self.reasm.feed(&buf[..n]) {
                let (port, raw) = ev.unwrap();
                assert_eq!(port, Port::Client);
                self.got.push_back(raw.decode(self.wire).unwrap());
            }
        }
    }
}

/// A host CLIPBOARD message carrying `i` (to check the order frames arrive in).
fn numbered(i: usize) -> Message {
    Message::Clipboard {
        selection: Selection::Clipboard,
        data_type: ClipboardType::Utf8Text,
        data: i.to_string().into_bytes(),
    }
}

fn number_of(m: &SessionMessage) -> Option<usize> {
    match m {
        SessionMessage::ClipboardData { data, .. } => std::str::from_utf8(data).ok()?.parse().ok(),
        _ => None,
    }
}

/// The host writes `count` numbered messages from a task of its own (it blocks when the core stops reading).
fn flood(host: &mut Host, count: usize) -> JoinHandle<WriteHalf<DuplexStream>> {
    let bytes: Vec<u8> = (0..count).flat_map(|i| host.encode(&numbered(i))).collect();
    let mut wr = host.wr.take().unwrap();
    tokio::spawn(async move {
        // An error is the core closing the port (the stall test); the caller checks that by other means.
        let _ = wr.write_all(&bytes).await;
        wr
    })
}

/// Backlog: while the active agent's queue is full the core stops reading the port, so the host blocks instead
/// of the core buffering; the queue never holds more than its bound; once the agent reads, every frame arrives,
/// in order, and the host's writes go through.
#[tokio::test(start_paused = true)]
async fn full_agent_queue_pauses_the_port_and_nothing_is_lost() {
    let mut rig = rig(Duration::from_secs(30));
    let mut agent = rig.agent(1, "s1", true).await;
    let mut host = rig.host(CLIENT_CAPS).await;
    // Far more than the queue (256 frames) plus the pipe (8 KiB, about 180 of these) can take.
    let count = 3000;
    let writer = flood(&mut host, count);
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(
        !writer.is_finished(),
        "the host's writes must block while the agent does not read"
    );
    assert!(
        agent.rx.len() <= AGENT_QUEUE,
        "queue over its bound: {}",
        agent.rx.len()
    );
    assert_eq!(agent.rx.len(), AGENT_QUEUE, "the queue is filled first");
    let mut next = 0;
    while next < count {
        let m = agent.recv().await;
        if let Some(i) = number_of(&m) {
            assert_eq!(i, next, "frames out of order");
            next += 1;
        }
        assert!(agent.rx.len() <= AGENT_QUEUE);
    }
    timeout(WAIT, writer).await.unwrap().unwrap();
    assert!(!rig.core.is_finished());
}

/// Stall: an active agent that reads nothing while its queue is full is dropped after the stall timeout, not
/// before; its connection is ordered shut, and with no agent left the port is closed.
#[tokio::test(start_paused = true)]
async fn agent_not_reading_is_dropped_after_the_stall_timeout() {
    let stall = Duration::from_secs(7);
    let mut rig = rig(stall);
    let agent = rig.agent(1, "s1", true).await;
    let mut host = rig.host(CLIENT_CAPS).await;
    let _writer = flood(&mut host, 3000);
    let start = Instant::now();
    timeout(WAIT, agent.kill.killed())
        .await
        .expect("the stalled agent is never dropped");
    let waited = start.elapsed();
    assert!(
        waited >= stall,
        "dropped after {waited:?}, before the stall timeout"
    );
    assert!(waited < stall * 2, "dropped only after {waited:?}");
    // What the core had written before is still there; then EOF: no agent can serve, the port is closed.
    while host.recv_raw().await.is_some() {}
    assert!(!rig.core.is_finished());
}

/// A non-active agent whose queue is full is dropped at once; it never pauses the port.
#[tokio::test(start_paused = true)]
async fn a_full_queue_of_an_agent_not_active_drops_it_at_once() {
    let mut rig = rig(Duration::from_secs(30));
    let mut active = rig.agent(1, "s1", true).await;
    let idle = rig.agent(2, "s2", true).await;
    let mut host = rig.host(CLIENT_CAPS).await;
    // Only the active agent sees host traffic; agent 2 fills its own queue: each clipboard request of an agent
    // that is not active is answered at once with an empty clipboard, which it does not read.
    for _ in 0..AGENT_QUEUE + 1 {
        rig.send(Event::Message(
            2,
            SessionMessage::ClipboardRequest {
                selection: Selection::Clipboard,
                data_type: ClipboardType::Utf8Text,
            },
        ))
        .await;
    }
    // At once: long before the stall timeout (30 s) that applies to the active agent.
    timeout(Duration::from_secs(1), idle.kill.killed())
        .await
        .expect("the non-active agent with a full queue is not dropped at once");
    // The port kept serving the active agent.
    host.send(&numbered(7)).await;
    let m = active.recv_until(|m| number_of(m).is_some()).await;
    assert_eq!(number_of(&m), Some(7));
}

/// Streaming: a clipboard answer streamed by the active agent goes to the port as one message, in order, and a
/// port write caused meanwhile (the agent's next grab) is held until its last byte is through.
#[tokio::test(start_paused = true)]
async fn streamed_clipboard_answer_is_one_message_and_holds_other_writes() {
    let mut rig = rig(Duration::from_secs(30));
    let _agent = rig.agent(1, "s1", true).await;
    let mut host = rig.host(CLIENT_CAPS).await;
    let data: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    rig.send(Event::StreamBegin(
        1,
        SessionMessage::ClipboardData {
            selection: Selection::Clipboard,
            data_type: ClipboardType::Utf8Text,
            data: Vec::new(),
        },
        data.len(),
    ))
    .await;
    let (first, rest) = data.split_at(100_000);
    rig.send(Event::StreamData(1, first.to_vec())).await;
    rig.send(Event::Message(
        1,
        SessionMessage::ClipboardGrab {
            selection: Selection::Primary,
            types: vec![ClipboardType::Utf8Text],
        },
    ))
    .await;
    for piece in rest.chunks(64 * 1024) {
        rig.send(Event::StreamData(1, piece.to_vec())).await;
    }
    rig.send(Event::StreamEnd(1)).await;
    match host.recv().await {
        Message::Clipboard {
            selection: Selection::Clipboard,
            data_type: ClipboardType::Utf8Text,
            data: got,
        } => assert!(got == data, "streamed data differs"),
        m => panic!("expected the streamed clipboard, got {m:?}"),
    }
    match host.recv().await {
        Message::ClipboardGrab {
            selection: Selection::Primary,
            types,
            ..
        } => assert_eq!(types, vec![ClipboardType::Utf8Text]),
        m => panic!("expected the held grab after the stream, got {m:?}"),
    }
}

/// Streaming, the other way: a file transfer larger than the agent's queue (16 MiB) passes from the host to the
/// agent of the session active at START while the agent is slow: the host waits, then every DATA arrives in
/// order, and the agent's final status goes back to the host.
#[tokio::test(start_paused = true)]
async fn file_transfer_flows_to_the_agent_and_its_status_back() {
    let mut rig = rig(Duration::from_secs(30));
    let mut agent = rig.agent(1, "s1", true).await;
    let mut host = rig.host(CLIENT_CAPS).await;
    let pieces = 24usize;
    let piece = 1024 * 1024;
    host.send(&Message::FileXferStart(FileXferStart {
        id: 9,
        name: "big.bin".into(),
        size: (pieces * piece) as u64,
        file_xfer_nr: None,
        file_xfer_total: None,
    }))
    .await;
    match agent
        .recv_until(|m| matches!(m, SessionMessage::FileXferStart { .. }))
        .await
    {
        SessionMessage::FileXferStart { id, name, size } => {
            assert_eq!(
                (id, name.as_str(), size),
                (9, "big.bin", (pieces * piece) as u64)
            );
        }
        _ => unreachable!(),
    }
    // The host writes all data from its own task (the pipe holds far less) while the agent reads.
    let mut wr = host.wr.take().unwrap();
    let bytes: Vec<u8> = (0..pieces)
        .flat_map(|i| {
            host.encode(&Message::FileXferData(FileXferData {
                id: 9,
                data: vec![i as u8; piece],
            }))
        })
        .collect();
    let writer = tokio::spawn(async move { wr.write_all(&bytes).await.map(|()| wr) });
    // The agent does not read for a while: its queue fills up to its byte budget and the host waits.
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(
        !writer.is_finished(),
        "the host must wait for the slow agent"
    );
    assert!(agent.rx.len() < pieces);
    for i in 0..pieces {
        match agent.recv().await {
            SessionMessage::FileXferData { id: 9, data } => {
                assert_eq!(data.len(), piece);
                assert!(data.iter().all(|&b| b == i as u8), "piece {i} out of order");
            }
            m => panic!("expected data piece {i}, got {m:?}"),
        }
    }
    host.wr = Some(timeout(WAIT, writer).await.unwrap().unwrap().unwrap());
    rig.send(Event::Message(
        1,
        SessionMessage::FileXferStatus {
            id: 9,
            status: FileXferResult::Success.as_u32(),
            disk_free_space: None,
            error_code: None,
        },
    ))
    .await;
    match host.recv().await {
        Message::FileXferStatus(st) => {
            assert_eq!((st.id, st.result), (9, FileXferResult::Success));
        }
        m => panic!("expected the transfer's status, got {m:?}"),
    }
}

/// Reset: when the port fails (the host end goes away) the core reopens it, announces its caps again with
/// `request = 1`, tells the agent the client left and came back, and then follows the new host's caps, not the
/// old ones (here: no CLIPBOARD_SELECTION prefix any more).
#[tokio::test(start_paused = true)]
async fn port_failure_reopens_and_the_newest_caps_govern() {
    let mut rig = rig(Duration::from_secs(30));
    let mut agent = rig.agent(1, "s1", true).await;
    let host = rig.host(CLIENT_CAPS).await;
    assert!(host.wire.selection);
    assert!(matches!(
        agent
            .recv_until(|m| matches!(m, SessionMessage::ClientConnected))
            .await,
        SessionMessage::ClientConnected
    ));
    drop(host);
    // Without CLIPBOARD_SELECTION (bit 6) nor GRAB_SERIAL (bit 17).
    let legacy = CLIENT_CAPS & !(1 << 6) & !(1 << 17);
    let mut host = rig.host(legacy).await;
    assert!(!host.wire.selection);
    assert!(matches!(
        agent
            .recv_until(|m| matches!(
                m,
                SessionMessage::ClientDisconnected | SessionMessage::ClientConnected
            ))
            .await,
        SessionMessage::ClientDisconnected
    ));
    assert!(matches!(
        agent
            .recv_until(|m| matches!(m, SessionMessage::ClientConnected))
            .await,
        SessionMessage::ClientConnected
    ));
    rig.send(Event::Message(
        1,
        SessionMessage::ClipboardGrab {
            selection: Selection::Clipboard,
            types: vec![ClipboardType::Utf8Text, ClipboardType::ImagePng],
        },
    ))
    .await;
    // Decoded with the new caps' wire format: a selection prefix or serial would show up as extra types.
    match host.recv().await {
        Message::ClipboardGrab { serial, types, .. } => {
            assert_eq!(serial, None);
            assert_eq!(
                types,
                vec![ClipboardType::Utf8Text, ClipboardType::ImagePng]
            );
        }
        m => panic!("expected the agent's grab, got {m:?}"),
    }
    // And the host's traffic under the new caps reaches the agent.
    host.send(&numbered(3)).await;
    let m = agent.recv_until(|m| number_of(m).is_some()).await;
    assert_eq!(number_of(&m), Some(3));
}

/// A port that hands out one queued host buffer (or what fits of it) per read, as a virtio-serial port does.
struct VirtioLike(VecDeque<Vec<u8>>);

impl VirtioLike {
    fn take(&mut self, buf: &mut [u8]) -> Option<usize> {
        let front = self.0.front_mut()?;
        let n = front.len().min(buf.len());
        buf[..n].copy_from_slice(&front[..n]);
        front.drain(..n);
        if front.is_empty() {
            self.0.pop_front();
        }
        Some(n)
    }
}

impl super::port::Link for VirtioLike {
    async fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self.take(buf) {
            Some(n) => Ok(n),
            None => std::future::pending().await,
        }
    }
    fn try_read(&mut self, buf: &mut [u8]) -> Option<usize> {
        self.take(buf)
    }
    async fn write_all(&mut self, _data: &[u8]) -> io::Result<()> {
        Ok(())
    }
    async fn write_file(
        &mut self,
        _f: &std::fs::File,
        _len: usize,
        _t: Duration,
    ) -> io::Result<()> {
        Ok(())
    }
}

#[tokio::test(start_paused = true)]
async fn a_port_read_takes_every_buffer_already_there_up_to_its_size() {
    use super::core::read_port;
    // 100 host buffers of 4 KiB, each filled with its own index, then one of 10 bytes.
    let mut bufs: VecDeque<Vec<u8>> = (0..100u8).map(|i| vec![i; 4096]).collect();
    bufs.push_back(vec![0xee; 10]);
    let mut port = VirtioLike(bufs);
    let mut buf = vec![0u8; 256 * 1024];

    let n = read_port(Some(&mut port), &mut buf).await.unwrap();
    assert_eq!(
        n,
        256 * 1024,
        "one pass fills the buffer from 64 host buffers"
    );
    assert!(buf[..n]
        .chunks(4096)
        .zip(0u8..)
        .all(|(c, i)| c.iter().all(|&b| b == i)));

    let n = read_port(Some(&mut port), &mut buf).await.unwrap();
    assert_eq!(n, 36 * 4096 + 10, "the rest, without waiting for more");
    assert!(buf[..36 * 4096]
        .chunks(4096)
        .zip(64u8..)
        .all(|(c, i)| c.iter().all(|&b| b == i)));
    assert_eq!(&buf[36 * 4096..n], &[0xee; 10]);

    // Nothing queued: the read waits, it does not return 0 (which would mean the host closed).
    assert!(
        timeout(Duration::from_secs(5), read_port(Some(&mut port), &mut buf))
            .await
            .is_err()
    );

    // A buffer that does not fit is split: the next read starts where this one stopped.
    let mut port = VirtioLike((0..3u8).map(|i| vec![i; 4096]).collect());
    let mut small = vec![0u8; 6000];
    assert_eq!(read_port(Some(&mut port), &mut small).await.unwrap(), 6000);
    assert_eq!(read_port(Some(&mut port), &mut small).await.unwrap(), 6000);
    assert_eq!(&small[..2192], &[1u8; 2192][..]);
    assert_eq!(&small[2192..], &[2u8; 3808][..]);
}
