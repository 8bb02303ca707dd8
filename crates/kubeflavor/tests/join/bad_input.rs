//! `kubeflavor join` refusing bad input, through the real binary: one clear line, its own
//! exit code, no file written. Runs on testkube or on the cluster named by
//! KUBEFLAVOR_E2E_KUBECONFIG (the cluster only supplies a real cluster-info).

use std::path::Path;
use std::process::Command;

use crate::fake_api::{Answer, FakeApiServer, TestCa, cluster_info_json, kubeconfig};
use crate::support::Env;
use crate::support::entries;
use crate::support::minted::{cleanup, mint_with_join_line};
use kubeflavor_core::token::BootstrapToken;

/// Runs the binary on a blocking thread (an in-process testkube must keep serving).
async fn join_bin(kubelet_dir: &Path, args: &[&str]) -> (i32, String, String) {
    let mut argv: Vec<String> = vec!["join".into()];
    argv.extend(args.iter().map(|a| a.to_string()));
    argv.extend(["--kubelet-dir".into(), kubelet_dir.display().to_string()]);
    argv.extend([
        "--node-name".into(),
        "worker-1".into(),
        "--discovery-retry-interval".into(),
        "200ms".into(),
    ]);
    tokio::task::spawn_blocking(move || {
        let out = Command::new(env!("CARGO_BIN_EXE_kubeflavor"))
            .args(&argv)
            .env_remove("KUBECONFIG")
            .env_remove("KUBEFLAVOR_JOIN_TOKEN")
            .output()
            .expect("run kubeflavor");
        (
            out.status.code().expect("exited"),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    })
    .await
    .unwrap()
}

/// A well-formed join of 127.0.0.1:1, where nothing listens (the connection is refused at
/// once), with a made-up token and pin.
async fn join_port_1(kubelet_dir: &Path, timeout: &str) -> (i32, String, String) {
    let pin = format!("sha256:{}", "0".repeat(64));
    join_bin(
        kubelet_dir,
        &[
            "127.0.0.1:1",
            "--token",
            "abcdef.0123456789abcdef",
            "--discovery-token-ca-cert-hash",
            &pin,
            "--timeout",
            timeout,
        ],
    )
    .await
}

/// The refusal's shape: the expected code, one `error:` line naming the problem, no files.
#[track_caller]
fn assert_refused(outcome: &(i32, String, String), code: i32, says: &str, kubelet_dir: &Path) {
    let (status, stdout, stderr) = outcome;
    assert_eq!(*status, code, "stdout: {stdout}\nstderr: {stderr}");
    let errors: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("error: "))
        .collect();
    assert_eq!(errors.len(), 1, "{stderr}");
    assert!(
        errors[0].contains(says),
        "expected {says:?} in {:?}",
        errors[0]
    );
    assert!(
        entries(kubelet_dir).is_empty(),
        "files left: {:?}",
        entries(kubelet_dir)
    );
}

#[tokio::test]
async fn malformed_inputs_each_have_their_own_exit_code() {
    let env = Env::start().await;
    let t = mint_with_join_line(&env, "badjoin").await;
    let dir = env.dir().join("kubelet");

    let upper = format!("{}{}", &t.token[..7], t.token[7..].to_uppercase());
    let out = join_bin(
        &dir,
        &[
            &t.endpoint,
            "--token",
            &upper,
            "--discovery-token-ca-cert-hash",
            &t.pin,
        ],
    )
    .await;
    assert_refused(&out, 10, "--token is not a bootstrap token", &dir);
    assert!(
        !out.2.contains(&upper[7..]),
        "the secret was echoed: {}",
        out.2
    );

    let out = join_bin(
        &dir,
        &[
            &t.endpoint,
            "--token",
            &t.token,
            "--discovery-token-ca-cert-hash",
            "sha256:1234",
        ],
    )
    .await;
    assert_refused(&out, 11, "is not a CA pin", &dir);

    let out = join_bin(&dir, &[&t.endpoint, "--token", &t.token]).await;
    assert_refused(&out, 12, "refusing to join without a CA pin", &dir);

    cleanup(&env, &t).await;
}

#[tokio::test]
async fn pin_of_another_ca_is_refused_as_a_possible_attack() {
    let env = Env::start().await;
    let t = mint_with_join_line(&env, "badjoin").await;
    let dir = env.dir().join("kubelet");
    let other_ca = kubeflavor_core::crypto::pki::generate_shared_ca_set(
        kubeflavor_core::crypto::pki::KeyAlgorithm::EcdsaP256,
        jiff::Timestamp::now(),
    )
    .unwrap();
    let other_der = kubeflavor_core::crypto::keys::parse_certificates_pem(other_ca[0].contents())
        .unwrap()
        .remove(0);
    let wrong_pin = kubeflavor_core::crypto::pin::CaPin::from_cert_der(&other_der)
        .unwrap()
        .to_string();

    let out = join_bin(
        &dir,
        &[
            &t.endpoint,
            "--token",
            &t.token,
            "--discovery-token-ca-cert-hash",
            &wrong_pin,
        ],
    )
    .await;
    assert_refused(
        &out,
        13,
        "the cluster CA does not match the pin; this may be an attack",
        &dir,
    );
    assert!(
        out.1.contains("[discovery]"),
        "progress lines first: {}",
        out.1
    );
    cleanup(&env, &t).await;
}

#[tokio::test]
async fn token_the_cluster_never_signed_is_invalid_or_expired() {
    let env = Env::start().await;
    let t = mint_with_join_line(&env, "badjoin").await;
    let dir = env.dir().join("kubelet");
    let unknown = BootstrapToken::generate().unwrap();

    let out = join_bin(
        &dir,
        &[
            &t.endpoint,
            "--token",
            &unknown.expose(),
            "--discovery-token-ca-cert-hash",
            &t.pin,
            "--timeout",
            "2s",
        ],
    )
    .await;
    assert_refused(&out, 14, "the token is invalid or expired", &dir);
    assert!(
        out.1.contains("does not yet contain a JWS signature"),
        "{}",
        out.1
    );
    assert!(
        !out.1.contains(unknown.secret().expose()) && !out.2.contains(unknown.secret().expose())
    );
    cleanup(&env, &t).await;
}

#[tokio::test]
async fn unreachable_endpoint_reports_progress_then_times_out() {
    let dir = tempfile::tempdir().unwrap();
    let kubelet_dir = dir.path().join("kubelet");
    let out = join_port_1(&kubelet_dir, "1s").await;
    assert_refused(
        &out,
        5,
        "could not reach the API server at https://127.0.0.1:1/ within 1s",
        &kubelet_dir,
    );
    assert!(
        out.1
            .contains("[discovery] Failed to request cluster-info, will try again"),
        "{}",
        out.1
    );
}

#[tokio::test]
async fn unwritable_kubelet_dir_is_refused_before_any_network_traffic() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a-file");
    std::fs::write(&file, b"").unwrap();
    let kubelet_dir = file.join("kubernetes");
    // The endpoint is unreachable: reaching it would time out instead of failing at once.
    let out = join_port_1(&kubelet_dir, "1m").await;
    assert_refused(
        &out,
        16,
        "the kubelet directory is not usable",
        &kubelet_dir,
    );
    assert!(!out.1.contains("[discovery]"), "{}", out.1);
}

#[tokio::test]
async fn a_node_that_already_joined_is_refused_and_its_kubelet_conf_kept() {
    let dir = tempfile::tempdir().unwrap();
    let kubelet_dir = dir.path().join("kubernetes");
    std::fs::create_dir(&kubelet_dir).unwrap();
    std::fs::write(kubelet_dir.join("kubelet.conf"), b"the node's identity").unwrap();
    let out = join_port_1(&kubelet_dir, "1m").await;
    assert_eq!(out.0, 16, "{out:?}");
    assert!(out.2.contains("kubelet.conf already exists"), "{}", out.2);
    assert_eq!(entries(&kubelet_dir), ["kubelet.conf"]);
    assert_eq!(
        std::fs::read(kubelet_dir.join("kubelet.conf")).unwrap(),
        b"the node's identity"
    );
}

/// A well-formed token for the fake servers below (they sign cluster-info with it).
const FAKE_TOKEN: &str = "abcdef.0123456789abcdef";

/// `join ENDPOINT --token FAKE_TOKEN --discovery-token-ca-cert-hash PIN <extra>`.
async fn join_fake(
    kubelet_dir: &Path,
    endpoint: &str,
    pin: &str,
    extra: &[&str],
) -> (i32, String, String) {
    let timeout = if extra.contains(&"--timeout") {
        &[][..]
    } else {
        &["--timeout", "20s"][..]
    };
    let args = [
        &[
            endpoint,
            "--token",
            FAKE_TOKEN,
            "--discovery-token-ca-cert-hash",
            pin,
        ],
        timeout,
        extra,
    ]
    .concat();
    join_bin(kubelet_dir, &args).await
}

/// The CA certificates (DER) a kubeconfig file written by join trusts, and its server.
fn trusted_by(kubeconfig: &Path) -> (Vec<Vec<u8>>, String) {
    use base64::Engine as _;
    let text = std::fs::read_to_string(kubeconfig).unwrap();
    let parsed = kubeflavor_core::join::kubeconfig::Kubeconfig::parse(&text).unwrap();
    let cluster = &parsed.clusters[0].cluster;
    let pem = base64::engine::general_purpose::STANDARD
        .decode(cluster.certificate_authority_data.as_deref().unwrap())
        .unwrap();
    (
        kubeflavor_core::crypto::keys::parse_certificates_pem(&pem).unwrap(),
        cluster.server.clone(),
    )
}

/// A genuine cluster whose cluster-info names its CA and a second one (say, during a CA
/// rotation, or an unrelated CA put there by mistake): the node was given the pin of the
/// first only, so it trusts and writes that one alone.
#[tokio::test]
async fn only_the_pinned_ca_of_a_bundle_is_trusted_and_written() {
    let cluster_ca = TestCa::new("kubernetes");
    let other = TestCa::new("other");
    let server = FakeApiServer::start_with(&cluster_ca, |endpoint| {
        let kc = kubeconfig(&format!("https://{endpoint}"), &[&cluster_ca, &other]);
        Answer::Json(cluster_info_json(&kc, "abcdef", "0123456789abcdef"))
    });
    let dir = tempfile::tempdir().unwrap();
    let kubelet_dir = dir.path().join("kubernetes");
    let (code, stdout, stderr) =
        join_fake(&kubelet_dir, &server.endpoint, &cluster_ca.pin(), &[]).await;
    assert_eq!(code, 0, "stdout: {stdout}\nstderr: {stderr}");
    let (cas, _) = trusted_by(&kubelet_dir.join("bootstrap-kubelet.conf"));
    let pinned = std::slice::from_ref(&cluster_ca.cert_der);
    assert_eq!(cas, pinned, "bootstrap-kubelet.conf");
    let written = std::fs::read(kubelet_dir.join("pki/ca.crt")).unwrap();
    assert_eq!(
        kubeflavor_core::crypto::keys::parse_certificates_pem(&written).unwrap(),
        pinned,
        "pki/ca.crt"
    );
}

/// Someone holding a leaked token signs a cluster-info whose bundle holds the real, pinned
/// CA next to its own, with `server` pointing at itself, and serves it from the join
/// endpoint with a certificate of its own CA. One matching certificate must not make the
/// whole bundle trusted: the CA-verified read fails (exit 13), nothing is written, and the
/// node sends nothing else to that server (no CSR).
#[tokio::test]
async fn a_leaked_token_cannot_smuggle_its_ca_in_next_to_the_pinned_one() {
    let cluster_ca = TestCa::new("kubernetes");
    let attacker_ca = TestCa::new("kubernetes");
    let attacker = FakeApiServer::start_with(&attacker_ca, |endpoint| {
        let kc = kubeconfig(&format!("https://{endpoint}"), &[&cluster_ca, &attacker_ca]);
        Answer::Json(cluster_info_json(&kc, "abcdef", "0123456789abcdef"))
    });
    let dir = tempfile::tempdir().unwrap();
    let kubelet_dir = dir.path().join("kubernetes");
    let out = join_fake(
        &kubelet_dir,
        &attacker.endpoint,
        &cluster_ca.pin(),
        // The CA-verified read is retried until the timeout, as kubeadm's: keep it short.
        &["--tls-bootstrap", "--timeout", "3s"],
    )
    .await;
    assert_refused(
        &out,
        13,
        "did not prove it holds the pinned cluster CA",
        &kubelet_dir,
    );
    let requests = attacker.requests();
    assert!(
        requests
            .iter()
            .all(|r| r.starts_with("GET /api/v1/namespaces/kube-public/configmaps/cluster-info")),
        "{requests:?}"
    );
}

/// A signature for the token's id that does not verify with its secret: either the secret
/// is wrong or cluster-info was changed by someone without the token. The second is the
/// one that matters, so it is reported as a possible attack (13), not as a bad token (14).
#[tokio::test]
async fn a_signature_that_does_not_verify_is_a_possible_attack() {
    let cluster_ca = TestCa::new("kubernetes");
    let server = FakeApiServer::start_with(&cluster_ca, |endpoint| {
        let kc = kubeconfig(&format!("https://{endpoint}"), &[&cluster_ca]);
        Answer::Json(cluster_info_json(&kc, "abcdef", "zzzzzzzzzzzzzzzz"))
    });
    let dir = tempfile::tempdir().unwrap();
    let kubelet_dir = dir.path().join("kubernetes");
    let out = join_fake(&kubelet_dir, &server.endpoint, &cluster_ca.pin(), &[]).await;
    assert_refused(&out, 13, "this may be an attack", &kubelet_dir);
    assert!(out.2.contains("token id abcdef"), "{}", out.2);
    assert!(!out.2.contains("0123456789abcdef"), "{}", out.2);
}

/// The first read of cluster-info is unauthenticated: whatever answers may send anything.
/// A body past the cap (1 MiB; a real cluster-info is a few KiB) ends the join at once.
#[tokio::test]
async fn an_oversized_cluster_info_is_cut_off_at_the_cap() {
    let ca = TestCa::new("kubernetes");
    let server = FakeApiServer::start(&ca, Answer::Huge(256 << 20));
    let dir = tempfile::tempdir().unwrap();
    let kubelet_dir = dir.path().join("kubernetes");
    let out = join_fake(&kubelet_dir, &server.endpoint, &ca.pin(), &[]).await;
    assert_refused(
        &out,
        1,
        "cluster-info answer is larger than 1 MiB",
        &kubelet_dir,
    );
}

/// kubeadm's preflight refuses an existing bootstrap-kubelet.conf; so does join, before any
/// network traffic, and leaves it as it was.
#[tokio::test]
async fn an_existing_bootstrap_kubelet_conf_is_refused_and_kept() {
    let dir = tempfile::tempdir().unwrap();
    let kubelet_dir = dir.path().join("kubernetes");
    std::fs::create_dir(&kubelet_dir).unwrap();
    std::fs::write(
        kubelet_dir.join("bootstrap-kubelet.conf"),
        b"someone's token",
    )
    .unwrap();
    let out = join_port_1(&kubelet_dir, "1m").await;
    assert_eq!(out.0, 16, "{out:?}");
    assert!(
        out.2.contains("bootstrap-kubelet.conf already exists"),
        "{}",
        out.2
    );
    assert!(out.2.contains("remove it"), "{}", out.2);
    assert!(!out.1.contains("[discovery]"), "{}", out.1);
    assert_eq!(entries(&kubelet_dir), ["bootstrap-kubelet.conf"]);
    assert_eq!(
        std::fs::read(kubelet_dir.join("bootstrap-kubelet.conf")).unwrap(),
        b"someone's token"
    );
}

/// A kubelet.conf that is a dangling symlink is still a kubelet.conf: the node joined
/// before (or someone set a trap for the write), so join refuses.
#[tokio::test]
async fn a_dangling_kubelet_conf_symlink_counts_as_joined() {
    let dir = tempfile::tempdir().unwrap();
    let kubelet_dir = dir.path().join("kubernetes");
    std::fs::create_dir(&kubelet_dir).unwrap();
    std::os::unix::fs::symlink(
        "/nonexistent/kubelet.conf",
        kubelet_dir.join("kubelet.conf"),
    )
    .unwrap();
    let out = join_port_1(&kubelet_dir, "1m").await;
    assert_eq!(out.0, 16, "{out:?}");
    assert!(out.2.contains("kubelet.conf already exists"), "{}", out.2);
    assert!(!out.1.contains("[discovery]"), "{}", out.1);
    assert_eq!(entries(&kubelet_dir), ["kubelet.conf"]);
}

/// A kubelet-config.yaml join did not write is not join's to replace, nor to remove when
/// the join fails: with other content it stops the join before any network traffic; with
/// join's own content it is kept as it is, also by the failed join's roll-back.
#[tokio::test]
async fn an_existing_kubelet_config_is_never_overwritten_nor_removed() {
    let dir = tempfile::tempdir().unwrap();
    let kubelet_dir = dir.path().join("kubernetes");
    std::fs::create_dir(&kubelet_dir).unwrap();
    let config = kubelet_dir.join("kubelet-config.yaml");
    std::fs::write(
        &config,
        b"kind: KubeletConfiguration\n# the operator's own\n",
    )
    .unwrap();
    let out = join_port_1(&kubelet_dir, "1m").await;
    assert_eq!(out.0, 16, "{out:?}");
    assert!(
        out.2
            .contains("kubelet-config.yaml already exists with other content"),
        "{}",
        out.2
    );
    assert!(!out.1.contains("[discovery]"), "{}", out.1);

    let same = kubeflavor::join::kubelet_config(&kubelet_dir.join("pki/ca.crt"));
    std::fs::write(&config, &same).unwrap();
    let out = join_port_1(&kubelet_dir, "1s").await;
    assert_eq!(out.0, 5, "{out:?}");
    assert_eq!(entries(&kubelet_dir), ["kubelet-config.yaml"]);
    assert_eq!(std::fs::read_to_string(&config).unwrap(), same);
}

/// The kubelet trusts pki/ca.crt for client authentication: a join must not adopt one
/// that holds another CA (kubeadm's preflight refuses any). The file stays as it was and
/// the join writes nothing.
#[tokio::test]
async fn a_ca_file_of_another_ca_is_refused_and_kept() {
    let env = Env::start().await;
    let minted = mint_with_join_line(&env, "cafile").await;
    let dir = tempfile::tempdir().unwrap();
    let kubelet_dir = dir.path().join("kubernetes");
    std::fs::create_dir_all(kubelet_dir.join("pki")).unwrap();
    let other = crate::fake_api::TestCa::new("someone-else");
    std::fs::write(kubelet_dir.join("pki/ca.crt"), other.pem()).unwrap();
    env.until_authenticated(&minted.token).await;
    let out = join_bin(
        &kubelet_dir,
        &[
            &minted.endpoint,
            "--token",
            &minted.token,
            "--discovery-token-ca-cert-hash",
            &minted.pin,
        ],
    )
    .await;
    assert_eq!(out.0, 16, "{out:?}");
    assert!(out.2.contains("pki/ca.crt already exists"), "{}", out.2);
    assert_eq!(entries(&kubelet_dir), ["pki"]);
    assert_eq!(entries(&kubelet_dir.join("pki")), ["ca.crt"]);
    assert_eq!(
        std::fs::read_to_string(kubelet_dir.join("pki/ca.crt")).unwrap(),
        other.pem()
    );
    cleanup(&env, &minted).await;
}
