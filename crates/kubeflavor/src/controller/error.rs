//! The controller's errors: one variant per stage that can fail, named as a metric label.

use kubeflavor_cluster::read::ReadError;

use super::Step;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("reading {what} failed: {source}")]
    Read {
        what: String,
        #[source]
        source: kube::Error,
    },
    #[error("reserving a use of token {token} for node {node} failed: {source}")]
    Reserve {
        token: String,
        node: String,
        #[source]
        source: kube::Error,
    },
    #[error("creating FlavorBinding {node} failed: {source}")]
    Bind {
        node: String,
        #[source]
        source: kube::Error,
    },
    #[error("writing the decision on CSR {csr} failed: {source}")]
    Decide {
        csr: String,
        #[source]
        source: kube::Error,
    },
    #[error("updating token Secret {token} after a denial failed: {source}")]
    TokenAfterDenial {
        token: String,
        #[source]
        source: kube::Error,
    },
    #[error("deleting the used-up token Secret {token} failed: {source}")]
    RetireToken {
        token: String,
        #[source]
        source: kube::Error,
    },
    #[error("patching Node {node} failed: {source}")]
    PatchNode {
        node: String,
        #[source]
        source: kube::Error,
    },
    #[error("writing the status of FlavorBinding {node} failed: {source}")]
    BindingStatus {
        node: String,
        #[source]
        source: kube::Error,
    },
    #[error("writing the status of NodeReport {node} failed: {source}")]
    ReportStatus {
        node: String,
        #[source]
        source: kube::Error,
    },
    #[error("the binding or Node of {node} changed before CSR {csr} was approved; deciding again")]
    Changed { csr: String, node: String },
    #[error("halted after {0:?}: this controller's term ended or a test's step hook stopped it")]
    Halted(Step),
}

impl From<ReadError> for Error {
    fn from(ReadError { what, source }: ReadError) -> Self {
        Error::Read { what, source }
    }
}

impl Error {
    /// Every stage [`Error::metric_label`] names but `halted` (the term ended or a test's
    /// step hook stopped the context, which is not counted as an error): the label values
    /// of `reconcile_errors` and `reconcile_conflicts`.
    pub const STAGES: [&'static str; 9] = [
        "read",
        "reserve",
        "bind",
        "decide",
        "token_after_denial",
        "retire_token",
        "patch_node",
        "binding_status",
        "changed_before_approval",
    ];

    /// The stage that failed, as a metric label.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::Read { .. } => "read",
            Error::Reserve { .. } => "reserve",
            Error::Bind { .. } => "bind",
            Error::Decide { .. } => "decide",
            Error::TokenAfterDenial { .. } => "token_after_denial",
            Error::RetireToken { .. } => "retire_token",
            Error::PatchNode { .. } => "patch_node",
            Error::BindingStatus { .. } => "binding_status",
            Error::ReportStatus { .. } => "report_status",
            Error::Changed { .. } => "changed_before_approval",
            Error::Halted(_) => "halted",
        }
    }

    fn source_kube(&self) -> Option<&kube::Error> {
        match self {
            Error::Read { source, .. }
            | Error::Reserve { source, .. }
            | Error::Bind { source, .. }
            | Error::Decide { source, .. }
            | Error::TokenAfterDenial { source, .. }
            | Error::RetireToken { source, .. }
            | Error::PatchNode { source, .. }
            | Error::BindingStatus { source, .. }
            | Error::ReportStatus { source, .. } => Some(source),
            Error::Changed { .. } | Error::Halted(_) => None,
        }
    }

    /// The object the write was for is gone (404).
    pub fn is_not_found(&self) -> bool {
        matches!(self.source_kube(), Some(kube::Error::Api(s)) if s.is_not_found())
    }

    /// Lost an optimistic-concurrency race (409 Conflict or AlreadyExists, or facts that
    /// changed before an approval): re-read and decide again soon.
    pub fn is_conflict(&self) -> bool {
        matches!(self, Error::Changed { .. })
            || matches!(self.source_kube(), Some(kube::Error::Api(s)) if s.is_conflict() || s.is_already_exists())
    }
}
