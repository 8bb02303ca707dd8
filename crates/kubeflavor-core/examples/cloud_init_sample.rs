//! cloud_init_sample: the cloud-init document `kubeflavor serve` hands out, made by the same
//! function, with a sample token that no cluster knows. CI feeds it to cloud-init's own
//! schema validator and its JoinConfiguration to the real `kubeadm config validate`.
//!
//!     cargo run -p kubeflavor-core --example cloud_init_sample > user-data.yaml
//!     cargo run -p kubeflavor-core --example cloud_init_sample -- --join-configuration > join.yaml
//!     cargo run -p kubeflavor-core --example cloud_init_sample -- --ssh-key > with-key.yaml

use clap::Parser;
use kubeflavor_core::crypto::pin::CaPin;
use kubeflavor_core::mint::cloud_init::{JOIN_CONFIG_PATH, user_data};
use kubeflavor_core::mint::ssh_key::SshPublicKey;
use kubeflavor_core::token::BootstrapToken;

#[path = "support/args.rs"]
mod args;

/// cloud_init_sample: prints the `#cloud-config` document a mint with output cloud-init
/// answers, for a sample token (`abcdef.0123456789abcdef`, known to no cluster).
#[derive(Debug, Parser)]
#[command(
    name = "cloud_init_sample",
    after_help = "Run: cargo run -p kubeflavor-core --example cloud_init_sample"
)]
struct Args {
    /// Print only the kubeadm JoinConfiguration the document writes to the machine.
    #[arg(long)]
    join_configuration: bool,
    /// The API server endpoint (`host:port`) the document joins.
    #[arg(long, default_value = "192.0.2.10:6443")]
    endpoint: String,
    /// Add a sample SSH key (ed25519, of no one) for the image's default user, as a mint
    /// with `sshAuthorizedKeys` does.
    #[arg(long)]
    ssh_key: bool,
}

/// Not a token of any cluster: the example token of kubeadm's documentation.
const SAMPLE_TOKEN: &str = "abcdef.0123456789abcdef";

fn main() {
    let a = args::parse_or_exit::<Args>();
    let token: BootstrapToken = SAMPLE_TOKEN.parse().expect("a well-formed token");
    let pin: CaPin = format!("sha256:{}", "0".repeat(64))
        .parse()
        .expect("a well-formed pin");
    let keys: Vec<SshPublicKey> = match a.ssh_key {
        // An ed25519 key of 32 sample bytes: well-formed, and no one holds it.
        true => vec![SshPublicKey::ed25519(&[7; 32], Some("sample@kubeflavor")).expect("a key")],
        false => Vec::new(),
    };
    let doc = user_data(&a.endpoint, &token, &[pin], &keys);
    if !a.join_configuration {
        print!("{}", doc.as_str());
        return;
    }
    let v: serde_json::Value = serde_saphyr::from_str(&doc).expect("the document is YAML");
    let config = v["write_files"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|f| f["path"] == JOIN_CONFIG_PATH)
        .and_then(|f| f["content"].as_str())
        .unwrap_or_else(|| panic!("the document writes no {JOIN_CONFIG_PATH}"));
    print!("{config}");
}
