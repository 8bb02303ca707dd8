//! Shared helpers of the controller tests: a testkube cluster with kubeflavor's CRDs, real
//! kube-rs clients for the admin, bootstrap tokens and node identities, and an in-process
//! controller that can be stopped at a chosen step.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::core::v1::{Node, Secret};
use kube::api::PostParams;
use kube::config::Kubeconfig;
use kube::runtime::wait::await_condition;
use kube::{Api, Client, ResourceExt};
#[allow(unused_imports)]
use kubeflavor::controller::Options as _Options;
use kubeflavor::controller::{self, Options, Runtime, Step, StepHook};
use kubeflavor_cluster::crd::{Flavor, FlavorBinding};
use kubeflavor_core::token::BootstrapToken;
use tokio::sync::oneshot;

// The controller suites take these through `use crate::harness::*`.
pub use crate::support::token_secret::{TokenSecret, name_of};
pub use crate::support::{client_from, within};

use crate::support::Env;

/// The flavor label kubeflavor puts on a Node.
pub const FLAVOR_KEY: &str = "kubeflavor.node-restriction.kubernetes.io/flavor";
/// A label the tests' flavors carry (a key no kubelet may set).
pub const TIER_KEY: &str = "tier.node-restriction.kubernetes.io/class";

pub struct Harness {
    pub env: Env,
    pub admin: Client,
    /// Keys of the CSRs filed by `submit_csr`, to build node identities once issued.
    keys: Mutex<BTreeMap<String, String>>,
}

impl Harness {
    /// testkube (or the cluster of KUBEFLAVOR_E2E_KUBECONFIG) with `kubeflavor install
    /// --apply` done: CRDs and RBAC exactly as a user installs them.
    pub async fn start() -> Harness {
        Harness::start_with(Env::start().await).await
    }

    /// Like [`Harness::start`], but on a real cluster the tests of one binary that start
    /// this way take turns: for tests that change who approves what cluster-wide.
    pub async fn start_serial() -> Harness {
        Harness::start_with(Env::start_serial().await).await
    }

    async fn start_with(env: Env) -> Harness {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(
                tracing_subscriber::EnvFilter::try_from_env("KUBEFLAVOR_TEST_LOG")
                    .unwrap_or_else(|_| "warn".into()),
            )
            .with_test_writer()
            .try_init();
        env.install().await;
        let admin = env.client.clone();
        Harness {
            env,
            admin,
            keys: Mutex::new(BTreeMap::new()),
        }
    }

    /// `kubeflavor install --apply --replicas 0 --sole-approver`, then the binding of its
    /// sole-approver policy deleted: on a shared cluster that policy would refuse other
    /// runs' RBAC writes (their own bootstrap grants). A test that needs the policy binds a
    /// copy scoped to its run ([`Harness::bind_sole_approver_policy_to_run`]).
    /// Returns what install printed.
    pub async fn install_sole_approver(&self) -> String {
        use k8s_openapi::api::admissionregistration::v1::ValidatingAdmissionPolicyBinding;
        use kubeflavor_core::admission::sole_approver::POLICY_NAME;
        let said = self
            .env
            .kf(&["install", "--apply", "--replicas", "0", "--sole-approver"])
            .await
            .expect_ok()
            .to_string();
        match Api::<ValidatingAdmissionPolicyBinding>::all(self.admin.clone())
            .delete(POLICY_NAME, &Default::default())
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => panic!("delete the policy's cluster-wide binding: {e}"),
        }
        // The API server enforces a deleted binding until its policy cache hears of it:
        // wait until a role the policy refuses (of this run, harmless with no binding) is
        // accepted.
        let probe = self.nodeclient_role("sole-unbound-probe", None);
        self.until_policy_refuses(&probe, false, "the sole-approver policy's binding gone")
            .await;
        said
    }

    /// A ClusterRole of this run granting create on certificatesigningrequests/nodeclient
    /// (what the sole-approver policy refuses; harmless while nothing binds it).
    fn nodeclient_role(
        &self,
        base: &str,
        label: Option<(String, String)>,
    ) -> k8s_openapi::api::rbac::v1::ClusterRole {
        use kubeflavor_core::admission::sole_approver::NODECLIENT;
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": self.name(base),
                         "labels": label.map(|(k, v)| serde_json::json!({k: v}))},
            "rules": [{"apiGroups": ["certificates.k8s.io"], "resources": [NODECLIENT],
                       "verbs": ["create"]}],
        }))
        .expect("probe role")
    }

    /// The label that scopes [`Harness::bind_sole_approver_policy_to_run`]'s copy.
    pub fn run_label(&self) -> (String, String) {
        ("kubeflavor.io/e2e-run".into(), self.env.run_id.clone())
    }

    /// The sole-approver policy `install` applied, copied under a name of this run with one
    /// more match condition (objects labelled [`Harness::run_label`]) and bound; returns once
    /// the API server enforces it (a role of this run granting the auto-approval, harmless
    /// with no binding, is refused). The returned name is the copy's and its binding's.
    pub async fn bind_sole_approver_policy_to_run(&self) -> String {
        use k8s_openapi::api::admissionregistration::v1::{
            MatchCondition, ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
            ValidatingAdmissionPolicyBindingSpec,
        };
        use kubeflavor_core::admission::sole_approver::POLICY_NAME;
        let name = self.name("sole-approver");
        let (key, value) = self.run_label();
        let policies = Api::<ValidatingAdmissionPolicy>::all(self.admin.clone());
        let installed = policies.get(POLICY_NAME).await.expect("install's policy");
        let mut spec = installed.spec.expect("a spec");
        spec.match_conditions = Some(vec![MatchCondition {
            name: "this-test-run".into(),
            expression: format!(
                "has(object.metadata.labels) && '{key}' in object.metadata.labels \
                 && object.metadata.labels['{key}'] == '{value}'"
            ),
        }]);
        let copy = ValidatingAdmissionPolicy {
            metadata: kube::api::ObjectMeta {
                name: Some(name.clone()),
                ..Default::default()
            },
            spec: Some(spec),
            status: None,
        };
        policies
            .create(&Default::default(), &copy)
            .await
            .expect("policy copy");
        let binding = ValidatingAdmissionPolicyBinding {
            metadata: kube::api::ObjectMeta {
                name: Some(name.clone()),
                ..Default::default()
            },
            spec: ValidatingAdmissionPolicyBindingSpec {
                policy_name: name.clone(),
                validation_actions: vec!["Deny".into()],
                ..Default::default()
            },
        };
        Api::<ValidatingAdmissionPolicyBinding>::all(self.admin.clone())
            .create(&Default::default(), &binding)
            .await
            .expect("binding of the copy");
        let probe = self.nodeclient_role("sole-probe", Some((key, value)));
        self.until_policy_refuses(&probe, true, "the policy copy enforced")
            .await;
        name
    }

    /// Creates `probe` (a ClusterRole of this run the sole-approver policy refuses) until
    /// the API server refuses it (`refused`) or accepts it, deleting it whenever it is
    /// accepted. A policy binding takes effect, or stops, when the API server's policy
    /// cache hears of it, which nothing shows a client: asking is the only way to know, so
    /// this asks every 100 ms, bounded by `within`.
    async fn until_policy_refuses(
        &self,
        probe: &k8s_openapi::api::rbac::v1::ClusterRole,
        refused: bool,
        what: &str,
    ) {
        let roles = Api::<k8s_openapi::api::rbac::v1::ClusterRole>::all(self.admin.clone());
        let name = probe.metadata.name.clone().expect("named probe");
        within(what, async {
            loop {
                match roles.create(&Default::default(), probe).await {
                    Err(kube::Error::Api(e)) if e.code == 422 && refused => return,
                    Err(kube::Error::Api(e)) if e.code == 422 => {}
                    Ok(_) => {
                        roles
                            .delete(&name, &Default::default())
                            .await
                            .expect("probe deleted");
                        if !refused {
                            return;
                        }
                    }
                    Err(e) => panic!("probe: {e}"),
                }
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
        })
        .await;
    }

    /// Deletes the copy and binding [`Harness::bind_sole_approver_policy_to_run`] made.
    pub async fn unbind_sole_approver_policy_copy(&self, name: &str) {
        use k8s_openapi::api::admissionregistration::v1::{
            ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
        };
        Api::<ValidatingAdmissionPolicyBinding>::all(self.admin.clone())
            .delete(name, &Default::default())
            .await
            .expect("binding deleted");
        Api::<ValidatingAdmissionPolicy>::all(self.admin.clone())
            .delete(name, &Default::default())
            .await
            .expect("policy copy deleted");
    }

    /// A name unique to this run (a real cluster is shared between runs).
    pub fn name(&self, base: &str) -> String {
        self.env.name(base)
    }

    /// testkube itself, for fault injection and request counters (None on a real cluster).
    pub fn testkube(&self) -> Option<&testkube::TestCluster> {
        self.env.testkube.as_ref()
    }

    pub async fn flavor(&self, name: &str, labels: &[(&str, &str)], taints: &[(&str, &str, &str)]) {
        let mut spec = serde_json::json!({
            "labels": labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect::<BTreeMap<_, _>>(),
            "taints": taints.iter().map(|(k, v, e)| serde_json::json!({"key": k, "value": v, "effect": e})).collect::<Vec<_>>(),
        });
        if spec["taints"].as_array().is_some_and(|a| a.is_empty()) {
            spec.as_object_mut().unwrap().remove("taints");
        }
        let flavor: Flavor = serde_json::from_value(serde_json::json!({
            "apiVersion": "kubeflavor.io/v1alpha1",
            "kind": "Flavor",
            "metadata": {"name": name},
            "spec": spec,
        }))
        .expect("flavor object");
        Api::<Flavor>::all(self.admin.clone())
            .create(&PostParams::default(), &flavor)
            .await
            .expect("flavor created");
    }

    /// The Flavor `base-<run id>` with the label `TIER_KEY=gold`; returns its name.
    pub async fn gold_flavor(&self, base: &str) -> String {
        let name = self.name(base);
        self.flavor(&name, &[(TIER_KEY, "gold")], &[]).await;
        name
    }

    /// Creates a flavored token Secret as `token create --override-flavor-limits` writes it;
    /// returns the token.
    pub async fn token(
        &self,
        flavor: &str,
        max_nodes: u32,
        expiration: Option<jiff::Timestamp>,
    ) -> BootstrapToken {
        let token = BootstrapToken::generate().expect("randomness");
        self.token_as(token, flavor, max_nodes, expiration).await
    }

    /// Like [`Harness::token`], with the token given (to re-use an id).
    pub async fn token_as(
        &self,
        token: BootstrapToken,
        flavor: &str,
        max_nodes: u32,
        expiration: Option<jiff::Timestamp>,
    ) -> BootstrapToken {
        // Most tests' tokens never expire or bind several names, beyond a Flavor's default
        // limits (24h, 1 node): as an admin's `token create --override-flavor-limits`
        // writes them. The limits themselves have their own tests.
        TokenSecret::flavored(&token, flavor, max_nodes)
            .expires(expiration)
            .limits_overridden()
            .create(&self.env)
            .await;
        token
    }

    pub async fn token_secret(&self, token: &BootstrapToken) -> Option<Secret> {
        Api::<Secret>::namespaced(self.admin.clone(), "kube-system")
            .get_opt(&name_of(token))
            .await
            .expect("read token Secret")
    }

    /// The node names bound to a token, from its Secret's annotation.
    pub async fn bound_nodes(&self, token: &BootstrapToken) -> Vec<String> {
        self.token_secret(token)
            .await
            .and_then(|s| s.annotations().get("kubeflavor.io/bound-nodes").cloned())
            .map(|v| {
                v.split(',')
                    .filter(|s| !s.is_empty())
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default()
    }

    pub async fn bootstrap_client(&self, token: &BootstrapToken) -> Client {
        self.env.token_client(&token.expose()).await
    }

    /// The node identity `system:node:<node>`, from the certificate the cluster issued for
    /// the CSR `csr_name` (filed with `submit_csr`) and its key: what the kubelet gets.
    pub async fn node_client(&self, csr_name: &str) -> Client {
        let (cert, key) = self.node_identity(csr_name).await;
        let admin = Kubeconfig::read_from(&self.env.kubeconfig).expect("admin kubeconfig");
        let cluster = admin.clusters[0].cluster.clone().expect("cluster");
        use base64::Engine;
        let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
        let yaml = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {}\n    certificate-authority-data: {}\ncontexts:\n- name: c\n  context:\n    cluster: c\n    user: u\ncurrent-context: c\nusers:\n- name: u\n  user:\n    client-certificate-data: {}\n    client-key-data: {}\n",
            cluster.server.expect("server"),
            cluster.certificate_authority_data.expect("CA data"),
            b64(&cert),
            b64(&key),
        );
        client_from(&yaml).await
    }

    /// The certificate (PEM) the cluster issued for the CSR `csr_name` (filed with
    /// `submit_csr`) and its key (PEM).
    pub async fn node_identity(&self, csr_name: &str) -> (String, String) {
        let cond = |obj: Option<&CertificateSigningRequest>| {
            obj.and_then(|c| c.status.as_ref())
                .and_then(|s| s.certificate.as_ref())
                .is_some()
        };
        let csr = within(
            &format!("CSR {csr_name} to be issued"),
            await_condition(self.csrs(), csr_name, cond),
        )
        .await
        .expect("watch works")
        .expect("CSR exists");
        let cert = String::from_utf8(csr.status.unwrap().certificate.unwrap().0).expect("PEM");
        let key = self
            .keys
            .lock()
            .unwrap()
            .get(csr_name)
            .cloned()
            .expect("key of a CSR filed here");
        (cert, key)
    }

    /// What `kubeflavor node report` holds on the node whose certificate `csr_name` issued:
    /// its identity (PEM) and its client, as kubeflavor's commands hold one.
    pub async fn node_reporter(
        &self,
        csr_name: &str,
        node: &str,
    ) -> (kubeflavor::report::Identity, kubeflavor::connect::Cluster) {
        let (cert, key) = self.node_identity(csr_name).await;
        let cluster = kubeflavor::connect::Cluster {
            client: self.node_client(csr_name).await,
            origin: kubeflavor::connect::Origin {
                server: String::new(),
                kubeconfig: format!("the test's identity of {node}"),
                context: String::new(),
            },
            ca_certs_der: Vec::new(),
        };
        let identity = kubeflavor::report::Identity {
            cert_pem: cert.into_bytes(),
            key_pem: zeroize::Zeroizing::new(key.into_bytes()),
        };
        (identity, cluster)
    }

    /// The cluster CA (what issues kubelet client certificates), written to `dir` for
    /// `serve --node-client-ca-file`.
    pub fn cluster_ca(&self, dir: &std::path::Path) -> std::path::PathBuf {
        let path = dir.join("ca.crt");
        let admin = std::fs::read_to_string(&self.env.kubeconfig).expect("admin kubeconfig");
        crate::support::https::write_cluster_ca(&admin, &path).expect("the cluster CA");
        path
    }

    /// A node `node` of `flavor` as a kubelet joins: a token of one use, the CSR `csr`
    /// filed with it and approved, the Node registered tainted unverified.
    pub async fn join_and_register(&self, flavor: &str, node: &str, csr: &str) {
        let t = self.token(flavor, 1, None).await;
        self.submit_csr(&self.bootstrap_client(&t).await, csr, node)
            .await;
        assert_eq!(self.decision(csr).await, "Approved");
        self.register_node(
            csr,
            node,
            &[],
            &[("kubeflavor.io/unverified", "NoSchedule")],
        )
        .await;
    }

    /// Files a kubelet client CSR for `node` as `client` (a bootstrap identity).
    pub async fn submit_csr(
        &self,
        client: &Client,
        csr_name: &str,
        node: &str,
    ) -> CertificateSigningRequest {
        let (csr, key) = submit_csr_with(
            client,
            csr_name,
            &format!("system:node:{node}"),
            &["system:nodes"],
        )
        .await;
        self.keys.lock().unwrap().insert(csr_name.to_string(), key);
        csr
    }

    /// Files a kubelet client CSR for `node` as `client` with the key of the CSR
    /// `key_of` filed here before: a kubelet retrying with the key it holds.
    pub async fn resubmit_csr(
        &self,
        client: &Client,
        csr_name: &str,
        node: &str,
        key_of: &str,
    ) -> CertificateSigningRequest {
        let key = self
            .keys
            .lock()
            .unwrap()
            .get(key_of)
            .cloned()
            .expect("key of a CSR filed here");
        let pair = rcgen::KeyPair::from_pem(&key).expect("a key pair");
        let csr = submit_csr_for(
            client,
            csr_name,
            &format!("system:node:{node}"),
            &["system:nodes"],
            &pair,
        )
        .await;
        self.keys.lock().unwrap().insert(csr_name.to_string(), key);
        csr
    }

    pub fn csrs(&self) -> Api<CertificateSigningRequest> {
        Api::all(self.admin.clone())
    }

    pub fn bindings(&self) -> Api<FlavorBinding> {
        Api::all(self.admin.clone())
    }

    pub fn nodes(&self) -> Api<Node> {
        Api::all(self.admin.clone())
    }

    /// Waits until the CSR is Approved or Denied and returns it.
    pub async fn decided(&self, csr: &str) -> CertificateSigningRequest {
        let cond = |obj: Option<&CertificateSigningRequest>| {
            obj.is_some_and(|c| condition_type(c).is_some())
        };
        within(
            &format!("CSR {csr} to be decided"),
            await_condition(self.csrs(), csr, cond),
        )
        .await
        .expect("watch works")
        .expect("CSR exists")
    }

    /// Registers the Node as its own node identity would (the kubelet's first write).
    pub async fn register_node(
        &self,
        csr_name: &str,
        node: &str,
        labels: &[(&str, &str)],
        taints: &[(&str, &str)],
    ) -> Node {
        let client = self.node_client(csr_name).await;
        let node_obj: Node = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": node,
                "labels": labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect::<BTreeMap<_, _>>(),
            },
            "spec": {
                "taints": taints.iter().map(|(k, e)| serde_json::json!({"key": k, "effect": e})).collect::<Vec<_>>(),
            },
        }))
        .unwrap();
        Api::<Node>::all(client)
            .create(&PostParams::default(), &node_obj)
            .await
            .expect("node registers itself")
    }

    /// Deletes the revoked binding of `node` once the controller has tainted its Node
    /// `kubeflavor.io/revoked`: the mark that stands after the binding is gone.
    pub async fn delete_revoked_binding(&self, node: &str) {
        self.node_until(node, "tainted revoked", |n| {
            has_taint(n, "kubeflavor.io/revoked")
        })
        .await;
        self.bindings()
            .delete(node, &kube::api::DeleteParams::default())
            .await
            .expect("the revoked binding deleted");
    }

    /// Waits until the Node satisfies `pred`.
    pub async fn node_until(&self, node: &str, what: &str, pred: impl Fn(&Node) -> bool) -> Node {
        let cond = move |obj: Option<&Node>| obj.is_some_and(&pred);
        within(
            &format!("Node {node}: {what}"),
            await_condition(self.nodes(), node, cond),
        )
        .await
        .expect("watch works")
        .expect("node exists")
    }

    pub async fn flavor_until(
        &self,
        flavor: &str,
        what: &str,
        pred: impl Fn(&Flavor) -> bool,
    ) -> Flavor {
        let cond = move |obj: Option<&Flavor>| obj.is_some_and(&pred);
        within(
            &format!("Flavor {flavor}: {what}"),
            await_condition(Api::<Flavor>::all(self.admin.clone()), flavor, cond),
        )
        .await
        .expect("watch works")
        .expect("flavor exists")
    }

    pub async fn binding_until(
        &self,
        node: &str,
        what: &str,
        pred: impl Fn(&FlavorBinding) -> bool,
    ) -> FlavorBinding {
        let cond = move |obj: Option<&FlavorBinding>| obj.is_some_and(&pred);
        within(
            &format!("FlavorBinding {node}: {what}"),
            await_condition(self.bindings(), node, cond),
        )
        .await
        .expect("watch works")
        .expect("binding exists")
    }

    /// A controller of this test alone: it serves only the node and flavor names of this
    /// run, and competes for a Lease of its own, so the tests running in parallel on one
    /// real cluster each decide their own CSRs.
    pub fn options(&self, identity: &str) -> Options {
        let mut opts = Options::new("kube-system", identity);
        opts.leader_elect = false;
        opts.scope = Some(format!("-{}", self.env.run_id));
        opts.lease_name = self.name("kubeflavor-controller");
        opts
    }

    pub fn start_controller(&self, opts: Options) -> ControllerHandle {
        ControllerHandle::start(self.admin.clone(), opts, None)
    }
}

/// Waits until the admin trail (Events in kube-system) holds a note about
/// this CSR that names `cause`; returns that note. Events are written right after the
/// denial, so the wait is on a watch, never a sleep.
pub async fn trail_names(h: &Harness, csr: &str, causes: &[&str]) -> String {
    // The controller's Events only: a policy keeps anyone else from naming it.
    let reporter = kubeflavor_core::admission::trail::CONTROLLER_REPORTER;
    trail_event(h, reporter, csr, causes)
        .await
        .note
        .unwrap_or_default()
}

/// Waits until the admin trail holds an Event by `reporter` (its `reportingController`)
/// about the object named `regarding` whose note names one of `causes`; returns it.
pub async fn trail_event(
    h: &Harness,
    reporter: &str,
    regarding: &str,
    causes: &[&str],
) -> k8s_openapi::api::events::v1::Event {
    use futures::StreamExt;
    use kube::runtime::{WatchStreamExt, watcher};
    let api =
        Api::<k8s_openapi::api::events::v1::Event>::namespaced(h.admin.clone(), "kube-system");
    let stream = watcher(api, watcher::Config::default()).applied_objects();
    futures::pin_mut!(stream);
    within(
        &format!("an Event by {reporter} about {regarding} naming one of {causes:?}"),
        async {
            while let Some(ev) = stream.next().await {
                let Ok(ev) = ev else { continue };
                let about = ev.reporting_controller.as_deref() == Some(reporter)
                    && ev.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(regarding);
                let note = ev.note.as_deref().unwrap_or_default();
                if about && causes.iter().any(|c| note.contains(c)) {
                    return ev;
                }
            }
            panic!("event watch ended")
        },
    )
    .await
}

pub async fn submit_csr_with(
    client: &Client,
    csr_name: &str,
    cn: &str,
    orgs: &[&str],
) -> (CertificateSigningRequest, String) {
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).expect("key");
    let created = submit_csr_for(client, csr_name, cn, orgs, &key).await;
    (created, key.serialize_pem())
}

/// Files a CSR named `csr_name` for `cn` and `orgs` with `key`, as `client`.
async fn submit_csr_for(
    client: &Client,
    csr_name: &str,
    cn: &str,
    orgs: &[&str],
    key: &rcgen::KeyPair,
) -> CertificateSigningRequest {
    let csr = csr_object(csr_name, cn, orgs, key);
    let api = Api::<CertificateSigningRequest>::all(client.clone());
    let params = PostParams::default();
    crate::support::fresh(|| api.create(&params, &csr))
        .await
        .expect("CSR created")
}

/// A kubelet client CSR object named `csr_name` for `cn` and `orgs`, signed with `key`.
pub fn csr_object(
    csr_name: &str,
    cn: &str,
    orgs: &[&str],
    key: &rcgen::KeyPair,
) -> CertificateSigningRequest {
    let mut params = rcgen::CertificateParams::default();
    let mut dn = rcgen::DistinguishedName::new();
    for o in orgs {
        dn.push(rcgen::DnType::OrganizationName, *o);
    }
    dn.push(rcgen::DnType::CommonName, cn);
    params.distinguished_name = dn;
    let pem = params
        .serialize_request(key)
        .expect("csr")
        .pem()
        .expect("pem");
    kubeflavor::join::tls_bootstrap::kubelet_csr_object(Some(csr_name), &pem)
}

/// "Approved" or "Denied" when decided.
pub fn condition_type(csr: &CertificateSigningRequest) -> Option<String> {
    csr.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| (c.type_ == "Approved" || c.type_ == "Denied") && c.status == "True")
        .map(|c| c.type_.clone())
}

/// The conditions a bootstrap identity can read, without timestamps.
pub fn visible_conditions(
    csr: &CertificateSigningRequest,
) -> Vec<(String, String, Option<String>, Option<String>)> {
    csr.status
        .as_ref()
        .and_then(|s| s.conditions.clone())
        .unwrap_or_default()
        .into_iter()
        .map(|c| (c.type_, c.status, c.reason, c.message))
        .collect()
}

pub fn label<'a>(node: &'a Node, key: &str) -> Option<&'a str> {
    node.metadata.labels.as_ref()?.get(key).map(String::as_str)
}

/// The line of `node get`'s output that starts with `label`, without it.
pub fn standing_line(out: &str, label: &str) -> String {
    out.lines()
        .find_map(|l| l.strip_prefix(label))
        .unwrap_or_else(|| panic!("no {label} line in: {out}"))
        .trim_start()
        .to_string()
}

pub fn has_taint(node: &Node, key: &str) -> bool {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|ts| ts.iter().any(|t| t.key == key))
}

/// A controller running in-process until stopped.
pub struct ControllerHandle {
    stop: Option<oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
    pub metrics: kubeflavor::controller::metrics::Metrics,
    pub health: Arc<kubeflavor_cluster::ops::http::Health>,
}

impl ControllerHandle {
    pub fn start(client: Client, opts: Options, hook: Option<StepHook>) -> ControllerHandle {
        let mut rt = Runtime::new(client, opts);
        rt.hook = hook;
        let metrics = rt.metrics.clone();
        let health = rt.health.clone();
        let (tx, rx) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            controller::run(rt, async move {
                let _ = rx.await;
            })
            .await
            .expect("controller runs");
        });
        ControllerHandle {
            stop: Some(tx),
            task: Some(task),
            metrics,
            health,
        }
    }

    /// Asks for a clean shutdown and waits for it.
    pub async fn stop(mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(task) = self.task.take() {
            within("the controller to stop", task)
                .await
                .expect("controller task");
        }
    }

    /// Kills the controller as a crash would: no release of the Lease, nothing flushed.
    pub fn kill(mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
        // Dropping the sender would read as a shutdown request: keep it alive.
        std::mem::forget(self.stop.take());
    }
}

/// A step hook that freezes the controller right after the first time `at` happens:
/// every later step is refused too, as if the process had died there. `fired` resolves
/// when it froze.
pub fn freeze_after(at: Step) -> (StepHook, oneshot::Receiver<String>) {
    let (tx, rx) = oneshot::channel();
    let tx = Mutex::new(Some(tx));
    let frozen = AtomicBool::new(false);
    let hook: StepHook = Arc::new(move |name: &str, step: Step| {
        if frozen.load(Ordering::SeqCst) {
            return std::ops::ControlFlow::Break(());
        }
        if step == at {
            frozen.store(true, Ordering::SeqCst);
            if let Some(tx) = tx.lock().unwrap().take() {
                let _ = tx.send(name.to_string());
            }
            return std::ops::ControlFlow::Break(());
        }
        std::ops::ControlFlow::Continue(())
    });
    (hook, rx)
}

/// A step hook that runs `act` (blocking the reconcile, on a multi-thread runtime) right
/// after the first time `at` happens, then lets the controller go on: to make something
/// happen exactly between two writes of the controller.
pub fn act_after<F, Fut>(at: Step, act: F) -> StepHook
where
    F: Fn() -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()>,
{
    let done = AtomicBool::new(false);
    let handle = tokio::runtime::Handle::current();
    Arc::new(move |_name: &str, step: Step| {
        if step == at && !done.swap(true, Ordering::SeqCst) {
            tokio::task::block_in_place(|| handle.block_on(act()));
        }
        std::ops::ControlFlow::Continue(())
    })
}

/// A Node created by the admin, as one that joined some other way.
pub async fn create_node(admin: &Client, name: &str) {
    let node: Node = serde_json::from_value(serde_json::json!({"metadata": {"name": name}}))
        .expect("node object");
    Api::<Node>::all(admin.clone())
        .create(&PostParams::default(), &node)
        .await
        .expect("admin creates a node");
}

impl Harness {
    /// Deletes the Node `node` (as an admin, or its kubelet, may) and waits until it is gone.
    pub async fn delete_node(&self, node: &str) {
        self.nodes()
            .delete(node, &Default::default())
            .await
            .expect("node deleted");
        // Not `conditions::is_deleted("")`: with an empty uid it holds for any existing object.
        within(
            "the Node to be deleted",
            await_condition(self.nodes(), node, |n: Option<&Node>| n.is_none()),
        )
        .await
        .expect("watch works");
    }

    /// Waits until the token's Secret is gone.
    pub async fn token_gone(&self, token: &BootstrapToken) {
        let name = name_of(token);
        // Not `conditions::is_deleted("")`: with an empty uid it holds for any existing object.
        within(
            "the token Secret to be deleted",
            await_condition(
                Api::<Secret>::namespaced(self.admin.clone(), "kube-system"),
                &name,
                |s: Option<&Secret>| s.is_none(),
            ),
        )
        .await
        .expect("watch works");
    }

    /// Files `n` CSRs of the wrong shape (organization system:masters) with `token`, for
    /// one node name of this run; returns their names.
    pub async fn wrong_shape_csrs(
        &self,
        token: &BootstrapToken,
        base: &str,
        n: usize,
    ) -> Vec<String> {
        let client = self.bootstrap_client(token).await;
        let cn = format!("system:node:{}", self.name("node-x"));
        let csrs: Vec<String> = (0..n).map(|i| self.name(&format!("{base}-{i}"))).collect();
        for csr in &csrs {
            submit_csr_with(&client, csr, &cn, &["system:masters"]).await;
        }
        csrs
    }

    /// Waits until the CSR is decided: "Approved" or "Denied".
    pub async fn decision(&self, csr: &str) -> String {
        condition_type(&self.decided(csr).await).expect("decided")
    }

    /// Waits until each CSR is decided, and checks it was denied.
    pub async fn all_denied(&self, csrs: &[String]) {
        for csr in csrs {
            assert_eq!(
                condition_type(&self.decided(csr).await).as_deref(),
                Some("Denied"),
                "{csr}"
            );
        }
    }
}
