//! The PKI of an authorization webhook as tests and benchmarks make it: a CA, the
//! webhook's serving certificate and the API server's client certificate, both signed by
//! it (the webhook requires that client certificate, by CA and CN).

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
};

/// PEM texts: the CA, and (certificate, key) of the server and of the client.
pub struct WebhookPki {
    pub ca_pem: String,
    pub server: (String, String),
    pub client: (String, String),
}

/// A fresh CA named `ca_name`, a serving certificate for `server_names` and a client
/// certificate with CN `client_cn`.
pub fn webhook_pki(ca_name: &str, server_names: Vec<String>, client_cn: &str) -> WebhookPki {
    let ca_key = KeyPair::generate().expect("a key");
    let mut ca = CertificateParams::new(Vec::<String>::new()).expect("params");
    ca.distinguished_name.push(DnType::CommonName, ca_name);
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_pem = ca.self_signed(&ca_key).expect("the CA").pem();
    let issuer = Issuer::new(ca, ca_key);
    let leaf = |names: Vec<String>, cn: &str, usage| {
        let key = KeyPair::generate().expect("a key");
        let mut p = CertificateParams::new(names).expect("params");
        p.distinguished_name.push(DnType::CommonName, cn);
        p.extended_key_usages = vec![usage];
        (
            p.signed_by(&key, &issuer).expect("signed").pem(),
            key.serialize_pem(),
        )
    };
    let server_cn = server_names.first().cloned().unwrap_or_default();
    WebhookPki {
        ca_pem,
        server: leaf(
            server_names,
            &server_cn,
            ExtendedKeyUsagePurpose::ServerAuth,
        ),
        client: leaf(vec![], client_cn, ExtendedKeyUsagePurpose::ClientAuth),
    }
}
