//! The functions CRD rules may call beyond what the interpreter provides: the Kubernetes
//! string and list extensions (k8s.io/apiserver/pkg/cel/library and cel-go's strings
//! extension). The interpreter's own `size` counts code points and its `matches` is RE2-like
//! (the regex crate), as CEL specifies; it refuses to have them redeclared.

use std::sync::Arc;

use cel::extractors::{Arguments, This};
use cel::{Context, ExecutionError, FunctionContext, Value as Cel};

use super::schema::cached_regex;

type CelResult = Result<Cel, ExecutionError>;

/// The error the interpreter gives a member function called on a type it has no overload for.
fn no_overload(ftx: &FunctionContext) -> ExecutionError {
    ExecutionError::no_such_member_overload(ftx.name, Vec::new())
}

/// The standard functions plus the Kubernetes string and list extensions CRD rules use
/// (k8s.io/apiserver/pkg/cel/library and cel-go's strings extension).
pub fn base_context() -> Context<'static, 'static> {
    // The standard library's declarations are built once per thread: building them is most
    // of what a fresh context costs, and every admitted write makes one.
    thread_local! {
        static STDLIB: std::sync::Arc<cel::Env> = std::sync::Arc::new(cel::Env::stdlib());
    }
    let mut ctx = Context::with_env(STDLIB.with(std::sync::Arc::clone));
    ctx.add_function("isCIDR", is_cidr)
        .expect("the interpreter declares no isCIDR");
    for name in [
        "lowerAscii",
        "upperAscii",
        "trim",
        "replace",
        "split",
        "substring",
        "indexOf",
        "lastIndexOf",
        "join",
        "charAt",
        "find",
        "findAll",
    ] {
        ctx.add_function(name, extension)
            .expect("the interpreter declares no function of this name");
    }
    ctx
}

/// `isCIDR(string)` of the Kubernetes CIDR library
/// (k8s.io/apiserver/pkg/cel/library/cidr.go, `isCIDR` -> `parseCIDR`): Go's
/// `netip.ParsePrefix` succeeds (no zone; the prefix length decimal, without sign or
/// leading zero, within the address's width) and the address is not IPv4-mapped IPv6.
/// Bits after the prefix are allowed.
fn is_cidr(raw: Arc<String>) -> bool {
    let Some((addr, bits)) = raw.split_once('/') else {
        return false;
    };
    if addr.contains('%') {
        return false;
    }
    // Rust's parsers refuse what netip.ParseAddr refuses (leading zeros in IPv4 octets
    // included).
    let Ok(addr) = addr.parse::<std::net::IpAddr>() else {
        return false;
    };
    if let std::net::IpAddr::V6(v6) = addr
        && matches!(v6.segments(), [0, 0, 0, 0, 0, 0xffff, _, _])
    {
        return false;
    }
    let plain = !bits.is_empty()
        && bits.len() <= 3
        && bits.bytes().all(|b| b.is_ascii_digit())
        && !(bits.len() > 1 && bits.starts_with('0'));
    let width = if addr.is_ipv4() { 32 } else { 128 };
    plain && bits.parse::<u32>().is_ok_and(|b| b <= width)
}

fn int_arg(ftx: &FunctionContext, args: &[Cel], i: usize) -> Result<Option<i64>, ExecutionError> {
    match args.get(i) {
        None => Ok(None),
        Some(Cel::Int(n)) => Ok(Some(*n)),
        Some(other) => Err(ftx.error(format!("expected an int argument, got {other:?}"))),
    }
}

fn str_arg(ftx: &FunctionContext, args: &[Cel], i: usize) -> Result<Arc<String>, ExecutionError> {
    match args.get(i) {
        Some(Cel::String(s)) => Ok(s.clone()),
        other => Err(ftx.error(format!("expected a string argument, got {other:?}"))),
    }
}

/// Code-point index of a byte offset, and back.
fn cp_index(s: &str, byte: usize) -> i64 {
    s[..byte].chars().count() as i64
}

fn byte_offset(ftx: &FunctionContext, s: &str, cp: i64) -> Result<usize, ExecutionError> {
    let len = s.chars().count() as i64;
    if cp < 0 || cp > len {
        return Err(ftx.error(format!("index out of range: {cp}")));
    }
    Ok(s.char_indices()
        .nth(cp as usize)
        .map(|(b, _)| b)
        .unwrap_or(s.len()))
}

fn extension(
    ftx: &FunctionContext,
    This(this): This<Cel>,
    Arguments(args): Arguments,
) -> CelResult {
    if let Cel::List(list) = &this {
        return list_extension(ftx, list, &args);
    }
    let Cel::String(s) = this else {
        return Err(no_overload(ftx));
    };
    let s = s.as_str();
    let string = |x: String| Cel::String(Arc::new(x));
    Ok(match ftx.name {
        "lowerAscii" => string(s.to_ascii_lowercase()),
        "upperAscii" => string(s.to_ascii_uppercase()),
        "trim" => string(s.trim().to_string()),
        "replace" => {
            let (from, to) = (str_arg(ftx, &args, 0)?, str_arg(ftx, &args, 1)?);
            match int_arg(ftx, &args, 2)? {
                Some(n) if n >= 0 => string(s.replacen(from.as_str(), &to, n as usize)),
                _ => string(s.replace(from.as_str(), &to)),
            }
        }
        "split" => {
            let sep = str_arg(ftx, &args, 0)?;
            let parts: Vec<Cel> = match int_arg(ftx, &args, 1)? {
                Some(0) => Vec::new(),
                Some(n) if n > 0 => s
                    .splitn(n as usize, sep.as_str())
                    .map(|p| string(p.into()))
                    .collect(),
                _ => s.split(sep.as_str()).map(|p| string(p.into())).collect(),
            };
            Cel::List(Arc::new(parts))
        }
        "substring" => {
            let start = byte_offset(ftx, s, int_arg(ftx, &args, 0)?.unwrap_or(0))?;
            let end = match int_arg(ftx, &args, 1)? {
                Some(e) => byte_offset(ftx, s, e)?,
                None => s.len(),
            };
            if end < start {
                return Err(ftx.error("invalid substring range"));
            }
            string(s[start..end].to_string())
        }
        "charAt" => {
            let at = byte_offset(ftx, s, int_arg(ftx, &args, 0)?.unwrap_or(0))?;
            string(s[at..].chars().next().map(String::from).unwrap_or_default())
        }
        "indexOf" | "lastIndexOf" => {
            let sub = str_arg(ftx, &args, 0)?;
            let from = int_arg(ftx, &args, 1)?;
            let found = if ftx.name == "indexOf" {
                let start = byte_offset(ftx, s, from.unwrap_or(0))?;
                s[start..].find(sub.as_str()).map(|b| b + start)
            } else {
                let limit = match from {
                    Some(f) => byte_offset(ftx, s, f)? + sub.len(),
                    None => s.len(),
                };
                s[..limit.min(s.len())].rfind(sub.as_str())
            };
            Cel::Int(found.map(|b| cp_index(s, b)).unwrap_or(-1))
        }
        "find" | "findAll" => {
            let re = cached_regex(&str_arg(ftx, &args, 0)?).map_err(|e| ftx.error(e))?;
            if ftx.name == "find" {
                string(
                    re.find(s)
                        .map(|m| m.as_str().to_string())
                        .unwrap_or_default(),
                )
            } else {
                let limit = int_arg(ftx, &args, 1)?
                    .filter(|n| *n >= 0)
                    .map(|n| n as usize);
                let all = re.find_iter(s).take(limit.unwrap_or(usize::MAX));
                Cel::List(Arc::new(
                    all.map(|m| string(m.as_str().to_string())).collect(),
                ))
            }
        }
        _ => return Err(no_overload(ftx)),
    })
}

fn list_extension(ftx: &FunctionContext, list: &[Cel], args: &[Cel]) -> CelResult {
    Ok(match ftx.name {
        "join" => {
            let sep = match args.first() {
                Some(Cel::String(s)) => s.to_string(),
                _ => String::new(),
            };
            let mut parts = Vec::new();
            for item in list {
                match item {
                    Cel::String(s) => parts.push(s.to_string()),
                    _ => return Err(no_overload(ftx)),
                }
            }
            Cel::String(Arc::new(parts.join(&sep)))
        }
        "indexOf" => Cel::Int(
            list.iter()
                .position(|x| Some(x) == args.first())
                .map_or(-1, |i| i as i64),
        ),
        "lastIndexOf" => Cel::Int(
            list.iter()
                .rposition(|x| Some(x) == args.first())
                .map_or(-1, |i| i as i64),
        ),
        _ => return Err(no_overload(ftx)),
    })
}
