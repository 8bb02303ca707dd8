//! `kubeflavor node report`: the node's half of P9. Run on the node with the kubelet's own
//! credentials (its kubeconfig, `/etc/kubernetes/kubelet.conf`), it
//! 1. writes the node's NodeReport spec, what the node says of its network (`gather`), by
//!    server-side apply; the API server's admission policy refuses a report named after
//!    another node, and RBAC gives nodes no read of reports and no write of their status;
//! 2. shows itself to the join-token API's `POST /v1/observations` over TLS with the same
//!    client certificate, so kubeflavor records, from outside, the address the connection
//!    came from.

pub mod gather;

use std::net::IpAddr;
use std::path::Path;
use std::sync::Arc;

use base64::Engine;
use kube::api::{Patch, PatchParams};
use kubeflavor_cluster::crd::network::NodeReportSpec;
use kubeflavor_cluster::node_reports;
use kubeflavor_core::admission::node_report::NODE_USER_PREFIX;
use serde_json::{Value, json};
use zeroize::Zeroizing;

use crate::connect::Cluster;

/// The field manager of the reporter's writes.
pub const FIELD_MANAGER: &str = "kubeflavor-node-report";
/// The most of an observer's answer read.
const MAX_ANSWER_BYTES: usize = 64 * 1024;

/// Where and how to be observed.
#[derive(Debug, Clone)]
pub struct Observer {
    /// The join-token API's address, `https://HOST[:PORT]`.
    pub url: String,
    /// The CA of its serving certificate (PEM); `None`: the system's roots.
    pub ca_pem: Option<Vec<u8>>,
    /// The local address to connect from (a machine on several networks: the one whose
    /// site counts); `None`: the system's choice.
    pub source: Option<IpAddr>,
}

/// The node's client certificate and key (PEM), as its kubeconfig names them.
pub struct Identity {
    pub cert_pem: Vec<u8>,
    pub key_pem: Zeroizing<Vec<u8>>,
}

/// What one report did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reported {
    pub node: String,
    /// The address the observer saw, when one was asked.
    pub observed: Option<String>,
}

/// Reads the client certificate and key a kubeconfig's user names (files or data).
pub fn identity_of(config: &kube::Config) -> Result<Identity, String> {
    let auth = &config.auth_info;
    // The key's text is borrowed, never copied; what is read is zeroized by the caller.
    let read = |path: &Option<String>, data: Option<&str>, what: &str| -> Result<Vec<u8>, String> {
        if let Some(data) = data {
            return base64::engine::general_purpose::STANDARD
                .decode(data.trim())
                .map_err(|e| format!("the kubeconfig's {what} data is not base64: {e}"));
        }
        match path {
            Some(p) => std::fs::read(p).map_err(|e| format!("cannot read the {what} {p}: {e}")),
            None => Err(format!(
                "the kubeconfig's user has no {what}: a node reports with its own client certificate (give --kubeconfig the kubelet's, /etc/kubernetes/kubelet.conf)"
            )),
        }
    };
    use secrecy::ExposeSecret;
    let cert_pem = read(
        &auth.client_certificate,
        auth.client_certificate_data.as_deref(),
        "client certificate",
    )?;
    let key_pem = Zeroizing::new(read(
        &auth.client_key,
        auth.client_key_data.as_ref().map(|k| k.expose_secret()),
        "client key",
    )?);
    Ok(Identity { cert_pem, key_pem })
}

/// The node this identity is, from the API server's own answer.
async fn node_name(cluster: &Cluster) -> Result<String, String> {
    let user = kubeflavor_cluster::whoami::caller_name(&cluster.client)
        .await
        .ok_or("the API server did not say who this kubeconfig is (SelfSubjectReview)")?;
    user.strip_prefix(NODE_USER_PREFIX)
        .map(str::to_string)
        .ok_or_else(|| {
            format!(
                "this kubeconfig authenticates as {user:?}, not as a node: a node reports with its own credentials (give --kubeconfig the kubelet's, /etc/kubernetes/kubelet.conf)"
            )
        })
}

/// Writes the node's report (`spec`) and, with `observer`, has it observed.
pub async fn report(
    cluster: &Cluster,
    identity: &Identity,
    spec: &NodeReportSpec,
    observer: Option<&Observer>,
) -> Result<Reported, String> {
    let node = node_name(cluster).await?;
    let applied = json!({
        "apiVersion": "kubeflavor.io/v1alpha1",
        "kind": "NodeReport",
        "metadata": {"name": node},
        "spec": spec,
    });
    node_reports::api(&cluster.client)
        .patch(
            &node,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&applied),
        )
        .await
        .map_err(|e| format!("cannot write NodeReport {node}: {e}"))?;
    let observed = match observer {
        Some(observer) => Some(observe(observer, identity).await?),
        None => None,
    };
    Ok(Reported { node, observed })
}

/// The TLS client configuration: the observer's CA (or the system's roots) and the node's
/// client certificate.
fn client_config(observer: &Observer, identity: &Identity) -> Result<rustls::ClientConfig, String> {
    let mut roots = rustls::RootCertStore::empty();
    match &observer.ca_pem {
        Some(pem) => {
            for der in kubeflavor_core::crypto::keys::tls_certificate_chain(pem)
                .map_err(|e| format!("the observer's CA: {e}"))?
            {
                roots
                    .add(rustls_pki_types::CertificateDer::from(der))
                    .map_err(|e| format!("the observer's CA: {e}"))?;
            }
        }
        None => roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
    }
    let certified = kubeflavor_cluster::ops::tls::certified_from_pem(
        &identity.cert_pem,
        &identity.key_pem,
        Path::new("(the kubeconfig's client certificate)"),
        Path::new("(the kubeconfig's client key)"),
    )
    .map_err(|e| e.to_string())?;
    Ok(rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_client_cert_resolver(Arc::new(rustls::sign::SingleCertAndKey::from(certified))))
}

/// `POST /v1/observations` at the observer, as the node; the address it saw.
pub async fn observe(observer: &Observer, identity: &Identity) -> Result<String, String> {
    let config = Arc::new(client_config(observer, identity)?);
    let url = format!("{}/v1/observations", observer.url.trim_end_matches('/'));
    let mut request = crate::outbound::Request::new(http::Method::POST, &url, MAX_ANSWER_BYTES);
    request.source = observer.source;
    let (code, body) = crate::outbound::send(&config, request).await?;
    let answer: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    if !code.is_success() {
        let message = answer["message"].as_str().unwrap_or("(no message)");
        return Err(format!("{url} answered {code}: {message}"));
    }
    answer["address"]
        .as_str()
        .map(str::to_string)
        .ok_or_else(|| format!("{url} answered without the observed address"))
}

/// The CA file's PEM, read for `--observer-ca-file`.
pub fn read_ca(path: &Path) -> Result<Vec<u8>, String> {
    std::fs::read(path)
        .map_err(|e| format!("cannot read --observer-ca-file {}: {e}", path.display()))
}

/// How often the systemd unit reports when `--every` is not given.
pub const UNIT_DEFAULT_EVERY: &str = "10m";

/// The flags of `node report` a systemd unit repeats.
#[derive(Debug, Clone, Default)]
pub struct UnitFlags<'a> {
    pub observer: Option<&'a str>,
    pub observer_ca_file: Option<&'a Path>,
    pub source_address: Option<IpAddr>,
    pub every: Option<std::time::Duration>,
}

/// A systemd unit running `program node report` with `kubeconfig` and the observer flags of
/// `args`, every `--every` (default [`UNIT_DEFAULT_EVERY`]), restarted if it stops. The
/// service can write nothing on the machine and reaches only the network.
pub fn systemd_unit(
    program: &Path,
    kubeconfig: Option<&Path>,
    args: &UnitFlags<'_>,
) -> Result<String, String> {
    let path = |p: &Path| {
        p.to_str()
            .map(str::to_string)
            .ok_or_else(|| format!("{} is not UTF-8", p.display()))
    };
    let mut argv = vec![path(program)?];
    if let Some(k) = kubeconfig {
        argv.extend(["--kubeconfig".into(), path(k)?]);
    }
    argv.extend(["node".into(), "report".into()]);
    if let Some(url) = args.observer {
        argv.extend(["--observer".into(), url.to_string()]);
    }
    if let Some(ca) = args.observer_ca_file {
        argv.extend(["--observer-ca-file".into(), path(ca)?]);
    }
    if let Some(source) = args.source_address {
        argv.extend(["--source-address".into(), source.to_string()]);
    }
    let every = match args.every {
        Some(d) => format!("{}s", d.as_secs().max(1)),
        None => UNIT_DEFAULT_EVERY.into(),
    };
    argv.extend(["--every".into(), every]);
    let exec = argv
        .iter()
        .map(|a| systemd_quoted(a))
        .collect::<Result<Vec<_>, _>>()?
        .join(" ");
    Ok(format!(
        "# kubeflavor node report: this node's network, written as the node and observed by\n\
         # kubeflavor (kubeflavor node report --help). Made by kubeflavor node report --systemd-unit.\n\
         [Unit]\n\
         Description=kubeflavor node report (this node's network, observed by kubeflavor)\n\
         Wants=network-online.target\n\
         After=network-online.target kubelet.service\n\
         \n\
         [Service]\n\
         ExecStart={exec}\n\
         Restart=always\n\
         RestartSec=30s\n\
         # It reads the kubelet's kubeconfig and client key and writes nothing on the machine.\n\
         NoNewPrivileges=yes\n\
         ProtectSystem=strict\n\
         ProtectHome=yes\n\
         PrivateTmp=yes\n\
         RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6 AF_NETLINK\n\
         \n\
         [Install]\n\
         WantedBy=multi-user.target\n"
    ))
}

/// One argument of a systemd `ExecStart=` line: double-quoted unless plain, with `%` and `$`
/// doubled (systemd's specifiers and variables). Control characters are refused.
fn systemd_quoted(arg: &str) -> Result<String, String> {
    if arg.is_empty() || arg.chars().any(char::is_control) {
        return Err(format!(
            "{arg:?} cannot be an argument of a systemd unit (empty or with control characters)"
        ));
    }
    let escaped = arg.replace('%', "%%").replace('$', "$$");
    let plain = escaped
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "/._:=@,+-%$[]".contains(c));
    if plain {
        return Ok(escaped);
    }
    Ok(format!(
        "\"{}\"",
        escaped.replace('\\', "\\\\").replace('"', "\\\"")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(observer: Option<&str>, every: Option<u64>) -> UnitFlags<'_> {
        UnitFlags {
            observer,
            observer_ca_file: observer.map(|_| Path::new("/etc/kubeflavor/observer ca.crt")),
            source_address: None,
            every: every.map(std::time::Duration::from_secs),
        }
    }

    /// The ExecStart line split as systemd splits it (double quotes, backslash escapes),
    /// with `%%` and `$$` undone.
    fn exec_start(unit: &str) -> Vec<String> {
        let line = unit
            .lines()
            .find_map(|l| l.strip_prefix("ExecStart="))
            .expect("an ExecStart line");
        let (mut words, mut word, mut quoted, mut chars) =
            (Vec::new(), String::new(), false, line.chars());
        while let Some(c) = chars.next() {
            match c {
                '"' => quoted = !quoted,
                '\\' if quoted => word.push(chars.next().expect("an escaped character")),
                ' ' if !quoted => words.push(std::mem::take(&mut word)),
                c => word.push(c),
            }
        }
        words.push(word);
        words
            .into_iter()
            .map(|w| w.replace("%%", "%").replace("$$", "$"))
            .collect()
    }

    #[test]
    fn the_unit_runs_the_same_report_every_interval() {
        let unit = systemd_unit(
            Path::new("/usr/local/bin/kubeflavor"),
            Some(Path::new("/etc/kubernetes/kubelet.conf")),
            &args(Some("https://10.1.2.3:8443/%x$y\"z"), Some(60)),
        )
        .expect("a unit");
        assert_eq!(
            exec_start(&unit),
            [
                "/usr/local/bin/kubeflavor",
                "--kubeconfig",
                "/etc/kubernetes/kubelet.conf",
                "node",
                "report",
                "--observer",
                "https://10.1.2.3:8443/%x$y\"z",
                "--observer-ca-file",
                "/etc/kubeflavor/observer ca.crt",
                "--every",
                "60s",
            ]
        );
        assert!(unit.contains("\nRestart=always\n") && unit.contains("WantedBy=multi-user.target"));
        let default = systemd_unit(Path::new("/k"), None, &args(None, None)).expect("a unit");
        assert_eq!(
            exec_start(&default),
            ["/k", "node", "report", "--every", UNIT_DEFAULT_EVERY]
        );
    }

    #[test]
    fn an_argument_with_a_newline_makes_no_unit() {
        let e = systemd_unit(
            Path::new("/k"),
            None,
            &args(Some("https://a\nExecStartPre=/bin/sh"), None),
        )
        .expect_err("refused");
        assert!(e.contains("control characters"), "{e}");
    }
}
