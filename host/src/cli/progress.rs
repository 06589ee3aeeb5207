//! indicatif progress bars on stderr: [`Bar`] for `file push|pull` (it also reports SIGINT/SIGTERM so a transfer
//! stops cleanly) and [`send_file_bar`] for the SPICE `send-file`.

use guestlink_host::file::Progress;
use guestlink_host::host_cmd::HostRunner;
use guestlink_host::quiesce::CmdRunner as _;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// indicatif bar on stderr when it is a terminal; also reports SIGINT/SIGTERM so a transfer stops cleanly.
pub struct Bar(ProgressBar, Option<HostRunner>);

impl Bar {
    /// A bar, drawn only when `visible`.
    pub fn new(visible: bool) -> Self {
        let pb = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
        if !visible {
            pb.set_draw_target(ProgressDrawTarget::hidden());
        }
        if let Ok(style) = ProgressStyle::with_template(
            "{msg:10} [{bar:30}] {bytes}/{total_bytes} {binary_bytes_per_sec} eta {eta}",
        ) {
            pb.set_style(style.progress_chars("=> "));
        }
        // Without the signal thread a Ctrl-C still stops guestlink, only without cleaning up temp files.
        Self(pb, HostRunner::arm().ok())
    }
}

impl Progress for Bar {
    fn start(&mut self, total: Option<u64>) {
        if let Some(t) = total {
            self.0.set_length(t);
        }
        self.0.set_message("copying");
    }
    fn advance(&mut self, n: u64) {
        self.0.inc(n);
    }
    fn message(&mut self, msg: &str) {
        self.0.set_message(msg.to_owned());
    }
    fn finish(&mut self) {
        self.0.finish_and_clear();
    }
    fn interrupted(&mut self) -> bool {
        self.1
            .as_mut()
            .is_some_and(|r| r.pending_signal().is_some())
    }
}

/// The bar of one SPICE `send-file` file, labelled with its name.
pub fn send_file_bar(label: String) -> ProgressBar {
    let pb = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
    pb.set_style(
        ProgressStyle::with_template("{msg} {bar:30} {bytes}/{total_bytes} {bytes_per_sec}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    pb.set_message(label);
    pb
}
