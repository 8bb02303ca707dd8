//! Input labels: what a node's administrator told the portal reaches the Node through the
//! join-token API and the controller, under a key the kubelet cannot write, only as the
//! Flavor allows, and goes with the flavor when the node is revoked.

use std::collections::BTreeMap;

use http::StatusCode;
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use kubeflavor_cluster::crd::Flavor;
use kubeflavor_core::flavor::input_labels::INPUT_LABEL_PREFIX;
use kubeflavor_core::node::state::Revocation;
use kubeflavor_core::token::BootstrapToken;
use serde_json::json;

use crate::harness::*;
use crate::serve::{call, path, portal, start_api, tokens_of};

/// A Flavor (labels `TIER_KEY=gold`) whose tokens may carry `site` (berlin or paris) and
/// `segment` (`seg-` and 1-4 digits), at most two.
pub(crate) async fn sited_flavor(h: &Harness, base: &str) -> String {
    let name = h.name(base);
    let flavor: Flavor = serde_json::from_value(json!({
        "apiVersion": "kubeflavor.io/v1alpha1",
        "kind": "Flavor",
        "metadata": {"name": name},
        "spec": {
            "labels": {TIER_KEY: "gold"},
            "inputLabels": {"maxLabels": 2, "keys": [
                {"key": "site", "values": ["berlin", "paris"]},
                {"key": "segment", "pattern": "seg-[0-9]{1,4}"},
            ]},
        },
    }))
    .expect("a Flavor");
    Api::<Flavor>::all(h.admin.clone())
        .create(&PostParams::default(), &flavor)
        .await
        .expect("flavor created");
    name
}

fn input_key(key: &str) -> String {
    format!("{INPUT_LABEL_PREFIX}{key}")
}

/// The Node's labels under the input prefix.
fn input_labels_of(node: &Node) -> BTreeMap<String, String> {
    node.metadata
        .labels
        .iter()
        .flatten()
        .filter(|(k, _)| k.starts_with(INPUT_LABEL_PREFIX))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_portals_input_labels_reach_the_node_through_the_controller_only() {
    let h = Harness::start().await;
    let flavor = sited_flavor(&h, "sited").await;
    let portal = portal(&h, &[&flavor]).await;
    let api = start_api(&h).await;
    let ctl = h.start_controller(h.options("ctl"));

    // A key the flavor does not take and a value it does not allow: one answer each,
    // alike, and no token.
    let (code, refused) = call(
        &api,
        &path(&flavor),
        Some(&portal),
        None,
        br#"{"issuedTo": "acme/alice", "labels": {"site": "rome", "rack": "r1"}}"#,
    )
    .await;
    assert_eq!(code, StatusCode::UNPROCESSABLE_ENTITY, "{refused}");
    let causes = refused["details"]["causes"].as_array().expect("causes");
    let fields: Vec<&str> = causes.iter().filter_map(|c| c["field"].as_str()).collect();
    assert_eq!(fields, ["labels[rack]", "labels[site]"], "{refused}");
    assert_eq!(causes[0]["message"], causes[1]["message"], "{refused}");
    assert!(tokens_of(&h, &flavor).await.is_empty(), "nothing minted");

    let (code, minted) = call(
        &api,
        &path(&flavor),
        Some(&portal),
        None,
        br#"{"issuedTo": "acme/alice", "labels": {"site": "paris", "segment": "seg-7"}}"#,
    )
    .await;
    assert_eq!(code, StatusCode::CREATED, "{minted}");
    assert_eq!(
        minted["labels"],
        json!({"segment": "seg-7", "site": "paris"})
    );
    let token: BootstrapToken = minted["token"].as_str().unwrap().parse().unwrap();

    // The node joins; its binding records the labels, the controller puts them on the Node.
    let (node, csr) = (h.name("sited-node"), h.name("sited-csr"));
    h.submit_csr(&h.bootstrap_client(&token).await, &csr, &node)
        .await;
    assert_eq!(h.decision(&csr).await, "Approved");
    let binding = h
        .binding_until(&node, "bound with input labels", |b| {
            !b.spec.input_labels.is_empty()
        })
        .await;
    let said = BTreeMap::from([
        ("segment".to_string(), "seg-7".to_string()),
        ("site".to_string(), "paris".to_string()),
    ]);
    assert_eq!(binding.spec.input_labels, said);
    h.register_node(&csr, &node, &[], &[]).await;
    let want: BTreeMap<String, String> = said
        .iter()
        .map(|(k, v)| (input_key(k), v.clone()))
        .collect();
    h.node_until(&node, "flavored with its input labels", |n| {
        label(n, TIER_KEY) == Some("gold") && input_labels_of(n) == want
    })
    .await;

    // The kubelet cannot write under the prefix (NodeRestriction), neither change a value
    // nor add a key.
    let kubelet = Api::<Node>::all(h.node_client(&csr).await);
    for (key, value) in [("site", "berlin"), ("customer", "globex")] {
        let patch = json!({"metadata": {"labels": {input_key(key): value}}});
        match kubelet
            .patch(&node, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Err(kube::Error::Api(s)) => assert_eq!(s.code, 403, "{key}: {s:?}"),
            other => panic!("{key}: the node's own write must be refused, got {other:?}"),
        }
    }

    // Drift: an admin changes one and adds another under the prefix; the binding wins.
    let patch = json!({"metadata": {"labels": {input_key("site"): "berlin", input_key("customer"): "globex"}}});
    h.nodes()
        .patch(&node, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("admin patch");
    h.node_until(&node, "input labels restored", |n| {
        input_labels_of(n) == want
    })
    .await;

    // Re-created by its kubelet, without them: the controller puts them back.
    h.delete_node(&node).await;
    h.register_node(&csr, &node, &[], &[]).await;
    h.node_until(&node, "input labels back after re-creation", |n| {
        input_labels_of(n) == want
    })
    .await;

    // What the binding recorded is written once.
    let edit = json!({"spec": {"inputLabels": {"site": "berlin"}}});
    match h
        .bindings()
        .patch(&node, &PatchParams::default(), &Patch::Merge(&edit))
        .await
    {
        Err(kube::Error::Api(s)) => assert_eq!(s.code, 422, "{s:?}"),
        other => panic!("a binding's input labels must not change, got {other:?}"),
    }

    // Revoked: the input labels go with the flavor.
    kubeflavor_cluster::bindings::revoke(&h.admin, &node, &Revocation::ByAdmin)
        .await
        .expect("revoked");
    h.node_until(&node, "input labels gone with the flavor", |n| {
        input_labels_of(n).is_empty() && label(n, TIER_KEY).is_none()
    })
    .await;
    ctl.stop().await;
}

/// The Flavor has the last word: a token whose input labels it no longer allows (its
/// allowlist narrowed after the mint) gets its CSR denied, and no binding.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn input_labels_the_flavor_no_longer_allows_are_denied() {
    let h = Harness::start().await;
    let flavor = sited_flavor(&h, "narrowed").await;
    let portal = portal(&h, &[&flavor]).await;
    let api = start_api(&h).await;
    let (code, minted) = call(
        &api,
        &path(&flavor),
        Some(&portal),
        None,
        br#"{"issuedTo": "acme/alice", "labels": {"site": "paris"}}"#,
    )
    .await;
    assert_eq!(code, StatusCode::CREATED, "{minted}");
    let token: BootstrapToken = minted["token"].as_str().unwrap().parse().unwrap();
    let narrow =
        json!({"spec": {"inputLabels": {"keys": [{"key": "site", "values": ["berlin"]}]}}});
    Api::<Flavor>::all(h.admin.clone())
        .patch(&flavor, &PatchParams::default(), &Patch::Merge(&narrow))
        .await
        .expect("flavor narrowed");
    let ctl = h.start_controller(h.options("ctl"));
    let (node, csr) = (h.name("narrowed-node"), h.name("narrowed-csr"));
    h.submit_csr(&h.bootstrap_client(&token).await, &csr, &node)
        .await;
    assert_eq!(h.decision(&csr).await, "Denied");
    assert!(
        h.bindings().get_opt(&node).await.expect("read").is_none(),
        "no binding"
    );
    ctl.stop().await;
}

/// An ed25519 public key line as ssh-keygen writes it, of 32 sample bytes.
fn ed25519_line(byte: u8, comment: &str) -> String {
    kubeflavor_core::mint::ssh_key::SshPublicKey::ed25519(&[byte; 32], Some(comment))
        .unwrap()
        .to_string()
}

/// The node administrator's SSH keys reach the cloud-init document (cloud-init's
/// `ssh_authorized_keys`) and nothing in the cluster; a bad one is refused before a token
/// exists.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_portals_ssh_keys_reach_the_cloud_init_document_only() {
    let h = Harness::start().await;
    let flavor = sited_flavor(&h, "keyed").await;
    let portal = portal(&h, &[&flavor]).await;
    let api = start_api(&h).await;

    let bad = json!({"issuedTo": "acme/alice", "output": "cloud-init",
                     "sshAuthorizedKeys": [ed25519_line(1, "alice"), "ssh-rsa AAAAB3NzaC1yc2E= short"]});
    let (code, refused) = call(
        &api,
        &path(&flavor),
        Some(&portal),
        None,
        bad.to_string().as_bytes(),
    )
    .await;
    assert_eq!(code, StatusCode::UNPROCESSABLE_ENTITY, "{refused}");
    assert_eq!(
        refused["details"]["causes"][0]["field"], "sshAuthorizedKeys[1]",
        "{refused}"
    );
    assert!(tokens_of(&h, &flavor).await.is_empty(), "nothing minted");

    // A comment holding a noncharacter: its document would not load in cloud-init's YAML
    // reader (the VM would never join), so the request is refused, naming the character.
    let blob_only = ed25519_line(2, "x");
    for (c, code_point) in [
        ('\u{FFFE}', "U+FFFE"),
        ('\u{FFFF}', "U+FFFF"),
        ('\u{FDD0}', "U+FDD0"),
    ] {
        let line = format!("{} bob{c}", blob_only.rsplit_once(' ').unwrap().0);
        let body =
            json!({"issuedTo": "acme/alice", "output": "cloud-init", "sshAuthorizedKeys": [line]});
        let (code, refused) = call(
            &api,
            &path(&flavor),
            Some(&portal),
            None,
            body.to_string().as_bytes(),
        )
        .await;
        assert_eq!(code, StatusCode::UNPROCESSABLE_ENTITY, "{refused}");
        let cause = &refused["details"]["causes"][0];
        assert_eq!(cause["field"], "sshAuthorizedKeys[0]", "{refused}");
        let message = cause["message"].as_str().unwrap_or_default();
        assert!(
            message.contains(code_point) && message.contains("noncharacter"),
            "{refused}"
        );
    }
    assert!(tokens_of(&h, &flavor).await.is_empty(), "nothing minted");

    let key = ed25519_line(7, "alice@laptop");
    let body =
        json!({"issuedTo": "acme/alice", "output": "cloud-init", "sshAuthorizedKeys": [key]});
    let (code, minted) = call(
        &api,
        &path(&flavor),
        Some(&portal),
        None,
        body.to_string().as_bytes(),
    )
    .await;
    assert_eq!(code, StatusCode::CREATED, "{minted}");
    let document: serde_json::Value =
        serde_saphyr::from_str(minted["cloudInit"].as_str().expect("a document")).expect("YAML");
    assert_eq!(document["ssh_authorized_keys"], json!([key]));
    let blob = key.split(' ').nth(1).unwrap();
    let secrets = tokens_of(&h, &flavor).await;
    assert_eq!(secrets.len(), 1);
    let stored = serde_json::to_string(&secrets[0]).unwrap();
    assert!(
        !stored.contains(blob),
        "the key is not stored with the token"
    );
}
