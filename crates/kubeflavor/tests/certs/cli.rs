//! The `certs` commands through the real binary: exit codes, the one `error:` line on
//! stderr, kubeadm's output, and `token create --control-plane`.
//! Runs on testkube, or on a real cluster with KUBEFLAVOR_E2E_KUBECONFIG.

use std::path::Path;
use std::process::Output;

use crate::helpers::{Env, snapshot};

async fn kubeflavor(env: Option<&Env>, args: &[&str], envs: &[(&str, &str)]) -> Output {
    crate::helpers::run_binary(env, args, envs, None).await
}

/// Like [`kubeflavor`], with `stdin` piped to the command.
async fn kubeflavor_stdin(env: Option<&Env>, args: &[&str], stdin: Option<&str>) -> Output {
    crate::helpers::run_binary(env, args, &[], stdin).await
}

fn stdout(o: &Output) -> String {
    String::from_utf8(o.stdout.clone()).unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8(o.stderr.clone()).unwrap()
}

/// Exit code and the single `error: ...` line.
fn failure(o: &Output) -> (i32, String) {
    let err = stderr(o);
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "expected one line on stderr, got {err:?}");
    assert!(lines[0].starts_with("error: "), "{err:?}");
    (o.status.code().unwrap(), lines[0].to_owned())
}

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn key_prints_64_lowercase_hex_and_a_newline() {
    let a = kubeflavor(None, &["certs", "key"], &[]).await;
    let b = kubeflavor(None, &["certs", "key"], &[]).await;
    assert!(a.status.success(), "{}", stderr(&a));
    let text = stdout(&a);
    assert_eq!(text.len(), 65, "{text:?}");
    assert!(text.ends_with('\n'));
    assert!(
        text.trim_end()
            .chars()
            .all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c))
    );
    assert_ne!(text, stdout(&b));
}

#[tokio::test(flavor = "multi_thread")]
async fn generate_refuses_to_overwrite() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("pki");
    let ok = kubeflavor(None, &["certs", "generate", "--pki-dir", path(&dir)], &[]).await;
    assert!(ok.status.success(), "{}", stderr(&ok));
    let files = snapshot(&dir);
    assert_eq!(
        files.keys().map(String::as_str).collect::<Vec<_>>(),
        [
            "ca.crt",
            "ca.key",
            "etcd/",
            "etcd/ca.crt",
            "etcd/ca.key",
            "front-proxy-ca.crt",
            "front-proxy-ca.key",
            "sa.key",
            "sa.pub"
        ]
    );
    let again = kubeflavor(
        None,
        &[
            "certs",
            "generate",
            "--pki-dir",
            path(&dir),
            "--key-type",
            "ecdsa-p256",
        ],
        &[],
    )
    .await;
    let (code, line) = failure(&again);
    assert_eq!(code, 29, "{line}");
    assert_eq!(snapshot(&dir), files, "generate overwrote files");
}

#[tokio::test(flavor = "multi_thread")]
async fn upload_download_inspect_through_the_binary() {
    let env = Env::start_serial().await;
    let tmp = tempfile::tempdir().unwrap();
    let (source, target) = (tmp.path().join("source"), tmp.path().join("target"));
    let gen_out = kubeflavor(
        None,
        &[
            "certs",
            "generate",
            "--pki-dir",
            path(&source),
            "--key-type",
            "ecdsa-p256",
        ],
        &[],
    )
    .await;
    assert!(gen_out.status.success(), "{}", stderr(&gen_out));

    let up = kubeflavor(
        Some(&env),
        &["certs", "upload", "--pki-dir", path(&source)],
        &[],
    )
    .await;
    assert!(up.status.success(), "{}", stderr(&up));
    let text = stdout(&up);
    let lines: Vec<&str> = text.lines().collect();
    // kubeadm's two closing lines: scripts take the key from the last one.
    assert_eq!(
        lines[lines.len() - 2],
        "[upload-certs] Using certificate key:"
    );
    let key = lines[lines.len() - 1].to_owned();
    assert_eq!(key.len(), 64);
    assert!(!stderr(&up).contains(&key), "the key reached stderr");
    // Before them, how to hand the key over without a command line showing it.
    assert!(
        lines[lines.len() - 3].contains("--certificate-key-file")
            && lines[lines.len() - 3].contains("KUBEFLAVOR_CERTIFICATE_KEY"),
        "{text}"
    );

    // A wrong key: exit 21, one plain line, nothing written.
    let wrong = kubeflavor(
        Some(&env),
        &[
            "certs",
            "download",
            "--pki-dir",
            path(&target),
            "--certificate-key",
            &"0".repeat(64),
        ],
        &[],
    )
    .await;
    let (code, line) = failure(&wrong);
    assert_eq!(code, 21, "{line}");
    assert!(line.starts_with("error: wrong certificate key"), "{line}");
    assert!(!target.exists());
    // A malformed key: exit 20 before any request.
    let short = kubeflavor(
        Some(&env),
        &[
            "certs",
            "download",
            "--pki-dir",
            path(&target),
            "--certificate-key",
            "abc",
        ],
        &[],
    )
    .await;
    assert_eq!(failure(&short).0, 20);

    // The key from the environment, not the process list.
    let down = kubeflavor(
        Some(&env),
        &["certs", "download", "--pki-dir", path(&target)],
        &[("KUBEFLAVOR_CERTIFICATE_KEY", &key)],
    )
    .await;
    assert!(down.status.success(), "{}", stderr(&down));
    assert!(
        stdout(&down).contains("8 of 8 files written"),
        "{}",
        stdout(&down)
    );
    assert_eq!(snapshot(&source), snapshot(&target));

    // The key from a file, and from stdin (`-`): again nothing on the command line.
    let key_file = tmp.path().join("certificate-key");
    std::fs::write(&key_file, format!("{key}\n")).unwrap();
    for (from, stdin) in [(path(&key_file), None), ("-", Some(key.as_str()))] {
        let again = tmp.path().join(format!("again-{}", from.len()));
        let down = kubeflavor_stdin(
            Some(&env),
            &[
                "certs",
                "download",
                "--pki-dir",
                path(&again),
                "--certificate-key-file",
                from,
            ],
            stdin,
        )
        .await;
        assert!(down.status.success(), "{from}: {}", stderr(&down));
        assert_eq!(snapshot(&source), snapshot(&again), "{from}");
    }
    // Two sources of one secret are a usage error, not a guess.
    let both = kubeflavor(
        Some(&env),
        &[
            "certs",
            "download",
            "--pki-dir",
            path(&target),
            "--certificate-key",
            &key,
            "--certificate-key-file",
            path(&key_file),
        ],
        &[],
    )
    .await;
    assert_eq!(both.status.code(), Some(2), "{}", stderr(&both));
    assert!(!stderr(&both).contains(&key), "{}", stderr(&both));

    let inspect = kubeflavor(Some(&env), &["certs", "inspect"], &[]).await;
    assert!(inspect.status.success(), "{}", stderr(&inspect));
    let shown = stdout(&inspect);
    assert!(
        shown.contains("Readable by: Group:system:bootstrappers:kubeflavor:control-plane"),
        "{shown}"
    );
    assert!(shown.contains("(valid, expires "), "{shown}");
    assert!(!shown.contains("subject"), "{shown}");
    let with_key = kubeflavor(
        Some(&env),
        &["certs", "inspect", "--certificate-key", &key, "-o", "json"],
        &[],
    )
    .await;
    assert!(with_key.status.success(), "{}", stderr(&with_key));
    let v: serde_json::Value = serde_json::from_slice(&with_key.stdout).unwrap();
    let subjects: Vec<&str> = v["certificates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["subject"].as_str().unwrap())
        .collect();
    assert_eq!(
        subjects,
        ["CN=kubernetes", "CN=front-proxy-ca", "CN=etcd-ca"]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn control_plane_tokens_carry_only_the_control_plane_group() {
    use k8s_openapi::api::authentication::v1::SelfSubjectReview;
    let env = Env::start_serial().await;
    let created = kubeflavor(Some(&env), &["token", "create", "--control-plane"], &[]).await;
    assert!(created.status.success(), "{}", stderr(&created));
    let token = stdout(&created).trim().to_owned();
    env.until_authenticated(&token).await;
    let client = env.token_client(&token).await;
    let review: SelfSubjectReview = kube::Api::all(client)
        .create(&Default::default(), &SelfSubjectReview::default())
        .await
        .expect("the control-plane token authenticates");
    let user = review.status.unwrap().user_info.unwrap();
    assert_eq!(
        user.username.unwrap(),
        format!("system:bootstrap:{}", &token[..6])
    );
    assert_eq!(
        user.groups.unwrap(),
        [
            "system:bootstrappers",
            "system:bootstrappers:kubeflavor:control-plane",
            "system:authenticated"
        ]
    );
    // The control-plane join line, kubeadm's shape.
    let line = kubeflavor(
        Some(&env),
        &["token", "create", "--control-plane", "--print-join-command"],
        &[],
    )
    .await;
    assert!(line.status.success(), "{}", stderr(&line));
    let line = stdout(&line);
    assert!(line.starts_with("kubeflavor join "), "{line}");
    assert!(
        line.contains(" --discovery-token-ca-cert-hash sha256:"),
        "{line}"
    );
    // The key goes in a file (kubeflavor join reads it there; on a command line every
    // user of the node would see it in the process list).
    assert!(
        line.trim_end().ends_with(
            "--control-plane --certificate-key-file <file holding the key printed by 'kubeflavor certs upload'>"
        ),
        "{line}"
    );
    // With a flavor, the token also carries the flavor (its kubelet joins by the node
    // rules); a flavor that does not exist mints nothing.
    let missing = kubeflavor(
        Some(&env),
        &[
            "token",
            "create",
            "--control-plane",
            "--flavor",
            &env.name("missing"),
        ],
        &[],
    )
    .await;
    assert_eq!(failure(&missing).0, 3);
    env.install().await;
    let flavor = env.create_flavor("cp", &[]).await;
    let flavored = kubeflavor(
        Some(&env),
        &[
            "token",
            "create",
            "--control-plane",
            "--flavor",
            &flavor,
            "-o",
            "json",
        ],
        &[],
    )
    .await;
    assert!(flavored.status.success(), "{}", stderr(&flavored));
    let shown: serde_json::Value = serde_json::from_str(&stdout(&flavored)).unwrap();
    assert_eq!(shown["flavor"], flavor.as_str());
    assert_eq!(shown["maxNodes"], 1);
    assert_eq!(
        shown["groups"],
        serde_json::json!(["system:bootstrappers:kubeflavor:control-plane"])
    );
    let id = shown["id"].as_str().unwrap();
    let secret = kube::Api::<k8s_openapi::api::core::v1::Secret>::namespaced(
        env.client.clone(),
        "kube-system",
    )
    .get(&format!("bootstrap-token-{id}"))
    .await
    .unwrap();
    assert_eq!(
        secret.metadata.labels.unwrap()["kubeflavor.io/flavor"],
        flavor
    );
}

/// `certs download --server` waits for cluster-info as join does, for `--timeout` (default
/// 5m) rather than a fixed five minutes.
#[tokio::test(flavor = "multi_thread")]
async fn download_with_discovery_gives_up_after_its_timeout() {
    let tmp = tempfile::tempdir().unwrap();
    let pin = format!("sha256:{}", "0".repeat(64));
    let key = "a".repeat(64);
    let started = std::time::Instant::now();
    let out = kubeflavor(
        None,
        &[
            "certs",
            "download",
            "--server",
            "127.0.0.1:1",
            "--token",
            "abcdef.0123456789abcdef",
            "--discovery-token-ca-cert-hash",
            &pin,
            "--certificate-key",
            &key,
            "--pki-dir",
            path(&tmp.path().join("pki")),
            "--timeout",
            "1s",
        ],
        &[],
    )
    .await;
    let (code, line) = failure(&out);
    assert_eq!(code, 5, "{line}");
    assert!(line.contains("within 1s"), "{line}");
    assert!(started.elapsed() < std::time::Duration::from_secs(60));
    assert!(!tmp.path().join("pki").exists());
}

/// The exit codes `certs` uses are listed where the README says: `certs --help`.
#[tokio::test(flavor = "multi_thread")]
async fn certs_help_lists_the_exit_codes() {
    let out = kubeflavor(None, &["certs", "--help"], &[]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let help = stdout(&out);
    assert!(help.contains("Exit codes:"), "{help}");
    for code in 20..=31 {
        assert!(
            help.contains(&format!("  {code}  ")),
            "{code} missing: {help}"
        );
    }
}
