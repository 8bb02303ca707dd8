//! Leaves a shared real cluster as the run found it: when an [`super::Env`] goes (also when
//! its test panicked), everything named after its run id is deleted, with the tokens its
//! commands printed and the objects they made that carry no run id.
//!
//! Nodes, Flavors, FlavorBindings, Rosters and their AdministratorLedgers, Sites, NodeReports, CSRs, ClusterRoles and ClusterRoleBindings, Leases,
//! ServiceAccounts, Events, and Pods, Secrets and ConfigMaps in `default` are found by the run id in their names (a CSR also by the node name it asks
//! for, an Event also by the controller that wrote it); token Secrets by their flavor label or by the
//! ids recorded in [`Made`], ClusterRoleBindings of fixed names by their names recorded there.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod, Secret};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use kube::api::{Api, DeleteParams, ListParams};
use kube::{Resource, ResourceExt};
use kubeflavor_cluster::crd::network::{NodeReport, Site};
use kubeflavor_cluster::crd::roster::{AdministratorLedger, Roster};
use kubeflavor_cluster::crd::{Flavor, FlavorBinding};
use kubeflavor_core::token::BootstrapToken;
use serde::de::DeserializeOwned;

/// What a run made that its name does not give away.
pub struct Made {
    /// When the run started (a second early, for clock skew with the API server).
    started: jiff::Timestamp,
    /// Ids of bootstrap tokens the run made or printed.
    tokens: Mutex<BTreeSet<String>>,
    /// The run wrote kube-system/kubeadm-certs (a name shared by every run).
    kubeadm_certs: AtomicBool,
    /// ClusterRoleBindings of fixed names the run made (kubeadm's, re-created).
    cluster_role_bindings: Mutex<BTreeSet<String>>,
}

impl Default for Made {
    fn default() -> Self {
        Made {
            started: jiff::Timestamp::now() - jiff::SignedDuration::from_secs(1),
            tokens: Default::default(),
            kubeadm_certs: Default::default(),
            cluster_role_bindings: Default::default(),
        }
    }
}

impl Made {
    pub fn token(&self, token: &BootstrapToken) {
        self.token_id(token.id().as_str());
    }

    pub fn token_id(&self, id: &str) {
        self.tokens.lock().unwrap().insert(id.to_string());
    }

    /// Records every bootstrap token (`<6>.<16>`) that appears in a command's output.
    pub fn tokens_in(&self, text: &str) {
        let words = text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '.'));
        for word in words {
            if let Ok(token) = word.parse::<BootstrapToken>() {
                self.token(&token);
            }
        }
    }

    /// Notes what a command is about to make (`certs upload` writes kubeadm-certs).
    pub fn command(&self, args: &[&str]) {
        if args.windows(2).any(|w| w == ["certs", "upload"]) {
            self.kubeadm_certs();
        }
    }

    pub fn kubeadm_certs(&self) {
        self.kubeadm_certs.store(true, Ordering::SeqCst);
    }

    /// Notes a ClusterRoleBinding of a fixed name the run is about to make.
    pub fn cluster_role_binding(&self, name: &str) {
        self.cluster_role_bindings
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(name.to_string());
    }
}

/// Deletes what the run `run_id` made on the cluster of `kubeconfig`. Runs on a thread of
/// its own, so it works from `Drop` inside or outside a runtime.
pub fn sweep(kubeconfig: &Path, run_id: &str, made: &Made) {
    let tokens: BTreeSet<String> = made
        .tokens
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    // A run that wrote kubeadm-certs held the certs suites' turn (`Env::start_serial`): the
    // token Secrets without a flavor made since it started (control-plane and proxy
    // tokens, tokens of other groups) are its own.
    let certs = made
        .kubeadm_certs
        .load(Ordering::SeqCst)
        .then_some(made.started);
    let bindings = made
        .cluster_role_bindings
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    let (kubeconfig, run_id) = (kubeconfig.to_path_buf(), run_id.to_string());
    let swept = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(sweep_async(&kubeconfig, &run_id, &tokens, &bindings, certs))
    })
    .join();
    if let Ok(Err(e)) = swept {
        eprintln!("warning: could not clean up run {e}");
    }
}

async fn sweep_async(
    kubeconfig: &Path,
    run_id: &str,
    tokens: &BTreeSet<String>,
    bindings: &BTreeSet<String>,
    certs_since: Option<jiff::Timestamp>,
) -> Result<(), String> {
    let text = std::fs::read_to_string(kubeconfig).map_err(|e| e.to_string())?;
    let client = super::client_from(&text).await;
    let named = |name: &str| name.contains(run_id);
    delete_where(Api::<FlavorBinding>::all(client.clone()), |o| {
        named(&o.name_any())
    })
    .await;
    delete_where(Api::<Node>::all(client.clone()), |o| named(&o.name_any())).await;
    // Pods bound to a run's nodes, and their Secrets and ConfigMaps (the revocation tests).
    // Deleted at once: no kubelet confirms their end, and a real cluster may run no pod
    // garbage collector.
    let pods = Api::<Pod>::namespaced(client.clone(), "default");
    if let Ok(list) = pods.list(&ListParams::default()).await {
        for pod in list.items.iter().filter(|o| named(&o.name_any())) {
            let force = DeleteParams::default().grace_period(0);
            let _ = pods.delete(&pod.name_any(), &force).await;
        }
    }
    delete_where(Api::<Secret>::namespaced(client.clone(), "default"), |o| {
        named(&o.name_any())
    })
    .await;
    delete_where(
        Api::<ConfigMap>::namespaced(client.clone(), "default"),
        |o| named(&o.name_any()),
    )
    .await;
    let csrs = delete_where(
        Api::<CertificateSigningRequest>::all(client.clone()),
        |csr| {
            let asked = kubeflavor_core::csr::client::requested_node_name(&csr.spec.request.0);
            let requester = csr.spec.username.as_deref().unwrap_or_default();
            named(&csr.name_any())
                || asked.as_deref().is_some_and(named)
                || named(requester)
                || tokens
                    .iter()
                    .any(|id| requester == format!("system:bootstrap:{id}"))
        },
    )
    .await;
    let system_secrets = Api::<Secret>::namespaced(client.clone(), "kube-system");
    delete_where(system_secrets.clone(), |s| {
        let id = s
            .name_any()
            .strip_prefix("bootstrap-token-")
            .map(str::to_string);
        let flavor = s
            .labels()
            .get("kubeflavor.io/flavor")
            .cloned()
            .unwrap_or_default();
        let made_in_turn = certs_since.is_some_and(|since| {
            flavor.is_empty()
                && s.type_.as_deref() == Some("bootstrap.kubernetes.io/token")
                && s.creation_timestamp().is_some_and(|t| t.0 >= since)
        });
        named(&flavor) || made_in_turn || id.is_some_and(|id| tokens.contains(&id))
    })
    .await;
    if certs_since.is_some()
        && let Ok(Some(certs)) = system_secrets.get_opt("kubeadm-certs").await
    {
        // Its proxy token first (garbage collection would take the Secret with it).
        for owner in certs
            .owner_references()
            .iter()
            .filter(|o| o.kind == "Secret")
        {
            let _ = system_secrets
                .delete(&owner.name, &DeleteParams::default())
                .await;
        }
        let _ = system_secrets
            .delete("kubeadm-certs", &DeleteParams::default())
            .await;
    }
    delete_where(Api::<Flavor>::all(client.clone()), |o| named(&o.name_any())).await;
    delete_where(Api::<Roster>::all(client.clone()), |o| named(&o.name_any())).await;
    delete_where(Api::<Site>::all(client.clone()), |o| named(&o.name_any())).await;
    delete_where(Api::<NodeReport>::all(client.clone()), |o| {
        named(&o.name_any())
    })
    .await;
    delete_where(Api::<AdministratorLedger>::all(client.clone()), |o| {
        named(&o.spec.roster)
    })
    .await;
    delete_where(Api::<ClusterRoleBinding>::all(client.clone()), |o| {
        named(&o.name_any()) || bindings.contains(&o.name_any())
    })
    .await;
    delete_where(Api::<ClusterRole>::all(client.clone()), |o| {
        named(&o.name_any())
    })
    .await;
    // The trail's Events: about this run's CSRs (a join's CSR has a generated name), or
    // written by a controller of this run (about RBAC objects of fixed names).
    delete_where(
        Api::<k8s_openapi::api::events::v1::Event>::namespaced(client.clone(), "kube-system"),
        |e| {
            let about = e.regarding.as_ref().and_then(|r| r.name.clone());
            named(&e.name_any())
                || about.is_some_and(|a| csrs.contains(&a))
                || e.reporting_instance.as_deref().is_some_and(named)
        },
    )
    .await;
    for ns in ["kube-system", "kubeflavor"] {
        delete_where(Api::<Lease>::namespaced(client.clone(), ns), |o| {
            named(&o.name_any())
        })
        .await;
    }
    // The run's names on the revocation list (revoked nodes stay listed until forgotten).
    unlist(&client, &named).await;
    // ServiceAccounts standing for callers of the join-token API.
    for ns in ["default", "kube-system"] {
        delete_where(
            Api::<k8s_openapi::api::core::v1::ServiceAccount>::namespaced(client.clone(), ns),
            |o| named(&o.name_any()),
        )
        .await;
    }
    Ok(())
}

/// Removes the names `named` selects from the revocation list.
async fn unlist(client: &kube::Client, named: &impl Fn(&str) -> bool) {
    use kubeflavor_cluster::revocation_list;
    let Ok(Some(names)) = revocation_list::read(client).await else {
        return;
    };
    for name in names.keys().filter(|n| named(n)) {
        let _ = revocation_list::remove(client, name).await;
    }
}

/// Deletes every object of `api` that `pick` selects and returns their names; a failure
/// leaves that object.
async fn delete_where<K>(api: Api<K>, pick: impl Fn(&K) -> bool) -> BTreeSet<String>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    let Ok(list) = api.list(&ListParams::default()).await else {
        return BTreeSet::new();
    };
    let mut deleted = BTreeSet::new();
    for obj in list.items.iter().filter(|o| pick(o)) {
        if api
            .delete(&obj.name_any(), &DeleteParams::default())
            .await
            .is_ok()
        {
            deleted.insert(obj.name_any());
        }
    }
    deleted
}
