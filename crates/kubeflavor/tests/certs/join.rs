//! The download as a bootstrap identity: `certs download --server --token
//! --discovery-token-ca-cert-hash` and `join --control-plane --certificate-key`, through the
//! real binary. Runs on testkube, or on a real cluster with KUBEFLAVOR_E2E_KUBECONFIG.

use std::path::Path;
use std::process::Output;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kubeflavor_core::crypto::pin::CaPin;
use kubeflavor_core::join::kubeconfig::ClusterInfo;

use crate::helpers::{Env, create_token, generate, snapshot, upload};
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;

async fn kubeflavor(args: &[&str]) -> Output {
    crate::helpers::run_binary(None, args, &[], None).await
}

/// Like [`kubeflavor`], with extra environment variables and `stdin` piped to the command.
async fn kubeflavor_with(args: &[&str], envs: &[(&str, &str)], stdin: Option<&str>) -> Output {
    crate::helpers::run_binary(None, args, envs, stdin).await
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// What a node administrator is handed: the endpoint and the CA pin.
async fn endpoint_and_pin(env: &Env) -> (String, String) {
    let cm = Api::<ConfigMap>::namespaced(env.client.clone(), "kube-public")
        .get("cluster-info")
        .await
        .unwrap();
    let info = ClusterInfo::from_kubeconfig(&cm.data.unwrap()["kubeconfig"]).unwrap();
    let pin = CaPin::from_cert_der(&info.ca_certs_der[0]).unwrap();
    let endpoint = info.server.trim_start_matches("https://").to_owned();
    (endpoint, pin.to_string())
}

struct Uploaded {
    env: Env,
    key: String,
    tmp: tempfile::TempDir,
    endpoint: String,
    pin: String,
}

async fn uploaded() -> Uploaded {
    let env = Env::start_serial().await;
    let tmp = tempfile::tempdir().unwrap();
    generate(&tmp.path().join("source"), "ecdsa-p256");
    let (key, _) = upload(&env, &["--pki-dir", path(&tmp.path().join("source"))])
        .await
        .unwrap();
    let (endpoint, pin) = endpoint_and_pin(&env).await;
    Uploaded {
        env,
        key,
        tmp,
        endpoint,
        pin,
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_control_plane_token_downloads_with_discovery_and_a_node_token_cannot() {
    let u = uploaded().await;
    let target = u.tmp.path().join("target");
    let cp = create_token(&u.env, "system:bootstrappers:kubeflavor:control-plane").await;
    let args = |token: &str| {
        vec![
            "certs".to_owned(),
            "download".into(),
            "--server".into(),
            u.endpoint.clone(),
            "--token".into(),
            token.to_owned(),
            "--discovery-token-ca-cert-hash".into(),
            u.pin.clone(),
            "--certificate-key".into(),
            u.key.clone(),
            "--pki-dir".into(),
            path(&target).to_owned(),
        ]
    };
    let node = create_token(&u.env, "system:bootstrappers:kubeflavor:node").await;
    let refused = kubeflavor(&args(&node).iter().map(String::as_str).collect::<Vec<_>>()).await;
    assert_eq!(refused.status.code(), Some(6), "{}", text(&refused.stderr));
    assert!(
        text(&refused.stderr).contains("forbidden"),
        "{}",
        text(&refused.stderr)
    );
    assert!(!target.exists(), "a refused download wrote files");

    let ok = kubeflavor(&args(&cp).iter().map(String::as_str).collect::<Vec<_>>()).await;
    assert!(ok.status.success(), "{}", text(&ok.stderr));
    let out = text(&ok.stdout);
    assert!(out.contains("[discovery] Cluster info signature and contents are valid and TLS certificate validates against pinned roots"), "{out}");
    assert!(out.contains("8 of 8 files written"), "{out}");
    assert_eq!(snapshot(&u.tmp.path().join("source")), snapshot(&target));
}

#[tokio::test(flavor = "multi_thread")]
async fn join_control_plane_downloads_the_pki_before_the_kubelet_files() {
    let u = uploaded().await;
    let cp = create_token(&u.env, "system:bootstrappers:kubeflavor:control-plane").await;
    let dir = u.tmp.path().join("etc-kubernetes");
    std::fs::create_dir(&dir).unwrap();
    let join = |key: String| {
        let (endpoint, pin, cp, dir) = (
            u.endpoint.clone(),
            u.pin.clone(),
            cp.clone(),
            path(&dir).to_owned(),
        );
        async move {
            kubeflavor(&[
                "join",
                &endpoint,
                "--token",
                &cp,
                "--discovery-token-ca-cert-hash",
                &pin,
                "--node-name",
                "cp-2",
                "--kubelet-dir",
                &dir,
                "--control-plane",
                "--certificate-key",
                &key,
                "--discovery-retry-interval",
                "1s",
            ])
            .await
        }
    };
    // A wrong key stops the join before anything is written.
    let wrong = join("e".repeat(64)).await;
    assert_eq!(wrong.status.code(), Some(21), "{}", text(&wrong.stderr));
    assert!(
        text(&wrong.stderr).contains("wrong certificate key"),
        "{}",
        text(&wrong.stderr)
    );
    assert_eq!(
        snapshot(&dir),
        Default::default(),
        "files written despite the wrong key"
    );

    let ok = join(u.key.clone()).await;
    assert!(ok.status.success(), "{}", text(&ok.stderr));
    let out = text(&ok.stdout);
    let download = out.find("[download-certs] Downloading").expect(&out);
    let kubelet = out.find("[kubelet-start]").expect(&out);
    assert!(download < kubelet, "{out}");
    assert_eq!(
        snapshot(&u.tmp.path().join("source")),
        snapshot(&dir.join("pki"))
    );
    assert!(dir.join("bootstrap-kubelet.conf").exists());
}

/// A controller of this run alone (it serves only names carrying the run id), stopped
/// when the returned sender is dropped.
fn run_controller(
    env: &Env,
) -> (
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<()>,
) {
    let mut opts = kubeflavor::controller::Options::new("kube-system", "certs-join");
    opts.leader_elect = false;
    opts.scope = Some(format!("-{}", env.run_id));
    let rt = kubeflavor::controller::Runtime::new(env.client.clone(), opts);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        kubeflavor::controller::run(rt, async move {
            let _ = stopped.await;
        })
        .await
        .expect("controller runs");
    });
    (stop, task)
}

/// `join --control-plane --certificate-key K --tls-bootstrap` with a control-plane token of
/// a flavor goes all the way: certificates, then the kubelet's CSR, decided by kubeflavor
/// by the same binding rules as a node token's (one name per use, no takeover).
#[tokio::test(flavor = "multi_thread")]
async fn a_control_plane_join_completes_its_kubelet_tls_bootstrap() {
    let u = uploaded().await;
    u.env.install().await;
    let flavor = u
        .env
        .create_flavor(
            "cp",
            &[
                "--label",
                "kubeflavor.node-restriction.kubernetes.io/role=control-plane",
            ],
        )
        .await;
    let mint = || async {
        u.env
            .kf(&["token", "create", "--control-plane", "--flavor", &flavor])
            .await
            .expect_ok()
            .trim()
            .to_string()
    };
    let (cp, other) = (mint().await, mint().await);
    let (stop, controller) = run_controller(&u.env);
    let node = u.env.name("cp-2");
    let join = |token: String, name: String, dir: &str| {
        let (endpoint, pin, key, dir) = (
            u.endpoint.clone(),
            u.pin.clone(),
            u.key.clone(),
            dir.to_owned(),
        );
        async move {
            std::fs::create_dir_all(&dir).unwrap();
            kubeflavor(&[
                "join",
                &endpoint,
                "--token",
                &token,
                "--discovery-token-ca-cert-hash",
                &pin,
                "--node-name",
                &name,
                "--kubelet-dir",
                &dir,
                "--control-plane",
                "--certificate-key",
                &key,
                "--tls-bootstrap",
                "--timeout",
                "60s",
                "--discovery-retry-interval",
                "1s",
            ])
            .await
        }
    };
    let dir = |n: &str| path(&u.tmp.path().join(n)).to_owned();

    let ok = join(cp.clone(), node.clone(), &dir("first")).await;
    assert!(ok.status.success(), "{}", text(&ok.stderr));
    assert!(u.tmp.path().join("first/kubelet.conf").exists());
    assert!(u.tmp.path().join("first/pki/ca.key").exists());
    let binding = Api::<kubeflavor_cluster::crd::FlavorBinding>::all(u.env.client.clone())
        .get(&node)
        .await
        .expect("the name is bound");
    assert_eq!(binding.spec.token_id, cp[..6]);
    assert_eq!(binding.spec.flavor, flavor);

    // Another control-plane token cannot take the bound name over.
    let takeover = join(other, node.clone(), &dir("takeover")).await;
    assert_eq!(
        takeover.status.code(),
        Some(15),
        "{}",
        text(&takeover.stderr)
    );
    // The first token's one use is spent.
    let second = join(cp, u.env.name("cp-3"), &dir("second")).await;
    assert_eq!(second.status.code(), Some(15), "{}", text(&second.stderr));
    drop(stop);
    controller.await.expect("controller stops");
}

/// `join --control-plane --certificate-key K --tls-bootstrap` whose CSR is then refused:
/// the CA keys it downloaded go with everything else it wrote, and what was in the
/// directory before (an unrelated file, a file identical to a downloaded one, the pki
/// directory itself) stays as it was.
#[tokio::test(flavor = "multi_thread")]
async fn a_refused_control_plane_join_leaves_no_key_behind() {
    let u = uploaded().await;
    // The binding that lets control-plane tokens file CSRs.
    u.env.install().await;
    let cp = create_token(&u.env, "system:bootstrappers:kubeflavor:control-plane").await;
    let dir = u.tmp.path().join("refused");
    std::fs::create_dir_all(dir.join("pki")).unwrap();
    std::fs::write(dir.join("pki/unrelated"), b"keep me").unwrap();
    std::fs::copy(u.tmp.path().join("source/sa.pub"), dir.join("pki/sa.pub")).unwrap();
    let before = snapshot(&dir);
    let node = u.env.name("cp-refused");
    let denier = tokio::spawn(crate::helpers::decide_csr(
        u.env.client.clone(),
        node.clone(),
        false,
    ));
    let out = kubeflavor(&[
        "join",
        &u.endpoint,
        "--token",
        &cp,
        "--discovery-token-ca-cert-hash",
        &u.pin,
        "--node-name",
        &node,
        "--kubelet-dir",
        path(&dir),
        "--control-plane",
        "--certificate-key",
        &u.key,
        "--tls-bootstrap",
        "--timeout",
        "60s",
        "--discovery-retry-interval",
        "1s",
    ])
    .await;
    // The join ends once its CSR is denied; if it ended otherwise, its output says why.
    let denied = tokio::time::timeout(std::time::Duration::from_secs(5), denier).await;
    if let Ok(Ok(csr)) = &denied {
        let _ = Api::<CertificateSigningRequest>::all(u.env.client.clone())
            .delete(csr, &Default::default())
            .await;
    }
    assert_eq!(
        out.status.code(),
        Some(15),
        "{}\n{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    let said = text(&out.stdout);
    assert!(said.contains("[download-certs] Wrote"), "{said}");
    assert!(said.contains("[download-certs] Kept identical"), "{said}");
    let after = snapshot(&dir);
    assert_eq!(
        after.keys().collect::<Vec<_>>(),
        before.keys().collect::<Vec<_>>(),
        "left behind"
    );
    assert!(after == before, "a file that was there before changed");
}

/// Every secret has a way in that no process list shows: the token from a file, from stdin
/// or from KUBEFLAVOR_JOIN_TOKEN, the certificate key from a file or from stdin (or
/// KUBEFLAVOR_CERTIFICATE_KEY), for `certs download --server` and `join --control-plane`.
#[tokio::test(flavor = "multi_thread")]
async fn secrets_stay_off_the_command_line() {
    use std::os::unix::fs::OpenOptionsExt as _;
    let u = uploaded().await;
    let cp = create_token(&u.env, "system:bootstrappers:kubeflavor:control-plane").await;
    let secret_file = |name: &str, content: &str| {
        let p = u.tmp.path().join(name);
        let mut f = std::fs::OpenOptions::new()
            .create_new(true)
            .write(true)
            .mode(0o600)
            .open(&p)
            .unwrap();
        std::io::Write::write_all(&mut f, format!("{content}\n").as_bytes()).unwrap();
        p
    };
    let (token_file, key_file) = (secret_file("token", &cp), secret_file("key", &u.key));
    let source = snapshot(&u.tmp.path().join("source"));
    /// One way in for the token and the key: flags, environment, what stdin carries.
    struct Run<'a> {
        flags: Vec<&'a str>,
        envs: Vec<(&'a str, &'a str)>,
        stdin: Option<&'a str>,
    }
    let runs = [
        Run {
            flags: vec![
                "--token-file",
                path(&token_file),
                "--certificate-key-file",
                "-",
            ],
            envs: vec![],
            stdin: Some(&u.key),
        },
        Run {
            flags: vec![
                "--token-file",
                "-",
                "--certificate-key-file",
                path(&key_file),
            ],
            envs: vec![],
            stdin: Some(&cp),
        },
        Run {
            flags: vec![],
            envs: vec![
                ("KUBEFLAVOR_JOIN_TOKEN", &cp),
                ("KUBEFLAVOR_CERTIFICATE_KEY", &u.key),
            ],
            stdin: None,
        },
    ];
    for (i, run) in runs.into_iter().enumerate() {
        let target = u.tmp.path().join(format!("target-{i}"));
        let mut args = vec![
            "certs",
            "download",
            "--server",
            &u.endpoint,
            "--discovery-token-ca-cert-hash",
            &u.pin,
            "--pki-dir",
            path(&target),
        ];
        args.extend(run.flags.iter().copied());
        let out = kubeflavor_with(&args, &run.envs, run.stdin).await;
        assert!(out.status.success(), "run {i}: {}", text(&out.stderr));
        assert_eq!(snapshot(&target), source, "run {i}");
    }

    let dir = u.tmp.path().join("etc-kubernetes");
    let out = kubeflavor_with(
        &[
            "join",
            &u.endpoint,
            "--token-file",
            path(&token_file),
            "--discovery-token-ca-cert-hash",
            &u.pin,
            "--node-name",
            "cp-files",
            "--kubelet-dir",
            path(&dir),
            "--control-plane",
            "--certificate-key-file",
            "-",
            "--discovery-retry-interval",
            "1s",
        ],
        &[],
        Some(&u.key),
    )
    .await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(snapshot(&dir.join("pki")), source);
}
