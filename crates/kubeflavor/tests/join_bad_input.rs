//! `kubeflavor join` refusing bad input, through the real binary: one clear line, its own
//! exit code, no file written. Runs on testkube or on the cluster named by
//! KUBEFLAVOR_E2E_KUBECONFIG (the cluster only supplies a real cluster-info).

mod common;

use std::path::Path;
use std::process::Command;

use common::Env;
use common::entries;
use common::minted::{cleanup, mint_with_join_line};
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
    let other_ca = kubeflavor_core::pki::generate_shared_ca_set(
        kubeflavor_core::pki::KeyAlgorithm::EcdsaP256,
        jiff::Timestamp::now(),
    )
    .unwrap();
    let other_der = kubeflavor_core::keys::parse_certificates_pem(other_ca[0].contents())
        .unwrap()
        .remove(0);
    let wrong_pin = kubeflavor_core::pin::CaPin::from_cert_der(&other_der)
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
