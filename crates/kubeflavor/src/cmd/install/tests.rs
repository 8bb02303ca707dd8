use serde_json::Value;

use super::*;

fn docs() -> Vec<Document> {
    documents(
        "kubeflavor",
        "example.com/kubeflavor:test",
        2,
        Mode::default_install(),
    )
}

fn find<'a>(docs: &'a [Document], kind: &str, name: &str) -> &'a Document {
    docs.iter()
        .find(|d| d.kind() == kind && d.name() == name)
        .unwrap_or_else(|| panic!("{kind}/{name} missing"))
}

fn rules(doc: &Document) -> Vec<Value> {
    doc.object["rules"].as_array().cloned().unwrap_or_default()
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// Each printed document read back (`parsed`) is the object it was printed from.
fn survives_yaml(parsed: &[Value], docs: &[Document]) {
    assert_eq!(parsed.len(), docs.len());
    for (read, doc) in parsed.iter().zip(docs) {
        assert_eq!(
            read,
            &doc.object,
            "{} {} does not survive YAML",
            doc.kind(),
            doc.name()
        );
    }
}

#[test]
fn rendered_yaml_reads_back_as_the_same_objects() {
    let docs = docs();
    let text = render_all(&docs).unwrap();
    let parsed: Vec<Value> = serde_saphyr::from_multiple(&text).unwrap();
    let parsed: Vec<Value> = parsed.into_iter().filter(|v| !v.is_null()).collect();
    survives_yaml(&parsed, &docs);
}

#[test]
fn every_rule_has_its_reason_printed_above_it() {
    for doc in docs() {
        let n = rules(&doc).len();
        assert_eq!(
            doc.rule_notes.len(),
            n,
            "{} {} rules and notes differ",
            doc.kind(),
            doc.name()
        );
        let text = doc.render().unwrap();
        for note in &doc.rule_notes {
            let first_words: String = note
                .split_whitespace()
                .take(4)
                .collect::<Vec<_>>()
                .join(" ");
            assert!(
                text.contains(&format!("# {first_words}")),
                "note {note:?} not printed"
            );
        }
    }
}

#[test]
fn no_wildcards_anywhere() {
    for doc in docs() {
        for rule in rules(&doc) {
            for field in ["apiGroups", "resources", "verbs"] {
                assert!(
                    !strings(&rule[field]).iter().any(|s| s == "*"),
                    "{} has * in {field}",
                    doc.name()
                );
            }
        }
    }
}

#[test]
fn controller_approves_only_for_the_kubelet_client_signer() {
    let docs = docs();
    let role = find(&docs, "ClusterRole", "kubeflavor:controller");
    let signer_rules: Vec<Value> = rules(role)
        .into_iter()
        .filter(|r| strings(&r["resources"]).contains(&"signers".into()))
        .collect();
    assert_eq!(signer_rules.len(), 1);
    assert_eq!(strings(&signer_rules[0]["verbs"]), ["approve"]);
    assert_eq!(
        strings(&signer_rules[0]["resourceNames"]),
        [KUBELET_CLIENT_SIGNER]
    );
}

#[test]
fn secrets_are_reachable_only_in_kube_system() {
    for doc in docs() {
        for rule in rules(&doc) {
            if strings(&rule["resources"]).contains(&"secrets".into()) {
                assert_eq!(
                    doc.kind(),
                    "Role",
                    "{} grants secrets cluster-wide",
                    doc.name()
                );
                assert_eq!(doc.namespace(), Some("kube-system"));
            }
        }
    }
}

#[test]
fn controller_can_delete_tokens_for_p4_but_cannot_delete_bindings() {
    let docs = docs();
    let tokens = find(&docs, "Role", "kubeflavor:controller:tokens");
    assert!(
        rules(tokens)
            .iter()
            .any(|r| strings(&r["verbs"]).contains(&"delete".into()))
    );
    let cluster = find(&docs, "ClusterRole", "kubeflavor:controller");
    for rule in rules(cluster) {
        if strings(&rule["resources"])
            .iter()
            .any(|r| r.starts_with("flavorbindings"))
        {
            assert!(!strings(&rule["verbs"]).contains(&"delete".into()));
        }
    }
}

#[test]
fn token_groups_get_node_bootstrapper_but_never_auto_approval() {
    let docs = docs();
    for group in [
        kubeflavor_core::token::secret::NODE_GROUP,
        kubeflavor_core::token::secret::CONTROL_PLANE_GROUP,
    ] {
        check_token_group(&docs, group);
    }
}

fn check_token_group(docs: &[Document], group: &str) {
    let mut roles_for_group = Vec::new();
    for doc in docs {
        if !doc.kind().ends_with("Binding") {
            continue;
        }
        let subjects = doc.object["subjects"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        if subjects
            .iter()
            .any(|s| s["kind"] == "Group" && s["name"] == group)
        {
            roles_for_group.push(doc.object["roleRef"]["name"].as_str().unwrap().to_string());
        }
    }
    roles_for_group.sort();
    assert_eq!(
        roles_for_group,
        [
            "kubeflavor:get-nodes",
            "kubeflavor:kubeadm-config-reader",
            "system:node-bootstrapper"
        ]
    );
    let text = render_all(docs).unwrap();
    assert!(text.contains(
        "NO binding to system:certificates.k8s.io:certificatesigningrequests:nodeclient"
    ));
}

/// P1 (hidden flavor): FlavorBindings record each node's flavor and its token's custody
/// (issuedTo, issuedBy). In every install mode, only the controller's ServiceAccount is
/// granted anything on kubeflavor.io resources but a node's own report: no join token
/// group, and nodes nothing else (the reporter's role names NodeReports alone, create and
/// patch).
#[test]
fn only_the_controller_may_touch_flavor_bindings() {
    for docs in all_modes() {
        let reporter = find(&docs, "ClusterRole", "kubeflavor:node-reporter");
        assert_eq!(
            rule_table(reporter),
            [row(
                "kubeflavor.io",
                "nodereports",
                &["create", "patch"],
                &[]
            )]
        );
        let roles_on_kubeflavor: Vec<&str> = docs
            .iter()
            .filter(|d| d.kind() == "ClusterRole" || d.kind() == "Role")
            .filter(|d| d.name() != "kubeflavor:node-reporter")
            .filter(|d| {
                rules(d).iter().any(|r| {
                    strings(&r["apiGroups"])
                        .iter()
                        .any(|g| g == "kubeflavor.io")
                })
            })
            .map(|d| d.name())
            .collect();
        assert!(!roles_on_kubeflavor.is_empty());
        for doc in docs.iter().filter(|d| d.kind().ends_with("RoleBinding")) {
            let role = doc.object["roleRef"]["name"].as_str().unwrap();
            if !roles_on_kubeflavor.contains(&role) {
                continue;
            }
            for subject in doc.object["subjects"].as_array().unwrap() {
                assert_eq!(subject["kind"], "ServiceAccount", "{role}: {subject}");
                assert_eq!(
                    subject["name"], "kubeflavor-controller",
                    "{role}: {subject}"
                );
            }
        }
    }
}

#[test]
fn kubeadm_config_read_is_limited_to_two_configmaps() {
    let docs = docs();
    let role = find(&docs, "Role", "kubeflavor:kubeadm-config-reader");
    assert_eq!(role.namespace(), Some("kube-system"));
    let r = &rules(role)[0];
    assert_eq!(strings(&r["verbs"]), ["get"]);
    assert_eq!(
        strings(&r["resourceNames"]),
        ["kubeadm-config", "kubelet-config"]
    );
}

#[test]
fn deployment_is_ha_probed_and_locked_down() {
    let docs = docs();
    let d = &find(&docs, "Deployment", "kubeflavor-controller").object;
    assert_eq!(d["spec"]["replicas"], 2);
    let pod = &d["spec"]["template"]["spec"];
    assert_eq!(pod["serviceAccountName"], CONTROLLER_SA);
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    let c = &pod["containers"][0];
    assert_eq!(c["image"], "example.com/kubeflavor:test");
    assert!(strings(&c["args"]).contains(&"--leader-elect".into()));
    assert_eq!(c["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/readyz");
    assert_eq!(c["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(c["securityContext"]["allowPrivilegeEscalation"], false);
    assert!(c["resources"]["requests"]["cpu"].is_string());
    assert!(c["resources"]["requests"]["memory"].is_string());
}

#[test]
fn install_says_how_to_hand_renewals_to_kubeflavor() {
    let text = render_all(&docs()).unwrap();
    assert!(
        text.contains("kubeadm:node-autoapprove-certificate-rotation"),
        "{text}"
    );
    assert!(text.contains("--manage-renewals"), "{text}");
}

#[test]
fn modes_change_the_controller_flags_and_the_token_grants_only() {
    let args = |docs: &[Document]| {
        find(docs, "Deployment", "kubeflavor-controller").object["spec"]["template"]["spec"]
            ["containers"][0]["args"]
            .to_string()
    };
    let plain = documents("kubeflavor", &default_image(), 2, Mode::default_install());
    let renewals = Mode {
        manage_renewals: true,
        ..Mode::default_install()
    };
    let sole = Mode {
        manage_renewals: true,
        strict: true,
        ..Mode::default_install()
    };
    let hidden = Mode {
        token_node_read: false,
        ..Mode::default_install()
    };
    assert!(!args(&plain).contains("--manage-renewals") && !args(&plain).contains("--strict"));
    let r = documents("kubeflavor", &default_image(), 2, renewals);
    assert!(args(&r).contains("--manage-renewals") && !args(&r).contains("--strict"));
    let s = documents("kubeflavor", &default_image(), 2, sole);
    assert!(args(&s).contains("--manage-renewals") && args(&s).contains("--strict"));
    assert_eq!(plain.len(), r.len());
    assert_eq!(
        plain.len() + 2,
        s.len(),
        "the sole-approver policy and its binding"
    );
    // The SubjectAccessReview grant is always there: the start-up check runs always.
    assert!(
        rules(find(&plain, "ClusterRole", "kubeflavor:controller"))
            .iter()
            .any(|r| r["resources"][0] == "subjectaccessreviews")
    );
    // So is the RBAC reading behind it, in every mode: list and watch, nothing more.
    for mode in [&plain, &r, &s] {
        let rbac_rules: Vec<Value> = rules(find(mode, "ClusterRole", "kubeflavor:controller"))
            .into_iter()
            .filter(|r| r["apiGroups"][0] == "rbac.authorization.k8s.io")
            .collect();
        assert_eq!(rbac_rules.len(), 1, "{rbac_rules:?}");
        assert_eq!(
            strings(&rbac_rules[0]["resources"]),
            ["clusterroles", "clusterrolebindings"]
        );
        assert_eq!(strings(&rbac_rules[0]["verbs"]), ["list", "watch"]);
    }
    let h = documents("kubeflavor", &default_image(), 2, hidden);
    assert!(h.iter().all(|d| d.name() != "kubeflavor:get-nodes"));
    assert_eq!(h.len() + 2, plain.len());
}

#[test]
fn the_trail_may_only_create_events_in_kube_system() {
    let docs = docs();
    let trail = find(&docs, "Role", "kubeflavor:controller:trail");
    assert_eq!(trail.namespace(), Some("kube-system"));
    assert_eq!(
        trail.object["rules"][0]["verbs"],
        serde_json::json!(["create"])
    );
    assert_eq!(
        trail.object["rules"][0]["apiGroups"],
        serde_json::json!(["events.k8s.io"])
    );
    let events_elsewhere = docs
        .iter()
        .filter(|d| d.kind() == "Role" || d.kind() == "ClusterRole")
        .filter(|d| d.name() != "kubeflavor:controller:trail")
        .any(|d| d.object["rules"].to_string().contains("\"events\""));
    assert!(!events_elsewhere);
}

#[test]
fn namespaced_objects_follow_the_namespace_flag() {
    let docs = documents("ops", &default_image(), 2, Mode::default_install());
    for kind in ["ServiceAccount", "Deployment"] {
        assert!(
            docs.iter()
                .filter(|d| d.kind() == kind)
                .all(|d| d.namespace() == Some("ops"))
        );
    }
    let election = find(&docs, "Role", "kubeflavor:controller:leader-election");
    assert_eq!(election.namespace(), Some("ops"));
    let binding = find(&docs, "ClusterRoleBinding", "kubeflavor:controller");
    assert_eq!(binding.object["subjects"][0]["namespace"], "ops");
}

#[test]
fn every_kind_has_a_resource_for_apply() {
    for doc in docs() {
        let (ar, _) = resource_of(&doc).unwrap();
        assert_eq!(ar.kind, doc.kind());
    }
}

#[test]
fn default_image_carries_the_version() {
    assert_eq!(
        default_image(),
        format!(
            "ghcr.io/kubeflavor/kubeflavor:{}",
            env!("CARGO_PKG_VERSION")
        )
    );
}

#[test]
fn namespace_enforces_the_restricted_pod_security_standard() {
    let docs = docs();
    let ns = find(&docs, "Namespace", "kubeflavor");
    assert_eq!(
        ns.object["metadata"]["labels"]["pod-security.kubernetes.io/enforce"],
        "restricted"
    );
    // What "restricted" demands of the controller's pod.
    let pod =
        &find(&docs, "Deployment", "kubeflavor-controller").object["spec"]["template"]["spec"];
    assert_eq!(
        pod["securityContext"]["seccompProfile"]["type"],
        "RuntimeDefault"
    );
    let c = &pod["containers"][0]["securityContext"];
    assert_eq!(c["capabilities"]["drop"], serde_json::json!(["ALL"]));
    assert_eq!(c["runAsNonRoot"], true);
}

fn all_modes() -> Vec<Vec<Document>> {
    let modes = [
        Mode::default_install(),
        Mode {
            manage_renewals: true,
            ..Mode::default_install()
        },
        Mode {
            manage_renewals: true,
            strict: true,
            ..Mode::default_install()
        },
        Mode::default(),
    ];
    modes
        .into_iter()
        .flat_map(|mode| {
            [0, 1, 2]
                .into_iter()
                .map(move |replicas| documents("kubeflavor", &default_image(), replicas, mode))
        })
        .collect()
}

use crate::output::yaml::tests::comments_above;

fn noted(object: Value, notes: &[(&str, &str)]) -> Document {
    notes
        .iter()
        .fold(Document::new("About.", &object), |doc, (path, text)| {
            doc.note(path, text)
        })
}

#[test]
fn a_note_for_a_field_the_object_lacks_fails_the_render() {
    let doc = noted(
        serde_json::json!({"spec": {"replicas": 2}}),
        &[("spec.replica", "Misspelt.")],
    );
    let err = doc.render().unwrap_err().to_string();
    assert!(err.contains("spec.replica"), "{err}");
    // A list item's key is addressed without an index.
    let doc = noted(
        serde_json::json!({"items": [{"name": "a"}]}),
        &[("items.0.name", "Indexed.")],
    );
    assert!(doc.render().is_err());
}

#[test]
fn every_note_of_every_install_mode_finds_its_field() {
    for docs in all_modes() {
        let text = render_all(&docs).unwrap();
        for doc in &docs {
            for (_, note) in &doc.notes {
                let first_words: String = note
                    .split_whitespace()
                    .take(4)
                    .collect::<Vec<_>>()
                    .join(" ");
                assert!(text.contains(&format!("# {first_words}")), "{note:?}");
            }
        }
    }
}

#[test]
fn every_field_of_the_controller_pod_is_explained() {
    let docs = docs();
    let deployment = find(&docs, "Deployment", "kubeflavor-controller");
    let noted: Vec<&str> = deployment.notes.iter().map(|(p, _)| p.as_str()).collect();
    let pod = "spec.template.spec";
    let container = "spec.template.spec.containers";
    for path in [
        "spec.replicas".to_string(),
        "spec.strategy".into(),
        "spec.template.metadata.annotations".into(),
        format!("{pod}.serviceAccountName"),
        format!("{pod}.automountServiceAccountToken"),
        format!("{pod}.priorityClassName"),
        format!("{pod}.securityContext"),
        format!("{pod}.affinity"),
        format!("{container}.args"),
        format!("{container}.env"),
        format!("{container}.ports"),
        format!("{container}.livenessProbe"),
        format!("{container}.readinessProbe"),
        format!("{container}.resources"),
        format!("{container}.securityContext"),
    ] {
        assert!(noted.contains(&path.as_str()), "no note on {path}");
    }
    let text = deployment.render().unwrap();
    let above = comments_above(&text, "      priorityClassName: system-cluster-critical");
    assert!(
        above[0].starts_with("      # Nodes join only when this controller approves"),
        "{above:?}"
    );
    let resources = comments_above(&text, "        resources:")
        .iter()
        .map(|l| l.trim_start().trim_start_matches("# "))
        .collect::<Vec<_>>()
        .join(" ");
    for figure in ["26 MiB", "51 MiB", "0.26 KiB", "3 ms", "No CPU limit"] {
        assert!(resources.contains(figure), "{resources}");
    }
}

#[test]
fn only_the_controller_pod_mounts_an_api_token() {
    let docs = docs();
    let sa = find(&docs, "ServiceAccount", CONTROLLER_SA);
    assert_eq!(sa.object["automountServiceAccountToken"], false);
    let pod =
        &find(&docs, "Deployment", "kubeflavor-controller").object["spec"]["template"]["spec"];
    assert_eq!(pod["automountServiceAccountToken"], true);
    assert_eq!(pod["serviceAccountName"], CONTROLLER_SA);
}

#[test]
fn the_controller_is_cluster_critical_and_scrapeable() {
    let docs = docs();
    let template = &find(&docs, "Deployment", "kubeflavor-controller").object["spec"]["template"];
    assert_eq!(
        template["spec"]["priorityClassName"],
        "system-cluster-critical"
    );
    assert_eq!(
        template["metadata"]["annotations"],
        serde_json::json!({
            "prometheus.io/scrape": "true",
            "prometheus.io/port": "8080",
            "prometheus.io/path": "/metrics",
        })
    );
    let c = &template["spec"]["containers"][0];
    assert_eq!(c["ports"][0]["name"], "http");
    assert_eq!(c["ports"][0]["containerPort"], HTTP_PORT);
    assert_eq!(c["resources"]["requests"]["cpu"], "50m");
    assert_eq!(c["resources"]["requests"]["memory"], "64Mi");
    assert_eq!(
        c["resources"]["limits"],
        serde_json::json!({"memory": "256Mi"}),
        "no CPU limit"
    );
    // The scrape flag is the string "true", as the annotation must be.
    let text = render_all(&docs).unwrap();
    assert!(text.contains("prometheus.io/scrape: \"true\""), "{text}");
}

#[test]
fn a_disruption_budget_comes_with_running_replicas_only() {
    for replicas in [1, 2, 3] {
        let docs = documents("ops", &default_image(), replicas, Mode::default_install());
        let pdb = find(&docs, "PodDisruptionBudget", "kubeflavor-controller");
        assert_eq!(pdb.api_version(), "policy/v1");
        assert_eq!(pdb.namespace(), Some("ops"));
        assert_eq!(pdb.object["spec"]["maxUnavailable"], 1);
        assert!(pdb.object["spec"]["minAvailable"].is_null());
        assert_eq!(
            pdb.object["spec"]["unhealthyPodEvictionPolicy"],
            "AlwaysAllow"
        );
        let deployment = find(&docs, "Deployment", "kubeflavor-controller");
        assert_eq!(
            pdb.object["spec"]["selector"],
            deployment.object["spec"]["selector"]
        );
        assert_eq!(
            deployment.object["spec"]["template"]["metadata"]["labels"],
            pdb.object["spec"]["selector"]["matchLabels"]
        );
        let (ar, namespaced) = resource_of(pdb).unwrap();
        assert_eq!(
            (ar.plural.as_str(), namespaced),
            ("poddisruptionbudgets", true)
        );
    }
    let none = documents("ops", &default_image(), 0, Mode::default_install());
    assert!(none.iter().all(|d| d.kind() != "PodDisruptionBudget"));
    assert_eq!(none.len() + 1, docs().len());
}

#[test]
fn every_mode_and_replica_count_renders_and_reads_back() {
    for docs in all_modes() {
        let text = render_all(&docs).unwrap();
        let parsed: Vec<Value> = serde_saphyr::from_multiple(&text).unwrap();
        let parsed: Vec<Value> = parsed.into_iter().filter(|v| !v.is_null()).collect();
        assert_eq!(parsed.len(), docs.len());
        for (read, doc) in parsed.iter().zip(&docs) {
            assert_eq!(read, &doc.object, "{} {}", doc.kind(), doc.name());
        }
    }
}

fn with_serve(replicas: u16) -> Vec<Document> {
    let mode = Mode {
        serve: Some(ServePlan::default()),
        ..Mode::default_install()
    };
    documents("kubeflavor", "example.com/kubeflavor:test", replicas, mode)
}

/// `install --serve` with these `--serve-replicas`, `--serve-rate-per-minute` and
/// `--serve-burst`, everything else as by default.
fn with_serve_flags(replicas: u16, per_minute: u32, burst: u32) -> InstallArgs {
    InstallArgs {
        namespace: "kubeflavor".into(),
        apply: false,
        image: None,
        replicas: 2,
        manage_renewals: false,
        sole_approver: false,
        approve_serving: false,
        no_token_node_read: false,
        serve: true,
        serve_replicas: replicas,
        serve_rate_per_minute: per_minute,
        serve_burst: burst,
        serve_max_token_ttl: TokenTtl::Seconds(7 * 24 * 3600),
        serve_max_nodes: 100,
        serve_oidc_issuers: Vec::new(),
        serve_roster: None,
        serve_oidc_ca_configmap: None,
        serve_portal_url: None,
        serve_portal_issuer: None,
        authz_webhook: false,
        authz_config: false,
        monitoring: false,
        run_on_trust_level: None,
        node_reporter: None,
        node_reporter_ca_configmap: None,
        node_reporter_every: std::time::Duration::from_secs(600),
    }
}

/// `install --node-reporter URL --node-reporter-ca-configmap NAME`: a namespace of its own
/// (privileged, as host networking and host paths need) holding a DaemonSet that runs
/// `kubeflavor node report` as the node: the host's network, the kubelet's kubeconfig and
/// certificates read-only from the host, no ServiceAccount token, every taint tolerated;
/// its arguments parse as `kubeflavor node report`. A URL that is not https is refused.
#[test]
fn the_node_reporter_runs_as_the_node_on_every_node() {
    use clap::Parser;
    let parse = |extra: &[&str]| {
        let mut argv = vec!["kubeflavor", "install"];
        argv.extend(extra);
        let cli = crate::cmd::Cli::try_parse_from(argv).expect("the flags parse");
        let crate::cmd::Command::Install(args) = cli.command else {
            panic!("not install");
        };
        args
    };
    let none = parse(&[]);
    assert!(node_reporter_of(&none, "img").unwrap().is_empty());
    let args = parse(&[
        "--node-reporter",
        "https://join.example.com:8443/",
        "--node-reporter-ca-configmap",
        "observer-ca",
    ]);
    let docs = node_reporter_of(&args, "example.com/kubeflavor:test").unwrap();
    let namespace = find(&docs, "Namespace", "kubeflavor-node-reporter");
    assert_eq!(
        namespace.object["metadata"]["labels"]["pod-security.kubernetes.io/enforce"],
        "privileged"
    );
    let ds = &find(&docs, "DaemonSet", node_reports::REPORTER).object;
    assert_eq!(ds["metadata"]["namespace"], "kubeflavor-node-reporter");
    let pod = &ds["spec"]["template"]["spec"];
    assert_eq!(pod["hostNetwork"], true);
    assert_eq!(pod["automountServiceAccountToken"], false);
    assert_eq!(pod["tolerations"][0]["operator"], "Exists");
    let container = &pod["containers"][0];
    let argv = strings(&container["args"]);
    assert_eq!(
        argv,
        [
            "node",
            "report",
            "--kubeconfig=/etc/kubernetes/kubelet.conf",
            "--observer=https://join.example.com:8443",
            "--every=600s",
            "--observer-ca-file=/etc/kubeflavor/observer-ca/ca.crt",
        ]
    );
    let mut full = vec!["kubeflavor".to_string()];
    full.extend(argv);
    let cli = crate::cmd::Cli::try_parse_from(&full).expect("the DaemonSet's args parse");
    assert!(matches!(
        cli.command,
        crate::cmd::Command::Node(crate::cmd::node::NodeCommand::Report(_))
    ));
    for mount in container["volumeMounts"].as_array().unwrap() {
        assert_eq!(mount["readOnly"], true, "{mount}");
    }
    let host_paths: Vec<&str> = pod["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|v| v["hostPath"]["path"].as_str())
        .collect();
    assert_eq!(
        host_paths,
        ["/etc/kubernetes/kubelet.conf", "/var/lib/kubelet/pki"]
    );
    assert_eq!(
        container["securityContext"]["capabilities"]["drop"][0],
        "ALL"
    );
    assert_eq!(container["securityContext"]["readOnlyRootFilesystem"], true);
    for bad in ["http://join.example.com", "join.example.com", "https://"] {
        match node_reporter_of(&parse(&["--node-reporter", bad]), "img") {
            Err(e) => assert_eq!(e.code, ExitCode::Usage, "{bad}: {e}"),
            Ok(_) => panic!("--node-reporter {bad} was taken"),
        }
    }
}

/// `install --serve --serve-oidc-issuer ... --serve-roster ... --serve-oidc-ca-configmap
/// ...`: the API's Deployment runs `serve` with the same flags, the CA ConfigMap mounted
/// read-only where `--oidc-ca-file` names it; without them, none of it.
#[test]
fn the_join_token_api_serves_node_administrators_as_install_says() {
    use clap::Parser;
    let cli = crate::cmd::Cli::try_parse_from([
        "kubeflavor",
        "install",
        "--serve",
        "--serve-oidc-issuer",
        "https://login.acme.example=kubeflavor",
        "--serve-oidc-issuer",
        "https://id.other.example/realms/a=kf",
        "--serve-roster",
        "partners",
        "--serve-oidc-ca-configmap",
        "idp-ca",
        "--serve-portal-url",
        "https://nodes.acme.example",
        "--serve-portal-issuer",
        "https://login.acme.example",
    ])
    .expect("the flags parse");
    let crate::cmd::Command::Install(args) = cli.command else {
        panic!("not install");
    };
    let docs = documents_with(
        "kubeflavor",
        "example.com/kubeflavor:test",
        2,
        Mode::of(&args).unwrap(),
        &administrators_of(&args),
    );
    let pod = &find(&docs, "Deployment", SERVE).object["spec"]["template"]["spec"];
    let container = &pod["containers"][0];
    let args = strings(&container["args"]);
    for flag in [
        "--oidc-issuer=https://login.acme.example=kubeflavor",
        "--oidc-issuer=https://id.other.example/realms/a=kf",
        "--roster=partners",
        "--oidc-ca-file=/etc/kubeflavor/oidc-ca/ca.crt",
        "--portal-url=https://nodes.acme.example",
        "--portal-issuer=https://login.acme.example",
        "--portal-client-secret-file=/etc/kubeflavor/portal/client-secret",
        "--portal-session-keys-file=/etc/kubeflavor/portal/session-keys",
    ] {
        assert!(args.iter().any(|a| a == flag), "{flag} missing: {args:?}");
    }
    let volume = pod["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "oidc-ca")
        .expect("the CA volume");
    assert_eq!(volume["configMap"]["name"], "idp-ca");
    let mount = container["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == "oidc-ca")
        .expect("the CA mount");
    assert_eq!(mount["mountPath"], "/etc/kubeflavor/oidc-ca");
    assert_eq!(mount["readOnly"], true);
    // The portal's Secret (client secret, session keys), which the owner creates.
    let volume = pod["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "portal")
        .expect("the portal volume");
    assert_eq!(volume["secret"]["secretName"], "kubeflavor-portal");
    assert!(
        container["volumeMounts"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["name"] == "portal" && m["mountPath"] == "/etc/kubeflavor/portal"),
        "the portal Secret is mounted where the flags name it"
    );
    // It may read only the Roster it serves.
    let role = find(&docs, "ClusterRole", "kubeflavor:serve");
    let roster_rule = rules(role)
        .into_iter()
        .find(|r| strings(&r["resources"]) == ["rosters"])
        .expect("a rule on rosters");
    assert_eq!(strings(&roster_rule["resourceNames"]), ["partners"]);
    // Every flag the Deployment passes is one `serve` takes.
    let serve_args: Vec<&str> = std::iter::once("kubeflavor")
        .chain(args.iter().map(String::as_str))
        .collect();
    crate::cmd::Cli::try_parse_from(serve_args).expect("serve takes the Deployment's args");

    let plain = with_serve(2);
    let pod = &find(&plain, "Deployment", SERVE).object["spec"]["template"]["spec"];
    assert!(
        !strings(&pod["containers"][0]["args"])
            .iter()
            .any(|a| a.starts_with("--oidc"))
    );
    assert_eq!(pod["volumes"].as_array().unwrap().len(), 1);
}

/// The objects of the join-token API: (kind, namespace, name).
fn serve_objects() -> Vec<(&'static str, Option<&'static str>, &'static str)> {
    vec![
        ("ValidatingAdmissionPolicy", None, TOKEN_POLICY),
        ("ValidatingAdmissionPolicyBinding", None, TOKEN_POLICY),
        ("ServiceAccount", Some("kubeflavor"), SERVE),
        (
            "ClusterRoleBinding",
            None,
            "kubeflavor:serve:auth-delegator",
        ),
        ("ClusterRole", None, "kubeflavor:serve"),
        ("ClusterRoleBinding", None, "kubeflavor:serve"),
        ("Role", Some("kube-system"), "kubeflavor:serve:tokens"),
        (
            "RoleBinding",
            Some("kube-system"),
            "kubeflavor:serve:tokens",
        ),
        ("Role", Some("kube-public"), "kubeflavor:serve:cluster-info"),
        (
            "RoleBinding",
            Some("kube-public"),
            "kubeflavor:serve:cluster-info",
        ),
        ("Deployment", Some("kubeflavor"), SERVE),
        ("PodDisruptionBudget", Some("kubeflavor"), SERVE),
        ("Service", Some("kubeflavor"), SERVE),
    ]
}

#[test]
fn the_join_token_api_is_installed_only_with_serve() {
    let plain = docs();
    let served = with_serve(2);
    assert!(
        plain.iter().all(|d| d.name() != SERVE
            && d.name() != TOKEN_POLICY
            && !d.name().starts_with("kubeflavor:serve")),
        "nothing of serve without --serve"
    );
    let extra: Vec<(String, Option<String>, String)> = served[plain.len()..]
        .iter()
        .map(|d| {
            (
                d.kind().to_string(),
                d.namespace().map(str::to_string),
                d.name().to_string(),
            )
        })
        .collect();
    let expected: Vec<(String, Option<String>, String)> = serve_objects()
        .into_iter()
        .map(|(k, ns, n)| (k.into(), ns.map(str::to_string), n.into()))
        .collect();
    assert_eq!(extra, expected, "the serve objects, after the controller's");
    for (read, doc) in plain.iter().zip(&served) {
        assert_eq!(read.object, doc.object, "--serve changes nothing else");
    }
    let args = with_serve_flags(2, 60, 20);
    assert_eq!(Mode::of(&args).unwrap().serve, Some(ServePlan::default()));
    assert!(Mode::default_install().serve.is_none());
    // Without replicas nothing runs: the Deployment has 0 and no budget.
    let none = with_serve(0);
    let d = find(&none, "Deployment", SERVE);
    assert_eq!(d.object["spec"]["replicas"], 0);
    assert!(
        none.iter()
            .all(|d| d.kind() != "PodDisruptionBudget" || d.name() != SERVE)
    );
    for doc in &served {
        let (ar, _) = resource_of(doc).unwrap();
        assert_eq!(ar.kind, doc.kind());
    }
}

/// The flags of the join-token API's container that start with `prefix`.
fn serve_args(docs: &[Document], prefix: &str) -> Vec<String> {
    find(docs, "Deployment", SERVE).object["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .filter(|a| a.starts_with(prefix))
        .map(str::to_string)
        .collect()
}

/// `--serve-max-token-ttl` and `--serve-max-nodes` are the token policy's ceilings, named
/// in its notes; a ceiling of "never expires" is refused.
#[test]
fn the_serve_ceilings_are_the_flags() {
    let mut args = with_serve_flags(2, 60, 20);
    args.serve_max_token_ttl = "24h".parse().unwrap();
    args.serve_max_nodes = 5;
    let mode = Mode::of(&args).unwrap();
    let ceilings = mode.serve.unwrap().ceilings;
    assert_eq!(
        (ceilings.max_ttl_secs, ceilings.max_nodes.get()),
        (86400, 5)
    );
    let docs = documents("kubeflavor", "example.com/kubeflavor:test", 2, mode);
    let policy = find(&docs, "ValidatingAdmissionPolicy", TOKEN_POLICY);
    let rules = kubeflavor_core::admission::token_shape::rules(&ceilings);
    assert_eq!(
        policy.object["spec"]["validations"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v["expression"].as_str().unwrap())
            .collect::<Vec<_>>(),
        rules
            .iter()
            .map(|r| r.expression.as_str())
            .collect::<Vec<_>>()
    );
    let (_, note) = policy
        .notes
        .iter()
        .find(|(path, _)| path == "spec.validations")
        .expect("a note on the rules");
    assert!(
        note.contains("at most 24h after the")
            && note.contains("at most 5 (install --serve-max-nodes)"),
        "{note}"
    );
    args.serve_max_token_ttl = "0".parse().unwrap();
    assert_eq!(Mode::of(&args).unwrap_err().code, ExitCode::Usage);
}

#[test]
fn a_callers_rate_is_split_over_the_serve_replicas() {
    // The defaults: 60 a minute and 20 at once per caller across 2 replicas.
    let docs = with_serve(2);
    assert_eq!(
        serve_args(&docs, "--rate-per-minute=")
            .into_iter()
            .chain(serve_args(&docs, "--burst="))
            .collect::<Vec<_>>(),
        ["--rate-per-minute=30", "--burst=10"]
    );
    assert_eq!(
        find(&docs, "Deployment", SERVE).object["spec"]["replicas"],
        2
    );
    let plan = ServePlan::new(
        3,
        MintRate {
            per_minute: 90,
            burst: 7,
        },
    )
    .unwrap();
    let mode = Mode {
        serve: Some(plan),
        ..Mode::default_install()
    };
    let docs = documents("kubeflavor", "example.com/kubeflavor:test", 2, mode);
    let deployment = find(&docs, "Deployment", SERVE);
    assert_eq!(deployment.object["spec"]["replicas"], 3);
    assert_eq!(
        serve_args(&docs, "--burst="),
        ["--burst=2"],
        "7 / 3 rounded down"
    );
    let (_, note) = deployment
        .notes
        .iter()
        .find(|(path, _)| path == "spec.template.spec.containers.args")
        .expect("a note on the args");
    assert!(
        note.contains("a caller's 90 a minute and 7 at once across the API")
            && note.contains("--rate-per-minute=30 --burst=2")
            && note.contains("at most 90 a minute and 6 at once in all"),
        "the note gives the arithmetic: {note}"
    );

    let args = with_serve_flags(3, 60, 2);
    let refused = Mode::of(&args).unwrap_err();
    assert_eq!(refused.code, crate::exit::ExitCode::Refused);
    assert!(
        refused
            .message
            .contains("burst 2 cannot be split over 3 replicas"),
        "{}",
        refused.message
    );
}

/// One rule as (apiGroups, resources, verbs, resourceNames).
type Row = (Vec<String>, Vec<String>, Vec<String>, Vec<String>);

/// The rules of a role, in order.
fn rule_table(doc: &Document) -> Vec<Row> {
    rules(doc)
        .iter()
        .map(|r| {
            (
                strings(&r["apiGroups"]),
                strings(&r["resources"]),
                strings(&r["verbs"]),
                strings(&r["resourceNames"]),
            )
        })
        .collect()
}

fn row(group: &str, resource: &str, verbs: &[&str], names: &[&str]) -> Row {
    let own = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    (own(&[group]), own(&[resource]), own(verbs), own(names))
}

#[test]
fn the_join_token_api_gets_exactly_its_rbac() {
    let docs = with_serve(2);
    assert_eq!(
        rule_table(find(&docs, "ClusterRole", "kubeflavor:serve")),
        [
            row("kubeflavor.io", "flavors", &["get", "list"], &[]),
            row("kubeflavor.io", "flavorbindings", &["list"], &[]),
            row("kubeflavor.io", "rosters", &["get"], &["default"]),
            row(
                "kubeflavor.io",
                "administratorledgers",
                &["get", "create", "update"],
                &[],
            ),
            row("kubeflavor.io", "rosters/status", &["update"], &["default"]),
            row("kubeflavor.io", "nodereports/status", &["patch"], &[]),
        ]
    );
    let tokens = find(&docs, "Role", "kubeflavor:serve:tokens");
    assert_eq!(tokens.namespace(), Some("kube-system"));
    assert_eq!(
        rule_table(tokens),
        [
            row("", "secrets", &["create"], &[]),
            row("events.k8s.io", "events", &["create"], &[]),
        ]
    );
    // The trail's Events go where this Role grants them.
    assert_eq!(
        kubeflavor_cluster::ops::trail::TRAIL_NAMESPACE,
        kubeflavor_core::token::secret::TOKEN_SECRET_NAMESPACE
    );
    assert!(
        tokens.rule_notes[0].contains("cannot limit create by name")
            && tokens.rule_notes[0].contains(TOKEN_POLICY),
        "{}",
        tokens.rule_notes[0]
    );
    let info = find(&docs, "Role", "kubeflavor:serve:cluster-info");
    assert_eq!(info.namespace(), Some("kube-public"));
    assert_eq!(
        rule_table(info),
        [row("", "configmaps", &["get"], &["cluster-info"])]
    );
    assert!(
        render_all(&docs)
            .unwrap()
            .contains("kubeadm:bootstrap-signer-clusterinfo")
    );

    // Every binding naming the serve identity, and nothing else naming it.
    let mut granted: Vec<(String, String, Option<String>)> = Vec::new();
    for doc in &docs {
        if !doc.kind().ends_with("Binding") {
            continue;
        }
        let subjects = doc.object["subjects"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let serve = subjects
            .iter()
            .any(|s| s["kind"] == "ServiceAccount" && s["name"] == SERVE);
        if serve {
            assert_eq!(subjects.len(), 1, "{} binds only the API", doc.name());
            assert_eq!(subjects[0]["namespace"], "kubeflavor");
            granted.push((
                doc.object["roleRef"]["kind"].as_str().unwrap().into(),
                doc.object["roleRef"]["name"].as_str().unwrap().into(),
                doc.namespace().map(str::to_string),
            ));
        }
        assert!(
            !subjects.iter().any(|s| s["name"] == CONTROLLER_SA && serve),
            "one identity per binding"
        );
    }
    granted.sort();
    assert_eq!(
        granted,
        [
            ("ClusterRole".into(), "kubeflavor:serve".into(), None),
            ("ClusterRole".into(), "system:auth-delegator".into(), None),
            (
                "Role".into(),
                "kubeflavor:serve:cluster-info".into(),
                Some("kube-public".into())
            ),
            (
                "Role".into(),
                "kubeflavor:serve:tokens".into(),
                Some("kube-system".into())
            ),
        ]
    );
    // Every rule explained, no wildcard (the shared checks, over the serve set too).
    for doc in &docs {
        assert_eq!(doc.rule_notes.len(), rules(doc).len(), "{}", doc.name());
        for rule in rules(doc) {
            for field in ["apiGroups", "resources", "verbs"] {
                assert!(!strings(&rule[field]).iter().any(|s| s == "*"));
            }
        }
    }
}

#[test]
fn only_the_join_token_api_pod_mounts_its_token() {
    let docs = with_serve(2);
    let sa = find(&docs, "ServiceAccount", SERVE);
    assert_eq!(sa.namespace(), Some("kubeflavor"));
    assert_eq!(sa.object["automountServiceAccountToken"], false);
    let pod = &find(&docs, "Deployment", SERVE).object["spec"]["template"]["spec"];
    assert_eq!(pod["serviceAccountName"], SERVE);
    assert_eq!(pod["automountServiceAccountToken"], true);
    // The controller's pod keeps its own identity.
    let controller =
        &find(&docs, "Deployment", "kubeflavor-controller").object["spec"]["template"]["spec"];
    assert_eq!(controller["serviceAccountName"], CONTROLLER_SA);
}

#[test]
fn the_join_token_api_pod_is_locked_down_and_mounts_its_certificate() {
    let docs = with_serve(2);
    let deployment = find(&docs, "Deployment", SERVE);
    let d = &deployment.object;
    assert_eq!(d["spec"]["replicas"], 2);
    let pod = &d["spec"]["template"]["spec"];
    let controller =
        &find(&docs, "Deployment", "kubeflavor-controller").object["spec"]["template"]["spec"];
    assert_eq!(pod["securityContext"], controller["securityContext"]);
    assert_eq!(
        pod["containers"][0]["securityContext"],
        controller["containers"][0]["securityContext"]
    );
    assert!(pod["priorityClassName"].is_null(), "not cluster-critical");
    let c = &pod["containers"][0];
    assert_eq!(c["image"], "example.com/kubeflavor:test");
    assert_eq!(
        strings(&c["args"]),
        [
            "serve",
            "--tls-cert-file=/etc/kubeflavor/tls/tls.crt",
            "--tls-key-file=/etc/kubeflavor/tls/tls.key",
            "--address=0.0.0.0:8443",
            "--http-address=0.0.0.0:8081",
            "--rate-per-minute=30",
            "--burst=10",
            // Nodes whose kubelet certificate the cluster CA issued may be observed.
            "--node-client-ca-file=/var/run/secrets/kubernetes.io/serviceaccount/ca.crt",
        ]
    );
    assert_eq!(c["env"][0]["name"], "POD_NAME");
    assert_eq!(
        c["env"][0]["valueFrom"]["fieldRef"]["fieldPath"],
        "metadata.name"
    );
    assert_eq!(
        c["ports"],
        serde_json::json!([
            {"name": "https", "containerPort": 8443, "protocol": "TCP"},
            {"name": "http", "containerPort": 8081, "protocol": "TCP"},
        ])
    );
    assert_eq!(c["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert_eq!(c["livenessProbe"]["httpGet"]["port"], "http");
    assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/readyz");
    assert_eq!(c["readinessProbe"]["httpGet"]["port"], "http");
    assert_eq!(
        c["resources"],
        serde_json::json!({"requests": {"cpu": "50m", "memory": "32Mi"}, "limits": {"memory": "128Mi"}})
    );
    // The TLS Secret, mounted read-only where the args read it.
    assert_eq!(
        pod["volumes"],
        serde_json::json!([{"name": "tls", "secret": {"secretName": TLS_SECRET}}])
    );
    assert_eq!(
        c["volumeMounts"],
        serde_json::json!([{"name": "tls", "mountPath": "/etc/kubeflavor/tls", "readOnly": true}])
    );
    let noted: Vec<&str> = deployment.notes.iter().map(|(p, _)| p.as_str()).collect();
    for path in [
        "spec.replicas",
        "spec.strategy",
        "spec.template.spec",
        "spec.template.spec.serviceAccountName",
        "spec.template.spec.automountServiceAccountToken",
        "spec.template.spec.securityContext",
        "spec.template.spec.affinity",
        "spec.template.spec.volumes",
        "spec.template.spec.containers.args",
        "spec.template.spec.containers.env",
        "spec.template.spec.containers.ports",
        "spec.template.spec.containers.livenessProbe",
        "spec.template.spec.containers.readinessProbe",
        "spec.template.spec.containers.resources",
        "spec.template.spec.containers.securityContext",
        "spec.template.spec.containers.volumeMounts",
    ] {
        assert!(noted.contains(&path), "no note on {path}");
    }
    let text = deployment.render().unwrap();
    assert!(text.contains("# No priorityClassName"), "{text}");
    assert!(text.contains("Estimates until measured"), "{text}");
    assert!(text.contains("cert-manager"), "{text}");
    assert!(text.contains("kubectl create secret tls"), "{text}");
    let pdb = find(&docs, "PodDisruptionBudget", SERVE);
    assert_eq!(pdb.object["spec"]["selector"], d["spec"]["selector"]);
    assert_eq!(pdb.object["spec"]["maxUnavailable"], 1);
    // The controller's selector does not take the API's pods, nor the other way round.
    let controller_pdb = find(&docs, "PodDisruptionBudget", "kubeflavor-controller");
    assert_ne!(
        controller_pdb.object["spec"]["selector"],
        pdb.object["spec"]["selector"]
    );
}

#[test]
fn the_join_token_api_service_maps_443_to_https() {
    let docs = with_serve(2);
    let service = find(&docs, "Service", SERVE);
    assert_eq!(service.api_version(), "v1");
    let spec = &service.object["spec"];
    assert_eq!(spec["type"], "ClusterIP");
    assert!(spec["clusterIP"].is_null(), "the API server assigns it");
    assert_eq!(
        spec["ports"],
        serde_json::json!([{"name": "https", "port": 443, "protocol": "TCP", "targetPort": "https"}])
    );
    let deployment = find(&docs, "Deployment", SERVE);
    assert_eq!(
        spec["selector"],
        deployment.object["spec"]["template"]["metadata"]["labels"]
    );
    let (ar, namespaced) = resource_of(service).unwrap();
    assert_eq!((ar.plural.as_str(), namespaced), ("services", true));
    assert!(
        service
            .render()
            .unwrap()
            .contains("https://kubeflavor-serve.kubeflavor.svc/")
    );
}

#[test]
fn the_serve_set_renders_reads_back_and_every_note_finds_its_field() {
    for replicas in [0, 2] {
        let docs = with_serve(replicas);
        let text = render_all(&docs).unwrap();
        let parsed: Vec<Value> = serde_saphyr::from_multiple(&text).unwrap();
        let parsed: Vec<Value> = parsed.into_iter().filter(|v| !v.is_null()).collect();
        assert_eq!(parsed.len(), docs.len());
        for (read, doc) in parsed.iter().zip(&docs) {
            assert_eq!(read, &doc.object, "{} {}", doc.kind(), doc.name());
        }
        for doc in &docs {
            for note in doc
                .rule_notes
                .iter()
                .chain(doc.notes.iter().map(|(_, n)| n))
            {
                let first_words: String = note
                    .split_whitespace()
                    .take(4)
                    .collect::<Vec<_>>()
                    .join(" ");
                assert!(text.contains(&format!("# {first_words}")), "{note:?}");
            }
        }
    }
}

/// RBAC lets the join-token API create any Secret in kube-system; the policy shipped with
/// it makes the API server refuse all but kubeflavor node tokens, for that identity alone,
/// on create and update, and it is applied before the grant it shapes.
#[test]
fn the_join_token_api_secrets_are_shaped_by_a_policy_on_its_identity() {
    let docs = with_serve(2);
    let policy = find(&docs, "ValidatingAdmissionPolicy", TOKEN_POLICY);
    assert_eq!(policy.api_version(), "admissionregistration.k8s.io/v1");
    let spec = &policy.object["spec"];
    assert_eq!(spec["failurePolicy"], "Fail");
    assert_eq!(
        spec["matchConstraints"],
        serde_json::json!({"resourceRules": [{
            "apiGroups": [""], "apiVersions": ["v1"],
            "operations": ["CREATE", "UPDATE"], "resources": ["secrets"],
        }]})
    );
    assert_eq!(
        spec["matchConditions"],
        serde_json::json!([{
            "name": "join-token-api",
            "expression": "request.userInfo.username == 'system:serviceaccount:kubeflavor:kubeflavor-serve'",
        }])
    );
    assert_eq!(
        serve_user("kubeflavor"),
        "system:serviceaccount:kubeflavor:kubeflavor-serve"
    );
    let rules = kubeflavor_core::admission::token_shape::rules(
        &kubeflavor_core::admission::token_shape::DEFAULT_CEILINGS,
    );
    let validations = spec["validations"].as_array().unwrap();
    assert_eq!(validations.len(), rules.len());
    for (v, r) in validations.iter().zip(&rules) {
        assert_eq!(v["expression"], r.expression.as_str());
        assert_eq!(v["message"], r.message.as_str());
        assert!(
            v["reason"].is_null(),
            "the API server's default: Invalid, 422"
        );
    }
    assert_eq!(
        spec["variables"].as_array().unwrap().len(),
        kubeflavor_core::admission::token_shape::variables().len()
    );
    let binding = find(&docs, "ValidatingAdmissionPolicyBinding", TOKEN_POLICY);
    assert_eq!(
        binding.object["spec"],
        serde_json::json!({"policyName": TOKEN_POLICY, "validationActions": ["Deny"]})
    );
    let at = |kind: &str, name: &str| {
        docs.iter()
            .position(|d| d.kind() == kind && d.name() == name)
            .unwrap()
    };
    assert!(
        at("ValidatingAdmissionPolicyBinding", TOKEN_POLICY)
            < at("RoleBinding", "kubeflavor:serve:tokens"),
        "the policy is in force before the grant it shapes"
    );
    for (doc, plural) in [
        (policy, "validatingadmissionpolicies"),
        (binding, "validatingadmissionpolicybindings"),
    ] {
        let (ar, namespaced) = resource_of(doc).unwrap();
        assert_eq!((ar.plural.as_str(), namespaced), (plural, false));
    }
    // Another namespace, another identity.
    let elsewhere = documents(
        "portal-tokens",
        "example.com/kubeflavor:test",
        2,
        Mode {
            serve: Some(ServePlan::default()),
            ..Mode::default_install()
        },
    );
    let policy = find(&elsewhere, "ValidatingAdmissionPolicy", TOKEN_POLICY);
    assert!(
        policy.object["spec"]["matchConditions"][0]["expression"]
            .as_str()
            .unwrap()
            .ends_with("'system:serviceaccount:portal-tokens:kubeflavor-serve'")
    );
    let text = render_all(&docs).unwrap();
    assert!(
        text.contains("# Deny: a failing rule refuses the request"),
        "{text}"
    );
    assert!(text.contains("can mint only kubeflavor tokens"), "{text}");
}

#[test]
fn serving_approval_comes_with_its_flag_and_signer_grant_only() {
    let signers = |docs: &[Document]| -> Vec<String> {
        rules(find(docs, "ClusterRole", "kubeflavor:controller"))
            .into_iter()
            .filter(|r| strings(&r["resources"]).contains(&"signers".into()))
            .flat_map(|r| strings(&r["resourceNames"]))
            .collect()
    };
    let args = |docs: &[Document]| {
        find(docs, "Deployment", "kubeflavor-controller").object["spec"]["template"]["spec"]
            ["containers"][0]["args"]
            .to_string()
    };
    let plain = docs();
    assert_eq!(signers(&plain), [KUBELET_CLIENT_SIGNER]);
    assert!(!args(&plain).contains("--approve-serving"));
    let mut flags = with_serve_flags(2, 60, 10);
    flags.serve = false;
    flags.sole_approver = true;
    let sole = Mode::of(&flags).expect("a mode");
    assert!(sole.approve_serving, "on by default with --sole-approver");
    let docs = documents("kubeflavor", "example.com/kubeflavor:test", 2, sole);
    assert_eq!(
        signers(&docs),
        [KUBELET_CLIENT_SIGNER, KUBELET_SERVING_SIGNER]
    );
    assert!(args(&docs).contains("--approve-serving"));
    flags.sole_approver = false;
    assert!(!Mode::of(&flags).expect("a mode").approve_serving);
    flags.approve_serving = true;
    assert!(Mode::of(&flags).expect("a mode").approve_serving);
}

/// Every install taints kubelet-created Nodes: the policy and its binding are in the set,
/// CREATE of Nodes by `system:nodes` only, with core's expressions, failing closed.
#[test]
fn every_install_taints_kubelet_created_nodes() {
    use kubeflavor_core::admission::unverified::{POLICY_NAME, json_patch, match_conditions};
    let docs = docs();
    let policy = find(&docs, "MutatingAdmissionPolicy", POLICY_NAME);
    assert_eq!(policy.api_version(), "admissionregistration.k8s.io/v1");
    let spec = &policy.object["spec"];
    assert_eq!(spec["failurePolicy"], "Fail");
    assert_eq!(
        spec["matchConstraints"]["resourceRules"],
        serde_json::json!([{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                            "resources": ["nodes"]}])
    );
    let conditions: Vec<&str> = spec["matchConditions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["expression"].as_str().unwrap())
        .collect();
    let expected: Vec<String> = match_conditions()
        .into_iter()
        .map(|c| c.expression)
        .collect();
    assert_eq!(conditions, expected);
    assert_eq!(spec["mutations"][0]["patchType"], "JSONPatch");
    assert_eq!(
        spec["mutations"][0]["jsonPatch"]["expression"],
        json_patch()
    );
    let binding = find(&docs, "MutatingAdmissionPolicyBinding", POLICY_NAME);
    assert_eq!(binding.object["spec"]["policyName"], POLICY_NAME);
    let text = find(&docs, "MutatingAdmissionPolicy", POLICY_NAME)
        .render()
        .unwrap();
    let above = comments_above(&text, "  failurePolicy: Fail");
    assert!(
        above.iter().any(|l| l.contains("Ignore would let")),
        "{above:?}"
    );
}

/// Plain `install` says which Kubernetes serves the policy and what is lost without it.
#[test]
fn printed_install_names_the_version_the_policy_needs() {
    let mut args = with_serve_flags(2, 60, 20);
    args.serve = false;
    let mut out = Vec::new();
    print(&args, &mut out).unwrap();
    let text = String::from_utf8(out).unwrap();
    let head: String = text
        .lines()
        .take_while(|l| l.starts_with('#'))
        .map(|l| l.trim_start_matches('#').trim())
        .collect::<Vec<_>>()
        .join(" ");
    assert!(head.contains("need Kubernetes v1.36 or later"), "{head}");
    assert!(head.contains("registerWithTaints"), "{head}");
}

#[test]
fn apply_leaves_the_policy_out_and_says_what_is_lost_where_the_api_is_not_served() {
    let mut kept = docs();
    let before = kept.len();
    let mut out = Vec::new();
    leave_out_unverified_policy(&mut kept, &mut out).unwrap();
    let text = String::from_utf8(out).unwrap();
    assert_eq!(kept.len(), before - 2, "the policy and its binding");
    assert!(
        kept.iter()
            .all(|d| !d.kind().starts_with("MutatingAdmissionPolicy"))
    );
    assert!(text.starts_with("warning: "), "{text}");
    for says in [
        "does not serve MutatingAdmissionPolicy admissionregistration.k8s.io/v1",
        "kubeflavor.io/unverified:NoSchedule",
        "were not applied",
    ] {
        assert!(text.contains(says), "{says}: {text}");
    }
    assert!(
        text.contains(&unverified_policy::without_policy()),
        "what is lost: {text}"
    );
}

/// `install --monitoring`'s objects, printed as `kubectl apply` reads them.
fn monitoring_docs() -> (Vec<Document>, Vec<Value>) {
    let docs = documents(
        "kubeflavor",
        "example.com/kubeflavor:test",
        2,
        Mode {
            monitoring: true,
            serve: Some(ServePlan::default()),
            ..Mode::default_install()
        },
    );
    let text = render_all(&docs).unwrap();
    let parsed: Vec<Value> = serde_saphyr::from_multiple(&text).unwrap();
    let parsed = parsed.into_iter().filter(|v| !v.is_null()).collect();
    (docs, parsed)
}

#[test]
fn monitoring_prints_the_repository_files_byte_for_byte() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../monitoring");
    let rules_file = std::fs::read_to_string(root.join("kubeflavor-rules.yaml")).unwrap();
    let dashboard_file = std::fs::read_to_string(root.join("kubeflavor-dashboard.json")).unwrap();
    assert_eq!(monitoring::RULES, rules_file);
    assert_eq!(monitoring::DASHBOARD, dashboard_file);

    let (docs, parsed) = monitoring_docs();
    let text = render_all(&docs).unwrap();
    let indented: String = rules_file
        .lines()
        .map(|l| {
            if l.is_empty() {
                "\n".to_string()
            } else {
                format!("  {l}\n")
            }
        })
        .collect();
    assert!(
        text.contains("kind: PrometheusRule\n") && text.contains(&format!("spec:\n{indented}")),
        "the PrometheusRule's spec is not the rules file as it is:\n{text}"
    );
    let of = |kind: &str| {
        parsed
            .iter()
            .find(|v| v["kind"] == kind)
            .unwrap_or_else(|| panic!("no {kind} printed"))
    };
    let rules: Value = serde_saphyr::from_str(&rules_file).unwrap();
    assert_eq!(of("PrometheusRule")["spec"], rules);
    // The dashboard's ConfigMap, not the revocation list (every install ships that one).
    let dashboard = parsed
        .iter()
        .find(|v| v["kind"] == "ConfigMap" && v["metadata"]["name"] != "kubeflavor-revoked-nodes")
        .expect("no dashboard ConfigMap printed");
    assert_eq!(
        dashboard["data"][monitoring::DASHBOARD_KEY].as_str(),
        Some(dashboard_file.as_str()),
        "the ConfigMap does not hold the dashboard file byte for byte"
    );
    assert_eq!(dashboard["metadata"]["labels"]["grafana_dashboard"], "1");
    survives_yaml(&parsed, &docs);
}

#[test]
fn the_pod_monitor_scrapes_the_http_port_of_the_controller_and_the_join_token_api() {
    let (docs, _) = monitoring_docs();
    let monitor = find(&docs, "PodMonitor", "kubeflavor");
    let spec = &monitor.object["spec"];
    assert_eq!(spec["podMetricsEndpoints"][0]["port"], "http");
    assert_eq!(spec["podMetricsEndpoints"][0]["path"], "/metrics");
    for deployment in ["kubeflavor-controller", SERVE] {
        let pod = &find(&docs, "Deployment", deployment).object["spec"]["template"];
        let labels = &pod["metadata"]["labels"];
        assert_eq!(
            labels["app.kubernetes.io/name"],
            spec["selector"]["matchLabels"]["app.kubernetes.io/name"]
        );
        let component = labels["app.kubernetes.io/component"].as_str().unwrap();
        assert!(
            strings(&spec["selector"]["matchExpressions"][0]["values"])
                .contains(&component.to_string()),
            "{deployment}'s pods are not selected"
        );
        let ports = pod["spec"]["containers"][0]["ports"].as_array().unwrap();
        assert!(
            ports.iter().any(|p| p["name"] == "http"),
            "{deployment} has no port named http"
        );
    }
    for doc in &docs {
        resource_of(doc).unwrap();
    }
}

#[test]
fn without_monitoring_nothing_of_the_prometheus_operator_is_printed() {
    let text = render_all(&docs()).unwrap();
    assert!(!text.contains("monitoring.coreos.com"));
    assert!(!text.contains("grafana_dashboard"));
}

/// P7, durable: every install mode ships the revocation list (empty), the policy that reads
/// it as its parameter, and the binding that enforces it; without any of them a revoked
/// node keeps what Node and RBAC allow whenever the webhook cannot answer.
#[test]
fn every_mode_ships_the_revocation_list_and_its_policy() {
    use kubeflavor_core::node::revocation_list::{NAME, NAMESPACE, POLICY_NAME};
    let mut every = all_modes();
    every.push(with_serve(2));
    for docs in every {
        let list = find(&docs, "ConfigMap", NAME);
        assert_eq!(list.namespace(), Some(NAMESPACE));
        assert!(
            list.object.get("data").is_none(),
            "installed empty: {:?}",
            list.object
        );
        let policy = &find(&docs, "ValidatingAdmissionPolicy", POLICY_NAME).object["spec"];
        assert_eq!(policy["failurePolicy"], "Fail");
        assert_eq!(policy["paramKind"]["kind"], "ConfigMap");
        assert_eq!(policy["paramKind"]["apiVersion"], "v1");
        assert_eq!(
            strings(&policy["matchConstraints"]["resourceRules"][0]["resources"]),
            ["*/*"]
        );
        assert_eq!(
            strings(&policy["matchConstraints"]["resourceRules"][0]["operations"]),
            ["CREATE", "UPDATE", "DELETE"]
        );
        let validations = policy["validations"].as_array().unwrap();
        assert_eq!(
            validations.len(),
            kubeflavor_core::node::revocation_list::rules().len()
        );
        let binding = &find(&docs, "ValidatingAdmissionPolicyBinding", POLICY_NAME).object["spec"];
        assert_eq!(binding["policyName"], POLICY_NAME);
        assert_eq!(binding["paramRef"]["name"], NAME);
        assert_eq!(binding["paramRef"]["namespace"], NAMESPACE);
        assert_eq!(binding["paramRef"]["parameterNotFoundAction"], "Allow");
        assert_eq!(strings(&binding["validationActions"]), ["Deny"]);
        // The list and the policy come before the controller's Deployment.
        let at = |kind: &str, name: &str| {
            docs.iter()
                .position(|d| d.kind() == kind && d.name() == name)
                .unwrap()
        };
        assert!(
            at("ValidatingAdmissionPolicyBinding", POLICY_NAME)
                < at("Deployment", "kubeflavor-controller")
        );
    }
}

/// The controller may read and update the revocation list only (resourceNames), and list,
/// watch and delete pods (to keep them off revoked nodes); it may not create or delete
/// ConfigMaps.
#[test]
fn the_controller_may_update_the_revocation_list_and_delete_pods() {
    let docs = docs();
    let tokens = find(&docs, "Role", "kubeflavor:controller:tokens");
    let cm_rules: Vec<Value> = rules(tokens)
        .into_iter()
        .filter(|r| strings(&r["resources"]) == ["configmaps"])
        .collect();
    assert_eq!(cm_rules.len(), 1, "{cm_rules:?}");
    assert_eq!(
        strings(&cm_rules[0]["resourceNames"]),
        ["kubeflavor-revoked-nodes"]
    );
    assert_eq!(
        strings(&cm_rules[0]["verbs"]),
        ["get", "list", "watch", "update"]
    );
    let cluster = find(&docs, "ClusterRole", "kubeflavor:controller");
    let pods: Vec<Value> = rules(cluster)
        .into_iter()
        .filter(|r| strings(&r["resources"]) == ["pods"])
        .collect();
    assert_eq!(pods.len(), 1);
    assert_eq!(strings(&pods[0]["verbs"]), ["list", "watch", "delete"]);
}
