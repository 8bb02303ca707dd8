//! Reading cluster-info's kubeconfig and writing the kubeconfigs `kubeadm join` leaves behind.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use kubeflavor_core::crypto::pin::CaPin;
use kubeflavor_core::join::jws;
use kubeflavor_core::join::kubeconfig::{
    BOOTSTRAP_USER, CLUSTER_NAME, ClusterInfo, Kubeconfig, KubeconfigError,
};

use crate::fixtures::{CLUSTER_INFO, SERVER, ca_pem, cluster_info_kubeconfig as cluster_info};

#[test]
fn cluster_info_from_a_real_api_server_yields_server_and_ca() {
    let ca = ca_pem();
    let text = cluster_info(&ca);
    let info = ClusterInfo::from_kubeconfig(&text).unwrap();
    assert_eq!(info.server, SERVER);
    assert_eq!(info.ca_pem, ca);
    assert_eq!(info.ca_certs_der.len(), 1);
    // The pin printed on the control plane matches the CA discovered on the node.
    let pin = CaPin::from_cert_der(&info.ca_certs_der[0]).unwrap();
    assert!(pin.matches_any(&info.ca_certs_der));
    // And the bootstrapsigner's JWS is computed over these exact bytes.
    let signature = jws::sign("abcdef", "0123456789abcdef", text.as_bytes());
    assert!(jws::verify("abcdef", "0123456789abcdef", text.as_bytes(), &signature).is_ok());
}

#[test]
fn a_ca_bundle_gives_every_certificate() {
    let mut bundle = ca_pem();
    bundle.extend(ca_pem());
    let info = ClusterInfo::from_kubeconfig(&cluster_info(&bundle)).unwrap();
    assert_eq!(info.ca_certs_der.len(), 2);
}

#[test]
fn malformed_cluster_info_is_refused_with_the_reason() {
    let ca = ca_pem();
    let good = cluster_info(&ca);
    type Expect = fn(&KubeconfigError) -> bool;
    let cases: Vec<(String, Expect)> = vec![
        ("apiVersion: v1\nclusters: null\n".into(), |e| {
            matches!(e, KubeconfigError::ClusterCount(0))
        }),
        (
            good.replace(
                "clusters:\n",
                "clusters:\n- name: b\n  cluster:\n    server: https://x\n",
            ),
            |e| matches!(e, KubeconfigError::ClusterCount(2)),
        ),
        (good.replace("https://", "http://"), |e| {
            matches!(e, KubeconfigError::NotHttps(_))
        }),
        (good.replace(&format!("    server: {SERVER}\n"), ""), |e| {
            matches!(e, KubeconfigError::NoServer)
        }),
        (
            CLUSTER_INFO.replace("    certificate-authority-data: CA_DATA\n", ""),
            |e| matches!(e, KubeconfigError::NoCertificateAuthority),
        ),
        (CLUSTER_INFO.replace("CA_DATA", "abc$def"), |e| {
            matches!(e, KubeconfigError::CertificateAuthorityBase64)
        }),
        (
            CLUSTER_INFO.replace("CA_DATA", &STANDARD.encode("not pem")),
            |e| matches!(e, KubeconfigError::CertificateAuthorityPem(_)),
        ),
        ("clusters: [\n".into(), |e| {
            matches!(e, KubeconfigError::Syntax(_))
        }),
    ];
    for (text, expected) in cases {
        let err = ClusterInfo::from_kubeconfig(&text).unwrap_err();
        assert!(expected(&err), "{err:?} for\n{text}");
    }
}

#[test]
fn bootstrap_kubelet_conf_uses_kubeadm_names_and_round_trips() {
    let ca = ca_pem();
    let conf =
        Kubeconfig::bootstrap_kubelet("https://10.0.0.1:6443", &ca, "abcdef.0123456789abcdef");
    assert_eq!(conf.clusters[0].name, CLUSTER_NAME);
    assert_eq!(conf.users[0].name, BOOTSTRAP_USER);
    assert_eq!(conf.current_context, "tls-bootstrap-token-user@kubernetes");
    assert_eq!(conf.contexts[0].name, conf.current_context);
    let yaml = conf.to_yaml().unwrap();
    assert!(yaml.contains("token: abcdef.0123456789abcdef"), "{}", *yaml);
    assert!(yaml.contains("certificate-authority-data: "), "{}", *yaml);
    assert!(
        yaml.contains("current-context: tls-bootstrap-token-user@kubernetes"),
        "{}",
        *yaml
    );
    assert_eq!(Kubeconfig::parse(&yaml).unwrap(), conf);
}

#[test]
fn kubelet_conf_embeds_the_node_credentials() {
    let ca = ca_pem();
    let conf = Kubeconfig::kubelet(
        "https://10.0.0.1:6443",
        &ca,
        "worker-1",
        b"CERT PEM",
        b"KEY PEM",
    );
    assert_eq!(conf.users[0].name, "system:node:worker-1");
    assert_eq!(conf.current_context, "system:node:worker-1@kubernetes");
    let user = &conf.users[0].user;
    assert_eq!(
        user.client_certificate_data.as_deref(),
        Some(STANDARD.encode("CERT PEM").as_str())
    );
    assert_eq!(
        user.client_key_data.as_ref().unwrap().expose(),
        STANDARD.encode("KEY PEM")
    );
    let back = Kubeconfig::parse(&conf.to_yaml().unwrap()).unwrap();
    assert_eq!(back, conf);
}

#[test]
fn debug_never_shows_credentials() {
    let conf = Kubeconfig::bootstrap_kubelet("https://h:6443", b"ca", "abcdef.0123456789abcdef");
    let shown = format!("{conf:?}");
    assert!(!shown.contains("0123456789abcdef"), "{shown}");
    let conf = Kubeconfig::kubelet("https://h:6443", b"ca", "n", b"cert", b"super secret key");
    let shown = format!("{conf:?}");
    assert!(
        !shown.contains(&STANDARD.encode("super secret key")),
        "{shown}"
    );
}

#[test]
fn json_kubeconfigs_are_read_too() {
    let json = r#"{"apiVersion":"v1","kind":"Config","clusters":[{"name":"c","cluster":{"server":"https://h:6443","certificate-authority-data":"Q0E="}}],"contexts":[{"name":"x","context":{"cluster":"c","user":"u"}}],"current-context":"x","users":[{"name":"u","user":{"token":"t"}}]}"#;
    let conf = Kubeconfig::parse(json).unwrap();
    assert_eq!(conf.clusters[0].cluster.server, "https://h:6443");
    assert_eq!(conf.users[0].user.token.as_ref().unwrap().expose(), "t");
}

#[test]
fn syntax_errors_do_not_quote_credentials() {
    let text = "users:\n- name: u\n  user:\n    token: abcdef.0123456789abcdef\n  : [ unbalanced\n";
    let err = Kubeconfig::parse(text).unwrap_err();
    assert!(matches!(err, KubeconfigError::Syntax(_)));
    assert!(!err.to_string().contains("0123456789abcdef"), "{err}");

    // A credential in the wrong place shows up in serde's "invalid type" messages.
    for text in [
        "users: \"abcdef.0123456789abcdef\"\n",
        r#"{"users": "abcdef.0123456789abcdef"}"#,
    ] {
        let err = Kubeconfig::parse(text).unwrap_err();
        assert!(matches!(err, KubeconfigError::Syntax(_)));
        assert!(!err.to_string().contains("0123456789abcdef"), "{err}");
    }
}
