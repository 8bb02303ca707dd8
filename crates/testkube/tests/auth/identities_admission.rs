//! Admission end to end through kube-rs clients: NodeRestriction's label and taint rules
//! with the exact messages kube-apiserver gives, the CSR rules of the certificates API:
//! requester identity, conditions dropped on the main resource, Approved and Denied
//! exclusive and permanent, `approve` needed on the signer; and a kubelet's whole TLS
//! bootstrap, from bootstrap token to a working node certificate, observed by watch.

use std::collections::BTreeMap;

use crate::support::raw::RawClient;
use crate::support::{admin, client_from, kubelet_key, within};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::authentication::v1::SelfSubjectReview;
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::core::v1::{Node, Secret};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use kube::api::{Api, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use serde_json::{Value, json};
use testkube::TestCluster;

const SIGNER: &str = "kubernetes.io/kube-apiserver-client-kubelet";

fn status(result: Result<impl std::fmt::Debug, kube::Error>) -> (u16, String) {
    match result {
        Err(kube::Error::Api(s)) => (s.code, s.message.clone()),
        other => panic!("expected an API error, got {other:?}"),
    }
}

fn node(name: &str, extra_labels: &[(&str, &str)], taints: Value) -> Node {
    let mut labels: BTreeMap<&str, &str> = BTreeMap::from([
        ("kubernetes.io/hostname", name),
        ("kubernetes.io/os", "linux"),
        ("kubernetes.io/arch", "amd64"),
    ]);
    labels.extend(extra_labels.iter().copied());
    serde_json::from_value(
        json!({"metadata": {"name": name, "labels": labels}, "spec": {"taints": taints}}),
    )
    .unwrap()
}

fn merge(patch: Value) -> Patch<Value> {
    Patch::Merge(patch)
}

#[tokio::test]
async fn node_restriction_labels_and_taints() {
    let cluster = TestCluster::start().await.unwrap();
    let (cert, key) = cluster
        .issue_client_cert("system:node:worker-1", &["system:nodes"])
        .unwrap();
    let nodes: Api<Node> =
        Api::all(client_from(&cluster.kubeconfig_for_client_cert(&cert, &key)).await);
    let pp = PostParams::default();
    let pending = json!([{"key": "kubeflavor.io/pending", "effect": "NoSchedule"}]);

    let flavored = node(
        "worker-1",
        &[("kubeflavor.node-restriction.kubernetes.io/flavor", "sweet")],
        pending.clone(),
    );
    assert_eq!(
        status(nodes.create(&pp, &flavored).await),
        (403, r#"nodes "worker-1" is forbidden: node "worker-1" is not allowed to set the following labels: kubeflavor.node-restriction.kubernetes.io/flavor"#.into())
    );
    assert_eq!(
        status(nodes.create(&pp, &node("worker-2", &[], pending.clone())).await),
        (403, r#"nodes "worker-2" is forbidden: node "worker-1" is not allowed to modify node "worker-2""#.into())
    );
    let created = nodes
        .create(&pp, &node("worker-1", &[], pending.clone()))
        .await
        .unwrap();
    assert_eq!(
        created.spec.unwrap().taints.unwrap()[0].key,
        "kubeflavor.io/pending",
        "taints are allowed at creation"
    );

    let ppatch = PatchParams::default();
    for key in [
        "kubeflavor.node-restriction.kubernetes.io/flavor",
        "node-restriction.kubernetes.io/flavor",
    ] {
        let result = nodes
            .patch(
                "worker-1",
                &ppatch,
                &merge(json!({"metadata": {"labels": {key: "sweet"}}})),
            )
            .await;
        assert_eq!(
            status(result),
            (
                403,
                format!(r#"nodes "worker-1" is forbidden: is not allowed to modify labels: {key}"#)
            )
        );
    }
    let patched = nodes
        .patch(
            "worker-1",
            &ppatch,
            &merge(json!({"metadata": {"labels": {"example.com/flavor": "sweet"}}})),
        )
        .await
        .unwrap();
    assert_eq!(
        patched.metadata.labels.unwrap()["example.com/flavor"],
        "sweet"
    );

    let taints_denied = (
        403,
        r#"nodes "worker-1" is forbidden: node "worker-1" is not allowed to modify taints"#
            .to_string(),
    );
    let mut more_taints = nodes.get("worker-1").await.unwrap();
    more_taints
        .spec
        .as_mut()
        .unwrap()
        .taints
        .as_mut()
        .unwrap()
        .push(
            serde_json::from_value(json!({"key": "kubeflavor.io/extra", "effect": "NoExecute"}))
                .unwrap(),
        );
    assert_eq!(
        status(nodes.replace("worker-1", &pp, &more_taints).await),
        taints_denied
    );
    assert_eq!(
        status(
            nodes
                .patch(
                    "worker-1",
                    &ppatch,
                    &merge(json!({"spec": {"taints": null}}))
                )
                .await
        ),
        taints_denied
    );

    // The admin sets the trusted label; the kubelet cannot take it off again.
    let admin_nodes: Api<Node> = Api::all(admin(&cluster).await);
    let label = "kubeflavor.node-restriction.kubernetes.io/flavor";
    admin_nodes
        .patch(
            "worker-1",
            &ppatch,
            &merge(json!({"metadata": {"labels": {label: "sweet"}}})),
        )
        .await
        .unwrap();
    let removal = nodes
        .patch(
            "worker-1",
            &ppatch,
            &merge(json!({"metadata": {"labels": {label: null}}})),
        )
        .await;
    assert_eq!(
        status(removal),
        (
            403,
            format!(r#"nodes "worker-1" is forbidden: is not allowed to modify labels: {label}"#)
        )
    );
    assert_eq!(
        admin_nodes
            .get("worker-1")
            .await
            .unwrap()
            .metadata
            .labels
            .unwrap()[label],
        "sweet"
    );

    // Admission 403s carry no nosniff header; authorizer 403s do, as on a real server
    // (NodeRestriction's 403 versus the Node authorizer's).
    let raw = RawClient::new(&cluster, Some((&cert, &key)));
    let body = json!({"metadata": {"labels": {label: "sour"}}}).to_string();
    let admission = raw
        .send(
            "PATCH",
            "/api/v1/nodes/worker-1",
            &[("Content-Type", "application/merge-patch+json")],
            &body,
        )
        .await;
    assert_eq!(
        (admission.status, admission.header("X-Content-Type-Options")),
        (403, None)
    );
    let authorizer = raw.get("/api/v1/nodes/worker-9").await;
    assert_eq!(
        (
            authorizer.status,
            authorizer.header("X-Content-Type-Options")
        ),
        (403, Some("nosniff"))
    );
    cluster.shutdown().await;
}

fn csr(name: &str, request_b64: &str, extra_spec: Value) -> CertificateSigningRequest {
    let mut spec = json!({"signerName": SIGNER, "usages": ["digital signature", "client auth"], "request": request_b64});
    spec.as_object_mut()
        .unwrap()
        .extend(extra_spec.as_object().cloned().unwrap_or_default());
    serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).unwrap()
}

async fn bootstrap_token(cluster: &TestCluster, id: &str, secret: &str) -> kube::Client {
    let token: Secret = serde_json::from_value(json!({
        "metadata": {"name": format!("bootstrap-token-{id}"), "namespace": "kube-system"},
        "type": "bootstrap.kubernetes.io/token",
        "stringData": {
            "token-id": id, "token-secret": secret, "usage-bootstrap-authentication": "true",
            "auth-extra-groups": "system:bootstrappers:kubeadm:default-node-token",
        },
    }))
    .unwrap();
    Api::<Secret>::namespaced(admin(cluster).await, "kube-system")
        .create(&PostParams::default(), &token)
        .await
        .unwrap();
    // The authenticator reads token Secrets from an informer cache, so it trails the new
    // Secret: wait until it sees it.
    cluster.token_auth_caught_up().await;
    client_from(&cluster.kubeconfig_for_token(&format!("{id}.{secret}"))).await
}

fn conditions(csr: &CertificateSigningRequest) -> Vec<Value> {
    let conditions = csr
        .status
        .as_ref()
        .and_then(|s| s.conditions.clone())
        .unwrap_or_default();
    conditions
        .into_iter()
        .map(|c| serde_json::to_value(c).unwrap())
        .collect()
}

#[tokio::test]
async fn kubelet_tls_bootstrap_from_token_to_node_certificate() {
    // kubeadm's RBAC without its auto-approval binding, so kube-controller-manager leaves
    // the CSR to the admin: the kubelet's side of a manual approval.
    let cluster = TestCluster::builder()
        .kubeadm_autoapprove_bootstrap(false)
        .start()
        .await
        .unwrap();
    let bootstrap = bootstrap_token(&cluster, "abcdef", "0123456789abcdef").await;
    let as_bootstrap: Api<CertificateSigningRequest> = Api::all(bootstrap);
    let as_admin: Api<CertificateSigningRequest> = Api::all(admin(&cluster).await);
    let key = kubelet_key("worker-1");

    // The server overwrites a client-set identity with the requester's.
    let spoofed = json!({"username": "system:admin", "groups": ["system:masters"], "uid": "x"});
    let created = as_bootstrap
        .create(
            &PostParams::default(),
            &csr("csr-worker-1", &key.request_b64, spoofed),
        )
        .await
        .unwrap();
    let spec = created.spec.clone();
    assert_eq!(spec.username.as_deref(), Some("system:bootstrap:abcdef"));
    assert_eq!(
        spec.groups.unwrap(),
        [
            "system:bootstrappers",
            "system:bootstrappers:kubeadm:default-node-token",
            "system:authenticated"
        ]
    );
    assert!(spec.uid.is_none() && spec.extra.is_none());

    // The joining node watches its own CSR by name, as the kubelet does.
    let rv = created.metadata.resource_version.clone().unwrap();
    let mut stream = as_bootstrap
        .watch(
            &WatchParams::default().fields("metadata.name=csr-worker-1"),
            &rv,
        )
        .await
        .unwrap()
        .boxed();

    // It cannot approve itself (no `approve` on the signer: 403).
    let mut self_approved = created.clone();
    self_approved.status = serde_json::from_value(json!({"conditions": [{"type": "Approved", "status": "True", "reason": "R", "message": "m"}]})).unwrap();
    assert_eq!(
        status(as_bootstrap.replace_subresource("approval", "csr-worker-1", &PostParams::default(), &self_approved).await),
        (403, r#"certificatesigningrequests.certificates.k8s.io "csr-worker-1" is forbidden: User "system:bootstrap:abcdef" cannot update resource "certificatesigningrequests/approval" in API group "certificates.k8s.io" at the cluster scope"#.into())
    );
    // Conditions sent to the main resource are silently dropped, with a 200.
    let dropped = as_admin
        .replace("csr-worker-1", &PostParams::default(), &self_approved)
        .await
        .unwrap();
    assert!(conditions(&dropped).is_empty());

    let approval = json!({"status": {"conditions": [{"type": "Approved", "status": "True", "reason": "KubeflavorApproved", "message": "node worker-1 bound"}]}});
    as_admin
        .patch_approval(
            "csr-worker-1",
            &PatchParams::default(),
            &Patch::Merge(&approval),
        )
        .await
        .unwrap();

    let certificate = within("the signer to issue the certificate", async {
        loop {
            if let Some(WatchEvent::Modified(csr)) = stream.try_next().await.unwrap()
                && let Some(cert) = csr.status.and_then(|s| s.certificate)
            {
                return String::from_utf8(cert.0).unwrap();
            }
        }
    })
    .await;

    // The issued certificate is a working node identity.
    let node_client =
        client_from(&cluster.kubeconfig_for_client_cert(&certificate, &key.key_pem)).await;
    let review = Api::<SelfSubjectReview>::all(node_client.clone())
        .create(&PostParams::default(), &SelfSubjectReview::default())
        .await
        .unwrap();
    let user = review.status.unwrap().user_info.unwrap();
    assert_eq!(user.username.as_deref(), Some("system:node:worker-1"));
    assert_eq!(
        user.groups.unwrap(),
        ["system:nodes", "system:authenticated"]
    );
    Api::<Node>::all(node_client)
        .create(&PostParams::default(), &node("worker-1", &[], json!([])))
        .await
        .unwrap();
    cluster.shutdown().await;
}

#[tokio::test]
async fn approved_and_denied_are_exclusive_and_permanent() {
    // The CSRs here are filed by the admin, and kube-controller-manager's approver would
    // approve them at once (its SubjectAccessReview allows system:masters anything); this
    // test decides pending CSRs by hand, so the approver is off.
    let cluster = TestCluster::builder()
        .csr_approver(false)
        .start()
        .await
        .unwrap();
    let csrs: Api<CertificateSigningRequest> = Api::all(admin(&cluster).await);
    let pp = PostParams::default();
    let with_conditions = |base: &CertificateSigningRequest, conditions: Value| {
        let mut c = base.clone();
        c.status = serde_json::from_value(json!({"conditions": conditions})).unwrap();
        c
    };
    let put = |c: CertificateSigningRequest| {
        let csrs = csrs.clone();
        async move {
            csrs.replace_subresource(
                "approval",
                c.metadata.name.as_deref().unwrap(),
                &PostParams::default(),
                &c,
            )
            .await
        }
    };

    let pending = csrs
        .create(
            &pp,
            &csr(
                "csr-worker-2",
                &kubelet_key("worker-2").request_b64,
                json!({}),
            ),
        )
        .await
        .unwrap();
    let denied = put(with_conditions(&pending, json!([{"type": "Denied", "status": "True", "reason": "KubeflavorDenied", "message": "no binding for this token"}]))).await.unwrap();
    let stored = conditions(&denied);
    assert!(
        stored[0]["lastUpdateTime"].is_string() && stored[0]["lastTransitionTime"].is_string(),
        "the server fills the timestamps"
    );

    let prefix = r#"CertificateSigningRequest.certificates.k8s.io "csr-worker-2" is invalid: "#;
    let mut both = stored.clone();
    both.push(json!({"type": "Approved", "status": "True", "reason": "KubeflavorApproved", "message": "changed my mind"}));
    assert_eq!(
        status(put(with_conditions(&denied, json!(both))).await),
        (
            422,
            format!(
                r#"{prefix}status.conditions: Invalid value: "Approved": Approved and Denied conditions are mutually exclusive"#
            )
        )
    );
    let replaced = json!([{"type": "Approved", "status": "True", "reason": "KubeflavorApproved", "message": "changed my mind"}]);
    assert_eq!(
        status(put(with_conditions(&denied, replaced.clone())).await),
        (
            422,
            format!(
                r#"{prefix}status.conditions: Forbidden: updates may not remove a condition of type "Denied""#
            )
        )
    );
    let by_patch = csrs
        .patch_approval(
            "csr-worker-2",
            &PatchParams::default(),
            &Patch::Merge(&json!({"status": {"conditions": replaced}})),
        )
        .await;
    assert_eq!(
        status(by_patch).0,
        422,
        "a merge patch replaces the list and is refused the same way"
    );

    // The message of the decision may still be edited (the real server allows it).
    let mut edited = stored.clone();
    edited[0]["message"] = json!("edited message");
    let after = put(with_conditions(&denied, json!(edited))).await.unwrap();
    assert_eq!(conditions(&after)[0]["message"], "edited message");
    assert_eq!(
        conditions(&after)[0]["lastTransitionTime"],
        stored[0]["lastTransitionTime"]
    );

    let other = csrs
        .create(
            &pp,
            &csr(
                "csr-worker-3",
                &kubelet_key("worker-3").request_b64,
                json!({}),
            ),
        )
        .await
        .unwrap();
    let prefix = r#"CertificateSigningRequest.certificates.k8s.io "csr-worker-3" is invalid: "#;
    let cases = [
        (
            json!([{"type": "Approved", "status": "True", "reason": "A", "message": "a"}, {"type": "Denied", "status": "True", "reason": "D", "message": "d"}]),
            r#"status.conditions: Invalid value: "Denied": Approved and Denied conditions are mutually exclusive"#,
        ),
        (
            json!([{"type": "Approved", "status": "False", "reason": "A", "message": "a"}]),
            r#"status.conditions[0].status: Unsupported value: "False": supported values: "True""#,
        ),
        (
            json!([{"type": "Approved", "status": "True", "reason": "A", "message": "a"}, {"type": "Approved", "status": "True", "reason": "B", "message": "b"}]),
            r#"status.conditions[1].type: Duplicate value: "Approved""#,
        ),
    ];
    for (conditions, message) in cases {
        assert_eq!(
            status(put(with_conditions(&other, conditions)).await),
            (422, format!("{prefix}{message}"))
        );
    }
    cluster.shutdown().await;
}

#[tokio::test]
async fn approving_needs_approve_on_the_signer() {
    // An admin-filed kubelet CSR would be auto-approved (system:masters passes the
    // approver's SubjectAccessReview); this test approves it by hand.
    let cluster = TestCluster::builder()
        .csr_approver(false)
        .start()
        .await
        .unwrap();
    let root = admin(&cluster).await;
    let role: ClusterRole = serde_json::from_value(json!({
        "metadata": {"name": "csr-approval-writer"},
        "rules": [{"verbs": ["get", "update", "patch"], "apiGroups": ["certificates.k8s.io"], "resources": ["certificatesigningrequests", "certificatesigningrequests/approval"]}],
    }))
    .unwrap();
    Api::<ClusterRole>::all(root.clone())
        .create(&PostParams::default(), &role)
        .await
        .unwrap();
    let bind = |name: &str, role: &str| -> ClusterRoleBinding {
        serde_json::from_value(json!({
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "approver"}],
        }))
        .unwrap()
    };
    let bindings: Api<ClusterRoleBinding> = Api::all(root.clone());
    bindings
        .create(
            &PostParams::default(),
            &bind("writer", "csr-approval-writer"),
        )
        .await
        .unwrap();
    let csrs: Api<CertificateSigningRequest> = Api::all(root);
    csrs.create(
        &PostParams::default(),
        &csr(
            "csr-worker-4",
            &kubelet_key("worker-4").request_b64,
            json!({}),
        ),
    )
    .await
    .unwrap();

    cluster.register_static_token("approver-token", "approver", &[]);
    let as_approver: Api<CertificateSigningRequest> =
        Api::all(client_from(&cluster.kubeconfig_for_token("approver-token")).await);
    let approval = json!({"status": {"conditions": [{"type": "Approved", "status": "True", "reason": "R", "message": "m"}]}});
    let attempt = as_approver
        .patch_approval(
            "csr-worker-4",
            &PatchParams::default(),
            &Patch::Merge(&approval),
        )
        .await;
    assert_eq!(
        status(attempt),
        (
            403,
            format!(
                r#"certificatesigningrequests.certificates.k8s.io "csr-worker-4" is forbidden: user not permitted to approve requests with signerName "{SIGNER}""#
            )
        )
    );

    // The default approver ClusterRole exists unbound; binding it is what grants approval.
    bindings
        .create(
            &PostParams::default(),
            &bind(
                "approve-kubelets",
                "system:certificates.k8s.io:kube-apiserver-client-kubelet-approver",
            ),
        )
        .await
        .unwrap();
    let approved = as_approver
        .patch_approval(
            "csr-worker-4",
            &PatchParams::default(),
            &Patch::Merge(&approval),
        )
        .await
        .unwrap();
    assert_eq!(conditions(&approved)[0]["type"], "Approved");
    cluster.shutdown().await;
}
