//! `TestCluster`: start, accessors (kubeconfigs, CA, URL, identities), fault hooks,
//! counters, shutdown.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use base64::Engine;
use jiff::Timestamp;
use serde_json::json;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::authn::{ServiceAccountIssuer, TokenSecretCache};
use crate::controllers::{self, Duties};
use crate::counters::Counters;
use crate::faults::Faults;
use crate::handlers::convert::to_storage;
use crate::pki::{Ca, PkiError};
use crate::server::{self, ServeError};
use crate::shared::Shared;
use crate::store::Store;
use crate::types::{IdentityKind, ObjectReader, ResourceKey, UserInfo};
use crate::{authz, resources};

/// Why a [`TestCluster`] did not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The CA or the admin certificate could not be made.
    #[error(transparent)]
    Pki(#[from] PkiError),
    /// The server could not start serving.
    #[error(transparent)]
    Serve(#[from] ServeError),
}

/// How long the bootstrap-token authenticator trails token Secret changes by default (the
/// real one reads an informer cache, a millisecond or two behind, longer under load): long
/// enough that a client which creates a token and uses it at once meets the 401 reliably,
/// short enough that a retry loop waits only a moment.
pub const DEFAULT_TOKEN_AUTH_LAG: Duration = Duration::from_millis(50);

/// Options for [`TestCluster`]; get one from [`TestCluster::builder`].
#[derive(Clone, Debug)]
pub struct TestClusterBuilder {
    duties: Duties,
    watch_history: usize,
    token_auth_lag: Duration,
    autoapprove_bootstrap: bool,
    autoapprove_rotation: bool,
}

impl Default for TestClusterBuilder {
    fn default() -> Self {
        TestClusterBuilder {
            duties: Duties::default(),
            watch_history: 10_000,
            token_auth_lag: DEFAULT_TOKEN_AUTH_LAG,
            autoapprove_bootstrap: true,
            autoapprove_rotation: true,
        }
    }
}

impl TestClusterBuilder {
    /// Switch the CSR signer on or off (on by default).
    pub fn csr_signer(mut self, on: bool) -> Self {
        self.duties.csr_signer = on;
        self
    }

    /// Switch kube-controller-manager's CSR approver (csrapproving: kubelet client CSRs
    /// approved after a SubjectAccessReview for `nodeclient`/`selfnodeclient`) on or off
    /// (on by default).
    pub fn csr_approver(mut self, on: bool) -> Self {
        self.duties.csr_approver = on;
        self
    }

    /// Seed kubeadm's ClusterRoleBinding `kubeadm:node-autoapprove-bootstrap` (kubeadm's
    /// token group may have its kubelet client CSRs auto-approved). On by default.
    pub fn kubeadm_autoapprove_bootstrap(mut self, on: bool) -> Self {
        self.autoapprove_bootstrap = on;
        self
    }

    /// Seed kubeadm's ClusterRoleBinding `kubeadm:node-autoapprove-certificate-rotation`
    /// (`system:nodes` may have their renewals auto-approved). On by default.
    pub fn kubeadm_autoapprove_certificate_rotation(mut self, on: bool) -> Self {
        self.autoapprove_rotation = on;
        self
    }

    /// How long after a bootstrap token Secret is created, changed or deleted the
    /// bootstrap-token authenticator sees it (the real one reads an informer cache).
    /// Default [`DEFAULT_TOKEN_AUTH_LAG`]; `Duration::ZERO` makes it see the store
    /// at once.
    pub fn token_auth_lag(mut self, lag: Duration) -> Self {
        self.token_auth_lag = lag;
        self
    }

    /// Switch the bootstrap signer of `kube-public/cluster-info` on or off.
    pub fn bootstrap_signer(mut self, on: bool) -> Self {
        self.duties.bootstrap_signer = on;
        self
    }

    /// Switch the cleaner of expired bootstrap token Secrets on or off.
    pub fn token_cleaner(mut self, on: bool) -> Self {
        self.duties.token_cleaner = on;
        self
    }

    /// Switch the garbage collector (ownerReferences, namespace cleanup) on or off.
    pub fn garbage_collector(mut self, on: bool) -> Self {
        self.duties.garbage_collector = on;
        self
    }

    /// How many change events the store keeps for watch resumption (default 10,000). A
    /// watch of a type from a resourceVersion that one of the type's dropped events came
    /// after gets a 410 Expired ERROR event.
    pub fn watch_history(mut self, events: usize) -> Self {
        self.watch_history = events;
        self
    }

    /// Start the cluster with these options.
    pub async fn start(self) -> Result<TestCluster, StartError> {
        TestCluster::start_with(self).await
    }
}

/// An in-memory Kubernetes API server on 127.0.0.1 with a fresh CA.
pub struct TestCluster {
    shared: Arc<Shared>,
    url: String,
    admin: crate::pki::CertAndKey,
    shutdown_tx: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

impl std::fmt::Debug for TestCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestCluster")
            .field("url", &self.url)
            .finish_non_exhaustive()
    }
}

fn seed(st: &mut crate::store::StoreState, options: &TestClusterBuilder, now: Timestamp) {
    let mut objects = authz::default_objects();
    objects.retain(|(key, obj)| {
        let name = obj["metadata"]["name"].as_str().unwrap_or("");
        key.resource != "clusterrolebindings"
            || match name {
                authz::AUTOAPPROVE_BOOTSTRAP_BINDING => options.autoapprove_bootstrap,
                authz::AUTOAPPROVE_ROTATION_BINDING => options.autoapprove_rotation,
                _ => true,
            }
    });
    for ns in ["default", "kube-system", "kube-public", "kube-node-lease"] {
        objects.push((
            ResourceKey::new("", "namespaces"),
            json!({"metadata": {"name": ns}}),
        ));
    }
    for (key, obj) in objects {
        let Some(info) = resources::resolve(&*st, &key.group, "v1", &key.resource) else {
            continue;
        };
        let obj = to_storage(&info, obj);
        let ns = obj["metadata"]["namespace"]
            .as_str()
            .unwrap_or("")
            .to_string();
        let name = obj["metadata"]["name"].as_str().unwrap_or("").to_string();
        if st.get(&info.storage, Some(&ns), &name).is_none() {
            let mut obj = obj;
            if info.resource == "namespaces" {
                obj["status"] = json!({"phase": "Active"});
            }
            st.insert(&info.storage, obj, now);
        }
    }
    for ns in ["default", "kube-system", "kube-public", "kube-node-lease"] {
        crate::handlers::hooks::default_service_account(st, ns, now);
    }
}

/// kubeadm's cluster-info kubeconfig: one cluster with an empty name.
fn cluster_info_kubeconfig(server: &str, ca_pem: &str) -> String {
    let ca = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: \"\"\n  cluster:\n    certificate-authority-data: {ca}\n    \
         server: {server}\ncontexts: null\ncurrent-context: \"\"\npreferences: {{}}\nusers: null\n"
    )
}

impl TestCluster {
    /// Start a cluster with every controller duty on.
    pub async fn start() -> Result<TestCluster, StartError> {
        Self::builder().start().await
    }

    /// Options to start a cluster with: every duty on, the default token lag.
    pub fn builder() -> TestClusterBuilder {
        TestClusterBuilder::default()
    }

    async fn start_with(options: TestClusterBuilder) -> Result<TestCluster, StartError> {
        let ca = Ca::generate()?;
        let admin = ca.client_cert("kubernetes-admin", &["system:masters"])?;
        let tls = server::tls_config(&ca)?;
        let listener = TcpListener::bind(("127.0.0.1", 0))
            .await
            .map_err(ServeError::Bind)?;
        let addr = listener.local_addr().map_err(ServeError::Bind)?;
        let url = format!("https://{addr}");
        let store = Arc::new(Store::new(options.watch_history));
        {
            let now = Timestamp::now();
            let mut st = store.lock();
            seed(&mut st, &options, now);
            let cm = json!({
                "kind": "ConfigMap",
                "apiVersion": "v1",
                "metadata": {"name": "cluster-info", "namespace": "kube-public"},
                "data": {"kubeconfig": cluster_info_kubeconfig(&url, ca.cert_pem())},
            });
            st.insert(&ResourceKey::new("", "configmaps"), cm, now);
        }
        let (shutdown_tx, shutdown_rx) = watch::channel(false);
        let shared = Arc::new(Shared {
            store,
            ca,
            static_tokens: RwLock::new(BTreeMap::new()),
            faults: Faults::default(),
            counters: Counters::default(),
            shutdown: shutdown_rx.clone(),
            server_address: addr.to_string(),
            token_cache: Arc::new(TokenSecretCache::new(options.token_auth_lag)),
            sa_issuer: ServiceAccountIssuer::generate(),
            authz_webhook: Default::default(),
        });
        let tasks = vec![
            tokio::spawn(
                shared
                    .token_cache
                    .clone()
                    .follow(&shared.store, shutdown_rx.clone()),
            ),
            tokio::spawn(server::accept_loop(listener, tls, shared.clone())),
            tokio::spawn(controllers::run(
                shared.clone(),
                options.duties,
                shutdown_rx,
            )),
        ];
        Ok(TestCluster {
            shared,
            url,
            admin,
            shutdown_tx,
            tasks,
        })
    }

    /// `https://127.0.0.1:<port>`.
    pub fn server_url(&self) -> &str {
        &self.url
    }

    /// How long the bootstrap-token authenticator trails token Secret changes (see
    /// [`TestClusterBuilder::token_auth_lag`]).
    pub fn token_auth_lag(&self) -> Duration {
        self.shared.token_cache.lag()
    }

    /// Resolves once the bootstrap-token authenticator sees every token Secret change made
    /// so far: after it, a token created (or deleted) before the call authenticates (or
    /// gets 401). What a test waits on instead of retrying a 401.
    pub async fn token_auth_caught_up(&self) {
        let rv = self.shared.store.lock().current_rv();
        self.shared.token_cache.caught_up(rv).await;
    }

    /// The cluster CA certificate (PEM).
    pub fn ca_pem(&self) -> &str {
        self.shared.ca.cert_pem()
    }

    /// A kubeconfig whose user authenticates with a client certificate and key (PEM).
    pub fn kubeconfig_for_client_cert(&self, cert_pem: &str, key_pem: &str) -> String {
        let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
        self.kubeconfig(&format!(
            "    client-certificate-data: {}\n    client-key-data: {}\n",
            b64(cert_pem),
            b64(key_pem)
        ))
    }

    /// A kubeconfig whose user sends `Authorization: Bearer <token>` (a bootstrap token, or
    /// one registered with [`TestCluster::register_static_token`]).
    pub fn kubeconfig_for_token(&self, token: &str) -> String {
        self.kubeconfig(&format!(
            "    token: {}\n",
            serde_json::to_string(token).unwrap_or_default()
        ))
    }

    /// A kubeconfig without credentials: requests run as `system:anonymous`.
    pub fn anonymous_kubeconfig(&self) -> String {
        self.kubeconfig("    {}\n")
    }

    /// The admin kubeconfig: client certificate CN `kubernetes-admin`, O `system:masters`.
    pub fn admin_kubeconfig(&self) -> String {
        self.kubeconfig_for_client_cert(&self.admin.cert_pem, &self.admin.key_pem)
    }

    /// Write [`TestCluster::admin_kubeconfig`] to `path`, for programs that take a file.
    pub fn write_admin_kubeconfig(&self, path: impl AsRef<Path>) -> std::io::Result<()> {
        std::fs::write(path, self.admin_kubeconfig())
    }

    fn kubeconfig(&self, user: &str) -> String {
        let ca = base64::engine::general_purpose::STANDARD.encode(self.ca_pem());
        let user = if user.trim() == "{}" {
            "  user: {}\n".to_string()
        } else {
            format!("  user:\n{user}")
        };
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: testkube\n  cluster:\n    certificate-authority-data: \
             {ca}\n    server: {url}\ncontexts:\n- name: testkube\n  context:\n    cluster: testkube\n    user: \
             testkube-user\ncurrent-context: testkube\npreferences: {{}}\nusers:\n- name: testkube-user\n{user}",
            url = self.url,
        )
    }

    /// A client certificate signed by the cluster CA: CN is the user, O the groups (at
    /// most two). Returns `(cert_pem, key_pem)`.
    pub fn issue_client_cert(
        &self,
        common_name: &str,
        groups: &[&str],
    ) -> Result<(String, String), PkiError> {
        let issued = self.shared.ca.client_cert(common_name, groups)?;
        Ok((issued.cert_pem.clone(), issued.key_pem.clone()))
    }

    /// Puts an authorization webhook before the Node and RBAC authorizers (a structured
    /// `AuthorizationConfiguration` whose first authorizer is `type: Webhook`), or removes
    /// it (`None`).
    pub fn set_authorization_webhook(&self, webhook: Option<crate::AuthorizationWebhook>) {
        *self
            .shared
            .authz_webhook
            .write()
            .unwrap_or_else(|p| p.into_inner()) = webhook.map(std::sync::Arc::new);
    }

    /// Accept `token` as a bearer token for `user` in `groups` (plus `system:authenticated`,
    /// which every authenticated identity gets).
    pub fn register_static_token(&self, token: &str, user: &str, groups: &[&str]) {
        let mut groups: Vec<String> = groups.iter().map(|g| g.to_string()).collect();
        if !groups.iter().any(|g| g == "system:authenticated") {
            groups.push("system:authenticated".into());
        }
        let info = UserInfo {
            kind: IdentityKind::StaticToken,
            name: user.into(),
            uid: String::new(),
            groups,
            extra: BTreeMap::new(),
        };
        self.shared
            .static_tokens
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(token.into(), info);
    }

    /// The CA certificate and key (PEM), e.g. to check issued certificates.
    pub fn ca_key_pem(&self) -> &str {
        self.shared.ca.key_pem()
    }

    /// Fault injection: failing or delayed requests, cut watches.
    pub fn faults(&self) -> &Faults {
        &self.shared.faults
    }

    /// Request counters by identity kind, verb and resource.
    pub fn counters(&self) -> &Counters {
        &self.shared.counters
    }

    /// Number of watch streams registered with the store right now.
    pub fn open_watches(&self) -> usize {
        self.shared.store.lock().watcher_count()
    }

    /// Read an object directly from the store (no HTTP, no authorization), as the API
    /// would return it.
    pub fn get_object(
        &self,
        group: &str,
        resource: &str,
        namespace: &str,
        name: &str,
    ) -> Option<serde_json::Value> {
        let st = self.shared.store.lock();
        st.get(&ResourceKey::new(group, resource), Some(namespace), name)
            .cloned()
    }

    /// Stop accepting connections, end every watch, and wait for the server tasks.
    pub async fn shutdown(mut self) {
        let _ = self.shutdown_tx.send(true);
        for task in self.tasks.drain(..) {
            let _ = task.await;
        }
    }
}

impl Drop for TestCluster {
    fn drop(&mut self) {
        // Best effort: the tasks see the signal and end on their own.
        let _ = self.shutdown_tx.send(true);
    }
}
