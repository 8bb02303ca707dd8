//! Benchmark of token generation and token Secret encoding/decoding. Prints figures; it
//! asserts nothing about time.
//!
//! `cargo run -p kubeflavor-core --example bench_tokens` (dev profile: dependencies at
//! opt-level 2, this crate unoptimised) or with `--release`.

use std::collections::BTreeMap;
use std::hint::black_box;
use std::num::NonZeroU32;
use std::time::{Duration, Instant};

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use clap::Parser;
use jiff::Timestamp;
use kubeflavor_core::token::BootstrapToken;
use kubeflavor_core::token::record::{TokenRecord, authenticate_token_secret};
use kubeflavor_core::token::secret::{TokenSecretData, flavored_token_secret};

/// bench_tokens: token generation and token Secret encoding and decoding, per operation.
///
/// BootstrapToken::generate (OS CSPRNG and counter bytes), flavored_token_secret (with and
/// without base64 of the data), TokenSecretData and TokenRecord decoding,
/// authenticate_token_secret, and minting 10,000 flavored token Secrets. Fixed iteration
/// counts; no flags. Prints figures; asserts nothing about time.
#[derive(Debug, Parser)]
#[command(
    name = "bench_tokens",
    after_help = "Run: cargo run [--release] -p kubeflavor-core --example bench_tokens"
)]
struct Args {}

#[path = "support/args.rs"]
mod args;

fn bench(name: &str, iterations: u32, mut f: impl FnMut()) {
    for _ in 0..iterations / 10 {
        f();
    }
    let start = Instant::now();
    for _ in 0..iterations {
        f();
    }
    let total = start.elapsed();
    let per = total / iterations;
    let rate = iterations as f64 / total.as_secs_f64();
    println!(
        "{name:<48} {per:>10.2?}/op {rate:>12.0} op/s  ({iterations} iterations, {total:.2?})"
    );
}

fn main() {
    let Args {} = args::parse_or_exit::<Args>();
    let profile = if cfg!(debug_assertions) {
        "dev (core unoptimised)"
    } else {
        "release"
    };
    println!("bench_tokens, profile: {profile}");
    let now: Timestamp = "2026-11-30T05:00:00Z".parse().unwrap();
    let expiration = Some("2026-12-01T05:00:00Z".parse().unwrap());
    let flavor = "sweet".parse().unwrap();

    bench("BootstrapToken::generate (OS CSPRNG)", 200_000, || {
        black_box(BootstrapToken::generate().unwrap());
    });
    let mut counter = 0u8;
    bench(
        "BootstrapToken::generate_with (counter bytes)",
        200_000,
        || {
            black_box(BootstrapToken::generate_with(|buf| {
                for b in buf.iter_mut() {
                    counter = counter.wrapping_add(97);
                    *b = counter;
                }
            }));
        },
    );

    let token = BootstrapToken::generate().unwrap();
    bench(
        "flavored_token_secret (data, labels, annotations)",
        100_000,
        || {
            black_box(flavored_token_secret(
                &token,
                &flavor,
                expiration,
                NonZeroU32::MIN,
                &Default::default(),
            ));
        },
    );
    bench(
        "  + base64 of every data value (wire encoding)",
        100_000,
        || {
            let obj = flavored_token_secret(
                &token,
                &flavor,
                expiration,
                NonZeroU32::MIN,
                &Default::default(),
            );
            let data: BTreeMap<&str, String> = obj
                .string_data
                .iter()
                .map(|(k, v)| (k.as_str(), STANDARD.encode(v)))
                .collect();
            black_box(data);
        },
    );

    let obj = flavored_token_secret(
        &token,
        &flavor,
        expiration,
        NonZeroU32::MIN,
        &Default::default(),
    );
    let view = obj.view();
    bench("TokenSecretData::from_string_data", 100_000, || {
        black_box(TokenSecretData::from_string_data(&obj.string_data).unwrap());
    });
    bench("TokenRecord::from_secret", 100_000, || {
        black_box(TokenRecord::from_secret(&view).unwrap());
    });
    bench("authenticate_token_secret", 100_000, || {
        black_box(authenticate_token_secret(&view, now).unwrap());
    });

    // Whole mint path as `token create` runs it for N tokens, to put the numbers in scale.
    let n = 10_000;
    let start = Instant::now();
    for _ in 0..n {
        let t = BootstrapToken::generate().unwrap();
        black_box(flavored_token_secret(
            &t,
            &flavor,
            expiration,
            NonZeroU32::MIN,
            &Default::default(),
        ));
    }
    let took: Duration = start.elapsed();
    println!("mint {n} flavored token Secrets (generate + encode): {took:.2?}");
}
