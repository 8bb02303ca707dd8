//! The real binaries: exit codes and stderr exactly as a user sees them.

use crate::support::{Env, assert_one_line_error, bin, bin_with_env};
use kubeflavor::ExitCode;

const KUBEFLAVOR: &str = env!("CARGO_BIN_EXE_kubeflavor");
const PLUGIN: &str = env!("CARGO_BIN_EXE_kubectl-flavor");

#[test]
fn help_lists_the_commands_and_exits_zero() {
    let out = bin(KUBEFLAVOR, &["--help"]);
    assert_eq!(out.code, ExitCode::Ok);
    for cmd in ["token", "flavor", "install"] {
        assert!(out.stdout.contains(cmd), "{}", out.stdout);
    }
    let out = bin(KUBEFLAVOR, &["token", "--help"]);
    for cmd in ["generate", "create", "list", "delete"] {
        assert!(out.stdout.contains(cmd), "{}", out.stdout);
    }
}

#[test]
fn the_plugin_binary_calls_itself_kubectl_flavor() {
    let out = bin(PLUGIN, &["--help"]);
    assert_eq!(out.code, ExitCode::Ok);
    assert!(
        out.stdout.contains("Usage: kubectl flavor"),
        "{}",
        out.stdout
    );
    let out = bin(PLUGIN, &["token", "generate"]);
    assert_eq!(out.code, ExitCode::Ok);
    out.stdout
        .trim()
        .parse::<kubeflavor_core::token::BootstrapToken>()
        .expect("a token");
}

#[test]
fn usage_errors_exit_2() {
    let out = bin(KUBEFLAVOR, &["token", "create"]);
    assert_one_line_error(&out, ExitCode::Usage);
    let out = bin(KUBEFLAVOR, &["frobnicate"]);
    assert_one_line_error(&out, ExitCode::Usage);
}

#[test]
fn unreachable_cluster_names_the_server_and_the_kubeconfig() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dead.kubeconfig");
    // Port 1 on loopback: nothing listens there.
    std::fs::write(
        &path,
        "apiVersion: v1\nkind: Config\nclusters:\n- name: dead\n  cluster:\n    server: https://127.0.0.1:1\n\
         contexts:\n- name: dead-ctx\n  context:\n    cluster: dead\n    user: u\ncurrent-context: dead-ctx\n\
         users:\n- name: u\n  user:\n    token: x\n",
    )
    .unwrap();
    let shown = path.display().to_string();
    let out = bin(KUBEFLAVOR, &["--kubeconfig", &shown, "flavor", "list"]);
    assert_one_line_error(&out, ExitCode::Unreachable);
    assert!(out.stderr.contains("https://127.0.0.1:1"), "{}", out.stderr);
    assert!(out.stderr.contains(&shown), "{}", out.stderr);
    assert!(out.stderr.contains("dead-ctx"), "{}", out.stderr);
}

#[test]
fn missing_kubeconfig_and_unknown_context_say_what_to_do() {
    let out = bin(
        KUBEFLAVOR,
        &["--kubeconfig", "/nonexistent/kubeconfig", "token", "list"],
    );
    assert_one_line_error(&out, ExitCode::Error);
    assert!(
        out.stderr.contains("/nonexistent/kubeconfig"),
        "{}",
        out.stderr
    );
}

#[tokio::test]
async fn bad_label_through_the_binary_is_one_line_exit_4() {
    let env = Env::start().await;
    env.install().await;
    let name = env.name("bin");
    let out = env
        .kf_bin(&[
            "flavor",
            "create",
            &name,
            "--label",
            "example.com/tier=gold",
        ])
        .await;
    assert_one_line_error(&out, ExitCode::Refused);
    assert!(
        out.stderr.contains("NodeRestriction")
            && out.stderr.contains("node-restriction.kubernetes.io/")
    );
    let out = env.kf_bin(&["--context", "nope", "flavor", "list"]).await;
    assert_one_line_error(&out, ExitCode::Error);
    assert!(out.stderr.contains("context nope"), "{}", out.stderr);
}

#[tokio::test]
async fn token_create_through_the_binary_prints_only_the_token() {
    let env = Env::start().await;
    env.install().await;
    let name = env.name("binflavor");
    assert_eq!(
        env.kf_bin(&["flavor", "create", &name]).await.code,
        ExitCode::Ok
    );
    let out = env.kf_bin(&["token", "create", "--flavor", &name]).await;
    assert_eq!(out.code, ExitCode::Ok, "{out:?}");
    assert!(out.stderr.is_empty(), "{}", out.stderr);
    let token = out.stdout.trim();
    token
        .parse::<kubeflavor_core::token::BootstrapToken>()
        .expect("a token");
    let missing = env
        .kf_bin(&["token", "create", "--flavor", &env.name("nosuch")])
        .await;
    assert_one_line_error(&missing, ExitCode::NotFound);
    assert!(
        missing.stderr.contains(&name),
        "existing flavors are listed: {}",
        missing.stderr
    );
    assert_eq!(
        env.kf_bin(&["token", "delete", &token[..6]]).await.code,
        ExitCode::Ok
    );
    assert_eq!(
        env.kf_bin(&["flavor", "delete", &name]).await.code,
        ExitCode::Ok
    );
}

/// KUBECONFIG is a merged list (the first file to set a value wins, missing files are
/// skipped) and --context picks a context from any of the files, as with kubectl.
#[tokio::test]
async fn kubeconfig_list_is_merged_and_context_selects_across_files() {
    let env = Env::start().await;
    let dead = env.dir().join("dead.kubeconfig");
    std::fs::write(
        &dead,
        "apiVersion: v1\nkind: Config\nclusters:\n- name: dead\n  cluster:\n    server: https://127.0.0.1:1\n\
         contexts:\n- name: dead-ctx\n  context:\n    cluster: dead\n    user: u\ncurrent-context: dead-ctx\n\
         users:\n- name: u\n  user:\n    token: x\n",
    )
    .unwrap();
    let admin = kube::config::Kubeconfig::read_from(&env.kubeconfig).unwrap();
    let admin_context = admin.current_context.clone().unwrap();
    let missing = env.dir().join("absent.kubeconfig");
    let list = std::env::join_paths([&missing, &dead, &env.kubeconfig]).unwrap();
    let list = list.to_str().unwrap().to_string();
    let run = |args: Vec<String>| {
        let list = list.clone();
        tokio::task::spawn_blocking(move || {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            bin_with_env(KUBEFLAVOR, &args, &[("KUBECONFIG", &list)])
        })
    };
    // The first file's current-context wins: the dead cluster.
    let out = run(vec!["token".into(), "list".into()]).await.unwrap();
    assert_one_line_error(&out, ExitCode::Unreachable);
    assert!(out.stderr.contains("dead-ctx"), "{}", out.stderr);
    // The admin context comes from the last file.
    let out = run(vec![
        "--context".into(),
        admin_context,
        "token".into(),
        "list".into(),
    ])
    .await
    .unwrap();
    assert_eq!(out.code, ExitCode::Ok, "{out:?}");
}
