//! The join line around a new token: where a node joins and how it recognises the cluster
//! (`token create --print-join-command` prints it; the join-token API answers with it and
//! with the cloud-init document built from the same target).

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kubeflavor_core::crypto::pin::CaPin;
use kubeflavor_core::token::BootstrapToken;

use super::MintError;
use crate::connect::Cluster;
use kubeflavor_core::join::discovery::{CLUSTER_INFO_NAME, CLUSTER_INFO_NAMESPACE, KUBECONFIG_KEY};

/// Where a node joins and how it recognises the cluster: what `token create
/// --print-join-command` prints around the token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JoinTarget {
    /// `host:port` of the API server.
    pub endpoint: String,
    /// One pin per CA certificate (kubeadm prints one flag per CA; any match passes).
    pub pins: Vec<CaPin>,
}

/// The server and CA as cluster-info publishes them (what a joining node will see), or,
/// when the cluster has no cluster-info, as the admin's kubeconfig knows them.
pub async fn join_target(cluster: &Cluster) -> Result<JoinTarget, MintError> {
    let api: Api<ConfigMap> = Api::namespaced(cluster.client.clone(), CLUSTER_INFO_NAMESPACE);
    let published = match api.get_opt(CLUSTER_INFO_NAME).await {
        Ok(cm) => cm
            .and_then(|cm| cm.data)
            .and_then(|mut d| d.remove(KUBECONFIG_KEY)),
        // Reading kube-public is a courtesy; an admin without it still has the kubeconfig.
        Err(kube::Error::Api(s)) if s.code == 403 => None,
        Err(err) => return Err(MintError::api("read kube-public/cluster-info")(err)),
    };
    let (server, ca_certs_der) = match published {
        Some(text) => {
            let info = kubeflavor_core::join::kubeconfig::ClusterInfo::from_kubeconfig(&text).map_err(|e| {
                MintError::JoinTarget {
                    problem: format!("kube-public/cluster-info's kubeconfig is not usable: {e}"),
                    fix: "recreate it (kubeadm init phase bootstrap-token) or fix its kubeconfig key",
                }
            })?;
            (info.server, info.ca_certs_der)
        }
        None => (cluster.origin.server.clone(), cluster.ca_certs_der.clone()),
    };
    if ca_certs_der.is_empty() {
        return Err(MintError::JoinTarget {
            problem: "cannot print a join command: the cluster has no kube-public/cluster-info and the kubeconfig names no CA certificate".into(),
            fix: "use a kubeconfig with certificate-authority-data, or create cluster-info (kubeadm init phase bootstrap-token)",
        });
    }
    let pins = ca_certs_der
        .iter()
        .map(|der| CaPin::from_cert_der(der))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| MintError::JoinTarget {
            problem: format!("the cluster CA certificate is unusable: {e}"),
            fix: "check the cluster's CA",
        })?;
    let endpoint = endpoint_of(&server).map_err(|problem| MintError::JoinTarget {
        problem,
        fix: "check the server URL in cluster-info or the kubeconfig",
    })?;
    Ok(JoinTarget { endpoint, pins })
}

/// `https://host:port[/]` -> `host:port` (kubeadm join takes no scheme).
fn endpoint_of(server: &str) -> Result<String, String> {
    let uri: http::Uri = server
        .parse()
        .map_err(|e| format!("server {server:?} is not a URL: {e}"))?;
    if uri.scheme_str() != Some("https") || !matches!(uri.path(), "" | "/") {
        return Err(format!("server {server:?} is not an https://host:port URL"));
    }
    let authority = uri
        .authority()
        .ok_or_else(|| format!("server {server:?} has no host"))?;
    Ok(match authority.port_u16() {
        Some(_) => authority.to_string(),
        None => format!("{authority}:443"),
    })
}

/// The join line. It carries the token: whoever shows it does so once, and the buffer is
/// wiped afterwards.
pub fn join_command_line(
    target: &JoinTarget,
    token: &BootstrapToken,
) -> zeroize::Zeroizing<String> {
    let mut line = zeroize::Zeroizing::new(format!(
        "kubeadm join {} --token {}",
        target.endpoint,
        token.expose().as_str()
    ));
    for pin in &target.pins {
        line.push_str(&format!(" --discovery-token-ca-cert-hash {pin}"));
    }
    line.push('\n');
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn join_line_has_kubeadm_shape_with_one_flag_per_ca() {
        let pin_a: CaPin = format!("sha256:{}", "a".repeat(64)).parse().unwrap();
        let pin_b: CaPin = format!("sha256:{}", "b".repeat(64)).parse().unwrap();
        let token: BootstrapToken = "abcdef.0123456789abcdef".parse().unwrap();
        let target = JoinTarget {
            endpoint: "192.0.2.10:6443".into(),
            pins: vec![pin_a, pin_b],
        };
        assert_eq!(
            join_command_line(&target, &token).as_str(),
            format!(
                "kubeadm join 192.0.2.10:6443 --token abcdef.0123456789abcdef --discovery-token-ca-cert-hash sha256:{} --discovery-token-ca-cert-hash sha256:{}\n",
                "a".repeat(64),
                "b".repeat(64)
            )
        );
    }

    #[test]
    fn endpoint_is_the_servers_host_and_port() {
        assert_eq!(
            endpoint_of("https://192.0.2.10:6443").unwrap(),
            "192.0.2.10:6443"
        );
        assert_eq!(
            endpoint_of("https://cp.example.com:6443/").unwrap(),
            "cp.example.com:6443"
        );
        assert_eq!(
            endpoint_of("https://[2001:db8::1]:6443").unwrap(),
            "[2001:db8::1]:6443"
        );
        assert_eq!(
            endpoint_of("https://cp.example.com").unwrap(),
            "cp.example.com:443"
        );
        assert!(endpoint_of("http://cp.example.com:8080").is_err());
        assert!(endpoint_of("https://cp.example.com:6443/k8s").is_err());
    }
}
