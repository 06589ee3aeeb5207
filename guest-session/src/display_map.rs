//! SPICE display id → desktop output, from GRAPHICS_DEVICE_INFO (docs/guestlink-session.md "Display ids").
//!
//! Each GRAPHICS_DEVICE_INFO entry says which device drives display `channel_id + monitor_id`: a PCI address
//! (`pci/<domain>/<slot>.<fn>[/<slot>.<fn>…]`, one `slot.fn` per bridge on the way) and the index of the DRM
//! connector on that device. The address is matched against the sysfs path of each `/sys/class/drm/cardN` (the
//! same domain and the same chain of slot/function numbers), the connector is the card's `cardN-<connector>`
//! entry at that index (ordered by `connector_id`, else by name), and its kernel name (or the name the Xorg
//! modesetting or QXL driver derives from it) is then looked up among the backend's outputs by name.
//! Display ids without a match keep the output order of the backend, as before (and as spice-vdagent falls
//! back to the RandR output index).
//!
//! The resolved map is process-wide ([`set_devices`]): every backend asks [`display_order`] with its own
//! output names when it reports geometry or applies a config. The sysfs root is `/sys`, or
//! `$GUESTLINK_SESSION_SYSFS` (for tests: virtual display servers have no DRM device).

use std::path::{Path, PathBuf};
use std::sync::RwLock;

use guestlink_protocol::session::SessionDeviceDisplay;

/// Most entries kept (the codec's own cap on GRAPHICS_DEVICE_INFO).
const MAX_ENTRIES: usize = 256;
/// PCI ids of the QXL device, whose Xorg driver names its outputs differently.
const QXL_VENDOR: u32 = 0x1b36;
const QXL_DEVICE: u32 = 0x0100;

/// One display whose connector was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MappedDisplay {
    /// SPICE display id (`channel_id + monitor_id`).
    pub display_id: u32,
    /// The connector's kernel name, e.g. `Virtual-1`, `HDMI-A-1`.
    pub connector: String,
    /// The card is a QXL device (its Xorg driver's naming applies).
    pub qxl: bool,
}

static MAP: RwLock<Vec<MappedDisplay>> = RwLock::new(Vec::new());

/// The sysfs root to look cards up in.
fn sysfs_root() -> PathBuf {
    std::env::var_os("GUESTLINK_SESSION_SYSFS")
        .filter(|v| !v.is_empty())
        .map_or_else(|| PathBuf::from("/sys"), PathBuf::from)
}

/// Resolves `devices` (from the daemon) against sysfs and makes the result the process-wide map. Returns it.
pub fn set_devices(devices: &[SessionDeviceDisplay]) -> Vec<MappedDisplay> {
    let map = resolve(&sysfs_root(), devices);
    // One info line per message (a host can repeat it); the entries at debug.
    tracing::info!(
        entries = devices.len(),
        mapped = map.len(),
        "GRAPHICS_DEVICE_INFO: displays mapped to DRM connectors"
    );
    for d in devices.iter().take(MAX_ENTRIES) {
        let id = d.channel_id.saturating_add(d.monitor_id);
        match map.iter().find(|m| m.display_id == id) {
            Some(m) => tracing::debug!(display = id, address = %d.device_address,
                device_display = d.device_display_id, connector = %m.connector, "display mapped to a DRM connector"),
            None => tracing::debug!(display = id, address = %d.device_address,
                device_display = d.device_display_id, "no DRM connector for this display: output order applies"),
        }
    }
    if let Ok(mut m) = MAP.write() {
        m.clone_from(&map);
    }
    map
}

/// For the outputs `names` (in the backend's own order): the output index of each display id, i.e. a
/// permutation `order` with `order[display_id] = index into names` (see [`order_for`]).
pub fn display_order(names: &[&str]) -> Vec<usize> {
    let map = MAP.read().map(|m| m.clone()).unwrap_or_default();
    order_for(&map, names)
}

/// `items` (outputs in the backend's own order, named by `name`) rearranged so that the index is the display
/// id: [`display_order`] applied.
pub fn arrange<T>(items: Vec<T>, name: impl Fn(&T) -> &str) -> Vec<T> {
    let order = {
        let names: Vec<&str> = items.iter().map(&name).collect();
        display_order(&names)
    };
    let mut slots: Vec<Option<T>> = items.into_iter().map(Some).collect();
    order
        .into_iter()
        .filter_map(|i| slots.get_mut(i).and_then(Option::take))
        .collect()
}

/// The inverse of an order: the display id of each output index.
pub fn display_ids(order: &[usize]) -> Vec<u32> {
    let mut ids = vec![0u32; order.len()];
    for (display, &output) in order.iter().enumerate() {
        if let Some(slot) = ids.get_mut(output) {
            *slot = u32::try_from(display).unwrap_or(u32::MAX);
        }
    }
    ids
}

/// The names an output of `connector` can have: the kernel's (Wayland compositors, Xorg modesetting for most
/// types), the modesetting driver's (`HDMI-A-1` → `HDMI-1`, `Unknown-1` → `None-1`), and with QXL its Xorg
/// driver's (`DVI-I-1` → `DVI-1`, `DP-1` → `DisplayPort-1`, …; ids one lower when `zero_based`, i.e. an
/// output `Virtual-0` exists).
fn candidate_names(connector: &str, qxl: bool, zero_based: bool) -> Vec<String> {
    let mut out = vec![connector.to_owned()];
    let Some((kind, id)) = connector.rsplit_once('-') else {
        return out;
    };
    let Ok(id) = id.parse::<u32>() else {
        return out;
    };
    let modesetting = match kind {
        "HDMI-A" => "HDMI",
        "Unknown" => "None",
        other => other,
    };
    out.push(format!("{modesetting}-{id}"));
    if qxl {
        let qxl_kind = match kind {
            "DVI-I" | "DVI-D" | "DVI-A" => "DVI",
            "DP" => "DisplayPort",
            "HDMI-A" | "HDMI-B" => "HDMI",
            "SVIDEO" => "S-video",
            "Component" => "CTV",
            "Unknown" => "None",
            other => other,
        };
        let qxl_id = if zero_based { id.saturating_sub(1) } else { id };
        out.push(format!("{qxl_kind}-{qxl_id}"));
    }
    out.dedup();
    out
}

/// [`display_order`] for an explicit map: displays found in `map` whose connector names an output get that
/// output; every other display id `d` gets output `d` if no mapped display took it, else the first output no
/// one took. Without a map this is the identity.
pub fn order_for(map: &[MappedDisplay], names: &[&str]) -> Vec<usize> {
    let n = names.len();
    let zero_based = names.contains(&"Virtual-0");
    let mut order: Vec<Option<usize>> = vec![None; n];
    let mut taken = vec![false; n];
    for m in map {
        let d = m.display_id as usize;
        if d >= n || order[d].is_some() {
            continue;
        }
        let candidates = candidate_names(&m.connector, m.qxl, zero_based);
        let found = names
            .iter()
            .position(|name| candidates.iter().any(|c| c == name));
        if let Some(i) = found.filter(|&i| !taken[i]) {
            order[d] = Some(i);
            taken[i] = true;
        }
    }
    for d in 0..n {
        if order[d].is_some() {
            continue;
        }
        let pick = if taken[d] {
            taken.iter().position(|t| !t)
        } else {
            Some(d)
        };
        if let Some(i) = pick {
            order[d] = Some(i);
            taken[i] = true;
        }
    }
    order.into_iter().map(|o| o.unwrap_or(0)).collect()
}

/// A PCI domain and the (slot, function) of each device on the way from the root bus.
type PciAddress = (u32, Vec<(u32, u32)>);

/// `pci/<domain>/<slot>.<fn>/…` → (domain, [(slot, fn)…]); `None` when malformed.
fn parse_spice_address(address: &str) -> Option<PciAddress> {
    let rest = address.strip_prefix("pci/")?;
    let mut parts = rest.split('/');
    let domain = u32::from_str_radix(parts.next()?, 16).ok()?;
    let mut chain = Vec::new();
    for p in parts {
        let (slot, func) = p.split_once('.')?;
        chain.push((
            u32::from_str_radix(slot, 16).ok()?,
            u32::from_str_radix(func, 16).ok()?,
        ));
        if chain.len() > 32 {
            return None;
        }
    }
    (!chain.is_empty()).then_some((domain, chain))
}

/// The PCI chain of a card's resolved sysfs path below `devices/`: `pci0000:00/0000:00:03.0/0000:01:01.0/…`
/// → (domain, [(slot, fn)…]) up to the first component that is not a PCI function.
fn parse_sysfs_path(below_devices: &Path) -> Option<PciAddress> {
    let mut comps = below_devices.components().map(|c| c.as_os_str().to_str());
    let root = comps.next()??.strip_prefix("pci")?;
    let domain = u32::from_str_radix(root.split_once(':')?.0, 16).ok()?;
    let mut chain = Vec::new();
    for c in comps {
        // dddd:bb:ss.f
        let Some(c) = c else { break };
        let mut f = c.split(':');
        let (Some(_dom), Some(_bus), Some(sf), None) = (f.next(), f.next(), f.next(), f.next())
        else {
            break;
        };
        let Some((slot, func)) = sf.split_once('.') else {
            break;
        };
        match (u32::from_str_radix(slot, 16), u32::from_str_radix(func, 16)) {
            (Ok(s), Ok(fun)) => chain.push((s, fun)),
            _ => break,
        }
    }
    (!chain.is_empty()).then_some((domain, chain))
}

fn read_hex(path: &Path) -> Option<u32> {
    let s = std::fs::read_to_string(path).ok()?;
    let s = s.trim();
    u32::from_str_radix(s.strip_prefix("0x").unwrap_or(s), 16).ok()
}

/// The `cardN` directories of `root/class/drm` (not the connector entries `cardN-…`).
fn cards(drm: &Path) -> Vec<String> {
    let Ok(rd) = std::fs::read_dir(drm) else {
        return Vec::new();
    };
    let mut cards: Vec<String> = rd
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| {
            n.strip_prefix("card")
                .is_some_and(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
        })
        .collect();
    cards.sort();
    cards.truncate(64);
    cards
}

/// The card's connectors in DRM order: `connector_id` when the kernel exposes it, else by name.
fn connectors(drm: &Path, card: &str) -> Vec<String> {
    let Ok(rd) = std::fs::read_dir(drm) else {
        return Vec::new();
    };
    let prefix = format!("{card}-");
    let mut found: Vec<(u32, String)> = rd
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter_map(|n| {
            let conn = n.strip_prefix(&prefix)?.to_owned();
            let id = std::fs::read_to_string(drm.join(&n).join("connector_id"))
                .ok()
                .and_then(|s| s.trim().parse().ok())
                .unwrap_or(u32::MAX);
            Some((id, conn))
        })
        .collect();
    found.sort();
    found.truncate(256);
    found.into_iter().map(|(_, c)| c).collect()
}

/// Resolves `devices` against the DRM cards under `root` (a sysfs root).
pub fn resolve(root: &Path, devices: &[SessionDeviceDisplay]) -> Vec<MappedDisplay> {
    let drm = root.join("class/drm");
    let devices_dir =
        std::fs::canonicalize(root.join("devices")).unwrap_or_else(|_| root.join("devices"));
    // (address, connectors, qxl) of each card with a PCI address.
    let cards: Vec<(PciAddress, Vec<String>, bool)> = cards(&drm)
        .into_iter()
        .filter_map(|card| {
            let real = std::fs::canonicalize(drm.join(&card)).ok()?;
            let addr = parse_sysfs_path(real.strip_prefix(&devices_dir).ok()?)?;
            let dev = drm.join(&card).join("device");
            let qxl = read_hex(&dev.join("vendor")) == Some(QXL_VENDOR)
                && read_hex(&dev.join("device")) == Some(QXL_DEVICE);
            Some((addr, connectors(&drm, &card), qxl))
        })
        .collect();
    let mut out = Vec::new();
    for d in devices.iter().take(MAX_ENTRIES) {
        let Some(addr) = parse_spice_address(&d.device_address) else {
            tracing::debug!(address = %d.device_address, "device address not understood");
            continue;
        };
        let Some((_, conns, qxl)) = cards.iter().find(|(a, _, _)| *a == addr) else {
            continue;
        };
        let Some(connector) = conns.get(d.device_display_id as usize) else {
            continue;
        };
        out.push(MappedDisplay {
            display_id: d.channel_id.saturating_add(d.monitor_id),
            connector: connector.clone(),
            qxl: *qxl,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dev(channel: u32, monitor: u32, index: u32, addr: &str) -> SessionDeviceDisplay {
        SessionDeviceDisplay {
            channel_id: channel,
            monitor_id: monitor,
            device_display_id: index,
            device_address: addr.into(),
        }
    }

    fn mapped(display_id: u32, connector: &str, qxl: bool) -> MappedDisplay {
        MappedDisplay {
            display_id,
            connector: connector.into(),
            qxl,
        }
    }

    /// A sysfs tree: `card` at PCI path `pci` (below devices/) with `conns` (name, connector_id).
    fn card(root: &Path, card: &str, pci: &str, ids: (&str, &str), conns: &[(&str, u32)]) {
        let devdir = root.join("devices").join(pci);
        let carddir = devdir.join("drm").join(card);
        std::fs::create_dir_all(&carddir).unwrap();
        std::fs::write(devdir.join("vendor"), format!("{}\n", ids.0)).unwrap();
        std::fs::write(devdir.join("device"), format!("{}\n", ids.1)).unwrap();
        std::os::unix::fs::symlink(&devdir, carddir.join("device")).unwrap();
        let drm = root.join("class/drm");
        std::fs::create_dir_all(&drm).unwrap();
        std::os::unix::fs::symlink(&carddir, drm.join(card)).unwrap();
        for (name, id) in conns {
            let c = carddir.join(format!("{card}-{name}"));
            std::fs::create_dir_all(&c).unwrap();
            std::fs::write(c.join("connector_id"), format!("{id}\n")).unwrap();
            std::os::unix::fs::symlink(&c, drm.join(format!("{card}-{name}"))).unwrap();
        }
    }

    #[test]
    fn addresses_parse_and_hostile_ones_are_refused() {
        assert_eq!(
            parse_spice_address("pci/0000/02.0"),
            Some((0, vec![(2, 0)]))
        );
        assert_eq!(
            parse_spice_address("pci/0001/03.0/01.2"),
            Some((1, vec![(3, 0), (1, 2)]))
        );
        for bad in [
            "",
            "pci/",
            "pci/0000",
            "pci/zz/02.0",
            "usb/0000/02.0",
            "pci/0000/02",
            "pci/0000/02.0/",
        ] {
            assert_eq!(parse_spice_address(bad), None, "{bad:?}");
        }
        let long = format!("pci/0000{}", "/01.0".repeat(100));
        assert_eq!(parse_spice_address(&long), None);
        assert_eq!(
            parse_sysfs_path(Path::new(
                "pci0000:00/0000:00:03.0/0000:01:01.0/virtio2/drm/card0"
            )),
            Some((0, vec![(3, 0), (1, 0)]))
        );
    }

    #[test]
    fn two_cards_and_bridges_resolve_to_their_connectors() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        // virtio-gpu with two heads behind a bridge; a QXL device at 00:02.0 (connector ids out of name order).
        card(
            root,
            "card1",
            "pci0000:00/0000:00:03.0/0000:01:01.0/virtio2",
            ("0x1af4", "0x1050"),
            &[("Virtual-1", 40), ("Virtual-2", 41)],
        );
        card(
            root,
            "card0",
            "pci0000:00/0000:00:02.0",
            ("0x1b36", "0x0100"),
            &[("Virtual-2", 31), ("Virtual-1", 30)],
        );
        let map = resolve(
            root,
            &[
                dev(0, 0, 1, "pci/0000/03.0/01.1"), // no such function: unmapped
                dev(0, 1, 1, "pci/0000/03.0/01.0"), // virtio head 2
                dev(1, 0, 0, "pci/0000/02.0"),      // QXL's first connector (id 30)
                dev(2, 0, 9, "pci/0000/02.0"),      // index out of range
                dev(3, 0, 0, "garbage"),
            ],
        );
        assert_eq!(
            map,
            vec![mapped(1, "Virtual-2", false), mapped(1, "Virtual-1", true)]
        );
    }

    #[test]
    fn order_matches_names_and_falls_back_to_output_order() {
        let names = ["DUMMY0", "DUMMY1", "DUMMY2"];
        assert_eq!(order_for(&[], &names), vec![0, 1, 2]);
        // Display 0 on the 2nd output: display 1 would have had it, so it takes the first free one.
        assert_eq!(
            order_for(&[mapped(0, "DUMMY1", false)], &names),
            vec![1, 0, 2]
        );
        assert_eq!(display_ids(&[1, 0, 2]), vec![1, 0, 2]);
        assert_eq!(display_ids(&[2, 0, 1]), vec![1, 2, 0]);
        // Unknown connector, a display id beyond the outputs, two displays on one output: ignored.
        let map = [
            mapped(0, "nope", false),
            mapped(7, "DUMMY0", false),
            mapped(2, "DUMMY0", false),
            mapped(1, "DUMMY0", false),
        ];
        assert_eq!(order_for(&map, &names), vec![1, 2, 0]);
        // Naming of the Xorg drivers: modesetting HDMI-A → HDMI; QXL zero-based Virtual-0 and DVI.
        assert_eq!(
            order_for(&[mapped(0, "HDMI-A-1", false)], &["VGA-1", "HDMI-1"]),
            vec![1, 0]
        );
        assert_eq!(
            order_for(&[mapped(0, "Virtual-2", true)], &["Virtual-0", "Virtual-1"]),
            vec![1, 0]
        );
        assert_eq!(
            order_for(&[mapped(0, "DVI-I-1", true)], &["Virtual-1", "DVI-1"]),
            vec![1, 0]
        );
        // Without a Virtual-0 the kernel name is used as is.
        assert_eq!(
            order_for(&[mapped(0, "Virtual-2", true)], &["Virtual-1", "Virtual-2"]),
            vec![1, 0]
        );
    }
}
