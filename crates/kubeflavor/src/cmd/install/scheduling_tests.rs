//! Where the printed pod templates can land: kube-scheduler's two filters that decide it,
//! required node affinity (NodeAffinity) and taints (TaintToleration), evaluated against
//! Node objects, as upstream implements them:
//! - k8s.io/component-helpers/scheduling/corev1/nodeaffinity (GetRequiredNodeAffinity:
//!   spec.nodeSelector AND the required terms, ORed; an empty term matches nothing; a term
//!   that fails to parse matches nothing), with k8s.io/apimachinery/pkg/labels'
//!   Requirement.Matches for each operator;
//! - the TaintToleration plugin's Filter: the first taint with effect NoSchedule or
//!   NoExecute that no toleration tolerates (k8s.io/api/core/v1 Toleration.ToleratesTaint)
//!   makes the node unschedulable; PreferNoSchedule never does.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Node, NodeSelectorRequirement, NodeSelectorTerm, NodeSpec, PodSpec, Taint, Toleration,
};
use kube::api::ObjectMeta;
use kubeflavor_core::flavor::{FLAVOR_LABEL, REVOKED_TAINT, TRUST_LEVEL_LABEL, UNVERIFIED_TAINT};
use kubeflavor_core::node::placement::CONTROL_PLANE_LABEL;
use serde_json::Value;

use super::*;

/// Why a node is filtered out, or Ok when both filters pass.
fn schedulable(pod: &PodSpec, node: &Node) -> std::result::Result<(), String> {
    if !required_node_affinity(pod, node) {
        return Err("node(s) didn't match Pod's node affinity/selector".into());
    }
    if let Some(taint) = untolerated_taint(pod, node) {
        return Err(format!("node(s) had untolerated taint {{{}}}", taint.key));
    }
    Ok(())
}

fn node_labels(node: &Node) -> BTreeMap<String, String> {
    node.metadata.labels.clone().unwrap_or_default()
}

/// nodeaffinity.GetRequiredNodeAffinity(pod).Match(node).
fn required_node_affinity(pod: &PodSpec, node: &Node) -> bool {
    let labels = node_labels(node);
    if let Some(selector) = pod.node_selector.as_ref().filter(|s| !s.is_empty()) {
        // labels.SelectorFromSet: every key present with exactly that value.
        if !selector.iter().all(|(k, v)| labels.get(k) == Some(v)) {
            return false;
        }
    }
    let Some(required) = pod
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|n| {
            n.required_during_scheduling_ignored_during_execution
                .as_ref()
        })
    else {
        return true;
    };
    let name = node.metadata.name.clone().unwrap_or_default();
    required
        .node_selector_terms
        .iter()
        .filter(|t| !is_empty_term(t))
        .any(|t| term_matches(t, &labels, &name))
}

fn is_empty_term(term: &NodeSelectorTerm) -> bool {
    term.match_expressions
        .as_deref()
        .unwrap_or_default()
        .is_empty()
        && term.match_fields.as_deref().unwrap_or_default().is_empty()
}

/// nodeSelectorTerm.match: its expressions ANDed over the labels, its fields over
/// metadata.name (ignored when the node has no name); a parse error is no match.
fn term_matches(term: &NodeSelectorTerm, labels: &BTreeMap<String, String>, name: &str) -> bool {
    let expressions = term.match_expressions.as_deref().unwrap_or_default();
    if !expressions.is_empty() {
        for r in expressions {
            match label_requirement(r, labels) {
                Some(true) => {}
                _ => return false,
            }
        }
    }
    let fields = term.match_fields.as_deref().unwrap_or_default();
    if !fields.is_empty() && !name.is_empty() {
        for r in fields {
            let values = r.values.as_deref().unwrap_or_default();
            let [value] = values else { return false };
            // extractNodeFields sets only metadata.name; other keys read as "".
            let field = if r.key == "metadata.name" { name } else { "" };
            let ok = match r.operator.as_str() {
                "In" => field == value,
                "NotIn" => field != value,
                _ => return false,
            };
            if !ok {
                return false;
            }
        }
    }
    true
}

/// labels.NewRequirement then Requirement.Matches; None where NewRequirement refuses it.
fn label_requirement(
    r: &NodeSelectorRequirement,
    labels: &BTreeMap<String, String>,
) -> Option<bool> {
    let values = r.values.as_deref().unwrap_or_default();
    let label = labels.get(&r.key);
    match r.operator.as_str() {
        "In" | "NotIn" if values.is_empty() => None,
        "In" => Some(label.is_some_and(|v| values.contains(v))),
        "NotIn" => Some(label.is_none_or(|v| !values.contains(v))),
        "Exists" | "DoesNotExist" if !values.is_empty() => None,
        "Exists" => Some(label.is_some()),
        "DoesNotExist" => Some(label.is_none()),
        "Gt" | "Lt" => {
            let [value] = values else { return None };
            let bound: i64 = value.parse().ok()?;
            let Some(Ok(actual)) = label.map(|v| v.parse::<i64>()) else {
                return Some(false);
            };
            Some(if r.operator == "Gt" {
                actual > bound
            } else {
                actual < bound
            })
        }
        _ => None,
    }
}

/// v1helper.FindMatchingUntoleratedTaint over the NoSchedule and NoExecute taints.
fn untolerated_taint<'a>(pod: &PodSpec, node: &'a Node) -> Option<&'a Taint> {
    let tolerations = pod.tolerations.as_deref().unwrap_or_default();
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_deref())
        .unwrap_or_default()
        .iter()
        .filter(|t| t.effect == "NoSchedule" || t.effect == "NoExecute")
        .find(|taint| !tolerations.iter().any(|t| tolerates(t, taint)))
}

/// Toleration.ToleratesTaint.
fn tolerates(t: &Toleration, taint: &Taint) -> bool {
    let effect = t.effect.as_deref().unwrap_or_default();
    if !effect.is_empty() && effect != taint.effect {
        return false;
    }
    let key = t.key.as_deref().unwrap_or_default();
    if !key.is_empty() && key != taint.key {
        return false;
    }
    let value = t.value.as_deref().unwrap_or_default();
    let taint_value = taint.value.as_deref().unwrap_or_default();
    match t.operator.as_deref().unwrap_or_default() {
        "" | "Equal" => value == taint_value,
        "Exists" => true,
        op @ ("Lt" | "Gt") => match (value.parse::<i64>(), taint_value.parse::<i64>()) {
            (Ok(v), Ok(tv)) => {
                if op == "Lt" {
                    tv < v
                } else {
                    tv > v
                }
            }
            _ => false,
        },
        _ => false,
    }
}

fn mk_node(name: &str, labels: &[(&str, &str)], taints: &[(&str, &str)]) -> Node {
    Node {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some(
                labels
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
            ..Default::default()
        },
        spec: Some(NodeSpec {
            taints: Some(
                taints
                    .iter()
                    .map(|(key, effect)| Taint {
                        key: key.to_string(),
                        effect: effect.to_string(),
                        ..Default::default()
                    })
                    .collect(),
            ),
            ..Default::default()
        }),
        status: None,
    }
}

const WORKER: &[(&str, &str)] = &[("kubernetes.io/hostname", "x")];

/// A kubeadm control-plane node, tainted as kubeadm does.
fn control_plane() -> Node {
    mk_node(
        "cp-1",
        &[(CONTROL_PLANE_LABEL, "")],
        &[(CONTROL_PLANE_LABEL, "NoSchedule")],
    )
}

/// A node kubeflavor flavored at `level`.
fn flavored(name: &str, level: &str) -> Node {
    mk_node(
        name,
        &[(FLAVOR_LABEL, "edge"), (TRUST_LEVEL_LABEL, level)],
        &[],
    )
}

/// A kubelet-created Node kubeflavor has not judged: tainted unverified. It keeps the
/// trust-level label of an earlier flavor and even a control-plane label (as if forged), so
/// only the taint keeps the pods off.
fn unverified() -> Node {
    mk_node(
        "new-1",
        &[(TRUST_LEVEL_LABEL, "100"), (CONTROL_PLANE_LABEL, "")],
        &[(UNVERIFIED_TAINT, "NoSchedule")],
    )
}

/// A revoked node that kept its labels.
fn revoked() -> Node {
    mk_node(
        "rev-1",
        &[(TRUST_LEVEL_LABEL, "100"), (CONTROL_PLANE_LABEL, "")],
        &[
            (REVOKED_TAINT, "NoExecute"),
            (UNVERIFIED_TAINT, "NoSchedule"),
        ],
    )
}

/// The pod templates of the Deployments `args` prints, read back from the printed YAML.
fn printed_pods(args: &[&str]) -> Vec<(String, PodSpec)> {
    use clap::Parser;
    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        install: InstallArgs,
    }
    let cli = Cli::parse_from(std::iter::once("install").chain(args.iter().copied()));
    let mut out = Vec::new();
    print(&cli.install, &mut out).unwrap();
    let text = String::from_utf8(out).unwrap();
    let parsed: Vec<Value> = serde_saphyr::from_multiple(&text).unwrap();
    let pods: Vec<(String, PodSpec)> = parsed
        .into_iter()
        .filter(|d| d["kind"] == "Deployment")
        .map(|d| {
            let name = d["metadata"]["name"].as_str().unwrap().to_string();
            let pod = serde_json::from_value(d["spec"]["template"]["spec"].clone()).unwrap();
            (name, pod)
        })
        .collect();
    pods
}

/// Which of `nodes` each printed pod may land on.
fn landings(pods: &[(String, PodSpec)], nodes: &[Node]) -> Vec<(String, Vec<String>)> {
    pods.iter()
        .map(|(name, pod)| {
            let on = nodes
                .iter()
                .filter(|n| schedulable(pod, n).is_ok())
                .map(|n| n.metadata.name.clone().unwrap())
                .collect();
            (name.clone(), on)
        })
        .collect()
}

fn all_nodes() -> Vec<Node> {
    vec![
        control_plane(),
        flavored("flavored-2", "2"),
        flavored("flavored-5", "5"),
        flavored("flavored-junk", "five"),
        mk_node("worker-1", WORKER, &[]),
        unverified(),
        revoked(),
    ]
}

#[test]
fn by_default_kubeflavor_runs_on_the_control_plane_only() {
    let pods = printed_pods(&["--serve"]);
    assert_eq!(pods.len(), 2);
    for (name, on) in landings(&pods, &all_nodes()) {
        assert_eq!(on, vec!["cp-1"], "{name}");
    }
}

#[test]
fn with_a_trust_level_it_never_lands_on_a_flavored_node_below_it() {
    let pods = printed_pods(&["--serve", "--authz-webhook", "--run-on-trust-level", "3"]);
    assert_eq!(pods.len(), 2);
    for (name, on) in landings(&pods, &all_nodes()) {
        assert_eq!(on, vec!["flavored-5"], "{name}");
    }
    // At level 5 the node at 5 qualifies, at 6 nothing does.
    let pods = printed_pods(&["--serve", "--run-on-trust-level", "5"]);
    for (name, on) in landings(&pods, &all_nodes()) {
        assert_eq!(on, vec!["flavored-5"], "{name}");
    }
    let pods = printed_pods(&["--serve", "--run-on-trust-level", "6"]);
    for (name, on) in landings(&pods, &all_nodes()) {
        assert!(on.is_empty(), "{name}: {on:?}");
    }
    // Level 0 is any flavored node (its label may not even be a number), nothing else.
    let pods = printed_pods(&["--serve", "--run-on-trust-level", "0"]);
    for (name, on) in landings(&pods, &all_nodes()) {
        assert_eq!(
            on,
            vec!["flavored-2", "flavored-5", "flavored-junk"],
            "{name}"
        );
    }
}

#[test]
fn without_the_affinity_the_pods_would_land_on_untrusted_nodes() {
    // The check above rests on the affinity: drop it and the flavored node below the level
    // (and an ordinary worker) take the pods. So the landing test fails if it goes.
    for (name, mut pod) in printed_pods(&["--serve", "--run-on-trust-level", "3"]) {
        pod.affinity.as_mut().unwrap().node_affinity = None;
        let on = landings(&[(name.clone(), pod)], &all_nodes()).remove(0).1;
        assert!(on.contains(&"flavored-2".to_string()), "{name}: {on:?}");
        assert!(on.contains(&"worker-1".to_string()), "{name}: {on:?}");
    }
    for (name, mut pod) in printed_pods(&["--serve"]) {
        pod.affinity.as_mut().unwrap().node_affinity = None;
        let on = landings(&[(name.clone(), pod)], &all_nodes()).remove(0).1;
        assert!(on.contains(&"flavored-2".to_string()), "{name}: {on:?}");
    }
}

#[test]
fn the_unverified_and_revoked_taints_keep_the_pods_off_whatever_the_labels() {
    for args in [&["--serve"][..], &["--serve", "--run-on-trust-level", "0"]] {
        for (name, pod) in printed_pods(args) {
            for node in [unverified(), revoked()] {
                assert!(required_node_affinity(&pod, &node), "{name}");
                let why = schedulable(&pod, &node).unwrap_err();
                assert!(why.contains("untolerated taint"), "{name}: {why}");
            }
        }
    }
}

#[test]
fn the_printed_notes_say_where_and_why() {
    use clap::Parser;
    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        install: InstallArgs,
    }
    for (args, place) in [
        (&["--serve"][..], "only on control-plane Nodes"),
        (
            &["--serve", "--run-on-trust-level", "7"],
            "label is 7 or more",
        ),
    ] {
        let cli = Cli::parse_from(std::iter::once("install").chain(args.iter().copied()));
        let mut out = Vec::new();
        print(&cli.install, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap().replace("\n# ", " ");
        assert!(
            text.contains("and the join-token API run only on") && text.contains(place),
            "{text}"
        );
        for deployment in ["kubeflavor-controller", "kubeflavor-serve"] {
            let docs = documents("kubeflavor", "x", 2, Mode::of(&cli.install).unwrap());
            let doc = docs
                .iter()
                .find(|d| d.kind() == "Deployment" && d.name() == deployment)
                .unwrap();
            let note = &doc
                .notes
                .iter()
                .find(|(p, _)| p == "spec.template.spec.affinity")
                .unwrap()
                .1;
            assert!(note.contains(place), "{deployment}: {note}");
            assert!(note.contains("kubeflavor.io/revoked"), "{note}");
        }
    }
}

#[test]
fn a_trust_level_out_of_range_is_refused_with_its_range() {
    use clap::Parser;
    #[derive(Parser, Debug)]
    struct Cli {
        #[command(flatten)]
        install: InstallArgs,
    }
    for bad in ["101", "-1", "high"] {
        let flag = format!("--run-on-trust-level={bad}");
        let err = Cli::try_parse_from(["install", flag.as_str()]).unwrap_err();
        assert!(err.to_string().contains("0 to 100"), "{err}");
    }
}

#[test]
fn the_filters_follow_upstream() {
    let pod = |expr: NodeSelectorRequirement| PodSpec {
        affinity: Some(k8s_openapi::api::core::v1::Affinity {
            node_affinity: Some(k8s_openapi::api::core::v1::NodeAffinity {
                required_during_scheduling_ignored_during_execution: Some(
                    k8s_openapi::api::core::v1::NodeSelector {
                        node_selector_terms: vec![
                            NodeSelectorTerm::default(),
                            NodeSelectorTerm {
                                match_expressions: Some(vec![expr]),
                                match_fields: None,
                            },
                        ],
                    },
                ),
                preferred_during_scheduling_ignored_during_execution: None,
            }),
            ..Default::default()
        }),
        ..Default::default()
    };
    let req = |key: &str, op: &str, values: &[&str]| NodeSelectorRequirement {
        key: key.into(),
        operator: op.into(),
        values: Some(values.iter().map(|v| v.to_string()).collect()),
    };
    let n = flavored("n", "4");
    assert!(required_node_affinity(
        &pod(req(TRUST_LEVEL_LABEL, "Gt", &["3"])),
        &n
    ));
    assert!(!required_node_affinity(
        &pod(req(TRUST_LEVEL_LABEL, "Gt", &["4"])),
        &n
    ));
    assert!(!required_node_affinity(
        &pod(req(TRUST_LEVEL_LABEL, "Gt", &["x"])),
        &n
    ));
    assert!(!required_node_affinity(
        &pod(req(TRUST_LEVEL_LABEL, "Gt", &["1", "2"])),
        &n
    ));
    assert!(required_node_affinity(
        &pod(req(TRUST_LEVEL_LABEL, "Lt", &["5"])),
        &n
    ));
    assert!(!required_node_affinity(
        &pod(req("absent", "Gt", &["-5"])),
        &n
    ));
    assert!(required_node_affinity(
        &pod(req("absent", "NotIn", &["a"])),
        &n
    ));
    assert!(!required_node_affinity(
        &pod(req("absent", "Exists", &["a"])),
        &n
    ));
    // An empty term matches nothing: a selector of only empty terms places nowhere.
    let mut nothing = pod(req("absent", "DoesNotExist", &[]));
    nothing
        .affinity
        .as_mut()
        .unwrap()
        .node_affinity
        .as_mut()
        .unwrap()
        .required_during_scheduling_ignored_during_execution
        .as_mut()
        .unwrap()
        .node_selector_terms
        .pop();
    assert!(!required_node_affinity(&nothing, &n));
    // PreferNoSchedule never filters; an empty key with Exists tolerates everything.
    let soft = mk_node("s", &[], &[("k", "PreferNoSchedule")]);
    assert!(untolerated_taint(&PodSpec::default(), &soft).is_none());
    let all = PodSpec {
        tolerations: Some(vec![Toleration {
            operator: Some("Exists".into()),
            ..Default::default()
        }]),
        ..Default::default()
    };
    assert!(untolerated_taint(&all, &revoked()).is_none());
    let equal = Toleration {
        key: Some(UNVERIFIED_TAINT.into()),
        value: Some("v".into()),
        ..Default::default()
    };
    assert!(!tolerates(
        &equal,
        &unverified().spec.unwrap().taints.unwrap()[0]
    ));
}
