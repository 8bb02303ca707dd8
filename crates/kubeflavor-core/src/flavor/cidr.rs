//! Address ranges a Flavor allows in its nodes' serving certificates
//! (`spec.servingAddresses`).
//!
//! A range is read as the Kubernetes CEL `isCIDR()` reads it (the CRD's own check, so a
//! Flavor the API server stores is one core reads): Go's `netip.ParsePrefix` (no zone, a
//! decimal prefix length without a sign or leading zeros), and no IPv4-mapped IPv6
//! address (k8s.io/apiserver/pkg/cel/library/cidr.go, `parseCIDR`). Bits after the prefix
//! are allowed there, so they are allowed here and ignored, as `netip.Prefix.Contains`
//! ignores them.
//!
//! Containment is by family: an IPv4 range contains IPv4 addresses only, an IPv6 range
//! IPv6 addresses only (as `netip.Prefix.Contains`); an IPv4-mapped IPv6 address in a
//! certificate is never inside an IPv4 range.

use std::fmt;
use std::net::{IpAddr, Ipv6Addr};
use std::str::FromStr;

/// An IP range, e.g. `10.20.0.0/16` or `2001:db8::/48`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Cidr {
    addr: IpAddr,
    prefix: u8,
}

/// Why a range is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{value:?} is not an IP range ({problem}); write an address and a prefix length, e.g. 10.20.0.0/16 or 2001:db8::/48"
)]
pub struct CidrError {
    pub value: String,
    pub problem: &'static str,
}

impl Cidr {
    /// The address as written (bits after the prefix included).
    pub fn addr(&self) -> IpAddr {
        self.addr
    }

    pub fn prefix(&self) -> u8 {
        self.prefix
    }

    /// `addr`/`prefix`, the prefix capped at the family's width.
    pub fn from_parts(addr: IpAddr, prefix: u8) -> Cidr {
        let width = if addr.is_ipv4() { 32 } else { 128 };
        Cidr {
            addr,
            prefix: prefix.min(width),
        }
    }

    /// The same range with the bits after the prefix cleared (`10.1.2.3/8` is
    /// `10.0.0.0/8`): one way to write each range.
    pub fn network(&self) -> Cidr {
        let addr = match self.addr {
            IpAddr::V4(a) => {
                let host = 32 - u32::from(self.prefix);
                let bits = u32::from(a);
                let net = if host >= 32 { 0 } else { bits >> host << host };
                IpAddr::V4(net.into())
            }
            IpAddr::V6(a) => {
                let host = 128 - u32::from(self.prefix);
                let bits = u128::from(a);
                let net = if host >= 128 { 0 } else { bits >> host << host };
                IpAddr::V6(net.into())
            }
        };
        Cidr {
            addr,
            prefix: self.prefix,
        }
    }

    /// Whether `ip` lies in the range: same family, same leading `prefix` bits.
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.addr, ip) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                same_prefix(u32::from(net).into(), u32::from(ip).into(), 32, self.prefix)
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                same_prefix(u128::from(net), u128::from(ip), 128, self.prefix)
            }
            _ => false,
        }
    }
}

/// Whether the first `prefix` of the `width` low bits of `a` and `b` agree.
fn same_prefix(a: u128, b: u128, width: u32, prefix: u8) -> bool {
    let host_bits = width - u32::from(prefix);
    let diff = a ^ b;
    // A /0 range holds every address of its family.
    host_bits >= width || (diff >> host_bits) == 0
}

impl FromStr for Cidr {
    type Err = CidrError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let fail = |problem| CidrError {
            value: s.to_owned(),
            problem,
        };
        let (addr, bits) = s.split_once('/').ok_or_else(|| fail("no '/'"))?;
        if addr.contains('%') {
            return Err(fail("a zone is not allowed"));
        }
        let addr: IpAddr = addr.parse().map_err(|_| fail("not an IP address"))?;
        if let IpAddr::V6(v6) = addr
            && is_ipv4_mapped(v6)
        {
            return Err(fail("an IPv4-mapped IPv6 address is not allowed"));
        }
        // Go: decimal digits only, no sign, no leading zero (but "0" itself).
        let digits_only = !bits.is_empty() && bits.bytes().all(|b| b.is_ascii_digit());
        if !digits_only || (bits.len() > 1 && bits.starts_with('0')) || bits.len() > 3 {
            return Err(fail("the prefix length is not a plain decimal number"));
        }
        let prefix: u8 = bits.parse().map_err(|_| fail("prefix length too long"))?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        if prefix > max {
            return Err(fail("the prefix length is longer than the address"));
        }
        Ok(Cidr { addr, prefix })
    }
}

/// `::ffff:a.b.c.d`, Go's `Is4In6`.
fn is_ipv4_mapped(ip: Ipv6Addr) -> bool {
    matches!(ip.segments(), [0, 0, 0, 0, 0, 0xffff, _, _])
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

impl fmt::Debug for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Cidr({self})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn cidr(s: &str) -> Cidr {
        s.parse().unwrap()
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn an_ipv4_range_holds_its_addresses_only() {
        let net = cidr("10.20.0.0/16");
        assert!(net.contains(ip("10.20.0.1")));
        assert!(net.contains(ip("10.20.255.255")));
        assert!(!net.contains(ip("10.21.0.0")));
        assert!(!net.contains(ip("::ffff:10.20.0.1")), "another family");
    }

    #[test]
    fn an_ipv6_range_holds_its_addresses_only() {
        let net = cidr("2001:db8::/48");
        assert!(net.contains(ip("2001:db8::1")));
        assert!(!net.contains(ip("2001:db9::1")));
        assert!(!net.contains(ip("10.0.0.1")));
    }

    #[test]
    fn host_bits_are_ignored_and_edges_hold() {
        assert!(cidr("10.20.1.7/16").contains(ip("10.20.200.1")));
        assert!(cidr("0.0.0.0/0").contains(ip("203.0.113.9")));
        assert!(!cidr("0.0.0.0/0").contains(ip("::1")));
        assert!(cidr("192.0.2.7/32").contains(ip("192.0.2.7")));
        assert!(!cidr("192.0.2.7/32").contains(ip("192.0.2.6")));
        assert!(cidr("::/0").contains(ip("2001:db8::1")));
    }

    #[test]
    fn what_kubernetes_is_cidr_refuses_is_refused() {
        for bad in [
            "10.0.0.0",
            "10.0.0.0/",
            "10.0.0.0/33",
            "10.0.0.0/08",
            "10.0.0.0/+8",
            "10.0.0.0/-1",
            "010.0.0.0/8",
            "10.0.0/8",
            "::ffff:10.0.0.0/104",
            "fe80::1%eth0/64",
            "2001:db8::/129",
            "x/8",
            "",
        ] {
            assert!(bad.parse::<Cidr>().is_err(), "{bad:?} must be refused");
        }
        for good in [
            "10.0.0.0/8",
            "10.0.0.1/8",
            "0.0.0.0/0",
            "::/0",
            "2001:db8::/32",
        ] {
            assert!(good.parse::<Cidr>().is_ok(), "{good:?} must be accepted");
        }
    }

    proptest! {
        #[test]
        fn an_address_is_in_its_own_range_at_every_prefix(a in any::<u32>(), p in 0u8..=32) {
            let addr = std::net::Ipv4Addr::from(a);
            let net: Cidr = format!("{addr}/{p}").parse().unwrap();
            prop_assert!(net.contains(IpAddr::V4(addr)));
            // Flipping a bit inside the prefix leaves the range.
            if p > 0 {
                let flipped = std::net::Ipv4Addr::from(a ^ (1u32 << (32 - u32::from(p))));
                prop_assert!(!net.contains(IpAddr::V4(flipped)));
            }
        }
    }
}
