//! The kubeadm-certs Secret layout: which PKI file goes under which data key.
//!
//! kubeadm's data key is the path relative to the PKI dir with `/` replaced by `-`
//! (`etcd/ca.crt` -> `etcd-ca.crt`). With external etcd, kubeadm stores the client files
//! under fixed names and writes them on download to the paths in the joining node's
//! configuration; [`PkiEntry::rel_path`] gives the conventional kubeadm locations.

use std::fmt;

use crate::crypto::pki::{MODE_PRIVATE_KEY, MODE_PUBLIC};

/// Which etcd set a Secret carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EtcdMode {
    /// Stacked etcd: `etcd-ca.crt`, `etcd-ca.key`.
    Local,
    /// External etcd: `external-etcd-ca.crt`, `external-etcd.crt`, `external-etcd.key`.
    External,
}

/// What a file holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PkiEntryKind {
    Certificate,
    PrivateKey,
    PublicKey,
}

impl fmt::Display for PkiEntryKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Certificate => "a certificate",
            Self::PrivateKey => "a private key",
            Self::PublicKey => "a public key",
        })
    }
}

/// One file of the kubeadm-certs set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PkiEntry {
    CaCert,
    CaKey,
    FrontProxyCaCert,
    FrontProxyCaKey,
    ServiceAccountPublicKey,
    ServiceAccountKey,
    EtcdCaCert,
    EtcdCaKey,
    ExternalEtcdCaCert,
    ExternalEtcdCert,
    ExternalEtcdKey,
}

const COMMON: [PkiEntry; 6] = [
    PkiEntry::CaCert,
    PkiEntry::CaKey,
    PkiEntry::FrontProxyCaCert,
    PkiEntry::FrontProxyCaKey,
    PkiEntry::ServiceAccountPublicKey,
    PkiEntry::ServiceAccountKey,
];
const LOCAL: [PkiEntry; 8] = [
    COMMON[0],
    COMMON[1],
    COMMON[2],
    COMMON[3],
    COMMON[4],
    COMMON[5],
    PkiEntry::EtcdCaCert,
    PkiEntry::EtcdCaKey,
];
const EXTERNAL: [PkiEntry; 9] = [
    COMMON[0],
    COMMON[1],
    COMMON[2],
    COMMON[3],
    COMMON[4],
    COMMON[5],
    PkiEntry::ExternalEtcdCaCert,
    PkiEntry::ExternalEtcdCert,
    PkiEntry::ExternalEtcdKey,
];
const ALL: [PkiEntry; 11] = [
    COMMON[0],
    COMMON[1],
    COMMON[2],
    COMMON[3],
    COMMON[4],
    COMMON[5],
    PkiEntry::EtcdCaCert,
    PkiEntry::EtcdCaKey,
    PkiEntry::ExternalEtcdCaCert,
    PkiEntry::ExternalEtcdCert,
    PkiEntry::ExternalEtcdKey,
];

impl PkiEntry {
    /// The entries kubeadm writes for an etcd mode, in kubeadm's order.
    pub fn set(mode: EtcdMode) -> &'static [PkiEntry] {
        match mode {
            EtcdMode::Local => &LOCAL,
            EtcdMode::External => &EXTERNAL,
        }
    }

    /// Every entry of both sets.
    pub fn all() -> &'static [PkiEntry] {
        &ALL
    }

    /// The Secret data key.
    pub fn data_key(self) -> &'static str {
        match self {
            Self::CaCert => "ca.crt",
            Self::CaKey => "ca.key",
            Self::FrontProxyCaCert => "front-proxy-ca.crt",
            Self::FrontProxyCaKey => "front-proxy-ca.key",
            Self::ServiceAccountPublicKey => "sa.pub",
            Self::ServiceAccountKey => "sa.key",
            Self::EtcdCaCert => "etcd-ca.crt",
            Self::EtcdCaKey => "etcd-ca.key",
            Self::ExternalEtcdCaCert => "external-etcd-ca.crt",
            Self::ExternalEtcdCert => "external-etcd.crt",
            Self::ExternalEtcdKey => "external-etcd.key",
        }
    }

    /// The entry stored under a data key.
    pub fn from_data_key(key: &str) -> Option<PkiEntry> {
        ALL.iter().copied().find(|e| e.data_key() == key)
    }

    /// Path relative to the PKI dir. For the external etcd files these are the locations
    /// kubeadm's documentation uses for `etcd.external.{caFile,certFile,keyFile}`.
    pub fn rel_path(self) -> &'static str {
        match self {
            Self::EtcdCaCert | Self::ExternalEtcdCaCert => "etcd/ca.crt",
            Self::EtcdCaKey => "etcd/ca.key",
            Self::ExternalEtcdCert => "apiserver-etcd-client.crt",
            Self::ExternalEtcdKey => "apiserver-etcd-client.key",
            other => other.data_key(),
        }
    }

    /// What the file holds.
    pub fn kind(self) -> PkiEntryKind {
        match self {
            Self::CaKey
            | Self::FrontProxyCaKey
            | Self::ServiceAccountKey
            | Self::EtcdCaKey
            | Self::ExternalEtcdKey => PkiEntryKind::PrivateKey,
            Self::ServiceAccountPublicKey => PkiEntryKind::PublicKey,
            _ => PkiEntryKind::Certificate,
        }
    }

    /// kubeadm's file mode: 0600 for private keys, 0644 otherwise.
    pub fn mode(self) -> u32 {
        match self.kind() {
            PkiEntryKind::PrivateKey => MODE_PRIVATE_KEY,
            _ => MODE_PUBLIC,
        }
    }

    /// What the file is used for on a control-plane node, for error messages.
    pub fn purpose(self) -> &'static str {
        match self {
            Self::CaCert => "the cluster CA certificate",
            Self::FrontProxyCaCert => "the front-proxy CA certificate",
            Self::EtcdCaCert => "the etcd CA certificate",
            Self::ExternalEtcdCaCert => "the external etcd's CA certificates",
            Self::ExternalEtcdCert => "the API server's etcd client certificate",
            Self::ServiceAccountPublicKey => "the service-account public key",
            Self::CaKey
            | Self::FrontProxyCaKey
            | Self::ServiceAccountKey
            | Self::EtcdCaKey
            | Self::ExternalEtcdKey => "a private key",
        }
    }

    /// For a private key, the certificate or public key it must match.
    pub fn partner(self) -> Option<PkiEntry> {
        match self {
            Self::CaKey => Some(Self::CaCert),
            Self::FrontProxyCaKey => Some(Self::FrontProxyCaCert),
            Self::ServiceAccountKey => Some(Self::ServiceAccountPublicKey),
            Self::EtcdCaKey => Some(Self::EtcdCaCert),
            Self::ExternalEtcdKey => Some(Self::ExternalEtcdCert),
            _ => None,
        }
    }
}

impl fmt::Display for PkiEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.data_key())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_keys_are_paths_with_slashes_replaced() {
        for entry in PkiEntry::set(EtcdMode::Local) {
            assert_eq!(entry.data_key(), entry.rel_path().replace('/', "-"));
        }
    }

    #[test]
    fn kubeadm_sets_and_modes() {
        let keys = |m| {
            PkiEntry::set(m)
                .iter()
                .map(|e| e.data_key())
                .collect::<Vec<_>>()
        };
        assert_eq!(
            keys(EtcdMode::Local),
            [
                "ca.crt",
                "ca.key",
                "front-proxy-ca.crt",
                "front-proxy-ca.key",
                "sa.pub",
                "sa.key",
                "etcd-ca.crt",
                "etcd-ca.key"
            ]
        );
        assert_eq!(
            keys(EtcdMode::External)[6..],
            [
                "external-etcd-ca.crt",
                "external-etcd.crt",
                "external-etcd.key"
            ]
        );
        assert_eq!(PkiEntry::CaKey.mode(), 0o600);
        assert_eq!(PkiEntry::ServiceAccountPublicKey.mode(), 0o644);
        assert_eq!(PkiEntry::EtcdCaCert.mode(), 0o644);
        for e in PkiEntry::all() {
            assert_eq!(PkiEntry::from_data_key(e.data_key()), Some(*e));
            assert_eq!(e.partner().is_some(), e.kind() == PkiEntryKind::PrivateKey);
        }
    }
}
