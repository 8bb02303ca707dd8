//! The portal's node form (`application/x-www-form-urlencoded`), read into the same request
//! a node administrator's API call makes, so the page and the API refuse exactly the same
//! things with the same words.
//!
//! Fields: `csrf`; `hostname` (empty: one is made up); `label.<key>` per input label the
//! roster offers (empty: not asked for); `sshAuthorizedKeys`, one OpenSSH public key per
//! line.

use std::collections::BTreeMap;

use serde_json::json;

use crate::mint::request::{FieldProblem, FieldReason, MAX_BODY_BYTES};

/// The form field of an input label.
pub const LABEL_FIELD_PREFIX: &str = "label.";
/// The longest hostname taken: a DNS label, which is also a Node name.
pub const MAX_HOSTNAME: usize = 63;

/// What the form asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeForm {
    pub csrf: Option<String>,
    /// The machine's hostname, which the kubelet registers as its Node's name; `None` when
    /// the administrator left it empty.
    pub hostname: Option<String>,
    pub labels: BTreeMap<String, String>,
    pub ssh_keys: Vec<String>,
}

/// Why a form was not read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NodeFormError {
    #[error("the form is larger than {MAX_BODY_BYTES} bytes; paste fewer or shorter keys")]
    TooLarge,
    #[error("the form sends {0:?} twice; send each field once")]
    Repeated(String),
    #[error("the form's fields are invalid")]
    Invalid(Vec<FieldProblem>),
}

/// Reads a posted node form.
pub fn parse(body: &[u8]) -> Result<NodeForm, NodeFormError> {
    if body.len() > MAX_BODY_BYTES {
        return Err(NodeFormError::TooLarge);
    }
    let mut seen = std::collections::BTreeSet::new();
    let mut form = NodeForm {
        csrf: None,
        hostname: None,
        labels: BTreeMap::new(),
        ssh_keys: Vec::new(),
    };
    let mut problems = Vec::new();
    for (name, value) in form_urlencoded::parse(body) {
        if !seen.insert(name.to_string()) {
            return Err(NodeFormError::Repeated(name.chars().take(64).collect()));
        }
        let value = value.trim();
        match name.as_ref() {
            "csrf" => form.csrf = Some(value.to_string()),
            "hostname" if value.is_empty() => {}
            "hostname" => match check_hostname(value) {
                Ok(()) => form.hostname = Some(value.to_string()),
                Err(message) => problems.push(FieldProblem {
                    field: "hostname".into(),
                    reason: FieldReason::Invalid,
                    message,
                }),
            },
            "sshAuthorizedKeys" => {
                form.ssh_keys = value
                    .lines()
                    .map(str::trim)
                    .filter(|l| !l.is_empty())
                    .map(str::to_string)
                    .collect();
            }
            other => {
                if let Some(key) = other.strip_prefix(LABEL_FIELD_PREFIX)
                    && !value.is_empty()
                {
                    form.labels.insert(key.to_string(), value.to_string());
                }
                // Anything else (a submit button's name) is not read.
            }
        }
    }
    if problems.is_empty() {
        Ok(form)
    } else {
        Err(NodeFormError::Invalid(problems))
    }
}

/// A hostname the machine and its Node can both carry: a lower-case DNS label.
pub fn check_hostname(name: &str) -> Result<(), String> {
    let ok_chars = name
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    let ok_ends = name
        .bytes()
        .next()
        .zip(name.bytes().last())
        .is_some_and(|(a, z)| a.is_ascii_alphanumeric() && z.is_ascii_alphanumeric());
    if name.len() > MAX_HOSTNAME || !ok_chars || !ok_ends {
        return Err(format!(
            "must be 1-{MAX_HOSTNAME} lower-case letters, digits and '-', starting and ending with a letter or digit (e.g. edge-node-1), or empty to have one made up"
        ));
    }
    Ok(())
}

/// A hostname for an administrator who gave none: `node-` and eight random letters and digits.
pub fn made_up_hostname() -> Result<String, getrandom::Error> {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut bytes = [0u8; 8];
    getrandom::fill(&mut bytes)?;
    let suffix: String = bytes
        .iter()
        .map(|b| ALPHABET[*b as usize % ALPHABET.len()] as char)
        .collect();
    Ok(format!("node-{suffix}"))
}

impl NodeForm {
    /// The body of the API request this form stands for (a cloud-init answer).
    pub fn api_request(&self) -> Vec<u8> {
        json!({
            "output": "cloud-init",
            "labels": self.labels,
            "sshAuthorizedKeys": self.ssh_keys,
        })
        .to_string()
        .into_bytes()
    }
}

/// The form field an API field problem belongs to, and the words to show beside it:
/// `labels[site]` is the `label.site` field, `sshAuthorizedKeys[2]` the keys' third line.
pub fn form_field(problem: &FieldProblem) -> (String, String) {
    if let Some(key) = problem
        .field
        .strip_prefix("labels[")
        .and_then(|r| r.strip_suffix(']'))
    {
        return (
            format!("{LABEL_FIELD_PREFIX}{key}"),
            problem.message.clone(),
        );
    }
    if let Some(index) = problem
        .field
        .strip_prefix("sshAuthorizedKeys[")
        .and_then(|r| r.strip_suffix(']'))
        .and_then(|i| i.parse::<usize>().ok())
    {
        return (
            "sshAuthorizedKeys".into(),
            format!("line {}: {}", index + 1, problem.message),
        );
    }
    (problem.field.clone(), problem.message.clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mint::request::parse_for_administrator;

    #[test]
    fn a_form_reads_as_the_api_request_it_stands_for() {
        let body = b"csrf=abc&hostname=edge-1&label.site=lyon&label.rack=&sshAuthorizedKeys=ssh-ed25519+AAAAC3NzaC1lZDI1NTE5AAAAIB5Hh8Xq5u8lPq5dL0K0Jg9p5pJzqfTfYqzv3vjv2yJ%2B+a%40b%0D%0A%0D%0A&go=Get+a+token";
        let form = parse(body).unwrap();
        assert_eq!(form.csrf.as_deref(), Some("abc"));
        assert_eq!(form.hostname.as_deref(), Some("edge-1"));
        assert_eq!(
            form.labels,
            BTreeMap::from([("site".into(), "lyon".into())])
        );
        assert_eq!(form.ssh_keys.len(), 1);
        let asked = parse_for_administrator(&form.api_request()).unwrap();
        assert_eq!(asked.labels, form.labels);
        assert_eq!(asked.ssh_authorized_keys.len(), 1);
    }

    #[test]
    fn bad_hostnames_repeats_and_oversized_forms_are_refused() {
        for bad in [
            "Edge",
            "-a",
            "a-",
            "a_b",
            "a.b",
            &"a".repeat(64),
            "<script>",
        ] {
            let body = format!(
                "hostname={}",
                form_urlencoded::byte_serialize(bad.as_bytes()).collect::<String>()
            );
            assert!(
                matches!(parse(body.as_bytes()), Err(NodeFormError::Invalid(p)) if p[0].field == "hostname"),
                "{bad}"
            );
        }
        assert_eq!(parse(b"hostname=").unwrap().hostname, None);
        assert_eq!(
            parse(b"csrf=a&csrf=b"),
            Err(NodeFormError::Repeated("csrf".into()))
        );
        assert_eq!(
            parse(&vec![b'a'; MAX_BODY_BYTES + 1]),
            Err(NodeFormError::TooLarge)
        );
    }

    #[test]
    fn made_up_hostnames_are_valid() {
        for _ in 0..32 {
            check_hostname(&made_up_hostname().unwrap()).unwrap();
        }
    }

    #[test]
    fn api_problems_land_on_their_form_fields() {
        let problem = |field: &str| FieldProblem {
            field: field.into(),
            reason: FieldReason::Invalid,
            message: "bad".into(),
        };
        assert_eq!(
            form_field(&problem("labels[site]")),
            ("label.site".into(), "bad".into())
        );
        assert_eq!(
            form_field(&problem("sshAuthorizedKeys[1]")),
            ("sshAuthorizedKeys".into(), "line 2: bad".into())
        );
        assert_eq!(
            form_field(&problem("labels")),
            ("labels".into(), "bad".into())
        );
    }
}
