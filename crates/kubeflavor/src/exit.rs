//! Process exit codes. Scripts can tell "the flavor does not exist" from "the cluster is
//! down" without parsing messages.

/// Every exit status `kubeflavor` uses, and what it means.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum ExitCode {
    /// The command did what it was asked.
    Ok = 0,
    /// Any failure without a more specific code.
    Error = 1,
    /// The command line itself is wrong: unknown flag, missing argument (clap's convention).
    Usage = 2,
    /// A named object does not exist (a flavor, a token).
    NotFound = 3,
    /// The input is well-formed but refused: a label key a kubelet could write, a zero
    /// `--max-nodes`, a flavor still in use, a value the API server's validation rejected.
    Refused = 4,
    /// The API server could not be reached (connection refused, DNS, TLS handshake).
    Unreachable = 5,
    /// The API server refused the caller: 403 (missing RBAC permission) or 401.
    Forbidden = 6,
    /// `join`: the --token value is not a bootstrap token.
    JoinMalformedToken = 10,
    /// `join`: a --discovery-token-ca-cert-hash value is not `sha256:<64 hex>`.
    JoinMalformedPin = 11,
    /// `join`: no CA pin, and the unsafe skip was not asked for.
    JoinPinRequired = 12,
    /// `join`: the cluster CA does not match the pin, the CA-verified re-read of
    /// cluster-info failed or differed, or cluster-info's signature for the token's id does
    /// not verify with its secret (a wrong secret, or tampering): possibly an attack.
    JoinCaMismatch = 13,
    /// `join`: the token is invalid or expired (no signature for its id in cluster-info, or
    /// the API server refused it).
    JoinTokenInvalid = 14,
    /// `join`: the cluster refused this node (its CSR was denied).
    JoinNodeRefused = 15,
    /// `join`: the kubelet directory is not writable, or the node already joined (or is
    /// joining: a bootstrap-kubelet.conf is there).
    JoinKubeletDir = 16,
    // `certs`: each failure of the certificate hand-off (P5) or of writing the PKI all or
    // nothing (P6, nothing lost) has its own code.
    /// `--certificate-key` is not 64 hexadecimal characters.
    CertificateKeyMalformed = 20,
    /// The key check entry did not decrypt: not the key of this upload.
    CertificateKeyWrong = 21,
    /// An entry of kubeadm-certs was changed after the upload.
    CertsTampered = 22,
    /// Entries of kubeadm-certs were swapped, replaced, do not match each other, or cannot
    /// serve their use (a ca.crt that is no CA, expired, or holds a second certificate).
    CertsSwapped = 23,
    /// An entry of kubeadm-certs is missing.
    CertsEntryMissing = 24,
    /// kube-system/kubeadm-certs is missing or expired.
    CertsSecretGone = 25,
    /// A file of the PKI directory cannot be read, or is a symbolic link inside it.
    PkiUnreadable = 26,
    /// The PKI files are not a consistent, usable set (a key that does not match its
    /// certificate, a ca.crt that is no CA).
    PkiInconsistent = 27,
    /// The target PKI directory cannot be written, or holds a symbolic link.
    PkiUnwritable = 28,
    /// Existing PKI files differ from the downloaded ones (use --force).
    PkiConflict = 29,
    /// A Secret without kubeflavor's key check did not decrypt: wrong key or tampered.
    CertsWrongKeyOrTampered = 30,
    /// A kubeadm-certs Secret without kubeflavor's key check, not accepted explicitly.
    CertsNotFromKubeflavor = 31,
}

impl ExitCode {
    pub fn code(self) -> u8 {
        self as u8
    }
}

impl From<ExitCode> for std::process::ExitCode {
    fn from(code: ExitCode) -> Self {
        std::process::ExitCode::from(code.code())
    }
}
