//! What a node says of its own network, read from the tools every appliance has: `ip -j`
//! (interfaces, addresses, macvlan links, the default route, the gateway's neighbour
//! entry), the resolver configuration's search domain (the one DHCP gave), and `lldpcli`
//! when an LLDP daemon runs. The parsing is plain functions over the tools' JSON, tested
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
    let interfaces = run("ip", &["-j", "-d", "addr", "show"])
        .map(|t| interfaces(&t))
        .unwrap_or_default();
    let default_gateway = run("ip", &["-j", "route", "show", "default"])
        .and_then(|t| gateway(&t))
        .map(|address| ReportedGateway {
            mac: run("ip", &["-j", "neigh", "show"]).and_then(|t| gateway_mac(&t, &address)),
            address,
        });
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
}
