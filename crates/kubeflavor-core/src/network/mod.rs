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

/// The owner's map of address ranges to sites, validated.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Sites {
    /// Every range with its site, most specific (longest prefix) first.
    ranges: Vec<(Cidr, String)>,
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
}

impl Sites {
    /// The map from site names to their ranges, as written.
    pub fn parse<'a>(
        sites: impl IntoIterator<Item = (&'a str, &'a [String])>,
    ) -> Result<Sites, SitesError> {
        let mut names = BTreeSet::new();
        let mut owner: BTreeMap<Cidr, String> = BTreeMap::new();
        let mut ranges = Vec::new();
        for (name, written) in sites {
            check_label_value(name).map_err(|_| SitesError::BadName(name.to_string()))?;
            if name == UNKNOWN_SITE {
                return Err(SitesError::Reserved);
            }
            if !names.insert(name.to_string()) {
                return Err(SitesError::Repeated(name.to_string()));
            }
            if written.is_empty() {
                return Err(SitesError::NoRange(name.to_string()));
            }
            if written.len() > MAX_RANGES_PER_SITE {
                return Err(SitesError::TooMany(written.len()));
            }
            for text in written {
                let range: Cidr = text.parse().map_err(|e: crate::flavor::cidr::CidrError| {
                    SitesError::BadRange {
                        site: name.to_string(),
                        problem: e.to_string(),
                    }
                })?;
                let range = range.network();
                if let Some(first) = owner.insert(range, name.to_string())
                    && first != name
                {
                    return Err(SitesError::Shared {
                        range: range.to_string(),
                        first,
                        second: name.to_string(),
                    });
                }
                ranges.push((range, name.to_string()));
            }
        }
        if names.len() > MAX_SITES {
            return Err(SitesError::TooMany(names.len()));
        }
        // Most specific first; a range listed twice under one site kept once.
        ranges
            .sort_by_key(|(range, site)| (std::cmp::Reverse(range.prefix()), *range, site.clone()));
        ranges.dedup();
        Ok(Sites { ranges })
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

/// An IPv4-mapped IPv6 address (how a dual-stack listener sees an IPv4 peer) as the IPv4
/// address it is; anything else as it is.
fn canonical(addr: IpAddr) -> IpAddr {
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
        Sites::parse(owned.iter().map(|(n, r)| (n.as_str(), r.as_slice())))
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
