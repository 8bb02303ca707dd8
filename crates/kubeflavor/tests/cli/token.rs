//! End-to-end: `kubeflavor token ...` against testkube, or the cluster named by
//! KUBEFLAVOR_E2E_KUBECONFIG.

use std::collections::BTreeMap;

use kubeflavor_core::token::secret::FlavorTokenMeta;

use crate::support::token_secret::{KUBEADM_DEFAULT_GROUP, TokenSecret};
use crate::support::{Env, assert_one_line_error, whoami};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kubeflavor::ExitCode;
use kubeflavor_core::token::BootstrapToken;
use serde_json::Value;

/// Create a flavor and a token of it; returns the token string.
async fn mint(env: &Env, flavor: &str, extra: &[&str]) -> String {
    let mut args = vec!["token", "create", "--flavor", flavor];
    args.extend_from_slice(extra);
    let out = env.kf(&args).await;
    let token = out.expect_ok().trim().to_string();
    token
        .parse::<BootstrapToken>()
        .unwrap_or_else(|e| panic!("token create printed {token:?}: {e}"));
    token
}

/// `token create --flavor FLAVOR EXTRA... -o json`, read.
async fn create_json(env: &Env, flavor: &str, extra: &[&str]) -> Value {
    let args = [
        &["token", "create", "--flavor", flavor][..],
        extra,
        &["-o", "json"],
    ]
    .concat();
    serde_json::from_str(env.kf(&args).await.expect_ok()).unwrap()
}

async fn secrets(env: &Env) -> Api<Secret> {
    Api::namespaced(env.client.clone(), "kube-system")
}

async fn cleanup(env: &Env, tokens: &[&str], flavors: &[&str]) {
    let api = secrets(env).await;
    for t in tokens {
        let _ = api
            .delete(
                &format!("bootstrap-token-{}", &t[..6]),
                &DeleteParams::default(),
            )
            .await;
    }
    for f in flavors {
        let _ = env.kf(&["flavor", "delete", f, "--force"]).await;
    }
}

/// Decoded `data` of a token Secret.
async fn secret_data(env: &Env, token: &str) -> BTreeMap<String, String> {
    let secret = secrets(env)
        .await
        .get(&format!("bootstrap-token-{}", &token[..6]))
        .await
        .unwrap();
    secret
        .data
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k, String::from_utf8(v.0).unwrap()))
        .collect()
}

#[tokio::test]
async fn created_token_authenticates_as_a_kubeflavor_bootstrap_identity() {
    let env = Env::start().await;
    env.install().await;
    let flavor = env.create_flavor("sweet", &["--trust-level", "80"]).await;
    let token = mint(&env, &flavor, &[]).await;

    let (user, groups) = whoami(&env.token_client(&token).await)
        .await
        .expect("SelfSubjectReview as the token");
    assert_eq!(user, format!("system:bootstrap:{}", &token[..6]));
    assert_eq!(
        groups,
        [
            "system:bootstrappers",
            "system:bootstrappers:kubeflavor:node",
            "system:authenticated"
        ]
    );
    cleanup(&env, &[&token], &[&flavor]).await;
}

#[tokio::test]
async fn p1_tokens_of_two_flavors_look_the_same_to_their_holders() {
    let env = Env::start().await;
    env.install().await;
    let sweet = env
        .create_flavor(
            "sweet",
            &[
                "--trust-level",
                "90",
                "--label",
                "kubeflavor.node-restriction.kubernetes.io/tier=gold",
            ],
        )
        .await;
    let sour = env
        .create_flavor(
            "sour",
            &[
                "--trust-level",
                "10",
                "--taint",
                "example.com/untrusted=yes:NoSchedule",
            ],
        )
        .await;
    let a = mint(&env, &sweet, &["--ttl", "2h"]).await;
    let b = mint(&env, &sour, &["--ttl", "2h"]).await;

    // What the holder can see about itself.
    let (user_a, groups_a) = whoami(&env.token_client(&a).await).await.unwrap();
    let (user_b, groups_b) = whoami(&env.token_client(&b).await).await.unwrap();
    assert_eq!(groups_a, groups_b);
    assert_eq!(
        user_a.trim_end_matches(&a[..6]),
        user_b.trim_end_matches(&b[..6])
    );

    // The Secret's authentication fields, apart from id, secret and expiry.
    let strip = |mut d: BTreeMap<String, String>| {
        for k in ["token-id", "token-secret", "expiration"] {
            assert!(d.remove(k).is_some(), "{k} missing");
        }
        d
    };
    let (data_a, data_b) = (
        strip(secret_data(&env, &a).await),
        strip(secret_data(&env, &b).await),
    );
    assert_eq!(data_a, data_b);
    assert_eq!(
        data_a["auth-extra-groups"],
        "system:bootstrappers:kubeflavor:node"
    );
    assert_eq!(data_a["usage-bootstrap-authentication"], "true");
    assert_eq!(data_a["usage-bootstrap-signing"], "true");
    assert!(!data_a["description"].contains(&sweet) && !data_a["description"].contains(&sour));
    cleanup(&env, &[&a, &b], &[&sweet, &sour]).await;
}

/// P1 (hidden flavor): the custody of a token (issuedTo, issuedBy) lives where only admins
/// read. Two tokens of one flavor that differ only in custody look the same to their holders:
/// the same groups, the same Secret data, and neither may read its Secret or any
/// FlavorBinding.
#[tokio::test]
async fn p1_tokens_differing_only_in_custody_and_input_labels_look_the_same_to_their_holders() {
    let env = Env::start().await;
    env.install().await;
    let flavor = env.create_flavor("custody", &["--trust-level", "50"]).await;
    let a = mint(
        &env,
        &flavor,
        &["--ttl", "2h", "--issued-to", "acme-corp/alice"],
    )
    .await;
    // The other one as a minting service would make it, with a custody of its own and the
    // input labels a portal passed on.
    let cluster = kubeflavor::connect::Cluster::connect(&kubeflavor::connect::ClusterArgs {
        kubeconfig: Some(env.kubeconfig.clone()),
        context: None,
    })
    .await
    .unwrap();
    let custody = kubeflavor_core::token::meta::Custody {
        issued_to: Some("globex/bob".parse().unwrap()),
        issued_by: Some("system:serviceaccount:portal:minter".into()),
        requested_by: None,
        identity: None,
    };
    let input = [("site".to_string(), "berlin".to_string())].into();
    let meta = FlavorTokenMeta::new(flavor.parse().unwrap(), std::num::NonZeroU32::MIN)
        .with_custody(custody.clone())
        .with_input_labels(
            kubeflavor_core::flavor::input_labels::InputLabels::from_map(&input).unwrap(),
        );
    let b = kubeflavor::minting::mint(
        &cluster,
        &meta,
        Some(jiff::Timestamp::now() + std::time::Duration::from_secs(7200)),
        || Ok(BootstrapToken::generate().unwrap()),
    )
    .await
    .expect("minted with a custody and input labels");
    let b = b.expose().to_string();

    // The custody is on the Secrets, for admins.
    let annotations = |token: String| {
        let env = &env;
        async move {
            secrets(env)
                .await
                .get(&format!("bootstrap-token-{}", &token[..6]))
                .await
                .unwrap()
                .metadata
                .annotations
                .unwrap_or_default()
        }
    };
    let (ann_a, ann_b) = (annotations(a.clone()).await, annotations(b.clone()).await);
    assert_eq!(ann_a["kubeflavor.io/issued-to"], "acme-corp/alice");
    assert!(!ann_a["kubeflavor.io/issued-by"].is_empty(), "{ann_a:?}");
    assert_eq!(ann_b["kubeflavor.io/issued-to"], "globex/bob");
    assert_eq!(
        ann_b["kubeflavor.io/issued-by"],
        "system:serviceaccount:portal:minter"
    );
    assert_eq!(ann_b["kubeflavor.io/input-labels"], r#"{"site":"berlin"}"#);
    assert!(
        !ann_a.contains_key("kubeflavor.io/input-labels"),
        "{ann_a:?}"
    );

    // What each holder can see about itself.
    let (client_a, client_b) = (env.token_client(&a).await, env.token_client(&b).await);
    let (user_a, groups_a) = whoami(&client_a).await.unwrap();
    let (user_b, groups_b) = whoami(&client_b).await.unwrap();
    assert_eq!(groups_a, groups_b);
    assert_eq!(
        user_a.trim_end_matches(&a[..6]),
        user_b.trim_end_matches(&b[..6])
    );
    let strip = |mut d: BTreeMap<String, String>| {
        for k in ["token-id", "token-secret", "expiration"] {
            assert!(d.remove(k).is_some(), "{k} missing");
        }
        d
    };
    assert_eq!(
        strip(secret_data(&env, &a).await),
        strip(secret_data(&env, &b).await)
    );
    // Neither holder may read where the custody and the input labels are kept.
    for (token, client) in [(&a, client_a), (&b, client_b)] {
        let own = Api::<Secret>::namespaced(client.clone(), "kube-system");
        let name = format!("bootstrap-token-{}", &token[..6]);
        let err = crate::support::fresh(|| own.get(&name))
            .await
            .expect_err("a holder reads its own token Secret");
        assert!(
            matches!(&err, kube::Error::Api(s) if s.code == 403),
            "{err}"
        );
        let bindings = Api::<kubeflavor_cluster::crd::FlavorBinding>::all(client);
        let params = ListParams::default();
        let err = crate::support::fresh(|| bindings.list(&params))
            .await
            .expect_err("a holder lists FlavorBindings");
        assert!(
            matches!(&err, kube::Error::Api(s) if s.code == 403),
            "{err}"
        );
    }
    cleanup(&env, &[&a, &b], &[&flavor]).await;
}

#[tokio::test]
async fn token_create_records_issued_to_and_the_minting_user() {
    let env = Env::start().await;
    env.install().await;
    let flavor = env.create_flavor("issued", &[]).await;
    let (me, _) = whoami(&env.client)
        .await
        .expect("SelfSubjectReview as admin");

    let view = created(&env, &flavor, &["--issued-to", "acme-corp/alice smith"]).await;
    assert_eq!(view["issuedTo"], "acme-corp/alice smith");
    assert_eq!(view["issuedBy"], me.as_str());
    let token = view["token"].as_str().unwrap().to_string();
    let id = &token[..6];

    let out = env
        .kf(&["token", "create", "--flavor", &flavor, "-o", "yaml"])
        .await;
    let view: Value = serde_saphyr::from_str(out.expect_ok()).unwrap();
    assert!(view.get("issuedTo").is_none(), "{view}");
    assert_eq!(view["issuedBy"], me.as_str());
    let plain = view["token"].as_str().unwrap().to_string();

    // token list: the ISSUED-TO column, and both in JSON.
    let table = env.kf(&["token", "list", "--flavor", &flavor]).await;
    let table = table.expect_ok();
    let header = table.lines().next().unwrap();
    assert!(header.contains("ISSUED-TO"), "{table}");
    let column = header.find("ISSUED-TO").unwrap();
    let row = table.lines().find(|l| l.starts_with(id)).unwrap();
    assert_eq!(&row[column..], "acme-corp/alice smith", "{table}");
    let row = table.lines().find(|l| l.starts_with(&plain[..6])).unwrap();
    assert_eq!(&row[column..], "<none>", "{table}");
    let listed: Value = serde_json::from_str(
        env.kf(&["token", "list", "--flavor", &flavor, "-o", "json"])
            .await
            .expect_ok(),
    )
    .unwrap();
    let item = listed["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["id"] == id)
        .unwrap();
    assert_eq!(item["issuedTo"], "acme-corp/alice smith");
    assert_eq!(item["issuedBy"], me.as_str());
    cleanup(&env, &[&token, &plain], &[&flavor]).await;
}

#[tokio::test]
async fn an_invalid_issued_to_is_refused_and_nothing_is_created() {
    let env = Env::start().await;
    env.install().await;
    let flavor = env.create_flavor("refused", &[]).await;
    let selector = ListParams::default().labels(&format!("kubeflavor.io/flavor={flavor}"));
    let long = "x".repeat(257);
    let cases: [(&str, &str); 8] = [
        ("", "1 to 256 characters"),
        (long.as_str(), "at most 256 characters"),
        ("alice\tsmith", "control character"),
        (" alice", "whitespace"),
        // Text that shows another name than it stores: a right-to-left override, a
        // zero-width space, a line separator, a left-to-right isolate.
        ("eve\u{202e}ecila", "U+202E"),
        ("al\u{200b}ice", "U+200B"),
        ("alice\u{2028}bob", "U+2028"),
        ("\u{2066}acme\u{2069}/alice", "U+2066"),
    ];
    for (value, needle) in cases {
        let out = env
            .kf(&["token", "create", "--flavor", &flavor, "--issued-to", value])
            .await;
        assert_one_line_error(&out, ExitCode::Refused);
        assert!(
            out.stderr.contains(needle) && out.stderr.contains("issued-to"),
            "{value:?}: {:?} lacks {needle:?}",
            out.stderr
        );
    }
    let created = secrets(&env).await.list(&selector).await.unwrap().items;
    assert!(created.is_empty(), "a refused command created a token");
    cleanup(&env, &[], &[&flavor]).await;
}

/// `token create` holds to the flavor's tokenLimits as the join-token API does (without
/// them: at most the flavor's defaults, never a token that never expires), naming the
/// limit and the flag that overrides it; `--override-flavor-limits` is the admin's way
/// past them.
#[tokio::test]
async fn token_create_holds_to_the_flavors_limits_unless_overridden() {
    let env = Env::start().await;
    env.install().await;
    let flavor = env.create_flavor("limits", &[]).await;
    let selector = ListParams::default().labels(&format!("kubeflavor.io/flavor={flavor}"));
    for (flags, needle) in [
        (vec!["--ttl", "0"], "tokenLimits.allowNeverExpiring"),
        (vec!["--max-nodes", "2"], "tokenLimits.maxNodes"),
        (vec!["--ttl", "25h"], "tokenLimits.maxTTL"),
        (
            vec!["--control-plane", "--max-nodes", "4294967295"],
            "tokenLimits.maxNodes",
        ),
    ] {
        let out = env
            .kf(&[
                &["token", "create", "--flavor", flavor.as_str()][..],
                &flags,
            ]
            .concat())
            .await;
        assert_one_line_error(&out, ExitCode::Refused);
        assert!(
            out.stderr.contains(needle) && out.stderr.contains("--override-flavor-limits"),
            "{flags:?}: {:?}",
            out.stderr
        );
    }
    let created = secrets(&env).await.list(&selector).await.unwrap().items;
    assert!(created.is_empty(), "a refused command created a token");

    let view = create_json(
        &env,
        &flavor,
        &["--ttl", "0", "--max-nodes", "7", "--override-flavor-limits"],
    )
    .await;
    assert_eq!(view["maxNodes"], 7);
    assert!(view.get("expiration").is_none(), "{view}");
    let token = view["token"].as_str().unwrap().to_string();
    // The override is recorded on the token, with who overrode: without it the controller
    // denies the token's CSRs (token_over_limits).
    let (me, _) = whoami(&env.client).await.unwrap();
    let annotations = |id: &str, items: &[Secret]| {
        items
            .iter()
            .find(|s| s.metadata.name.as_deref() == Some(&format!("bootstrap-token-{id}")))
            .and_then(|s| s.metadata.annotations.clone())
            .unwrap_or_default()
    };
    let items = secrets(&env).await.list(&selector).await.unwrap().items;
    let recorded: Value = serde_json::from_str(
        &annotations(view["id"].as_str().unwrap(), &items)["kubeflavor.io/limits-override"],
    )
    .unwrap();
    assert_eq!(recorded["by"], me.as_str());
    // A token within the limits records no override, flag or not.
    let within = create_json(&env, &flavor, &["--override-flavor-limits"]).await;
    let items = secrets(&env).await.list(&selector).await.unwrap().items;
    assert!(
        !annotations(within["id"].as_str().unwrap(), &items)
            .contains_key("kubeflavor.io/limits-override")
    );
    let within = within["token"].as_str().unwrap().to_string();
    cleanup(&env, &[&token, &within], &[&flavor]).await;
}

#[tokio::test]
async fn token_create_makes_exactly_four_api_calls() {
    let env = Env::start().await;
    env.install().await;
    let flavor = env.create_flavor("count", &[]).await;
    let Some(cluster) = env.testkube_or_skip("request counting needs testkube") else {
        cleanup(&env, &[], &[&flavor]).await;
        return;
    };
    cluster.counters().reset();
    let token = mint(&env, &flavor, &[]).await;
    let snapshot = cluster.counters().snapshot();
    println!("token create API calls: {:?}", snapshot.counts);
    assert_eq!(snapshot.by_verb_resource("get", "flavors"), 1);
    assert_eq!(snapshot.by_verb_resource("create", "selfsubjectreviews"), 1);
    assert_eq!(snapshot.by_verb_resource("list", "flavorbindings"), 1);
    assert_eq!(snapshot.by_verb_resource("create", "secrets"), 1);
    assert_eq!(snapshot.total(), 4, "{:?}", snapshot.counts);
    cleanup(&env, &[&token], &[&flavor]).await;
}

#[tokio::test]
async fn token_create_draws_a_new_id_when_the_id_is_taken() {
    let env = Env::start().await;
    env.install().await;
    let flavor = env.create_flavor("retry", &[]).await;
    // Occupy an id, then make the first draw hit it.
    let taken = env.run_id.clone();
    let occupant: BootstrapToken = format!("{taken}.0123456789abcdef").parse().unwrap();
    let plain = TokenSecret::plain(&occupant, KUBEADM_DEFAULT_GROUP).build();
    secrets(&env)
        .await
        .create(&PostParams::default(), &plain)
        .await
        .unwrap();

    let cluster = kubeflavor::connect::Cluster::connect(&kubeflavor::connect::ClusterArgs {
        kubeconfig: Some(env.kubeconfig.clone()),
        context: None,
    })
    .await
    .unwrap();
    let mut draws = vec![BootstrapToken::generate().unwrap(), occupant]
        .into_iter()
        .rev();
    let before = env.testkube.as_ref().map(|c| {
        c.counters()
            .snapshot()
            .by_verb_resource("create", "secrets")
    });
    let meta = FlavorTokenMeta::new(flavor.parse().unwrap(), std::num::NonZeroU32::MIN);
    let minted = kubeflavor::minting::mint(&cluster, &meta, None, || {
        Ok(draws.next().expect("at most two draws"))
    })
    .await
    .expect("second draw succeeds");
    assert_ne!(minted.id().as_str(), taken);
    assert!(draws.next().is_none(), "both draws were used");
    if let (Some(cluster), Some(before)) = (env.testkube.as_ref(), before) {
        assert_eq!(
            cluster
                .counters()
                .snapshot()
                .by_verb_resource("create", "secrets")
                - before,
            2
        );
    }
    let _ = secrets(&env)
        .await
        .delete(
            &format!("bootstrap-token-{taken}"),
            &DeleteParams::default(),
        )
        .await;
    let minted = minted.expose();
    cleanup(&env, &[minted.as_str()], &[&flavor]).await;
}

#[tokio::test]
async fn token_create_uses_flavor_defaults_and_flags_override_them() {
    let env = Env::start().await;
    env.install().await;
    let flavor = env
        .create_flavor(
            "defaults",
            &[
                "--ttl",
                "90m",
                "--max-nodes",
                "3",
                "--max-nodes-limit",
                "5",
                "--allow-never-expiring",
            ],
        )
        .await;

    let view = create_json(&env, &flavor, &[]).await;
    assert_eq!(view["maxNodes"], 3);
    assert_eq!(view["flavor"], flavor.as_str());
    let expires: jiff::Timestamp = view["expiration"].as_str().unwrap().parse().unwrap();
    let left = expires.duration_since(jiff::Timestamp::now()).as_secs();
    assert!((80 * 60..=90 * 60).contains(&left), "{left}s left");
    let first = view["token"].as_str().unwrap().to_string();

    let out = env
        .kf(&[
            "token",
            "create",
            "--flavor",
            &flavor,
            "--ttl",
            "0",
            "--max-nodes",
            "5",
            "-o",
            "yaml",
        ])
        .await;
    let view: Value = serde_saphyr::from_str(out.expect_ok()).unwrap();
    assert_eq!(view["maxNodes"], 5);
    assert!(
        view.get("expiration").is_none(),
        "ttl 0 never expires: {view}"
    );
    let second = view["token"].as_str().unwrap().to_string();
    assert!(!secret_data(&env, &second).await.contains_key("expiration"));
    cleanup(&env, &[&first, &second], &[&flavor]).await;
}

#[tokio::test]
async fn token_list_shows_flavors_and_never_a_secret() {
    let env = Env::start().await;
    env.install().await;
    let flavor = env.create_flavor("listed", &["--max-nodes", "2"]).await;
    let token = mint(&env, &flavor, &[]).await;
    let id = &token[..6];
    let secret = &token[7..];

    // A plain kubeadm token next to it.
    let plain_id = &env.run_id;
    let plain_token: BootstrapToken = format!("{plain_id}.0123456789abcdef").parse().unwrap();
    let plain = TokenSecret::plain(&plain_token, KUBEADM_DEFAULT_GROUP).build();
    secrets(&env)
        .await
        .create(&PostParams::default(), &plain)
        .await
        .unwrap();

    let table = env.kf(&["token", "list"]).await;
    let table = table.expect_ok();
    assert!(table.starts_with("ID "), "{table}");
    let row = table
        .lines()
        .find(|l| l.starts_with(id))
        .unwrap_or_else(|| panic!("{id} not listed:\n{table}"));
    assert!(row.contains(&flavor) && row.contains("0/2"), "{row}");
    let plain_row = table
        .lines()
        .find(|l| l.starts_with(plain_id.as_str()))
        .expect("kubeadm token listed");
    assert!(plain_row.contains("<none>"), "{plain_row}");

    for format in [
        &["-o", "wide"][..],
        &["-o", "json"],
        &["-o", "yaml"],
        &["--flavor", &flavor],
    ] {
        let mut args = vec!["token", "list"];
        args.extend_from_slice(format);
        let out = env.kf(&args).await;
        assert!(
            !out.expect_ok().contains(secret),
            "secret printed by token list {format:?}"
        );
        assert!(
            !out.stdout.contains("0123456789abcdef"),
            "kubeadm secret printed by {format:?}"
        );
    }
    let only = env
        .kf(&["token", "list", "--flavor", &flavor, "-o", "name"])
        .await;
    assert_eq!(only.expect_ok(), format!("token/{id}\n"));
    let _ = secrets(&env)
        .await
        .delete(
            &format!("bootstrap-token-{plain_id}"),
            &DeleteParams::default(),
        )
        .await;
    cleanup(&env, &[&token], &[&flavor]).await;
}

#[tokio::test]
async fn token_delete_removes_tokens_and_reports_missing_ones() {
    let env = Env::start().await;
    env.install().await;
    let flavor = env.create_flavor("deleted", &[]).await;
    let a = mint(&env, &flavor, &[]).await;
    let b = mint(&env, &flavor, &[]).await;
    // By id and by whole token.
    let out = env.kf(&["token", "delete", &a[..6], &b]).await;
    assert_eq!(
        out.expect_ok(),
        format!("token {} deleted\ntoken {} deleted\n", &a[..6], &b[..6])
    );
    let left = secrets(&env)
        .await
        .list(&ListParams::default().labels(&format!("kubeflavor.io/flavor={flavor}")))
        .await
        .unwrap();
    assert!(left.items.is_empty());
    let again = env.kf(&["token", "delete", &a[..6]]).await;
    assert_one_line_error(&again, ExitCode::NotFound);
    assert!(again.stderr.contains(&a[..6]));
    cleanup(&env, &[], &[&flavor]).await;
}

/// Bad input: one clear line, a non-zero exit, and nothing created.
#[tokio::test]
async fn bad_token_input_is_refused_and_creates_nothing() {
    let env = Env::start().await;
    env.install().await;
    let flavor = env.create_flavor("strict", &[]).await;
    let missing = env.name("nosuch");
    // Only this test's flavors: on a shared real cluster other tests mint tokens meanwhile.
    let selector =
        ListParams::default().labels(&format!("kubeflavor.io/flavor in ({flavor},{missing})"));

    let cases: Vec<(Vec<&str>, ExitCode, &str)> = vec![
        (
            vec!["token", "create", "--flavor", &missing],
            ExitCode::NotFound,
            &flavor,
        ),
        (
            vec!["token", "create", "--flavor", &flavor, "--ttl", "soon"],
            ExitCode::Refused,
            "does not parse",
        ),
        (
            vec!["token", "create", "--flavor", &flavor, "--ttl", "-1h"],
            ExitCode::Refused,
            "negative",
        ),
        (
            vec!["token", "create", "--flavor", &flavor, "--max-nodes", "0"],
            ExitCode::Refused,
            "at least 1",
        ),
        (
            vec!["token", "create", "--flavor", "Not_A_Name"],
            ExitCode::Refused,
            "flavor name",
        ),
        (
            vec!["token", "delete", "abc"],
            ExitCode::Refused,
            "6 characters",
        ),
    ];
    for (args, code, needle) in cases {
        let out = env.kf(&args).await;
        assert_one_line_error(&out, code);
        assert!(
            out.stderr.contains(needle),
            "{args:?}: {:?} lacks {needle:?}",
            out.stderr
        );
    }
    let created = secrets(&env).await.list(&selector).await.unwrap().items;
    let names: Vec<_> = created.iter().map(|s| s.metadata.name.clone()).collect();
    assert!(
        names.is_empty(),
        "a refused command created a token: {names:?}"
    );
    cleanup(&env, &[], &[&flavor]).await;
}

#[tokio::test]
async fn forbidden_names_the_missing_permission() {
    let env = Env::start().await;
    env.install().await;
    let flavor = env.create_flavor("perm", &[]).await;
    let token = mint(&env, &flavor, &[]).await;
    env.until_authenticated(&token).await;
    // The bootstrap identity itself may not list Secrets.
    let as_token = env.token_kubeconfig(&token);
    let out = env.kf_with(&as_token, &["token", "list"]).await;
    assert_one_line_error(&out, ExitCode::Forbidden);
    assert!(
        out.stderr
            .contains(&format!("system:bootstrap:{}", &token[..6])),
        "{}",
        out.stderr
    );
    assert!(
        out.stderr.contains("'list' on 'secrets'") && out.stderr.contains("kube-system"),
        "{}",
        out.stderr
    );
    cleanup(&env, &[&token], &[&flavor]).await;
}

#[tokio::test]
async fn generate_touches_no_cluster_and_follows_the_format() {
    let env = Env::start().await;
    let before = env.request_count();
    let out = env.kf(&["token", "generate"]).await;
    let token = out.expect_ok().trim();
    token
        .parse::<BootstrapToken>()
        .expect("kubeadm token format");
    assert_eq!(env.request_count(), before);
}

/// `token create --node-label`: only what the flavor's spec.inputLabels allows (set with
/// `flavor create --input-label` / `--input-label-pattern` / `--max-input-labels`), kept in
/// the token Secret's metadata; anything else refused (exit 4) naming the key, with one
/// message for a key the flavor does not take and a value it does not allow, and no token.
#[tokio::test]
async fn token_create_takes_only_the_input_labels_the_flavor_allows() {
    let env = Env::start().await;
    env.install().await;
    let flavor = env
        .create_flavor(
            "allowlist",
            &[
                "--input-label",
                "site=berlin,paris",
                "--input-label-pattern",
                "segment=seg-[0-9]{1,4}",
                "--max-input-labels",
                "1",
            ],
        )
        .await;
    let stored: Value = serde_json::from_str(
        env.kf(&["flavor", "get", &flavor, "-o", "json"])
            .await
            .expect_ok(),
    )
    .unwrap();
    assert_eq!(
        stored["spec"]["inputLabels"],
        serde_json::json!({"maxLabels": 1, "keys": [
            {"key": "segment", "pattern": "seg-[0-9]{1,4}"},
            {"key": "site", "values": ["berlin", "paris"]},
        ]})
    );

    let view = created(&env, &flavor, &["--node-label", "site=paris"]).await;
    assert_eq!(view["inputLabels"], serde_json::json!({"site": "paris"}));
    let token = view["token"].as_str().unwrap().to_string();
    let secret = secrets(&env)
        .await
        .get(&format!("bootstrap-token-{}", &token[..6]))
        .await
        .unwrap();
    assert_eq!(
        secret.metadata.annotations.unwrap()["kubeflavor.io/input-labels"],
        r#"{"site":"paris"}"#
    );

    let before = count_tokens(&env, &flavor).await;
    let refusal = |label: &'static str| {
        let env = &env;
        let flavor = flavor.clone();
        async move {
            let out = env
                .kf(&[
                    "token",
                    "create",
                    "--flavor",
                    &flavor,
                    "--node-label",
                    label,
                ])
                .await;
            assert_one_line_error(&out, ExitCode::Refused);
            out.stderr
        }
    };
    let unknown = refusal("rack=r1").await;
    let disallowed = refusal("site=rome").await;
    assert!(
        unknown.contains("rack") && disallowed.contains("site"),
        "{unknown}{disallowed}"
    );
    assert_eq!(
        unknown.replace("rack", "KEY"),
        disallowed.replace("site", "KEY")
    );
    let out = env
        .kf(&[
            "token",
            "create",
            "--flavor",
            &flavor,
            "--node-label",
            "site=paris",
            "--node-label",
            "segment=seg-1",
        ])
        .await;
    assert_one_line_error(&out, ExitCode::Refused);
    assert!(out.stderr.contains("at most 1"), "{}", out.stderr);
    assert_eq!(count_tokens(&env, &flavor).await, before, "nothing minted");
    cleanup(&env, &[&token], &[&flavor]).await;
}

/// How many tokens of `flavor` `token list` shows.
async fn count_tokens(env: &Env, flavor: &str) -> usize {
    let listed: Value = serde_json::from_str(
        env.kf(&["token", "list", "--flavor", flavor, "-o", "json"])
            .await
            .expect_ok(),
    )
    .unwrap();
    listed["items"].as_array().unwrap().len()
}

/// `token create --flavor FLAVOR FLAGS -o json`, which must succeed: what it printed.
async fn created(env: &Env, flavor: &str, flags: &[&str]) -> Value {
    let out = env
        .kf(&[
            &["token", "create", "--flavor", flavor, "-o", "json"],
            flags,
        ]
        .concat())
        .await;
    serde_json::from_str(out.expect_ok()).unwrap()
}
