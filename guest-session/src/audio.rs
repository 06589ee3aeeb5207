//! AUDIO_VOLUME_SYNC: the client's playback or record volume and mute, applied to the session's sound.
//!
//! spice-vdagent sets the ALSA `default` device's simple element "Master" (playback) or "Capture" (record):
//! the mute switch, and the volume with the element's range taken as 0..65535, for 1 (mono) or 2 (left,
//! right) channels only. guestlink does the same through `amixer` (alsa-utils) when the session has no sound
//! server, and otherwise sets the default sink (playback) or source (record) of PulseAudio or PipeWire
//! (pipewire-pulse) through `pactl`: volume v of 0..65535 becomes v × 65536 / 65535 of PA's 100 % (65536), per
//! channel when the count matches the device, else one value (the loudest channel) for all. A sound server
//! is the session's when `$PULSE_SERVER` is set or `$XDG_RUNTIME_DIR/pulse/native` exists (checked per
//! message, so a server started later is used; `pactl` never autospawns one then).
//!
//! The commands run on their own thread, one message after the other, each with a 5 s limit; a newer message
//! for the same direction replaces one still waiting. Failures are logged (docs/guestlink-session.md).

use std::collections::VecDeque;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// How long one `pactl`/`amixer` run may take.
const COMMAND_LIMIT: Duration = Duration::from_secs(5);

/// One AUDIO_VOLUME_SYNC.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VolumeSync {
    /// Playback (true) or record.
    pub playback: bool,
    /// Muted.
    pub mute: bool,
    /// Per-channel volumes, 0..=65535.
    pub volumes: Vec<u16>,
}

/// The queue between the connection and the audio thread (at most one waiting message per direction).
#[derive(Debug, Default)]
struct Pending {
    queue: VecDeque<VolumeSync>,
    closed: bool,
}

/// The handle of the audio thread; dropping it lets the thread finish.
#[derive(Debug)]
pub struct Audio {
    shared: Arc<(Mutex<Pending>, Condvar)>,
}

impl Audio {
    /// Starts the thread (it idles until a message arrives).
    pub fn start() -> Self {
        let shared = Arc::new((Mutex::new(Pending::default()), Condvar::new()));
        let worker = shared.clone();
        let spawned = std::thread::Builder::new()
            .name("audio".into())
            .spawn(move || run(&worker));
        if let Err(e) = spawned {
            tracing::warn!("audio thread: {e}; volume sync disabled");
        }
        Self { shared }
    }

    /// Queues `v`, replacing a waiting message of the same direction.
    pub fn sync(&self, v: VolumeSync) {
        let (lock, cv) = &*self.shared;
        if let Ok(mut p) = lock.lock() {
            p.queue.retain(|q| q.playback != v.playback);
            p.queue.push_back(v);
            cv.notify_one();
        }
    }
}

impl Drop for Audio {
    fn drop(&mut self) {
        let (lock, cv) = &*self.shared;
        if let Ok(mut p) = lock.lock() {
            p.closed = true;
            cv.notify_one();
        }
    }
}

fn run(shared: &(Mutex<Pending>, Condvar)) {
    let (lock, cv) = shared;
    // The last failure logged as a warning: the same one again is logged at debug (no flood).
    let mut last_error: Option<String> = None;
    loop {
        let next = {
            let Ok(mut p) = lock.lock() else { return };
            loop {
                if let Some(v) = p.queue.pop_front() {
                    break v;
                }
                if p.closed {
                    return;
                }
                p = match cv.wait(p) {
                    Ok(p) => p,
                    Err(_) => return,
                };
            }
        };
        match apply(&next) {
            Ok(()) => last_error = None,
            Err(e) if last_error.as_ref() == Some(&e) => {
                tracing::debug!("volume sync failed again: {e}");
            }
            Err(e) => {
                tracing::warn!("volume sync failed: {e}");
                last_error = Some(e);
            }
        }
    }
}

/// Where the volume goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Target {
    /// PulseAudio or pipewire-pulse, through `pactl`.
    SoundServer,
    /// The ALSA default device, through `amixer`.
    Alsa,
}

fn target() -> Target {
    let server = std::env::var_os("PULSE_SERVER").is_some_and(|s| !s.is_empty())
        || std::env::var_os("XDG_RUNTIME_DIR")
            .filter(|d| !d.is_empty())
            .is_some_and(|d| PathBuf::from(d).join("pulse/native").exists());
    if server {
        Target::SoundServer
    } else {
        Target::Alsa
    }
}

/// Applies `v`; the error names the direction and the target.
fn apply(v: &VolumeSync) -> Result<(), String> {
    let what = if v.playback { "playback" } else { "record" };
    let t = target();
    let result = match t {
        Target::SoundServer => pactl(v),
        Target::Alsa => amixer(v),
    };
    match result {
        Ok(()) => {
            tracing::debug!(what, target = ?t, mute = v.mute, volumes = ?v.volumes, "volume synced");
            Ok(())
        }
        Err(e) => Err(format!("{what} via {t:?}: {e}")),
    }
}

/// PA volume (65536 = 100 %) for a SPICE volume (65535 = 100 %).
pub fn pa_volume(v: u16) -> u32 {
    ((u64::from(v) * 65536 + 32767) / 65535) as u32
}

/// The device's channel count from `pactl get-sink-volume`/`get-source-volume` output (C locale): its "Volume:"
/// line has one "N%" per channel. `None` when there is no such line.
pub fn pactl_channels(out: &str) -> Option<usize> {
    let line = out
        .lines()
        .find(|l| l.trim_start().starts_with("Volume:"))?;
    Some(line.matches('%').count()).filter(|&n| n > 0)
}

/// The `pactl` argument lists for `v` on a device of `channels` channels (`None`: not known): mute, then volume,
/// one value for all when the channels agree or their count is not the device's (then the loudest), else one
/// per channel.
pub fn pactl_args(v: &VolumeSync, channels: Option<usize>) -> (Vec<String>, Vec<String>) {
    let (mute_cmd, vol_cmd, dev) = if v.playback {
        ("set-sink-mute", "set-sink-volume", "@DEFAULT_SINK@")
    } else {
        ("set-source-mute", "set-source-volume", "@DEFAULT_SOURCE@")
    };
    let mute = vec![
        mute_cmd.to_owned(),
        dev.to_owned(),
        if v.mute { "1" } else { "0" }.to_owned(),
    ];
    let mut vol = vec![vol_cmd.to_owned(), dev.to_owned()];
    let first = v.volumes.first().copied().unwrap_or(0);
    let agree = v.volumes.iter().all(|&x| x == first);
    if agree || channels.is_some_and(|n| n != v.volumes.len()) {
        vol.push(loudest(v));
    } else {
        vol.extend(v.volumes.iter().map(|&x| pa_volume(x).to_string()));
    }
    (mute, vol)
}

/// The PA volume of `v`'s loudest channel, as a `pactl` argument.
fn loudest(v: &VolumeSync) -> String {
    pa_volume(v.volumes.iter().copied().max().unwrap_or(0)).to_string()
}

/// Sets `v` through `pactl`. The device's channel count is asked first: given a count that is not the device's,
/// `pactl` (16.1) logs the mismatch but still sends a request, and its exit status is then 1 or 0 depending on
/// which reply it handles first, so that failure cannot be relied on to pick the one-value form.
fn pactl(v: &VolumeSync) -> Result<(), String> {
    if v.volumes.is_empty() {
        return Err("no channels".into());
    }
    let get = if v.playback {
        ["get-sink-volume", "@DEFAULT_SINK@"]
    } else {
        ["get-source-volume", "@DEFAULT_SOURCE@"]
    }
    .map(str::to_owned);
    let channels = match run_command("pactl", &get) {
        Ok(out) => pactl_channels(&out),
        Err(e) => {
            tracing::debug!("channel count not known ({e}); trying per channel");
            None
        }
    };
    let (mute, mut vol) = pactl_args(v, channels);
    run_command("pactl", &mute)?;
    if let Err(e) = run_command("pactl", &vol) {
        if vol.len() <= 3 {
            return Err(e);
        }
        // Count not known, and refused: one value for all.
        vol.truncate(2);
        vol.push(loudest(v));
        tracing::debug!("per-channel volume refused ({e}); setting one value");
        run_command("pactl", &vol)?;
    }
    Ok(())
}

/// The `amixer` arguments for `v` (1 or 2 channels, as spice-vdagent), `None` for other channel counts.
pub fn amixer_args(v: &VolumeSync) -> Option<Vec<String>> {
    let pct = |x: u16| format!("{}%", (u32::from(x) * 100 + 32767) / 65535);
    let volume = match v.volumes.as_slice() {
        [m] => pct(*m),
        [l, r] => format!("{},{}", pct(*l), pct(*r)),
        _ => return None,
    };
    let (element, switch) = match (v.playback, v.mute) {
        (true, true) => ("Master", "mute"),
        (true, false) => ("Master", "unmute"),
        (false, true) => ("Capture", "nocap"),
        (false, false) => ("Capture", "cap"),
    };
    Some(
        ["-q", "-D", "default", "sset", element, &volume, switch]
            .map(str::to_owned)
            .to_vec(),
    )
}

fn amixer(v: &VolumeSync) -> Result<(), String> {
    let args = amixer_args(v).ok_or_else(|| {
        format!(
            "{} channels: only mono and stereo are applied to ALSA",
            v.volumes.len()
        )
    })?;
    run_command("amixer", &args).map(drop)
}

/// Runs `program args` in the C locale, at most [`COMMAND_LIMIT`]; returns its stdout (the first 4 KiB: these
/// commands print a line or two), and its stderr becomes the error text.
fn run_command(program: &str, args: &[String]) -> Result<String, String> {
    use std::io::Read;
    let mut child = Command::new(program)
        .args(args)
        .env("LC_ALL", "C")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("{program}: {e}"))?;
    let deadline = Instant::now() + COMMAND_LIMIT;
    loop {
        match child.try_wait() {
            Ok(Some(status)) if status.success() => {
                let mut out = String::new();
                if let Some(s) = child.stdout.take() {
                    let _ = s.take(4096).read_to_string(&mut out);
                }
                return Ok(out);
            }
            Ok(Some(status)) => {
                let mut err = String::new();
                if let Some(s) = child.stderr.take() {
                    let _ = s.take(4096).read_to_string(&mut err);
                }
                return Err(format!(
                    "{program} {}: {status}: {}",
                    args.join(" "),
                    err.trim()
                ));
            }
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(10)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("{program}: no answer within {COMMAND_LIMIT:?}"));
            }
            Err(e) => return Err(format!("{program}: {e}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vs(playback: bool, mute: bool, volumes: &[u16]) -> VolumeSync {
        VolumeSync {
            playback,
            mute,
            volumes: volumes.to_vec(),
        }
    }

    #[test]
    fn volumes_scale_to_pulseaudio_norm() {
        assert_eq!(pa_volume(0), 0);
        assert_eq!(pa_volume(65535), 65536);
        assert_eq!(pa_volume(32768), 32769);
        let (mute, vol) = pactl_args(&vs(true, true, &[65535, 65535]), Some(2));
        assert_eq!(mute, ["set-sink-mute", "@DEFAULT_SINK@", "1"]);
        assert_eq!(vol, ["set-sink-volume", "@DEFAULT_SINK@", "65536"]);
        let (mute, vol) = pactl_args(&vs(false, false, &[0, 65535]), Some(2));
        assert_eq!(mute, ["set-source-mute", "@DEFAULT_SOURCE@", "0"]);
        assert_eq!(vol, ["set-source-volume", "@DEFAULT_SOURCE@", "0", "65536"]);
    }

    #[test]
    fn a_channel_count_not_the_devices_gets_the_loudest_for_all() {
        let three = vs(false, false, &[1000, 3000, 2000]);
        let (_, vol) = pactl_args(&three, Some(2));
        assert_eq!(vol, ["set-source-volume", "@DEFAULT_SOURCE@", "3000"]);
        let (_, vol) = pactl_args(&vs(true, false, &[65535, 0]), Some(1));
        assert_eq!(vol, ["set-sink-volume", "@DEFAULT_SINK@", "65536"]);
        // Count not known: per channel (pactl() falls back to one value when it is refused).
        let (_, vol) = pactl_args(&three, None);
        assert_eq!(
            vol,
            [
                "set-source-volume",
                "@DEFAULT_SOURCE@",
                "1000",
                "3000",
                "2000"
            ]
        );
    }

    #[test]
    fn the_devices_channels_are_read_from_pactl_output() {
        let stereo = "Volume: front-left: 49152 /  75% / -7.50 dB,   front-right: 49152 /  75% / -7.50 dB\n        balance 0.00\n";
        assert_eq!(pactl_channels(stereo), Some(2));
        assert_eq!(
            pactl_channels("Volume: mono: 65536 / 100% / 0.00 dB\n"),
            Some(1)
        );
        let surround =
            "Volume: front-left: 1 /   0%,   front-right: 1 /   0%,   rear-left: 1 /   0%,   \
                        rear-right: 1 /   0%,   front-center: 1 /   0%,   lfe: 1 /   0%\n";
        assert_eq!(pactl_channels(surround), Some(6));
        assert_eq!(pactl_channels(""), None);
        assert_eq!(
            pactl_channels("Connection failure: Connection refused\n"),
            None
        );
    }

    #[test]
    fn alsa_gets_mono_or_stereo_like_spice_vdagent() {
        assert_eq!(
            amixer_args(&vs(true, false, &[32768])).unwrap(),
            ["-q", "-D", "default", "sset", "Master", "50%", "unmute"]
        );
        assert_eq!(
            amixer_args(&vs(false, true, &[65535, 0])).unwrap(),
            ["-q", "-D", "default", "sset", "Capture", "100%,0%", "nocap"]
        );
        assert_eq!(amixer_args(&vs(true, false, &[1, 2, 3])), None);
        assert_eq!(amixer_args(&vs(true, false, &[])), None);
    }

    #[test]
    fn a_newer_message_replaces_a_waiting_one_of_the_same_direction() {
        // No thread: only the queue.
        let audio = Audio {
            shared: Arc::new((Mutex::new(Pending::default()), Condvar::new())),
        };
        audio.sync(vs(true, false, &[1]));
        audio.sync(vs(false, false, &[2]));
        audio.sync(vs(true, true, &[3]));
        let q: Vec<VolumeSync> = audio
            .shared
            .0
            .lock()
            .unwrap()
            .queue
            .iter()
            .cloned()
            .collect();
        assert_eq!(q, vec![vs(false, false, &[2]), vs(true, true, &[3])]);
    }
}
