//! The serving-certificate policy: `decide_serving(&ServingFacts) -> ServingDecision`, for
//! `kubernetes.io/kubelet-serving` CSRs. Nothing in Kubernetes approves these
//! (kubernetes#73356); kube-controller-manager signs them once someone has.
//!
//! A serving certificate lets a machine answer as node X to the API server
//! (`kubectl logs/exec/port-forward`, metrics scrapes). What is trusted, and why:
//!
//! - the requester, `system:node:X` (`spec.username`), is filled in by the API server from
//!   the node's client certificate: it is the one fact the node cannot choose. The
//!   certificate may name X only (its common name and its one DNS name).
//! - X's FlavorBinding says kubeflavor judged X at the door; a revoked binding, or one that
//!   is not for X, gets nothing.
//! - the IP addresses come from the kubelet, which reports its own Node addresses, so they
//!   alone prove nothing: an address is approved only inside the ranges the Flavor's owner
//!   listed (`spec.servingAddresses`), which are the owner's word. No ranges: no IP address
//!   (the CSR is denied, not trimmed: a CSR is approved or denied whole).
//! - DNS names: the node name X and nothing else (a CSR may also name addresses only;
//!   Kubernetes requires one name or address at least). The kubelet asks for its
//!   hostname (and any DNS addresses a cloud provider reports); where the hostname is not
//!   the node name (`--hostname-override`, a cloud provider's names), the CSR is denied:
//!   kubeflavor knows nothing of those names, and the API server reaches kubelets by
//!   address, not by those names.
//!
//! P1 (hidden flavor) holds as for client CSRs: the condition written is one of the two
//! constants of [`crate::approval::client`], the cause goes to the admin trail only.

use std::fmt;
use std::net::IpAddr;

use crate::approval::client::{APPROVED_CONDITION, CsrCondition, DENIED_CONDITION};
use crate::csr::client::NODE_USER_PREFIX;
use crate::csr::serving::{KUBELET_SERVING_SIGNER, KubeletServingCsr, ServingCsrError};
use crate::flavor::cidr::Cidr;
use crate::names::NodeName;

/// Switches of the controller that change serving decisions.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ServingOptions {
    /// Deny serving CSRs of nodes kubeflavor never bound, instead of leaving them to other
    /// approvers.
    pub deny_unbound: bool,
}

/// The FlavorBinding named after the requesting node, as far as the serving policy cares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServingBinding {
    /// `spec.node` of the binding (the CRD requires it to equal the object's name; checked
    /// again here, since the binding's name is how it was found).
    pub node: String,
    pub revoked: bool,
}

/// Everything `decide_serving` looks at, gathered by the controller for one CSR.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServingFacts {
    pub signer_name: String,
    /// `spec.username`, filled in by the API server.
    pub requester_username: String,
    pub already_decided: bool,
    /// The request validated as a kubelet serving CSR.
    pub csr: Result<KubeletServingCsr, ServingCsrError>,
    /// The FlavorBinding named after the requester's node name, if any.
    pub binding: Option<ServingBinding>,
    /// The requester's Node carries `kubeflavor.io/revoked`: the revocation that stands
    /// once a revoked binding was deleted (P7), read where there is no binding.
    pub node_marked_revoked: bool,
    /// The `spec.servingAddresses` of the binding's Flavor; `None` when the Flavor is
    /// missing or unreadable.
    pub flavor_addresses: Option<Vec<Cidr>>,
    pub options: ServingOptions,
}

/// Why a serving CSR is denied. Admin trail only, never on the CSR (P1, hidden flavor).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ServingDenyCause {
    MalformedCsr,
    NotKubeletServingShape,
    KeyNotAllowed,
    NameMismatch,
    BindingForOtherName,
    BindingRevoked,
    FlavorMissing,
    DnsNameNotNodeName,
    AddressNotAllowed,
    NeverBound,
}

impl ServingDenyCause {
    /// Every cause, for metrics and exhaustive tests.
    pub const ALL: [ServingDenyCause; 10] = [
        ServingDenyCause::MalformedCsr,
        ServingDenyCause::NotKubeletServingShape,
        ServingDenyCause::KeyNotAllowed,
        ServingDenyCause::NameMismatch,
        ServingDenyCause::BindingForOtherName,
        ServingDenyCause::BindingRevoked,
        ServingDenyCause::FlavorMissing,
        ServingDenyCause::DnsNameNotNodeName,
        ServingDenyCause::AddressNotAllowed,
        ServingDenyCause::NeverBound,
    ];

    /// Metric label value.
    pub fn as_str(self) -> &'static str {
        match self {
            ServingDenyCause::MalformedCsr => "malformed_csr",
            ServingDenyCause::NotKubeletServingShape => "not_kubelet_serving_shape",
            ServingDenyCause::KeyNotAllowed => "key_not_allowed",
            ServingDenyCause::NameMismatch => "name_mismatch",
            ServingDenyCause::BindingForOtherName => "binding_for_other_name",
            ServingDenyCause::BindingRevoked => "binding_revoked",
            ServingDenyCause::FlavorMissing => "flavor_missing",
            ServingDenyCause::DnsNameNotNodeName => "dns_name_not_node_name",
            ServingDenyCause::AddressNotAllowed => "address_not_allowed",
            ServingDenyCause::NeverBound => "never_bound",
        }
    }

    /// A sentence for the admin trail (Event, log).
    pub fn description(self) -> &'static str {
        match self {
            ServingDenyCause::MalformedCsr => {
                "the CSR's request is not a readable, correctly signed PKCS#10 PEM block"
            }
            ServingDenyCause::NotKubeletServingShape => {
                "the CSR is not a kubelet serving CSR (organization, common name, SAN types, extensions or usages are wrong)"
            }
            ServingDenyCause::KeyNotAllowed => {
                "the key is not RSA of 2048 to 8192 bits or ECDSA P-256/P-384"
            }
            ServingDenyCause::NameMismatch => {
                "a node asked for a serving certificate in another node's name"
            }
            ServingDenyCause::BindingForOtherName => {
                "the node's FlavorBinding is for another node name"
            }
            ServingDenyCause::BindingRevoked => {
                "the node's binding is revoked or being deleted, or its Node carries kubeflavor.io/revoked"
            }
            ServingDenyCause::FlavorMissing => {
                "the binding's Flavor does not exist or cannot be read"
            }
            ServingDenyCause::DnsNameNotNodeName => {
                "the CSR asks for a DNS name other than the node name (exactly the node name is allowed)"
            }
            ServingDenyCause::AddressNotAllowed => {
                "the CSR asks for an IP address outside the Flavor's spec.servingAddresses (none listed: no address allowed)"
            }
            ServingDenyCause::NeverBound => {
                "kubeflavor never bound this node, and unbound nodes' serving CSRs are denied (--deny-unbound-serving)"
            }
        }
    }
}

impl fmt::Display for ServingDenyCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a serving CSR is left alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ServingIgnoreReason {
    AlreadyDecided,
    /// Not `kubernetes.io/kubelet-serving`.
    OtherSigner,
    /// Not a node identity: not kubeflavor's to judge.
    OtherRequester,
    /// A node kubeflavor never bound (a control-plane node, a kubeadm join): left to
    /// other approvers.
    NeverBound,
}

impl ServingIgnoreReason {
    pub fn as_str(self) -> &'static str {
        match self {
            ServingIgnoreReason::AlreadyDecided => "already_decided",
            ServingIgnoreReason::OtherSigner => "other_signer",
            ServingIgnoreReason::OtherRequester => "other_requester",
            ServingIgnoreReason::NeverBound => "never_bound",
        }
    }
}

/// What to do with a serving CSR.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServingDecision {
    Approve { node: NodeName },
    Deny(ServingDenyCause),
    Ignore(ServingIgnoreReason),
}

impl ServingDecision {
    /// The condition to write on the CSR; `None` for `Ignore`. The same two constants as
    /// client CSRs get (P1, hidden flavor).
    pub fn condition(&self) -> Option<CsrCondition> {
        match self {
            ServingDecision::Approve { .. } => Some(APPROVED_CONDITION),
            ServingDecision::Deny(_) => Some(DENIED_CONDITION),
            ServingDecision::Ignore(_) => None,
        }
    }
}

/// The node name of a `system:node:<name>` requester.
pub fn requesting_node(username: &str) -> Option<NodeName> {
    username.strip_prefix(NODE_USER_PREFIX)?.parse().ok()
}

/// The serving policy. Pure: same facts, same decision.
pub fn decide_serving(f: &ServingFacts) -> ServingDecision {
    match judge(f) {
        Ok(decision) => decision,
        Err(cause) => ServingDecision::Deny(cause),
    }
}

fn judge(f: &ServingFacts) -> Result<ServingDecision, ServingDenyCause> {
    if f.already_decided {
        return Ok(ServingDecision::Ignore(ServingIgnoreReason::AlreadyDecided));
    }
    if f.signer_name != KUBELET_SERVING_SIGNER {
        return Ok(ServingDecision::Ignore(ServingIgnoreReason::OtherSigner));
    }
    let Some(requester) = requesting_node(&f.requester_username) else {
        return Ok(ServingDecision::Ignore(ServingIgnoreReason::OtherRequester));
    };
    // A revoked node gets nothing, bound or no longer bound: never "left to others".
    if f.node_marked_revoked {
        return Err(ServingDenyCause::BindingRevoked);
    }
    let Some(binding) = &f.binding else {
        if f.options.deny_unbound {
            return Err(ServingDenyCause::NeverBound);
        }
        return Ok(ServingDecision::Ignore(ServingIgnoreReason::NeverBound));
    };
    if binding.node != requester.as_str() {
        return Err(ServingDenyCause::BindingForOtherName);
    }
    if binding.revoked {
        return Err(ServingDenyCause::BindingRevoked);
    }
    let csr = f.csr.as_ref().map_err(shape_cause)?;
    if csr.node_name != requester {
        return Err(ServingDenyCause::NameMismatch);
    }
    if !csr.dns_names.iter().all(|d| d == requester.as_str()) {
        return Err(ServingDenyCause::DnsNameNotNodeName);
    }
    let allowed = f
        .flavor_addresses
        .as_ref()
        .ok_or(ServingDenyCause::FlavorMissing)?;
    if !csr
        .ip_addresses
        .iter()
        .all(|ip| address_allowed(*ip, allowed))
    {
        return Err(ServingDenyCause::AddressNotAllowed);
    }
    Ok(ServingDecision::Approve { node: requester })
}

fn shape_cause(e: &ServingCsrError) -> ServingDenyCause {
    if e.is_malformed() {
        ServingDenyCause::MalformedCsr
    } else if e.is_key() {
        ServingDenyCause::KeyNotAllowed
    } else {
        ServingDenyCause::NotKubeletServingShape
    }
}

/// Whether `ip` is inside one of the Flavor's ranges.
pub fn address_allowed(ip: IpAddr, allowed: &[Cidr]) -> bool {
    allowed.iter().any(|net| net.contains(ip))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::csr::serving::ServingKey;
    use proptest::prelude::*;

    fn csr(node: &str, dns: &[&str], ips: &[&str]) -> KubeletServingCsr {
        KubeletServingCsr {
            node_name: node.parse().unwrap(),
            dns_names: dns.iter().map(|s| s.to_string()).collect(),
            ip_addresses: ips.iter().map(|s| s.parse().unwrap()).collect(),
            key: ServingKey::EcdsaP256,
        }
    }

    /// A joined, flavored node `worker-1` at 10.20.0.7 asking as a kubelet does, its
    /// Flavor allowing 10.20.0.0/16.
    fn facts() -> ServingFacts {
        ServingFacts {
            signer_name: KUBELET_SERVING_SIGNER.into(),
            requester_username: "system:node:worker-1".into(),
            already_decided: false,
            csr: Ok(csr("worker-1", &["worker-1"], &["10.20.0.7"])),
            binding: Some(ServingBinding {
                node: "worker-1".into(),
                revoked: false,
            }),
            node_marked_revoked: false,
            flavor_addresses: Some(vec!["10.20.0.0/16".parse().unwrap()]),
            options: ServingOptions::default(),
        }
    }

    #[test]
    fn a_node_marked_revoked_is_denied_even_without_a_binding() {
        let mut f = facts();
        f.node_marked_revoked = true;
        assert_eq!(denied(&f), Some(ServingDenyCause::BindingRevoked));
        // Its binding deleted: still denied, not left to other approvers.
        f.binding = None;
        assert_eq!(denied(&f), Some(ServingDenyCause::BindingRevoked));
        f.node_marked_revoked = false;
        assert_eq!(
            decide_serving(&f),
            ServingDecision::Ignore(ServingIgnoreReason::NeverBound)
        );
    }

    fn denied(f: &ServingFacts) -> Option<ServingDenyCause> {
        match decide_serving(f) {
            ServingDecision::Deny(c) => Some(c),
            _ => None,
        }
    }

    #[test]
    fn a_bound_node_asking_for_its_name_and_allowed_address_is_approved() {
        assert_eq!(
            decide_serving(&facts()),
            ServingDecision::Approve {
                node: "worker-1".parse().unwrap()
            }
        );
        assert_eq!(
            decide_serving(&facts()).condition(),
            Some(APPROVED_CONDITION)
        );
    }

    #[test]
    fn a_dns_name_other_than_the_node_name_is_denied() {
        let mut f = facts();
        f.csr = Ok(csr(
            "worker-1",
            &["worker-1", "evil.example"],
            &["10.20.0.7"],
        ));
        assert_eq!(denied(&f), Some(ServingDenyCause::DnsNameNotNodeName));
        f.csr = Ok(csr("worker-1", &["worker-2"], &["10.20.0.7"]));
        assert_eq!(denied(&f), Some(ServingDenyCause::DnsNameNotNodeName));
        f.csr = Ok(csr("worker-1", &["Worker-1"], &["10.20.0.7"]));
        assert_eq!(
            denied(&f),
            Some(ServingDenyCause::DnsNameNotNodeName),
            "bytes, not case-folded"
        );
    }

    #[test]
    fn an_address_outside_the_flavors_ranges_is_denied() {
        let mut f = facts();
        f.csr = Ok(csr(
            "worker-1",
            &["worker-1"],
            &["10.20.0.7", "192.168.1.1"],
        ));
        assert_eq!(denied(&f), Some(ServingDenyCause::AddressNotAllowed));
        f.csr = Ok(csr("worker-1", &["worker-1"], &["::ffff:10.20.0.7"]));
        assert_eq!(
            denied(&f),
            Some(ServingDenyCause::AddressNotAllowed),
            "mapped IPv6 is not IPv4"
        );
    }

    #[test]
    fn a_flavor_without_ranges_allows_no_address() {
        let mut f = facts();
        f.flavor_addresses = Some(Vec::new());
        assert_eq!(denied(&f), Some(ServingDenyCause::AddressNotAllowed));
        f.csr = Ok(csr("worker-1", &["worker-1"], &[]));
        assert!(matches!(
            decide_serving(&f),
            ServingDecision::Approve { .. }
        ));
    }

    #[test]
    fn a_missing_flavor_is_denied() {
        let mut f = facts();
        f.flavor_addresses = None;
        assert_eq!(denied(&f), Some(ServingDenyCause::FlavorMissing));
    }

    #[test]
    fn a_revoked_binding_is_denied() {
        let mut f = facts();
        f.binding.as_mut().unwrap().revoked = true;
        assert_eq!(denied(&f), Some(ServingDenyCause::BindingRevoked));
    }

    #[test]
    fn a_binding_for_another_name_is_denied() {
        let mut f = facts();
        f.binding.as_mut().unwrap().node = "worker-2".into();
        assert_eq!(denied(&f), Some(ServingDenyCause::BindingForOtherName));
    }

    #[test]
    fn another_nodes_name_is_denied() {
        let mut f = facts();
        f.csr = Ok(csr("worker-2", &["worker-1"], &["10.20.0.7"]));
        assert_eq!(denied(&f), Some(ServingDenyCause::NameMismatch));
        f.requester_username = "system:node:worker-2".into();
        f.csr = Ok(csr("worker-1", &["worker-1"], &["10.20.0.7"]));
        // The binding looked up is the requester's: here worker-1's binding was handed in
        // for requester worker-2, which the binding check catches first.
        assert_eq!(denied(&f), Some(ServingDenyCause::BindingForOtherName));
    }

    #[test]
    fn bad_shapes_and_keys_name_their_cause() {
        use crate::csr::client::CsrError;
        let mut f = facts();
        f.csr = Err(ServingCsrError::Request(CsrError::NotPem));
        assert_eq!(denied(&f), Some(ServingDenyCause::MalformedCsr));
        f.csr = Err(ServingCsrError::Usages(vec![]));
        assert_eq!(denied(&f), Some(ServingDenyCause::NotKubeletServingShape));
        f.csr = Err(ServingCsrError::Key("RSA of 1024 bits".into()));
        assert_eq!(denied(&f), Some(ServingDenyCause::KeyNotAllowed));
    }

    #[test]
    fn never_bound_nodes_are_left_alone_unless_configured() {
        let mut f = facts();
        f.binding = None;
        assert_eq!(
            decide_serving(&f),
            ServingDecision::Ignore(ServingIgnoreReason::NeverBound)
        );
        f.options.deny_unbound = true;
        assert_eq!(denied(&f), Some(ServingDenyCause::NeverBound));
    }

    #[test]
    fn other_requesters_signers_and_decided_csrs_are_ignored() {
        let mut f = facts();
        f.requester_username = "system:bootstrap:abcdef".into();
        assert_eq!(
            decide_serving(&f),
            ServingDecision::Ignore(ServingIgnoreReason::OtherRequester)
        );
        let mut f = facts();
        f.signer_name = crate::csr::client::KUBELET_CLIENT_SIGNER.into();
        assert_eq!(
            decide_serving(&f),
            ServingDecision::Ignore(ServingIgnoreReason::OtherSigner)
        );
        let mut f = facts();
        f.already_decided = true;
        assert_eq!(
            decide_serving(&f),
            ServingDecision::Ignore(ServingIgnoreReason::AlreadyDecided)
        );
        assert_eq!(decide_serving(&f).condition(), None);
    }

    #[test]
    fn every_cause_has_a_distinct_label_and_the_denial_condition_hides_it() {
        let labels: std::collections::BTreeSet<_> =
            ServingDenyCause::ALL.iter().map(|c| c.as_str()).collect();
        assert_eq!(labels.len(), ServingDenyCause::ALL.len());
        for c in ServingDenyCause::ALL {
            assert_eq!(ServingDecision::Deny(c).condition(), Some(DENIED_CONDITION));
        }
    }

    proptest! {
        /// Whatever the request, an approval is for the requester, with DNS names that are
        /// the requester's name only and addresses inside the Flavor's ranges, from an
        /// unrevoked binding for that name.
        #[test]
        fn an_approval_always_rests_on_every_rule(
            requester in "[a-c]",
            cn in "[a-c]",
            binding_node in "[a-c]",
            revoked in any::<bool>(),
            marked in any::<bool>(),
            dns in proptest::collection::vec("[a-c]", 0..3),
            ips in proptest::collection::vec(any::<[u8; 4]>(), 0..3),
            prefix in 0u8..=32,
            net in any::<[u8; 4]>(),
        ) {
            let net: Cidr = format!("{}/{prefix}", std::net::Ipv4Addr::from(net)).parse().unwrap();
            let ips: Vec<IpAddr> = ips.into_iter().map(|b| IpAddr::V4(b.into())).collect();
            let f = ServingFacts {
                requester_username: format!("system:node:{requester}"),
                csr: Ok(KubeletServingCsr {
                    node_name: cn.parse().unwrap(),
                    dns_names: dns.clone(),
                    ip_addresses: ips.clone(),
                    key: ServingKey::EcdsaP256,
                }),
                binding: Some(ServingBinding { node: binding_node.clone(), revoked }),
                node_marked_revoked: marked,
                flavor_addresses: Some(vec![net]),
                ..facts()
            };
            if let ServingDecision::Approve { node } = decide_serving(&f) {
                prop_assert_eq!(node.as_str(), requester.as_str());
                prop_assert_eq!(&cn, &requester);
                prop_assert_eq!(&binding_node, &requester);
                prop_assert!(!revoked && !marked);
                prop_assert!(dns.iter().all(|d| *d == requester));
                prop_assert!(ips.iter().all(|ip| net.contains(*ip)));
            }
        }
    }
}
