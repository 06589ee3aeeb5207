//! KDE resize through `kscreen-doctor` (libkscreen), the route KDE supports for clients: `kde_output_management_v2`
//! is documented as a desktop-environment implementation detail, and has custom modes only from v18 (Plasma 6).
//!
//! `kscreen-doctor -o` lists the outputs and their modes (`id:WxH@R`, `*` current, `!` preferred); a monitors
//! config becomes `output.<name>.mode.<id>` (a listed mode of exactly that size, the current one first, else the
//! highest refresh) plus `output.<name>.position.<x>,<y>`, or `output.<name>.disable`. Display id = outputs
//! sorted by name (as for `wl_output`), or as GRAPHICS_DEVICE_INFO maps them ([`crate::display_map`]). A size KWin does not list is logged and that output keeps its mode.
//! Runs on its own thread (kscreen-doctor takes ~100 ms) and then calls `done` so the layout is reported.

use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use guestlink_protocol::session::SessionMonitor;

use super::follow_preferred::{Follower, OutputModes};

/// One output as kscreen-doctor lists it.
#[derive(Debug, Clone, PartialEq)]
pub struct KOutput {
    /// Connector name (`Virtual-0`, `DP-1`).
    pub name: String,
    /// Its modes, in kscreen-doctor's order.
    pub modes: Vec<KMode>,
}

/// One mode of a [`KOutput`].
#[derive(Debug, Clone, PartialEq)]
pub struct KMode {
    /// kscreen-doctor's mode id.
    pub id: String,
    /// Width in pixels.
    pub width: u32,
    /// Height in pixels.
    pub height: u32,
    /// Refresh rate in Hz (0 when not given).
    pub refresh: f64,
    /// The output's current mode (`*`).
    pub current: bool,
    /// The output's preferred mode (`!`).
    pub preferred: bool,
}

/// Whether `kscreen-doctor` is in PATH.
pub fn available() -> bool {
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join("kscreen-doctor").is_file()))
}

fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for d in chars.by_ref() {
                if d.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Parses `kscreen-doctor -o` (colours allowed).
pub fn parse_outputs(text: &str) -> Vec<KOutput> {
    let mut out = Vec::new();
    for line in strip_ansi(text).lines() {
        let mut words = line.split_whitespace();
        if words.next() != Some("Output:") {
            continue;
        }
        let (Some(_id), Some(name)) = (words.next(), words.next()) else {
            continue;
        };
        let modes = words
            .skip_while(|w| *w != "Modes:")
            .skip(1)
            .take_while(|w| !w.ends_with(':'))
            .filter_map(|w| {
                let (id, rest) = w.split_once(':')?;
                let flags = rest.trim_start_matches(|c: char| c != '*' && c != '!');
                let rest = rest.trim_end_matches(['*', '!']);
                let (size, refresh) = rest.split_once('@').unwrap_or((rest, "0"));
                let (wd, ht) = size.split_once('x')?;
                Some(KMode {
                    id: id.to_owned(),
                    width: wd.parse().ok()?,
                    height: ht.parse().ok()?,
                    refresh: refresh.parse().unwrap_or(0.0),
                    current: flags.contains('*'),
                    preferred: flags.contains('!'),
                })
            })
            .collect();
        out.push(KOutput {
            name: name.to_owned(),
            modes,
        });
    }
    out
}

/// Each output's current and preferred mode sizes (`*` current, `!` preferred in `kscreen-doctor -o`), with the
/// preferred mode's id.
pub fn output_modes(text: &str) -> Vec<(OutputModes, Option<String>)> {
    parse_outputs(text)
        .into_iter()
        .map(|o| {
            let size = |m: &KMode| (m.width, m.height);
            let current = o.modes.iter().rev().find(|m| m.current).map(size);
            let preferred = o.modes.iter().find(|m| m.preferred);
            let modes = OutputModes {
                current,
                preferred: preferred.map(size),
                name: o.name,
            };
            (modes, preferred.map(|m| m.id.clone()))
        })
        .collect()
}

/// After an output change: on a thread, lists the outputs and switches those whose preferred mode changed to it
/// (see [`Follower`]); calls `done` when it applied something. At most one such thread runs at a time.
pub fn spawn_follow(
    follower: Arc<Mutex<Follower>>,
    busy: Arc<AtomicBool>,
    done: impl FnOnce() + Send + 'static,
) {
    if busy.swap(true, Ordering::AcqRel) {
        return;
    }
    let flag = busy.clone();
    let spawned = std::thread::Builder::new()
        .name("kscreen-follow".into())
        .spawn(move || {
            match doctor(&["-o".to_owned()]) {
                Ok(text) => {
                    let listed = output_modes(&text);
                    let outs: Vec<OutputModes> = listed.iter().map(|(o, _)| o.clone()).collect();
                    let mut f = match follower.lock() {
                        Ok(g) => g,
                        Err(poisoned) => poisoned.into_inner(),
                    };
                    let args: Vec<String> = f
                        .on_outputs(&outs, Instant::now())
                        .iter()
                        .filter_map(|a| {
                            let (_, id) = listed.iter().find(|(o, _)| o.name == a.name)?;
                            Some(format!("output.{}.mode.{}", a.name, id.as_ref()?))
                        })
                        .collect();
                    drop(f);
                    if !args.is_empty() {
                        tracing::info!(?args, "kscreen-doctor (preferred mode)");
                        if let Err(e) = doctor(&args) {
                            tracing::warn!("{e}");
                        }
                        done();
                    }
                }
                Err(e) => tracing::debug!("{e}"),
            }
            flag.store(false, Ordering::Release);
        });
    if let Err(e) = spawned {
        busy.store(false, Ordering::Release);
        tracing::warn!("spawning the kscreen-doctor thread: {e}");
    }
}

/// kscreen-doctor arguments for `monitors`, and warnings for sizes KWin does not list.
pub fn arguments(outputs: &[KOutput], monitors: &[SessionMonitor]) -> (Vec<String>, Vec<String>) {
    let mut sorted: Vec<&KOutput> = outputs.iter().collect();
    sorted.sort_by(|a, b| a.name.cmp(&b.name));
    let sorted = crate::display_map::arrange(sorted, |o| o.name.as_str());
    let (mut args, mut warnings) = (Vec::new(), Vec::new());
    for (o, m) in sorted.iter().zip(monitors) {
        if m.width == 0 || m.height == 0 {
            args.push(format!("output.{}.disable", o.name));
            continue;
        }
        let mut fit: Vec<&KMode> = o
            .modes
            .iter()
            .filter(|md| md.width == m.width && md.height == m.height)
            .collect();
        fit.sort_by(|a, b| {
            b.current
                .cmp(&a.current)
                .then(b.refresh.total_cmp(&a.refresh))
        });
        args.push(format!("output.{}.enable", o.name));
        match fit.first() {
            Some(md) => args.push(format!("output.{}.mode.{}", o.name, md.id)),
            None => warnings.push(format!(
                "KWin lists no {}x{} mode on {} (no custom modes before Plasma 6); keeping its mode",
                m.width, m.height, o.name
            )),
        }
        args.push(format!("output.{}.position.{},{}", o.name, m.x, m.y));
    }
    (args, warnings)
}

/// Runs kscreen-doctor with `args` (Qt on Wayland), with a deadline; stdout+stderr, or why it failed.
fn doctor(args: &[String]) -> Result<String, String> {
    let mut child = Command::new("kscreen-doctor")
        .args(args)
        .env("QT_QPA_PLATFORM", "wayland")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("kscreen-doctor: {e}"))?;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return Err("kscreen-doctor timed out".into());
            }
        }
    }
    let out = child
        .wait_with_output()
        .map_err(|e| format!("kscreen-doctor: {e}"))?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if out.status.success() {
        Ok(text)
    } else {
        Err(format!(
            "kscreen-doctor {args:?}: {} {}",
            out.status,
            text.trim()
        ))
    }
}

/// Applies `monitors` on a thread, then calls `done`.
pub fn spawn_apply(monitors: Vec<SessionMonitor>, done: impl FnOnce() + Send + 'static) {
    let spawned = std::thread::Builder::new()
        .name("kscreen".into())
        .spawn(move || {
            match doctor(&["-o".to_owned()]) {
                Ok(text) => {
                    let outputs = parse_outputs(&text);
                    let (args, warnings) = arguments(&outputs, &monitors);
                    warnings.iter().for_each(|w| tracing::warn!("{w}"));
                    tracing::info!(?args, "kscreen-doctor");
                    if let Err(e) = doctor(&args) {
                        tracing::warn!("{e}");
                    }
                }
                Err(e) => tracing::warn!("{e}"),
            }
            done();
        });
    if let Err(e) = spawned {
        tracing::warn!("spawning the kscreen-doctor thread: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_maps() {
        let text = "\u{1b}[01;32mOutput: \u{1b}[0;0m1 Virtual-0 \u{1b}[01;32menabled\u{1b}[0;0m connected priority 1 Unknown Modes: 0:1280x800@60*! 1:1024x768@60 2:1024x768@75 Geometry: 0,0 1280x800 Scale: 1\n";
        let o = parse_outputs(text);
        assert_eq!(o.len(), 1);
        assert_eq!(o[0].name, "Virtual-0");
        assert_eq!(o[0].modes.len(), 3);
        assert!(o[0].modes[0].current && o[0].modes[0].preferred);
        assert!(!o[0].modes[1].current && !o[0].modes[1].preferred);
        let m = output_modes(text);
        assert_eq!(m[0].0.current, Some((1280, 800)));
        assert_eq!(m[0].0.preferred, Some((1280, 800)));
        assert_eq!(m[0].1.as_deref(), Some("0"));
        let changed = output_modes(
            "Output: 1 Virtual-0 enabled connected Modes: 0:1280x800@60* 1:1920x1080@60! Geometry: 0,0 1280x800",
        );
        assert_eq!(changed[0].0.preferred, Some((1920, 1080)));
        assert_eq!(changed[0].1.as_deref(), Some("1"));
        let m = SessionMonitor::sized(1024, 768, 0, 0);
        let (args, w) = arguments(&o, &[m]);
        assert!(w.is_empty());
        assert!(args.contains(&"output.Virtual-0.mode.2".to_owned()));
        let (args, w) = arguments(
            &o,
            &[SessionMonitor {
                width: 1600,
                height: 900,
                ..m
            }],
        );
        assert_eq!(w.len(), 1);
        assert!(!args.iter().any(|a| a.contains(".mode.")));
    }
}
