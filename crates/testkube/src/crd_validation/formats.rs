//! The string formats testkube checks, with the leniency of go-openapi's `strfmt`
//! registry. Formats not checked here (uri, email, hostname, mac, isbn, creditcard, ssn,
//! hexcolor, rgbcolor, bsonobjectid) are accepted as any string.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use base64::Engine;

pub fn format_ok(format: &str, s: &str) -> bool {
    match format {
        "date-time" | "datetime" => is_date_time(s),
        "date" => is_date(s),
        "byte" => base64::engine::general_purpose::STANDARD.decode(s).is_ok(),
        "ipv4" => s.parse::<Ipv4Addr>().is_ok(),
        "ipv6" => s.parse::<Ipv6Addr>().is_ok(),
        "cidr" => is_cidr(s),
        "uuid" | "uuid3" | "uuid4" | "uuid5" => is_uuid(s, format),
        _ => true,
    }
}

fn digits(s: &str, n: usize) -> bool {
    s.len() == n && s.bytes().all(|b| b.is_ascii_digit())
}

fn is_date(s: &str) -> bool {
    let parts: Vec<&str> = s.split('-').collect();
    parts.len() == 3
        && digits(parts[0], 4)
        && digits(parts[1], 2)
        && digits(parts[2], 2)
        && (1..=12).contains(&parts[1].parse::<u32>().unwrap_or(0))
        && (1..=31).contains(&parts[2].parse::<u32>().unwrap_or(0))
}

/// RFC 3339 and the ISO 8601 variants strfmt accepts: `T` (or a space), seconds and the
/// zone optional, any number of fractional digits.
fn is_date_time(s: &str) -> bool {
    let Some((date, rest)) = s.split_once(['T', 't', ' ']) else {
        return false;
    };
    if !is_date(date) {
        return false;
    }
    let (time, zone) = match rest.find(['Z', 'z', '+', '-']) {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    let zone_ok = match zone {
        "" | "Z" | "z" => true,
        z => {
            let hm: Vec<&str> = z[1..].split(':').collect();
            hm.len() == 2 && digits(hm[0], 2) && digits(hm[1], 2)
        }
    };
    let (hms, frac) = time.split_once('.').unwrap_or((time, "0"));
    let fields: Vec<&str> = hms.split(':').collect();
    zone_ok
        && (2..=3).contains(&fields.len())
        && fields.iter().all(|f| digits(f, 2))
        && fields[0].parse::<u32>().unwrap_or(99) < 24
        && fields[1].parse::<u32>().unwrap_or(99) < 60
        && fields
            .get(2)
            .is_none_or(|s| s.parse::<u32>().unwrap_or(99) < 61)
        && !frac.is_empty()
        && frac.bytes().all(|b| b.is_ascii_digit())
}

fn is_cidr(s: &str) -> bool {
    let Some((ip, bits)) = s.split_once('/') else {
        return false;
    };
    let max = match ip.parse::<IpAddr>() {
        Ok(IpAddr::V4(_)) => 32,
        Ok(IpAddr::V6(_)) => 128,
        Err(_) => return false,
    };
    bits.parse::<u32>().is_ok_and(|b| b <= max) && !bits.starts_with('+')
}

fn is_uuid(s: &str, format: &str) -> bool {
    let groups: Vec<&str> = s.split('-').collect();
    let shape = groups.len() == 5
        && [8, 4, 4, 4, 12]
            .iter()
            .zip(&groups)
            .all(|(n, g)| g.len() == *n && g.bytes().all(|b| b.is_ascii_hexdigit()));
    let version = match format {
        "uuid3" => Some('3'),
        "uuid4" => Some('4'),
        "uuid5" => Some('5'),
        _ => None,
    };
    shape && version.is_none_or(|v| groups[2].starts_with(v))
}
