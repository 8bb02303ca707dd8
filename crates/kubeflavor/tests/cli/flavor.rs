//! End-to-end: `kubeflavor flavor ...` against testkube, or the cluster named by
//! KUBEFLAVOR_E2E_KUBECONFIG.

use crate::support::{Env, assert_one_line_error};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kubeflavor::ExitCode;
use kubeflavor_cluster::crd::{Flavor, FlavorBinding, FlavorBindingSpec};
use serde_json::{Value, json};

async fn flavors(env: &Env) -> Api<Flavor> {
    Api::all(env.client.clone())
}

#[tokio::test]
async fn create_get_list_delete_round_trip() {
    let env = Env::start().await;
    env.install().await;
    let name = env.name("gold");
    let out = env
        .kf(&[
            "flavor",
            "create",
            &name,
            "--label",
            "kubeflavor.node-restriction.kubernetes.io/tier=gold",
            "--label",
            "node-role.kubernetes.io/edge=",
            "--taint",
            "example.com/partner=acme:NoSchedule",
            "--trust-level",
            "75",
            "--ttl",
            "2h",
            "--max-nodes",
            "4",
            "--max-ttl",
            "168h",
            "--max-nodes-limit",
            "10",
            "--allow-never-expiring",
        ])
        .await;
    assert_eq!(
        out.expect_ok(),
        format!("flavor.kubeflavor.io/{name} created\n")
    );

    let stored = flavors(&env).await.get(&name).await.unwrap();
    assert_eq!(stored.spec.trust_level, Some(75));
    assert_eq!(
        stored.spec.labels["kubeflavor.node-restriction.kubernetes.io/tier"],
        "gold"
    );
    assert_eq!(stored.spec.labels["node-role.kubernetes.io/edge"], "");
    assert_eq!(stored.spec.taints[0].key, "example.com/partner");
    let defaults = stored.spec.token_defaults.clone().unwrap();
    assert_eq!(
        (defaults.ttl.as_deref(), defaults.max_nodes),
        (Some("2h"), Some(4))
    );
    let limits = stored.spec.token_limits.clone().unwrap();
    assert_eq!(
        (
            limits.max_ttl.as_deref(),
            limits.max_nodes,
            limits.allow_never_expiring
        ),
        (Some("168h"), Some(10), Some(true))
    );

    let yaml = env.kf(&["flavor", "get", &name, "-o", "yaml"]).await;
    let read: Value = serde_saphyr::from_str(yaml.expect_ok()).unwrap();
    assert_eq!(read["spec"]["trustLevel"], 75);
    assert_eq!(read["spec"]["tokenLimits"]["maxTTL"], "168h");
    assert_eq!(read["spec"]["tokenLimits"]["maxNodes"], 10);
    assert!(read["metadata"].get("managedFields").is_none());
    let json = env.kf(&["flavor", "get", &name, "-o", "json"]).await;
    let read: Value = serde_json::from_str(json.expect_ok()).unwrap();
    assert_eq!(read["kind"], "Flavor");

    let table = env.kf(&["flavor", "list"]).await;
    let table = table.expect_ok();
    assert!(table.starts_with("NAME "), "{table}");
    let row = table
        .lines()
        .find(|l| l.starts_with(&name))
        .expect("listed");
    assert!(
        row.contains("75") && row.contains("example.com/partner=acme:NoSchedule"),
        "{row}"
    );
    let wide = env.kf(&["flavor", "list", "-o", "wide"]).await;
    let wide = wide.expect_ok();
    let header: Vec<&str> = wide
        .lines()
        .next()
        .unwrap()
        .split("  ")
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .collect();
    assert!(
        header.contains(&"TTL LIMIT")
            && header.contains(&"NODES LIMIT")
            && header.contains(&"NEVER EXPIRING"),
        "{wide}"
    );
    let row: Vec<&str> = wide
        .lines()
        .find(|l| l.starts_with(&name))
        .expect("listed wide")
        .split_whitespace()
        .collect();
    assert!(
        row.windows(5)
            .any(|w| w == ["2h", "4", "168h", "10", "allowed"]),
        "{row:?}"
    );
    let names = env.kf(&["flavor", "list", "-o", "name"]).await;
    assert!(
        names
            .expect_ok()
            .lines()
            .any(|l| l == format!("flavor.kubeflavor.io/{name}"))
    );

    let again = env.kf(&["flavor", "create", &name]).await;
    assert_one_line_error(&again, ExitCode::Error);
    assert!(again.stderr.contains("already exists"));

    env.kf(&["flavor", "delete", &name]).await.expect_ok();
    let gone = env.kf(&["flavor", "get", &name]).await;
    assert_one_line_error(&gone, ExitCode::NotFound);
}

#[tokio::test]
async fn apply_creates_then_updates_from_a_file() {
    let env = Env::start().await;
    env.install().await;
    let (a, b) = (env.name("apply-a"), env.name("apply-b"));
    let file = env.dir().join("flavors.yaml");
    let write = |trust: u8| {
        std::fs::write(
            &file,
            format!(
                "apiVersion: kubeflavor.io/v1alpha1\nkind: Flavor\nmetadata:\n  name: {a}\n  labels:\n    team: edge\nspec:\n  trustLevel: {trust}\n  labels:\n    kubeflavor.node-restriction.kubernetes.io/site: lab\n---\napiVersion: kubeflavor.io/v1alpha1\nkind: Flavor\nmetadata:\n  name: {b}\nspec:\n  taints:\n  - key: example.com/dedicated\n    effect: NoExecute\n"
            ),
        )
        .unwrap()
    };
    write(10);
    let path = file.display().to_string();
    let out = env.kf(&["flavor", "apply", "-f", &path]).await;
    assert_eq!(
        out.expect_ok(),
        format!("flavor.kubeflavor.io/{a} applied\nflavor.kubeflavor.io/{b} applied\n")
    );
    write(20);
    env.kf(&["flavor", "apply", "-f", &path]).await.expect_ok();
    assert_eq!(
        flavors(&env).await.get(&a).await.unwrap().spec.trust_level,
        Some(20)
    );
    assert_eq!(
        flavors(&env).await.get(&b).await.unwrap().spec.taints.len(),
        1
    );
    for n in [&a, &b] {
        env.kf(&["flavor", "delete", n]).await.expect_ok();
    }
}

/// Bad input: one clear line, a non-zero exit, and nothing created.
#[tokio::test]
async fn bad_flavor_input_is_refused_and_creates_nothing() {
    let env = Env::start().await;
    env.install().await;
    let name = env.name("bad");
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["--label", "example.com/tier=gold"], "NodeRestriction"),
        (
            vec!["--label", "kubernetes.io/hostname=x"],
            "node-restriction.kubernetes.io/",
        ),
        (vec!["--label", "tier=gold"], "NodeRestriction"),
        (
            vec![
                "--label",
                "kubeflavor.node-restriction.kubernetes.io/tier=not valid",
            ],
            "label value",
        ),
        (
            vec![
                "--label",
                "kubeflavor.node-restriction.kubernetes.io/flavor=x",
            ],
            "kubeflavor itself",
        ),
        (vec!["--taint", "example.com/a=b:Sometimes"], "NoSchedule"),
        (vec!["--taint", "example.com/a=b"], "effect"),
        (
            vec!["--taint", "kubeflavor.io/revoked:NoExecute"],
            "managed by kubeflavor",
        ),
        (vec!["--trust-level", "101"], "0 to 100"),
        (vec!["--trust-level", "-1"], "0 to 100"),
        (vec!["--max-nodes", "0"], "at least 1"),
        (vec!["--ttl", "-5m"], "negative"),
        (vec!["--max-ttl", "0"], "allowNeverExpiring"),
        (vec!["--max-nodes-limit", "0"], "at least 1"),
        // The flavor's own defaults must fit its limits.
        (vec!["--ttl", "0"], "tokenLimits.allowNeverExpiring"),
        (
            vec!["--ttl", "48h", "--max-ttl", "24h"],
            "tokenLimits.maxTTL is 24h",
        ),
        (
            vec!["--max-nodes", "3", "--max-nodes-limit", "2"],
            "tokenLimits.maxNodes is 2",
        ),
    ];
    for (flags, needle) in cases {
        let mut args = vec!["flavor", "create", name.as_str()];
        args.extend_from_slice(&flags);
        let out = env.kf(&args).await;
        assert_one_line_error(&out, ExitCode::Refused);
        assert!(
            out.stderr.contains(needle),
            "{flags:?}: {:?} lacks {needle:?}",
            out.stderr
        );
        assert!(
            flavors(&env).await.get_opt(&name).await.unwrap().is_none(),
            "{flags:?} created the flavor"
        );
    }
    // Duplicate taints are only visible on the whole set.
    let out = env
        .kf(&[
            "flavor",
            "create",
            &name,
            "--taint",
            "example.com/a:NoSchedule",
            "--taint",
            "example.com/a=x:NoSchedule",
        ])
        .await;
    assert_one_line_error(&out, ExitCode::Refused);
    assert!(flavors(&env).await.get_opt(&name).await.unwrap().is_none());

    // A file with one bad document applies nothing.
    let file = env.dir().join("bad.yaml");
    let good = env.name("good");
    std::fs::write(
        &file,
        format!("apiVersion: kubeflavor.io/v1alpha1\nkind: Flavor\nmetadata: {{name: {good}}}\nspec: {{}}\n---\napiVersion: kubeflavor.io/v1alpha1\nkind: Flavor\nmetadata: {{name: {name}}}\nspec:\n  labels: {{example.com/x: y}}\n"),
    )
    .unwrap();
    let out = env
        .kf(&["flavor", "apply", "-f", &file.display().to_string()])
        .await;
    assert_one_line_error(&out, ExitCode::Refused);
    assert!(
        flavors(&env).await.get_opt(&good).await.unwrap().is_none(),
        "the good document was applied"
    );
}

#[tokio::test]
async fn unknown_flavor_lists_the_existing_ones() {
    let env = Env::start().await;
    env.install().await;
    let name = env.name("exists");
    env.kf(&["flavor", "create", &name]).await.expect_ok();
    let out = env.kf(&["flavor", "get", &env.name("missing")]).await;
    assert_one_line_error(&out, ExitCode::NotFound);
    assert!(out.stderr.contains(&name), "{}", out.stderr);
    let out = env.kf(&["flavor", "delete", &env.name("missing")]).await;
    assert_one_line_error(&out, ExitCode::NotFound);
    env.kf(&["flavor", "delete", &name]).await.expect_ok();
}

#[tokio::test]
async fn delete_is_refused_while_tokens_or_bindings_use_the_flavor() {
    let env = Env::start().await;
    env.install().await;
    let name = env.name("busy");
    env.kf(&["flavor", "create", &name]).await.expect_ok();
    let token = env
        .kf(&["token", "create", "--flavor", &name])
        .await
        .expect_ok()
        .trim()
        .to_string();

    let out = env.kf(&["flavor", "delete", &name]).await;
    assert_one_line_error(&out, ExitCode::Refused);
    assert!(
        out.stderr.contains(&token[..6]) && out.stderr.contains("--force"),
        "{}",
        out.stderr
    );

    env.kf(&["token", "delete", &token[..6]]).await.expect_ok();
    // A node binding also holds it.
    let node = env.name("node");
    let bindings: Api<FlavorBinding> = Api::all(env.client.clone());
    let binding = FlavorBinding::new(
        &node,
        FlavorBindingSpec {
            node: node.clone(),
            flavor: name.clone(),
            token_id: token[..6].to_string(),
            token_uid: None,
            csr_name: "csr-test".into(),
            public_key_sha256: "ab".repeat(32),
            bound_at: jiff::Timestamp::from_second(jiff::Timestamp::now().as_second()).unwrap(),
            issued_to: None,
            issued_by: None,
            requested_by: None,
            identity: None,
            input_labels: Default::default(),
        },
    );
    bindings
        .create(&PostParams::default(), &binding)
        .await
        .unwrap();
    let out = env.kf(&["flavor", "delete", &name]).await;
    assert_one_line_error(&out, ExitCode::Refused);
    assert!(out.stderr.contains(&node), "{}", out.stderr);

    env.kf(&["flavor", "delete", &name, "--force"])
        .await
        .expect_ok();
    assert!(flavors(&env).await.get_opt(&name).await.unwrap().is_none());
    bindings
        .delete(&node, &DeleteParams::default())
        .await
        .unwrap();
}

/// The CRD's own CEL rule refuses a Flavor with a kubelet-writable label even when it does
/// not come through kubeflavor (P2, trusted labels). testkube does not evaluate CEL, so
/// this case runs only against a real cluster (KUBEFLAVOR_E2E_KUBECONFIG).
#[tokio::test]
async fn api_server_refuses_kubelet_writable_labels_by_itself() {
    let env = Env::start().await;
    env.install().await;
    let name = env.name("sneaky");
    let body = json!({
        "apiVersion": "kubeflavor.io/v1alpha1",
        "kind": "Flavor",
        "metadata": {"name": name},
        "spec": {"labels": {"example.com/tier": "gold"}},
    });
    let err = flavors(&env)
        .await
        .patch(
            &name,
            &PatchParams::apply("e2e").force(),
            &Patch::Apply(&body),
        )
        .await
        .expect_err("the API server must refuse the Flavor");
    match err {
        kube::Error::Api(status) => {
            assert_eq!(status.code, 422, "{status:?}");
            assert!(
                status.message.contains("NodeRestriction"),
                "{}",
                status.message
            );
        }
        other => panic!("unexpected error {other:?}"),
    }
}

/// Before `install`, the Flavor API does not exist: the API server answers a plain-text
/// `404 page not found` (what kube-apiserver says for a group it does not serve), which
/// must read as "install the CRDs". Only on
/// testkube: a real cluster used for these tests has them installed already.
#[tokio::test]
async fn missing_crds_point_at_install() {
    let env = Env::start().await;
    if env
        .testkube_or_skip("a real cluster used for these tests has the CRDs installed")
        .is_none()
    {
        return;
    }
    let out = env.kf(&["flavor", "create", "sweet"]).await;
    assert_one_line_error(&out, ExitCode::NotFound);
    assert!(
        out.stderr.contains("kubeflavor install --apply"),
        "{}",
        out.stderr
    );
    let out = env.kf(&["token", "create", "--flavor", "sweet"]).await;
    assert_one_line_error(&out, ExitCode::NotFound);
    assert!(
        out.stderr.contains("kubeflavor install --apply"),
        "{}",
        out.stderr
    );
}
