//! `kubeflavor serve`: the join-token API for an operator's portal.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use crate::cli::discovery_flags::parse_duration;
use crate::connect::Cluster;
use crate::error::{CliError, Result};
use crate::exit::ExitCode;
use std::sync::Arc;

use kubeflavor_cluster::crd::roster::DEFAULT_ROSTER;

use crate::serve::oidc::{IssuerConfig, Verifier};
use crate::serve::portal::Portal;
use crate::serve::{self, Administrators, ConnectionLimits, Options, TlsSource};

#[derive(Debug, Args)]
#[command(after_help = "\
A caller (e.g. a portal's back end) sends its Kubernetes ServiceAccount token:

  curl --cacert ca.crt -H \"Authorization: Bearer $(kubectl create token portal -n portal)\" \\
       -d '{\"issuedTo\": \"acme-corp/alice\", \"ttl\": \"24h\"}' \\
       https://kubeflavor-serve.kubeflavor.svc:8443/v1/flavors/sour/jointokens

and gets 201 with the token, its id and expiry and the kubeadm join line. It may mint the
flavors named by a rule like
  {apiGroups: [kubeflavor.io], resources: [flavors/jointoken], resourceNames: [sour], verbs: [create]}
and no other; it needs no access to Secrets. The OpenAPI document is at /openapi.json.

Node administrators (with --oidc-issuer) send their identity provider's ID token instead,
name no flavor, and get the flavor the Roster (--roster) gives them, which they are never told:

  curl --cacert ca.crt -H \"Authorization: Bearer $ID_TOKEN\" -d '{}' \\
       https://kubeflavor-serve.kubeflavor.svc:8443/v1/jointokens

With --portal-url, node administrators also get a web page at that address: they sign in
with --portal-issuer's provider in their browser, describe the node, and download a
cloud-init user-data or a NoCloud seed image holding their token (register
<portal-url>/callback as a redirect URI of the issuer's client).

Limits are per replica. --rate-per-minute and --burst count one caller's mints on this
replica only: N replicas behind a Service without session affinity let a caller mint up to
N x --burst at once and N x --rate-per-minute a minute, and only one replica's share when its
connections all reach one replica. `kubeflavor install --serve` takes a caller's limit
across the API (--serve-rate-per-minute, --serve-burst) and gives each of its
--serve-replicas that limit divided by the replicas. A connection holds one of
--max-connections slots until it closes; one that carries no request for --idle-timeout
(a TLS handshake or request headers not finished, an h2 preface alone, a wait between
requests) is closed, and a request whose body has not arrived --request-timeout after it
was accepted gets 408.")]
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
    /// Join tokens one caller may mint per minute from this replica, on average. Each
    /// replica counts on its own: behind a Service over N replicas a caller mints up to N
    /// times this (install --serve divides a caller's rate by its replicas).
    #[arg(long, value_name = "N", default_value_t = 60)]
    pub rate_per_minute: u32,
    /// Join tokens one caller may mint at once from this replica before the rate applies;
    /// up to N times this behind a Service over N replicas.
    #[arg(long, value_name = "N", default_value_t = 20)]
    pub burst: u32,
    /// Accept only caller tokens for this audience (e.g. mint with `kubectl create token
    /// --audience kubeflavor`), so a token sent here is useless to the API server. Default:
    /// the API server's own audience.
    #[arg(long, value_name = "AUDIENCE")]
    pub token_audience: Option<String>,
    /// Connections past their TLS handshake held at once; a further one waits for a
    /// slot (twice --idle-timeout and a second at most). Idle connections are closed after
    /// --idle-timeout, so clients that connect and send nothing cannot hold every slot for
    /// longer than that.
    #[arg(long, value_name = "N", default_value_t = 1024, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_connections: u32,
    /// A TLS handshake must end within this, or the connection is closed.
    #[arg(long, value_name = "DURATION", default_value = "3s", value_parser = parse_duration)]
    pub handshake_timeout: Duration,
    /// Pending TLS handshakes at once; when full, the oldest is closed for the newest, so
    /// a flood of connections cannot keep a client's from completing.
    #[arg(long, value_name = "N", default_value_t = 512, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_handshakes: u32,
    /// Pending TLS handshakes at once from one source address (its newest connection
    /// closes its own oldest past this).
    #[arg(long, value_name = "N", default_value_t = 32, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_handshakes_per_source: u32,
    /// Close a connection that carries no request for this long: one that has not
    /// finished its first request's headers (however slowly it sends them), or that waits
    /// between requests. HTTP/1.1 and h2 alike.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_duration)]
    pub idle_timeout: Duration,
    /// Answer 408 to a request whose body has not arrived this long after it was accepted
    /// (authenticated and authorized).
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_duration)]
    pub request_timeout: Duration,
    /// Serve node administrators at POST /v1/jointokens: an OpenID Connect issuer whose ID
    /// tokens they sign in with, and the client id (audience) those tokens are issued to,
    /// as ISSUER=AUDIENCE (e.g. https://login.acme.example=kubeflavor). Repeat for more
    /// providers. The Roster (--roster) decides each administrator's flavor.
    #[arg(long = "oidc-issuer", value_name = "ISSUER=AUDIENCE")]
    pub oidc_issuers: Vec<IssuerConfig>,
    /// The claim of an ID token that lists the administrator's groups.
    #[arg(long, value_name = "CLAIM", default_value = "groups")]
    pub oidc_groups_claim: String,
    /// CA certificates (PEM) the identity providers' TLS certificates chain to, instead of
    /// the system's (or, where the system has none, as in the controller image, Mozilla's
    /// compiled in).
    #[arg(long, value_name = "FILE")]
    pub oidc_ca_file: Option<PathBuf>,
    /// Leeway on an ID token's exp, nbf and iat for clocks that disagree (at most 5m).
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = parse_duration)]
    pub oidc_clock_skew: Duration,
    /// The Roster that decides which flavor each node administrator gets.
    #[arg(long, value_name = "NAME", default_value = DEFAULT_ROSTER)]
    pub roster: String,
    /// Serve the node administrators' web portal (off by default) at this address, the
    /// one browsers use: https://HOST[:PORT], no path. Its /callback must be registered as
    /// a redirect URI of --portal-issuer's client (the audience of its --oidc-issuer).
    #[arg(long, value_name = "URL", requires_all = ["portal_client_secret_file", "portal_session_keys_file"])]
    pub portal_url: Option<String>,
    /// The issuer administrators sign in with on the portal; one of --oidc-issuer's
    /// (default: the only one).
    #[arg(long, value_name = "ISSUER", requires = "portal_url")]
    pub portal_issuer: Option<String>,
    /// A file holding the portal client's secret at the identity provider.
    #[arg(long, value_name = "FILE", requires = "portal_url")]
    pub portal_client_secret_file: Option<PathBuf>,
    /// The keys that seal the portal's session cookies: one base64 key of 32 bytes per
    /// line, newest first, read again when the file changes. To rotate, add a key on top
    /// and remove the old one a session lifetime later: nobody is signed out.
    #[arg(long, value_name = "FILE", requires = "portal_url")]
    pub portal_session_keys_file: Option<PathBuf>,
    /// How long a portal session lasts (at most 12h).
    #[arg(long, value_name = "DURATION", default_value = "1h", value_parser = parse_duration, requires = "portal_url")]
    pub portal_session_lifetime: Duration,
    /// Observe nodes (POST /v1/observations, what `kubeflavor node report` calls): the CA
    /// that issues the kubelets' client certificates (the cluster CA; in a pod,
    /// /var/run/secrets/kubernetes.io/serviceaccount/ca.crt). A node connecting with its
    /// certificate gets the connection's source address recorded in its NodeReport, from
    /// which the controller labels its site; the address must be the node's own, so serve
    /// the API where no proxy or NAT rewrites sources (a Service with
    /// externalTrafficPolicy: Local, or host networking). Off by default.
    #[arg(long, value_name = "FILE")]
    pub node_client_ca_file: Option<PathBuf>,
    /// With --node-client-ca-file: when a node is observed, connect back to the observed
    /// address on this port (the kubelet's) and record the TCP handshake's time (the round
    /// trip) and whether the node answers there with the serving certificate the cluster
    /// issued it (trusted as --node-client-ca-file's CA, for that address and the node's
    /// name). Only a TLS handshake is made, no request. 0: do not connect back.
    #[arg(
        long,
        value_name = "PORT",
        default_value_t = 10250,
        requires = "node_client_ca_file"
    )]
    pub observe_kubelet_port: u16,
}

/// The portal, when --portal-url asks for it.
fn portal(args: &ServeArgs) -> Result<Option<Arc<Portal>>> {
    let Some(url) = &args.portal_url else {
        return Ok(None);
    };
    let usage = |problem: String, fix: &str| CliError::new(ExitCode::Usage, problem, fix);
    let issuer = match (&args.portal_issuer, args.oidc_issuers.as_slice()) {
        (Some(i), issuers) if issuers.iter().any(|c| &c.issuer == i) => i.clone(),
        (Some(i), _) => {
            return Err(usage(
                format!("--portal-issuer {i} is not one of --oidc-issuer's"),
                "give the portal's issuer to --oidc-issuer too, with its client id",
            ));
        }
        (None, [only]) => only.issuer.clone(),
        (None, []) => {
            return Err(usage(
                "--portal-url needs --oidc-issuer: administrators sign in with it".into(),
                "add --oidc-issuer ISSUER=CLIENT_ID",
            ));
        }
        (None, _) => {
            return Err(usage(
                "several --oidc-issuer are given and the portal signs in with one".into(),
                "name it with --portal-issuer",
            ));
        }
    };
    let secret_path = args
        .portal_client_secret_file
        .as_ref()
        .expect("clap requires it");
    let secret = std::fs::read_to_string(secret_path).map_err(|e| {
        usage(
            format!(
                "cannot read --portal-client-secret-file {}: {e}",
                secret_path.display()
            ),
            "give the file holding the portal client's secret",
        )
    })?;
    let secret = zeroize::Zeroizing::new(secret.trim().to_string());
    if secret.is_empty() {
        return Err(usage(
            format!(
                "--portal-client-secret-file {} is empty",
                secret_path.display()
            ),
            "put the client's secret in it",
        ));
    }
    let keys = args
        .portal_session_keys_file
        .clone()
        .expect("clap requires it");
    let portal = Portal::new(
        issuer,
        secret,
        url,
        keys,
        args.portal_session_lifetime
            .min(Duration::from_secs(12 * 3600)),
    )
    .map_err(|e| usage(e.to_string(), "fix the --portal-* flags"))?;
    Ok(Some(Arc::new(portal)))
}

/// The issuers' verifier, with the CAs of --oidc-ca-file or the system's.
fn administrators(args: &ServeArgs) -> Result<Option<Arc<Administrators>>> {
    if args.oidc_issuers.is_empty() {
        return Ok(None);
    }
    let mut roots = rustls::RootCertStore::empty();
    match &args.oidc_ca_file {
        Some(path) => {
            use rustls_pki_types::pem::PemObject;
            let certs = rustls_pki_types::CertificateDer::pem_file_iter(path)
                .and_then(|certs| certs.collect::<std::result::Result<Vec<_>, _>>())
                .map_err(|e| {
                    CliError::new(
                        ExitCode::Usage,
                        format!("cannot read --oidc-ca-file {}: {e}", path.display()),
                        "give a PEM file of CA certificates",
                    )
                })?;
            let (added, _) = roots.add_parsable_certificates(certs);
            if added == 0 {
                return Err(CliError::new(
                    ExitCode::Usage,
                    format!("--oidc-ca-file {} holds no CA certificate", path.display()),
                    "give a PEM file with -----BEGIN CERTIFICATE----- blocks",
                ));
            }
        }
        None => {
            let found = rustls_native_certs::load_native_certs();
            roots.add_parsable_certificates(found.certs);
            if roots.is_empty() {
                // No system CAs (the image is FROM scratch): Mozilla's, compiled in.
                roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
            }
        }
    }
    Ok(Some(Arc::new(Administrators::new(
        Verifier::new(
            args.oidc_issuers.clone(),
            args.oidc_groups_claim.clone(),
            roots,
        )
        .with_clock_skew(args.oidc_clock_skew),
        args.roster.clone(),
    ))))
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
    let administrators = administrators(args)?;
    let portal = portal(args)?;
    let opts = Options {
        address: args.address,
        tls,
        ops_address: Some(args.http_address),
        per_minute: args.rate_per_minute,
        burst: args.burst,
        audience: args.token_audience.clone(),
        instance,
        connections: ConnectionLimits {
            max_connections: args.max_connections as usize,
            idle_timeout: args.idle_timeout,
            request_timeout: args.request_timeout,
            handshake_timeout: args.handshake_timeout,
            max_handshakes: args.max_handshakes as usize,
            max_handshakes_per_source: args.max_handshakes_per_source as usize,
        },
        administrators,
        portal,
        observing: args
            .node_client_ca_file
            .clone()
            .map(|node_client_ca| crate::serve::Observing {
                node_client_ca,
                kubelet_port: args.observe_kubelet_port,
            }),
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
