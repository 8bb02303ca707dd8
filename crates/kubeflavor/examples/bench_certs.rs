//! Benchmark of the certificate hand-off: `certs generate` (RSA-2048 and ECDSA P-256),
//! then upload and download of the full set against an in-process testkube.
//!
//! `cargo run --release -p kubeflavor --example bench_certs [-- ROUNDS]`
//! Prints figures; asserts nothing about time.

use std::time::{Duration, Instant};

use clap::Parser;
use kubeflavor::certs::download::{self, DownloadOptions};
use kubeflavor::certs::objects::ReadableBy;
use kubeflavor::certs::pki_files;
use kubeflavor::certs::upload::{self, UploadOptions};
use kubeflavor_core::crypto::certkey::CertificateKey;
use kubeflavor_core::crypto::pki::{KeyAlgorithm, generate_shared_ca_set};

/// bench_certs: the certificate hand-off, timed.
///
/// `certs generate` of the shared CA set (RSA-2048 and ECDSA P-256, with the file
/// writes), then `certs upload` and `certs download` of the full set against an in-process
/// testkube, and the API requests per upload+download pair. Prints figures; asserts
/// nothing about time.
#[derive(Debug, Parser)]
#[command(
    name = "bench_certs",
    after_help = "Run: cargo run --release -p kubeflavor --example bench_certs [-- ROUNDS]"
)]
struct Args {
    /// Rounds of each measurement.
    #[arg(value_name = "ROUNDS", default_value_t = 20, value_parser = args::at_least_one)]
    rounds: usize,
}

#[path = "../../kubeflavor-core/examples/support/args.rs"]
mod args;

fn stats(name: &str, samples: &mut [Duration]) {
    samples.sort();
    let n = samples.len();
    let total: Duration = samples.iter().sum();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!(
        "{name:<34} n={n:<4} mean {:>8.2} ms  median {:>8.2} ms  p90 {:>8.2} ms  min {:>8.2} ms  max {:>8.2} ms",
        ms(total / n as u32),
        ms(samples[n / 2]),
        ms(samples[(n * 9 / 10).min(n - 1)]),
        ms(samples[0]),
        ms(samples[n - 1]),
    );
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let rounds = args::parse_or_exit::<Args>().rounds;
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();

    for (name, alg) in [
        ("generate rsa-2048", KeyAlgorithm::Rsa2048),
        ("generate ecdsa-p256", KeyAlgorithm::EcdsaP256),
    ] {
        let mut samples = Vec::new();
        for _ in 0..rounds {
            let tmp = tempfile::tempdir().unwrap();
            let t = Instant::now();
            let files = generate_shared_ca_set(alg, jiff::Timestamp::now()).unwrap();
            pki_files::write_all(tmp.path(), &files, false).unwrap();
            samples.push(t.elapsed());
        }
        stats(&format!("{name} (+ write)"), &mut samples);
    }

    let tk = testkube::TestCluster::start().await.expect("testkube");
    let client = tk.client().await.expect("admin client");

    for (name, alg) in [
        ("rsa-2048", KeyAlgorithm::Rsa2048),
        ("ecdsa-p256", KeyAlgorithm::EcdsaP256),
    ] {
        let source = tempfile::tempdir().unwrap();
        let files = generate_shared_ca_set(alg, jiff::Timestamp::now()).unwrap();
        pki_files::write_all(source.path(), &files, false).unwrap();
        let bytes: usize = files.iter().map(|f| f.contents().len()).sum();
        let key = CertificateKey::generate().unwrap();
        let (mut up, mut down) = (Vec::new(), Vec::new());
        for _ in 0..rounds {
            let opts = UploadOptions {
                pki_dir: source.path().to_owned(),
                external_etcd: None,
                key: Some(key.clone()),
                ttl: upload::DEFAULT_TTL,
                readable_by: ReadableBy::ControlPlane,
            };
            let t = Instant::now();
            upload::upload(&client, opts, jiff::Timestamp::now(), &mut |_| {})
                .await
                .unwrap();
            up.push(t.elapsed());
            let target = tempfile::tempdir().unwrap();
            let opts = DownloadOptions {
                pki_dir: target.path().join("pki"),
                key: key.clone(),
                force: false,
                provenance: kubeflavor_core::crypto::copycerts::Provenance::KubeflavorOnly,
            };
            let t = Instant::now();
            download::download(&client, &opts, jiff::Timestamp::now())
                .await
                .unwrap();
            down.push(t.elapsed());
        }
        stats(&format!("upload {name} ({bytes} B, 8 files)"), &mut up);
        stats(&format!("download {name} ({bytes} B, 8 files)"), &mut down);
    }
    // Two key types x `rounds` of one upload and one download each.
    let ops = (2 * rounds) as f64;
    let snapshot = tk.counters().snapshot();
    let total: u64 = snapshot.counts.values().sum();
    println!(
        "API requests per upload+download pair: {:.1}",
        total as f64 / ops
    );
    for (k, n) in &snapshot.counts {
        println!(
            "  {:<8} {:<14} {:>5.2} per pair",
            k.verb,
            k.resource,
            *n as f64 / ops
        );
    }
    tk.shutdown().await;
}
