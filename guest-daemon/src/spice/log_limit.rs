//! Rate-limited, truncated logging of values the host or a local user controls (issue 16 finding 7).
//!
//! Every call site of [`log_limited!`] has its own budget: at most [`BURST`] messages per [`WINDOW`]; the rest of
//! the window is dropped and counted, and the next message that gets through says how many were suppressed. The
//! same idea as firecracker's rate-limited logger (a per-call-site limiter in front of the logger); this is our own
//! small version on top of `tracing`. Values from the wire are logged through [`truncated`] and [`Words`], so a
//! 64 MiB file name or a capabilities message of 4 M words makes one short line.

use std::fmt;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Messages allowed per call site and window.
pub const BURST: u32 = 10;
/// The rate-limit window.
pub const WINDOW: Duration = Duration::from_secs(10);
/// Longest host-controlled string logged, in bytes.
pub const MAX_LOGGED_TEXT: usize = 128;
/// Most capability words logged.
pub const MAX_LOGGED_WORDS: usize = 4;

/// The budget of one call site (a `static` made by [`log_limited!`]).
#[derive(Debug)]
pub struct RateLimit {
    /// The window the counts are for (index since the process epoch).
    window: AtomicU64,
    /// Messages logged in that window.
    logged: AtomicU32,
    /// Messages dropped since the last one logged.
    suppressed: AtomicU32,
}

fn window_index(now: Instant) -> u64 {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    let epoch = *EPOCH.get_or_init(|| now);
    let elapsed = now.saturating_duration_since(epoch).as_millis();
    u64::try_from(elapsed / WINDOW.as_millis()).unwrap_or(u64::MAX)
}

impl RateLimit {
    /// A fresh budget.
    pub const fn new() -> Self {
        Self {
            window: AtomicU64::new(0),
            logged: AtomicU32::new(0),
            suppressed: AtomicU32::new(0),
        }
    }

    /// Whether a message may be logged now; if so, how many were dropped before it.
    pub fn check(&self) -> Option<u32> {
        self.check_at(Instant::now())
    }

    /// [`RateLimit::check`] at time `now` (tests).
    pub fn check_at(&self, now: Instant) -> Option<u32> {
        let w = window_index(now);
        if self.window.swap(w, Ordering::Relaxed) != w {
            self.logged.store(0, Ordering::Relaxed);
        }
        if self.logged.fetch_add(1, Ordering::Relaxed) < BURST {
            Some(self.suppressed.swap(0, Ordering::Relaxed))
        } else {
            self.suppressed.fetch_add(1, Ordering::Relaxed);
            None
        }
    }
}

impl Default for RateLimit {
    fn default() -> Self {
        Self::new()
    }
}

/// `tracing::<level>!(args…)`, at most [`BURST`] times per [`WINDOW`] at this call site.
macro_rules! log_limited {
    ($level:ident, $($arg:tt)+) => {{
        static LIMIT: $crate::spice::log_limit::RateLimit = $crate::spice::log_limit::RateLimit::new();
        if let Some(suppressed) = LIMIT.check() {
            if suppressed > 0 {
                tracing::$level!(suppressed, "rate limit: similar messages were suppressed");
            }
            tracing::$level!($($arg)+);
        }
    }};
}
pub(crate) use log_limited;

/// `text` cut to [`MAX_LOGGED_TEXT`] bytes (at a character boundary), with its full length when cut; control
/// characters are escaped by the `Debug` form used to log it.
#[derive(Clone, Copy)]
pub struct Truncated<'a>(&'a str);

/// See [`Truncated`].
pub fn truncated(text: &str) -> Truncated<'_> {
    Truncated(text)
}

impl fmt::Debug for Truncated<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.len() <= MAX_LOGGED_TEXT {
            return fmt::Debug::fmt(self.0, f);
        }
        let mut end = MAX_LOGGED_TEXT;
        while !self.0.is_char_boundary(end) {
            end -= 1;
        }
        fmt::Debug::fmt(&self.0[..end], f)?;
        write!(f, "… ({} bytes)", self.0.len())
    }
}

/// Capability words as logged: the first [`MAX_LOGGED_WORDS`] in hex, and how many there were.
#[derive(Clone, Copy)]
pub struct Words<'a>(pub &'a [u32]);

impl fmt::Debug for Words<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let shown = &self.0[..self.0.len().min(MAX_LOGGED_WORDS)];
        write!(f, "[")?;
        for (i, w) in shown.iter().enumerate() {
            if i > 0 {
                write!(f, ", ")?;
            }
            write!(f, "{w:#010x}")?;
        }
        if self.0.len() > shown.len() {
            write!(f, ", … {} words", self.0.len())?;
        }
        write!(f, "]")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_site_logs_a_burst_per_window_then_counts_what_it_dropped() {
        let limit = RateLimit::new();
        let t0 = Instant::now();
        // Align to the start of a window.
        for _ in 0..BURST {
            assert!(limit.check_at(t0).is_some());
        }
        for _ in 0..1000 {
            assert!(limit.check_at(t0).is_none());
        }
        let later = t0 + WINDOW + WINDOW;
        assert_eq!(limit.check_at(later), Some(1000));
        assert_eq!(limit.check_at(later), Some(0));
    }

    #[test]
    fn long_values_are_cut_and_words_summarised() {
        let name = "é".repeat(10_000);
        let s = format!("{:?}", truncated(&name));
        assert!(s.len() < MAX_LOGGED_TEXT + 40, "{s}");
        assert!(s.ends_with("(20000 bytes)"), "{s}");
        assert_eq!(format!("{:?}", truncated("a\u{202e}b")), "\"a\\u{202e}b\"");
        let words = vec![0x35077u32; 4_000_000];
        let s = format!("{:?}", Words(&words));
        assert_eq!(
            s,
            "[0x00035077, 0x00035077, 0x00035077, 0x00035077, … 4000000 words]"
        );
    }
}
