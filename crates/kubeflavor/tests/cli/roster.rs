//! `kubeflavor roster`: rules added in order, shown, tested against an identity (which
//! flavor, and why), removed; bad rules refused with one line naming the fix; and the
//! API server's own rules on a Roster.

use kube::api::{Api, PostParams};
use kubeflavor::ExitCode;
use kubeflavor_cluster::crd::roster::Roster;
use serde_json::json;

use crate::support::{Env, assert_one_line_error};

const ACME: &str = "https://login.acme.example";

#[tokio::test]
async fn rules_are_added_shown_tested_and_removed_in_order() {
    let env = Env::start().await;
    env.install().await;
    let roster = env.name("roster");
    let add = |args: &[&str]| {
        let mut all = vec!["roster", "add-rule", "--roster", &roster, "--issuer", ACME];
        all.extend_from_slice(args);
        all.into_iter().map(str::to_string).collect::<Vec<_>>()
    };
    let run = |args: Vec<String>| {
        let env = &env;
        async move {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            env.kf(&args).await
        }
    };
    let out = run(add(&[
        "staff",
        "--email-domain",
        "acme.example",
        "--flavor",
        "sour",
    ]))
    .await;
    assert!(out.expect_ok().contains("at position 1"), "{out:?}");
    let out = run(add(&[
        "ops",
        "--group",
        "sweet-admins",
        "--flavor",
        "sweet",
        "--max-nodes",
        "3",
        "--at",
        "1",
    ]))
    .await;
    assert!(out.expect_ok().contains("rule ops added"), "{out:?}");
    let out = run(add(&[
        "banned",
        "--email",
        "mallory@acme.example",
        "--no-token",
        "--at",
        "1",
    ]))
    .await;
    out.expect_ok();

    let shown = env.kf(&["roster", "get", "--roster", &roster]).await;
    let names: Vec<&str> = shown
        .expect_ok()
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().nth(1).unwrap())
        .collect();
    assert_eq!(names, ["banned", "ops", "staff"], "{shown:?}");
    assert!(shown.stdout.contains("<no token>") && shown.stdout.contains("group=sweet-admins"));

    let test = |extra: &[&str]| {
        let mut all = vec![
            "roster",
            "test",
            "--roster",
            &roster,
            "--issuer",
            ACME,
            "--subject",
            "u-1",
        ];
        all.extend_from_slice(extra);
        all.into_iter().map(str::to_string).collect::<Vec<_>>()
    };
    let out = run(test(&[
        "--email",
        "alice@acme.example",
        "--group",
        "sweet-admins",
    ]))
    .await;
    assert!(
        out.expect_ok().ends_with("gets flavor sweet (rule ops)\n"),
        "{out:?}"
    );
    let out = run(test(&["--email", "bob@acme.example"])).await;
    let said = out.expect_ok();
    assert!(said.contains("no match: not in the group"), "{said}");
    assert!(said.ends_with("gets flavor sour (rule staff)\n"), "{said}");
    // An unverified e-mail matches no e-mail rule.
    let out = run(test(&["--email", "bob@acme.example", "--email-unverified"])).await;
    let said = out.expect_ok();
    assert!(
        said.contains("the provider did not verify the e-mail"),
        "{said}"
    );
    assert!(
        said.ends_with("gets no token (no rule matches)\n"),
        "{said}"
    );
    let out = run(test(&[
        "--email",
        "mallory@acme.example",
        "--group",
        "sweet-admins",
    ]))
    .await;
    assert!(
        out.expect_ok()
            .ends_with("gets no token (rule banned refuses)\n"),
        "{out:?}"
    );

    // Refused before anything is written: a name taken, an issuer that is not https, a
    // rule with no condition.
    assert_one_line_error(
        &run(add(&["ops", "--group", "g", "--flavor", "sweet"])).await,
        ExitCode::Refused,
    );
    let mut http = add(&["web", "--group", "g", "--flavor", "sweet"]);
    http[5] = "http://login.acme.example".into();
    let out = run(http).await;
    assert_one_line_error(&out, ExitCode::Refused);
    assert!(out.stderr.contains("not an https URL"), "{out:?}");
    let out = run(add(&["all", "--flavor", "sweet"])).await;
    assert_one_line_error(&out, ExitCode::Refused);
    assert!(
        out.stderr
            .contains("add a subject, email, emailDomain or group"),
        "{out:?}"
    );

    env.kf(&["roster", "remove-rule", "ops", "--roster", &roster])
        .await
        .expect_ok();
    let out = run(test(&[
        "--email",
        "alice@acme.example",
        "--group",
        "sweet-admins",
    ]))
    .await;
    assert!(
        out.expect_ok().ends_with("gets flavor sour (rule staff)\n"),
        "{out:?}"
    );
    assert_one_line_error(
        &env.kf(&["roster", "remove-rule", "ops", "--roster", &roster])
            .await,
        ExitCode::NotFound,
    );
    assert_one_line_error(
        &env.kf(&["roster", "get", "--roster", &env.name("missing")])
            .await,
        ExitCode::NotFound,
    );
    Api::<Roster>::all(env.client.clone())
        .delete(&roster, &Default::default())
        .await
        .expect("Roster deleted");
}

/// What the API server refuses of a Roster written by hand (kubectl apply): the CRD's
/// schema and CEL rules, the same as the CLI's checks.
#[tokio::test]
async fn the_api_server_refuses_bad_rules() {
    let env = Env::start().await;
    env.install().await;
    let api = Api::<Roster>::all(env.client.clone());
    for (rule, says) in [
        (
            json!({"name": "a", "issuer": "http://x.example", "group": "g", "flavor": "f"}),
            "issuer",
        ),
        (
            json!({"name": "a", "issuer": ACME, "flavor": "f"}),
            "add a subject",
        ),
        (
            json!({"name": "a", "issuer": ACME, "group": "g"}),
            "set exactly one",
        ),
        (
            json!({"name": "a", "issuer": ACME, "group": "g", "flavor": "f", "noToken": true}),
            "set exactly one",
        ),
        (
            json!({"name": "A_b", "issuer": ACME, "group": "g", "flavor": "f"}),
            "name",
        ),
    ] {
        let roster: Roster = serde_json::from_value(json!({
            "apiVersion": "kubeflavor.io/v1alpha1", "kind": "Roster",
            "metadata": {"name": env.name("bad")},
            "spec": {"rules": [rule.clone()]},
        }))
        .expect("a Roster");
        let err = api
            .create(&PostParams::default(), &roster)
            .await
            .expect_err(&format!("{rule} is refused"));
        match err {
            kube::Error::Api(status) => {
                assert_eq!(status.code, 422, "{status:?}");
                assert!(status.message.contains(says), "{rule}: {}", status.message);
            }
            other => panic!("{rule}: {other}"),
        }
    }
    // Two rules of one name: the list is keyed by name.
    let twice: Roster = serde_json::from_value(json!({
        "apiVersion": "kubeflavor.io/v1alpha1", "kind": "Roster",
        "metadata": {"name": env.name("twice")},
        "spec": {"rules": [
            {"name": "a", "issuer": ACME, "group": "g", "flavor": "f"},
            {"name": "a", "issuer": ACME, "group": "h", "flavor": "f"},
        ]},
    }))
    .expect("a Roster");
    let err = api
        .create(&PostParams::default(), &twice)
        .await
        .expect_err("duplicate names");
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 422),
        "{err}"
    );
}
