//! End-to-end: `kubeflavor install` against testkube, or the cluster named by
//! KUBEFLAVOR_E2E_KUBECONFIG.

use crate::support::{Env, within};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{NodeSelectorRequirement, PodSpec, Service, Toleration};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::ClusterRole;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{Api, ApiResource, DynamicObject};
use serde_json::Value;

/// With `--serve`, the join-token API's objects too. On a real cluster they stay afterwards
/// with the rest of the install set (fixed names, like the controller's; `--replicas 0`
/// runs neither the controller nor the API there).
#[tokio::test]
async fn install_apply_creates_everything_print_shows_and_is_idempotent() {
    let env = Env::start().await;
    let printed = env.kf(&["install", "--replicas", "0", "--serve"]).await;
    let docs: Vec<Value> = serde_saphyr::from_multiple(printed.expect_ok()).unwrap();
    let docs: Vec<Value> = docs.into_iter().filter(|d| !d.is_null()).collect();
    assert!(docs.len() > 10, "{} documents", docs.len());
    assert!(
        docs.iter().all(|d| d["kind"] != "PodDisruptionBudget"),
        "no budget without replicas"
    );

    assert!(
        docs.iter()
            .any(|d| d["kind"] == "Service" && d["metadata"]["name"] == "kubeflavor-serve"),
        "--serve prints the join-token API"
    );

    // No controller runs on a real cluster during the tests (see Env::install).
    let first = env
        .kf(&["install", "--apply", "--replicas", "0", "--serve"])
        .await;
    // One line per object, and one saying where the pods run.
    assert_eq!(first.expect_ok().lines().count(), docs.len() + 1);
    assert!(
        first.stdout.contains(
            "The controller (and the webhook it serves) and the join-token API run only on \
             control-plane Nodes"
        ),
        "{}",
        first.stdout
    );
    assert!(
        first
            .stdout
            .contains("service/kubeflavor-serve (namespace kubeflavor) applied"),
        "{}",
        first.stdout
    );
    let roles: Api<ClusterRole> = Api::all(env.client.clone());
    let before = roles.get("kubeflavor:controller").await.unwrap();
    let services: Api<Service> = Api::namespaced(env.client.clone(), "kubeflavor");
    let service = services.get("kubeflavor-serve").await.unwrap();
    let cluster_ip = service.spec.as_ref().and_then(|s| s.cluster_ip.clone());
    assert!(
        cluster_ip
            .as_deref()
            .is_some_and(|ip| ip.parse::<std::net::IpAddr>().is_ok()),
        "the API server assigns the Service an address: {cluster_ip:?}"
    );
    let second = env
        .kf(&["install", "--apply", "--replicas", "0", "--serve"])
        .await;
    assert_eq!(
        second.expect_ok(),
        first.stdout,
        "a re-run applies the same set"
    );
    let after = roles.get("kubeflavor:controller").await.unwrap();
    assert_eq!(before.rules, after.rules);
    let again = services.get("kubeflavor-serve").await.unwrap();
    assert_eq!(
        again.spec.and_then(|s| s.cluster_ip),
        cluster_ip,
        "a re-apply keeps the assigned address"
    );

    // Every printed object exists on the cluster.
    for doc in &docs {
        let api_version = doc["apiVersion"].as_str().unwrap();
        let kind = doc["kind"].as_str().unwrap();
        let name = doc["metadata"]["name"].as_str().unwrap();
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        let plural = match kind {
            "CustomResourceDefinition" => "customresourcedefinitions",
            "Namespace" => "namespaces",
            "ServiceAccount" => "serviceaccounts",
            "ClusterRole" => "clusterroles",
            "ClusterRoleBinding" => "clusterrolebindings",
            "Role" => "roles",
            "RoleBinding" => "rolebindings",
            "Deployment" => "deployments",
            "PodDisruptionBudget" => "poddisruptionbudgets",
            "Service" => "services",
            "ValidatingAdmissionPolicy" => "validatingadmissionpolicies",
            "ValidatingAdmissionPolicyBinding" => "validatingadmissionpolicybindings",
            "MutatingAdmissionPolicy" => "mutatingadmissionpolicies",
            "MutatingAdmissionPolicyBinding" => "mutatingadmissionpolicybindings",
            "ConfigMap" => "configmaps",
            other => panic!("unexpected kind {other}"),
        };
        let ar = ApiResource {
            group: group.into(),
            version: version.into(),
            api_version: api_version.into(),
            kind: kind.into(),
            plural: plural.into(),
        };
        let api: Api<DynamicObject> = match doc["metadata"]["namespace"].as_str() {
            Some(ns) => Api::namespaced_with(env.client.clone(), ns, &ar),
            None => Api::all_with(env.client.clone(), &ar),
        };
        let stored = api
            .get(name)
            .await
            .unwrap_or_else(|e| panic!("{kind}/{name} missing: {e}"));
        if kind == "ClusterRole" || kind == "Role" {
            assert_eq!(
                serde_json::to_value(&stored.data["rules"]).unwrap(),
                doc["rules"],
                "{kind}/{name} rules differ"
            );
        }
    }

    // The CRDs are served once install returns.
    let crds: Api<CustomResourceDefinition> = Api::all(env.client.clone());
    for name in ["flavors.kubeflavor.io", "flavorbindings.kubeflavor.io"] {
        let crd = crds.get(name).await.unwrap();
        let established = crd.status.and_then(|s| s.conditions).unwrap_or_default();
        assert!(
            established
                .iter()
                .any(|c| c.type_ == "Established" && c.status == "True"),
            "{name} not established"
        );
    }
    env.kf(&["flavor", "list"]).await.expect_ok();
}

/// With replicas, the set adds the controller's PodDisruptionBudget (and, with --serve, the
/// join-token API's). Applied on testkube only: on a real cluster the replicas would start a controller racing the tests' own.
#[tokio::test]
async fn install_apply_with_replicas_adds_the_disruption_budget() {
    let env = Env::start().await;
    if env
        .testkube_or_skip("replicas > 0 would run a controller on the real cluster")
        .is_none()
    {
        return;
    }
    let printed = env.kf(&["install", "--replicas", "2", "--serve"]).await;
    let docs: Vec<Value> = serde_saphyr::from_multiple(printed.expect_ok()).unwrap();
    let count = docs.iter().filter(|d| !d.is_null()).count();
    let first = env
        .kf(&["install", "--apply", "--replicas", "2", "--serve"])
        .await;
    assert_eq!(first.expect_ok().lines().count(), count + 1);
    assert!(
        first.stdout.contains(
            "poddisruptionbudget.policy/kubeflavor-controller (namespace kubeflavor) applied"
        ),
        "{}",
        first.stdout
    );
    assert!(
        first
            .stdout
            .contains("poddisruptionbudget.policy/kubeflavor-serve (namespace kubeflavor) applied"),
        "{}",
        first.stdout
    );
    let budgets: Api<PodDisruptionBudget> = Api::namespaced(env.client.clone(), "kubeflavor");
    let pdb = budgets.get("kubeflavor-controller").await.unwrap();
    let spec = pdb.spec.clone().unwrap();
    assert_eq!(spec.max_unavailable, Some(IntOrString::Int(1)));
    assert_eq!(
        spec.unhealthy_pod_eviction_policy.as_deref(),
        Some("AlwaysAllow")
    );
    assert_eq!(pdb.metadata.generation, Some(1));
    let deployments: Api<Deployment> = Api::namespaced(env.client.clone(), "kubeflavor");
    let deployment = deployments.get("kubeflavor-controller").await.unwrap();
    assert_eq!(spec.selector, Some(deployment.spec.selector.clone()));
    let pod = deployment.spec.template.spec.unwrap();
    assert_eq!(
        pod.priority_class_name.as_deref(),
        Some("system-cluster-critical")
    );
    assert_eq!(pod.automount_service_account_token, Some(true));

    let second = env
        .kf(&["install", "--apply", "--replicas", "2", "--serve"])
        .await;
    assert_eq!(
        second.expect_ok(),
        first.stdout,
        "a re-run applies the same set"
    );
    let again = budgets.get("kubeflavor-controller").await.unwrap();
    assert_eq!(again.metadata.generation, Some(1), "nothing changed");
}

/// The Deployments that run kubeflavor: the controller (and the webhook it serves) and the
/// join-token API.
const WORKLOADS: [&str; 2] = ["kubeflavor-controller", "kubeflavor-serve"];

/// The taints of the nodes kubeflavor must never run on (key, effect).
const UNTRUSTED: [(&str, &str); 3] = [
    ("kubeflavor.io/unverified", "NoSchedule"),
    ("kubeflavor.io/revoked", "NoExecute"),
    ("kubeflavor.io/revoked", "NoSchedule"),
];

/// `Toleration.ToleratesTaint` (k8s.io/api/core/v1): whether `t` lets a pod onto a node
/// with a taint of `key` (any value) and `effect`.
fn tolerates(t: &Toleration, key: &str, effect: &str) -> bool {
    let effect_ok = t
        .effect
        .as_deref()
        .is_none_or(|e| e.is_empty() || e == effect);
    let key_ok = t.key.as_deref().is_none_or(|k| k.is_empty() || k == key);
    // Equal (the default) tolerates the one value it names, which the taint may carry.
    let operator_ok = matches!(t.operator.as_deref(), None | Some("" | "Equal" | "Exists"));
    effect_ok && key_ok && operator_ok
}

/// The one requirement of the pod's required node affinity (it must have exactly one
/// term of one expression, and no nodeSelector that could add another way in).
fn required_requirement(pod: &PodSpec) -> Option<NodeSelectorRequirement> {
    let terms = pod
        .affinity
        .as_ref()?
        .node_affinity
        .as_ref()?
        .required_during_scheduling_ignored_during_execution
        .as_ref()?
        .node_selector_terms
        .clone();
    let [term] = terms.as_slice() else {
        return None;
    };
    let [expression] = term.match_expressions.as_deref()? else {
        return None;
    };
    term.match_fields
        .as_ref()
        .is_none_or(|f| f.is_empty())
        .then(|| expression.clone())
}

/// `install --apply <flags>`, then the pod templates of [`WORKLOADS`] as the API server
/// stores them, once both require `requirement`. Every test of a shared real cluster
/// applies the default install: one may land between this apply and the read, so the
/// apply is repeated until the read shows it (bounded by `within`; an install that never
/// writes `requirement` fails here).
async fn applied_placement(
    env: &Env,
    flags: &[&str],
    requirement: &NodeSelectorRequirement,
) -> Vec<PodSpec> {
    let deployments: Api<Deployment> = Api::namespaced(env.client.clone(), "kubeflavor");
    let mut args = vec!["install", "--apply", "--replicas", "0", "--serve"];
    args.extend(flags);
    within("install's placement to be stored", async {
        loop {
            env.kf(&args).await.expect_ok();
            let mut pods = Vec::new();
            for name in WORKLOADS {
                let deployment = deployments.get(name).await.expect(name);
                pods.extend(deployment.spec.template.spec);
            }
            let stored: Vec<_> = pods.iter().map(required_requirement).collect();
            let all_there = pods.len() == WORKLOADS.len();
            if all_there && stored.iter().all(|r| r.as_ref() == Some(requirement)) {
                return pods;
            }
            eprintln!("stored placement {stored:?}, applying again");
        }
    })
    .await
}

/// Where kubeflavor runs, as the API server stores what `install --apply` wrote: by
/// default only on control-plane Nodes (required affinity on the label NodeRestriction
/// keeps kubelets from setting), tolerating their taint and nothing else; with
/// `--run-on-trust-level N` only on Nodes whose trust level is N or more, tolerating no
/// taint. Never on a node tainted unverified or revoked. On a real cluster it leaves the
/// default install in place, as every other test applies it.
#[tokio::test]
async fn install_apply_runs_kubeflavor_only_where_the_owner_trusts() {
    let env = Env::start().await;
    let control_plane = NodeSelectorRequirement {
        key: "node-role.kubernetes.io/control-plane".into(),
        operator: "Exists".into(),
        values: None,
    };
    let trust_level = NodeSelectorRequirement {
        key: "kubeflavor.node-restriction.kubernetes.io/trust-level".into(),
        operator: "Gt".into(),
        values: Some(vec!["79".into()]),
    };
    let cases = [
        (&[][..], &control_plane, 1),
        (&["--run-on-trust-level", "80"][..], &trust_level, 0),
        (&[][..], &control_plane, 1),
    ];
    for (flags, requirement, tolerations) in cases {
        if env.testkube.is_some() && tolerations == 0 {
            // testkube's server-side apply merges (src/patch.rs): it does not remove the
            // toleration the earlier apply set and this one leaves out, as the real
            // server does for fields only this field manager owned. Start afresh there.
            let deployments: Api<Deployment> = Api::namespaced(env.client.clone(), "kubeflavor");
            for name in WORKLOADS {
                deployments
                    .delete(name, &Default::default())
                    .await
                    .expect(name);
            }
        }
        for pod in applied_placement(&env, flags, requirement).await {
            let all = pod.tolerations.clone().unwrap_or_default();
            assert_eq!(all.len(), tolerations, "{flags:?}: {all:?}");
            if tolerations == 1 {
                let t = &all[0];
                assert_eq!(
                    (t.key.as_deref(), t.operator.as_deref(), t.effect.as_deref()),
                    (
                        Some("node-role.kubernetes.io/control-plane"),
                        Some("Exists"),
                        Some("NoSchedule")
                    ),
                    "{flags:?}"
                );
            }
            for (key, effect) in UNTRUSTED {
                assert!(
                    !all.iter().any(|t| tolerates(t, key, effect)),
                    "{flags:?}: {key}:{effect} tolerated by {all:?}"
                );
            }
            assert!(
                pod.node_selector.as_ref().is_none_or(|s| s.is_empty()),
                "{flags:?}: {:?}",
                pod.node_selector
            );
            assert!(
                pod.node_name.as_deref().is_none_or(str::is_empty),
                "{flags:?}: bypasses the scheduler"
            );
        }
    }
}

#[tokio::test]
async fn install_print_touches_no_cluster() {
    let env = Env::start().await;
    let before = env.request_count();
    let out = env
        .kf(&[
            "install",
            "--namespace",
            "ops",
            "--image",
            "registry.example/kf:dev",
            "--replicas",
            "3",
        ])
        .await;
    let text = out.expect_ok();
    assert!(text.contains("namespace: ops") && text.contains("image: registry.example/kf:dev"));
    assert!(text.contains("replicas: 3"), "{text}");
    assert_eq!(env.request_count(), before);
}

/// `kubectl get flavors` shows the CRD's printer columns (the API server renders the Table
/// from `additionalPrinterColumns` when asked for `as=Table`).
#[tokio::test]
async fn kubectl_get_shows_the_printer_columns() {
    let env = Env::start().await;
    env.install().await;
    let name = env.name("table");
    env.kf(&[
        "flavor",
        "create",
        &name,
        "--trust-level",
        "42",
        "--ttl",
        "3h",
        "--max-nodes",
        "2",
    ])
    .await
    .expect_ok();
    let request = http::Request::get(format!("/apis/kubeflavor.io/v1alpha1/flavors/{name}"))
        .header("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
        .body(Vec::new())
        .unwrap();
    let table: Value =
        serde_json::from_str(&env.client.request_text(request).await.unwrap()).unwrap();
    let columns: Vec<&str> = table["columnDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    // The API server's Table carries the priority-1 (-o wide) columns too.
    assert_eq!(
        columns,
        [
            "Name",
            "Trust",
            "TTL",
            "Max Nodes",
            "TTL Limit",
            "Nodes Limit",
            "Never Expiring",
            "Bound",
            "Age"
        ]
    );
    let cells = &table["rows"][0]["cells"];
    assert_eq!(cells[0], name.as_str());
    assert_eq!(cells[1], 42);
    assert_eq!(cells[2], "3h");
    assert_eq!(cells[3], 2);
    assert!(cells[4].is_null(), "no tokenLimits: {cells}");
    assert!(cells[7].is_null(), "no status yet: {cells}");
    env.kf(&["flavor", "delete", &name]).await.expect_ok();
}

/// `install --apply --monitoring` where the Prometheus Operator's CRDs are not installed
/// (testkube; a real cluster without them) refuses before applying anything, and says
/// what to do instead.
#[tokio::test]
async fn install_apply_monitoring_without_the_operator_applies_nothing_and_says_why() {
    let env = Env::start().await;
    let served = env
        .client
        .list_api_group_resources("monitoring.coreos.com/v1")
        .await
        .is_ok();
    if served {
        crate::support::skip("this cluster serves the Prometheus Operator's API");
        return;
    }
    let out = env
        .kf(&[
            "install",
            "--apply",
            "--replicas",
            "0",
            "--monitoring",
            "-n",
            &env.name("mon"),
        ])
        .await;
    assert!(!out.ok(), "{out:?}");
    assert!(out.stderr.contains("Prometheus Operator"), "{}", out.stderr);
    assert!(
        out.stderr.contains("monitoring/kubeflavor-rules.yaml"),
        "{}",
        out.stderr
    );
    assert!(
        out.stdout.is_empty(),
        "something was applied: {}",
        out.stdout
    );
}
