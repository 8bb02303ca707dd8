//! Bootstrap token Secrets as the tests plant them: a flavored token exactly as `token
//! create` writes it, or a token of another tool (kubeadm's layout) in groups of the
//! test's choosing. Every test that writes a token Secret itself builds it here.

use std::num::NonZeroU32;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, PostParams};
use kubeflavor_core::flavor::FlavorName;
use kubeflavor_core::token::BootstrapToken;
use kubeflavor_core::token::meta::{Custody, FlavorTokenMeta};
use kubeflavor_core::token::secret::{
    KEY_AUTH_EXTRA_GROUPS, KEY_EXPIRATION, KEY_TOKEN_ID, KEY_TOKEN_SECRET,
    KEY_USAGE_AUTHENTICATION, KEY_USAGE_SIGNING, TOKEN_SECRET_NAMESPACE, TOKEN_SECRET_TYPE,
    TokenSecretData, TokenSecretObject, format_expiration, secret_name,
};

use super::Env;

/// kubeadm's group for the tokens `kubeadm token create` makes.
pub const KUBEADM_DEFAULT_GROUP: &str = "system:bootstrappers:kubeadm:default-node-token";

/// A token Secret to write: what it holds beyond the token itself.
pub struct TokenSecret {
    token: BootstrapToken,
    layout: Layout,
    expiration: Option<Timestamp>,
    signing: bool,
    /// Flavored tokens: the custody and the admin's override of the Flavor's limits.
    custody: Custody,
    limits_override: Option<String>,
}

enum Layout {
    /// kubeflavor's own: flavor, use limit, and the kubeflavor node group.
    Flavored {
        flavor: FlavorName,
        max_nodes: NonZeroU32,
    },
    /// Another tool's: authentication in these extra groups, no kubeflavor metadata.
    Plain { groups: String },
}

impl TokenSecret {
    /// A flavored token of `flavor`, for at most `max_nodes` nodes, as `token create`
    /// writes it.
    pub fn flavored(token: &BootstrapToken, flavor: &str, max_nodes: u32) -> TokenSecret {
        TokenSecret {
            token: token.clone(),
            layout: Layout::Flavored {
                flavor: flavor.parse().expect("flavor name"),
                max_nodes: NonZeroU32::new(max_nodes).expect("at least one use"),
            },
            expiration: None,
            signing: false,
            custody: Custody::default(),
            limits_override: None,
        }
    }

    /// A token of another tool in kubeadm's layout, authenticating in `groups` (comma
    /// separated, as `auth-extra-groups` holds them).
    pub fn plain(token: &BootstrapToken, groups: &str) -> TokenSecret {
        TokenSecret {
            token: token.clone(),
            layout: Layout::Plain {
                groups: groups.to_string(),
            },
            expiration: None,
            signing: false,
            custody: Custody::default(),
            limits_override: None,
        }
    }

    /// Expires at `at` (no expiration otherwise).
    pub fn expires(mut self, at: Option<Timestamp>) -> TokenSecret {
        self.expiration = at;
        self
    }

    /// Also signs cluster-info (`usage-bootstrap-signing`), as kubeadm's tokens do. Plain
    /// tokens only: flavored ones have the layout `token create` gives them.
    pub fn signing(mut self) -> TokenSecret {
        self.signing = true;
        self
    }

    /// Records who minted it (`kubeflavor.io/issued-by`). Flavored tokens only.
    pub fn issued_by(mut self, name: &str) -> TokenSecret {
        self.custody.issued_by = Some(name.to_string());
        self
    }

    /// Carries an admin's override of the Flavor's token limits, as `token create
    /// --override-flavor-limits` writes it for a token beyond them. Flavored tokens only.
    pub fn limits_overridden(mut self) -> TokenSecret {
        self.limits_override = Some(r#"{"by":"a test's admin"}"#.to_string());
        self
    }

    /// The Secret object.
    pub fn build(&self) -> Secret {
        match &self.layout {
            Layout::Flavored { flavor, max_nodes } => {
                let mut meta = FlavorTokenMeta::new(flavor.clone(), *max_nodes)
                    .with_custody(self.custody.clone());
                if let Some(by) = &self.limits_override {
                    meta = meta.with_limits_override(by.clone());
                }
                let data = TokenSecretData::kubeflavor_node(self.token.clone(), self.expiration);
                let obj = TokenSecretObject::new(&data, Some(&meta));
                Secret {
                    metadata: ObjectMeta {
                        name: Some(obj.name.clone()),
                        namespace: Some(obj.namespace.to_string()),
                        labels: Some(obj.labels.clone()),
                        annotations: Some(obj.annotations.clone()),
                        ..ObjectMeta::default()
                    },
                    type_: Some(obj.type_.to_string()),
                    string_data: Some(obj.string_data.clone()),
                    ..Secret::default()
                }
            }
            Layout::Plain { groups } => self.plain_secret(groups),
        }
    }

    fn plain_secret(&self, groups: &str) -> Secret {
        let mut data = std::collections::BTreeMap::from([
            (
                KEY_TOKEN_ID.to_string(),
                self.token.id().as_str().to_string(),
            ),
            (
                KEY_TOKEN_SECRET.to_string(),
                self.token.secret().expose().to_string(),
            ),
            (KEY_USAGE_AUTHENTICATION.to_string(), "true".to_string()),
            (KEY_AUTH_EXTRA_GROUPS.to_string(), groups.to_string()),
        ]);
        if let Some(at) = self.expiration {
            data.insert(KEY_EXPIRATION.to_string(), format_expiration(at));
        }
        if self.signing {
            data.insert(KEY_USAGE_SIGNING.to_string(), "true".to_string());
        }
        Secret {
            metadata: ObjectMeta {
                name: Some(secret_name(self.token.id())),
                namespace: Some(TOKEN_SECRET_NAMESPACE.to_string()),
                ..ObjectMeta::default()
            },
            type_: Some(TOKEN_SECRET_TYPE.to_string()),
            string_data: Some(data),
            ..Secret::default()
        }
    }

    /// Creates the Secret as the admin of `env`, and notes the token for the sweep of a
    /// real cluster.
    pub async fn create(&self, env: &Env) {
        Api::<Secret>::namespaced(env.client.clone(), TOKEN_SECRET_NAMESPACE)
            .create(&PostParams::default(), &self.build())
            .await
            .expect("token Secret created");
        env.made.token(&self.token);
    }
}

/// The name of a token's Secret in kube-system.
pub fn name_of(token: &BootstrapToken) -> String {
    secret_name(token.id())
}
