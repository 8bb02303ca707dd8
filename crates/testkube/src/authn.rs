//! Authentication, as kube-apiserver does it: client certificates signed by the cluster CA,
//! bootstrap tokens backed by `kube-system/bootstrap-token-<id>` Secrets, registered bearer
//! tokens, and anonymous requests. (Being written; the signature is fixed.)

use std::collections::BTreeMap;

use jiff::Timestamp;

use crate::types::{ApiError, ObjectReader, UserInfo};

/// Decide who made a request.
///
/// - `peer_cert_der`: the client certificate the TLS layer already verified against the
///   cluster CA, if one was presented.
/// - `bearer`: the token from `Authorization: Bearer <token>`, if any.
/// - `static_tokens`: bearer tokens registered with the test cluster.
///
/// A request with no credentials is `system:anonymous` (not a 401). Any credential that fails
/// is the same uninformative 401 `Unauthorized` Status.
pub fn authenticate(
    peer_cert_der: Option<&[u8]>,
    bearer: Option<&str>,
    static_tokens: &BTreeMap<String, UserInfo>,
    reader: &dyn ObjectReader,
    now: Timestamp,
) -> Result<UserInfo, ApiError> {
    let _ = (peer_cert_der, bearer, static_tokens, reader, now);
    Ok(UserInfo::anonymous())
}
