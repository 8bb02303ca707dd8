//! A cloud-init user-data document that joins a machine to the cluster on its first boot,
//! for operators who hand join tokens to VMs rather than to people.
//!
//! The token goes into a kubeadm `JoinConfiguration` file readable by root only, which
//! `runcmd` passes to `kubeadm join --config` and then removes: the token never appears on
//! a command line (where `ps` and cloud-init's own logs would show it).
//!
//! The node registers tainted [`UNVERIFIED_TAINT`]`:NoSchedule`, as with `kubeflavor join`:
//! no ordinary pod lands on it until the controller has flavored it (and removed the taint).

use zeroize::Zeroizing;

use crate::flavor::UNVERIFIED_TAINT;
use crate::pin::CaPin;
use crate::token::BootstrapToken;

/// Where the join configuration is written on the machine.
pub const JOIN_CONFIG_PATH: &str = "/etc/kubeflavor/join.yaml";

/// A YAML double-quoted scalar: a JSON string is one.
fn quoted(s: &str) -> String {
    serde_json::to_string(s).expect("a string serialises")
}

/// The `#cloud-config` document joining the API server at `endpoint` (`host:port`) with
/// `token`, trusting the CA whose public key matches one of `pins`. It carries the token:
/// the buffer is wiped when dropped.
pub fn user_data(endpoint: &str, token: &BootstrapToken, pins: &[CaPin]) -> Zeroizing<String> {
    let mut doc = Zeroizing::new(String::new());
    doc.push_str("#cloud-config\n");
    doc.push_str(&format!(
        "# Joins this machine to the Kubernetes cluster at {endpoint} on first boot. The join\n\
         # configuration holds a bootstrap token: root-only, and removed once kubeadm has run.\n"
    ));
    doc.push_str("write_files:\n");
    doc.push_str(&format!("  - path: {JOIN_CONFIG_PATH}\n"));
    doc.push_str("    owner: root:root\n");
    doc.push_str("    permissions: \"0600\"\n");
    doc.push_str("    content: |\n");
    doc.push_str("      apiVersion: kubeadm.k8s.io/v1beta4\n");
    doc.push_str("      kind: JoinConfiguration\n");
    // kubeadm hands these to the kubelet (--register-with-taints). Set, they are the whole
    // list: for a worker that replaces kubeadm's default of none (v1beta4
    // NodeRegistrationOptions.Taints).
    doc.push_str("      nodeRegistration:\n");
    doc.push_str("        taints:\n");
    doc.push_str(&format!("          - key: {}\n", quoted(UNVERIFIED_TAINT)));
    doc.push_str("            effect: NoSchedule\n");
    doc.push_str("      discovery:\n");
    doc.push_str("        bootstrapToken:\n");
    doc.push_str(&format!(
        "          apiServerEndpoint: {}\n",
        quoted(endpoint)
    ));
    doc.push_str(&format!(
        "          token: {}\n",
        quoted(token.expose().as_str())
    ));
    doc.push_str("          caCertHashes:\n");
    for pin in pins {
        doc.push_str(&format!("            - {}\n", quoted(&pin.to_string())));
    }
    doc.push_str("runcmd:\n");
    doc.push_str(&format!(
        "  - [kubeadm, join, --config, {JOIN_CONFIG_PATH}]\n"
    ));
    doc.push_str(&format!("  - [rm, -f, {JOIN_CONFIG_PATH}]\n"));
    doc
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    fn pin(c: char) -> CaPin {
        format!("sha256:{}", c.to_string().repeat(64))
            .parse()
            .expect("pin")
    }

    #[test]
    fn the_document_is_cloud_config_yaml_with_a_kubeadm_join_configuration() {
        let token: BootstrapToken = "abcdef.0123456789abcdef".parse().unwrap();
        let doc = user_data("[2001:db8::1]:6443", &token, &[pin('a'), pin('b')]);
        assert!(doc.starts_with("#cloud-config\n"));
        let v: Value = serde_saphyr::from_str(&doc).expect("YAML");
        let file = &v["write_files"][0];
        assert_eq!(file["path"], JOIN_CONFIG_PATH);
        assert_eq!(file["permissions"], "0600");
        let config: Value =
            serde_saphyr::from_str(file["content"].as_str().expect("content")).expect("YAML");
        assert_eq!(config["kind"], "JoinConfiguration");
        assert_eq!(config["apiVersion"], "kubeadm.k8s.io/v1beta4");
        let boot = &config["discovery"]["bootstrapToken"];
        assert_eq!(boot["apiServerEndpoint"], "[2001:db8::1]:6443");
        assert_eq!(boot["token"], "abcdef.0123456789abcdef");
        assert_eq!(
            boot["caCertHashes"],
            serde_json::json!([pin('a').to_string(), pin('b').to_string()])
        );
        assert_eq!(
            v["runcmd"],
            serde_json::json!([
                ["kubeadm", "join", "--config", JOIN_CONFIG_PATH],
                ["rm", "-f", JOIN_CONFIG_PATH]
            ])
        );
    }

    /// kubeadm passes `nodeRegistration.taints` to the kubelet as `--register-with-taints`
    /// (v1beta4 `NodeRegistrationOptions.Taints`: unset means kubeadm's default, none for a
    /// worker; set, it is the whole list), so the Node exists untrusted from its first
    /// moment, as with `kubeflavor join`, until the controller flavors it.
    #[test]
    fn the_node_registers_with_the_unverified_taint_only() {
        let token: BootstrapToken = "abcdef.0123456789abcdef".parse().unwrap();
        let doc = user_data("192.0.2.10:6443", &token, &[pin('d')]);
        let v: Value = serde_saphyr::from_str(&doc).expect("YAML");
        let config: Value =
            serde_saphyr::from_str(v["write_files"][0]["content"].as_str().expect("content"))
                .expect("YAML");
        assert_eq!(
            config["nodeRegistration"],
            serde_json::json!({"taints": [{"key": UNVERIFIED_TAINT, "effect": "NoSchedule"}]})
        );
    }

    #[test]
    fn the_token_is_never_on_a_command_line() {
        let token: BootstrapToken = "abcdef.0123456789abcdef".parse().unwrap();
        let doc = user_data("192.0.2.10:6443", &token, &[pin('c')]);
        let v: Value = serde_saphyr::from_str(&doc).expect("YAML");
        assert!(!v["runcmd"].to_string().contains("0123456789abcdef"));
    }
}
