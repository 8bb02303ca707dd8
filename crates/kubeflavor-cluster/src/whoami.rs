//! Who the caller is, as the API server sees it: a SelfSubjectReview. Minting records it as
//! a token's issuer; revocation records it in the revocation list and the trail.

use k8s_openapi::api::authentication::v1::SelfSubjectReview;
use kube::api::PostParams;
use kube::{Api, Client};

/// The caller's user name as the API server sees it (a SelfSubjectReview). `None`, with a
/// warning, when the server does not answer it: the token is then minted without
/// issued-by rather than not at all.
pub async fn caller_name(client: &Client) -> Option<String> {
    let reviews: Api<SelfSubjectReview> = Api::all(client.clone());
    match reviews
        .create(&PostParams::default(), &SelfSubjectReview::default())
        .await
    {
        Ok(review) => {
            let name = review
                .status
                .and_then(|s| s.user_info)
                .and_then(|u| u.username)
                .filter(|u| !u.is_empty());
            if name.is_none() {
                tracing::warn!("the SelfSubjectReview named no user; minting without issued-by");
            }
            name
        }
        Err(err) => {
            tracing::warn!(error = %err, "cannot ask the API server who is minting (SelfSubjectReview); minting without issued-by");
            None
        }
    }
}
