//! The join-token API's own identity, as a thief would use it: RBAC lets it create Secrets
//! in kube-system, and the ValidatingAdmissionPolicy `install --serve` ships makes the API
//! server refuse every Secret of it but a kubeflavor node token as kubeflavor mints it. So
//! a stolen token of it mints only kubeflavor tokens, which kubeflavor's controller judges;
//! no kubeadm token (approved by kube-controller-manager for any node name), no token with
//! a pre-filled binding. Admins are not affected.

use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use kubeflavor::cmd::install::{SERVE, TOKEN_POLICY, serve_user};
use kubeflavor_core::admission::token_shape::{self, DEFAULT_CEILINGS};
use kubeflavor_core::token::BootstrapToken;
use kubeflavor_core::token::meta::{
    BOUND_NODES_ANNOTATION, DENIALS_ANNOTATION, ISSUED_BY_ANNOTATION, LIMITS_OVERRIDE_ANNOTATION,
    MAX_NODES_ANNOTATION,
};
use kubeflavor_core::token::secret::{
    CONTROL_PLANE_GROUP, KEY_AUTH_EXTRA_GROUPS, KEY_EXPIRATION, KEY_TOKEN_ID,
    TOKEN_SECRET_NAMESPACE,
};

use crate::harness::*;
use crate::support::portal::service_account_token;
use crate::support::token_secret::{KUBEADM_DEFAULT_GROUP, TokenSecret};

/// How long a real API server may take to enforce a policy just applied (its admission
/// plugin reads policies from an informer).
const POLICY_PROPAGATION: Duration = Duration::from_secs(30);

/// Installs the join-token API (no pods) and returns its identity's view of kube-system
/// Secrets, once the API server enforces the policy on it.
async fn as_serve(h: &Harness) -> Api<Secret> {
    h.env
        .kf(&["install", "--apply", "--serve", "--replicas", "0"])
        .await
        .expect_ok();
    let own = service_account_token(&h.admin, "kubeflavor", SERVE, 600).await;
    let secrets = Api::<Secret>::namespaced(h.env.token_client(&own).await, TOKEN_SECRET_NAMESPACE);
    // A dry run stores nothing but goes through admission: poll until a token that
    // outlives the TTL ceiling is refused (this policy's newest rule). Without the policy
    // this gives up and the cases below fail on their own.
    let (_, mut probe) = minted(h);
    string_data(&mut probe).insert(KEY_EXPIRATION.into(), FAR.into());
    let dry = PostParams {
        dry_run: true,
        ..Default::default()
    };
    kubeflavor_cluster::cache_lag::until_settled(
        POLICY_PROPAGATION,
        || secrets.create(&dry, &probe),
        |answer| matches!(answer, Err(kube::Error::Api(s)) if s.code == 422),
    )
    .await
    .ok();
    secrets
}

/// The expiration of a stolen-identity attack: far past any ceiling.
const FAR: &str = "9999-12-30T00:00:00Z";

/// A kubeflavor node token Secret of a fresh token exactly as the join-token API mints it
/// (an hour to live, issued by its own identity); the token is noted for the sweep.
fn minted(h: &Harness) -> (BootstrapToken, Secret) {
    let token = BootstrapToken::generate().expect("randomness");
    h.env.made.token(&token);
    let secret = TokenSecret::flavored(&token, &h.name("shape"), 1)
        .expires(Some(Timestamp::now() + SignedDuration::from_hours(1)))
        .issued_by(&serve_user("kubeflavor"))
        .build();
    (token, secret)
}

fn annotations(secret: &mut Secret) -> &mut std::collections::BTreeMap<String, String> {
    secret
        .metadata
        .annotations
        .as_mut()
        .expect("minted with annotations")
}

fn string_data(secret: &mut Secret) -> &mut std::collections::BTreeMap<String, String> {
    secret.string_data.as_mut().expect("built with stringData")
}

/// The API server's answer to `secret` from the serve identity must be the policy's 422
/// naming `rule` (a message of `token_shape::rules`). A Secret it did store is deleted
/// before the test fails.
async fn assert_refused(
    h: &Harness,
    secrets: &Api<Secret>,
    secret: &Secret,
    what: &str,
    rule: &str,
) {
    assert!(
        token_shape::rules(&DEFAULT_CEILINGS)
            .iter()
            .any(|r| r.message == rule),
        "{what}: not a rule's message: {rule}"
    );
    let name = secret.metadata.name.clone().expect("named");
    match secrets.create(&PostParams::default(), secret).await {
        Err(kube::Error::Api(status)) => {
            assert_eq!(
                (status.code, status.reason.as_str()),
                (422, "Invalid"),
                "{what}: {status:?}"
            );
            assert_eq!(
                status.message,
                format!(
                    "secrets \"{name}\" is forbidden: ValidatingAdmissionPolicy '{TOKEN_POLICY}' with \
                     binding '{TOKEN_POLICY}' denied request: {rule}"
                ),
                "{what}"
            );
        }
        Ok(_) => {
            let _ = Api::<Secret>::namespaced(h.admin.clone(), TOKEN_SECRET_NAMESPACE)
                .delete(&name, &DeleteParams::default())
                .await;
            panic!("{what}: the join-token API's identity created it");
        }
        Err(e) => panic!("{what}: {e}"),
    }
}

fn rule_about(start: &str) -> String {
    token_shape::rules(&DEFAULT_CEILINGS)
        .into_iter()
        .map(|r| r.message)
        .find(|m| m.starts_with(start))
        .unwrap_or_else(|| panic!("no rule starts with {start:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_serve_identity_cannot_create_a_kubeadm_token_secret() {
    let h = Harness::start().await;
    let secrets = as_serve(&h).await;
    let groups = rule_about(&format!("data.{KEY_AUTH_EXTRA_GROUPS} must be"));

    // kubeflavor's layout in every other respect, in kubeadm's group: kube-controller-manager
    // would approve its CSRs for any node name.
    let (_, mut kubeadm) = minted(&h);
    string_data(&mut kubeadm).insert(KEY_AUTH_EXTRA_GROUPS.into(), KUBEADM_DEFAULT_GROUP.into());
    assert_refused(&h, &secrets, &kubeadm, "a kubeadm-group token", &groups).await;

    // kubeflavor's control-plane group: the join-token API never mints those.
    let (_, mut control_plane) = minted(&h);
    string_data(&mut control_plane)
        .insert(KEY_AUTH_EXTRA_GROUPS.into(), CONTROL_PLANE_GROUP.into());
    assert_refused(
        &h,
        &secrets,
        &control_plane,
        "a control-plane token",
        &groups,
    )
    .await;

    // A token exactly as `kubeadm token create` writes it.
    let token = BootstrapToken::generate().expect("randomness");
    h.env.made.token(&token);
    let plain = TokenSecret::plain(&token, KUBEADM_DEFAULT_GROUP)
        .signing()
        .expires(Some(Timestamp::now() + SignedDuration::from_hours(1)))
        .build();
    let keys = rule_about("data must hold exactly these keys");
    assert_refused(&h, &secrets, &plain, "kubeadm's own token layout", &keys).await;

    // An admin still creates kubeadm tokens (a dry run: nothing is stored).
    let dry = PostParams {
        dry_run: true,
        ..Default::default()
    };
    Api::<Secret>::namespaced(h.admin.clone(), TOKEN_SECRET_NAMESPACE)
        .create(&dry, &plain)
        .await
        .expect("the policy binds the join-token API's identity only");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_serve_identity_creates_only_kubeflavor_token_secrets_as_minted() {
    let h = Harness::start().await;
    let secrets = as_serve(&h).await;

    let opaque = Secret {
        metadata: kube::api::ObjectMeta {
            name: Some(h.name("opaque")),
            ..Default::default()
        },
        string_data: Some([("password".to_string(), "hunter2".to_string())].into()),
        ..Default::default()
    };
    assert_refused(
        &h,
        &secrets,
        &opaque,
        "an Opaque Secret",
        &rule_about("type must be"),
    )
    .await;

    let (_, mut bound) = minted(&h);
    bound
        .metadata
        .annotations
        .as_mut()
        .expect("minted with annotations")
        .insert(BOUND_NODES_ANNOTATION.into(), h.name("victim"));
    let rule = rule_about(&format!("metadata.annotations[{BOUND_NODES_ANNOTATION}]"));
    assert_refused(&h, &secrets, &bound, "a pre-filled binding", &rule).await;

    let (_, mut counted) = minted(&h);
    counted
        .metadata
        .annotations
        .as_mut()
        .expect("minted with annotations")
        .insert(DENIALS_ANNOTATION.into(), "-9".into());
    let rule = rule_about(&format!("metadata.annotations[{DENIALS_ANNOTATION}]"));
    assert_refused(&h, &secrets, &counted, "a pre-set denial count", &rule).await;

    let (_, mut forever) = minted(&h);
    string_data(&mut forever).remove(KEY_EXPIRATION);
    let rule = rule_about(&format!("data.{KEY_EXPIRATION} is missing"));
    assert_refused(&h, &secrets, &forever, "a token that never expires", &rule).await;

    // The name's id and data's token-id must be the same id.
    let (_, mut mismatched) = minted(&h);
    let other = BootstrapToken::generate().expect("randomness");
    string_data(&mut mismatched).insert(KEY_TOKEN_ID.into(), other.id().to_string());
    let rule = rule_about("metadata.name must be bootstrap-token-<id>");
    assert_refused(&h, &secrets, &mismatched, "a name for another id", &rule).await;

    // What `mint` writes is allowed (a dry run: nothing is stored).
    let (_, fine) = minted(&h);
    let dry = PostParams {
        dry_run: true,
        ..Default::default()
    };
    secrets
        .create(&dry, &fine)
        .await
        .expect("a kubeflavor node token as minted passes the policy");
}

/// The token of a stolen-identity attack (expiration 9999-12-30, max nodes
/// 4294967295, issued-by kubernetes-admin), and each of its parts alone, is refused to the
/// serve identity, as is an override of a Flavor's limits; custody names the minter.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_serve_identity_mints_nothing_past_the_ceilings() {
    let h = Harness::start().await;
    let secrets = as_serve(&h).await;
    let ttl = rule_about(&format!("data.{KEY_EXPIRATION} must be at most"));

    let (_, mut attack) = minted(&h);
    string_data(&mut attack).insert(KEY_EXPIRATION.into(), FAR.into());
    annotations(&mut attack).insert(MAX_NODES_ANNOTATION.into(), "4294967295".into());
    annotations(&mut attack).insert(ISSUED_BY_ANNOTATION.into(), "kubernetes-admin".into());
    assert_refused(&h, &secrets, &attack, "a stolen-identity attack", &ttl).await;

    let (_, mut far) = minted(&h);
    string_data(&mut far).insert(KEY_EXPIRATION.into(), FAR.into());
    assert_refused(&h, &secrets, &far, "an expiration in 9999", &ttl).await;

    let (_, mut unshaped) = minted(&h);
    string_data(&mut unshaped).insert(KEY_EXPIRATION.into(), "2026-12-02T07:00:00+00:00".into());
    let shape = rule_about(&format!("data.{KEY_EXPIRATION} must be a UTC time"));
    assert_refused(
        &h,
        &secrets,
        &unshaped,
        "an expiration with an offset",
        &shape,
    )
    .await;

    let (_, mut wide) = minted(&h);
    annotations(&mut wide).insert(MAX_NODES_ANNOTATION.into(), "4294967295".into());
    let nodes = rule_about(&format!("metadata.annotations[{MAX_NODES_ANNOTATION}]"));
    assert_refused(&h, &secrets, &wide, "max nodes 4294967295", &nodes).await;

    let (_, mut admin) = minted(&h);
    annotations(&mut admin).insert(ISSUED_BY_ANNOTATION.into(), "kubernetes-admin".into());
    let custody = rule_about(&format!("metadata.annotations[{ISSUED_BY_ANNOTATION}]"));
    assert_refused(&h, &secrets, &admin, "issued-by kubernetes-admin", &custody).await;

    let (_, mut overridden) = minted(&h);
    annotations(&mut overridden).insert(
        LIMITS_OVERRIDE_ANNOTATION.into(),
        r#"{"by":"kubernetes-admin"}"#.into(),
    );
    let rule = rule_about(&format!(
        "metadata.annotations[{LIMITS_OVERRIDE_ANNOTATION}]"
    ));
    assert_refused(&h, &secrets, &overridden, "a limits override", &rule).await;

    // The ceilings themselves pass (a dry run: nothing is stored): a week, 100 nodes.
    let (_, mut most) = minted(&h);
    string_data(&mut most).insert(
        KEY_EXPIRATION.into(),
        kubeflavor_core::token::secret::format_expiration(
            Timestamp::now() + SignedDuration::from_hours(7 * 24),
        ),
    );
    annotations(&mut most).insert(MAX_NODES_ANNOTATION.into(), "100".into());
    let dry = PostParams {
        dry_run: true,
        ..Default::default()
    };
    secrets
        .create(&dry, &most)
        .await
        .expect("a token at the ceilings passes the policy");
}
