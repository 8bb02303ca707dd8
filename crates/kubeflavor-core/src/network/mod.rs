//! What kubeflavor knows about a node's network, kept apart from what the node says (P9).
//!
//! - **Observed** facts come from outside the node: the address its TLS connection to a
//!   kubeflavor endpoint comes from, with its own client certificate. They go under
//!   [`OBSERVED_PREFIX`]. The most useful one is the node's **site**: the owner maps
//!   address ranges to site names ([`Sites`]); the observed address decides the site
//!   ([`Sites::site_of`]), [`UNKNOWN_SITE`] when no range holds it.
//! - **Claimed** facts are what the node reports about itself (its interfaces' prefixes, its
//!   default gateway): under [`CLAIMED_PREFIX`], named as claims. A claim that puts the node
//!   on another site than the one observed contradicts the observation
//!   ([`judge_claim`]): it is not copied, and the controller says so.
//!
//! Both prefixes are in the `node-restriction.kubernetes.io` domain, which NodeRestriction
//! keeps kubelets from writing: only the controller writes either.

pub mod probe;

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use crate::flavor::cidr::Cidr;
use crate::flavor::labels::check_label_value;

/// Label keys of facts kubeflavor observed.
pub const OBSERVED_PREFIX: &str = "observed.kubeflavor.node-restriction.kubernetes.io/";
/// Label keys of facts the node claims about itself.
pub const CLAIMED_PREFIX: &str = "claimed.kubeflavor.node-restriction.kubernetes.io/";
/// The observed site's label key.
pub const SITE_LABEL: &str = "observed.kubeflavor.node-restriction.kubernetes.io/site";
/// The site of an address no range holds.
pub const UNKNOWN_SITE: &str = "unknown";
/// The most sites, and ranges per site, the owner may name.
pub const MAX_SITES: usize = 256;
pub const MAX_RANGES_PER_SITE: usize = 64;

/// The taint a node gets while its observed site is not one its flavor allows
/// ([`site_allowed`]): no new pod lands there until it is observed on an allowed site.
pub const SITE_NOT_ALLOWED_TAINT: &str = "kubeflavor.io/site-not-allowed";
/// The zone and region labels a site gives the nodes observed there.
pub const ZONE_LABEL: &str = "topology.kubernetes.io/zone";
pub const REGION_LABEL: &str = "topology.kubernetes.io/region";

/// The owner's map of address ranges to sites, validated.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Sites {
    /// Every range with its site, most specific (longest prefix) first.
    ranges: Vec<(Cidr, String)>,
    /// Each site's zone and region, when it names them.
    topology: BTreeMap<String, Topology>,
}

/// The zone and region a site gives its nodes (`topology.kubernetes.io/zone`, `region`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Topology {
    pub zone: Option<String>,
    pub region: Option<String>,
}

/// One site as the owner wrote it (a `Site` object).
#[derive(Debug, Clone, Copy)]
pub struct SiteEntry<'a> {
    pub name: &'a str,
    pub ranges: &'a [String],
    pub zone: Option<&'a str>,
    pub region: Option<&'a str>,
}

impl<'a> SiteEntry<'a> {
    /// A site with ranges only.
    pub fn new(name: &'a str, ranges: &'a [String]) -> SiteEntry<'a> {
        SiteEntry {
            name,
            ranges,
            zone: None,
            region: None,
        }
    }
}

/// Why a site map is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SitesError {
    #[error(
        "site name {0:?} is not a label value (1-63 of [A-Za-z0-9-_.], starting and ending alphanumeric)"
    )]
    BadName(String),
    #[error(
        "site name {UNKNOWN_SITE:?} is kept for addresses no range holds; name the site otherwise"
    )]
    Reserved,
    #[error("site {0:?} is named twice; list its ranges under one entry")]
    Repeated(String),
    #[error("site {0:?} has no address range")]
    NoRange(String),
    #[error("site {site:?}: {problem}")]
    BadRange { site: String, problem: String },
    #[error(
        "range {range} is given to both {first:?} and {second:?}; an address must have one site"
    )]
    Shared {
        range: String,
        first: String,
        second: String,
    },
    #[error(
        "{0} sites, or a site with more than {MAX_RANGES_PER_SITE} ranges; at most {MAX_SITES} sites"
    )]
    TooMany(usize),
    #[error("site {site:?}: its {what} {value:?} is not a label value")]
    BadTopology {
        site: String,
        what: &'static str,
        value: String,
    },
}

impl Sites {
    /// The map from every site that reads, and what is wrong with the others. The sites
    /// live in separate objects, which no admission can compare, so one bad site must not
    /// blind the controller to the rest: a site that does not read is left out, and a
    /// range two sites both name is left out of both (its addresses are `unknown`: an
    /// address never gets a site another one also claims).
    pub fn build<'a>(entries: impl IntoIterator<Item = SiteEntry<'a>>) -> (Sites, Vec<SitesError>) {
        let mut problems = Vec::new();
        let mut names = BTreeSet::new();
        let mut owner: BTreeMap<Cidr, String> = BTreeMap::new();
        let mut shared: BTreeSet<Cidr> = BTreeSet::new();
        let mut ranges = Vec::new();
        let mut topology = BTreeMap::new();
        for entry in entries {
            if names.len() >= MAX_SITES {
                problems.push(SitesError::TooMany(names.len() + 1));
                break;
            }
            let read = match read_entry(&entry) {
                Ok(read) => read,
                Err(e) => {
                    problems.push(e);
                    continue;
                }
            };
            if !names.insert(entry.name.to_string()) {
                problems.push(SitesError::Repeated(entry.name.to_string()));
                continue;
            }
            for range in read.0 {
                match owner.get(&range) {
                    Some(first) if first != entry.name => {
                        problems.push(SitesError::Shared {
                            range: range.to_string(),
                            first: first.clone(),
                            second: entry.name.to_string(),
                        });
                        shared.insert(range);
                    }
                    _ => {
                        owner.insert(range, entry.name.to_string());
                        ranges.push((range, entry.name.to_string()));
                    }
                }
            }
            if read.1 != Topology::default() {
                topology.insert(entry.name.to_string(), read.1);
            }
        }
        ranges.retain(|(range, _)| !shared.contains(range));
        // Most specific first; a range listed twice under one site kept once.
        ranges
            .sort_by_key(|(range, site)| (std::cmp::Reverse(range.prefix()), *range, site.clone()));
        ranges.dedup();
        (Sites { ranges, topology }, problems)
    }

    /// The site of `addr`: the site of the most specific range that holds it (two ranges of
    /// one length that both hold an address are one range, given to one site), else
    /// [`UNKNOWN_SITE`].
    pub fn site_of(&self, addr: IpAddr) -> &str {
        let addr = canonical(addr);
        self.ranges
            .iter()
            .find(|(range, _)| range.contains(addr))
            .map_or(UNKNOWN_SITE, |(_, site)| site.as_str())
    }
}

/// One site's ranges (as networks) and topology, or why it does not read.
fn read_entry(entry: &SiteEntry<'_>) -> Result<(Vec<Cidr>, Topology), SitesError> {
    let name = entry.name;
    check_label_value(name).map_err(|_| SitesError::BadName(name.to_string()))?;
    if name.is_empty() {
        return Err(SitesError::BadName(String::new()));
    }
    if name == UNKNOWN_SITE {
        return Err(SitesError::Reserved);
    }
    if entry.ranges.is_empty() {
        return Err(SitesError::NoRange(name.to_string()));
    }
    if entry.ranges.len() > MAX_RANGES_PER_SITE {
        return Err(SitesError::TooMany(entry.ranges.len()));
    }
    let ranges = entry
        .ranges
        .iter()
        .map(|text| {
            text.parse::<Cidr>()
                .map(|r| r.network())
                .map_err(|e| SitesError::BadRange {
                    site: name.to_string(),
                    problem: e.to_string(),
                })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let label = |what: &'static str, value: Option<&str>| -> Result<Option<String>, SitesError> {
        match value {
            None => Ok(None),
            Some(v) if !v.is_empty() && check_label_value(v).is_ok() => Ok(Some(v.to_string())),
            Some(v) => Err(SitesError::BadTopology {
                site: name.to_string(),
                what,
                value: v.to_string(),
            }),
        }
    };
    let topology = Topology {
        zone: label("zone", entry.zone)?,
        region: label("region", entry.region)?,
    };
    Ok((ranges, topology))
}

/// An IPv4-mapped IPv6 address (how a dual-stack listener sees an IPv4 peer) as the IPv4
/// address it is; anything else as it is.
pub fn canonical(addr: IpAddr) -> IpAddr {
    match addr {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(addr, IpAddr::V4),
        v4 => v4,
    }
}

/// What a node says about its own network.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Claim {
    /// The prefixes of its interfaces' addresses.
    pub prefixes: Vec<Cidr>,
    /// Its default gateway.
    pub gateway: Option<IpAddr>,
    /// The default gateway's MAC address, as the node's neighbour table has it.
    pub gateway_mac: Option<String>,
    /// The domain its DHCP server (or resolver configuration) gave it.
    pub dhcp_domain: Option<String>,
    /// The system name of its LLDP neighbour (the switch it is cabled to), when one speaks.
    pub lldp_neighbor: Option<String>,
}

/// The label a claim's `what` goes under: [`CLAIMED_PREFIX`] and the name.
pub fn claimed_label(what: &str) -> String {
    format!("{CLAIMED_PREFIX}{what}")
}

/// `value` as a label value: a MAC's `:` as `-`, anything else unchanged; `None` when it
/// still is not one (too long, other characters): it stays in the report, off the Node.
fn as_label_value(value: &str) -> Option<String> {
    let value = value.trim().replace(':', "-");
    (!value.is_empty() && check_label_value(&value).is_ok()).then_some(value)
}

/// Where a node stands on the network, and the labels that say it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NetworkPlacement {
    /// The observed site; `None` until the node has been observed.
    pub site: Option<String>,
    /// Labels to put on the Node: under [`OBSERVED_PREFIX`] (the site, and the site's zone
    /// and region under their `topology.kubernetes.io` keys) and [`CLAIMED_PREFIX`] (a
    /// claim that agrees with the observation).
    pub labels: BTreeMap<String, String>,
    /// How the claim compares with the observation; `None` with no claim or no observation
    /// (a claim is never copied before it can be judged).
    pub verdict: Option<ClaimVerdict>,
}

impl NetworkPlacement {
    /// Whether a flavor allowing `allowed` sites (none listed: any) lets the node take
    /// workloads; a node not yet observed is on no site.
    pub fn allowed_by(&self, allowed: &[String]) -> bool {
        allowed.is_empty()
            || self
                .site
                .as_deref()
                .is_some_and(|s| site_allowed(allowed, s))
    }
}

/// The placement of a node observed at `observed` (`None`: not yet) that claims `claim`
/// (`None`: it reported nothing). Observed facts go under [`OBSERVED_PREFIX`] and the
/// site's zone and region under `topology.kubernetes.io` (the observed site decides them,
/// never the kubelet); a claim goes under [`CLAIMED_PREFIX`] only when it agrees with the
/// observation, and then only its values that are label values.
pub fn placement(
    sites: &Sites,
    observed: Option<IpAddr>,
    claim: Option<&Claim>,
) -> NetworkPlacement {
    let Some(observed) = observed else {
        return NetworkPlacement::default();
    };
    let site = sites.site_of(observed).to_string();
    let mut labels = BTreeMap::from([(SITE_LABEL.to_string(), site.clone())]);
    if let Some(topology) = sites.topology.get(&site) {
        labels.extend(topology.zone.clone().map(|z| (ZONE_LABEL.to_string(), z)));
        labels.extend(
            topology
                .region
                .clone()
                .map(|r| (REGION_LABEL.to_string(), r)),
        );
    }
    let verdict = claim.map(|claim| judge_claim(sites, observed, claim));
    if let (Some(claim), Some(ClaimVerdict::Consistent)) = (claim, &verdict) {
        let claimed_site = claim
            .prefixes
            .iter()
            .map(|p| sites.site_of(p.addr()))
            .chain(claim.gateway.map(|g| sites.site_of(g)))
            .find(|s| *s != UNKNOWN_SITE);
        let values = [
            ("site", claimed_site.map(str::to_string)),
            ("gateway-mac", claim.gateway_mac.clone()),
            ("dhcp-domain", claim.dhcp_domain.clone()),
            ("lldp-neighbor", claim.lldp_neighbor.clone()),
        ];
        for (what, value) in values {
            if let Some(value) = value.as_deref().and_then(as_label_value) {
                labels.insert(claimed_label(what), value);
            }
        }
    }
    NetworkPlacement {
        site: Some(site),
        labels,
        verdict,
    }
}

/// Whether `key` is a label kubeflavor's network placement owns (observed, claimed): no
/// Flavor or input label may carry one, and one the node's placement does not call for is
/// removed.
pub fn is_placement_label(key: &str) -> bool {
    key.starts_with(OBSERVED_PREFIX) || key.starts_with(CLAIMED_PREFIX)
}

/// How a claim compares with what was observed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClaimVerdict {
    /// Every claimed address the owner's map knows is on the observed site.
    Consistent,
    /// A claimed prefix or gateway is on another site than the one observed.
    Contradicts {
        claimed_site: String,
        observed_site: String,
        what: String,
    },
}

/// Whether `claim` agrees with the site observed from `observed` (the address the node's
/// connection came from). Claimed addresses the map does not know say nothing (a private
/// prefix behind NAT is no contradiction); one the map puts on another site does.
pub fn judge_claim(sites: &Sites, observed: IpAddr, claim: &Claim) -> ClaimVerdict {
    let observed_site = sites.site_of(observed);
    let claimed = claim
        .prefixes
        .iter()
        .map(|p| (p.to_string(), p.addr()))
        .chain(claim.gateway.map(|g| (format!("gateway {g}"), g)));
    for (what, addr) in claimed {
        let site = sites.site_of(addr);
        if site != UNKNOWN_SITE && site != observed_site {
            return ClaimVerdict::Contradicts {
                claimed_site: site.to_string(),
                observed_site: observed_site.to_string(),
                what,
            };
        }
    }
    ClaimVerdict::Consistent
}

/// Whether a node observed on `site` may take workloads, given the sites its flavor allows
/// (none listed: any site, `unknown` included).
pub fn site_allowed(allowed: &[String], site: &str) -> bool {
    allowed.is_empty() || allowed.iter().any(|a| a == site)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sites(map: &[(&str, &[&str])]) -> Result<Sites, SitesError> {
        let owned: Vec<(String, Vec<String>)> = map
            .iter()
            .map(|(n, r)| (n.to_string(), r.iter().map(|s| s.to_string()).collect()))
            .collect();
        let (map, problems) = Sites::build(
            owned
                .iter()
                .map(|(n, r)| SiteEntry::new(n.as_str(), r.as_slice())),
        );
        match problems.into_iter().next() {
            Some(first) => Err(first),
            None => Ok(map),
        }
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn the_most_specific_range_decides_and_nothing_else_is_unknown() {
        let map = sites(&[
            ("lyon", &["10.20.0.0/16", "2001:db8:20::/48"]),
            ("lyon-lab", &["10.20.7.0/24"]),
            ("paris", &["10.30.0.0/16"]),
        ])
        .unwrap();
        assert_eq!(map.site_of(ip("10.20.1.1")), "lyon");
        assert_eq!(map.site_of(ip("10.20.7.9")), "lyon-lab");
        assert_eq!(map.site_of(ip("10.30.0.1")), "paris");
        assert_eq!(map.site_of(ip("2001:db8:20::5")), "lyon");
        assert_eq!(map.site_of(ip("::ffff:10.30.0.1")), "paris", "IPv4-mapped");
        assert_eq!(map.site_of(ip("192.0.2.1")), UNKNOWN_SITE);
    }

    #[test]
    fn a_map_that_could_give_an_address_two_sites_is_refused() {
        assert!(matches!(
            sites(&[("a", &["10.0.0.0/8"]), ("b", &["10.1.2.3/8"])]),
            Err(SitesError::Shared { .. })
        ));
        assert_eq!(
            sites(&[("unknown", &["10.0.0.0/8"])]),
            Err(SitesError::Reserved)
        );
        assert_eq!(sites(&[("a", &[])]), Err(SitesError::NoRange("a".into())));
        assert!(matches!(
            sites(&[("a b", &["10.0.0.0/8"])]),
            Err(SitesError::BadName(_))
        ));
        assert!(matches!(
            sites(&[("a", &["10.0.0.0"])]),
            Err(SitesError::BadRange { .. })
        ));
        assert_eq!(
            sites(&[("a", &["10.0.0.0/8"]), ("a", &["11.0.0.0/8"])]),
            Err(SitesError::Repeated("a".into()))
        );
    }

    #[test]
    fn a_claim_is_judged_against_the_observed_site_only_where_the_map_knows() {
        let map = sites(&[("lyon", &["10.20.0.0/16"]), ("paris", &["10.30.0.0/16"])]).unwrap();
        let claim = |p: &[&str], gw: Option<&str>| Claim {
            prefixes: p.iter().map(|s| s.parse().unwrap()).collect(),
            gateway: gw.map(ip),
            ..Claim::default()
        };
        let observed = ip("10.20.5.5");
        assert_eq!(
            judge_claim(&map, observed, &claim(&["10.20.5.0/24"], Some("10.20.5.1"))),
            ClaimVerdict::Consistent
        );
        // Behind NAT: a private prefix the map does not know says nothing.
        assert_eq!(
            judge_claim(
                &map,
                observed,
                &claim(&["192.168.1.0/24"], Some("192.168.1.1"))
            ),
            ClaimVerdict::Consistent
        );
        assert!(matches!(
            judge_claim(&map, observed, &claim(&["10.30.1.0/24"], None)),
            ClaimVerdict::Contradicts { claimed_site, observed_site, .. }
                if claimed_site == "paris" && observed_site == "lyon"
        ));
        assert!(matches!(
            judge_claim(&map, observed, &claim(&[], Some("10.30.0.1"))),
            ClaimVerdict::Contradicts { .. }
        ));
    }

    #[test]
    fn a_flavor_without_sites_allows_any() {
        assert!(site_allowed(&[], UNKNOWN_SITE));
        let lyon = vec!["lyon".to_string()];
        assert!(site_allowed(&lyon, "lyon"));
        assert!(!site_allowed(&lyon, "paris"));
        assert!(!site_allowed(&lyon, UNKNOWN_SITE));
    }

    #[test]
    fn one_bad_site_leaves_the_others_and_a_shared_range_goes_to_neither() {
        let lyon = ["10.20.0.0/16".to_string()];
        let paris = ["10.30.0.0/16".to_string(), "10.99.0.0/16".to_string()];
        let thief = ["10.99.0.0/16".to_string()];
        let broken = ["10.40.0.0".to_string()];
        let (map, problems) = Sites::build([
            SiteEntry {
                zone: Some("lyon-a"),
                ..SiteEntry::new("lyon", &lyon)
            },
            SiteEntry::new("paris", &paris),
            SiteEntry::new("thief", &thief),
            SiteEntry::new("broken", &broken),
        ]);
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(
            matches!(&problems[0], SitesError::Shared { first, second, .. } if first == "paris" && second == "thief")
        );
        assert!(matches!(&problems[1], SitesError::BadRange { site, .. } if site == "broken"));
        assert_eq!(map.site_of(ip("10.20.0.1")), "lyon");
        assert_eq!(map.site_of(ip("10.30.0.1")), "paris");
        assert_eq!(
            map.site_of(ip("10.99.0.1")),
            UNKNOWN_SITE,
            "shared: neither's"
        );
        let (_, bad) = Sites::build([SiteEntry {
            zone: Some("a b"),
            ..SiteEntry::new("lyon", &lyon)
        }]);
        assert!(matches!(
            &bad[0],
            SitesError::BadTopology { what: "zone", .. }
        ));
    }

    #[test]
    fn placement_labels_the_observed_site_and_copies_only_an_agreeing_claim() {
        let lyon = ["10.20.0.0/16".to_string()];
        let paris = ["10.30.0.0/16".to_string()];
        let (map, _) = Sites::build([
            SiteEntry {
                zone: Some("lyon-a"),
                region: Some("fr"),
                ..SiteEntry::new("lyon", &lyon)
            },
            SiteEntry::new("paris", &paris),
        ]);
        let honest = Claim {
            prefixes: vec!["10.20.5.0/24".parse().unwrap()],
            gateway: Some(ip("10.20.5.1")),
            gateway_mac: Some("52:54:00:12:34:56".into()),
            dhcp_domain: Some("lab.lyon.example".into()),
            lldp_neighbor: Some("a switch with spaces".into()),
        };
        let p = placement(&map, Some(ip("10.20.5.9")), Some(&honest));
        assert_eq!(p.site.as_deref(), Some("lyon"));
        assert_eq!(p.verdict, Some(ClaimVerdict::Consistent));
        let want: BTreeMap<String, String> = [
            (SITE_LABEL, "lyon"),
            (ZONE_LABEL, "lyon-a"),
            (REGION_LABEL, "fr"),
            (
                "claimed.kubeflavor.node-restriction.kubernetes.io/site",
                "lyon",
            ),
            (
                "claimed.kubeflavor.node-restriction.kubernetes.io/gateway-mac",
                "52-54-00-12-34-56",
            ),
            (
                "claimed.kubeflavor.node-restriction.kubernetes.io/dhcp-domain",
                "lab.lyon.example",
            ),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        assert_eq!(
            p.labels, want,
            "the LLDP name with spaces is no label value"
        );
        // A claim of paris from a lyon address: nothing claimed is copied.
        let liar = Claim {
            prefixes: vec!["10.30.5.0/24".parse().unwrap()],
            ..honest.clone()
        };
        let p = placement(&map, Some(ip("10.20.5.9")), Some(&liar));
        assert!(matches!(p.verdict, Some(ClaimVerdict::Contradicts { .. })));
        assert!(
            p.labels.keys().all(|k| !k.starts_with(CLAIMED_PREFIX)),
            "{:?}",
            p.labels
        );
        assert_eq!(p.labels[SITE_LABEL], "lyon");
        // Not observed: no label, no verdict, however the claim reads.
        let p = placement(&map, None, Some(&honest));
        assert_eq!(p, NetworkPlacement::default());
        // Observed on no known site.
        let p = placement(&map, Some(ip("192.0.2.7")), None);
        assert_eq!(
            p.labels,
            BTreeMap::from([(SITE_LABEL.to_string(), UNKNOWN_SITE.to_string())])
        );
    }

    #[test]
    fn a_flavor_with_sites_allows_only_a_node_observed_on_one() {
        let lyon = vec!["lyon".to_string()];
        let unobserved = NetworkPlacement::default();
        assert!(unobserved.allowed_by(&[]));
        assert!(!unobserved.allowed_by(&lyon), "not observed yet: no site");
        let on = |s: &str| NetworkPlacement {
            site: Some(s.into()),
            ..NetworkPlacement::default()
        };
        assert!(on("lyon").allowed_by(&lyon));
        assert!(!on("paris").allowed_by(&lyon));
        assert!(!on(UNKNOWN_SITE).allowed_by(&lyon));
    }

    proptest! {
        /// The site of an address is the site of a range that holds it, and no range of
        /// another site holding it is more specific.
        #[test]
        fn the_site_is_the_most_specific_holders(a in any::<u32>(), b in 8u8..=24, c in any::<u32>(), addr in any::<u32>()) {
            let wide = Cidr::from_parts(IpAddr::V4(a.into()), b).network();
            let narrow = Cidr::from_parts(IpAddr::V4(c.into()), b + 8).network();
            let (wide_s, narrow_s) = (wide.to_string(), narrow.to_string());
            let Ok(map) = sites(&[("wide", &[wide_s.as_str()]), ("narrow", &[narrow_s.as_str()])]) else {
                return Ok(());
            };
            let addr = IpAddr::V4(addr.into());
            let site = map.site_of(addr);
            let expected = if narrow.contains(addr) { "narrow" } else if wide.contains(addr) { "wide" } else { UNKNOWN_SITE };
            prop_assert_eq!(site, expected);
        }
    }
}
