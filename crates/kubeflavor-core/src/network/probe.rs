//! What kubeflavor observes of a node beyond the address it connects from (P9): when the
//! node shows itself to the join-token API, the API connects back to that address on the
//! kubelet's port. The TCP handshake's time is the round trip between the two; the TLS
//! handshake tells whether the node answers there with the serving certificate the cluster
//! issued it (chained to the cluster's CA, naming that address, for `system:node:<name>`),
//! which it has only when its serving CSR was approved for that address. Both are facts
//! seen from outside, labelled under [`OBSERVED_PREFIX`](super::OBSERVED_PREFIX).

use std::collections::BTreeMap;

/// The label of the serving-certificate check's verdict.
pub const SERVING_LABEL: &str =
    "observed.kubeflavor.node-restriction.kubernetes.io/serving-certificate";
/// The label of the round trip's class.
pub const ROUND_TRIP_LABEL: &str = "observed.kubeflavor.node-restriction.kubernetes.io/round-trip";

/// What connecting back to the node's address gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProbeOutcome {
    /// No TCP connection within the time allowed (nothing listens, or a firewall).
    NoAnswer,
    /// Connected, but the TLS handshake failed: no certificate the cluster's CA issued for
    /// that address (a self-signed one, or one for other addresses), or no TLS at all.
    Unverified,
    /// A certificate chained to the cluster's CA for that address, naming this node
    /// (`Some(name)` from its subject as [`node_of_subject`] reads it) or no node (`None`).
    Presented { node: Option<String> },
}

/// The verdict, as the label and the report's status carry it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServingVerdict {
    /// The node answers at its observed address with its own cluster-issued certificate.
    Verified,
    NoAnswer,
    Unverified,
    /// Someone else's certificate answers there: another node (or no node) holds it.
    OtherNode,
}

impl ServingVerdict {
    pub fn as_str(self) -> &'static str {
        match self {
            ServingVerdict::Verified => "verified",
            ServingVerdict::NoAnswer => "no-answer",
            ServingVerdict::Unverified => "unverified",
            ServingVerdict::OtherNode => "other-node",
        }
    }

    pub fn parse(text: &str) -> Option<ServingVerdict> {
        [
            ServingVerdict::Verified,
            ServingVerdict::NoAnswer,
            ServingVerdict::Unverified,
            ServingVerdict::OtherNode,
        ]
        .into_iter()
        .find(|v| v.as_str() == text)
    }
}

/// The verdict on `node` of what connecting back gave: verified only when the certificate
/// names that very node.
pub fn serving_verdict(node: &str, outcome: &ProbeOutcome) -> ServingVerdict {
    match outcome {
        ProbeOutcome::NoAnswer => ServingVerdict::NoAnswer,
        ProbeOutcome::Unverified => ServingVerdict::Unverified,
        ProbeOutcome::Presented { node: Some(n) } if n == node => ServingVerdict::Verified,
        ProbeOutcome::Presented { .. } => ServingVerdict::OtherNode,
    }
}

/// The node a certificate's subject names: common name `system:node:<name>` and
/// organization `system:nodes`, each exactly once, the name a DNS subdomain.
pub fn node_of_subject(common_names: &[&str], organizations: &[&str]) -> Option<String> {
    let ([cn], [org]) = (common_names, organizations) else {
        return None;
    };
    if *org != crate::admission::node_report::NODES_GROUP {
        return None;
    }
    let name = cn.strip_prefix(crate::admission::node_report::NODE_USER_PREFIX)?;
    crate::names::check_dns1123_subdomain(name).ok()?;
    Some(name.to_string())
}

/// The round trip's class, a label value that changes only when the network does.
pub fn round_trip_class(micros: u64) -> &'static str {
    match micros {
        0..1_000 => "under-1ms",
        1_000..10_000 => "under-10ms",
        10_000..100_000 => "under-100ms",
        _ => "100ms-or-more",
    }
}

/// The labels of a probe: the verdict, and the round trip's class when the node answered.
pub fn labels(verdict: ServingVerdict, round_trip_micros: Option<u64>) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::from([(SERVING_LABEL.to_string(), verdict.as_str().to_string())]);
    if let Some(micros) = round_trip_micros {
        labels.insert(
            ROUND_TRIP_LABEL.to_string(),
            round_trip_class(micros).to_string(),
        );
    }
    labels
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn only_the_nodes_own_certificate_is_verified() {
        let own = ProbeOutcome::Presented {
            node: Some("lyon-1".into()),
        };
        assert_eq!(serving_verdict("lyon-1", &own), ServingVerdict::Verified);
        assert_eq!(serving_verdict("paris-1", &own), ServingVerdict::OtherNode);
        assert_eq!(
            serving_verdict("lyon-1", &ProbeOutcome::Presented { node: None }),
            ServingVerdict::OtherNode
        );
        assert_eq!(
            serving_verdict("lyon-1", &ProbeOutcome::Unverified),
            ServingVerdict::Unverified
        );
        assert_eq!(
            serving_verdict("lyon-1", &ProbeOutcome::NoAnswer),
            ServingVerdict::NoAnswer
        );
    }

    #[test]
    fn a_subject_names_a_node_only_as_a_kubelet_certificate_does() {
        let node = |cns: &[&str], orgs: &[&str]| node_of_subject(cns, orgs);
        assert_eq!(
            node(&["system:node:lyon-1"], &["system:nodes"]).as_deref(),
            Some("lyon-1")
        );
        assert_eq!(node(&["system:node:lyon-1"], &["system:masters"]), None);
        assert_eq!(node(&["system:node:lyon-1"], &[]), None);
        assert_eq!(
            node(&["system:node:lyon-1"], &["system:nodes", "system:masters"]),
            None
        );
        assert_eq!(
            node(&["system:node:a", "system:node:b"], &["system:nodes"]),
            None
        );
        assert_eq!(node(&["lyon-1"], &["system:nodes"]), None);
        assert_eq!(node(&["system:node:Bad_Name"], &["system:nodes"]), None);
    }

    #[test]
    fn labels_carry_the_verdict_and_the_round_trip_class() {
        let l = labels(ServingVerdict::Verified, Some(420));
        assert_eq!(l[SERVING_LABEL], "verified");
        assert_eq!(l[ROUND_TRIP_LABEL], "under-1ms");
        let l = labels(ServingVerdict::NoAnswer, None);
        assert_eq!(l.len(), 1);
        for v in [
            ServingVerdict::Verified,
            ServingVerdict::NoAnswer,
            ServingVerdict::Unverified,
            ServingVerdict::OtherNode,
        ] {
            assert_eq!(ServingVerdict::parse(v.as_str()), Some(v));
            crate::flavor::labels::check_label_value(v.as_str()).expect("a label value");
        }
        assert_eq!(ServingVerdict::parse("Verified"), None);
    }

    proptest! {
        #[test]
        fn round_trip_classes_are_ordered_label_values(a in 0u64..1_000_000_000, b in 0u64..1_000_000_000) {
            let order = ["under-1ms", "under-10ms", "under-100ms", "100ms-or-more"];
            let rank = |m| order.iter().position(|c| *c == round_trip_class(m)).unwrap();
            if a <= b {
                prop_assert!(rank(a) <= rank(b));
            }
            prop_assert!(crate::flavor::labels::check_label_value(round_trip_class(a)).is_ok());
        }
    }
}
