//! Logging through `tracing`: stderr by default, journald when started by systemd with `JOURNAL_STREAM` set, or
//! the `-l` log file (opened in append mode on the first write, so a daemon that starts frozen defers it).
//!
//! While the filesystems are frozen nothing may be written to disk (a write to a frozen fs blocks the daemon), so
//! log lines are kept in a bounded memory buffer and written out after the thaw. Levels: errors and warnings and
//! rare state changes (freeze, thaw, hooks) at info by default; `-v` adds the per-command audit (debug).

use std::collections::VecDeque;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use tracing_subscriber::filter::{LevelFilter, Targets};
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::Layer;

/// Most bytes of log kept in memory while frozen; older lines are dropped (and counted) beyond it.
pub const FROZEN_BUFFER_BYTES: usize = 1 << 20;

#[derive(Debug)]
enum Target {
    Stderr,
    File { path: PathBuf, file: Option<File> },
}

#[derive(Debug)]
struct SinkState {
    target: Target,
    buffer: VecDeque<Vec<u8>>,
    buffered: usize,
    dropped: u64,
}

/// Where formatted log lines go; buffers while frozen.
#[derive(Debug)]
pub struct Sink {
    frozen: AtomicBool,
    state: Mutex<SinkState>,
}

impl Sink {
    fn new(logfile: Option<PathBuf>) -> Sink {
        Sink {
            frozen: AtomicBool::new(false),
            state: Mutex::new(SinkState {
                target: logfile.map_or(Target::Stderr, |path| Target::File { path, file: None }),
                buffer: VecDeque::new(),
                buffered: 0,
                dropped: 0,
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, SinkState> {
        // A panic while holding the lock only leaves a partially written log line behind: keep logging.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn write_line(&self, line: &[u8]) {
        let mut st = self.lock();
        if self.frozen.load(Ordering::SeqCst) {
            st.buffered += line.len();
            st.buffer.push_back(line.to_vec());
            while st.buffered > FROZEN_BUFFER_BYTES {
                match st.buffer.pop_front() {
                    Some(old) => {
                        st.buffered -= old.len();
                        st.dropped += 1;
                    }
                    None => break,
                }
            }
            return;
        }
        write_target(&mut st.target, line);
    }

    /// Enter or leave the frozen state; leaving writes out the buffered lines.
    pub fn set_frozen(&self, frozen: bool) {
        let mut st = self.lock();
        self.frozen.store(frozen, Ordering::SeqCst);
        if frozen {
            return;
        }
        let lines: Vec<Vec<u8>> = st.buffer.drain(..).collect();
        st.buffered = 0;
        let dropped = std::mem::take(&mut st.dropped);
        if dropped > 0 {
            let note =
                format!("guestlinkd: {dropped} log line(s) dropped while frozen (buffer full)\n");
            write_target(&mut st.target, note.as_bytes());
        }
        for line in lines {
            write_target(&mut st.target, &line);
        }
    }

    /// Whether lines are currently buffered instead of written.
    pub fn is_frozen(&self) -> bool {
        self.frozen.load(Ordering::SeqCst)
    }

    #[cfg(test)]
    fn buffered_lines(&self) -> usize {
        self.lock().buffer.len()
    }
}

fn write_target(target: &mut Target, line: &[u8]) {
    match target {
        Target::Stderr => {
            let _ = io::stderr().write_all(line);
        }
        Target::File { path, file } => {
            if file.is_none() {
                match OpenOptions::new()
                    .append(true)
                    .create(true)
                    .mode(0o600)
                    .custom_flags(libc::O_CLOEXEC)
                    .open(&*path)
                {
                    Ok(f) => *file = Some(f),
                    Err(e) => {
                        let _ = writeln!(
                            io::stderr(),
                            "unable to open log file {}: {e}",
                            path.display()
                        );
                        let _ = io::stderr().write_all(line);
                        return;
                    }
                }
            }
            if let Some(f) = file {
                let _ = f.write_all(line);
            }
        }
    }
}

/// The `io::Write` handed to the fmt layer for one event.
#[derive(Debug)]
pub struct SinkWriter {
    sink: Arc<Sink>,
    line: Vec<u8>,
}

impl Write for SinkWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.line.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Drop for SinkWriter {
    fn drop(&mut self) {
        if !self.line.is_empty() {
            self.sink.write_line(&self.line);
        }
    }
}

/// `MakeWriter` for [`Sink`].
#[derive(Debug, Clone)]
pub struct SinkMaker(Arc<Sink>);

impl<'a> MakeWriter<'a> for SinkMaker {
    type Writer = SinkWriter;
    fn make_writer(&'a self) -> SinkWriter {
        SinkWriter {
            sink: Arc::clone(&self.0),
            line: Vec::new(),
        }
    }
}

static SINK: OnceLock<Arc<Sink>> = OnceLock::new();

/// Whether [`init`] has run (errors before it go straight to stderr).
pub fn is_initialized() -> bool {
    SINK.get().is_some()
}

/// Tell the logger whether the filesystems are frozen (called by the freezer).
pub fn set_frozen(frozen: bool) {
    if let Some(s) = SINK.get() {
        s.set_frozen(frozen);
    }
}

/// The level filter: `GUESTLINK_LOG` (`level` or `target=level`, comma-separated) when it is set and valid, else
/// debug with `verbose` and info without. A `Targets` filter, not an `EnvFilter`: no regex engine in the daemon.
fn filter(verbose: bool, spec: Option<&str>) -> Targets {
    let default = if verbose {
        LevelFilter::DEBUG
    } else {
        LevelFilter::INFO
    };
    spec.and_then(|s| s.parse::<Targets>().ok())
        .unwrap_or_else(|| Targets::new().with_default(default))
}

/// Install the global subscriber. `verbose` = debug level; `GUESTLINK_LOG` overrides (see [`filter`]).
pub fn init(logfile: Option<PathBuf>, verbose: bool, start_frozen: bool) {
    let sink = Arc::new(Sink::new(logfile.clone()));
    sink.set_frozen(start_frozen);
    let _ = SINK.set(Arc::clone(&sink));
    let filter = filter(verbose, std::env::var("GUESTLINK_LOG").ok().as_deref());
    let journald = if logfile.is_none() && std::env::var_os("JOURNAL_STREAM").is_some() {
        tracing_journald::layer().ok()
    } else {
        None
    };
    let registry = tracing_subscriber::registry().with(filter);
    match journald {
        Some(j) => {
            // journald while thawed; while frozen the lines go to the memory buffer and are written to stderr (the
            // journal stream) after the thaw.
            let jsink = Arc::clone(&sink);
            let j = j.with_filter(tracing_subscriber::filter::filter_fn(move |_| {
                !jsink.is_frozen()
            }));
            let bsink = Arc::clone(&sink);
            let fmt = tracing_subscriber::fmt::layer()
                .with_writer(SinkMaker(Arc::clone(&sink)))
                .with_ansi(false)
                .without_time()
                .with_filter(tracing_subscriber::filter::filter_fn(move |_| {
                    bsink.is_frozen()
                }));
            let _ = registry.with(j).with(fmt).try_init();
        }
        None => {
            let fmt = tracing_subscriber::fmt::layer()
                .with_writer(SinkMaker(sink))
                .with_ansi(false);
            let _ = registry.with(fmt).try_init();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracing::Level;

    #[test]
    fn guestlink_log_sets_levels_per_target_and_falls_back_when_invalid() {
        let f = filter(false, Some("guestlinkd=trace,zbus=warn"));
        assert!(f.would_enable("guestlinkd::server", &Level::TRACE));
        assert!(!f.would_enable("zbus::conn", &Level::INFO));
        assert!(f.would_enable("zbus::conn", &Level::WARN));
        let f = filter(false, Some("debug"));
        assert!(f.would_enable("guestlinkd", &Level::DEBUG));
        assert!(!f.would_enable("guestlinkd", &Level::TRACE));
        for (verbose, spec) in [(false, None), (false, Some("guestlinkd=nonsense"))] {
            let f = filter(verbose, spec);
            assert!(f.would_enable("guestlinkd", &Level::INFO));
            assert!(!f.would_enable("guestlinkd", &Level::DEBUG));
        }
        assert!(filter(true, None).would_enable("guestlinkd", &Level::DEBUG));
    }

    #[test]
    fn frozen_lines_are_buffered_then_flushed_to_the_deferred_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log");
        let sink = Sink::new(Some(path.clone()));
        sink.set_frozen(true);
        sink.write_line(b"while frozen\n");
        assert!(!path.exists(), "nothing may touch the disk while frozen");
        assert_eq!(sink.buffered_lines(), 1);
        sink.set_frozen(false);
        sink.write_line(b"after\n");
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "while frozen\nafter\n"
        );
    }

    #[test]
    fn buffer_is_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log");
        let sink = Sink::new(Some(path.clone()));
        sink.set_frozen(true);
        let line = vec![b'x'; 1023];
        for _ in 0..(FROZEN_BUFFER_BYTES / 1024 + 100) {
            let mut l = line.clone();
            l.push(b'\n');
            sink.write_line(&l);
        }
        assert!(sink.buffered_lines() <= FROZEN_BUFFER_BYTES / 1024);
        sink.set_frozen(false);
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(
            text.starts_with("guestlinkd: 100 log line(s) dropped while frozen"),
            "{}",
            &text[..80]
        );
    }
}
