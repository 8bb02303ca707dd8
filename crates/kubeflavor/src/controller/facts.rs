//! The "dereference" stage: read everything a CSR decision depends on.
//!
//! A decision that approves must never rest on a stale cache: a watch cache that has not
//! yet seen a Node or a FlavorBinding would let a token take over an existing name (P3).
//! So the facts of a pending CSR are read straight from the API server (GETs), and the
//! writes that follow are guarded by resourceVersion / AlreadyExists, so a fact that
//! changes between read and write makes the write fail and the CSR is decided again.

use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::core::v1::{Node, Secret};
use kube::Api;
use kube::core::PartialObjectMeta;

use super::{Context, Error, TOKEN_NAMESPACE};
use crate::crd::{Flavor, FlavorBinding};

/// Node identities (renewals) are `system:node:<name>` (spec section 4).
pub use kubeflavor_core::csr::NODE_USER_PREFIX;
/// Bootstrap identities are `system:bootstrap:<token-id>` (spec section 1).
pub use kubeflavor_core::token::BOOTSTRAP_USER_PREFIX;

/// The CSR fields a decision reads, copied out of the object.
#[derive(Clone, Debug)]
pub struct CsrView {
    pub name: String,
    pub signer_name: String,
    pub usages: Vec<String>,
    pub username: String,
    pub groups: Vec<String>,
    /// The PEM bytes of `spec.request` (base64 is undone by k8s-openapi's ByteString).
    pub request: Vec<u8>,
    /// Already Approved or Denied: both are permanent, nothing left to decide.
    pub decided: bool,
}

/// Already Approved or Denied: both are permanent, nothing left to decide.
pub fn is_decided(csr: &CertificateSigningRequest) -> bool {
    csr.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| {
            cs.iter()
                .any(|c| (c.type_ == "Approved" || c.type_ == "Denied") && c.status == "True")
        })
}

impl CsrView {
    pub fn from_object(csr: &CertificateSigningRequest) -> Self {
        let decided = is_decided(csr);
        CsrView {
            name: csr.metadata.name.clone().unwrap_or_default(),
            signer_name: csr.spec.signer_name.clone(),
            usages: csr.spec.usages.clone().unwrap_or_default(),
            username: csr.spec.username.clone().unwrap_or_default(),
            groups: csr.spec.groups.clone().unwrap_or_default(),
            request: csr.spec.request.0.clone(),
            decided,
        }
    }

    /// The token id of a bootstrap requester.
    pub fn bootstrap_token_id(&self) -> Option<&str> {
        self.username.strip_prefix(BOOTSTRAP_USER_PREFIX)
    }
}

/// Everything read for one pending CSR.
#[derive(Clone, Debug)]
pub struct CsrFactsRead {
    pub csr: CsrView,
    /// The token Secret of a bootstrap requester, as read (its resourceVersion guards the
    /// reservation write).
    pub token_secret: Option<Secret>,
    /// The Flavor the token names, if it exists.
    pub flavor: Option<Flavor>,
    /// The FlavorBinding named after the node name in the CSR's CN.
    pub binding: Option<FlavorBinding>,
    /// Whether a Node of that name exists.
    pub node_exists: bool,
}

fn read_err(what: impl Into<String>) -> impl FnOnce(kube::Error) -> Error {
    let what = what.into();
    move |source| Error::Read { what, source }
}

/// Reads, for the CSR seen as `view`, the token Secret, its Flavor, and the binding and
/// Node of `node_name` (the CN's node name, when the CSR parsed far enough to have one).
pub async fn gather(
    ctx: &Context,
    view: CsrView,
    node_name: Option<&str>,
    flavor_of: impl Fn(&Secret) -> Option<String>,
) -> Result<CsrFactsRead, Error> {
    // The token (then its Flavor) and the name's binding and Node are independent reads:
    // issue them together so a decision waits for one round trip, not four.
    let token_and_flavor = async {
        let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), TOKEN_NAMESPACE);
        let token_secret = match view.bootstrap_token_id() {
            Some(id) => {
                let name = format!("bootstrap-token-{id}");
                secrets
                    .get_opt(&name)
                    .await
                    .map_err(read_err(format!("Secret {TOKEN_NAMESPACE}/{name}")))?
            }
            None => None,
        };
        let flavor = match token_secret.as_ref().and_then(&flavor_of) {
            Some(name) => Api::<Flavor>::all(ctx.client.clone())
                .get_opt(&name)
                .await
                .map_err(read_err(format!("Flavor {name}")))?,
            None => None,
        };
        Ok::<_, Error>((token_secret, flavor))
    };
    let binding = async {
        match node_name {
            Some(node) => Api::<FlavorBinding>::all(ctx.client.clone())
                .get_opt(node)
                .await
                .map_err(read_err(format!("FlavorBinding {node}"))),
            None => Ok(None),
        }
    };
    let node_exists = async {
        match node_name {
            Some(node) => {
                let meta: Option<PartialObjectMeta<Node>> = Api::<Node>::all(ctx.client.clone())
                    .get_metadata_opt(node)
                    .await
                    .map_err(read_err(format!("Node {node}")))?;
                Ok(meta.is_some())
            }
            None => Ok(false),
        }
    };
    let ((token_secret, flavor), binding, node_exists) =
        tokio::try_join!(token_and_flavor, binding, node_exists)?;
    Ok(CsrFactsRead {
        csr: view,
        token_secret,
        flavor,
        binding,
        node_exists,
    })
}
