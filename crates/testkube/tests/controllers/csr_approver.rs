//! kube-controller-manager's CSR approver on a kubeadm cluster (upstream
//! pkg/controller/certificates/approver/sarapprove.go): kubelet client CSRs whose requester
//! a SubjectAccessReview allows `create` on `certificatesigningrequests/selfnodeclient` or
//! `/nodeclient` are approved (`AutoApproved`) and then signed; kubeadm's bindings grant
//! that to its token group and to every node's renewal.

use crate::support::{admin, client_from, kubelet_csr, within};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use serde_json::{Value, json};
use testkube::TestCluster;

const KUBEADM_GROUP: &str = "system:bootstrappers:kubeadm:default-node-token";
/// Files the kubelet client CSR `name` for `node` through `api`.
async fn file(api: &Api<CertificateSigningRequest>, name: &str, node: &str) {
    api.create(&PostParams::default(), &kubelet_csr(name, node))
        .await
        .unwrap();
}

const NODECLIENT: &str = "Auto approving kubelet client certificate after SubjectAccessReview.";
const SELFNODECLIENT: &str =
    "Auto approving self kubelet client certificate after SubjectAccessReview.";

/// A bootstrap token in `group`, and a client that uses it once the authenticator sees it.
async fn token_client(cluster: &TestCluster, id: &str, group: &str) -> kube::Client {
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": format!("bootstrap-token-{id}"), "namespace": "kube-system"},
        "type": "bootstrap.kubernetes.io/token",
        "stringData": {"token-id": id, "token-secret": "0123456789abcdef",
                       "usage-bootstrap-authentication": "true", "auth-extra-groups": group},
    }))
    .unwrap();
    Api::<Secret>::namespaced(admin(cluster).await, "kube-system")
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    // The authenticator reads token Secrets from an informer cache, so it trails the new
    // Secret: wait until it sees it.
    cluster.token_auth_caught_up().await;
    client_from(&cluster.kubeconfig_for_token(&format!("{id}.0123456789abcdef"))).await
}

fn conditions(csr: &CertificateSigningRequest) -> Vec<Value> {
    csr.status
        .as_ref()
        .and_then(|s| s.conditions.clone())
        .unwrap_or_default()
        .into_iter()
        .map(|c| serde_json::to_value(c).unwrap())
        .collect()
}

fn issued(csr: &CertificateSigningRequest) -> bool {
    csr.status
        .as_ref()
        .and_then(|s| s.certificate.as_ref())
        .is_some_and(|c| !c.0.is_empty())
}

/// Wait (by watch) until the CSR `name` satisfies `pred`; returns it.
async fn wait_for(
    csrs: &Api<CertificateSigningRequest>,
    name: &str,
    what: &str,
    pred: impl Fn(&CertificateSigningRequest) -> bool,
) -> CertificateSigningRequest {
    let rv = csrs
        .list(&ListParams::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    if let Some(csr) = csrs.get_opt(name).await.unwrap()
        && pred(&csr)
    {
        return csr;
    }
    let params = WatchParams::default().fields(&format!("metadata.name={name}"));
    let mut stream = csrs.watch(&params, &rv).await.unwrap().boxed();
    within(what, async {
        loop {
            if let Some(WatchEvent::Added(csr) | WatchEvent::Modified(csr)) =
                stream.try_next().await.unwrap()
                && pred(&csr)
            {
                return csr;
            }
        }
    })
    .await
}

/// The Approved condition the approver appends: `Approved`/`True`, reason `AutoApproved`,
/// the upstream message, and the timestamps the server fills.
fn assert_auto_approved(csr: &CertificateSigningRequest, message: &str) {
    let conditions = conditions(csr);
    assert_eq!(conditions.len(), 1, "{conditions:?}");
    let c = &conditions[0];
    assert_eq!(
        (&c["type"], &c["status"], &c["reason"], &c["message"]),
        (
            &json!("Approved"),
            &json!("True"),
            &json!("AutoApproved"),
            &json!(message)
        )
    );
    assert!(c["lastUpdateTime"].is_string() && c["lastTransitionTime"].is_string());
}

#[tokio::test]
async fn a_kubeadm_token_csr_is_auto_approved_then_signed() {
    let cluster = TestCluster::start().await.unwrap();
    let as_token: Api<CertificateSigningRequest> =
        Api::all(token_client(&cluster, "abcdef", KUBEADM_GROUP).await);
    file(&as_token, "csr-worker-1", "worker-1").await;
    // The kubelet watches its own CSR: approved, then issued (two MODIFIED events, as the
    // real server sends them).
    let approved = wait_for(&as_token, "csr-worker-1", "auto-approval", |c| {
        !conditions(c).is_empty()
    })
    .await;
    assert_auto_approved(&approved, NODECLIENT);
    let signed = wait_for(&as_token, "csr-worker-1", "the certificate", issued).await;
    assert_auto_approved(&signed, NODECLIENT);
    cluster.shutdown().await;
}

#[tokio::test]
async fn a_node_renewal_is_auto_approved_as_selfnodeclient() {
    let cluster = TestCluster::start().await.unwrap();
    let (cert, key) = cluster
        .issue_client_cert("system:node:worker-1", &["system:nodes"])
        .unwrap();
    let node = client_from(&cluster.kubeconfig_for_client_cert(&cert, &key)).await;
    let as_node: Api<CertificateSigningRequest> = Api::all(node);
    file(&as_node, "csr-renew-1", "worker-1").await;
    let signed = wait_for(&as_node, "csr-renew-1", "the renewal", issued).await;
    assert_auto_approved(&signed, SELFNODECLIENT);
    // A node cannot even file a CSR for another node's name (NodeRestriction), so the
    // approver never meets one; its decision on such a CSR is unit-tested in kcm.
    let other = as_node
        .create(
            &PostParams::default(),
            &kubelet_csr("csr-other", "worker-2"),
        )
        .await;
    assert!(matches!(other, Err(kube::Error::Api(s)) if s.code == 403));
    cluster.shutdown().await;
}

#[tokio::test]
async fn a_token_group_bound_only_to_node_bootstrapper_stays_pending() {
    let cluster = TestCluster::start().await.unwrap();
    let root = admin(&cluster).await;
    // What `kubeflavor install` binds: CSR create, and deliberately no auto-approval.
    let binding: ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "kubeflavor:kubelet-bootstrap"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "system:node-bootstrapper"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "system:bootstrappers:kubeflavor:node"}],
    }))
    .unwrap();
    Api::<ClusterRoleBinding>::all(root.clone())
        .create(&PostParams::default(), &binding)
        .await
        .unwrap();
    let kubeflavor: Api<CertificateSigningRequest> =
        Api::all(token_client(&cluster, "kflv01", "system:bootstrappers:kubeflavor:node").await);
    let kubeadm: Api<CertificateSigningRequest> =
        Api::all(token_client(&cluster, "kdm001", KUBEADM_GROUP).await);
    file(&kubeflavor, "csr-kubeflavor", "edge-1").await;
    file(&kubeadm, "csr-kubeadm", "worker-1").await;
    // The approver takes CSRs in order: once the later one is approved, the earlier one was
    // looked at, and left pending.
    wait_for(&kubeadm, "csr-kubeadm", "the kubeadm CSR", |c| {
        !conditions(c).is_empty()
    })
    .await;
    let csrs: Api<CertificateSigningRequest> = Api::all(root);
    let pending = csrs.get("csr-kubeflavor").await.unwrap();
    assert!(conditions(&pending).is_empty() && !issued(&pending));
    cluster.shutdown().await;
}

#[tokio::test]
async fn with_the_approver_off_nothing_is_approved() {
    let cluster = TestCluster::builder()
        .csr_approver(false)
        .start()
        .await
        .unwrap();
    let as_token: Api<CertificateSigningRequest> =
        Api::all(token_client(&cluster, "abcdef", KUBEADM_GROUP).await);
    file(&as_token, "csr-token", "worker-1").await;
    let csrs: Api<CertificateSigningRequest> = Api::all(admin(&cluster).await);
    file(&csrs, "csr-admin", "worker-2").await;
    // Synchronise on the signer, which runs in the same loop after the approver: once the
    // CSR approved by hand afterwards is signed, the approver would have acted on the others.
    csrs.create(&PostParams::default(), &kubelet_csr("csr-sync", "worker-3"))
        .await
        .unwrap();
    let approval = json!({"status": {"conditions": [{"type": "Approved", "status": "True", "reason": "ByHand", "message": "m"}]}});
    csrs.patch_approval(
        "csr-sync",
        &PatchParams::default(),
        &Patch::Merge(&approval),
    )
    .await
    .unwrap();
    wait_for(&csrs, "csr-sync", "the signer", issued).await;
    for name in ["csr-token", "csr-admin"] {
        let csr = csrs.get(name).await.unwrap();
        assert!(conditions(&csr).is_empty(), "{name}");
    }
    cluster.shutdown().await;
}

#[tokio::test]
async fn without_kubeadm_autoapprove_bindings_only_the_binding_less_rules_remain() {
    // kubeadm's RBAC minus its two auto-approval bindings, the cluster testkube was
    // checked against.
    let cluster = TestCluster::builder()
        .kubeadm_autoapprove_bootstrap(false)
        .kubeadm_autoapprove_certificate_rotation(false)
        .start()
        .await
        .unwrap();
    let root = admin(&cluster).await;
    let bindings: Api<ClusterRoleBinding> = Api::all(root.clone());
    for name in [
        "kubeadm:node-autoapprove-bootstrap",
        "kubeadm:node-autoapprove-certificate-rotation",
    ] {
        assert!(bindings.get_opt(name).await.unwrap().is_none(), "{name}");
    }
    for name in ["kubeadm:kubelet-bootstrap", "kubeadm:get-nodes"] {
        assert!(bindings.get_opt(name).await.unwrap().is_some(), "{name}");
    }
    let as_token: Api<CertificateSigningRequest> =
        Api::all(token_client(&cluster, "abcdef", KUBEADM_GROUP).await);
    file(&as_token, "csr-token", "worker-1").await;
    let (cert, key) = cluster
        .issue_client_cert("system:node:worker-2", &["system:nodes"])
        .unwrap();
    let as_node: Api<CertificateSigningRequest> =
        Api::all(client_from(&cluster.kubeconfig_for_client_cert(&cert, &key)).await);
    file(&as_node, "csr-renew", "worker-2").await;
    // An admin-filed kubelet CSR is still approved (system:masters passes any review);
    // it comes last, so by then the approver has looked at the two others.
    let csrs: Api<CertificateSigningRequest> = Api::all(root);
    file(&csrs, "csr-admin", "worker-3").await;
    let approved = wait_for(&csrs, "csr-admin", "the admin's CSR", |c| {
        !conditions(c).is_empty()
    })
    .await;
    assert_auto_approved(&approved, NODECLIENT);
    for name in ["csr-token", "csr-renew"] {
        assert!(
            conditions(&csrs.get(name).await.unwrap()).is_empty(),
            "{name}"
        );
    }
    cluster.shutdown().await;
}
