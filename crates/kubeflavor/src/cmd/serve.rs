//! `kubeflavor serve`: the join-token API for an operator's portal.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Args;

use crate::cluster::Cluster;
use crate::error::{CliError, Result};
use crate::serve::{self, Options, TlsSource};

#[derive(Debug, Args)]
#[command(after_help = "\
A caller (e.g. a portal's back end) sends its Kubernetes ServiceAccount token:

  curl --cacert ca.crt -H \"Authorization: Bearer $(kubectl create token portal -n portal)\" \\
       -d '{\"issuedTo\": \"acme-corp/alice\", \"ttl\": \"24h\"}' \\
       https://kubeflavor-serve.kubeflavor.svc:8443/v1/flavors/sour/jointokens

and gets 201 with the token, its id and expiry and the kubeadm join line. It may mint the
flavors named by a rule like
  {apiGroups: [kubeflavor.io], resources: [flavors/jointoken], resourceNames: [sour], verbs: [create]}
and no other; it needs no access to Secrets. The OpenAPI document is at /openapi.json.")]
pub struct ServeArgs {
    /// Where the HTTPS API listens.
    #[arg(long, value_name = "ADDR", default_value = "0.0.0.0:8443")]
    pub address: SocketAddr,
    /// The serving certificate (PEM, chain first), read again when it changes, e.g. a
    /// cert-manager Secret's tls.crt mounted into the pod.
    #[arg(
        long,
        value_name = "FILE",
        requires = "tls_key_file",
        required_unless_present = "self_signed"
    )]
    pub tls_cert_file: Option<PathBuf>,
    /// The serving certificate's private key (PEM).
    #[arg(long, value_name = "FILE", requires = "tls_cert_file")]
    pub tls_key_file: Option<PathBuf>,
    /// Serve a certificate made at start for --self-signed-name (printed on stdout so
    /// clients can trust it). For tests and demos; use real certificates otherwise.
    #[arg(long, conflicts_with_all = ["tls_cert_file", "tls_key_file"])]
    pub self_signed: bool,
    /// Names (DNS or IP) of the self-signed certificate.
    #[arg(long, value_name = "NAME", default_values_t = ["localhost".to_string(), "127.0.0.1".to_string()], requires = "self_signed")]
    pub self_signed_name: Vec<String>,
    /// Where /metrics, /healthz and /readyz are served (plain HTTP).
    #[arg(long, value_name = "ADDR", default_value = "0.0.0.0:8081")]
    pub http_address: SocketAddr,
    /// Join tokens one caller may mint per minute, on average.
    #[arg(long, value_name = "N", default_value_t = 60)]
    pub rate_per_minute: u32,
    /// Join tokens one caller may mint at once before the rate applies.
    #[arg(long, value_name = "N", default_value_t = 20)]
    pub burst: u32,
    /// Accept only caller tokens for this audience (e.g. mint with `kubectl create token
    /// --audience kubeflavor`), so a token sent here is useless to the API server. Default:
    /// the API server's own audience.
    #[arg(long, value_name = "AUDIENCE")]
    pub token_audience: Option<String>,
}

pub async fn run(cluster: Cluster, args: &ServeArgs) -> Result<()> {
    let tls = match (&args.tls_cert_file, &args.tls_key_file) {
        (Some(cert), Some(key)) => TlsSource::Files {
            cert: cert.clone(),
            key: key.clone(),
        },
        _ => TlsSource::SelfSigned {
            names: args.self_signed_name.clone(),
        },
    };
    let instance = std::env::var("POD_NAME").unwrap_or_else(|_| {
        std::env::var("HOSTNAME").unwrap_or_else(|_| "kubeflavor-serve".into())
    });
    let opts = Options {
        address: args.address,
        tls,
        ops_address: Some(args.http_address),
        per_minute: args.rate_per_minute,
        burst: args.burst,
        audience: args.token_audience.clone(),
        instance,
    };
    let bound = serve::bind(cluster, opts)
        .await
        .map_err(|e| CliError::failed(e, "fix the flags above"))?;
    if let Some(pem) = &bound.self_signed_pem {
        tracing::warn!(
            "serving a self-signed certificate (printed on stdout); use --tls-cert-file and --tls-key-file outside tests"
        );
        print!("{pem}");
    }
    bound.serve(super::controller::termination()).await;
    Ok(())
}
