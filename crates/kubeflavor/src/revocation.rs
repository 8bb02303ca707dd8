//! Revoking a node, every step of it, by whoever runs it: `node revoke`, `token revoke
//! --nodes` and the controller's revoked loop call [`revoke`] alike, so a revocation never
//! waits for a controller leader (`kubeflavor_core::node::revocation_list` says why each step is
//! there). Each step reads the state first and writes only what is missing, so a run that
//! stopped anywhere (a crash, a lost connection) is finished by the next run of any of them.
//!
//! `forget` is the deliberate way back: the name leaves the list, its binding and its Node
//! are deleted, and the kubelet may register again as a node nobody judged.

use k8s_openapi::api::core::v1::{Node, Pod, Taint};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, Preconditions};
use kube::{Api, Client, ResourceExt};
use kubeflavor_cluster::crd::{CONDITION_PODS_REMOVED, CONDITION_TOKEN_SPENT, FlavorBinding};
use kubeflavor_cluster::status::is_not_found;
use kubeflavor_cluster::{bindings, revocation_list as list, token_secrets};
use kubeflavor_core::node::revocation_list::{self, Entry, Step};
use kubeflavor_core::node::state::Revocation;

/// What one step found or did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The step wrote something.
    Done(String),
    /// Nothing was left to do.
    Already(String),
    /// The step does not apply (no binding, no Node).
    Skipped(String),
}

impl Outcome {
    pub fn text(&self) -> &str {
        match self {
            Outcome::Done(t) | Outcome::Already(t) | Outcome::Skipped(t) => t,
        }
    }
}

/// A step that failed, with the API server's error.
#[derive(Debug, thiserror::Error)]
#[error("[{}] {doing}: {source}", step.name())]
pub struct Error {
    pub step: Step,
    pub doing: String,
    #[source]
    pub source: kube::Error,
}

fn failed(step: Step, doing: impl Into<String>) -> impl FnOnce(kube::Error) -> Error {
    move |source| Error {
        step,
        doing: doing.into(),
        source,
    }
}

/// The field manager of the revocation's writes, so a Node's managedFields say who
/// tainted it.
pub const FIELD_MANAGER: &str = "kubeflavor-revoke";

/// Revokes `node` (`why`, recorded as `by`): the five steps of
/// `kubeflavor_core::node::revocation_list::Step`, in order, each reported to `report` as it ends.
/// Stops at the first step that fails (the next run starts over and skips what is done).
pub async fn revoke(
    client: &Client,
    node: &str,
    why: &Revocation,
    by: &str,
    report: &mut (dyn FnMut(Step, &Outcome) + Send),
) -> Result<Vec<(Step, Outcome)>, Error> {
    // Boxed: the steps' futures are large, and callers (the controller's loops, a command)
    // run inside deep futures of their own on a worker thread's stack.
    Box::pin(steps(client, node, why, by, report)).await
}

async fn steps(
    client: &Client,
    node: &str,
    why: &Revocation,
    by: &str,
    report: &mut (dyn FnMut(Step, &Outcome) + Send),
) -> Result<Vec<(Step, Outcome)>, Error> {
    let mut done = Vec::new();
    let mut record = |step: Step, outcome: Outcome| {
        report(step, &outcome);
        done.push((step, outcome));
    };

    let entry = Entry::new(jiff::Timestamp::now(), by, why);
    let added = list::add(client, node, &entry)
        .await
        .map_err(failed(Step::List, "add the node to the revocation list"))?;
    let where_ = format!("{}/{}", revocation_list::NAMESPACE, revocation_list::NAME);
    record(
        Step::List,
        if added {
            Outcome::Done(format!("node {node} added to {where_}"))
        } else {
            Outcome::Already(format!("node {node} already in {where_}"))
        },
    );

    let binding = bindings::get(client, node)
        .await
        .map_err(|e| failed(Step::Binding, "read the FlavorBinding")(e.source))?;
    let outcome = match &binding {
        None => Outcome::Skipped(format!("no FlavorBinding {node}")),
        Some(_) => match bindings::revoke(client, node, why).await {
            Ok(true) => Outcome::Done(format!(
                "FlavorBinding {node} marked Revoked ({})",
                why.reason()
            )),
            Ok(false) => Outcome::Already(format!("FlavorBinding {node} already Revoked")),
            Err(e) if is_not_found(&e) => Outcome::Skipped(format!("no FlavorBinding {node}")),
            Err(e) => return Err(failed(Step::Binding, "set the Revoked condition")(e)),
        },
    };
    record(Step::Binding, outcome);

    record(Step::Taint, taint(client, node).await?);

    let pods = delete_pods(client, node).await?;
    if let Outcome::Done(text) = &pods {
        note_on_binding(client, node, CONDITION_PODS_REMOVED, "PodsDeleted", text).await;
    }
    record(Step::Pods, pods);

    let token = spend_token(client, node, binding.as_ref()).await?;
    if let Outcome::Done(text) | Outcome::Already(text) = &token {
        note_on_binding(
            client,
            node,
            CONDITION_TOKEN_SPENT,
            "TokenSecretDeleted",
            text,
        )
        .await;
    }
    record(Step::Token, token);
    Ok(done)
}

/// Records a step on the binding (a condition); a failure is logged: the step itself is
/// done, and the next run records it again.
async fn note_on_binding(client: &Client, node: &str, type_: &str, reason: &str, text: &str) {
    match bindings::set_condition(client, node, type_, reason, text).await {
        Ok(_) => {}
        Err(e) if is_not_found(&e) => {}
        Err(e) => {
            tracing::warn!(node, condition = type_, error = %e, "could not record the step on the binding")
        }
    }
}

/// Adds `revoked:NoExecute` and `unverified:NoSchedule` to the Node (a merge patch of the
/// whole taint list, which is atomic, with the resourceVersion read: a conflict reads again).
async fn taint(client: &Client, node: &str) -> Result<Outcome, Error> {
    let nodes = Api::<Node>::all(client.clone());
    loop {
        let Some(n) = nodes
            .get_opt(node)
            .await
            .map_err(failed(Step::Taint, "read the Node"))?
        else {
            return Ok(Outcome::Skipped(format!("no Node {node}")));
        };
        let taints: Vec<Taint> = n.spec.clone().and_then(|s| s.taints).unwrap_or_default();
        let facts: Vec<(String, String)> = taints
            .iter()
            .map(|t| (t.key.clone(), t.effect.clone()))
            .collect();
        let missing = revocation_list::missing_taints(&facts);
        if missing.is_empty() {
            return Ok(Outcome::Already(format!("Node {node} already tainted")));
        }
        let mut all = taints;
        all.extend(missing.iter().map(|(k, e)| Taint {
            key: k.to_string(),
            effect: e.to_string(),
            ..Default::default()
        }));
        let body = serde_json::json!({
            "metadata": {"resourceVersion": n.resource_version()},
            "spec": {"taints": all},
        });
        let params = PatchParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..Default::default()
        };
        match nodes.patch(node, &params, &Patch::Merge(&body)).await {
            Ok(_) => {
                let shown: Vec<String> = missing.iter().map(|(k, e)| format!("{k}:{e}")).collect();
                return Ok(Outcome::Done(format!(
                    "Node {node} tainted {}",
                    shown.join(", ")
                )));
            }
            Err(kube::Error::Api(s)) if s.is_conflict() => continue,
            Err(e) if is_not_found(&e) => return Ok(Outcome::Skipped(format!("no Node {node}"))),
            Err(e) => return Err(failed(Step::Taint, "taint the Node")(e)),
        }
    }
}

/// The pods bound to `node`, in every namespace.
pub async fn pods_on(client: &Client, node: &str) -> Result<Vec<Pod>, kube::Error> {
    let params = ListParams::default().fields(&format!("spec.nodeName={node}"));
    Ok(Api::<Pod>::all(client.clone()).list(&params).await?.items)
}

/// Deletes every pod bound to `node` at once (grace period 0: no kubelet confirms a
/// revoked node's pods, and their ServiceAccount tokens stop authenticating only when the
/// pod is gone).
async fn delete_pods(client: &Client, node: &str) -> Result<Outcome, Error> {
    let pods = pods_on(client, node)
        .await
        .map_err(failed(Step::Pods, "list the pods bound to the node"))?;
    let mut deleted = Vec::new();
    for pod in &pods {
        let ns = pod.namespace().unwrap_or_default();
        let name = pod.name_any();
        let dp = DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: pod.uid().map(|uid| Preconditions {
                uid: Some(uid),
                resource_version: None,
            }),
            ..Default::default()
        };
        match Api::<Pod>::namespaced(client.clone(), &ns)
            .delete(&name, &dp)
            .await
        {
            Ok(_) => deleted.push(format!("{ns}/{name}")),
            Err(e) if is_not_found(&e) => {}
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => return Err(failed(Step::Pods, format!("delete pod {ns}/{name}"))(e)),
        }
    }
    Ok(if deleted.is_empty() {
        Outcome::Already(format!("no pods bound to {node}"))
    } else {
        Outcome::Done(format!(
            "{} pod(s) deleted: {}",
            deleted.len(),
            deleted.join(", ")
        ))
    })
}

/// Spends the join token the binding names: deletes its Secret if it is still the token
/// the node joined with (uid precondition: never a token re-created under the same id).
async fn spend_token(
    client: &Client,
    node: &str,
    binding: Option<&FlavorBinding>,
) -> Result<Outcome, Error> {
    let Some(b) = binding else {
        return Ok(Outcome::Skipped(format!(
            "no FlavorBinding {node} names a token"
        )));
    };
    let id = &b.spec.token_id;
    let name = token_secrets::name_of(id);
    let secret = token_secrets::get_named(client, &name)
        .await
        .map_err(failed(Step::Token, format!("read token Secret {name}")))?;
    let Some(secret) = secret else {
        return Ok(Outcome::Already(format!(
            "token {id} spent (its Secret is gone)"
        )));
    };
    let uid = secret.uid();
    if let (Some(bound), Some(now)) = (&b.spec.token_uid, &uid)
        && bound != now
    {
        return Ok(Outcome::Already(format!(
            "token {id} spent (its Secret was re-created since the node joined; left alone)"
        )));
    }
    match token_secrets::delete_instance(client, &name, uid, None).await {
        Ok(()) => Ok(Outcome::Done(format!(
            "token {id} spent: its Secret {name} is deleted, its join line joins no new name"
        ))),
        Err(e) if is_not_found(&e) => Ok(Outcome::Already(format!(
            "token {id} spent (its Secret is gone)"
        ))),
        Err(e) => Err(failed(Step::Token, format!("delete token Secret {name}"))(
            e,
        )),
    }
}

/// What `forget` did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Forgotten {
    pub unlisted: bool,
    pub binding_deleted: bool,
    pub node_deleted: bool,
}

/// Un-revokes `node` on purpose: deletes its Node and its binding, then removes it from
/// the list. In this order a run that stops half way leaves the name revoked (the list
/// still refuses its kubelet, and no Node can come back under it); the next run finishes.
pub async fn forget(client: &Client, node: &str) -> Result<Forgotten, kube::Error> {
    let gone = |r: Result<(), kube::Error>| match r {
        Ok(()) => Ok(true),
        Err(e) if is_not_found(&e) => Ok(false),
        Err(e) => Err(e),
    };
    let node_deleted = gone(
        Api::<Node>::all(client.clone())
            .delete(node, &DeleteParams::default())
            .await
            .map(|_| ()),
    )?;
    let binding_deleted = gone(
        bindings::api(client)
            .delete(node, &DeleteParams::default())
            .await
            .map(|_| ()),
    )?;
    let unlisted = list::remove(client, node).await?;
    Ok(Forgotten {
        unlisted,
        binding_deleted,
        node_deleted,
    })
}
