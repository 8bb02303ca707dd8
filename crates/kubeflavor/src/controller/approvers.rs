//! Who else approves kubelet client CSRs. kube-controller-manager's approver
//! (sarapprove.go) approves a kubelet client CSR when its requester may create
//! `certificatesigningrequests/nodeclient` (a bootstrap CSR) or `.../selfnodeclient` (a
//! node renewing its own certificate), within milliseconds, before kubeflavor sees it.
//! `kubeadm init` grants both: `kubeadm:node-autoapprove-bootstrap` to its token group,
//! `kubeadm:node-autoapprove-certificate-rotation` to `system:nodes`.
//!
//! The controller asks the API server (SubjectAccessReviews) at start whether such grants
//! exist, and:
//! - refuses to start when kubeflavor's own token groups are auto-approved (then any token
//!   holder gets any node name, and nothing kubeflavor decides holds);
//! - refuses `--strict` while other tokens' CSRs are auto-approved, and
//!   `--manage-renewals` while renewals are: both flags would silently do nothing;
//! - otherwise warns and sets `kubeflavor_competing_approvals` to 1 per kind, because a
//!   kubeadm token can then take a name bound to a kubeflavor token.
//!
//! `install --apply --sole-approver` (and `--manage-renewals` for renewals alone) hands the
//! approvals over by deleting kubeadm's bindings.

use std::time::Duration;

use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::Api;
use kube::api::PostParams;
use kubeflavor_core::token_secret::{BOOTSTRAPPERS_GROUP, CONTROL_PLANE_GROUP, NODE_GROUP};

use super::Options;
use super::metrics::Metrics;

/// kubeadm's binding of its token group to the nodeclient auto-approval.
pub const KUBEADM_BOOTSTRAP_BINDING: &str = "kubeadm:node-autoapprove-bootstrap";
/// kubeadm's binding of `system:nodes` to the selfnodeclient auto-approval.
pub const KUBEADM_RENEWAL_BINDING: &str = "kubeadm:node-autoapprove-certificate-rotation";
/// kubeadm's token group.
pub const KUBEADM_TOKEN_GROUP: &str = "system:bootstrappers:kubeadm:default-node-token";

/// How long a "still auto-approved" answer is asked again before it counts: the RBAC
/// authorizer reads an informer cache, so a binding deleted a moment ago can still allow
/// the request for a while (seen on a real v1.36 API server right after
/// `install --apply --manage-renewals`).
pub const RBAC_PROPAGATION: Duration = Duration::from_secs(10);

/// One kind of kubelet client CSR another approver may decide first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// CSRs of kubeflavor's own tokens (node or control-plane group).
    KubeflavorTokens,
    /// CSRs of other bootstrap tokens (kubeadm's group, or every bootstrapper).
    OtherTokens,
    /// Nodes renewing their own certificates.
    Renewals,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::KubeflavorTokens => "kubeflavor_tokens",
            Kind::OtherTokens => "other_tokens",
            Kind::Renewals => "renewals",
        }
    }
}

/// The requesters kube-controller-manager's approver would review for `kind`, and the
/// subresource it reviews them for.
fn requesters(kind: Kind) -> (Vec<(String, Vec<&'static str>)>, &'static str) {
    let bootstrap = |group: &'static str| {
        (
            "system:bootstrap:kfchck".to_string(),
            vec![BOOTSTRAPPERS_GROUP, group, "system:authenticated"],
        )
    };
    match kind {
        Kind::KubeflavorTokens => (
            vec![bootstrap(NODE_GROUP), bootstrap(CONTROL_PLANE_GROUP)],
            "nodeclient",
        ),
        Kind::OtherTokens => (vec![bootstrap(KUBEADM_TOKEN_GROUP)], "nodeclient"),
        Kind::Renewals => (
            vec![(
                "system:node:kubeflavor-renewal-check".to_string(),
                vec!["system:nodes", "system:authenticated"],
            )],
            "selfnodeclient",
        ),
    }
}

fn review(user: &str, groups: &[&str], subresource: &str) -> SubjectAccessReview {
    SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some(user.into()),
            groups: Some(groups.iter().map(|g| g.to_string()).collect()),
            resource_attributes: Some(ResourceAttributes {
                group: Some("certificates.k8s.io".into()),
                resource: Some("certificatesigningrequests".into()),
                subresource: Some(subresource.into()),
                verb: Some("create".into()),
                version: Some("*".into()),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    }
}

/// `Some(reason)` when kube-controller-manager auto-approves CSRs of `kind` (the reason
/// is the authorizer's: which binding allows it).
pub async fn auto_approved(
    client: &kube::Client,
    kind: Kind,
) -> Result<Option<String>, kube::Error> {
    let api: Api<SubjectAccessReview> = Api::all(client.clone());
    let (requesters, subresource) = requesters(kind);
    for (user, groups) in requesters {
        let answer = api
            .create(&PostParams::default(), &review(&user, &groups, subresource))
            .await?;
        let status = answer.status.unwrap_or_default();
        if status.allowed {
            return Ok(Some(status.reason.unwrap_or_else(|| "allowed".into())));
        }
    }
    Ok(None)
}

/// [`auto_approved`], asked again (with growing pauses) while it says yes, for at most
/// `within`: the answer once a deleted binding has left the authorizer's cache.
pub async fn auto_approved_within(
    client: &kube::Client,
    kind: Kind,
    within: Duration,
) -> Result<Option<String>, kube::Error> {
    crate::cluster::until_settled(
        within,
        || auto_approved(client, kind),
        |answer| !matches!(answer, Ok(Some(_))),
    )
    .await
}

/// The start-up check (see the module documentation): an error when the controller must
/// not run with these options; warnings and the `competing_approvals` gauge otherwise.
pub async fn check(client: &kube::Client, opts: &Options, metrics: &Metrics) -> anyhow::Result<()> {
    for kind in [Kind::KubeflavorTokens, Kind::OtherTokens, Kind::Renewals] {
        let required = match kind {
            Kind::KubeflavorTokens => true,
            Kind::OtherTokens => opts.strict,
            Kind::Renewals => opts.manage_renewals,
        };
        // Waiting out the RBAC cache only matters where the answer stops the controller.
        let within = if required {
            RBAC_PROPAGATION
        } else {
            Duration::ZERO
        };
        let reason = match auto_approved_within(client, kind, within).await {
            Ok(reason) => reason,
            Err(e) if required => {
                return Err(anyhow::anyhow!(
                    "cannot check who else approves kubelet CSRs: {e} (the controller needs create on \
                     subjectaccessreviews: run 'kubeflavor install --apply' of this version)"
                ));
            }
            Err(e) => {
                tracing::warn!(error = %e, kind = kind.as_str(), "cannot check whether kube-controller-manager auto-approves these CSRs");
                continue;
            }
        };
        metrics.competing_approval(kind.as_str(), reason.is_some());
        if let Some(reason) = reason {
            competing(kind, opts, &reason)?;
        }
    }
    Ok(())
}

/// What to do when kube-controller-manager auto-approves CSRs of `kind` (`reason`: the
/// authorizer's): refuse to start where that defeats kubeflavor or the options asked for,
/// warn otherwise.
fn competing(kind: Kind, opts: &Options, reason: &str) -> anyhow::Result<()> {
    match kind {
        Kind::KubeflavorTokens => Err(anyhow::anyhow!(
            "kube-controller-manager approves every CSR of kubeflavor's tokens, for any node name, \
             because their group may create certificatesigningrequests/nodeclient ({reason}) \
             (delete that binding: kubeflavor's tokens must never be auto-approved)"
        )),
        Kind::OtherTokens if opts.strict => Err(anyhow::anyhow!(
            "--strict has no effect here: kube-controller-manager approves other tokens' CSRs first, \
             because they may create certificatesigningrequests/nodeclient ({reason}) \
             (run 'kubeflavor install --apply --sole-approver', or delete that binding, e.g. \
             'kubectl delete clusterrolebinding {KUBEADM_BOOTSTRAP_BINDING}')"
        )),
        Kind::OtherTokens => {
            tracing::warn!(
                reason,
                "kube-controller-manager auto-approves the CSRs of other bootstrap tokens (kubeadm's): such a token \
                 can take a node name bound to a kubeflavor token. Make kubeflavor the only approver with \
                 'kubeflavor install --apply --sole-approver'"
            );
            Ok(())
        }
        Kind::Renewals if opts.manage_renewals => Err(anyhow::anyhow!(
            "--manage-renewals has no effect here: kube-controller-manager approves every node's renewal first, \
             because system:nodes may create certificatesigningrequests/selfnodeclient ({reason}) \
             (run 'kubeflavor install --apply --manage-renewals', or delete that binding, e.g. \
             'kubectl delete clusterrolebinding {KUBEADM_RENEWAL_BINDING}', then start the controller again)"
        )),
        Kind::Renewals => {
            tracing::info!(
                reason,
                "kube-controller-manager approves nodes' renewals (a revoked node keeps renewing); \
                 'kubeflavor install --apply --manage-renewals' hands them to kubeflavor"
            );
            Ok(())
        }
    }
}
