//! End-to-end: `kubeflavor token create --print-join-command` then `kubeflavor join`, on
//! testkube or on the cluster named by KUBEFLAVOR_E2E_KUBECONFIG. No controller runs here:
//! the test itself approves or denies the node's CSR as the admin, so what is tested is the
//! node side (discovery, files, TLS bootstrap) and nothing else.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

use crate::support::minted::{Minted, cleanup, mint_with_join_line};
use crate::support::{Env, client_from, decide_csr, entries, whoami};
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use kube::api::{Api, DeleteParams};
use kubeflavor::join::{self, CaCheck, JoinOptions, RecordedReport};
use kubeflavor_core::crypto::pin::CaPin;

/// The safety net for waiting on the cluster; never reached when things work.
const PATIENCE: Duration = Duration::from_secs(60);

fn options(minted: &Minted, node: &str, kubelet_dir: &Path, tls_bootstrap: bool) -> JoinOptions {
    JoinOptions {
        endpoint: join::parse_endpoint(&minted.endpoint).unwrap(),
        token: minted.token.parse().unwrap(),
        ca_check: CaCheck::Pinned(vec![minted.pin.parse().unwrap()]),
        node_name: node.parse().unwrap(),
        kubelet_dir: kubelet_dir.to_path_buf(),
        tls_bootstrap,
        timeout: PATIENCE,
        retry_interval: Duration::from_millis(200),
        control_plane: None,
    }
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

#[tokio::test]
async fn printed_join_line_discovers_the_cluster_and_writes_the_bootstrap_kubeconfig() {
    let env = Env::start().await;
    let minted = mint_with_join_line(&env, "joinflavor").await;
    let kubelet_dir = env.dir().join("etc-kubernetes");

    // Through the command line, exactly as a node administrator would paste it.
    let out = env
        .kf(&[
            "join",
            &minted.endpoint,
            "--token",
            &minted.token,
            "--discovery-token-ca-cert-hash",
            &minted.pin,
            "--node-name",
            &env.name("worker"),
            "--kubelet-dir",
            kubelet_dir.to_str().unwrap(),
            "--discovery-retry-interval",
            "200ms",
        ])
        .await;
    let stdout = out.expect_ok();
    assert!(stdout.contains("[discovery] Cluster info signature and contents are valid and TLS certificate validates against pinned roots"), "{stdout}");
    // Rotation and the registration taint are in the config file the printed line names
    // (their flags are deprecated in the kubelet).
    let config_path = kubelet_dir.join("kubelet-config.yaml");
    assert!(
        stdout.contains(&format!("--config={}", config_path.display())),
        "{stdout}"
    );
    for deprecated in ["--register-with-taints", "--rotate-certificates"] {
        assert!(!stdout.contains(deprecated), "{stdout}");
    }
    assert!(
        !stdout.contains(&minted.token[7..]),
        "the token secret was printed: {stdout}"
    );

    assert_eq!(
        entries(&kubelet_dir),
        ["bootstrap-kubelet.conf", "kubelet-config.yaml", "pki"]
    );
    assert_eq!(mode(&config_path), 0o644);
    // The cluster CA discovery authenticated, for the kubelet's client authentication.
    let ca_path = kubelet_dir.join("pki/ca.crt");
    assert_eq!(entries(&kubelet_dir.join("pki")), ["ca.crt"]);
    assert_eq!(mode(&ca_path), 0o644);
    let ca = std::fs::read(&ca_path).unwrap();
    let ca_der = kubeflavor_core::crypto::keys::parse_certificates_pem(&ca).expect("a PEM CA");
    assert_eq!(
        kubeflavor_core::crypto::pin::CaPin::from_cert_der(&ca_der[0])
            .unwrap()
            .to_string(),
        minted.pin
    );
    let config = std::fs::read_to_string(&config_path).unwrap();
    assert!(
        config.contains(&format!("clientCAFile: \"{}\"", ca_path.display())),
        "{config}"
    );
    assert!(config.contains("rotateCertificates: true"), "{config}");
    assert!(config.contains("key: kubeflavor.io/unverified"), "{config}");
    assert!(!config.contains(&minted.token[7..]), "{config}");
    let conf_path = kubelet_dir.join("bootstrap-kubelet.conf");
    assert_eq!(mode(&conf_path), 0o600);
    // The kubelet would authenticate with it as the token's bootstrap identity.
    let client = client_from(&std::fs::read_to_string(&conf_path).unwrap()).await;
    let (user, groups) = whoami(&client)
        .await
        .expect("bootstrap-kubelet.conf authenticates");
    assert_eq!(user, format!("system:bootstrap:{}", &minted.token[..6]));
    assert!(
        groups.contains(&"system:bootstrappers:kubeflavor:node".to_string()),
        "{groups:?}"
    );

    cleanup(&env, &minted).await;
}

#[tokio::test]
async fn tls_bootstrap_writes_a_kubelet_conf_that_authenticates_as_the_node() {
    let env = Env::start().await;
    let minted = mint_with_join_line(&env, "joinflavor").await;
    let kubelet_dir = env.dir().join("node");
    let node = env.name("worker");
    let opts = options(&minted, &node, &kubelet_dir, true);
    let mut report = RecordedReport::default();

    let decider = tokio::spawn(decide_csr(env.client.clone(), node.clone(), true));
    let joined = join::run(&opts, &mut report).await;
    let outcome = joined.unwrap_or_else(|e| panic!("join failed: {e}\n{:#?}", report.lines));
    let csr_name = decider.await.unwrap();
    assert_eq!(outcome.csr_name.as_deref(), Some(csr_name.as_str()));
    let said = report.lines.join("\n");
    assert!(
        said.contains("[tls-bootstrap] Created certificate signing request"),
        "{said}"
    );
    assert!(
        said.contains("approved and the certificate issued"),
        "{said}"
    );

    assert_eq!(
        entries(&kubelet_dir),
        [
            "bootstrap-kubelet.conf",
            "kubelet-config.yaml",
            "kubelet.conf",
            "pki"
        ]
    );
    let kubelet_conf = kubelet_dir.join("kubelet.conf");
    assert_eq!(mode(&kubelet_conf), 0o600);
    let client = client_from(&std::fs::read_to_string(&kubelet_conf).unwrap()).await;
    let (user, groups) = whoami(&client).await.expect("kubelet.conf authenticates");
    assert_eq!(user, format!("system:node:{node}"));
    assert!(groups.contains(&"system:nodes".to_string()), "{groups:?}");

    let csrs: Api<CertificateSigningRequest> = Api::all(env.client.clone());
    let _ = csrs.delete(&csr_name, &DeleteParams::default()).await;
    cleanup(&env, &minted).await;
}

#[tokio::test]
async fn denied_node_is_told_it_was_refused_and_keeps_no_files() {
    let env = Env::start().await;
    let minted = mint_with_join_line(&env, "joinflavor").await;
    let kubelet_dir = env.dir().join("node");
    let node = env.name("refused");
    let opts = options(&minted, &node, &kubelet_dir, true);
    let mut report = RecordedReport::default();

    let decider = tokio::spawn(decide_csr(env.client.clone(), node.clone(), false));
    let joined = kubeflavor::cmd::join::run_with(&opts, &mut report).await;
    let err = joined.expect_err("a denied CSR fails the join");
    let csr_name = decider.await.unwrap();
    assert_eq!(err.code, kubeflavor::ExitCode::JoinNodeRefused);
    assert!(
        err.message.starts_with("the cluster refused this node"),
        "{}",
        err.message
    );
    assert!(
        entries(&kubelet_dir).is_empty(),
        "left behind: {:?}",
        entries(&kubelet_dir)
    );

    let csrs: Api<CertificateSigningRequest> = Api::all(env.client.clone());
    let _ = csrs.delete(&csr_name, &DeleteParams::default()).await;
    cleanup(&env, &minted).await;
}

#[tokio::test]
async fn unsafe_skip_joins_without_a_pin_and_warns() {
    let env = Env::start().await;
    let minted = mint_with_join_line(&env, "joinflavor").await;
    let kubelet_dir = env.dir().join("node");
    let mut opts = options(&minted, &env.name("worker"), &kubelet_dir, false);
    opts.ca_check = CaCheck::UnsafeSkip;
    let mut report = RecordedReport::default();
    let outcome = join::run(&opts, &mut report).await.unwrap();
    assert!(!outcome.cluster.pinned);
    assert!(
        report.lines.iter().any(|l| l.contains("is NOT verified")),
        "{:#?}",
        report.lines
    );
    // Without a pin every CA of the signed bundle is trusted: each is named by its pin,
    // so the administrator can check it afterwards and pin it next time.
    let trusted = report
        .lines
        .iter()
        .find(|l| l.contains("trusting the CA certificates cluster-info names"))
        .unwrap_or_else(|| panic!("{:#?}", report.lines));
    assert!(trusted.contains(&minted.pin), "{trusted}");
    // The CA it learned is still the one the pin names: the signature covered it.
    assert!(
        minted
            .pin
            .parse::<CaPin>()
            .unwrap()
            .matches_any(&outcome.cluster.ca_certs_der)
    );
    cleanup(&env, &minted).await;
}
