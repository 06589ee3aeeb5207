//! GNOME resize: `org.gnome.Mutter.DisplayConfig` on the session bus (zbus).
//!
//! Mutter cannot create modes, so a monitors config is mapped to modes it already lists (exact width × height,
//! the current or preferred one first, else the highest refresh); a size it does not list is logged and that
//! monitor keeps its mode. The config is applied with method 1 (temporary: no monitors.xml write and no "keep
//! changes?" dialog). Display ids are the connectors sorted by name (or mapped by GRAPHICS_DEVICE_INFO). The layout is reported after every apply and
//! on `MonitorsChanged`.

use std::collections::HashMap;

use anyhow::{bail, Context, Result};
use guestlink_protocol::session::{GeometryMonitor, SessionMonitor};
use tokio::sync::mpsc;
use zbus::zvariant::{OwnedValue, Value};

use crate::backend::follow_preferred::{keep_layout_and_follow, Follow, Follower, OutputModes};
use crate::backend::{DesktopEvent, EventSender};

type Props = HashMap<String, OwnedValue>;
type MonitorId = (String, String, String, String);
type Mode = (String, i32, i32, f64, f64, Vec<f64>, Props);
type Monitor = (MonitorId, Vec<Mode>, Props);
type Logical = (i32, i32, f64, u32, bool, Vec<MonitorId>, Props);
type State = (u32, Vec<Monitor>, Vec<Logical>, Props);
type LogicalConfig<'a> = (
    i32,
    i32,
    f64,
    u32,
    bool,
    Vec<(String, String, HashMap<String, Value<'a>>)>,
);

#[zbus::proxy(
    interface = "org.gnome.Mutter.DisplayConfig",
    default_service = "org.gnome.Mutter.DisplayConfig",
    default_path = "/org/gnome/Mutter/DisplayConfig"
)]
trait DisplayConfig {
    fn get_current_state(&self) -> zbus::Result<State>;
    fn apply_monitors_config(
        &self,
        serial: u32,
        method: u32,
        logical_monitors: Vec<LogicalConfig<'_>>,
        properties: HashMap<String, Value<'_>>,
    ) -> zbus::Result<()>;
    #[zbus(signal)]
    fn monitors_changed(&self) -> zbus::Result<()>;
}

fn flag(p: &Props, key: &str) -> bool {
    p.get(key)
        .and_then(|v| bool::try_from(v).ok())
        .unwrap_or(false)
}

/// Connectors sorted by name, or as GRAPHICS_DEVICE_INFO maps them ([`crate::display_map`]): index = display
/// id.
fn connectors(s: &State) -> Vec<&Monitor> {
    let mut m: Vec<&Monitor> = s.1.iter().collect();
    m.sort_by(|a, b| a.0 .0.cmp(&b.0 .0));
    crate::display_map::arrange(m, |c| c.0 .0.as_str())
}

/// The layout: for each connector in a logical monitor, its position and current mode.
pub fn geometry(s: &State) -> Vec<GeometryMonitor> {
    let mut out = Vec::new();
    for (i, (id, modes, _)) in connectors(s).into_iter().enumerate() {
        let Some(lm) = s.2.iter().find(|l| l.5.iter().any(|m| m.0 == id.0)) else {
            continue;
        };
        let Some(cur) = modes.iter().find(|m| flag(&m.6, "is-current")) else {
            continue;
        };
        out.push(GeometryMonitor {
            display_id: u32::try_from(i).unwrap_or(u32::MAX),
            x: lm.0,
            y: lm.1,
            width: cur.1.unsigned_abs(),
            height: cur.2.unsigned_abs(),
        });
    }
    out
}

/// The mode id to use for `w`×`h` on a monitor, if mutter lists one.
pub fn pick_mode(modes: &[Mode], w: u32, h: u32) -> Option<String> {
    let mut fit: Vec<&Mode> = modes
        .iter()
        .filter(|m| m.1.unsigned_abs() == w && m.2.unsigned_abs() == h)
        .collect();
    fit.sort_by(|a, b| {
        let rank = |m: &Mode| (flag(&m.6, "is-current"), flag(&m.6, "is-preferred"));
        rank(b).cmp(&rank(a)).then(b.3.total_cmp(&a.3))
    });
    fit.first().map(|m| m.0.clone())
}

/// Current and preferred mode sizes of each connector (for [`Follower`]).
pub fn output_modes(s: &State) -> Vec<OutputModes> {
    let size = |modes: &[Mode], key: &str| {
        modes
            .iter()
            .find(|m| flag(&m.6, key))
            .map(|m| (m.1.unsigned_abs(), m.2.unsigned_abs()))
    };
    connectors(s)
        .into_iter()
        .map(|(id, modes, _)| OutputModes {
            name: id.0.clone(),
            current: size(modes, "is-current"),
            preferred: size(modes, "is-preferred"),
        })
        .collect()
}

/// The monitors config that keeps the layout and puts each followed connector on its preferred size.
fn follow_config(s: &State, follow: &[Follow<'_>]) -> Vec<SessionMonitor> {
    let names = connectors(s).into_iter().map(|(id, _, _)| id.0.as_str());
    keep_layout_and_follow(names, &geometry(s), follow)
}

/// The logical-monitor list for `monitors` (display id = connector index).
fn plan(s: &State, monitors: &[SessionMonitor]) -> Result<Vec<LogicalConfig<'static>>> {
    let mut out = Vec::new();
    for (i, (id, modes, _)) in connectors(s).into_iter().enumerate() {
        let current_lm = s.2.iter().find(|l| l.5.iter().any(|m| m.0 == id.0));
        let scale = current_lm.map_or(1.0, |l| l.2);
        let current_mode = modes
            .iter()
            .find(|m| flag(&m.6, "is-current"))
            .map(|m| m.0.clone());
        let (x, y, mode) = match monitors.get(i) {
            Some(m) if m.width == 0 || m.height == 0 => continue, // disabled
            Some(m) => match pick_mode(modes, m.width, m.height) {
                Some(mode) => (m.x, m.y, mode),
                None => {
                    tracing::warn!(connector = %id.0, width = m.width, height = m.height,
                        "mutter does not list this mode (it cannot create modes); keeping the current one");
                    match current_mode {
                        Some(c) => (m.x, m.y, c),
                        None => continue,
                    }
                }
            },
            None => match (current_lm, current_mode) {
                (Some(l), Some(c)) => (l.0, l.1, c),
                _ => continue,
            },
        };
        out.push((
            x,
            y,
            scale,
            0,
            out.is_empty(),
            vec![(id.0.clone(), mode, HashMap::new())],
        ));
    }
    if out.is_empty() {
        bail!("the monitors config leaves no monitor enabled");
    }
    Ok(out)
}

#[derive(Debug)]
enum Command {
    Apply(Vec<SessionMonitor>),
    Report,
}

/// Mutter DisplayConfig on its own thread (a current-thread tokio runtime for zbus).
#[derive(Debug)]
pub struct MutterResize {
    tx: mpsc::UnboundedSender<Command>,
}

impl MutterResize {
    /// Connects to the session bus and checks that DisplayConfig answers.
    pub fn start(events: EventSender) -> Result<Self> {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel::<Result<()>>();
        std::thread::Builder::new()
            .name("mutter".into())
            .spawn(move || {
                let rt = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => {
                        let _ = ready_tx.send(Err(e.into()));
                        return;
                    }
                };
                rt.block_on(async move {
                    let proxy = match connect().await {
                        Ok(p) => {
                            let _ = ready_tx.send(Ok(()));
                            p
                        }
                        Err(e) => {
                            let _ = ready_tx.send(Err(e));
                            return;
                        }
                    };
                    let mut changed = proxy.receive_monitors_changed().await.ok();
                    let mut follower = Follower::from_env();
                    loop {
                        let cmd = tokio::select! {
                            c = rx.recv() => match c { Some(c) => c, None => return },
                            Some(_) = async { match changed.as_mut() {
                                Some(s) => futures_next(s).await,
                                None => std::future::pending().await,
                            } } => Command::Report,
                        };
                        if let Command::Apply(m) = &cmd {
                            follower.host_request(std::time::Instant::now());
                            if let Err(e) = apply(&proxy, m).await {
                                tracing::warn!("mutter: {e:#}");
                            }
                        }
                        match proxy.get_current_state().await {
                            Ok(s) => {
                                let outs = output_modes(&s);
                                let follow = follower.on_outputs(&outs, std::time::Instant::now());
                                if !follow.is_empty() {
                                    // The next MonitorsChanged reports the new layout.
                                    let m = follow_config(&s, &follow);
                                    if let Err(e) = apply(&proxy, &m).await {
                                        tracing::warn!("mutter (preferred mode): {e:#}");
                                    }
                                }
                                let g = geometry(&s);
                                tracing::info!(geometry = ?g, "geometry (mutter)");
                                let _ = events.send(DesktopEvent::Geometry(g));
                            }
                            Err(e) => tracing::warn!("mutter GetCurrentState: {e}"),
                        }
                    }
                });
            })
            .context("spawning the mutter thread")?;
        ready_rx
            .recv()
            .context("mutter thread died")?
            .map(|()| Self { tx })
    }

    /// Applies `monitors`, then reports the layout.
    pub fn apply(&self, monitors: Vec<SessionMonitor>) {
        let _ = self.tx.send(Command::Apply(monitors));
    }

    /// Reports the layout.
    pub fn report(&self) {
        let _ = self.tx.send(Command::Report);
    }
}

async fn futures_next(s: &mut MonitorsChangedStream) -> Option<()> {
    use futures_util_next::next;
    next(s).await.map(|_| ())
}

/// A tiny `StreamExt::next` without a futures dependency.
mod futures_util_next {
    use std::future::poll_fn;
    use std::pin::Pin;

    use zbus::export::futures_core::Stream;

    pub async fn next<S: Stream + Unpin>(s: &mut S) -> Option<S::Item> {
        poll_fn(|cx| Pin::new(&mut *s).poll_next(cx)).await
    }
}

async fn connect() -> Result<DisplayConfigProxy<'static>> {
    let conn = zbus::Connection::session().await.context("session bus")?;
    let proxy = DisplayConfigProxy::new(&conn)
        .await
        .context("DisplayConfig proxy")?;
    proxy
        .get_current_state()
        .await
        .context("org.gnome.Mutter.DisplayConfig.GetCurrentState")?;
    Ok(proxy)
}

async fn apply(proxy: &DisplayConfigProxy<'_>, monitors: &[SessionMonitor]) -> Result<()> {
    let s = proxy.get_current_state().await?;
    let config = plan(&s, monitors)?;
    tracing::info!(
        ?config,
        serial = s.0,
        "mutter ApplyMonitorsConfig (temporary)"
    );
    proxy
        .apply_monitors_config(s.0, 1, config, HashMap::new())
        .await
        .context("ApplyMonitorsConfig")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(id: &str, w: i32, h: i32, r: f64, cur: bool) -> Mode {
        let mut p = Props::new();
        if cur {
            p.insert("is-current".into(), OwnedValue::from(true));
        }
        (id.into(), w, h, r, 1.0, vec![1.0], p)
    }

    #[test]
    fn picks_listed_modes_only() {
        let modes = vec![
            mode("1280x800@60", 1280, 800, 60.0, true),
            mode("1024x768@60", 1024, 768, 60.0, false),
            mode("1024x768@75", 1024, 768, 75.0, false),
        ];
        assert_eq!(pick_mode(&modes, 1024, 768).as_deref(), Some("1024x768@75"));
        assert_eq!(pick_mode(&modes, 1280, 800).as_deref(), Some("1280x800@60"));
        assert_eq!(pick_mode(&modes, 1600, 900), None);
    }

    #[test]
    fn plan_and_geometry() {
        let id: MonitorId = ("LVDS1".into(), "v".into(), "p".into(), "s".into());
        let s: State = (
            5,
            vec![(
                id.clone(),
                vec![
                    mode("1280x800@60", 1280, 800, 60.0, true),
                    mode("1024x768@60", 1024, 768, 60.0, false),
                ],
                Props::new(),
            )],
            vec![(0, 0, 1.0, 0, true, vec![id], Props::new())],
            Props::new(),
        );
        let g = geometry(&s);
        assert_eq!((g[0].width, g[0].height), (1280, 800));
        let m = SessionMonitor::sized(1024, 768, 0, 0);
        let p = plan(&s, &[m]).expect("plan");
        assert_eq!(p[0].5[0].1, "1024x768@60");
        assert!(plan(&s, &[SessionMonitor { width: 0, ..m }]).is_err());
    }

    #[test]
    fn follows_a_changed_preferred_mode() {
        let id: MonitorId = ("Virtual-1".into(), "v".into(), "p".into(), "s".into());
        let state = |pref: &str| -> State {
            let mut modes = vec![
                mode("1280x800@60", 1280, 800, 60.0, true),
                mode("1024x768@60", 1024, 768, 60.0, false),
                mode("1920x1080@60", 1920, 1080, 60.0, false),
            ];
            for m in &mut modes {
                if m.0 == pref {
                    m.6.insert("is-preferred".into(), OwnedValue::from(true));
                }
            }
            (
                1,
                vec![(id.clone(), modes, Props::new())],
                vec![(0, 0, 1.0, 0, true, vec![id.clone()], Props::new())],
                Props::new(),
            )
        };
        let mut f = Follower::default();
        let t = std::time::Instant::now();
        let before = state("1280x800@60");
        assert!(f.on_outputs(&output_modes(&before), t).is_empty());
        // The "hotplug": the kernel made 1920x1080 the preferred mode; mutter kept 1280x800.
        let after = state("1920x1080@60");
        let outs = output_modes(&after);
        assert_eq!(outs[0].current, Some((1280, 800)));
        assert_eq!(outs[0].preferred, Some((1920, 1080)));
        let follow = f.on_outputs(&outs, t);
        assert_eq!(follow.len(), 1);
        let cfg = follow_config(&after, &follow);
        assert_eq!((cfg[0].width, cfg[0].height), (1920, 1080));
        let p = plan(&after, &cfg).expect("plan");
        assert_eq!(p[0].5[0].1, "1920x1080@60");
    }
}
