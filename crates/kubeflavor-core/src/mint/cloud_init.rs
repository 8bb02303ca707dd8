//! A cloud-init user-data document that joins a machine to the cluster on its first boot,
//! for operators who hand join tokens to VMs rather than to people.
//!
//! The token goes into a kubeadm `JoinConfiguration` file readable by root only, which
//! `runcmd` passes to `kubeadm join --config` and then removes: the token never appears on
//! a command line (where `ps` and cloud-init's own logs would show it).
//!
//! The node registers tainted [`UNVERIFIED_TAINT`]`:NoSchedule`, as with `kubeflavor join`:
//! no ordinary pod lands on it until the controller has flavored it (and removed the taint).
//!
//! SSH keys given for the machine go to cloud-init's top-level `ssh_authorized_keys`,
//! which installs them for the image's default user. Each is written as the canonical line
//! of a parsed [`SshPublicKey`], in a double-quoted scalar: nothing from the request
//! reaches the document as YAML syntax or as a second authorized_keys line.

use zeroize::Zeroizing;

use crate::crypto::pin::CaPin;
use crate::flavor::UNVERIFIED_TAINT;
use crate::mint::ssh_key::SshPublicKey;
use crate::token::BootstrapToken;

/// Where the join configuration is written on the machine.
pub const JOIN_CONFIG_PATH: &str = "/etc/kubeflavor/join.yaml";

/// A YAML double-quoted scalar: a JSON string is one.
fn quoted(s: &str) -> String {
    serde_json::to_string(s).expect("a string serialises")
}

/// The `#cloud-config` document joining the API server at `endpoint` (`host:port`) with
/// `token`, trusting the CA whose public key matches one of `pins`. It carries the token:
/// the buffer is wiped when dropped. `ssh_keys`, if any, are installed for the image's
/// default user; without them the document has no `ssh_authorized_keys` at all.
pub fn user_data(
    endpoint: &str,
    token: &BootstrapToken,
    pins: &[CaPin],
    ssh_keys: &[SshPublicKey],
) -> Zeroizing<String> {
    let mut doc = Zeroizing::new(String::new());
    doc.push_str("#cloud-config\n");
    doc.push_str(&format!(
        "# Joins this machine to the Kubernetes cluster at {endpoint} on first boot. The join\n\
         # configuration holds a bootstrap token: root-only, and removed once kubeadm has run.\n"
    ));
    if !ssh_keys.is_empty() {
        doc.push_str("# SSH keys installed for the image's default user.\n");
        doc.push_str("ssh_authorized_keys:\n");
        for key in ssh_keys {
            doc.push_str(&format!("  - {}\n", quoted(&key.to_string())));
        }
    }
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
        let doc = user_data("[2001:db8::1]:6443", &token, &[pin('a'), pin('b')], &[]);
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
        let doc = user_data("192.0.2.10:6443", &token, &[pin('d')], &[]);
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
        let doc = user_data("192.0.2.10:6443", &token, &[pin('c')], &[]);
        let v: Value = serde_saphyr::from_str(&doc).expect("YAML");
        assert!(!v["runcmd"].to_string().contains("0123456789abcdef"));
    }

    /// The document as it was before SSH keys existed, byte for byte: a mint without keys
    /// hands out exactly what it did.
    const WITHOUT_KEYS: &str = r#"#cloud-config
# Joins this machine to the Kubernetes cluster at 192.0.2.10:6443 on first boot. The join
# configuration holds a bootstrap token: root-only, and removed once kubeadm has run.
write_files:
  - path: /etc/kubeflavor/join.yaml
    owner: root:root
    permissions: "0600"
    content: |
      apiVersion: kubeadm.k8s.io/v1beta4
      kind: JoinConfiguration
      nodeRegistration:
        taints:
          - key: "kubeflavor.io/unverified"
            effect: NoSchedule
      discovery:
        bootstrapToken:
          apiServerEndpoint: "192.0.2.10:6443"
          token: "abcdef.0123456789abcdef"
          caCertHashes:
            - "sha256:0000000000000000000000000000000000000000000000000000000000000000"
runcmd:
  - [kubeadm, join, --config, /etc/kubeflavor/join.yaml]
  - [rm, -f, /etc/kubeflavor/join.yaml]
"#;

    const ED25519: &str =
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAID+0lgOSrsnOWjEuQ1dz93pw8CBgeAOVFgwIhwItULwX";
    const ECDSA_P256: &str = "ecdsa-sha2-nistp256 AAAAE2VjZHNhLXNoYTItbmlzdHAyNTYAAAAIbmlzdHAyNTYAAABBBD29e5DCjIoY8lj3UG7bstFu/yFtVkC3ZD8bTd3a39VsSZ1/cUZ+B6DyKzYj+VkUPoPzrqhpVXqAWRY7HbTfiQk=";

    fn sample(ssh_keys: &[SshPublicKey]) -> Zeroizing<String> {
        let token: BootstrapToken = "abcdef.0123456789abcdef".parse().unwrap();
        user_data("192.0.2.10:6443", &token, &[pin('0')], ssh_keys)
    }

    /// Keys whose comments hold what YAML and authorized_keys would read as syntax.
    fn keys() -> Vec<SshPublicKey> {
        [
            format!("{ED25519} alice@laptop"),
            format!(r#"{ECDSA_P256} "x": # - [y] \ z'"#),
            ED25519.replace("AAAAID+0", "AAAAID+1"),
        ]
        .iter()
        .map(|line| line.parse().expect("a valid key"))
        .collect()
    }

    #[test]
    fn without_keys_the_document_is_unchanged() {
        let doc = sample(&[]);
        assert_eq!(doc.as_str(), WITHOUT_KEYS);
        assert!(!doc.contains("ssh_authorized_keys"));
    }

    #[test]
    fn keys_are_cloud_inits_ssh_authorized_keys_as_canonical_lines() {
        let keys = keys();
        let doc = sample(&keys);
        let v: Value = serde_saphyr::from_str(&doc).expect("YAML");
        let lines: Vec<String> = keys.iter().map(|k| k.to_string()).collect();
        assert_eq!(v["ssh_authorized_keys"], serde_json::json!(lines));
        assert_eq!(
            v["ssh_authorized_keys"][1],
            format!(r#"{ECDSA_P256} "x": # - [y] \ z'"#)
        );
        assert!(doc.contains("# SSH keys installed for the image's default user.\n"));
    }

    #[test]
    fn keys_change_nothing_else_in_the_document() {
        let mut with: Value = serde_saphyr::from_str(&sample(&keys())).expect("YAML");
        let without: Value = serde_saphyr::from_str(WITHOUT_KEYS).expect("YAML");
        assert!(
            with.as_object_mut()
                .unwrap()
                .remove("ssh_authorized_keys")
                .is_some()
        );
        assert_eq!(with, without);
    }

    #[test]
    fn with_keys_the_token_is_still_only_in_the_root_only_file() {
        let doc = sample(&keys());
        let v: Value = serde_saphyr::from_str(&doc).expect("YAML");
        assert!(!v["runcmd"].to_string().contains("0123456789abcdef"));
        assert!(
            !v["ssh_authorized_keys"]
                .to_string()
                .contains("0123456789abcdef")
        );
        assert_eq!(doc.matches("0123456789abcdef").count(), 1);
    }
}

/// Every document the join-token API can hand out loads in cloud-init's YAML reader:
/// cloud-init parses user data with PyYAML, whose Reader refuses the whole stream at the
/// first character outside YAML 1.1's printable set (an SSH key comment holding U+FFFE
/// made such a document: the VM never joined).
#[cfg(test)]
mod yaml_reader {
    use super::*;
    use crate::mint::ssh_key::{SshKeyError, SshPublicKey};
    use proptest::prelude::*;

    /// PyYAML's `Reader.check_printable` (yaml/reader.py): `NON_PRINTABLE =
    /// re.compile('[^\x09\x0A\x0D\x20-\x7E\x85\xA0-\uD7FF\uE000-\uFFFD\U00010000-\U0010ffff]')`;
    /// the first match is a ReaderError naming the character and its position. Written from
    /// those ranges, apart from the check the comment parser uses.
    fn pyyaml_reader_check(doc: &str) -> Result<(), (usize, char)> {
        const PRINTABLE: [(u32, u32); 7] = [
            (0x09, 0x0A),
            (0x0D, 0x0D),
            (0x20, 0x7E),
            (0x85, 0x85),
            (0xA0, 0xD7FF),
            (0xE000, 0xFFFD),
            (0x10000, 0x10FFFF),
        ];
        match doc.chars().enumerate().find(|(_, c)| {
            !PRINTABLE
                .iter()
                .any(|&(lo, hi)| (lo..=hi).contains(&u32::from(*c)))
        }) {
            Some((at, c)) => Err((at, c)),
            None => Ok(()),
        }
    }

    fn token() -> BootstrapToken {
        "abcdef.0123456789abcdef".parse().unwrap()
    }

    fn pin() -> CaPin {
        format!("sha256:{}", "0".repeat(64)).parse().unwrap()
    }

    /// The document for a key with `comment`, if the key is accepted.
    fn document(comment: &str) -> Option<Zeroizing<String>> {
        let key = SshPublicKey::ed25519(&[7; 32], Some(comment)).ok()?;
        Some(user_data("192.0.2.10:6443", &token(), &[pin()], &[key]))
    }

    /// Characters worth trying in a comment: any, and the edges of YAML's printable set
    /// and of the noncharacters, which a uniform draw would almost never hit.
    fn edge_char() -> impl Strategy<Value = char> {
        let edges: Vec<char> = [
            0x7F, 0x84, 0x85, 0x9F, 0xA0, 0xD7FF, 0xE000, 0xFDCF, 0xFDD0, 0xFDEF, 0xFDF0, 0xFEFF,
            0xFFFD, 0xFFFE, 0xFFFF, 0x10000, 0x1FFFE, 0x1FFFF, 0x10FFFD, 0x10FFFE, 0x10FFFF,
        ]
        .into_iter()
        .filter_map(char::from_u32)
        .collect();
        prop_oneof![any::<char>(), proptest::sample::select(edges)]
    }

    fn comment() -> impl Strategy<Value = String> {
        proptest::collection::vec(edge_char(), 1..12).prop_map(|c| c.into_iter().collect())
    }

    proptest! {
        #[test]
        fn every_accepted_document_passes_the_yaml_reader(comment in comment()) {
            if let Some(doc) = document(&comment) {
                prop_assert_eq!(pyyaml_reader_check(&doc), Ok(()), "comment {:?}", comment);
            }
        }
    }

    #[test]
    fn noncharacters_and_unprintables_are_refused_by_name() {
        let mut refused = Vec::new();
        for cp in
            (0xFDD0..=0xFDEF).chain((0..=0x10).flat_map(|p| [p << 16 | 0xFFFE, p << 16 | 0xFFFF]))
        {
            let c = char::from_u32(cp).unwrap();
            let err = SshPublicKey::ed25519(&[7; 32], Some(&format!("a{c}b"))).unwrap_err();
            assert!(
                matches!(err, SshKeyError::CommentNotText { code_point, .. } if code_point == cp),
                "U+{cp:04X}: {err}"
            );
            let text = err.to_string();
            assert!(text.contains(&format!("U+{cp:04X}")), "{text}");
            assert!(text.contains("noncharacter"), "{text}");
            refused.push(cp);
        }
        assert_eq!(refused.len(), 32 + 34);
        // The reader itself refuses U+FFFE and U+FFFF: what the check keeps out.
        assert_eq!(pyyaml_reader_check("a\u{FFFE}"), Err((1, '\u{FFFE}')));
        assert_eq!(pyyaml_reader_check("\u{FFFF}"), Err((0, '\u{FFFF}')));
    }

    /// A batch of accepted documents, loaded by the real PyYAML (its pure-Python SafeLoader,
    /// as cloud-init's `yaml.safe_load` does). .ci/run installs python3-yaml and sets
    /// KUBEFLAVOR_REQUIRE_PYYAML; elsewhere, without PyYAML, the test says so and passes.
    #[test]
    fn real_pyyaml_loads_a_batch_of_accepted_documents() {
        use std::io::Write;
        use std::process::{Command, Stdio};
        let probe = Command::new("python3").args(["-c", "import yaml"]).status();
        if !probe.is_ok_and(|s| s.success()) {
            assert!(
                std::env::var_os("KUBEFLAVOR_REQUIRE_PYYAML").is_none(),
                "python3 with PyYAML is required here (.ci/run installs python3-yaml)"
            );
            eprintln!("skipped: python3 -c 'import yaml' fails here");
            return;
        }
        // Accepted comments from every stretch of Unicode: one character in 97 of each.
        let mut docs = Vec::new();
        let mut cp = 0x21;
        while cp <= 0x10FFFF {
            let comment: String = (0..8).filter_map(|i| char::from_u32(cp + i * 13)).collect();
            if let Some(doc) = document(&comment) {
                docs.push(doc.to_string());
            }
            cp += 97 * 8;
        }
        assert!(docs.len() > 1000, "{} documents", docs.len());
        let script = "import sys, json, yaml\n\
                      docs = json.load(sys.stdin)\n\
                      for d in docs:\n\
                      \x20   v = yaml.load(d, Loader=yaml.SafeLoader)\n\
                      \x20   assert v['ssh_authorized_keys'], d\n\
                      print(len(docs))\n";
        let mut child = Command::new("python3")
            .args(["-c", script])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(serde_json::to_string(&docs).unwrap().as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "PyYAML refused a document: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            docs.len().to_string()
        );
    }
}
