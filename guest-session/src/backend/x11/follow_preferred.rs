//! X11: follow an output's preferred mode when the display device changes it (QXL, virtio-vga).
//!
//! With QXL or virtio-vga, spice-server hands the client's monitors config to the display device instead of the
//! agent; the guest kernel only makes the client's size the output's preferred mode and signals a hotplug. The X
//! server (modesetting or qxl driver) re-probes the output and sends a RandR output-change notification, but keeps
//! the current mode. Here, on every RandR notification, the connected outputs are read back and the same policy
//! as the Wayland and GNOME backends decides ([`crate::backend::follow_preferred::Follower`]): an output whose
//! preferred mode *changed* to a size other than its current one is switched to it, the other outputs keep their
//! rectangles, and the result goes through the ordinary RandR resize ([`X11::apply_monitors`]) with positions.
//! See docs/desktops.md. Off with `GUESTLINK_FOLLOW_PREFERRED=0`.

use std::time::Instant;

use anyhow::Result;
use guestlink_protocol::session::{GeometryMonitor, SessionMonitor};
use guestlink_protocol::vdagent::display::MONITORS_FLAG_USE_POS;
use x11rb::protocol::randr::{Connection as RandrConnection, ConnectionExt as _};

use super::X11;
use crate::backend::follow_preferred::{keep_layout_and_follow, Follower, OutputModes};

/// One RandR output as the server reports it, in the screen's output order (display id = index).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RandrOutput {
    /// Output name (`Virtual-1`, `qxl-0`, …).
    pub name: String,
    /// A monitor is connected.
    pub connected: bool,
    /// Size of the CRTC's mode when the output is lit.
    pub current: Option<(u32, u32)>,
    /// Size of the first preferred mode, when the output has one.
    pub preferred: Option<(u32, u32)>,
}

/// The pure decision: from the outputs and the current layout, the monitors config to apply (with positions), or
/// `None` when no connected output has to follow its preferred mode. Records the preferred modes in `follower`.
pub fn plan_follow(
    follower: &mut Follower,
    outputs: &[RandrOutput],
    geometry: &[GeometryMonitor],
    now: Instant,
) -> Option<Vec<SessionMonitor>> {
    let modes: Vec<OutputModes> = outputs
        .iter()
        .filter(|o| o.connected)
        .map(|o| OutputModes {
            name: o.name.clone(),
            current: o.current,
            preferred: o.preferred,
        })
        .collect();
    let follow = follower.on_outputs(&modes, now);
    if follow.is_empty() {
        return None;
    }
    Some(keep_layout_and_follow(
        outputs.iter().map(|o| o.name.as_str()),
        geometry,
        &follow,
    ))
}

impl X11 {
    /// Reads the outputs back (no re-probe: the server probed on the hotplug) and their preferred and current
    /// sizes.
    fn randr_outputs(&self) -> Result<Vec<RandrOutput>> {
        let res = self
            .conn
            .randr_get_screen_resources_current(self.root)?
            .reply()?;
        let size_of = |id: u32| {
            res.modes
                .iter()
                .find(|m| m.id == id)
                .map(|m| (u32::from(m.width), u32::from(m.height)))
        };
        let mut out = Vec::with_capacity(res.outputs.len());
        for output in &res.outputs {
            let info = self
                .conn
                .randr_get_output_info(*output, res.config_timestamp)?
                .reply()?;
            let current = if info.crtc == 0 {
                None
            } else {
                let c = self
                    .conn
                    .randr_get_crtc_info(info.crtc, res.config_timestamp)?
                    .reply()?;
                (c.mode != 0).then(|| size_of(c.mode)).flatten()
            };
            let preferred = (info.num_preferred > 0)
                .then(|| info.modes.first().copied().and_then(size_of))
                .flatten();
            out.push(RandrOutput {
                name: String::from_utf8_lossy(&info.name).into_owned(),
                connected: info.connection == RandrConnection::CONNECTED,
                current,
                preferred,
            });
        }
        Ok(out)
    }

    /// After a RandR notification (and once at start, which only records): applies a changed preferred mode.
    pub(super) fn follow_preferred(&mut self) -> Result<()> {
        if self.randr.is_none() {
            return Ok(());
        }
        let outputs = self.randr_outputs()?;
        let geometry = self.geometry()?;
        let Some(monitors) = plan_follow(&mut self.follow, &outputs, &geometry, Instant::now())
        else {
            return Ok(());
        };
        self.apply_monitors(MONITORS_FLAG_USE_POS, &monitors)?;
        self.report_geometry(false)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn output(name: &str, cur: Option<(u32, u32)>, pref: (u32, u32)) -> RandrOutput {
        RandrOutput {
            name: name.into(),
            connected: true,
            current: cur,
            preferred: Some(pref),
        }
    }

    fn geo(id: u32, x: i32, w: u32, h: u32) -> GeometryMonitor {
        GeometryMonitor {
            display_id: id,
            x,
            y: 0,
            width: w,
            height: h,
        }
    }

    #[test]
    fn first_sighting_records_then_a_changed_preferred_mode_is_applied() {
        let mut f = Follower::new(true, Duration::from_secs(3));
        let t = Instant::now();
        let g = [geo(0, 0, 1024, 768)];
        // Boot: X picked the preferred mode.
        let boot = [output("Virtual-1", Some((1024, 768)), (1024, 768))];
        assert_eq!(plan_follow(&mut f, &boot, &g, t), None);
        // The client asked for 1280x720: the kernel made it the preferred mode, X kept 1024x768.
        let hotplug = [output("Virtual-1", Some((1024, 768)), (1280, 720))];
        assert_eq!(
            plan_follow(&mut f, &hotplug, &g, t),
            Some(vec![SessionMonitor::sized(1280, 720, 0, 0)])
        );
        // Applied: the notifications that follow change nothing.
        let applied = [output("Virtual-1", Some((1280, 720)), (1280, 720))];
        assert_eq!(
            plan_follow(&mut f, &applied, &[geo(0, 0, 1280, 720)], t),
            None
        );
    }

    #[test]
    fn other_outputs_keep_their_rectangles_and_disconnected_ones_are_ignored() {
        let mut f = Follower::new(true, Duration::from_secs(3));
        let t = Instant::now();
        let g = [geo(0, 0, 1024, 768), geo(2, 1024, 800, 600)];
        let mut outs = vec![
            output("Virtual-1", Some((1024, 768)), (1024, 768)),
            RandrOutput {
                name: "Virtual-2".into(),
                connected: false,
                current: None,
                preferred: None,
            },
            output("Virtual-3", Some((800, 600)), (800, 600)),
        ];
        assert_eq!(plan_follow(&mut f, &outs, &g, t), None);
        outs[2].preferred = Some((1600, 900));
        assert_eq!(
            plan_follow(&mut f, &outs, &g, t),
            Some(vec![
                SessionMonitor::sized(1024, 768, 0, 0),
                SessionMonitor::sized(0, 0, 0, 0),
                SessionMonitor::sized(1600, 900, 1024, 0),
            ])
        );
        // A disconnected output's preferred mode never triggers anything.
        outs[1].preferred = Some((640, 480));
        assert_eq!(plan_follow(&mut f, &outs, &g, t), None);
    }

    #[test]
    fn host_config_debounces_and_off_switch() {
        let t = Instant::now();
        let g = [geo(0, 0, 1024, 768)];
        let boot = [output("Virtual-1", Some((1024, 768)), (1024, 768))];
        let hotplug = [output("Virtual-1", Some((1024, 768)), (1280, 720))];
        // The agent got the monitors config itself (std VGA, or a server that forwards it): it applies it, and
        // the device's preferred-mode change within the debounce window is not acted on twice.
        let mut f = Follower::new(true, Duration::from_secs(3));
        assert_eq!(plan_follow(&mut f, &boot, &g, t), None);
        f.host_request(t);
        assert_eq!(
            plan_follow(&mut f, &hotplug, &g, t + Duration::from_secs(1)),
            None
        );
        // GUESTLINK_FOLLOW_PREFERRED=0.
        let mut off = Follower::new(false, Duration::from_secs(3));
        assert_eq!(plan_follow(&mut off, &boot, &g, t), None);
        assert_eq!(plan_follow(&mut off, &hotplug, &g, t), None);
        // An output that is connected but off (no CRTC) is not lit by a preferred-mode change.
        let mut f = Follower::new(true, Duration::from_secs(3));
        let dark = [output("Virtual-1", None, (1024, 768))];
        assert_eq!(plan_follow(&mut f, &dark, &[], t), None);
        let dark2 = [output("Virtual-1", None, (1280, 720))];
        assert_eq!(plan_follow(&mut f, &dark2, &[], t), None);
    }
}
