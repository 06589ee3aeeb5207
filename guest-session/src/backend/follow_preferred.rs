//! Follow-the-preferred-mode policy (docs/protocol/desktop.md#resize-on-virtio-gpu, #following-the-preferred-mode).
//!
//! On a VM with virtio-gpu the host pushes its window size into the device, the kernel adds it as the output's
//! PREFERRED mode and fires a hotplug; the compositor may or may not switch to it (mutter often re-applies the
//! current config). When an output's preferred mode *changes* to one that differs from its current mode, and the
//! host has not sent a monitors config within the debounce window, the agent applies the preferred mode.
//!
//! Only a change of the preferred mode triggers it (the first sighting of an output only records it), so a mode
//! the host or the user picked on purpose is not reverted by an unrelated output change later. Off with
//! `GUESTLINK_FOLLOW_PREFERRED=0`.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use guestlink_protocol::session::{GeometryMonitor, SessionMonitor};

/// How long after a host monitors config the preferred mode is not followed.
pub const DEBOUNCE: Duration = Duration::from_secs(3);

/// One output as the compositor reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutputModes {
    /// Connector / head name.
    pub name: String,
    /// Current mode size, when enabled.
    pub current: Option<(u32, u32)>,
    /// Preferred mode size, when the output has one.
    pub preferred: Option<(u32, u32)>,
}

/// Switch `name` to its preferred mode (`width` × `height`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Follow<'a> {
    /// The output.
    pub name: &'a str,
    /// Preferred width.
    pub width: u32,
    /// Preferred height.
    pub height: u32,
}

/// The monitors config that keeps the desktop layout `geometry` (display id `i` = the `i`-th of `names`) and
/// puts each followed output on its preferred size; an output without geometry stays off (0×0).
pub fn keep_layout_and_follow<'n>(
    names: impl IntoIterator<Item = &'n str>,
    geometry: &[GeometryMonitor],
    follow: &[Follow<'_>],
) -> Vec<SessionMonitor> {
    names
        .into_iter()
        .enumerate()
        .map(|(i, name)| {
            let g = geometry
                .iter()
                .find(|g| g.display_id == u32::try_from(i).unwrap_or(u32::MAX));
            let (x, y, w, h) = g.map_or((0, 0, 0, 0), |g| (g.x, g.y, g.width, g.height));
            let (w, h) = follow
                .iter()
                .find(|f| f.name == name)
                .map_or((w, h), |f| (f.width, f.height));
            SessionMonitor::sized(w, h, x, y)
        })
        .collect()
}

/// The pure decision: outputs whose preferred mode differs from the one in `seen` (a change; outputs not in
/// `seen` are new and left alone) and from their current mode, unless `host_recent`.
pub fn decide<'a>(
    outputs: &'a [OutputModes],
    seen: &HashMap<String, (u32, u32)>,
    host_recent: bool,
) -> Vec<Follow<'a>> {
    if host_recent {
        return Vec::new();
    }
    outputs
        .iter()
        .filter_map(|o| {
            let pref = o.preferred?;
            let changed = seen.get(&o.name).is_some_and(|&s| s != pref);
            let differs = o.current.is_some_and(|c| c != pref);
            (changed && differs).then_some(Follow {
                name: &o.name,
                width: pref.0,
                height: pref.1,
            })
        })
        .collect()
}

/// The policy with its state: the preferred modes seen so far and the time of the last host request.
#[derive(Debug)]
pub struct Follower {
    enabled: bool,
    debounce: Duration,
    seen: HashMap<String, (u32, u32)>,
    last_host: Option<Instant>,
}

impl Default for Follower {
    fn default() -> Self {
        Self::new(true, DEBOUNCE)
    }
}

impl Follower {
    /// A policy, on or off, with this debounce.
    pub fn new(enabled: bool, debounce: Duration) -> Self {
        Self {
            enabled,
            debounce,
            seen: HashMap::new(),
            last_host: None,
        }
    }

    /// On unless `GUESTLINK_FOLLOW_PREFERRED` is `0`, `false` or `off`.
    pub fn from_env() -> Self {
        let off = std::env::var("GUESTLINK_FOLLOW_PREFERRED")
            .map(|v| matches!(v.trim(), "0" | "false" | "off"))
            .unwrap_or(false);
        Self::new(!off, DEBOUNCE)
    }

    /// The host sent a monitors config at `now`.
    pub fn host_request(&mut self, now: Instant) {
        self.last_host = Some(now);
    }

    /// The outputs changed: which ones to switch to their preferred mode. Records the preferred modes.
    pub fn on_outputs<'a>(&mut self, outputs: &'a [OutputModes], now: Instant) -> Vec<Follow<'a>> {
        let host_recent = self
            .last_host
            .is_some_and(|t| now.saturating_duration_since(t) < self.debounce);
        let actions = if self.enabled {
            decide(outputs, &self.seen, host_recent)
        } else {
            Vec::new()
        };
        for o in outputs {
            if let Some(p) = o.preferred {
                self.seen.insert(o.name.clone(), p);
            }
        }
        if !actions.is_empty() {
            tracing::info!(
                ?actions,
                "output preferred mode changed (hotplug): following it"
            );
        }
        actions
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn out(name: &str, cur: (u32, u32), pref: (u32, u32)) -> OutputModes {
        OutputModes {
            name: name.into(),
            current: Some(cur),
            preferred: Some(pref),
        }
    }

    #[test]
    fn first_sighting_only_records() {
        let mut f = Follower::default();
        let t = Instant::now();
        assert!(f
            .on_outputs(&[out("V-1", (800, 600), (1024, 768))], t)
            .is_empty());
        // Same preferred again: still nothing (the mode in use was chosen on purpose).
        assert!(f
            .on_outputs(&[out("V-1", (800, 600), (1024, 768))], t)
            .is_empty());
    }

    #[test]
    fn preferred_change_is_followed() {
        let mut f = Follower::default();
        let t = Instant::now();
        let _ = f.on_outputs(&[out("V-1", (1024, 768), (1024, 768))], t);
        let o = [out("V-1", (1024, 768), (1600, 900))];
        assert_eq!(
            f.on_outputs(&o, t),
            vec![Follow {
                name: "V-1",
                width: 1600,
                height: 900
            }]
        );
        // The compositor switched by itself: nothing to do.
        let _ = f.on_outputs(&[out("V-1", (1280, 720), (1280, 720))], t);
        let mut f2 = Follower::default();
        let _ = f2.on_outputs(&[out("V-1", (1024, 768), (1024, 768))], t);
        assert!(f2
            .on_outputs(&[out("V-1", (1280, 720), (1280, 720))], t)
            .is_empty());
    }

    #[test]
    fn host_request_debounces() {
        let mut f = Follower::default();
        let t = Instant::now();
        let _ = f.on_outputs(&[out("V-1", (1024, 768), (1024, 768))], t);
        f.host_request(t);
        let o = [out("V-1", (800, 600), (1600, 900))];
        assert!(f.on_outputs(&o, t + Duration::from_secs(1)).is_empty());
        // Recorded during the debounce: a later unrelated change does not revert the host's choice.
        assert!(f.on_outputs(&o, t + Duration::from_secs(10)).is_empty());
        // A new preferred after the window is followed.
        let o2 = [out("V-1", (800, 600), (1920, 1080))];
        assert_eq!(f.on_outputs(&o2, t + Duration::from_secs(10)).len(), 1);
    }

    #[test]
    fn disabled_and_edge_cases() {
        let mut f = Follower::new(false, DEBOUNCE);
        let t = Instant::now();
        let _ = f.on_outputs(&[out("V-1", (1024, 768), (1024, 768))], t);
        assert!(f
            .on_outputs(&[out("V-1", (1024, 768), (1600, 900))], t)
            .is_empty());
        let seen = HashMap::from([("V-1".to_string(), (1024, 768))]);
        let disabled_output = [OutputModes {
            name: "V-1".into(),
            current: None,
            preferred: Some((1600, 900)),
        }];
        assert!(decide(&disabled_output, &seen, false).is_empty());
        let no_pref = [OutputModes {
            name: "V-1".into(),
            current: Some((800, 600)),
            preferred: None,
        }];
        assert!(decide(&no_pref, &seen, false).is_empty());
        assert!(decide(&[out("V-1", (800, 600), (1600, 900))], &seen, true).is_empty());
        assert_eq!(
            decide(&[out("V-1", (800, 600), (1600, 900))], &seen, false).len(),
            1
        );
    }
}
