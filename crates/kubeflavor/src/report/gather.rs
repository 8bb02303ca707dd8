//! What a node says of its own network, read from the tools every appliance has: `ip -j`
//! (interfaces, addresses, macvlan links, the default route, the gateway's neighbour
//! entry), the resolver configuration's search domain (the one DHCP gave), and `lldpcli`
//! when an LLDP daemon runs. Where `ip` is not there (the controller's image, which the
//! node reporter's DaemonSet runs with the host's network), the kernel's own views stand
//! in: getifaddrs(3) for addresses, `/sys/class/net/*/address` for MACs, `/proc/net/route`
//! and `/proc/net/arp` for the IPv4 default gateway and its MAC; macvlan links are then
//! not told apart. The parsing is plain functions over the tools' JSON, tested
//! with their output; nothing here is trusted: the controller judges it against what it
//! observed.

use std::process::Command;

use kubeflavor_cluster::crd::network::{NodeReportSpec, ReportedGateway, ReportedInterface};
use serde_json::Value;

/// Interfaces from `ip -j -d addr show`: their MAC, addresses with prefix length, and
/// whether they are macvlan links; the loopback left out.
pub fn interfaces(ip_addr_json: &str) -> Vec<ReportedInterface> {
    let Ok(Value::Array(links)) = serde_json::from_str::<Value>(ip_addr_json) else {
        return Vec::new();
    };
    links
        .iter()
        .filter(|l| l["link_type"].as_str() != Some("loopback"))
        .filter_map(|l| {
            let name = l["ifname"].as_str()?.to_string();
            let addresses = l["addr_info"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|a| {
                    a["scope"].as_str() != Some("link") && a["scope"].as_str() != Some("host")
                })
                .filter_map(|a| {
                    Some(format!(
                        "{}/{}",
                        a["local"].as_str()?,
                        a["prefixlen"].as_u64()?
                    ))
                })
                .collect();
            Some(ReportedInterface {
                name,
                mac: l["address"].as_str().map(str::to_string),
                addresses,
                macvlan: l["linkinfo"]["info_kind"].as_str() == Some("macvlan"),
            })
        })
        .take(64)
        .collect()
}

/// The default gateway's address from `ip -j route show default` (the first route).
pub fn gateway(ip_route_json: &str) -> Option<String> {
    let routes: Value = serde_json::from_str(ip_route_json).ok()?;
    routes
        .as_array()?
        .iter()
        .find_map(|r| r["gateway"].as_str().map(str::to_string))
}

/// The MAC of `gateway` from `ip -j neigh show`.
pub fn gateway_mac(ip_neigh_json: &str, gateway: &str) -> Option<String> {
    let neighbours: Value = serde_json::from_str(ip_neigh_json).ok()?;
    neighbours
        .as_array()?
        .iter()
        .find(|n| n["dst"].as_str() == Some(gateway))
        .and_then(|n| n["lladdr"].as_str().map(str::to_string))
}

/// The first search (or `domain`) entry of a resolv.conf: what the DHCP server gave.
pub fn dhcp_domain(resolv_conf: &str) -> Option<String> {
    resolv_conf.lines().find_map(|line| {
        let mut words = line.split_whitespace();
        match words.next() {
            Some("search" | "domain") => words.next().map(str::to_string),
            _ => None,
        }
    })
}

/// The system name of the first neighbour in `lldpcli -f json show neighbors`.
pub fn lldp_neighbor(lldpcli_json: &str) -> Option<String> {
    let doc: Value = serde_json::from_str(lldpcli_json).ok()?;
    let interfaces = &doc["lldp"]["interface"];
    let first = match interfaces {
        Value::Array(list) => list.first()?.as_object()?.values().next()?.clone(),
        Value::Object(map) => map.values().next()?.clone(),
        _ => return None,
    };
    let chassis = first["chassis"].as_object()?;
    chassis.keys().next().cloned()
}

/// Interfaces from getifaddrs(3) (`addresses`, name and address with prefix length) and
/// their MACs (`mac_of`), as [`interfaces`] gives them from `ip`: the loopback and
/// link-local addresses left out, in the order first seen.
pub fn interfaces_from_addresses(
    addresses: &[(String, std::net::IpAddr, u8)],
    mac_of: impl Fn(&str) -> Option<String>,
) -> Vec<ReportedInterface> {
    let mut found: Vec<ReportedInterface> = Vec::new();
    for (name, address, prefix) in addresses {
        let skipped = address.is_loopback()
            || match address {
                std::net::IpAddr::V4(a) => a.is_link_local(),
                std::net::IpAddr::V6(a) => a.is_unicast_link_local(),
            };
        if skipped {
            continue;
        }
        let text = format!("{address}/{prefix}");
        match found.iter_mut().find(|i| &i.name == name) {
            Some(interface) => interface.addresses.push(text),
            None => found.push(ReportedInterface {
                name: name.clone(),
                mac: mac_of(name),
                addresses: vec![text],
                macvlan: false,
            }),
        }
    }
    found.truncate(64);
    found
}

/// The IPv4 default gateway from `/proc/net/route` (addresses in the kernel's byte order,
/// hexadecimal: little-endian on the machines kubeflavor runs on).
pub fn gateway_from_proc_route(route: &str) -> Option<String> {
    route.lines().skip(1).find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let (destination, gateway, flags) = (fields.get(1)?, fields.get(2)?, fields.get(3)?);
        // RTF_GATEWAY (0x2) on the default route (destination 0).
        let flags = u16::from_str_radix(flags, 16).ok()?;
        if *destination != "00000000" || flags & 0x2 == 0 {
            return None;
        }
        let raw = u32::from_str_radix(gateway, 16).ok()?;
        Some(std::net::Ipv4Addr::from(raw.swap_bytes()).to_string())
    })
}

/// The MAC of `gateway` from `/proc/net/arp` (a complete entry only).
pub fn gateway_mac_from_proc_arp(arp: &str, gateway: &str) -> Option<String> {
    arp.lines().skip(1).find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let complete = fields.get(2).is_some_and(|f| *f != "0x0");
        (fields.first() == Some(&gateway) && complete)
            .then(|| fields.get(3).map(|m| m.to_string()))
            .flatten()
    })
}

/// The output of a command, when it ran and succeeded.
fn run(program: &str, args: &[&str]) -> Option<String> {
    let output = Command::new(program).args(args).output().ok()?;
    output
        .status
        .success()
        .then(|| String::from_utf8_lossy(&output.stdout).into_owned())
}

/// Everything this machine says of its network now.
pub fn this_machine() -> NodeReportSpec {
    let (interfaces, default_gateway) = match run("ip", &["-j", "-d", "addr", "show"]) {
        Some(addresses) => (
            interfaces(&addresses),
            run("ip", &["-j", "route", "show", "default"])
                .and_then(|t| gateway(&t))
                .map(|address| ReportedGateway {
                    mac: run("ip", &["-j", "neigh", "show"])
                        .and_then(|t| gateway_mac(&t, &address)),
                    address,
                }),
        ),
        None => without_iproute2(),
    };
    let dhcp_domain = std::fs::read_to_string("/etc/resolv.conf")
        .ok()
        .and_then(|t| dhcp_domain(&t));
    let lldp_neighbor =
        run("lldpcli", &["-f", "json", "show", "neighbors"]).and_then(|t| lldp_neighbor(&t));
    NodeReportSpec {
        interfaces,
        default_gateway,
        dhcp_domain,
        lldp_neighbor,
        reported_at: Some(kubeflavor_cluster::crd::whole_seconds(
            jiff::Timestamp::now(),
        )),
    }
}

/// Interfaces and the default gateway from the kernel's own views, for a machine (or a
/// container on the host's network) without `ip`.
fn without_iproute2() -> (Vec<ReportedInterface>, Option<ReportedGateway>) {
    let addresses: Vec<(String, std::net::IpAddr, u8)> = if_addrs::get_if_addrs()
        .unwrap_or_default()
        .into_iter()
        .map(|i| {
            let (address, prefix) = match &i.addr {
                if_addrs::IfAddr::V4(a) => (std::net::IpAddr::V4(a.ip), a.prefixlen),
                if_addrs::IfAddr::V6(a) => (std::net::IpAddr::V6(a.ip), a.prefixlen),
            };
            (i.name, address, prefix)
        })
        .collect();
    let mac_of = |name: &str| {
        std::fs::read_to_string(format!("/sys/class/net/{name}/address"))
            .ok()
            .map(|m| m.trim().to_string())
            .filter(|m| !m.is_empty())
    };
    let gateway = std::fs::read_to_string("/proc/net/route")
        .ok()
        .and_then(|t| gateway_from_proc_route(&t))
        .map(|address| ReportedGateway {
            mac: std::fs::read_to_string("/proc/net/arp")
                .ok()
                .and_then(|t| gateway_mac_from_proc_arp(&t, &address)),
            address,
        });
    (interfaces_from_addresses(&addresses, mac_of), gateway)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `ip -j -d addr show` of a VM with a loopback, an uplink and a macvlan (iproute2 6.x).
    const IP_ADDR: &str = r#"[{"ifindex":1,"ifname":"lo","flags":["LOOPBACK","UP"],"link_type":"loopback","address":"00:00:00:00:00:00","addr_info":[{"family":"inet","local":"127.0.0.1","prefixlen":8,"scope":"host"}]},
{"ifindex":2,"ifname":"ens3","link_type":"ether","address":"52:54:00:12:34:56","addr_info":[{"family":"inet","local":"10.20.5.9","prefixlen":24,"scope":"global"},{"family":"inet6","local":"fe80::5054:ff:fe12:3456","prefixlen":64,"scope":"link"}]},
{"ifindex":3,"ifname":"site0","link_type":"ether","address":"aa:bb:cc:00:11:22","linkinfo":{"info_kind":"macvlan","info_data":{"mode":"bridge"}},"addr_info":[{"family":"inet","local":"192.168.7.4","prefixlen":24,"scope":"global"}]}]"#;

    #[test]
    fn interfaces_have_their_global_addresses_and_macvlan_is_marked() {
        let found = interfaces(IP_ADDR);
        assert_eq!(found.len(), 2, "the loopback is left out");
        assert_eq!(found[0].name, "ens3");
        assert_eq!(
            found[0].addresses,
            vec!["10.20.5.9/24"],
            "link-local left out"
        );
        assert_eq!(found[0].mac.as_deref(), Some("52:54:00:12:34:56"));
        assert!(!found[0].macvlan);
        assert!(found[1].macvlan);
        assert!(interfaces("not json").is_empty());
    }

    #[test]
    fn the_gateway_its_mac_the_domain_and_the_lldp_neighbour() {
        let routes = r#"[{"dst":"default","gateway":"10.20.5.1","dev":"ens3","protocol":"dhcp"}]"#;
        assert_eq!(gateway(routes).as_deref(), Some("10.20.5.1"));
        assert_eq!(gateway("[]"), None);
        let neigh = r#"[{"dst":"10.20.5.7","dev":"ens3","lladdr":"52:54:00:00:00:07","state":["STALE"]},{"dst":"10.20.5.1","dev":"ens3","lladdr":"52:54:00:00:00:01","state":["REACHABLE"]}]"#;
        assert_eq!(
            gateway_mac(neigh, "10.20.5.1").as_deref(),
            Some("52:54:00:00:00:01")
        );
        assert_eq!(
            dhcp_domain(
                "# from DHCP\nnameserver 10.20.5.1\nsearch lab.lyon.example other.example\n"
            )
            .as_deref(),
            Some("lab.lyon.example")
        );
        assert_eq!(dhcp_domain("nameserver 1.1.1.1\n"), None);
        let lldp = r#"{"lldp":{"interface":{"ens3":{"via":"LLDP","chassis":{"sw-lyon-1":{"id":{"type":"mac","value":"00:11:22:33:44:55"}}}}}}}"#;
        assert_eq!(lldp_neighbor(lldp).as_deref(), Some("sw-lyon-1"));
        let lldp_list = r#"{"lldp":{"interface":[{"ens3":{"chassis":{"sw-2":{}}}}]}}"#;
        assert_eq!(lldp_neighbor(lldp_list).as_deref(), Some("sw-2"));
    }

    /// `/proc/net/route` and `/proc/net/arp` of a VM whose default route is 10.0.2.2.
    const PROC_ROUTE: &str = "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n\
ens3\t0002000A\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n\
ens3\t00000000\t0202000A\t0003\t0\t0\t100\t00000000\t0\t0\t0\n";
    const PROC_ARP: &str = "IP address       HW type     Flags       HW address            Mask     Device\n\
10.0.2.3         0x1         0x0         00:00:00:00:00:00     *        ens3\n\
10.0.2.2         0x1         0x2         52:55:0a:00:02:02     *        ens3\n";

    #[test]
    fn without_iproute2_the_kernels_views_give_the_same_facts() {
        assert_eq!(
            gateway_from_proc_route(PROC_ROUTE).as_deref(),
            Some("10.0.2.2")
        );
        assert_eq!(
            gateway_from_proc_route(&PROC_ROUTE.replace("0003\t0\t0\t100", "0001\t0\t0\t100")),
            None,
            "a default route without a gateway names none"
        );
        assert_eq!(
            gateway_mac_from_proc_arp(PROC_ARP, "10.0.2.2").as_deref(),
            Some("52:55:0a:00:02:02")
        );
        assert_eq!(
            gateway_mac_from_proc_arp(PROC_ARP, "10.0.2.3"),
            None,
            "incomplete"
        );
        let addresses = [
            ("lo".to_string(), "127.0.0.1".parse().unwrap(), 8),
            ("ens3".to_string(), "10.20.5.9".parse().unwrap(), 24),
            (
                "ens3".to_string(),
                "fe80::5054:ff:fe12:3456".parse().unwrap(),
                64,
            ),
            ("site0".to_string(), "192.168.7.4".parse().unwrap(), 24),
            ("ens3".to_string(), "2001:db8::9".parse().unwrap(), 64),
        ];
        let found = interfaces_from_addresses(&addresses, |name| {
            (name == "ens3").then(|| "52:54:00:12:34:56".to_string())
        });
        let from_ip = interfaces(IP_ADDR);
        assert_eq!(found.len(), 2, "the loopback left out: {found:?}");
        assert_eq!(found[0].name, from_ip[0].name);
        assert_eq!(found[0].mac, from_ip[0].mac);
        assert_eq!(found[0].addresses, ["10.20.5.9/24", "2001:db8::9/64"]);
        assert_eq!(found[1].addresses, from_ip[1].addresses);
    }
}
