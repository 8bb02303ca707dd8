//! Who decides renewals. kubeadm binds `system:nodes` to the selfnodeclient auto-approval
//! (ClusterRoleBinding `kubeadm:node-autoapprove-certificate-rotation`), so
//! kube-controller-manager approves every node's renewal CSR within milliseconds, before
//! kubeflavor sees it (capture 54). `--manage-renewals` would then do nothing at all, and a
//! revoked node would keep renewing. So the controller asks the API server, with a
//! SubjectAccessReview, whether nodes may still have their renewals auto-approved, and
//! refuses to start with `--manage-renewals` while they may.

use std::time::Duration;

use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::Api;
use kube::api::PostParams;

/// kubeadm's binding of `system:nodes` to the selfnodeclient auto-approval.
pub const KUBEADM_RENEWAL_BINDING: &str = "kubeadm:node-autoapprove-certificate-rotation";

/// The question kube-controller-manager's approver asks for a renewal (sarapprove.go):
/// may this node create `certificatesigningrequests/selfnodeclient`?
pub fn renewal_auto_approval_review() -> SubjectAccessReview {
    SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some("system:node:kubeflavor-renewal-check".into()),
            groups: Some(vec!["system:nodes".into(), "system:authenticated".into()]),
            resource_attributes: Some(ResourceAttributes {
                group: Some("certificates.k8s.io".into()),
                resource: Some("certificatesigningrequests".into()),
                subresource: Some("selfnodeclient".into()),
                verb: Some("create".into()),
                version: Some("*".into()),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    }
}

/// `Some(reason)` when kube-controller-manager still auto-approves node renewals (the
/// reason is the authorizer's, e.g. which binding allows it).
pub async fn auto_approved(client: &kube::Client) -> Result<Option<String>, kube::Error> {
    let api: Api<SubjectAccessReview> = Api::all(client.clone());
    let review = api
        .create(&PostParams::default(), &renewal_auto_approval_review())
        .await?;
    let status = review.status.unwrap_or_default();
    Ok(status
        .allowed
        .then(|| status.reason.unwrap_or_else(|| "allowed".into())))
}

/// How long a "still auto-approved" answer is asked again before it counts: the RBAC
/// authorizer reads an informer cache, so a binding deleted a moment ago can still allow
/// the request for a while (seen on a real v1.36 API server right after
/// `install --apply --manage-renewals`).
pub const RBAC_PROPAGATION: Duration = Duration::from_secs(10);

/// [`auto_approved`], asked again (with growing pauses) while it says yes, for at most
/// `within`: the answer once a deleted binding has left the authorizer's cache.
pub async fn auto_approved_within(
    client: &kube::Client,
    within: Duration,
) -> Result<Option<String>, kube::Error> {
    let deadline = tokio::time::Instant::now() + within;
    let mut pause = Duration::from_millis(20);
    loop {
        let answer = auto_approved(client).await?;
        if answer.is_none() || tokio::time::Instant::now() + pause >= deadline {
            return Ok(answer);
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_secs(1));
    }
}

/// Refuses `--manage-renewals` while renewals are still auto-approved, naming the fix.
pub async fn check_handover(client: &kube::Client) -> anyhow::Result<()> {
    match auto_approved_within(client, RBAC_PROPAGATION).await {
        Ok(None) => Ok(()),
        Ok(Some(reason)) => Err(anyhow::anyhow!(
            "--manage-renewals has no effect here: kube-controller-manager approves every node's renewal first, \
             because system:nodes may create certificatesigningrequests/selfnodeclient ({reason}) \
             (run 'kubeflavor install --apply --manage-renewals', or delete that binding, e.g. \
             'kubectl delete clusterrolebinding {KUBEADM_RENEWAL_BINDING}', then start the controller again)"
        )),
        Err(e) => Err(anyhow::anyhow!(
            "cannot check whether kube-controller-manager still approves renewals: {e} \
             (the controller needs create on subjectaccessreviews with --manage-renewals: \
             run 'kubeflavor install --apply --manage-renewals')"
        )),
    }
}
