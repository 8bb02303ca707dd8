//! The API server itself enforces kubeflavor's CRD rules (schema keywords and CEL), so a
//! Flavor or FlavorBinding written with kubectl is held to what the CLI checks (P2 trusted
//! labels, P3 binding).
//! Runs on testkube, or on the real cluster named by `KUBEFLAVOR_E2E_KUBECONFIG`.

use crate::support::Env;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kubeflavor_cluster::crd::{Flavor, FlavorBinding, FlavorSpec};
use serde_json::json;

fn causes(err: kube::Error) -> Vec<(String, String)> {
    let kube::Error::Api(status) = err else {
        panic!("not an API error: {err:?}")
    };
    assert_eq!(status.code, 422, "{status:?}");
    status
        .details
        .expect("details")
        .causes
        .into_iter()
        .map(|c| (c.field, c.message))
        .collect()
}

fn flavor(name: &str, spec: serde_json::Value) -> Flavor {
    serde_json::from_value(json!({
        "apiVersion": "kubeflavor.io/v1alpha1", "kind": "Flavor",
        "metadata": {"name": name}, "spec": spec,
    }))
    .expect("a Flavor")
}

#[tokio::test]
async fn the_api_server_refuses_a_kubelet_writable_label_key_and_accepts_a_restricted_one() {
    let env = Env::start().await;
    env.install().await;
    let flavors: Api<Flavor> = Api::all(env.client.clone());
    let pp = PostParams::default();

    let sneaky = env.name("sneaky");
    let bad = flavor(&sneaky, json!({"labels": {"example.com/tier": "gold"}}));
    let got = causes(flavors.create(&pp, &bad).await.unwrap_err());
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0].0, "spec.labels");
    assert!(
        got[0]
            .1
            .starts_with("Invalid value: every label key must be one a kubelet cannot set"),
        "{got:?}"
    );
    assert!(got[0].1.contains("(NodeRestriction)"), "{got:?}");

    let reserved = flavor(
        &sneaky,
        json!({"labels": {"kubeflavor.node-restriction.kubernetes.io/flavor": "x"}}),
    );
    let got = causes(flavors.create(&pp, &reserved).await.unwrap_err());
    assert_eq!(got[0].0, "spec.labels");
    assert!(
        got[0]
            .1
            .contains("kubeflavor sets the flavor and trust-level labels itself"),
        "{got:?}"
    );

    let bounds = flavor(
        &sneaky,
        json!({"trustLevel": 101, "taints": [
        {"key": "a.example.com/x", "effect": "NoSchedule"},
        {"key": "a.example.com/x", "effect": "NoSchedule"}]}),
    );
    let got = causes(flavors.create(&pp, &bounds).await.unwrap_err());
    assert_eq!(
        got,
        vec![
            (
                "spec.trustLevel".to_string(),
                "Invalid value: 101: spec.trustLevel in body should be less than or equal to 100"
                    .to_string()
            ),
            (
                "spec.taints".to_string(),
                "Invalid value: a taint key may appear only once per effect".to_string()
            ),
        ]
    );

    let good_name = env.name("gold");
    let mut spec = FlavorSpec::default();
    spec.labels.insert(
        "tier.node-restriction.kubernetes.io/gold".into(),
        "true".into(),
    );
    spec.labels
        .insert("node-role.kubernetes.io/edge".into(), "".into());
    spec.trust_level = Some(80);
    let created = flavors
        .create(&pp, &Flavor::new(&good_name, spec))
        .await
        .expect("a Flavor with NodeRestriction-protected keys is accepted");
    assert_eq!(created.spec.trust_level, Some(80));

    let patch = Patch::Merge(json!({"spec": {"labels": {"kubernetes.io/hostname": "x"}}}));
    let got = causes(
        flavors
            .patch(&good_name, &PatchParams::default(), &patch)
            .await
            .unwrap_err(),
    );
    assert_eq!(got[0].0, "spec.labels", "{got:?}");

    flavors
        .delete(&good_name, &DeleteParams::default())
        .await
        .unwrap();
}

/// `spec.tokenLimits` is checked by the API server too: a positive maxTTL in kubeadm's
/// duration syntax (0 is allowNeverExpiring's to say), a maxNodes of 1 to 10000, a boolean.
#[tokio::test]
async fn the_api_server_checks_token_limits() {
    let env = Env::start().await;
    env.install().await;
    let flavors: Api<Flavor> = Api::all(env.client.clone());
    let pp = PostParams::default();
    let name = env.name("limits");
    for (limits, field, needle) in [
        (
            json!({"maxTTL": "0"}),
            "spec.tokenLimits.maxTTL",
            "allowNeverExpiring",
        ),
        (
            json!({"maxTTL": "0h0m"}),
            "spec.tokenLimits.maxTTL",
            "allowNeverExpiring",
        ),
        (
            json!({"maxTTL": "7d"}),
            "spec.tokenLimits.maxTTL",
            "should match",
        ),
        (
            json!({"maxNodes": 0}),
            "spec.tokenLimits.maxNodes",
            "greater than or equal to 1",
        ),
        (
            json!({"allowNeverExpiring": "yes"}),
            "spec.tokenLimits.allowNeverExpiring",
            "boolean",
        ),
    ] {
        let bad = serde_json::from_value::<serde_json::Value>(json!({
            "apiVersion": "kubeflavor.io/v1alpha1", "kind": "Flavor",
            "metadata": {"name": name}, "spec": {"tokenLimits": limits},
        }))
        .unwrap();
        let raw: Api<kube::core::DynamicObject> = Api::all_with(
            env.client.clone(),
            &kube::core::ApiResource::erase::<Flavor>(&()),
        );
        let err = raw
            .create(&pp, &serde_json::from_value(bad).unwrap())
            .await
            .unwrap_err();
        // A type error comes first; the API server then adds a cause saying the CEL rules
        // were not run.
        let got = causes(err);
        assert_eq!(got[0].0, field, "{limits}: {got:?}");
        assert!(got[0].1.contains(needle), "{limits}: {got:?}");
    }
    let good = flavor(
        &name,
        json!({"tokenLimits": {"maxTTL": "168h", "maxNodes": 10, "allowNeverExpiring": true}}),
    );
    let created = flavors.create(&pp, &good).await.expect("valid limits");
    let limits = created.spec.token_limits.expect("stored");
    assert_eq!(
        (
            limits.max_ttl.as_deref(),
            limits.max_nodes,
            limits.allow_never_expiring
        ),
        (Some("168h"), Some(10), Some(true))
    );
    flavors
        .delete(&name, &DeleteParams::default())
        .await
        .unwrap();
}

/// A FlavorBinding's node, token and flavor are fixed once written (a transition rule with
/// `oldSelf`), and it must be named after its node (a rule on the object root).
#[tokio::test]
async fn a_flavor_binding_cannot_move_to_another_token() {
    let env = Env::start().await;
    env.install().await;
    let bindings: Api<FlavorBinding> = Api::all(env.client.clone());
    let node = env.name("node");
    let binding = |name: &str| -> FlavorBinding {
        serde_json::from_value(json!({
            "apiVersion": "kubeflavor.io/v1alpha1", "kind": "FlavorBinding",
            "metadata": {"name": name},
            "spec": {"node": node, "flavor": "gold", "tokenId": "abcdef", "csrName": "csr-1",
                     "publicKeySha256": "0".repeat(64), "boundAt": "2026-11-30T04:22:19Z"},
        }))
        .expect("a FlavorBinding")
    };
    let pp = PostParams::default();
    let got = causes(
        bindings
            .create(&pp, &binding(&env.name("other")))
            .await
            .unwrap_err(),
    );
    assert_eq!(
        got,
        vec![("<nil>".to_string(), "Invalid value: a FlavorBinding is named after its node: metadata.name must equal spec.node".to_string())]
    );
    bindings
        .create(&pp, &binding(&node))
        .await
        .expect("a well-formed binding");
    let moved = Patch::Merge(json!({"spec": {"tokenId": "zzzzzz"}}));
    let got = causes(
        bindings
            .patch(&node, &PatchParams::default(), &moved)
            .await
            .unwrap_err(),
    );
    assert_eq!(got[0].0, "spec");
    assert!(
        got[0]
            .1
            .contains("node, flavor, tokenId, tokenUid, csrName, publicKeySha256 and boundAt of a FlavorBinding are written once"),
        "{got:?}"
    );
    bindings
        .delete(&node, &DeleteParams::default())
        .await
        .unwrap();
}

/// A FlavorBinding's custody (issuedTo, issuedBy, identity) is written once, when it is made: it
/// cannot be changed, removed or added later. `node list` and `node get` show it.
#[tokio::test]
async fn a_flavor_binding_keeps_the_custody_it_was_made_with() {
    let env = Env::start().await;
    env.install().await;
    let bindings: Api<FlavorBinding> = Api::all(env.client.clone());
    let node = env.name("custody");
    let binding: FlavorBinding = serde_json::from_value(json!({
        "apiVersion": "kubeflavor.io/v1alpha1", "kind": "FlavorBinding",
        "metadata": {"name": node},
        "spec": {"node": node, "flavor": "gold", "tokenId": "abcdef", "csrName": "csr-1",
                 "publicKeySha256": "0".repeat(64), "boundAt": "2026-11-30T04:22:19Z",
                 "issuedTo": "acme-corp/alice"},
    }))
    .expect("a FlavorBinding");
    bindings
        .create(&PostParams::default(), &binding)
        .await
        .expect("a binding with a custody");
    for spec in [
        json!({"issuedTo": "globex/bob"}),
        json!({"issuedTo": null}),
        json!({"issuedBy": "kubernetes-admin"}),
        json!({"identity": {"issuer": "https://login.acme.example", "subject": "u-1"}}),
    ] {
        let got = causes(
            bindings
                .patch(
                    &node,
                    &PatchParams::default(),
                    &Patch::Merge(json!({ "spec": spec })),
                )
                .await
                .unwrap_err(),
        );
        assert!(
            got.iter().any(|(_, m)| m.contains(
                "issuedTo, issuedBy, requestedBy and identity of a FlavorBinding are written once"
            )),
            "{spec}: {got:?}"
        );
    }
    let stored = bindings.get(&node).await.unwrap();
    assert_eq!(stored.spec.issued_to.as_deref(), Some("acme-corp/alice"));
    assert_eq!(stored.spec.issued_by, None);

    let listed = env.kf(&["node", "list"]).await;
    let listed = listed.expect_ok();
    let header = listed.lines().next().unwrap();
    assert!(header.ends_with("ISSUED-TO"), "{listed}");
    let row = listed.lines().find(|l| l.starts_with(&node)).unwrap();
    assert_eq!(&row[header.find("ISSUED-TO").unwrap()..], "acme-corp/alice");
    let got = env.kf(&["node", "get", &node]).await;
    let got = got.expect_ok();
    let header = got.lines().next().unwrap();
    let row = got.lines().nth(1).unwrap();
    let (to, by, identity, input) = (
        header.find("ISSUED-TO").unwrap(),
        header.find("ISSUED-BY").unwrap(),
        header.find("IDENTITY").unwrap(),
        header.find("INPUT-LABELS").unwrap(),
    );
    assert_eq!(row[to..by].trim_end(), "acme-corp/alice", "{got}");
    assert_eq!(row[by..identity].trim_end(), "<none>", "{got}");
    assert_eq!(row[identity..input].trim_end(), "<none>", "{got}");
    assert_eq!(&row[input..], "<none>", "{got}");
    let yaml: serde_json::Value = serde_saphyr::from_str(
        env.kf(&["node", "get", &node, "-o", "yaml"])
            .await
            .expect_ok(),
    )
    .unwrap();
    assert_eq!(yaml["spec"]["issuedTo"], "acme-corp/alice");
    bindings
        .delete(&node, &DeleteParams::default())
        .await
        .unwrap();
}

/// `spec.servingAddresses`: IP ranges as Kubernetes' CEL `isCIDR` reads them, at most 16.
#[tokio::test]
async fn the_api_server_checks_serving_addresses() {
    let env = Env::start().await;
    env.install().await;
    let flavors: Api<Flavor> = Api::all(env.client.clone());
    let pp = PostParams::default();
    let name = env.name("serving");
    for (addresses, field, needle) in [
        (json!(["10.0.0.0"]), "spec.servingAddresses[0]", "IP range"),
        (
            json!(["10.0.0.0/8", "::ffff:10.0.0.0/104"]),
            "spec.servingAddresses[1]",
            "IP range",
        ),
        (
            json!(["10.0.0.0/33"]),
            "spec.servingAddresses[0]",
            "IP range",
        ),
        (
            json!(vec!["10.0.0.0/8"; 17]),
            "spec.servingAddresses",
            "must have at most 16 items",
        ),
    ] {
        let err = flavors
            .create(&pp, &flavor(&name, json!({"servingAddresses": addresses})))
            .await
            .unwrap_err();
        let got = causes(err);
        assert!(
            got.iter().any(|(f, m)| f == field && m.contains(needle)),
            "{addresses}: {got:?}"
        );
    }
    let good = flavor(
        &name,
        json!({"servingAddresses": ["10.20.0.0/16", "2001:db8::/48"]}),
    );
    let created = flavors.create(&pp, &good).await.expect("valid ranges");
    assert_eq!(
        created.spec.serving_addresses,
        ["10.20.0.0/16", "2001:db8::/48"]
    );
    flavors
        .delete(&name, &DeleteParams::default())
        .await
        .unwrap();
}

/// `spec.inputLabels` is checked by the API server too: each key takes exactly one of
/// values and pattern, a pattern must be a regular expression its engine compiles (a rule
/// that fails to evaluate refuses the object), and a Flavor may not set labels under the
/// input labels' prefix, which is the controller's.
#[tokio::test]
async fn the_api_server_checks_input_label_rules() {
    let env = Env::start().await;
    env.install().await;
    let flavors: Api<Flavor> = Api::all(env.client.clone());
    let pp = PostParams::default();
    let name = env.name("inputs");
    for (spec, field) in [
        (
            json!({"inputLabels": {"keys": [{"key": "segment", "pattern": "(unclosed"}]}}),
            "spec.inputLabels.keys[0].pattern",
        ),
        (
            json!({"inputLabels": {"keys": [{"key": "site", "values": ["a"], "pattern": "a"}]}}),
            "spec.inputLabels.keys[0]",
        ),
        (
            json!({"inputLabels": {"keys": [{"key": "site"}]}}),
            "spec.inputLabels.keys[0]",
        ),
        (
            json!({"inputLabels": {"keys": [{"key": "a/b", "values": ["a"]}]}}),
            "spec.inputLabels.keys[0].key",
        ),
        (
            json!({"labels": {"input.kubeflavor.node-restriction.kubernetes.io/site": "x"}}),
            "spec.labels",
        ),
    ] {
        let got = causes(
            flavors
                .create(&pp, &flavor(&name, spec.clone()))
                .await
                .unwrap_err(),
        );
        assert!(
            got.iter().any(|(f, _)| f == field),
            "{spec}: expected a cause on {field}: {got:?}"
        );
    }
    let good = flavor(
        &name,
        json!({"inputLabels": {"maxLabels": 2, "keys": [
            {"key": "site", "values": ["berlin", "paris"]},
            {"key": "segment", "pattern": "seg-[0-9]{1,4}"},
        ]}}),
    );
    let created = flavors
        .create(&pp, &good)
        .await
        .expect("valid input labels");
    assert_eq!(created.spec.input_labels, good.spec.input_labels);
    flavors
        .delete(&name, &DeleteParams::default())
        .await
        .unwrap();
}
