//! guest-network-get-interfaces (getifaddrs via nix, MAC from sysfs, counters from /proc/net/dev like qemu-ga)
//! and guest-network-get-route (/proc/net/route and /proc/net/ipv6_route).

use std::collections::HashMap;
use std::net::Ipv6Addr;
use std::path::Path;

use serde_json::{json, Map, Value};

use super::error::{CommandError, CommandResult};

/// The eight counters qemu-ga reports, keyed by interface name, from /proc/net/dev text.
pub fn parse_net_dev(text: &str) -> HashMap<String, [u64; 8]> {
    let mut out = HashMap::new();
    for line in text.lines() {
        let Some((name, rest)) = line.trim_start().split_once(':') else {
            continue;
        };
        let v: Vec<u64> = rest
            .split_ascii_whitespace()
            .map_while(|t| t.parse().ok())
            .collect();
        if v.len() < 16 {
            continue;
        }
        out.insert(
            name.to_owned(),
            [v[0], v[1], v[2], v[3], v[8], v[9], v[10], v[11]],
        );
    }
    out
}

/// `aa:bb:cc:dd:ee:ff` from a sysfs `address` file (first six bytes, zero-padded; "" → all zeros as
/// SIOCGIFHWADDR reports for address-less devices).
pub fn mac_from_sysfs(text: &str) -> String {
    let mut b = [0u8; 6];
    for (i, part) in text.trim().split(':').take(6).enumerate() {
        b[i] = u8::from_str_radix(part, 16).unwrap_or(0);
    }
    format!(
        "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
        b[0], b[1], b[2], b[3], b[4], b[5]
    )
}

/// `guest-network-get-interfaces`.
pub fn get_interfaces(proc_root: &Path, sys_root: &Path) -> CommandResult<Value> {
    let addrs =
        nix::ifaddrs::getifaddrs().map_err(|e| CommandError::errno("getifaddrs failed", e))?;
    let stats = std::fs::read_to_string(proc_root.join("net/dev"))
        .map(|t| parse_net_dev(&t))
        .unwrap_or_default();
    let mut list: Vec<Map<String, Value>> = Vec::new();
    for ifa in addrs {
        let name = ifa.interface_name.clone();
        let idx = match list.iter().position(|m| m["name"] == name.as_str()) {
            Some(i) => i,
            None => {
                let mut m = Map::new();
                m.insert("name".into(), json!(name));
                if let Ok(a) =
                    std::fs::read_to_string(sys_root.join("class/net").join(&name).join("address"))
                {
                    m.insert("hardware-address".into(), json!(mac_from_sysfs(&a)));
                }
                list.push(m);
                list.len() - 1
            }
        };
        let Some(addr) = ifa.address.as_ref() else {
            continue;
        };
        let item = if let Some(v4) = addr.as_sockaddr_in() {
            let prefix = ifa
                .netmask
                .as_ref()
                .and_then(|m| m.as_sockaddr_in())
                .map_or(0, |m| m.ip().to_bits().count_ones());
            json!({ "ip-address": v4.ip().to_string(), "ip-address-type": "ipv4", "prefix": prefix })
        } else if let Some(v6) = addr.as_sockaddr_in6() {
            let prefix = ifa
                .netmask
                .as_ref()
                .and_then(|m| m.as_sockaddr_in6())
                .map_or(0, |m| m.ip().to_bits().count_ones());
            json!({ "ip-address": v6.ip().to_string(), "ip-address-type": "ipv6", "prefix": prefix })
        } else {
            continue;
        };
        let m = &mut list[idx];
        match m.get_mut("ip-addresses") {
            Some(Value::Array(a)) => a.push(item),
            _ => {
                m.insert("ip-addresses".into(), json!([item]));
            }
        }
        if !m.contains_key("statistics") {
            if let Some(s) = stats.get(&name) {
                m.insert(
                    "statistics".into(),
                    json!({
                        "rx-bytes": s[0], "rx-packets": s[1], "rx-errs": s[2], "rx-dropped": s[3],
                        "tx-bytes": s[4], "tx-packets": s[5], "tx-errs": s[6], "tx-dropped": s[7],
                    }),
                );
            }
        }
    }
    Ok(Value::Array(list.into_iter().map(Value::Object).collect()))
}

fn v4_from_hex(h: &str) -> Option<String> {
    let v = u32::from_str_radix(h, 16).ok()?;
    let b = v.to_be_bytes();
    Some(format!("{}.{}.{}.{}", b[3], b[2], b[1], b[0]))
}

fn v6_from_hex(h: &str) -> Option<String> {
    if h.len() < 32 {
        return None;
    }
    let v = u128::from_str_radix(&h[..32], 16).ok()?;
    Some(Ipv6Addr::from(v).to_string())
}

/// Routes from /proc/net/route text (first line is a header).
pub fn parse_route_v4(text: &str) -> Vec<Value> {
    let mut out = Vec::new();
    for line in text.lines().skip(1) {
        let t: Vec<&str> = line.split_ascii_whitespace().collect();
        if t.len() < 11 {
            continue;
        }
        let dec = |i: usize| t[i].parse::<i64>().ok();
        let (Some(dest), Some(gw), Some(flags), Some(mask)) = (
            v4_from_hex(t[1]),
            v4_from_hex(t[2]),
            i64::from_str_radix(t[3], 16).ok(),
            v4_from_hex(t[7]),
        ) else {
            continue;
        };
        let (Some(refcnt), Some(use_), Some(metric), Some(mtu), Some(window), Some(irtt)) =
            (dec(4), dec(5), dec(6), dec(8), dec(9), dec(10))
        else {
            continue;
        };
        out.push(json!({
            "iface": t[0], "destination": dest, "metric": metric, "gateway": gw, "mask": mask,
            "irtt": irtt, "flags": flags, "refcnt": refcnt, "use": use_, "window": window, "mtu": mtu,
            "version": 4,
        }));
    }
    out
}

/// Routes from /proc/net/ipv6_route text (no header).
pub fn parse_route_v6(text: &str) -> Vec<Value> {
    let mut out = Vec::new();
    for line in text.lines() {
        let t: Vec<&str> = line.split_ascii_whitespace().collect();
        if t.len() < 10 {
            continue;
        }
        let hex = |i: usize| i64::from_str_radix(t[i], 16).ok();
        let (Some(dpl), Some(spl), Some(metric), Some(refcnt), Some(use_), Some(flags)) =
            (hex(1), hex(3), hex(5), hex(6), hex(7), hex(8))
        else {
            continue;
        };
        let Some(dest) = v6_from_hex(t[0]) else {
            continue;
        };
        let mut m = Map::new();
        m.insert("iface".into(), json!(t[9]));
        m.insert("destination".into(), json!(dest));
        // metric is a signed int in qemu-ga's sscanf ("%x" into int)
        m.insert("metric".into(), json!(metric as u32 as i32));
        m.insert("flags".into(), json!(flags));
        m.insert("refcnt".into(), json!(refcnt));
        m.insert("use".into(), json!(use_));
        m.insert("desprefixlen".into(), json!(dpl.to_string()));
        if let Some(s) = v6_from_hex(t[2]) {
            m.insert("source".into(), json!(s));
        }
        m.insert("srcprefixlen".into(), json!(spl.to_string()));
        if let Some(n) = v6_from_hex(t[4]) {
            m.insert("nexthop".into(), json!(n));
        }
        m.insert("version".into(), json!(6));
        out.push(Value::Object(m));
    }
    out
}

/// `guest-network-get-route`. A missing ipv6_route (IPv6 disabled) is skipped; qemu-ga would fail the command.
pub fn get_routes(proc_root: &Path) -> CommandResult<Value> {
    let v4 = std::fs::read_to_string(proc_root.join("net/route"));
    let v6 = std::fs::read_to_string(proc_root.join("net/ipv6_route"));
    if let (Err(e), Err(_)) = (&v4, &v6) {
        return Err(CommandError::io("open(\"/proc/net/route\")", e));
    }
    let mut out = v4.map(|t| parse_route_v4(&t)).unwrap_or_default();
    out.extend(v6.map(|t| parse_route_v6(&t)).unwrap_or_default());
    Ok(Value::Array(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn real_interfaces_have_lo() {
        let v = get_interfaces(Path::new("/proc"), Path::new("/sys")).unwrap();
        let a = v.as_array().unwrap();
        assert!(a[0]["name"].is_string());
        let lo = a.iter().find(|i| i["name"] == "lo").expect("lo");
        assert_eq!(lo["hardware-address"], "00:00:00:00:00:00");
        let ips = lo["ip-addresses"].as_array().unwrap();
        assert!(ips.iter().any(|i| i["ip-address"] == "127.0.0.1"
            && i["prefix"] == 8
            && i["ip-address-type"] == "ipv4"));
        assert!(lo["statistics"]["rx-bytes"].is_u64());
    }

    #[test]
    fn net_dev_and_mac() {
        let t = "Inter-|   Receive\n face |bytes\n    lo: 10 2 3 4 0 0 0 0 20 5 6 7 0 0 0 0\neth0:1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1\n";
        let m = parse_net_dev(t);
        assert_eq!(m["lo"], [10, 2, 3, 4, 20, 5, 6, 7]);
        assert!(m.contains_key("eth0"));
        assert_eq!(mac_from_sysfs("52:54:00:12:34:56\n"), "52:54:00:12:34:56");
        assert_eq!(mac_from_sysfs("\n"), "00:00:00:00:00:00");
    }

    #[test]
    fn route_fixtures() {
        let v4 =
            "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n\
                  eth0\t00000000\t0202000A\t0003\t0\t0\t100\t00000000\t0\t0\t0\n\
                  eth0\t0002000A\t00000000\t0001\t0\t0\t100\t00FFFFFF\t0\t0\t0\n";
        let r = parse_route_v4(v4);
        assert_eq!(r.len(), 2);
        assert_eq!(r[0]["destination"], "0.0.0.0");
        assert_eq!(r[0]["gateway"], "10.0.2.2");
        assert_eq!(r[0]["flags"], 3);
        assert_eq!(r[1]["mask"], "255.255.255.0");
        assert_eq!(r[1]["destination"], "10.0.2.0");
        let v6 = "fe800000000000000000000000000000 40 00000000000000000000000000000000 00 00000000000000000000000000000000 00000100 00000001 00000000 00000001     eth0\n\
                  00000000000000000000000000000001 80 00000000000000000000000000000000 00 00000000000000000000000000000000 00000000 00000002 00000000 80200001       lo\n";
        let r = parse_route_v6(v6);
        assert_eq!(r[0]["destination"], "fe80::");
        assert_eq!(r[0]["desprefixlen"], "64");
        assert_eq!(r[0]["metric"], 256);
        assert_eq!(r[0]["nexthop"], "::");
        assert_eq!(r[1]["iface"], "lo");
        assert_eq!(r[1]["destination"], "::1");
        assert_eq!(r[1]["version"], 6);
        assert!(get_routes(Path::new("/proc")).unwrap().is_array());
    }
}
