use std::collections::HashMap;

use cel::{Context, Program, Value as CelValue};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kubeflavor_core::flavor::labels::check_flavor_label_key;
use kubeflavor_core::flavor::{FlavorRules, FlavorSpec as CoreSpec};
use proptest::prelude::*;
use serde_json::Value;

use super::*;

fn schema_json(crd: &CustomResourceDefinition) -> Value {
    serde_json::to_value(
        crd.spec.versions[0]
            .schema
            .as_ref()
            .unwrap()
            .open_api_v3_schema
            .as_ref()
            .unwrap(),
    )
    .unwrap()
}

/// The `x-kubernetes-validations` rules of `spec.labels`, as the API server receives them.
fn label_rules() -> Vec<String> {
    let schema = schema_json(&flavor_crd());
    schema["properties"]["spec"]["properties"]["labels"]["x-kubernetes-validations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["rule"].as_str().unwrap().to_string())
        .collect()
}

/// Evaluate one CEL rule with `self` bound to a labels map, as the API server does for a
/// rule on a map-typed field.
fn eval(rule: &str, labels: &HashMap<String, String>) -> bool {
    let program =
        Program::compile(rule).unwrap_or_else(|e| panic!("rule does not compile: {e:?}\n{rule}"));
    let mut context = Context::default();
    context.add_variable_from_value("self", labels.clone());
    match program.execute(&context) {
        Ok(CelValue::Bool(b)) => b,
        other => panic!("rule did not give a bool: {other:?}\n{rule}"),
    }
}

/// What the API server decides with all the CRD's label rules for one key.
fn cel_accepts(key: &str) -> bool {
    let labels = HashMap::from([(key.to_string(), "v".to_string())]);
    label_rules().iter().all(|rule| eval(rule, &labels))
}

/// What kubeflavor-core decides for the same key in a Flavor.
fn core_accepts(key: &str) -> bool {
    let spec = CoreSpec {
        labels: [(key.to_string(), "v".to_string())].into(),
        ..Default::default()
    };
    FlavorRules::from_spec(&spec).is_ok()
}

/// Keys around every edge of the NodeRestriction rule on which Node labels a kubelet may set.
const KEY_TABLE: &[(&str, bool)] = &[
    ("kubeflavor.node-restriction.kubernetes.io/tier", true),
    // The input labels' prefix is the controller's: a Flavor may not set labels under it.
    (
        "input.kubeflavor.node-restriction.kubernetes.io/site",
        false,
    ),
    ("node-restriction.kubernetes.io/tier", true),
    ("a.b.node-restriction.kubernetes.io/x", true),
    ("node-role.kubernetes.io/edge", true),
    ("kubernetes.io/flavor", true),
    ("k8s.io/flavor", true),
    ("example.k8s.io/flavor", true),
    ("topology.kubernetes.io/rack", true),
    ("kubernetes.io/hostname", false),
    ("kubernetes.io/arch", false),
    ("kubernetes.io/os", false),
    ("beta.kubernetes.io/arch", false),
    ("beta.kubernetes.io/os", false),
    ("beta.kubernetes.io/instance-type", false),
    ("node.kubernetes.io/instance-type", false),
    ("failure-domain.beta.kubernetes.io/region", false),
    ("failure-domain.beta.kubernetes.io/zone", false),
    ("topology.kubernetes.io/region", false),
    ("topology.kubernetes.io/zone", false),
    ("node.kubernetes.io/anything", false),
    ("x.node.kubernetes.io/anything", false),
    ("kubelet.kubernetes.io/anything", false),
    ("x.kubelet.kubernetes.io/anything", false),
    ("example.com/flavor", false),
    ("flavor", false),
    ("node-restriction.kubernetes.io.evil.com/x", false),
    ("evilkubernetes.io/x", false),
    ("kubernetes.io.evil.com/x", false),
    ("notnode-restriction.kubernetes.io/x", true),
    ("kubeflavor.node-restriction.kubernetes.io/flavor", false),
    (
        "kubeflavor.node-restriction.kubernetes.io/trust-level",
        false,
    ),
    ("Kubernetes.io/x", false),
    ("kubernetes.io/", false),
    ("/x", false),
    ("a/b/c", false),
];

#[test]
fn cel_rule_agrees_with_core_on_the_key_table() {
    for &(key, expected) in KEY_TABLE {
        assert_eq!(core_accepts(key), expected, "core on {key:?}");
        assert_eq!(cel_accepts(key), expected, "CEL on {key:?}");
    }
    // Kept next to the table so a reader sees the exact rule the API server runs.
    assert!(
        schema::label_key_rule()
            .starts_with("self.all(k, k.matches('^([^/]*\\\\.)?node-restriction")
    );
}

#[test]
fn cel_node_restriction_rule_matches_kubelet_may_set() {
    // The NodeRestriction rule alone (the second rule) against core's predicate.
    let rule = schema::label_key_rule();
    for &(key, _) in KEY_TABLE {
        if kubeflavor_core::flavor::labels::check_label_key(key).is_err() {
            continue;
        }
        let labels = HashMap::from([(key.to_string(), String::new())]);
        assert_eq!(
            eval(&rule, &labels),
            !kubeflavor_core::flavor::labels::kubelet_may_set(key),
            "{key:?}"
        );
    }
}

fn prefixes() -> impl Strategy<Value = String> {
    prop::sample::select(vec![
        "",
        "kubernetes.io/",
        "k8s.io/",
        "node-restriction.kubernetes.io/",
        "kubeflavor.node-restriction.kubernetes.io/",
        "node.kubernetes.io/",
        "a.node.kubernetes.io/",
        "kubelet.kubernetes.io/",
        "node-role.kubernetes.io/",
        "topology.kubernetes.io/",
        "beta.kubernetes.io/",
        "failure-domain.beta.kubernetes.io/",
        "x.k8s.io/",
        "example.com/",
        "kubernetes.io.example.com/",
        "evilk8s.io/",
        "node-restriction.kubernetes.io.x/",
    ])
    .prop_map(str::to_string)
}

fn names() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec![
            "hostname",
            "arch",
            "os",
            "zone",
            "region",
            "instance-type",
            "flavor",
            "trust-level"
        ])
        .prop_map(str::to_string),
        "[a-z0-9]([-a-z0-9_.]{0,8}[a-z0-9])?",
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]
    #[test]
    fn cel_and_core_agree_on_generated_keys(prefix in prefixes(), name in names()) {
        let key = format!("{prefix}{name}");
        prop_assert_eq!(cel_accepts(&key), core_accepts(&key), "{}", key);
        prop_assert_eq!(check_flavor_label_key(&key).is_ok() && core_accepts(&key), core_accepts(&key));
    }
}

#[test]
fn crds_are_cluster_scoped_with_status_short_names_and_columns() {
    for (crd, plural, short) in [
        (flavor_crd(), "flavors", "flv"),
        (flavor_binding_crd(), "flavorbindings", "flvb"),
    ] {
        assert_eq!(
            crd.metadata.name.as_deref(),
            Some(format!("{plural}.kubeflavor.io").as_str())
        );
        assert_eq!(crd.spec.group, GROUP);
        assert_eq!(crd.spec.scope, "Cluster");
        assert_eq!(
            crd.spec.names.short_names.as_deref(),
            Some(&[short.to_string()][..])
        );
        let version = &crd.spec.versions[0];
        assert_eq!(version.name, VERSION);
        assert!(version.served && version.storage);
        assert!(
            version
                .subresources
                .as_ref()
                .and_then(|s| s.status.as_ref())
                .is_some()
        );
        let columns: Vec<&str> = version
            .additional_printer_columns
            .iter()
            .flatten()
            .map(|c| c.name.as_str())
            .collect();
        assert_eq!(columns.last(), Some(&"Age"));
        assert!(columns.len() >= 3, "{columns:?}");
    }
}

#[test]
fn flavor_schema_bounds_trust_level_and_taint_effects() {
    let schema = schema_json(&flavor_crd());
    let spec = &schema["properties"]["spec"]["properties"];
    assert_eq!(spec["trustLevel"]["minimum"], 0.0);
    assert_eq!(spec["trustLevel"]["maximum"], 100.0);
    assert_eq!(
        spec["taints"]["items"]["properties"]["effect"]["enum"],
        serde_json::json!(["NoSchedule", "PreferNoSchedule", "NoExecute"])
    );
    assert_eq!(
        spec["tokenDefaults"]["properties"]["maxNodes"]["minimum"],
        1.0
    );
}

#[test]
fn schema_has_no_refs_kubernetes_would_reject() {
    for crd in crds() {
        let text = serde_json::to_string(&crd).unwrap();
        assert!(!text.contains("$ref"), "{}", crd.metadata.name.unwrap());
        assert!(!text.contains("\"$defs\""));
    }
}

#[test]
fn taint_rules_refuse_duplicates_and_reserved_keys() {
    let schema = schema_json(&flavor_crd());
    let rules: Vec<String> =
        schema["properties"]["spec"]["properties"]["taints"]["x-kubernetes-validations"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["rule"].as_str().unwrap().to_string())
            .collect();
    let taints = |list: &[(&str, &str)]| -> Vec<HashMap<String, String>> {
        list.iter()
            .map(|(k, e)| {
                HashMap::from([
                    ("key".to_string(), k.to_string()),
                    ("effect".to_string(), e.to_string()),
                ])
            })
            .collect()
    };
    let eval_list = |rule: &str, list: Vec<HashMap<String, String>>| {
        let program = Program::compile(rule).unwrap();
        let mut context = Context::default();
        context.add_variable_from_value("self", list);
        matches!(program.execute(&context), Ok(CelValue::Bool(true)))
    };
    let ok = taints(&[
        ("example.com/a", "NoSchedule"),
        ("example.com/a", "NoExecute"),
    ]);
    let dup = taints(&[
        ("example.com/a", "NoSchedule"),
        ("example.com/a", "NoSchedule"),
    ]);
    let reserved = taints(&[("kubeflavor.io/revoked", "NoExecute")]);
    assert!(rules.iter().all(|r| eval_list(r, ok.clone())));
    assert!(!rules.iter().all(|r| eval_list(r, dup.clone())));
    assert!(!rules.iter().all(|r| eval_list(r, reserved.clone())));
}

#[test]
fn binding_names_its_node_and_serializes_camel_case() {
    let binding = FlavorBinding::new(
        "node-1",
        FlavorBindingSpec {
            node: "node-1".into(),
            flavor: "sweet".into(),
            token_id: "abcdef".into(),
            token_uid: None,
            csr_name: "csr-x".into(),
            public_key_sha256: "0".repeat(64),
            bound_at: "2026-11-30T04:00:00Z".parse().unwrap(),
            issued_to: None,
            issued_by: None,
            requested_by: None,
            identity: None,
            input_labels: Default::default(),
        },
    );
    let json = serde_json::to_value(&binding).unwrap();
    assert_eq!(json["apiVersion"], "kubeflavor.io/v1alpha1");
    assert_eq!(json["kind"], "FlavorBinding");
    assert_eq!(json["spec"]["tokenId"], "abcdef");
    assert_eq!(json["spec"]["boundAt"], "2026-11-30T04:00:00Z");
    let rule = &schema_json(&flavor_binding_crd())["x-kubernetes-validations"][0]["rule"];
    assert_eq!(rule, "self.metadata.name == self.spec.node");
}

/// The rules of one input label key (`spec.inputLabels.keys[]` item and its `pattern`), as
/// the API server evaluates them, against core's reading of the same key: a pattern the
/// API server's regular-expression engine cannot compile fails to evaluate, which refuses
/// the Flavor, and each key takes exactly one of values and pattern.
#[test]
fn input_label_key_rules_agree_with_core() {
    let schema = schema_json(&flavor_crd());
    let keys = &schema["properties"]["spec"]["properties"]["inputLabels"]["properties"]["keys"];
    let item_rules = keys["items"]["x-kubernetes-validations"]
        .as_array()
        .unwrap();
    let pattern_rules = keys["items"]["properties"]["pattern"]["x-kubernetes-validations"]
        .as_array()
        .unwrap();
    let eval_value = |rule: &str, value: serde_json::Value| -> bool {
        let program = Program::compile(rule).unwrap();
        let mut context = Context::default();
        context.add_variable_from_value("self", cel::to_value(value).unwrap());
        matches!(program.execute(&context), Ok(CelValue::Bool(true)))
    };
    for (pattern, valid) in [
        ("seg-[0-9]{1,4}", true),
        ("[a-z]+", true),
        ("(unclosed", false),
        ("[z-a]", false),
        ("a{2,1}", false),
    ] {
        let cel = pattern_rules
            .iter()
            .all(|r| eval_value(r["rule"].as_str().unwrap(), serde_json::json!(pattern)));
        let core = pattern
            .parse::<kubeflavor_core::flavor::input_labels::InputPattern>()
            .is_ok();
        assert_eq!((cel, core), (valid, valid), "{pattern}");
    }
    for (item, valid) in [
        (serde_json::json!({"key": "site", "values": ["a"]}), true),
        (serde_json::json!({"key": "site", "pattern": "a"}), true),
        (serde_json::json!({"key": "site"}), false),
        (
            serde_json::json!({"key": "site", "values": ["a"], "pattern": "a"}),
            false,
        ),
    ] {
        let cel = item_rules
            .iter()
            .all(|r| eval_value(r["rule"].as_str().unwrap(), item.clone()));
        assert_eq!(cel, valid, "{item}");
    }
}
