//! Entry points for fuzzing and its regression replay, compiled only with the `fuzzing`
//! feature (the fuzz crate's, and this crate's tests'): not for users of the core.
//!
//! One function per place where bytes from outside enter kubeflavor. The fuzz targets under
//! `fuzz/` and the replay test (`mod replay` below) call these same functions, so a crash
//! found by a fuzzer is replayed by `cargo test` exactly as it was found.
//!
//! Each function takes arbitrary bytes and must never panic, whatever they are: results are
//! computed and dropped. A few cheap round trips are asserted (what the core writes, it must
//! read back as the same value); such an assertion failing is a bug the fuzzer found.
//!
//! Inputs that need more than one value (a kubeconfig and its signature, a Secret's data,
//! labels and annotations) come as the JSON the API server sends, so real responses are
//! seeds as they are.

use std::collections::BTreeMap;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use jiff::Timestamp;
use serde::Deserialize;

use crate::approval;
use crate::approval::client::{CsrFacts, PolicyOptions, TokenInstance, TokenLookup};
use crate::crypto::certkey::CertificateKey;
use crate::crypto::copycerts::{self, Provenance};
use crate::crypto::pin::CaPin;
use crate::csr;
use crate::csr::client::KUBELET_CLIENT_SIGNER;
use crate::flavor::{FlavorName, FlavorRules, FlavorSpec, TaintSpec, TokenLimitsSpec};
use crate::join::discovery::{self, CaVerification, KUBECONFIG_KEY};
use crate::join::jws;
use crate::join::kubeconfig::{ClusterInfo, Kubeconfig};
use crate::mint;
use crate::token::meta::{Custody, FlavorTokenMeta};
use crate::token::record::{TokenRecord, authenticate_token_secret};
use crate::token::secret::{
    BOOTSTRAPPERS_GROUP, NODE_GROUP, SecretView, TOKEN_SECRET_NAMESPACE, TOKEN_SECRET_TYPE,
    TokenSecretData,
};
use crate::token::{BootstrapToken, TokenId, TokenSecret};

/// The token id every fixed token of the harnesses uses (the seeds' cluster-info is signed
/// with [`FUZZ_TOKEN_ID`].[`FUZZ_TOKEN_SECRET`]).
pub const FUZZ_TOKEN_ID: &str = "abcdef";
/// The token secret of the harnesses' fixed token.
pub const FUZZ_TOKEN_SECRET: &str = "0123456789abcdef";
/// The certificate key the kubeadm-certs harness seals and opens with (hex): the key of the
/// core's committed copy-certs test vectors, so the kubeadm-written Secret among them is a
/// seed that opens.
pub const FUZZ_CERTIFICATE_KEY: &str =
    "b5892aa0a44834736d563e73abbba14dc0da1e5b281a2023aa8487f4159a15f0";
/// The fixed "now" of the harnesses (expirations, certificate validity).
pub const FUZZ_NOW: &str = "2026-12-01T00:00:00Z";

fn now() -> Timestamp {
    FUZZ_NOW.parse().unwrap_or(Timestamp::UNIX_EPOCH)
}

fn text(data: &[u8]) -> String {
    String::from_utf8_lossy(data).into_owned()
}

fn kubelet_usages() -> Vec<String> {
    [
        csr::client::USAGE_DIGITAL_SIGNATURE,
        csr::client::USAGE_KEY_ENCIPHERMENT,
        csr::client::USAGE_CLIENT_AUTH,
    ]
    .map(str::to_owned)
    .to_vec()
}

/// A CSR's `spec.request`, as the controller reads it: first as the PEM the API server
/// stores, then the same bytes as the DER inside a `CERTIFICATE REQUEST` block. Each goes
/// through the kubelet-client validator, the routing read of the node name, and the policy's
/// decision for a kubeflavor token's CSR; then, aimed at the serving signer, through the
/// kubelet-serving validator and the serving policy for a bound node.
pub fn csr(data: &[u8]) {
    csr_request(data);
    let wrapped = crate::crypto::pem::encode(csr::client::CSR_PEM_LABEL, data);
    csr_request(wrapped.as_bytes());
}

/// One request through the validator and the routing read, then the validator's verdict
/// through the policy as the CSR of the fixed kubeflavor token.
fn csr_request(request: &[u8]) {
    let parsed =
        csr::client::validate_kubelet_client_csr(KUBELET_CLIENT_SIGNER, request, &kubelet_usages());
    if let Ok(ok) = &parsed {
        let _ = ok.public_key_sha256_hex();
    }
    let _ = csr::client::requested_node_name(request);
    let _ = parsed
        .as_ref()
        .map_err(|e| (e.is_malformed(), e.to_string()));
    let Ok(id) = FUZZ_TOKEN_ID.parse::<TokenId>() else {
        return;
    };
    let decision = approval::client::decide(&kubeflavor_token_csr(&id, parsed));
    let _ = decision.condition();
    let _ = serving_request(request);
}

/// The same request as a kubelet serving CSR of `system:node:fuzz-node`, whose binding and
/// Flavor (10.0.0.0/8) let a well-formed request through: an approval must be for the
/// requester, with its name and allowed addresses only.
fn serving_request(request: &[u8]) -> crate::approval::serving::ServingDecision {
    use crate::approval::serving::{
        ServingBinding, ServingDecision, ServingFacts, ServingOptions, address_allowed,
        decide_serving,
    };
    use crate::csr::serving::{
        KUBELET_SERVING_SIGNER, USAGE_SERVER_AUTH, validate_kubelet_serving_csr,
    };
    // The usages every key type may ask for, so the key and the names are what decide.
    let usages = [csr::client::USAGE_DIGITAL_SIGNATURE, USAGE_SERVER_AUTH].map(str::to_owned);
    let parsed = validate_kubelet_serving_csr(KUBELET_SERVING_SIGNER, request, &usages);
    let _ = parsed
        .as_ref()
        .map_err(|e| (e.is_malformed(), e.is_key(), e.to_string()));
    let Ok(allowed) = "10.0.0.0/8".parse::<crate::flavor::cidr::Cidr>() else {
        unreachable!("a valid CIDR");
    };
    let facts = ServingFacts {
        signer_name: KUBELET_SERVING_SIGNER.into(),
        requester_username: "system:node:fuzz-node".into(),
        already_decided: false,
        csr: parsed,
        binding: Some(ServingBinding {
            node: "fuzz-node".into(),
            revoked: false,
        }),
        node_marked_revoked: false,
        flavor_addresses: Some(vec![allowed]),
        options: ServingOptions::default(),
    };
    let decision = decide_serving(&facts);
    let _ = decision.condition();
    if let (ServingDecision::Approve { node }, Ok(csr)) = (&decision, &facts.csr) {
        assert_eq!(node.as_str(), "fuzz-node");
        assert!(csr.dns_names.iter().all(|d| d == "fuzz-node"));
        assert!(
            csr.ip_addresses
                .iter()
                .all(|ip| address_allowed(*ip, &[allowed]))
        );
    }
    decision
}

/// What the controller knows of a CSR filed with the fixed kubeflavor token `id` (a fresh
/// node token of flavor `sweet`, for a node with neither binding nor Node yet), whose
/// request the validator read as `csr`.
fn kubeflavor_token_csr(
    id: &TokenId,
    csr: Result<csr::client::KubeletClientCsr, csr::client::CsrError>,
) -> CsrFacts {
    CsrFacts {
        csr_name: "csr-fuzz".into(),
        signer_name: KUBELET_CLIENT_SIGNER.into(),
        requester_username: id.bootstrap_username(),
        requester_groups: vec![
            NODE_GROUP.into(),
            BOOTSTRAPPERS_GROUP.into(),
            "system:authenticated".into(),
        ],
        csr,
        already_decided: false,
        token: kubeflavor_token(id),
        token_instance: Some(TokenInstance {
            uid: "uid-fuzz".into(),
            created: Some(Timestamp::UNIX_EPOCH),
        }),
        flavor_exists: true,
        flavor_input_labels: crate::flavor::input_labels::InputLabelRules::default(),
        // Limits the fixed token keeps (it never expires): the targets fuzz the request.
        flavor_token_limits: crate::flavor::token_limits::EffectiveLimits {
            max_ttl_secs: u64::MAX,
            max_nodes: std::num::NonZeroU32::MAX,
            allow_never_expiring: true,
            max_ttl_stated: true,
            max_nodes_stated: true,
        },
        binding: None,
        node_exists: false,
        options: PolicyOptions::default(),
        now: now(),
    }
}

/// The fixed token `id` as its Secret reads: a node token of flavor `sweet`.
fn kubeflavor_token(id: &TokenId) -> TokenLookup {
    let labels = BTreeMap::from([(
        crate::token::meta::FLAVOR_TOKEN_LABEL.to_owned(),
        "sweet".to_owned(),
    )]);
    let empty = BTreeMap::new();
    let data = BTreeMap::from([
        ("token-id".to_owned(), FUZZ_TOKEN_ID.to_owned()),
        ("token-secret".to_owned(), FUZZ_TOKEN_SECRET.to_owned()),
        (
            "usage-bootstrap-authentication".to_owned(),
            "true".to_owned(),
        ),
        ("auth-extra-groups".to_owned(), NODE_GROUP.to_owned()),
    ]);
    let name = crate::token::secret::secret_name(id);
    let view = SecretView {
        namespace: TOKEN_SECRET_NAMESPACE,
        name: &name,
        type_: TOKEN_SECRET_TYPE,
        being_deleted: false,
        data: &data,
        labels: &labels,
        annotations: &empty,
    };
    match TokenRecord::from_secret(&view) {
        Ok(r) => TokenLookup::Found(r),
        Err(e) => TokenLookup::Unreadable(e),
    }
}

/// `kube-public/cluster-info` as a joining node reads it: the input is the ConfigMap's
/// `kubeconfig` value, optionally followed by a NUL byte and the `jws-kubeconfig-<id>`
/// value. It is verified with the fixed token [`FUZZ_TOKEN_ID`].[`FUZZ_TOKEN_SECRET`], with
/// the signature given (or none), and again correctly signed so the parsing behind the
/// signature check is reached; once without pins and once with a pin.
pub fn cluster_info(data: &[u8]) {
    let (kubeconfig, signature) = match data.iter().position(|&b| b == 0) {
        Some(at) => (text(&data[..at]), Some(text(&data[at + 1..]))),
        None => (text(data), None),
    };
    let key = jws::configmap_key(FUZZ_TOKEN_ID);
    let pin = CaPin::from_spki_der(b"fuzz");
    let verify = |map: &BTreeMap<String, String>| {
        for ca in [CaVerification::UnsafeSkip, CaVerification::Pins(&[pin])] {
            let _ = discovery::verify_cluster_info(map, FUZZ_TOKEN_ID, FUZZ_TOKEN_SECRET, ca)
                .map(|info| info.ca_pem.len());
        }
    };
    let mut map = BTreeMap::from([(KUBECONFIG_KEY.to_owned(), kubeconfig.clone())]);
    if let Some(signature) = signature {
        map.insert(key.clone(), signature);
        verify(&map);
    }
    let signed = jws::sign(FUZZ_TOKEN_ID, FUZZ_TOKEN_SECRET, kubeconfig.as_bytes());
    map.insert(key, signed);
    verify(&map);
}

/// Just the parts of a Secret object the token and certificate rules read, in the API
/// server's JSON (`data` values base64, `stringData` plain).
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct SecretJson {
    #[serde(default)]
    metadata: MetadataJson,
    #[serde(default, rename = "type")]
    type_: String,
    #[serde(default)]
    data: BTreeMap<String, String>,
    #[serde(default)]
    string_data: BTreeMap<String, String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct MetadataJson {
    #[serde(default)]
    name: String,
    #[serde(default)]
    namespace: String,
    #[serde(default)]
    deletion_timestamp: Option<String>,
    #[serde(default)]
    labels: BTreeMap<String, String>,
    #[serde(default)]
    annotations: BTreeMap<String, String>,
}

/// A `data` value: base64 as the API server sends it, or the bytes as they are when they
/// are not base64 (so a mutated value still reaches the rules).
fn data_value(value: &str) -> Vec<u8> {
    STANDARD
        .decode(value)
        .unwrap_or_else(|_| value.as_bytes().to_vec())
}

/// A bootstrap token string, and a bootstrap token Secret: the whole input is parsed as a
/// token (`<id>.<secret>`, as typed by a user or read from a token file), and as a Secret
/// object in the API server's JSON, whose data, labels and annotations go through the token
/// record, the authenticator's rules, the token data and kubeflavor's metadata.
pub fn token(data: &[u8]) {
    let s = text(data);
    let _ = s.trim().parse::<BootstrapToken>().map(|t| t.expose());
    let _ = s.trim().parse::<TokenId>();
    let _ = s.trim().parse::<TokenSecret>();
    let Ok(secret) = serde_json::from_slice::<SecretJson>(data) else {
        return;
    };
    let mut values: BTreeMap<String, String> = secret
        .data
        .iter()
        .map(|(k, v)| (k.clone(), text(&data_value(v))))
        .collect();
    values.extend(secret.string_data.clone());
    let view = SecretView {
        namespace: &secret.metadata.namespace,
        name: &secret.metadata.name,
        type_: &secret.type_,
        being_deleted: secret.metadata.deletion_timestamp.is_some(),
        data: &values,
        labels: &secret.metadata.labels,
        annotations: &secret.metadata.annotations,
    };
    let now = now();
    let _ = authenticate_token_secret(&view, now);
    if let Ok(record) = TokenRecord::from_secret(&view) {
        let _ = record.authentication_at(now);
    }
    let _ = TokenSecretData::from_string_data(&values).map(|d| d.to_string_data());
    let _ = Custody::from_annotations(&secret.metadata.annotations);
    if let Ok(Some(meta)) =
        FlavorTokenMeta::from_metadata(&secret.metadata.labels, &secret.metadata.annotations)
    {
        let _ = meta.has_room();
        let denied = match "worker-fuzz".parse() {
            Ok(node) => meta.with_bound_node(&node).with_denial(),
            Err(_) => meta.with_denial(),
        };
        // What kubeflavor writes back, it reads back as the same metadata.
        let again = FlavorTokenMeta::from_metadata(&denied.labels(), &denied.annotations());
        assert_eq!(again, Ok(Some(denied)), "token metadata did not round-trip");
    }
}

/// The input of the kubeadm-certs harness: entries stored as they are (`data`, base64 as
/// the API server sends them) and entries given as plaintext (`plain`), sealed here under
/// [`FUZZ_CERTIFICATE_KEY`] so that the checks behind decryption are reached.
#[derive(Debug, Default, Deserialize)]
struct CertsJson {
    #[serde(default)]
    data: BTreeMap<String, String>,
    #[serde(default)]
    plain: BTreeMap<String, String>,
}

/// The kubeadm-certs Secret's entries opened with a certificate key: the key check, the
/// manifest, each entry's kind, key/certificate matching and usability. Opened with the
/// right key, under both provenances, and with a wrong key.
pub fn kubeadm_certs(data: &[u8]) {
    let Ok(key) = FUZZ_CERTIFICATE_KEY.parse::<CertificateKey>() else {
        return;
    };
    let Ok(input) = serde_json::from_slice::<CertsJson>(data) else {
        // A certificate key as typed on a command line.
        let _ = text(data).trim().parse::<CertificateKey>();
        return;
    };
    let mut secret: BTreeMap<String, Vec<u8>> = input
        .data
        .iter()
        .map(|(k, v)| (k.clone(), data_value(v)))
        .collect();
    for (i, (name, plain)) in input.plain.iter().enumerate() {
        let value = if plain.is_empty() {
            Vec::new()
        } else {
            let mut nonce = [0u8; copycerts::NONCE_LEN];
            nonce[..8].copy_from_slice(&(i as u64).to_be_bytes());
            copycerts::seal_with_nonce(&key, plain.as_bytes(), nonce)
        };
        secret.insert(name.clone(), value);
    }
    for provenance in [Provenance::KubeflavorOnly, Provenance::KubeflavorOrKubeadm] {
        let _ = copycerts::open_for_use(&key, &secret, provenance, now()).map(|o| o.files.len());
    }
    let wrong = CertificateKey::from_bytes([0x55; crate::crypto::certkey::CERTIFICATE_KEY_LEN]);
    let _ = copycerts::open_all(&wrong, &secret).map_err(|e| e.to_string());
}

/// A kubeconfig file (`--kubeconfig`, `KUBECONFIG`, a downloaded admin.conf): parsed, read
/// as cluster-info, and written back, which must read back as the same kubeconfig.
pub fn kubeconfig(data: &[u8]) {
    let s = text(data);
    let _ = ClusterInfo::from_kubeconfig(&s);
    let Ok(config) = Kubeconfig::parse(&s) else {
        return;
    };
    if let Ok(yaml) = config.to_yaml() {
        let again = Kubeconfig::parse(&yaml);
        assert!(
            again.as_ref() == Ok(&config),
            "a kubeconfig written as YAML did not read back the same: {again:?}"
        );
    }
}

/// The join-token API's request body (`POST /v1/flavors/<flavor>/jointokens`), and a
/// valid one against the limits of a flavor that states none: whatever passes is within
/// them.
pub fn mint_request(data: &[u8]) {
    let Ok(request) = mint::request::parse(data).map_err(|e| e.to_string()) else {
        return;
    };
    let rules = FlavorRules::from_spec(&FlavorSpec::default()).expect("the empty flavor is valid");
    if let Ok(grant) = mint::request::within_limits(&request, &rules) {
        assert!(
            grant.ttl != crate::flavor::ttl::TokenTtl::Never && grant.max_nodes.get() == 1,
            "a flavor without limits let {:?} and {} through",
            grant.ttl,
            grant.max_nodes
        );
        assert!(
            grant.input_labels.is_empty(),
            "a flavor without input-label rules let {} through",
            grant.input_labels.summary()
        );
    }
}

/// A Flavor object's `spec` in the CRD's JSON (`trustLevel`, `tokenDefaults.ttl` and
/// `.maxNodes`, taints with an optional empty `value`). Mirrors what the controller's
/// conversion does with a stored Flavor: an empty taint value is none.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct FlavorObjectSpec {
    #[serde(default)]
    labels: BTreeMap<String, String>,
    #[serde(default)]
    taints: Vec<FlavorObjectTaint>,
    #[serde(default)]
    trust_level: Option<i64>,
    #[serde(default)]
    token_defaults: Option<FlavorObjectTokenDefaults>,
    #[serde(default)]
    token_limits: Option<TokenLimitsSpec>,
    #[serde(default)]
    serving_addresses: Vec<String>,
    #[serde(default)]
    input_labels: Option<crate::flavor::input_labels::InputLabelsSpec>,
    #[serde(default)]
    allowed_sites: Vec<String>,
}

#[derive(Debug, Default, Deserialize)]
struct FlavorObjectTaint {
    #[serde(default)]
    key: String,
    #[serde(default)]
    value: String,
    #[serde(default)]
    effect: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct FlavorObjectTokenDefaults {
    #[serde(default)]
    ttl: Option<String>,
    #[serde(default)]
    max_nodes: Option<i64>,
}

#[derive(Debug, Default, Deserialize)]
struct FlavorObject {
    #[serde(default)]
    metadata: MetadataJson,
    spec: FlavorObjectSpec,
}

/// A Flavor object (or its bare `spec`) in the API server's JSON, through the validation
/// every read of a stored Flavor goes through ([`FlavorRules::from_spec`]) and the name
/// check. Accepted rules written back as a spec must be accepted again as the same rules.
pub fn flavor(data: &[u8]) {
    let spec = match serde_json::from_slice::<FlavorObject>(data) {
        Ok(object) => {
            let _ = object.metadata.name.parse::<FlavorName>();
            object.spec
        }
        Err(_) => match serde_json::from_slice::<FlavorObjectSpec>(data) {
            Ok(spec) => spec,
            Err(_) => {
                let _ = text(data).parse::<FlavorName>();
                return;
            }
        },
    };
    let (token_ttl, max_nodes) = spec
        .token_defaults
        .map(|d| (d.ttl, d.max_nodes))
        .unwrap_or_default();
    let core = FlavorSpec {
        labels: spec.labels,
        taints: spec
            .taints
            .into_iter()
            .map(|t| TaintSpec {
                key: t.key,
                value: (!t.value.is_empty()).then_some(t.value),
                effect: t.effect,
            })
            .collect(),
        trust_level: spec.trust_level,
        token_ttl,
        max_nodes,
        token_limits: spec.token_limits,
        serving_addresses: spec.serving_addresses,
        input_labels: spec.input_labels,
        allowed_sites: spec.allowed_sites,
    };
    if let Ok(rules) = FlavorRules::from_spec(&core) {
        let _ = rules
            .check_defaults_within_limits()
            .map_err(|e| e.to_string());
        let again = FlavorRules::from_spec(&rules.to_spec());
        assert!(
            again.as_ref() == Ok(&rules),
            "flavor rules written as a spec did not read back the same: {again:?}"
        );
    }
}

/// A fuzz target's entry point.
pub type Entry = fn(&[u8]);

/// Every fuzz target by name, as `fuzz/corpus/<name>/` and `fuzz/regressions/<name>/` name
/// them.
pub const TARGETS: [(&str, Entry); 7] = [
    ("csr", csr),
    ("cluster_info", cluster_info),
    ("token", token),
    ("kubeadm_certs", kubeadm_certs),
    ("kubeconfig", kubeconfig),
    ("mint_request", mint_request),
    ("flavor", flavor),
];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crypto::der::{TAG_SEQUENCE, write_tlv};

    /// `depth` SEQUENCEs around `inner`, with definite (DER) lengths.
    fn nested_der(depth: usize, inner: &[u8]) -> Vec<u8> {
        let mut value = inner.to_vec();
        for _ in 0..depth {
            let mut outer = Vec::with_capacity(value.len() + 6);
            write_tlv(&mut outer, TAG_SEQUENCE, &value);
            value = outer;
        }
        value
    }

    /// `depth` SEQUENCEs with indefinite (BER) lengths: the form a recursive reader descends.
    fn nested_ber(depth: usize) -> Vec<u8> {
        let mut value = [TAG_SEQUENCE, 0x80].repeat(depth);
        value.extend([0, 0].repeat(depth));
        value
    }

    #[test]
    fn the_serving_path_reaches_an_approval_and_its_denials() {
        use crate::approval::serving::{ServingDecision, ServingDenyCause};
        use crate::csr::serving::tests::{ServingShape, make_serving_csr};
        let good = make_serving_csr("fuzz-node", ServingShape::kubelet("fuzz-node", "10.1.2.3"));
        assert!(matches!(
            serving_request(good.as_bytes()),
            ServingDecision::Approve { .. }
        ));
        let outside = make_serving_csr(
            "fuzz-node",
            ServingShape::kubelet("fuzz-node", "192.168.1.1"),
        );
        assert_eq!(
            serving_request(outside.as_bytes()),
            ServingDecision::Deny(ServingDenyCause::AddressNotAllowed)
        );
        assert_eq!(
            serving_request(b"not a CSR"),
            ServingDecision::Deny(ServingDenyCause::MalformedCsr)
        );
    }

    #[test]
    fn deep_asn1_nesting_is_an_error_not_a_stack_overflow() {
        // Nested at the top, and inside a subject attribute value (read as ANY).
        let cn = [0x06, 0x03, 0x55, 0x04, 0x03];
        let deep = nested_der(8_000, &[]);
        let mut atv = cn.to_vec();
        atv.extend(&deep);
        let mut subject = Vec::new();
        write_tlv(&mut subject, TAG_SEQUENCE, &atv);
        let mut set = Vec::new();
        write_tlv(&mut set, 0x31, &subject);
        let mut rdns = Vec::new();
        write_tlv(&mut rdns, TAG_SEQUENCE, &set);
        let mut info_body = vec![0x02, 0x01, 0x00];
        info_body.extend(&rdns);
        let mut info = Vec::new();
        write_tlv(&mut info, TAG_SEQUENCE, &info_body);
        let mut request = Vec::new();
        write_tlv(&mut request, TAG_SEQUENCE, &info);
        for input in [deep.clone(), nested_ber(10_000), request] {
            assert!(input.len() * 4 / 3 < csr::client::MAX_CSR_REQUEST_BYTES);
            let pem = crate::crypto::pem::encode(csr::client::CSR_PEM_LABEL, &input);
            assert!(matches!(
                csr::client::validate_kubelet_client_csr(KUBELET_CLIENT_SIGNER, pem.as_bytes(), &kubelet_usages()),
                Err(e) if e.is_malformed()
            ));
            super::csr(&input);
        }
    }

    #[test]
    fn deep_yaml_and_json_nesting_is_an_error_not_a_stack_overflow() {
        let depth = 100_000;
        let yaml = format!("clusters: {}{}", "[".repeat(depth), "]".repeat(depth));
        let json = format!(
            "{{\"clusters\": {}{}}}",
            "[".repeat(depth),
            "]".repeat(depth)
        );
        for text in [&yaml, &json] {
            assert!(Kubeconfig::parse(text).is_err());
            kubeconfig(text.as_bytes());
            cluster_info(text.as_bytes());
        }
        let body = format!(
            "{{\"issuedTo\": {}{}}}",
            "[".repeat(depth),
            "]".repeat(depth)
        );
        assert!(mint::request::parse(body.as_bytes()).is_err());
        for run in [token, kubeadm_certs, flavor] {
            run(json.as_bytes());
        }
    }

    #[test]
    fn every_entry_takes_empty_and_garbage_input() {
        for (_, run) in TARGETS {
            run(b"");
            run(b"\0\xff\xfe{[-----BEGIN");
        }
    }
}

/// The fuzz corpora and the inputs that once crashed a fuzz target, replayed through the
/// same entry points the fuzz targets call. A panic in any of them fails this test. (A unit
/// test, so that `cargo test` needs no `fuzzing` feature: the core is built once, with the
/// same features, for every crate that uses it.)
#[cfg(test)]
mod replay {
    use std::path::{Path, PathBuf};
    use std::time::Instant;

    use super::TARGETS;
    /// `fuzz/` at the repository root.
    fn fuzz_dir() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz")
    }

    /// The files of `dir`, sorted; none when it does not exist.
    fn files(dir: &Path) -> Vec<PathBuf> {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return Vec::new();
        };
        let mut files: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.is_file())
            .collect();
        files.sort();
        files
    }

    #[test]
    fn fuzz_replay_every_corpus_and_regression_input() {
        let started = Instant::now();
        let mut replayed = 0;
        for (target, run) in TARGETS {
            let corpus = files(&fuzz_dir().join("corpus").join(target));
            assert!(
                !corpus.is_empty(),
                "fuzz/corpus/{target} has no seeds (regenerate them with fuzz/seed)"
            );
            let regressions = files(&fuzz_dir().join("regressions").join(target));
            for file in corpus.iter().chain(&regressions) {
                let data = std::fs::read(file).unwrap();
                eprintln!("replaying {target}: {}", file.display());
                run(&data);
                replayed += 1;
            }
        }
        // Every directory under corpus/ and regressions/ names a target.
        for kind in ["corpus", "regressions"] {
            for entry in std::fs::read_dir(fuzz_dir().join(kind)).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    let name = path.file_name().unwrap().to_string_lossy().into_owned();
                    assert!(
                        TARGETS.iter().any(|(t, _)| *t == name),
                        "fuzz/{kind}/{name} names no fuzz target"
                    );
                }
            }
        }
        eprintln!("replayed {replayed} inputs in {:?}", started.elapsed());
    }
}
