//! Outputs: the layout from `wl_output` (current mode, name) and `zxdg_output_v1` (logical position: wlroots
//! sends 0,0 in `wl_output.geometry`), and resize through
//! `zwlr_output_manager_v1` (wlroots: sway, Hyprland) with custom modes.
//!
//! Display ids are the outputs sorted by name (or mapped by GRAPHICS_DEVICE_INFO). sway 1.7 announces its headless head as `enabled(0)` with one mode
//! without a size, so the layout is taken from `wl_output`, and a resize always sends `enable_head` (never
//! `disable_head` for a head the monitors config keeps) plus `set_mode` for a listed mode of that size, else
//! `set_custom_mode(w, h, 0)`. A `cancelled` result (stale serial) is retried once after the next `done`.

use guestlink_protocol::session::{GeometryMonitor, SessionMonitor};
use wayland_client::backend::ObjectId;
use wayland_client::protocol::wl_output::{self, WlOutput};
use wayland_client::{Connection, Dispatch, Proxy, QueueHandle, WEnum};
use wayland_protocols::xdg::xdg_output::zv1::client::{
    zxdg_output_manager_v1::ZxdgOutputManagerV1,
    zxdg_output_v1::{self, ZxdgOutputV1},
};
use wayland_protocols_wlr::output_management::v1::client::{
    zwlr_output_configuration_head_v1::ZwlrOutputConfigurationHeadV1,
    zwlr_output_configuration_v1::{self, ZwlrOutputConfigurationV1},
    zwlr_output_head_v1::{self, ZwlrOutputHeadV1},
    zwlr_output_manager_v1::{self, ZwlrOutputManagerV1},
    zwlr_output_mode_v1::{self, ZwlrOutputModeV1},
};

use super::follow_preferred::{keep_layout_and_follow, Follower, OutputModes};
use super::State;

/// One `wl_output` (user data: its global name).
#[derive(Debug)]
pub struct WlOut {
    pub output: WlOutput,
    pub global: u32,
    /// Its xdg-output, when the compositor has `zxdg_output_manager_v1`.
    pub xdg: Option<ZxdgOutputV1>,
    name: Option<String>,
    x: i32,
    y: i32,
    /// Logical position from xdg-output (wins over `wl_output.geometry`).
    logical: Option<(i32, i32)>,
    width: i32,
    height: i32,
}

impl WlOut {
    /// A bound output whose events have not arrived yet.
    pub fn new(output: WlOutput, global: u32) -> Self {
        Self {
            output,
            global,
            xdg: None,
            name: None,
            x: 0,
            y: 0,
            logical: None,
            width: 0,
            height: 0,
        }
    }
}

#[derive(Debug)]
struct Head {
    head: ZwlrOutputHeadV1,
    name: String,
    enabled: bool,
    modes: Vec<ZwlrOutputModeV1>,
    current: Option<ObjectId>,
}

#[derive(Debug, Default, Clone, Copy)]
struct ModeInfo {
    width: i32,
    height: i32,
    preferred: bool,
}

/// wlr-output-management state.
#[derive(Debug)]
pub struct Wlr {
    manager: ZwlrOutputManagerV1,
    serial: Option<u32>,
    heads: Vec<Head>,
    modes: Vec<(ObjectId, ModeInfo)>,
    /// A config waiting for a fresh serial (after `cancelled`), with the retries left.
    retry: Option<(Vec<SessionMonitor>, u8)>,
    applying: Option<(ZwlrOutputConfigurationV1, Vec<SessionMonitor>, u8)>,
    /// Follows a changed preferred mode (virtio-gpu hotplug).
    follower: Follower,
}

impl Wlr {
    /// Wraps the bound manager.
    pub fn new(manager: ZwlrOutputManagerV1) -> Self {
        Self {
            manager,
            serial: None,
            heads: Vec::new(),
            modes: Vec::new(),
            retry: None,
            applying: None,
            follower: Follower::from_env(),
        }
    }
}

impl State {
    /// The layout, display ids in output-name order (or as GRAPHICS_DEVICE_INFO maps them).
    pub(super) fn geometry(&self) -> Vec<GeometryMonitor> {
        let mut outs: Vec<&WlOut> = self.outputs.iter().filter(|o| o.width > 0).collect();
        outs.sort_by(|a, b| a.name.cmp(&b.name).then(a.global.cmp(&b.global)));
        let outs = crate::display_map::arrange(outs, |o| o.name.as_deref().unwrap_or(""));
        outs.iter()
            .enumerate()
            .map(|(i, o)| GeometryMonitor {
                display_id: u32::try_from(i).unwrap_or(u32::MAX),
                x: o.logical.map_or(o.x, |l| l.0),
                y: o.logical.map_or(o.y, |l| l.1),
                width: o.width.unsigned_abs(),
                height: o.height.unsigned_abs(),
            })
            .collect()
    }

    /// Applies a monitors config (index = display id).
    pub(super) fn apply_monitors(&mut self, monitors: Vec<SessionMonitor>) {
        if !monitors.iter().any(|m| m.width > 0 && m.height > 0) {
            tracing::warn!(?monitors, "monitors config disables every output; ignored");
            self.need_geometry = true;
            return;
        }
        let Some(w) = self.wlr.as_mut() else {
            tracing::warn!("no output-management interface: cannot resize");
            self.need_geometry = true;
            return;
        };
        w.follower.host_request(std::time::Instant::now());
        match w.serial {
            Some(_) if w.applying.is_none() => self.wlr_apply(monitors, 1),
            _ => w.retry = Some((monitors, 1)),
        }
    }

    fn wlr_apply(&mut self, monitors: Vec<SessionMonitor>, retries: u8) {
        let qh = self.qh.clone();
        let Some(w) = self.wlr.as_mut() else { return };
        let Some(serial) = w.serial else { return };
        let cfg = w.manager.create_configuration(serial, &qh, ());
        let mut heads: Vec<&Head> = w.heads.iter().collect();
        heads.sort_by(|a, b| a.name.cmp(&b.name));
        let heads = crate::display_map::arrange(heads, |h| h.name.as_str());
        for (i, h) in heads.iter().enumerate() {
            match monitors.get(i) {
                Some(m) if m.width > 0 && m.height > 0 => {
                    let ch = cfg.enable_head(&h.head, &qh, ());
                    let (mw, mh) = (
                        i32::try_from(m.width).unwrap_or(i32::MAX),
                        i32::try_from(m.height).unwrap_or(i32::MAX),
                    );
                    let listed = h.modes.iter().find(|mode| {
                        w.modes.iter().any(|(id, info)| {
                            *id == mode.id() && info.width == mw && info.height == mh
                        })
                    });
                    match listed {
                        Some(mode) => ch.set_mode(mode),
                        None => ch.set_custom_mode(mw, mh, 0),
                    }
                    ch.set_position(m.x, m.y);
                    tracing::info!(head = %h.name, width = mw, height = mh, x = m.x, y = m.y, listed = listed.is_some(), "wlr output: enable");
                }
                Some(_) => {
                    tracing::info!(head = %h.name, "wlr output: disable");
                    cfg.disable_head(&h.head);
                }
                None if h.enabled => {
                    cfg.enable_head(&h.head, &qh, ());
                }
                None => cfg.disable_head(&h.head),
            }
        }
        cfg.apply();
        w.applying = Some((cfg, monitors, retries));
    }

    /// After a manager `done`: switches heads whose preferred mode changed (and is not current) to it.
    fn wlr_follow_preferred(&mut self) {
        let geometry = self.geometry();
        let Some(w) = self.wlr.as_mut() else { return };
        let size = |id: &ObjectId| {
            w.modes
                .iter()
                .find(|(i, _)| i == id)
                .map(|(_, m)| (m.width.unsigned_abs(), m.height.unsigned_abs()))
                .filter(|&(mw, mh)| mw > 0 && mh > 0)
        };
        let outs: Vec<OutputModes> = w
            .heads
            .iter()
            .map(|h| OutputModes {
                name: h.name.clone(),
                current: h.current.as_ref().and_then(size),
                preferred: h
                    .modes
                    .iter()
                    .map(|m| m.id())
                    .find(|id| w.modes.iter().any(|(i, m)| i == id && m.preferred))
                    .as_ref()
                    .and_then(size),
            })
            .collect();
        let follow = w.follower.on_outputs(&outs, std::time::Instant::now());
        if follow.is_empty() || w.applying.is_some() || w.retry.is_some() {
            return;
        }
        let mut names: Vec<&str> = w.heads.iter().map(|h| h.name.as_str()).collect();
        names.sort_unstable();
        let names = crate::display_map::arrange(names, |n| n);
        let monitors = keep_layout_and_follow(names, &geometry, &follow);
        self.wlr_apply(monitors, 1);
    }

    fn wlr_result(&mut self, ok: Option<bool>) {
        let Some(w) = self.wlr.as_mut() else { return };
        let Some((cfg, monitors, retries)) = w.applying.take() else {
            return;
        };
        cfg.destroy();
        match ok {
            Some(true) => tracing::info!("wlr output configuration succeeded"),
            Some(false) => tracing::warn!("wlr output configuration failed"),
            None if retries > 0 => {
                tracing::info!("wlr output configuration cancelled (stale serial); retrying");
                w.retry = Some((monitors, retries - 1));
                return;
            }
            None => tracing::warn!("wlr output configuration cancelled again; giving up"),
        }
        self.need_geometry = true;
    }
}

impl Dispatch<WlOutput, u32> for State {
    fn event(
        state: &mut Self,
        output: &WlOutput,
        event: wl_output::Event,
        _: &u32,
        _: &Connection,
        _: &QueueHandle<Self>,
    ) {
        let Some(o) = state.outputs.iter_mut().find(|o| &o.output == output) else {
            return;
        };
        match event {
            wl_output::Event::Geometry { x, y, .. } => {
                o.x = x;
                o.y = y;
            }
            wl_output::Event::Mode {
                flags: WEnum::Value(f),
                width,
                height,
                ..
            } if f.contains(wl_output::Mode::Current) => {
                o.width = width;
                o.height = height;
            }
            wl_output::Event::Name { name } => o.name = Some(name),
            wl_output::Event::Done => state.outputs_changed = true,
            _ => {}
        }
    }
}

impl Dispatch<ZwlrOutputManagerV1, ()> for State {
    fn event(
        state: &mut Self,
        _: &ZwlrOutputManagerV1,
        event: zwlr_output_manager_v1::Event,
        _: &(),
        _: &Connection,
        _: &QueueHandle<Self>,
    ) {
        let Some(w) = state.wlr.as_mut() else { return };
        match event {
            zwlr_output_manager_v1::Event::Head { head } => w.heads.push(Head {
                head,
                name: String::new(),
                enabled: false,
                modes: Vec::new(),
                current: None,
            }),
            zwlr_output_manager_v1::Event::Done { serial } => {
                w.serial = Some(serial);
                if w.applying.is_none() {
                    if let Some((monitors, retries)) = w.retry.take() {
                        state.wlr_apply(monitors, retries);
                    }
                }
                state.wlr_follow_preferred();
            }
            zwlr_output_manager_v1::Event::Finished => state.wlr = None,
            _ => {}
        }
    }

    wayland_client::event_created_child!(State, ZwlrOutputManagerV1, [
        zwlr_output_manager_v1::EVT_HEAD_OPCODE => (ZwlrOutputHeadV1, ())
    ]);
}

impl Dispatch<ZwlrOutputHeadV1, ()> for State {
    fn event(
        state: &mut Self,
        proxy: &ZwlrOutputHeadV1,
        event: zwlr_output_head_v1::Event,
        _: &(),
        _: &Connection,
        _: &QueueHandle<Self>,
    ) {
        let Some(w) = state.wlr.as_mut() else { return };
        let Some(h) = w.heads.iter_mut().find(|h| &h.head == proxy) else {
            return;
        };
        match event {
            zwlr_output_head_v1::Event::Name { name } => h.name = name,
            zwlr_output_head_v1::Event::Enabled { enabled } => {
                h.enabled = enabled != 0;
                if !h.enabled {
                    h.current = None;
                }
            }
            zwlr_output_head_v1::Event::CurrentMode { mode } => h.current = Some(mode.id()),
            zwlr_output_head_v1::Event::Mode { mode } => {
                w.modes.push((mode.id(), ModeInfo::default()));
                h.modes.push(mode);
            }
            zwlr_output_head_v1::Event::Finished => {
                let id = proxy.id();
                w.heads.retain(|h| h.head.id() != id);
            }
            _ => {}
        }
    }

    wayland_client::event_created_child!(State, ZwlrOutputHeadV1, [
        zwlr_output_head_v1::EVT_MODE_OPCODE => (ZwlrOutputModeV1, ())
    ]);
}

impl Dispatch<ZwlrOutputModeV1, ()> for State {
    fn event(
        state: &mut Self,
        proxy: &ZwlrOutputModeV1,
        event: zwlr_output_mode_v1::Event,
        _: &(),
        _: &Connection,
        _: &QueueHandle<Self>,
    ) {
        let Some(w) = state.wlr.as_mut() else { return };
        let id = proxy.id();
        match event {
            zwlr_output_mode_v1::Event::Size { width, height } => {
                if let Some((_, m)) = w.modes.iter_mut().find(|(i, _)| *i == id) {
                    m.width = width;
                    m.height = height;
                }
            }
            zwlr_output_mode_v1::Event::Preferred => {
                if let Some((_, m)) = w.modes.iter_mut().find(|(i, _)| *i == id) {
                    m.preferred = true;
                }
            }
            zwlr_output_mode_v1::Event::Finished => {
                w.modes.retain(|(i, _)| *i != id);
                for h in &mut w.heads {
                    h.modes.retain(|m| m.id() != id);
                }
            }
            _ => {}
        }
    }
}

impl Dispatch<ZwlrOutputConfigurationV1, ()> for State {
    fn event(
        state: &mut Self,
        _: &ZwlrOutputConfigurationV1,
        event: zwlr_output_configuration_v1::Event,
        _: &(),
        _: &Connection,
        _: &QueueHandle<Self>,
    ) {
        match event {
            zwlr_output_configuration_v1::Event::Succeeded => state.wlr_result(Some(true)),
            zwlr_output_configuration_v1::Event::Failed => state.wlr_result(Some(false)),
            zwlr_output_configuration_v1::Event::Cancelled => state.wlr_result(None),
            _ => {}
        }
    }
}

impl Dispatch<ZwlrOutputConfigurationHeadV1, ()> for State {
    fn event(
        _: &mut Self,
        _: &ZwlrOutputConfigurationHeadV1,
        _: <ZwlrOutputConfigurationHeadV1 as Proxy>::Event,
        _: &(),
        _: &Connection,
        _: &QueueHandle<Self>,
    ) {
    }
}

impl Dispatch<ZxdgOutputManagerV1, ()> for State {
    fn event(
        _: &mut Self,
        _: &ZxdgOutputManagerV1,
        _: <ZxdgOutputManagerV1 as Proxy>::Event,
        _: &(),
        _: &Connection,
        _: &QueueHandle<Self>,
    ) {
    }
}

impl Dispatch<ZxdgOutputV1, u32> for State {
    fn event(
        state: &mut Self,
        _: &ZxdgOutputV1,
        event: zxdg_output_v1::Event,
        global: &u32,
        _: &Connection,
        _: &QueueHandle<Self>,
    ) {
        let Some(o) = state.outputs.iter_mut().find(|o| o.global == *global) else {
            return;
        };
        match event {
            zxdg_output_v1::Event::LogicalPosition { x, y } => o.logical = Some((x, y)),
            zxdg_output_v1::Event::Name { name } => {
                o.name.get_or_insert(name);
            }
            // Version 1-2: xdg-output's own done (from 3 on, wl_output.done covers it).
            zxdg_output_v1::Event::Done => state.outputs_changed = true,
            _ => {}
        }
    }
}
