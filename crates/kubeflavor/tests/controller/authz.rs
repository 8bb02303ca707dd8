//! P7 (revocation that cuts off), end to end: kubeflavor's authorization webhook, asked by
//! the API server before Node and RBAC, refuses every request of a revoked node.
//!
//! On testkube the webhook is configured the way the real control plane of the tests
//! configures it (webhook first, matchConditions on `system:nodes` and names `authz-*`,
//! timeout 2 s, no cache, failurePolicy NoOpinion), pointing at this test's webhook. On a
//! real control plane (`../shared/real-k8s`) the API server asks
//! `https://127.0.0.1:$REAL_K8S_AUTHZ_WEBHOOK_PORT/authorize` (default 16444); the webhook
//! serves `<pki>/authz-webhook.{crt,key}` and requires a client certificate of
//! `<pki>/ca.crt` with CN `kube-apiserver-authz-client`, where `<pki>` is
//! `$KUBEFLAVOR_E2E_AUTHZ_PKI` or the `pki` folder beside the admin kubeconfig. Only one
//! process can listen on that port, so the whole sequence is one test, started serially.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::core::v1::{Node, Pod, Secret, ServiceAccount};
use kube::api::{DeleteParams, PostParams};
use kube::{Api, Client};
use kubeflavor::authz::index::CutOffIndex;
use kubeflavor::authz::metrics::AuthzMetrics;
use kubeflavor_core::node::cutoff::CutOff;
use serde_json::json;

use crate::harness::*;

/// The webhook port of the real control plane.
const PORT_ENV: &str = "REAL_K8S_AUTHZ_WEBHOOK_PORT";
const DEFAULT_PORT: u16 = 16444;
/// Where the real control plane's PKI is, when not beside the admin kubeconfig.
const PKI_ENV: &str = "KUBEFLAVOR_E2E_AUTHZ_PKI";
pub(crate) const CLIENT_CN: &str = "kube-apiserver-authz-client";
/// The real control plane's match condition (its README): nodes named `authz-*`.
const MATCH: &str =
    "'system:nodes' in request.groups && request.user.startsWith('system:node:authz-')";

/// The webhook's files and address.
pub(crate) struct WebhookPki {
    pub(crate) cert: PathBuf,
    pub(crate) key: PathBuf,
    pub(crate) client_ca: PathBuf,
    pub(crate) port: u16,
}

/// Writes a CA, a serving certificate for 127.0.0.1 and the API server's client
/// certificate into `dir`; returns the webhook's files and the testkube configuration
/// that trusts them (its `url` is set once the port is known).
pub(crate) fn test_pki(dir: &Path) -> (WebhookPki, testkube::AuthorizationWebhook) {
    let made = crate::support::webhook_pki::webhook_pki(
        "authz-test-ca",
        vec!["127.0.0.1".into()],
        CLIENT_CN,
    );
    let write = |name: &str, text: &str| {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path
    };
    let pki = WebhookPki {
        cert: write("authz-webhook.crt", &made.server.0),
        key: write("authz-webhook.key", &made.server.1),
        client_ca: write("ca.crt", &made.ca_pem),
        port: 0,
    };
    let config = testkube::AuthorizationWebhook {
        url: String::new(),
        ca_pem: made.ca_pem,
        client_cert_pem: made.client.0,
        client_key_pem: made.client.1,
        timeout: Duration::from_secs(2),
        failure_policy: testkube::FailurePolicy::NoOpinion,
        match_conditions: vec![MATCH.into()],
    };
    (pki, config)
}

/// The real control plane's webhook slot.
pub(crate) fn real_pki(kubeconfig: &Path) -> WebhookPki {
    let dir = std::env::var_os(PKI_ENV)
        .map(PathBuf::from)
        .unwrap_or_else(|| kubeconfig.parent().expect("a folder").join("pki"));
    let port = std::env::var(PORT_ENV)
        .ok()
        .and_then(|p| p.parse().ok())
        .unwrap_or(DEFAULT_PORT);
    let pki = WebhookPki {
        cert: dir.join("authz-webhook.crt"),
        key: dir.join("authz-webhook.key"),
        client_ca: dir.join("ca.crt"),
        port,
    };
    for file in [&pki.cert, &pki.key, &pki.client_ca] {
        assert!(
            file.is_file(),
            "{} is missing: this test needs a control plane with an authorization webhook slot \
             (its API server calls https://127.0.0.1:{port}/ for nodes named authz-*, with the \
             serving certificate and client CA in that folder); set {PKI_ENV} to the folder \
             and {PORT_ENV} to the port",
            file.display()
        );
    }
    pki
}

/// A webhook serving until dropped.
pub(crate) struct Webhook {
    index: Arc<CutOffIndex>,
    metrics: AuthzMetrics,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

impl Webhook {
    pub(crate) async fn start(admin: Client, pki: &WebhookPki) -> (Webhook, u16) {
        let index = Arc::new(CutOffIndex::default());
        let metrics = AuthzMetrics::default();
        let opts = kubeflavor::authz::Options {
            address: ([127, 0, 0, 1], pki.port).into(),
            cert: pki.cert.clone(),
            key: pki.key.clone(),
            client_ca: pki.client_ca.clone(),
            client_cn: Some(CLIENT_CN.into()),
            connections: Default::default(),
            max_staleness: Duration::from_secs(3),
        };
        let bound = kubeflavor::authz::bind(opts, index.clone(), metrics.clone())
            .await
            .expect("the webhook binds its port with its certificate and client CA");
        let port = bound.local_addr().unwrap().port();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(kubeflavor::authz::run(admin, bound, async {
            let _ = stopped.await;
        }));
        within("the webhook's index to sync", index.synced()).await;
        let webhook = Webhook {
            index,
            metrics,
            stop: Some(stop),
            task,
        };
        (webhook, port)
    }

    /// How many answers of `kind` the webhook gave.
    pub(crate) fn answers(&self, kind: &str) -> u64 {
        let text = self.metrics.render();
        let prefix = format!("kubeflavor_authz_answers_total{{answer=\"{kind}\"}} ");
        text.lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .map_or(0, |n| n.trim().parse().unwrap())
    }

    pub(crate) async fn until_cut_off(&self, node: &str, want: Option<CutOff>) {
        within(
            &format!("the webhook to see {node} as {want:?}"),
            self.index.until(|i| i.cut_off(node) == want),
        )
        .await;
    }

    pub(crate) async fn stop(mut self) {
        let _ = self.stop.take().map(|s| s.send(()));
        let _ = (&mut self.task).await;
    }
}

/// The API error of a call that must fail.
fn refused<T: std::fmt::Debug>(what: &str, result: Result<T, kube::Error>) -> (u16, String) {
    match result {
        Err(kube::Error::Api(s)) => (s.code, s.message.clone()),
        other => panic!("{what}: expected an API error, got {other:?}"),
    }
}

/// The request was refused by the webhook: 403 with the reason naming the revocation. A
/// webhook with no opinion would leave Node and RBAC to answer (200, or a 403 of theirs
/// without this reason), so this fails then.
pub(crate) fn assert_cut_off<T: std::fmt::Debug>(
    what: &str,
    node: &str,
    result: Result<T, kube::Error>,
) {
    let (code, message) = refused(what, result);
    assert_eq!(code, 403, "{what}: {message}");
    assert!(
        message.contains(&format!("kubeflavor: node {node} is revoked")),
        "{what}: the refusal must be the webhook's: {message}"
    );
}

/// A renewal CSR of `node`: the node asking for its own name.
fn renewal_csr(node: &str, name: &str) -> CertificateSigningRequest {
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    csr_object(
        name,
        &format!("system:node:{node}"),
        &["system:nodes"],
        &key,
    )
}

/// A Pod bound to `node` that mounts `secret` and runs as `sa`, created by the admin (no
/// scheduler: spec.nodeName binds it, as the scheduler's binding would).
fn pod_on(node: &str, name: &str, secret: &str, sa: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "nodeName": node,
            "serviceAccountName": sa,
            "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}],
            "volumes": [{"name": "s", "secret": {"secretName": secret}}],
        },
    }))
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revocation_cuts_the_node_off_and_only_an_admin_brings_it_back() {
    let h = Harness::start_serial().await;
    let dir = tempfile::tempdir().unwrap();
    let (webhook, _port) = match h.testkube() {
        Some(tk) => {
            let (mut pki, mut config) = test_pki(dir.path());
            pki.port = 0;
            let (webhook, port) = Webhook::start(h.admin.clone(), &pki).await;
            config.url = format!("https://127.0.0.1:{port}/authorize");
            tk.set_authorization_webhook(Some(config));
            (webhook, port)
        }
        None => Webhook::start(h.admin.clone(), &real_pki(&h.env.kubeconfig)).await,
    };

    // Two nodes of one token, both named so the API server asks the webhook about them.
    let f = h.gold_flavor("authz").await;
    let ctl = h.start_controller(h.options("ctl"));
    let (node, other) = (h.name("authz"), h.name("authz-ok"));
    let t = h.token(&f, 2, None).await;
    let boot = h.bootstrap_client(&t).await;
    for n in [&node, &other] {
        let csr = format!("{n}-csr");
        h.submit_csr(&boot, &csr, n).await;
        assert_eq!(h.decision(&csr).await, "Approved");
        h.register_node(&csr, n, &[], &[]).await;
    }
    let kubelet = h.node_client(&format!("{node}-csr")).await;
    let other_kubelet = h.node_client(&format!("{other}-csr")).await;

    // A Pod bound to the node, with a Secret and a ServiceAccount the kubelet may use.
    let ns = "default";
    let (secret, sa, pod) = (h.name("authz-s"), h.name("authz-sa"), h.name("authz-p"));
    let admin_secrets = Api::<Secret>::namespaced(h.admin.clone(), ns);
    let admin_sas = Api::<ServiceAccount>::namespaced(h.admin.clone(), ns);
    let admin_pods = Api::<Pod>::namespaced(h.admin.clone(), ns);
    let pp = PostParams::default();
    let secret_obj: Secret = serde_json::from_value(json!({
        "metadata": {"name": secret}, "stringData": {"k": "v"},
    }))
    .unwrap();
    admin_secrets.create(&pp, &secret_obj).await.unwrap();
    let sa_obj: ServiceAccount = serde_json::from_value(json!({"metadata": {"name": sa}})).unwrap();
    admin_sas.create(&pp, &sa_obj).await.unwrap();
    admin_pods
        .create(&pp, &pod_on(&node, &pod, &secret, &sa))
        .await
        .unwrap();
    let nodes = |c: &Client| Api::<Node>::all(c.clone());
    nodes(&kubelet)
        .get(&node)
        .await
        .expect("before revocation the node reads its Node");
    Api::<Secret>::namespaced(kubelet.clone(), ns)
        .get(&secret)
        .await
        .expect("before revocation the node reads its pod's Secret");
    assert!(
        webhook.answers("no_opinion") > 0,
        "the API server asks the webhook about the node"
    );
    let out = h.env.kf(&["node", "get", &node]).await;
    let out = out.expect_ok();
    assert_eq!(standing_line(out, "Revoked:"), "no", "{out}");
    assert_eq!(standing_line(out, "Cut off:"), "no (not revoked)", "{out}");

    // Revoke: the node's next requests are refused.
    let denied_before = webhook.answers("denied_revoked");
    let revoked_at = Instant::now();
    h.env.kf(&["node", "revoke", &node]).await.expect_ok();
    webhook
        .until_cut_off(&node, Some(CutOff::BindingRevoked))
        .await;
    let get_node = nodes(&kubelet).get(&node).await;
    let cut_off_after = revoked_at.elapsed();
    assert_cut_off("get its Node", &node, get_node);
    eprintln!("node {node} cut off {cut_off_after:?} after 'node revoke' returned");
    assert!(
        cut_off_after < Duration::from_secs(5),
        "the stated bound (README: the watch's delay, under 5 s with caching off) holds: {cut_off_after:?}"
    );
    assert_cut_off(
        "read its pod's Secret",
        &node,
        Api::<Secret>::namespaced(kubelet.clone(), ns)
            .get(&secret)
            .await,
    );
    let token_request = json!({
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "spec": {
            "audiences": [],
            "expirationSeconds": 3600,
            "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": pod},
        },
    });
    let sa_api = Api::<ServiceAccount>::namespaced(kubelet.clone(), ns);
    let minted: Result<serde_json::Value, _> = sa_api
        .create_subresource("token", &sa, &pp, &token_request)
        .await;
    assert_cut_off("a TokenRequest for its pod's ServiceAccount", &node, minted);
    let renewal = h.name("authz-renew");
    assert_cut_off(
        "a renewal CSR",
        &node,
        Api::<CertificateSigningRequest>::all(kubelet.clone())
            .create(&pp, &renewal_csr(&node, &renewal))
            .await,
    );
    assert!(
        webhook.answers("denied_revoked") >= denied_before + 4,
        "each refusal above was the webhook's denial"
    );
    // `node get` asks the API server itself (a SubjectAccessReview, which the webhook
    // answers too): revoked, and refused with the webhook's reason.
    let out = h.env.kf(&["node", "get", &node]).await;
    let out = out.expect_ok();
    assert!(
        standing_line(out, "Revoked:").starts_with("yes (RevokedByAdmin"),
        "{out}"
    );
    eprintln!("node get {node} after revocation:\n{out}");
    let cut_off = standing_line(out, "Cut off:");
    assert!(
        cut_off.starts_with(&format!(
            "yes (the API server refuses its requests: kubeflavor: node {node} is revoked"
        )),
        "{out}"
    );
    let out = h.env.kf(&["node", "get", &other]).await;
    let out = out.expect_ok();
    assert_eq!(standing_line(out, "Cut off:"), "no (not revoked)", "{out}");

    // A node not revoked is unaffected.
    nodes(&other_kubelet)
        .get(&other)
        .await
        .expect("a node not revoked still reads its Node");

    // Deleting the revoked binding does not bring the node back: its Node keeps the
    // revoked taint the controller put on it (NodeRestriction forbids the kubelet to
    // remove it).
    h.delete_revoked_binding(&node).await;
    webhook
        .until_cut_off(&node, Some(CutOff::NodeMarkedRevoked))
        .await;
    let (code, message) = refused("get its Node", nodes(&kubelet).get(&node).await);
    assert_eq!(code, 403, "{message}");
    assert!(message.contains("kubeflavor.io/revoked"), "{message}");
    // `node get` still says where it stands, from its Node and the API server's answer.
    let out = h.env.kf(&["node", "get", &node]).await;
    let out = out.expect_ok();
    assert_eq!(
        standing_line(out, "Revoked:"),
        "yes (no FlavorBinding; the Node carries kubeflavor.io/revoked)",
        "{out}"
    );
    assert!(
        standing_line(out, "Cut off:").starts_with("yes (the API server refuses its requests"),
        "{out}"
    );

    // Deleting the Node too does not bring it back: the name stays in the revocation list,
    // a mark of its own.
    nodes(&h.admin)
        .delete(&node, &DeleteParams::default())
        .await
        .unwrap();
    webhook.until_cut_off(&node, Some(CutOff::Listed)).await;
    let (code, message) = refused("get its deleted Node", nodes(&kubelet).get(&node).await);
    assert_eq!(code, 403, "{message}");
    assert!(message.contains("kubeflavor-revoked-nodes"), "{message}");

    // The way back is an admin's, and deliberate: `node forget`. The kubelet may then
    // register again, as a node nobody judged (no binding, no flavor).
    h.env.kf(&["node", "forget", &node]).await.expect_ok();
    webhook.until_cut_off(&node, None).await;
    let (code, message) = refused("get its deleted Node", nodes(&kubelet).get(&node).await);
    assert_eq!(code, 404, "back to Node and RBAC: {message}");

    let dp = DeleteParams::default();
    // No kubelet will ever confirm this Pod's end (its Node is gone, and a real cluster may
    // run no pod garbage collector): deleted at once, as `kubectl delete --force` does.
    let _ = admin_pods
        .delete(&pod, &DeleteParams::default().grace_period(0))
        .await;
    let _ = admin_sas.delete(&sa, &dp).await;
    let _ = admin_secrets.delete(&secret, &dp).await;
    if let Some(tk) = h.testkube() {
        tk.set_authorization_webhook(None);
    }
    ctl.stop().await;
    webhook.stop().await;
}
