//! The portal's pages: plain HTML forms that work without JavaScript, every value escaped,
//! labels and errors tied to their fields, one stylesheet from the portal's own origin.

use std::collections::BTreeMap;
use std::fmt::Write;

use kubeflavor_core::flavor::input_labels::{AllowedValues, InputLabelRules};
use kubeflavor_core::portal::form::LABEL_FIELD_PREFIX;

/// `text` made safe for HTML text and attribute values.
pub fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Who is signed in, for the header: shown name and the session's CSRF token.
pub struct SignedIn<'a> {
    pub shown_as: &'a str,
    pub csrf: &'a str,
}

/// A whole page.
pub fn page(title: &str, signed_in: Option<&SignedIn<'_>>, body: &str) -> String {
    let nav = match signed_in {
        Some(s) => format!(
            r#"<nav aria-label="Portal"><a href="/">New node</a> · <a href="/nodes">My nodes</a></nav>
<span>Signed in as <strong>{}</strong></span>
<form method="post" action="/signout"><input type="hidden" name="csrf" value="{}"><button class="secondary" type="submit">Sign out</button></form>"#,
            esc(s.shown_as),
            esc(s.csrf)
        ),
        None => String::new(),
    };
    format!(
        r#"<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title} · kubeflavor</title>
<link rel="stylesheet" href="/portal.css">
</head>
<body>
<header><span class="brand">kubeflavor · nodes</span>{nav}</header>
<main>
<h1>{title}</h1>
{body}
</main>
</body>
</html>
"#,
        title = esc(title),
    )
}

/// The page for someone not signed in; `notice`: why they are here again.
pub fn landing(notice: Option<&str>) -> String {
    let notice = notice
        .map(|n| format!(r#"<p class="notice" role="alert">{}</p>"#, esc(n)))
        .unwrap_or_default();
    page(
        "Add a node to the cluster",
        None,
        &format!(
            r#"{notice}<p>Sign in with your organisation's account to get what your machine needs to join: a cloud-init document or a seed image to attach to the virtual machine before its first boot.</p>
<p><a class="button" href="/signin">Sign in</a></p>"#
        ),
    )
}

/// A page that says what went wrong and what to do.
pub fn problem(title: &str, message: &str, signed_in: Option<&SignedIn<'_>>) -> String {
    let next = if signed_in.is_some() {
        r#"<p><a href="/">Back to the portal</a></p>"#
    } else {
        r#"<p><a class="button" href="/signin">Sign in again</a></p>"#
    };
    page(
        title,
        signed_in,
        &format!(
            r#"<p class="notice" role="alert">{}</p>{next}"#,
            esc(message)
        ),
    )
}

/// What the node form shows again after a refusal.
#[derive(Default)]
pub struct FormValues {
    pub hostname: String,
    pub labels: BTreeMap<String, String>,
    pub ssh_keys: String,
}

/// The node form. `errors`: messages by form field; `general`: one for the whole form.
pub fn node_form(
    signed_in: &SignedIn<'_>,
    offered: &InputLabelRules,
    valid_for: &str,
    values: &FormValues,
    errors: &BTreeMap<String, Vec<String>>,
    general: Option<&str>,
) -> String {
    let mut body = String::new();
    if let Some(message) = general {
        let _ = write!(
            body,
            r#"<p class="notice" role="alert">{}</p>"#,
            esc(message)
        );
    }
    if !errors.is_empty() && general.is_none() {
        body.push_str(r#"<p class="notice" role="alert">Some fields need a change; see the messages below them.</p>"#);
    }
    let _ = write!(
        body,
        r#"<p>Describe the machine. You get a join token valid for {valid_for}, once, with a cloud-init document and a seed image that carry it.</p>
<form method="post" action="/tokens" novalidate>
<input type="hidden" name="csrf" value="{csrf}">
"#,
        valid_for = esc(valid_for),
        csrf = esc(signed_in.csrf)
    );
    body.push_str(&field(
        "hostname",
        "Node name",
        "The machine's hostname and its node's name: lower-case letters, digits and '-'. Leave empty to have one made up.",
        &format!(
            r#"<input type="text" id="hostname" name="hostname" value="{}" maxlength="63" autocomplete="off"{}>"#,
            esc(&values.hostname),
            described("hostname", errors)
        ),
        errors,
    ));
    for (key, allowed) in offered.keys() {
        let name = format!("{LABEL_FIELD_PREFIX}{}", key.as_str());
        let id = format!("label-{}", key.as_str());
        let current = values
            .labels
            .get(key.as_str())
            .map(String::as_str)
            .unwrap_or("");
        let (control, hint) = match allowed {
            AllowedValues::OneOf(values) => {
                let mut options = String::from(r#"<option value="">(not set)</option>"#);
                for v in values {
                    let selected = if v.as_str() == current {
                        " selected"
                    } else {
                        ""
                    };
                    let _ = write!(
                        options,
                        r#"<option value="{v}"{selected}>{v}</option>"#,
                        v = esc(v.as_str())
                    );
                }
                (
                    format!(
                        r#"<select id="{id}" name="{name}"{}>{options}</select>"#,
                        described(&name, errors),
                        id = esc(&id),
                        name = esc(&name)
                    ),
                    "Optional. Choose the value that describes this machine.".to_string(),
                )
            }
            AllowedValues::Pattern(p) => (
                format!(
                    r#"<input type="text" id="{id}" name="{name}" value="{}" maxlength="63" autocomplete="off"{}>"#,
                    esc(current),
                    described(&name, errors),
                    id = esc(&id),
                    name = esc(&name)
                ),
                format!("Optional. The whole value must match {}.", p.as_str()),
            ),
        };
        body.push_str(&field_with_id(
            &name,
            &id,
            &format!("Label: {}", key.as_str()),
            &hint,
            &control,
            errors,
        ));
    }
    body.push_str(&field(
        "sshAuthorizedKeys",
        "SSH public keys",
        "Optional. One OpenSSH public key per line (e.g. ssh-ed25519 AAAA... you@laptop): they may log in to the machine's default user.",
        &format!(
            r#"<textarea id="sshAuthorizedKeys" name="sshAuthorizedKeys" rows="4" spellcheck="false"{}>{}</textarea>"#,
            described("sshAuthorizedKeys", errors),
            esc(&values.ssh_keys)
        ),
        errors,
    ));
    body.push_str("<button type=\"submit\">Get a join token</button>\n</form>");
    page("Add a node to the cluster", Some(signed_in), &body)
}

fn described(field: &str, errors: &BTreeMap<String, Vec<String>>) -> String {
    if errors.contains_key(field) {
        format!(
            r#" aria-invalid="true" aria-describedby="{}-error""#,
            esc(&field_id(field))
        )
    } else {
        String::new()
    }
}

fn field_id(field: &str) -> String {
    match field.strip_prefix(LABEL_FIELD_PREFIX) {
        Some(key) => format!("label-{key}"),
        None => field.to_string(),
    }
}

fn field(
    name: &str,
    label: &str,
    hint: &str,
    control: &str,
    errors: &BTreeMap<String, Vec<String>>,
) -> String {
    field_with_id(name, &field_id(name), label, hint, control, errors)
}

fn field_with_id(
    name: &str,
    id: &str,
    label: &str,
    hint: &str,
    control: &str,
    errors: &BTreeMap<String, Vec<String>>,
) -> String {
    let error = errors
        .get(name)
        .map(|messages| {
            format!(
                r#"<p class="error" id="{}-error">{}</p>"#,
                esc(id),
                messages
                    .iter()
                    .map(|m| esc(m))
                    .collect::<Vec<_>>()
                    .join("<br>")
            )
        })
        .unwrap_or_default();
    format!(
        r#"<label for="{id}">{label}<span class="hint">{hint}</span></label>
{control}
{error}
"#,
        id = esc(id),
        label = esc(label),
        hint = esc(hint)
    )
}

/// What a minted token's page shows.
pub struct Minted<'a> {
    pub hostname: &'a str,
    pub token: &'a str,
    pub join_line: &'a str,
    pub valid_until: &'a str,
    pub labels: &'a BTreeMap<String, String>,
    /// The sealed download ticket.
    pub ticket: &'a str,
}

/// The page showing a join token, once.
pub fn minted(signed_in: &SignedIn<'_>, m: &Minted<'_>) -> String {
    let labels = if m.labels.is_empty() {
        "none".to_string()
    } else {
        m.labels
            .iter()
            .map(|(k, v)| format!("{}={}", esc(k), esc(v)))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let download = |what: &str, label: &str| {
        format!(
            r#"<form method="post" action="/download"><input type="hidden" name="csrf" value="{}"><input type="hidden" name="ticket" value="{}"><input type="hidden" name="what" value="{what}"><button type="submit">{label}</button></form>"#,
            esc(signed_in.csrf),
            esc(m.ticket)
        )
    };
    let body = format!(
        r#"<p class="ok" role="status">Your join token for <strong>{host}</strong> is valid until <strong>{until}</strong>. It is shown on this page only: download what you need now. Anyone holding it can join a machine in your name until then.</p>
<h2>Boot media</h2>
<p>Attach the seed image to the virtual machine (as a disk or CD) before its first boot, or give your hypervisor the cloud-init user-data.</p>
<div class="downloads">{seed}{user_data}</div>
<h2>Or join by hand</h2>
<p>On a machine with kubeadm, as root:</p>
<pre class="secret">{join}</pre>
<p>Input labels: {labels}</p>
<p><a href="/">Add another node</a> · <a href="/nodes">My nodes</a></p>"#,
        host = esc(m.hostname),
        until = esc(m.valid_until),
        seed = download("seed-image", "Download the seed image"),
        user_data = download("user-data", "Download the cloud-init user-data"),
        join = esc(m.join_line),
    );
    let _ = m.token;
    page("Your join token", Some(signed_in), &body)
}

/// One row of "My nodes".
pub struct NodeRow {
    pub node: String,
    pub joined: String,
    /// Its Node has registered with the cluster.
    pub registered: bool,
}

/// The nodes whose custody names the signed-in identity.
pub fn nodes(signed_in: &SignedIn<'_>, rows: &[NodeRow]) -> String {
    let body = if rows.is_empty() {
        r#"<p>No machine has joined with your tokens yet. A machine appears here once it has joined.</p><p><a href="/">Add a node</a></p>"#.to_string()
    } else {
        let mut table = String::from(
            r#"<table><caption>Machines that joined with tokens given to you</caption><thead><tr><th scope="col">Node</th><th scope="col">Token used</th><th scope="col">Registered</th></tr></thead><tbody>"#,
        );
        for row in rows {
            let _ = write!(
                table,
                "<tr><td>{}</td><td>{}</td><td>{}</td></tr>",
                esc(&row.node),
                esc(&row.joined),
                if row.registered { "yes" } else { "not yet" }
            );
        }
        table.push_str("</tbody></table>");
        table
    };
    page("My nodes", Some(signed_in), &body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_value_is_escaped() {
        assert_eq!(
            esc(r#"<script>alert("x")</script>&'"#),
            "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;&amp;&#39;"
        );
        let who = SignedIn {
            shown_as: "<img src=x onerror=alert(1)>",
            csrf: "\"><script>",
        };
        let values = FormValues {
            hostname: "\"><script>alert(1)</script>".into(),
            labels: BTreeMap::new(),
            ssh_keys: "</textarea><script>alert(1)</script>".into(),
        };
        let errors = BTreeMap::from([("hostname".to_string(), vec!["<b>bad</b>".to_string()])]);
        let html = node_form(
            &who,
            &InputLabelRules::default(),
            "1h",
            &values,
            &errors,
            Some("<i>no</i>"),
        );
        for raw in ["<script>", "<img", "<b>", "<i>", "</textarea><"] {
            assert!(!html.contains(raw), "{raw} unescaped in\n{html}");
        }
        assert!(html.contains(r#"aria-describedby="hostname-error""#));
        assert!(html.contains(r#"id="hostname-error""#));
    }
}
