//! Figures for the copy-certs codec and PKI generation.
//!
//! `cargo run --release -p kubeflavor-core --example bench_crypto [iterations]`
//! prints the mean and the fastest run of: sealing the full kubeadm set, opening and
//! checking it (`open_all`: key check, manifest, kind and key/certificate matching), and
//! generating the shared CA set with RSA-2048 and ECDSA P-256.

use std::hint::black_box;
use std::time::{Duration, Instant};

use clap::Parser;
use jiff::Timestamp;
use kubeflavor_core::crypto::certkey::CertificateKey;
use kubeflavor_core::crypto::copycerts::{EtcdMode, PkiEntry, open_all, seal_secret_data};
use kubeflavor_core::crypto::pki::{KeyAlgorithm, PkiFile, generate_shared_ca_set};

/// bench_crypto: figures for the copy-certs codec and PKI generation.
///
/// The mean and the fastest run of: sealing the full kubeadm set, opening and checking it
/// (`open_all`: key check, manifest, kind and key/certificate matching), with RSA-2048 and
/// ECDSA P-256 sets, and generating the shared CA set (ITERATIONS / 5 runs, at least 3).
#[derive(Debug, Parser)]
#[command(
    name = "bench_crypto",
    after_help = "Run: cargo run --release -p kubeflavor-core --example bench_crypto [-- ITERATIONS]"
)]
struct Args {
    /// Timed runs of each seal and open measurement (after one warm-up run).
    #[arg(value_name = "ITERATIONS", default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..))]
    iterations: u32,
}

#[path = "support/args.rs"]
mod args;

fn measure(name: &str, iterations: u32, mut f: impl FnMut()) {
    f(); // warm-up
    let mut total = Duration::ZERO;
    let mut best = Duration::MAX;
    for _ in 0..iterations {
        let start = Instant::now();
        f();
        let took = start.elapsed();
        total += took;
        best = best.min(took);
    }
    println!(
        "{name:<44} mean {:>10.3} ms   best {:>10.3} ms   ({iterations} runs)",
        total.as_secs_f64() * 1e3 / f64::from(iterations),
        best.as_secs_f64() * 1e3
    );
}

fn entries(pki: &[PkiFile]) -> Vec<(PkiEntry, &[u8])> {
    pki.iter()
        .map(|f| {
            (
                PkiEntry::from_data_key(&f.rel_path.replace('/', "-")).expect("kubeadm file"),
                f.contents(),
            )
        })
        .collect()
}

fn main() {
    let iterations = args::parse_or_exit::<Args>().iterations;
    let key = CertificateKey::generate().expect("OS randomness");
    let now = Timestamp::now();

    for algorithm in [KeyAlgorithm::Rsa2048, KeyAlgorithm::EcdsaP256] {
        let pki = generate_shared_ca_set(algorithm, now).expect("generate");
        let files = entries(&pki);
        let bytes: usize = files.iter().map(|(_, c)| c.len()).sum();
        measure(
            &format!("seal full set ({algorithm}, {bytes} B)"),
            iterations,
            || {
                black_box(seal_secret_data(&key, EtcdMode::Local, &files).expect("seal"));
            },
        );
        let data = seal_secret_data(&key, EtcdMode::Local, &files).expect("seal");
        measure(
            &format!("open_all + checks ({algorithm})"),
            iterations,
            || {
                black_box(open_all(&key, &data).expect("open"));
            },
        );
    }
    let gen_iterations = (iterations / 5).max(3);
    for algorithm in [KeyAlgorithm::Rsa2048, KeyAlgorithm::EcdsaP256] {
        measure(
            &format!("generate CA set ({algorithm}, 4 keys)"),
            gen_iterations,
            || {
                black_box(generate_shared_ca_set(algorithm, now).expect("generate"));
            },
        );
    }
}
