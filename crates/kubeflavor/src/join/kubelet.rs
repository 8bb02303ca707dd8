//! What join gives the kubelet: the flags to start it with and the KubeletConfiguration
//! it reads, both checked against upstream's v1.36 kubelet (no deprecated flag).

use std::path::Path;

use kubeflavor_core::names::NodeName;

use super::{BOOTSTRAP_KUBELET_CONF, KUBELET_CONF, KUBELET_CONFIG};

/// The flags that make the kubelet use what join wrote. Only flags upstream's kubelet
/// keeps as flags (its `KubeletFlags`, none deprecated as of v1.36); what is a
/// KubeletConfiguration field (certificate rotation, the registration taint) is in the
/// file `--config` names, [`kubelet_config`].
pub fn kubelet_flags(kubelet_dir: &Path, node_name: &NodeName) -> Vec<String> {
    vec![
        format!("--config={}", kubelet_dir.join(KUBELET_CONFIG).display()),
        format!(
            "--bootstrap-kubeconfig={}",
            kubelet_dir.join(BOOTSTRAP_KUBELET_CONF).display()
        ),
        format!("--kubeconfig={}", kubelet_dir.join(KUBELET_CONF).display()),
        format!("--hostname-override={node_name}"),
    ]
}

/// The KubeletConfiguration join writes to [`KUBELET_CONFIG`]: client certificate rotation
/// (renewals are CSRs kubeflavor's controller decides on), registration with the
/// `kubeflavor.io/unverified:NoSchedule` taint, and the cluster CA (`client_ca`) as the CA
/// of clients the kubelet's own API accepts (the API server's, for logs and exec; with a
/// config file the kubelet refuses anonymous requests). Everything else keeps the kubelet's
/// KubeletConfiguration defaults. No secret: written with mode 0644.
pub fn kubelet_config(client_ca: &Path) -> String {
    format!(
        "\
# Written by `kubeflavor join`; the kubelet reads it through --config.
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# Renew the node's client certificate with CSRs (kubeflavor's controller decides on them).
rotateCertificates: true
# Register the Node untrusted; the controller removes the taint when it flavors the node.
registerWithTaints:
  - key: {key}
    effect: NoSchedule
# Accept the API server's client certificate (kubectl logs, exec), issued by the cluster CA.
authentication:
  x509:
    clientCAFile: {ca}
",
        key = kubeflavor_core::flavor::UNVERIFIED_TAINT,
        ca = serde_json::to_string(&client_ca.display().to_string()).expect("a string serializes"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::join::UNVERIFIED_TAINT;

    #[test]
    fn kubelet_flags_use_what_join_wrote() {
        let flags = kubelet_flags(Path::new("/etc/kubernetes"), &"worker-1".parse().unwrap());
        assert_eq!(
            flags,
            [
                "--config=/etc/kubernetes/kubelet-config.yaml",
                "--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf",
                "--kubeconfig=/etc/kubernetes/kubelet.conf",
                "--hostname-override=worker-1",
            ]
        );
    }

    /// Rotation and the untrusted registration moved from flags to the config file: the
    /// file must say so in the kubelet's own schema.
    #[test]
    fn kubelet_config_rotates_certificates_and_registers_untrusted() {
        let ca = Path::new("/etc/kubernetes/pki/ca.crt");
        let config: serde_json::Value = serde_saphyr::from_str(&kubelet_config(ca)).unwrap();
        assert_eq!(
            config,
            serde_json::json!({
                "apiVersion": "kubelet.config.k8s.io/v1beta1",
                "kind": "KubeletConfiguration",
                "rotateCertificates": true,
                "registerWithTaints": [
                    {"key": "kubeflavor.io/unverified", "effect": "NoSchedule"},
                ],
                "authentication": {"x509": {"clientCAFile": "/etc/kubernetes/pki/ca.crt"}},
            })
        );
        // The same taint as the flag notation kubeflavor documents elsewhere.
        assert_eq!(UNVERIFIED_TAINT, "kubeflavor.io/unverified=:NoSchedule");
    }

    /// Flags a v1.36 kubelet warns about, from upstream kubernetes/kubernetes
    /// cmd/kubelet/app/options/options.go (read at commit 6785e9ed401a, a version with
    /// --config-dir): every flag `AddKubeletConfigFlags` registers is marked deprecated
    /// ("This parameter should be set via the config file specified by the Kubelet's
    /// --config flag") except v, vmodule, log-flush-frequency and provider-id; the
    /// remaining ones are `KubeletFlags` with an explicit `fs.MarkDeprecated`.
    const UPSTREAM_DEPRECATED_KUBELET_FLAGS: &[&str] = &[
        // AddKubeletConfigFlags: KubeletConfiguration fields.
        "enable-server",
        "fail-swap-on",
        "pod-manifest-path",
        "sync-frequency",
        "file-check-frequency",
        "http-check-frequency",
        "manifest-url",
        "manifest-url-header",
        "address",
        "port",
        "read-only-port",
        "container-runtime-endpoint",
        "image-service-endpoint",
        "anonymous-auth",
        "authentication-token-webhook",
        "authentication-token-webhook-cache-ttl",
        "client-ca-file",
        "authorization-mode",
        "authorization-webhook-cache-authorized-ttl",
        "authorization-webhook-cache-unauthorized-ttl",
        "tls-cert-file",
        "tls-private-key-file",
        "rotate-server-certificates",
        "tls-cipher-suites",
        "tls-min-version",
        "rotate-certificates",
        "registry-qps",
        "registry-burst",
        "event-qps",
        "event-burst",
        "enable-debugging-handlers",
        "contention-profiling",
        "healthz-port",
        "healthz-bind-address",
        "oom-score-adj",
        "cluster-domain",
        "volume-plugin-dir",
        "cluster-dns",
        "streaming-connection-idle-timeout",
        "node-status-update-frequency",
        "minimum-image-ttl-duration",
        "image-gc-high-threshold",
        "image-gc-low-threshold",
        "volume-stats-agg-period",
        "feature-gates",
        "kubelet-cgroups",
        "system-cgroups",
        "cgroups-per-qos",
        "cgroup-driver",
        "cgroup-root",
        "cpu-manager-policy",
        "cpu-manager-policy-options",
        "cpu-manager-reconcile-period",
        "qos-reserved",
        "topology-manager-policy",
        "runtime-request-timeout",
        "hairpin-mode",
        "max-pods",
        "pod-cidr",
        "pod-max-pids",
        "resolv-conf",
        "runonce",
        "cpu-cfs-quota",
        "cpu-cfs-quota-period",
        "enable-controller-attach-detach",
        "make-iptables-util-chains",
        "iptables-masquerade-bit",
        "iptables-drop-bit",
        "container-log-max-size",
        "container-log-max-files",
        "allowed-unsafe-sysctls",
        "node-status-max-images",
        "kernel-memcg-notification",
        "local-storage-capacity-isolation",
        "max-open-files",
        "kube-api-content-type",
        "kube-api-qps",
        "kube-api-burst",
        "serialize-image-pulls",
        "eviction-hard",
        "eviction-soft",
        "eviction-soft-grace-period",
        "eviction-pressure-transition-period",
        "eviction-max-pod-grace-period",
        "eviction-minimum-reclaim",
        "pods-per-core",
        "protect-kernel-defaults",
        "reserved-cpus",
        "topology-manager-scope",
        "topology-manager-policy-options",
        "system-reserved",
        "kube-reserved",
        "enforce-node-allocatable",
        "system-reserved-cgroup",
        "kube-reserved-cgroup",
        "logging-format",
        "memory-manager-policy",
        "reserved-memory",
        "register-node",
        "register-with-taints",
        // KubeletFlags.AddFlags: explicit fs.MarkDeprecated.
        "minimum-container-ttl-duration",
        "maximum-dead-containers-per-container",
        "maximum-dead-containers",
        "register-schedulable",
        "keep-terminated-pod-volumes",
        "experimental-mounter-path",
        "cloud-config",
        "experimental-allocatable-ignore-eviction",
    ];

    /// The undeprecated `KubeletFlags` of the same file (flags whose value is per node or
    /// fixed for the node's life, which upstream keeps off the shared config file).
    const UPSTREAM_KUBELET_FLAGS: &[&str] = &[
        "config",
        "config-dir",
        "kubeconfig",
        "bootstrap-kubeconfig",
        "hostname-override",
        "node-ip",
        "cert-dir",
        "cloud-provider",
        "root-dir",
        "seccomp-default",
        "node-labels",
        "lock-file",
        "exit-on-lock-contention",
    ];

    #[test]
    fn no_printed_kubelet_flag_is_deprecated_upstream() {
        let flags = kubelet_flags(Path::new("/etc/kubernetes"), &"worker-1".parse().unwrap());
        for flag in &flags {
            let name = flag
                .strip_prefix("--")
                .and_then(|f| f.split('=').next())
                .unwrap_or_else(|| panic!("{flag:?} is not a long flag"));
            assert!(
                !UPSTREAM_DEPRECATED_KUBELET_FLAGS.contains(&name),
                "--{name} is deprecated in the kubelet: put it in the --config file"
            );
            assert!(
                UPSTREAM_KUBELET_FLAGS.contains(&name),
                "--{name} is not one of the kubelet's undeprecated KubeletFlags"
            );
        }
    }
}
