//! The detached HS256 JWS that kube-controller-manager's bootstrapsigner puts next to the
//! kubeconfig in `kube-public/cluster-info`, as `jws-kubeconfig-<token-id>` for every token
//! with `usage-bootstrap-signing: "true"`.
//!
//! The value is `b64url(header) + ".." + b64url(signature)`, header bytes exactly
//! `{"alg":"HS256","kid":"<token-id>"}`, signature = HMAC-SHA256 keyed with the token
//! SECRET only over `b64url(header) + "." + b64url(kubeconfig)`. Like kubeadm, verification
//! recomputes the whole string and compares it in constant time: a node holding the token
//! learns that the kubeconfig (and so the CA) it read came from someone who knows the secret.
//!
//! The functions take the secret as `&str` because the upstream test vectors use secrets that
//! are not valid 16-character token secrets.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;
use subtle::ConstantTimeEq;
use zeroize::Zeroizing;

/// The cluster-info ConfigMap data key that holds the signature made with `token_id`.
pub fn configmap_key(token_id: &str) -> String {
    format!("{CONFIGMAP_KEY_PREFIX}{token_id}")
}

/// Prefix of the signature keys in `kube-public/cluster-info`.
pub const CONFIGMAP_KEY_PREFIX: &str = "jws-kubeconfig-";

/// Why a cluster-info signature was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JwsError {
    #[error(
        "the cluster-info signature for token id '{token_id}' is not a detached JWS \
         (expected '<header>..<signature>'); cluster-info may have been tampered with"
    )]
    Malformed { token_id: String },
    #[error(
        "the cluster-info signature for token id '{token_id}' does not match: either the token \
         secret is wrong, or the kubeconfig in cluster-info was changed by someone who does not \
         know the token (a possible attack); check the token you were given"
    )]
    Mismatch { token_id: String },
}

/// Computes the detached JWS kube-controller-manager would publish for `content` under the
/// token `token_id.secret`.
pub fn sign(token_id: &str, secret: &str, content: &[u8]) -> String {
    let header = URL_SAFE_NO_PAD.encode(format!(r#"{{"alg":"HS256","kid":"{token_id}"}}"#));
    let payload = URL_SAFE_NO_PAD.encode(content);
    let signing_input = Zeroizing::new(format!("{header}.{payload}"));
    // HMAC accepts keys of any length, including empty.
    let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(secret.as_bytes())
        .expect("HMAC-SHA256 accepts keys of any length");
    mac.update(signing_input.as_bytes());
    let signature = URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes());
    format!("{header}..{signature}")
}

/// Checks that `jws` is the signature of `content` under `token_id.secret`, comparing the whole
/// recomputed string in constant time (as kubeadm does).
pub fn verify(token_id: &str, secret: &str, content: &[u8], jws: &str) -> Result<(), JwsError> {
    let expected = sign(token_id, secret, content);
    if bool::from(expected.as_bytes().ct_eq(jws.as_bytes())) {
        return Ok(());
    }
    let token_id = token_id.to_string();
    let detached = jws
        .split_once("..")
        .is_some_and(|(h, s)| !h.is_empty() && !s.is_empty() && !s.contains('.'));
    if detached {
        Err(JwsError::Mismatch { token_id })
    } else {
        Err(JwsError::Malformed { token_id })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    // The three vectors of upstream's jws_test.go (k8s.io/cluster-bootstrap/token/jws).
    const ID: &str = "joshua";
    const SECRET: &str = "my voice is my passcode";
    const CONTENT: &str = "Hello from the other side. I must have called a thousand times.";

    #[test]
    fn upstream_vector_with_content() {
        let jws =
            "eyJhbGciOiJIUzI1NiIsImtpZCI6Impvc2h1YSJ9..VShe2taLd-YTrmWuRkcL_8QTNDHYxQIEBsAYYiIj1_8";
        assert_eq!(sign(ID, SECRET, CONTENT.as_bytes()), jws);
        assert_eq!(verify(ID, SECRET, CONTENT.as_bytes(), jws), Ok(()));
    }

    #[test]
    fn upstream_vector_with_empty_content() {
        let jws =
            "eyJhbGciOiJIUzI1NiIsImtpZCI6Impvc2h1YSJ9..7Ui1ALizW4jXphVUB7xUqC9vLYLL9RZeOFfVLoB7Tgk";
        assert_eq!(sign(ID, SECRET, b""), jws);
        assert_eq!(verify(ID, SECRET, b"", jws), Ok(()));
    }

    #[test]
    fn upstream_vector_with_empty_secret() {
        let jws =
            "eyJhbGciOiJIUzI1NiIsImtpZCI6Impvc2h1YSJ9..UfkqvDGiIFxrMnFseDj9LYJOLNrvjW8aHhF71mvvAs8";
        assert_eq!(sign(ID, "", CONTENT.as_bytes()), jws);
        assert_eq!(verify(ID, "", CONTENT.as_bytes(), jws), Ok(()));
    }

    #[test]
    fn header_is_exactly_the_kubernetes_bytes() {
        let jws = sign("abcdef", "0123456789abcdef", b"x");
        let header = jws.split("..").next().unwrap();
        assert_eq!(
            URL_SAFE_NO_PAD.decode(header).unwrap(),
            br#"{"alg":"HS256","kid":"abcdef"}"#
        );
        assert!(!jws.contains('='), "base64url without padding");
    }

    #[test]
    fn wrong_secret_is_a_mismatch_and_garbage_is_malformed() {
        let jws = sign(ID, SECRET, b"kubeconfig");
        assert_eq!(
            verify(ID, "my voice is not my passcode", b"kubeconfig", &jws),
            Err(JwsError::Mismatch {
                token_id: ID.into()
            })
        );
        assert_eq!(
            verify(ID, SECRET, b"kubeconfig", "not-a-jws"),
            Err(JwsError::Malformed {
                token_id: ID.into()
            })
        );
        // A full (attached) JWS is not what the bootstrapsigner publishes.
        let (h, s) = jws.split_once("..").unwrap();
        let attached = format!("{h}.{}.{s}", URL_SAFE_NO_PAD.encode("kubeconfig"));
        assert!(verify(ID, SECRET, b"kubeconfig", &attached).is_err());
    }

    proptest! {
        #[test]
        fn verify_accepts_what_sign_produces(id in "[a-z0-9]{6}", secret in "[a-z0-9]{16}",
                                             content in proptest::collection::vec(any::<u8>(), 0..512)) {
            let jws = sign(&id, &secret, &content);
            prop_assert_eq!(verify(&id, &secret, &content, &jws), Ok(()));
        }

        #[test]
        fn any_change_to_content_is_rejected(secret in "[a-z0-9]{16}",
                                             content in proptest::collection::vec(any::<u8>(), 1..256),
                                             index in any::<proptest::sample::Index>(), bit in 0u8..8) {
            let jws = sign("abcdef", &secret, &content);
            let mut changed = content.clone();
            changed[index.index(content.len())] ^= 1 << bit;
            prop_assert!(verify("abcdef", &secret, &changed, &jws).is_err());
        }

        #[test]
        fn any_change_to_the_signature_string_is_rejected(secret in "[a-z0-9]{16}",
                                                          index in any::<proptest::sample::Index>(),
                                                          replacement in "[A-Za-z0-9_.-]") {
            let jws = sign("abcdef", &secret, b"kubeconfig");
            let i = index.index(jws.len());
            let mut changed = jws.clone();
            changed.replace_range(i..=i, &replacement);
            prop_assume!(changed != jws);
            prop_assert!(verify("abcdef", &secret, b"kubeconfig", &changed).is_err());
        }

        #[test]
        fn another_token_id_or_secret_is_rejected(secret in "[a-z0-9]{16}", other in "[a-z0-9]{16}",
                                                  id in "[a-z0-9]{6}", other_id in "[a-z0-9]{6}") {
            let jws = sign(&id, &secret, b"kubeconfig");
            prop_assume!(secret != other && id != other_id);
            prop_assert!(verify(&id, &other, b"kubeconfig", &jws).is_err());
            prop_assert!(verify(&other_id, &secret, b"kubeconfig", &jws).is_err());
        }
    }
}
