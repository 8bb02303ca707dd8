//! kubeflavor's own fields on a token Secret: the flavor (a label) and max nodes, bound
//! node names and denials (annotations). Secret data keys cannot hold `/`, and the data is
//! kubeadm's; a bootstrap identity cannot read the Secret at all (RBAC gives it no `get` on
//! token Secrets, the API server answers 403), so the flavor is safe here (P1, hidden
//! flavor).

use std::collections::{BTreeMap, BTreeSet};
use std::num::NonZeroU32;

use crate::flavor::{FlavorName, FlavorNameError};
use crate::names::{NodeName, NodeNameError};

/// Secret label holding the token's flavor.
pub const FLAVOR_TOKEN_LABEL: &str = "kubeflavor.io/flavor";
/// Secret annotation: how many distinct node names the token may bind.
pub const MAX_NODES_ANNOTATION: &str = "kubeflavor.io/max-nodes";
/// Secret annotation: node names bound so far, sorted, comma-separated.
pub const BOUND_NODES_ANNOTATION: &str = "kubeflavor.io/bound-nodes";
/// Secret annotation: how many CSRs of this token were denied.
pub const DENIALS_ANNOTATION: &str = "kubeflavor.io/denials";

/// kubeflavor's fields of a flavored token Secret (its labels and annotations).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlavorTokenMeta {
    pub flavor: FlavorName,
    pub max_nodes: NonZeroU32,
    /// Distinct node names bound to this token so far (P3, binding: at most `max_nodes`).
    pub bound_nodes: BTreeSet<NodeName>,
    /// CSRs of this token denied so far (P4, rejection that ends: the count decides when
    /// the token is deleted).
    pub denials: u32,
}

/// Why kubeflavor's metadata on a token Secret cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenMetaError {
    #[error("label {FLAVOR_TOKEN_LABEL}: {0}")]
    Flavor(FlavorNameError),
    #[error(
        "annotation {MAX_NODES_ANNOTATION} is {0:?}; it must be a whole number of at least 1 (fix or remove it)"
    )]
    MaxNodes(String),
    #[error("annotation {BOUND_NODES_ANNOTATION} holds an invalid node name: {0}")]
    BoundNodes(NodeNameError),
    #[error(
        "annotation {DENIALS_ANNOTATION} is {0:?}; it must be a whole number (fix or remove it)"
    )]
    Denials(String),
}

impl FlavorTokenMeta {
    pub fn new(flavor: FlavorName, max_nodes: NonZeroU32) -> Self {
        FlavorTokenMeta {
            flavor,
            max_nodes,
            bound_nodes: BTreeSet::new(),
            denials: 0,
        }
    }

    /// Reads kubeflavor's metadata; `Ok(None)` for a token without the flavor label (a
    /// plain kubeadm token). A missing max-nodes annotation means
    /// [`crate::flavor::DEFAULT_MAX_NODES`], missing bound-nodes none, missing denials 0.
    pub fn from_metadata(
        labels: &BTreeMap<String, String>,
        annotations: &BTreeMap<String, String>,
    ) -> Result<Option<Self>, TokenMetaError> {
        let Some(flavor) = labels.get(FLAVOR_TOKEN_LABEL) else {
            return Ok(None);
        };
        let flavor: FlavorName = flavor.parse().map_err(TokenMetaError::Flavor)?;
        let max_nodes = match annotations.get(MAX_NODES_ANNOTATION) {
            None => crate::flavor::DEFAULT_MAX_NODES,
            Some(v) => v
                .parse::<NonZeroU32>()
                .map_err(|_| TokenMetaError::MaxNodes(v.clone()))?,
        };
        let bound_nodes = match annotations.get(BOUND_NODES_ANNOTATION) {
            None => BTreeSet::new(),
            Some(v) if v.is_empty() => BTreeSet::new(),
            Some(v) => v
                .split(',')
                .map(str::parse)
                .collect::<Result<_, _>>()
                .map_err(TokenMetaError::BoundNodes)?,
        };
        let denials = match annotations.get(DENIALS_ANNOTATION) {
            None => 0,
            Some(v) => v.parse().map_err(|_| TokenMetaError::Denials(v.clone()))?,
        };
        Ok(Some(FlavorTokenMeta {
            flavor,
            max_nodes,
            bound_nodes,
            denials,
        }))
    }

    /// The Secret labels kubeflavor owns.
    pub fn labels(&self) -> BTreeMap<String, String> {
        [(FLAVOR_TOKEN_LABEL.to_owned(), self.flavor.to_string())].into()
    }

    /// The Secret annotations kubeflavor owns (bound nodes sorted, comma-separated).
    pub fn annotations(&self) -> BTreeMap<String, String> {
        let bound: Vec<&str> = self.bound_nodes.iter().map(NodeName::as_str).collect();
        [
            (MAX_NODES_ANNOTATION.to_owned(), self.max_nodes.to_string()),
            (BOUND_NODES_ANNOTATION.to_owned(), bound.join(",")),
            (DENIALS_ANNOTATION.to_owned(), self.denials.to_string()),
        ]
        .into()
    }

    /// Whether another distinct node name may still bind to this token.
    pub fn has_room(&self) -> bool {
        u32::try_from(self.bound_nodes.len()).is_ok_and(|n| n < self.max_nodes.get())
    }

    /// The metadata after reserving a use for `node` (no change when already bound).
    pub fn with_bound_node(&self, node: &NodeName) -> Self {
        let mut next = self.clone();
        next.bound_nodes.insert(node.clone());
        next
    }

    /// The metadata after one more denial.
    pub fn with_denial(&self) -> Self {
        let mut next = self.clone();
        next.denials = next.denials.saturating_add(1);
        next
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn flavor_metadata_round_trips() {
        let mut meta = FlavorTokenMeta::new("sweet".parse().unwrap(), NonZeroU32::new(3).unwrap());
        meta = meta
            .with_bound_node(&"worker-2".parse().unwrap())
            .with_bound_node(&"worker-1".parse().unwrap())
            .with_bound_node(&"worker-2".parse().unwrap())
            .with_denial();
        let annotations = meta.annotations();
        assert_eq!(annotations[BOUND_NODES_ANNOTATION], "worker-1,worker-2");
        assert_eq!(annotations[MAX_NODES_ANNOTATION], "3");
        assert_eq!(annotations[DENIALS_ANNOTATION], "1");
        assert_eq!(
            FlavorTokenMeta::from_metadata(&meta.labels(), &annotations),
            Ok(Some(meta.clone()))
        );
        assert!(meta.has_room());
    }

    #[test]
    fn plain_kubeadm_tokens_have_no_flavor_metadata() {
        assert_eq!(
            FlavorTokenMeta::from_metadata(&BTreeMap::new(), &BTreeMap::new()),
            Ok(None)
        );
    }

    #[test]
    fn malformed_metadata_is_reported() {
        let labels: BTreeMap<String, String> = [(FLAVOR_TOKEN_LABEL.into(), "sweet".into())].into();
        let ann = |k: &str, v: &str| -> BTreeMap<String, String> { [(k.into(), v.into())].into() };
        let defaults = FlavorTokenMeta::from_metadata(&labels, &BTreeMap::new())
            .unwrap()
            .unwrap();
        assert_eq!(defaults.max_nodes.get(), 1);
        assert!(matches!(
            FlavorTokenMeta::from_metadata(&labels, &ann(MAX_NODES_ANNOTATION, "0")),
            Err(TokenMetaError::MaxNodes(_))
        ));
        assert!(matches!(
            FlavorTokenMeta::from_metadata(&labels, &ann(BOUND_NODES_ANNOTATION, "a,,b")),
            Err(TokenMetaError::BoundNodes(_))
        ));
        assert!(matches!(
            FlavorTokenMeta::from_metadata(&labels, &ann(DENIALS_ANNOTATION, "-1")),
            Err(TokenMetaError::Denials(_))
        ));
        let bad_flavor: BTreeMap<String, String> =
            [(FLAVOR_TOKEN_LABEL.into(), "Sweet".into())].into();
        assert!(matches!(
            FlavorTokenMeta::from_metadata(&bad_flavor, &BTreeMap::new()),
            Err(TokenMetaError::Flavor(_))
        ));
    }

    proptest! {
        #[test]
        fn bound_nodes_annotation_is_sorted_and_parses_back(
            names in proptest::collection::btree_set("[a-z][a-z0-9-]{0,10}[a-z0-9]", 0..8)
        ) {
            let mut meta = FlavorTokenMeta::new("f".parse().unwrap(), NonZeroU32::MIN);
            for n in names.iter().rev() {
                meta = meta.with_bound_node(&n.parse().unwrap());
            }
            let value = meta.annotations()[BOUND_NODES_ANNOTATION].clone();
            let sorted: Vec<&str> = names.iter().map(String::as_str).collect();
            prop_assert_eq!(value, sorted.join(","));
            let back = FlavorTokenMeta::from_metadata(&meta.labels(), &meta.annotations()).unwrap();
            prop_assert_eq!(back, Some(meta));
        }
    }
}
