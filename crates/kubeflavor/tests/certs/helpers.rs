//! Helpers shared by the certs e2e tests, on top of the e2e harness of tests/support ([`Env`],
//! started with `Env::start_serial`: the tests share kube-system/kubeadm-certs): scanning
//! every object on the server, capturing tracing output, and comparing PKI directories.

#![allow(dead_code)]

pub use crate::support::{Env, decide_csr, skip};

use crate::support::token_secret::TokenSecret;

use std::collections::BTreeMap;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::{Arc, Mutex};

use base64::Engine as _;
use kube::Client;
use kube::api::{Api, DynamicObject, ListParams};
use kube::discovery::{Discovery, verbs};

/// Every object of every listable resource the server offers, as JSON text, across all
/// namespaces. Secrets, ConfigMaps, Events, RBAC, CSRs, custom resources: all of them.
pub async fn every_object(client: &Client) -> Vec<(String, String)> {
    let discovery = Discovery::new(client.clone())
        .run()
        .await
        .expect("discovery");
    let mut out = Vec::new();
    for group in discovery.groups() {
        for (ar, caps) in group.recommended_resources() {
            if !caps.supports_operation(verbs::LIST) || ar.plural.contains('/') {
                continue;
            }
            let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
            let list = match api.list(&ListParams::default()).await {
                Ok(l) => l,
                // Some kinds cannot be listed, and an aggregated API whose backend is down
                // answers 503 (a real cluster's metrics.k8s.io): none stores what we wrote.
                Err(kube::Error::Api(s)) if matches!(s.code, 404 | 405 | 503) => continue,
                Err(e) => panic!("listing {}: {e}", ar.plural),
            };
            for o in list.items {
                let name = format!(
                    "{}/{}/{}",
                    ar.plural,
                    o.metadata.namespace.clone().unwrap_or_default(),
                    o.metadata.name.clone().unwrap_or_default()
                );
                out.push((name, serde_json::to_string(&o).unwrap()));
            }
        }
    }
    out
}

/// Every form the key could leak in: hex either case, base64 of its raw bytes (standard
/// and URL-safe), and base64 of the hex text (a Secret value holding the printed key).
pub fn key_forms(key_hex: &str) -> Vec<String> {
    let raw = hex::decode(key_hex).unwrap();
    let b64 = base64::engine::general_purpose::STANDARD;
    let b64url = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let mut forms = vec![
        key_hex.to_ascii_lowercase(),
        key_hex.to_ascii_uppercase(),
        b64.encode(&raw),
        b64url.encode(&raw),
        b64.encode(key_hex.to_ascii_lowercase()),
    ];
    // Base64 of the raw key without its padding, in case it is embedded in a longer value.
    let no_pad = b64.encode(&raw);
    forms.push(no_pad.trim_end_matches('=').to_owned());
    forms
}

pub fn find_leaks(haystacks: &[(String, String)], key_hex: &str) -> Vec<String> {
    let forms = key_forms(key_hex);
    haystacks
        .iter()
        .filter(|(_, text)| forms.iter().any(|f| text.contains(f.as_str())))
        .map(|(name, _)| name.clone())
        .collect()
}

/// A tracing writer that keeps everything in memory.
#[derive(Clone, Default)]
pub struct Captured(Arc<Mutex<Vec<u8>>>);

impl Captured {
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

impl io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Captured {
    type Writer = Captured;
    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}

/// Installs a TRACE-level subscriber for the current thread (use a current-thread runtime
/// so every task of the test logs through it).
pub fn capture_logs() -> (Captured, tracing::subscriber::DefaultGuard) {
    let captured = Captured::default();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_writer(captured.clone())
        .with_ansi(false)
        .finish();
    let guard = tracing::subscriber::set_default(subscriber);
    (captured, guard)
}

/// Every regular file under `dir`: relative path -> (mode, bytes).
pub fn snapshot(dir: &Path) -> BTreeMap<String, (u32, Vec<u8>)> {
    fn walk(base: &Path, dir: &Path, out: &mut BTreeMap<String, (u32, Vec<u8>)>) {
        let Ok(rd) = std::fs::read_dir(dir) else {
            return;
        };
        for e in rd.flatten() {
            let p = e.path();
            let meta = std::fs::metadata(&p).unwrap();
            let rel = p.strip_prefix(base).unwrap().display().to_string();
            if meta.is_dir() {
                out.insert(
                    format!("{rel}/"),
                    (meta.permissions().mode() & 0o7777, Vec::new()),
                );
                walk(base, &p, out);
            } else {
                out.insert(
                    rel,
                    (
                        meta.permissions().mode() & 0o7777,
                        std::fs::read(&p).unwrap(),
                    ),
                );
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

/// Creates a bootstrap token in `group` valid for an hour, as `kubeflavor token create`
/// would (kubeadm's layout), and returns `id.secret` once the API server authenticates
/// it. The Secret goes with the test cluster, or with the run's sweep on a real one.
pub async fn create_token(env: &Env, group: &str) -> String {
    let token = kubeflavor_core::token::BootstrapToken::generate().unwrap();
    let expiration = jiff::Timestamp::now() + jiff::SignedDuration::from_hours(1);
    TokenSecret::plain(&token, group)
        .expires(Some(expiration))
        .signing()
        .create(env)
        .await;
    let token = token.expose().to_string();
    env.until_authenticated(&token).await;
    token
}

#[derive(clap::Parser)]
struct CertsCli {
    #[command(subcommand)]
    certs: kubeflavor::cmd::certs::CertsCommand,
}

/// Parses `certs <args>` exactly as the binary does.
pub fn parse(args: &[&str]) -> kubeflavor::cmd::certs::CertsCommand {
    use clap::Parser as _;
    CertsCli::try_parse_from(std::iter::once("certs").chain(args.iter().copied()))
        .expect("arguments parse")
        .certs
}

/// `certs generate --pki-dir DIR --key-type T`.
pub fn generate(dir: &Path, key_type: &str) {
    let kubeflavor::cmd::certs::CertsCommand::Generate(a) = parse(&[
        "generate",
        "--pki-dir",
        dir.to_str().unwrap(),
        "--key-type",
        key_type,
    ]) else {
        unreachable!()
    };
    kubeflavor::cmd::certs::generate(&a, jiff::Timestamp::now(), &mut Vec::new()).unwrap();
}

/// `certs upload <args>` as admin; returns the printed key and the whole output.
pub async fn upload(
    env: &Env,
    args: &[&str],
) -> Result<(String, String), kubeflavor::certs::CertsError> {
    let kubeflavor::cmd::certs::CertsCommand::Upload(a) = parse(&[&["upload"], args].concat())
    else {
        unreachable!()
    };
    let mut out = Vec::new();
    env.made.kubeadm_certs();
    kubeflavor::cmd::certs::upload(&a, &env.client, jiff::Timestamp::now(), &mut out).await?;
    let text = String::from_utf8(out).unwrap();
    let key = text.lines().last().unwrap().to_owned();
    Ok((key, text))
}

/// `certs download <args>` as admin; returns the output.
pub async fn download(env: &Env, args: &[&str]) -> Result<String, kubeflavor::certs::CertsError> {
    let kubeflavor::cmd::certs::CertsCommand::Download(a) = parse(&[&["download"], args].concat())
    else {
        unreachable!()
    };
    let mut out = Vec::new();
    kubeflavor::cmd::certs::download(&a, &env.client, jiff::Timestamp::now(), &mut out).await?;
    Ok(String::from_utf8(out).unwrap())
}

/// `certs download --certificate-key KEY --pki-dir DIR <extra>` as admin.
pub async fn download_to(
    env: &Env,
    key: &str,
    dir: &Path,
    extra: &[&str],
) -> Result<String, kubeflavor::certs::CertsError> {
    let dir = dir.to_str().unwrap();
    download(
        env,
        &[&["--certificate-key", key, "--pki-dir", dir], extra].concat(),
    )
    .await
}

/// The owner of kube-system/kubeadm-certs: the reference to its proxy token.
pub async fn proxy_token_ref(
    env: &Env,
) -> k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
    Api::<k8s_openapi::api::core::v1::Secret>::namespaced(env.client.clone(), "kube-system")
        .get("kubeadm-certs")
        .await
        .unwrap()
        .metadata
        .owner_references
        .unwrap()
        .remove(0)
}

/// Runs the real binary (with the admin kubeconfig of `env`, if given), with extra
/// environment variables and `stdin` piped to it; the secret variables of the test's own
/// environment are removed. What it made is noted for the sweep of a real cluster.
pub async fn run_binary(
    env: Option<&Env>,
    args: &[&str],
    envs: &[(&str, &str)],
    stdin: Option<&str>,
) -> std::process::Output {
    use tokio::io::AsyncWriteExt as _;
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_kubeflavor"));
    if let Some(env) = env {
        cmd.arg("--kubeconfig").arg(&env.kubeconfig);
    }
    cmd.args(args)
        .env_remove("KUBEFLAVOR_CERTIFICATE_KEY")
        .env_remove("KUBEFLAVOR_JOIN_TOKEN")
        .env_remove("KUBECONFIG")
        .envs(envs.iter().copied())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = cmd.spawn().expect("the binary runs");
    let mut pipe = child.stdin.take().expect("stdin piped");
    if let Some(text) = stdin {
        pipe.write_all(text.as_bytes()).await.expect("write stdin");
    }
    drop(pipe);
    let output = child.wait_with_output().await.expect("the binary ends");
    if let Some(env) = env {
        env.made.command(args);
        env.made.tokens_in(&String::from_utf8_lossy(&output.stdout));
    }
    output
}
