//! The token shape is a ceiling, second half: the controller holds every token to its Flavor's
//! `tokenLimits` when it judges the token's CSRs, whoever wrote the token Secret (an
//! admin's kubectl, a stolen join-token API identity). A token beyond them gets no
//! certificate unless an admin recorded an override on it (`token create
//! --override-flavor-limits` writes `kubeflavor.io/limits-override`).

use jiff::Timestamp;
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use kube::Api;
use kube::api::PostParams;
use kubeflavor_cluster::crd::Flavor;
use kubeflavor_core::token::BootstrapToken;

use crate::harness::*;
use crate::support::token_secret::TokenSecret;

/// The Flavor `name` with the label `TIER_KEY=gold` and tokenLimits of an hour and one
/// node.
async fn limited_flavor(h: &Harness, name: &str) {
    let flavor: Flavor = serde_json::from_value(serde_json::json!({
        "apiVersion": "kubeflavor.io/v1alpha1",
        "kind": "Flavor",
        "metadata": {"name": name},
        "spec": {
            "labels": std::collections::BTreeMap::from([(TIER_KEY, "gold")]),
            "tokenLimits": {"maxTTL": "1h", "maxNodes": 1},
        },
    }))
    .expect("flavor object");
    Api::<Flavor>::all(h.admin.clone())
        .create(&PostParams::default(), &flavor)
        .await
        .expect("flavor created");
}

/// The token of a stolen-identity attack: expiration 9999-12-30, max nodes 4294967295,
/// issued-by kubernetes-admin, written by an admin (no policy shapes admins' Secrets).
async fn boundless_token(h: &Harness, flavor: &str, overridden: bool) -> BootstrapToken {
    let token = BootstrapToken::generate().expect("randomness");
    h.env.made.token(&token);
    let far: Timestamp = "9999-12-30T00:00:00Z".parse().unwrap();
    let secret = TokenSecret::flavored(&token, flavor, u32::MAX)
        .expires(Some(far))
        .issued_by("kubernetes-admin");
    match overridden {
        true => secret.limits_overridden(),
        false => secret,
    }
    .create(&h.env)
    .await;
    token
}

/// Three CSRs of `token` for three names of `base`; their names.
async fn three_csrs(h: &Harness, token: &BootstrapToken, base: &str) -> Vec<(String, String)> {
    let client = h.bootstrap_client(token).await;
    let mut filed = Vec::new();
    for i in 0..3 {
        let (csr, node) = (
            h.name(&format!("{base}-csr-{i}")),
            h.name(&format!("{base}-{i}")),
        );
        h.submit_csr(&client, &csr, &node).await;
        filed.push((csr, node));
    }
    filed
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_beyond_its_flavors_limits_gets_no_certificate_without_an_override() {
    let h = Harness::start().await;
    let flavor = h.name("limited");
    limited_flavor(&h, &flavor).await;
    let ctl = h.start_controller(h.options("ctl"));

    let boundless = boundless_token(&h, &flavor, false).await;
    let denied = three_csrs(&h, &boundless, "boundless").await;
    for (csr, _) in &denied {
        assert_eq!(h.decision(csr).await, "Denied", "{csr}");
    }
    trail_names(&h, &denied[0].0, &["token_over_limits"]).await;
    for (_, node) in &denied {
        assert!(
            h.bindings().get_opt(node).await.expect("read").is_none(),
            "{node} is bound"
        );
    }

    // The same token with an admin's override on it: the Flavor's limits give way.
    let overridden = boundless_token(&h, &flavor, true).await;
    let approved = three_csrs(&h, &overridden, "overridden").await;
    for (csr, node) in &approved {
        assert_eq!(h.decision(csr).await, "Approved", "{csr}");
        let binding = h.bindings().get(node).await.expect("binding");
        assert_eq!(binding.spec.token_id, overridden.id().as_str());
    }
    let csrs = Api::<CertificateSigningRequest>::all(h.admin.clone());
    let approved_of_boundless =
        futures::future::join_all(denied.iter().map(|(csr, _)| csrs.get(csr)))
            .await
            .into_iter()
            .filter(|c| {
                c.as_ref()
                    .ok()
                    .and_then(|c| c.status.as_ref())
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Approved"))
            })
            .count();
    assert_eq!(approved_of_boundless, 0);

    let metrics = ctl.metrics.clone();
    ctl.stop().await;
    assert!(metrics.render().contains("cause=\"token_over_limits\""));
}
