//! P1 (hidden flavor) and kubeadm's distribution, tested statistically on tokens from the
//! OS CSPRNG, minted through the same path `token create` uses.
//!
//! Thresholds. Every check is set so a correct generator fails it with probability at most
//! 1e-10 (chi-square statistics: the upper 1e-10 quantile of chi-square with 35 degrees of
//! freedom, computed below and checked against the tabulated 0.999 quantile 66.619; the
//! statistics are Pearson's, asymptotically chi-square, with at least 555 expected per cell;
//! classifier: Hoeffding's bound). There are about 70 such checks, so a false failure happens
//! with probability below 1e-8, far below 1e-6. The token generator uses the OS CSPRNG and
//! cannot be seeded; the tests' own procedures are deterministic. Run with
//! `cargo test -p kubeflavor-core --test policy token_statistics -- --nocapture` to see the
//! figures.

use std::num::NonZeroU32;
use std::time::Instant;

use kubeflavor_core::token::secret::{KEY_TOKEN_ID, KEY_TOKEN_SECRET, flavored_token_secret};
use kubeflavor_core::token::{BootstrapToken, TOKEN_ALPHABET};

const TOKENS_PER_FLAVOR: usize = 20_000;
const CHARS: usize = 22; // 6 id + 16 secret characters
const K: usize = 36;
const DF: f64 = (K - 1) as f64;
/// Per-check false-failure probability.
const ALPHA: f64 = 1e-10;

// ---- chi-square distribution ----

/// ln Γ(x) for x > 0 (Lanczos, g = 7, n = 9; relative error below 1e-13 here).
fn ln_gamma(x: f64) -> f64 {
    const C: [f64; 9] = [
        0.999_999_999_999_809_9,
        676.520_368_121_885_1,
        -1_259.139_216_722_402_8,
        771.323_428_777_653_1,
        -176.615_029_162_140_6,
        12.507_343_278_686_905,
        -0.138_571_095_265_720_12,
        9.984_369_578_019_572e-6,
        1.505_632_735_149_311_6e-7,
    ];
    let x = x - 1.0;
    let mut a = C[0];
    let t = x + 7.5;
    for (i, c) in C.iter().enumerate().skip(1) {
        a += c / (x + i as f64);
    }
    0.5 * (2.0 * std::f64::consts::PI).ln() + (x + 0.5) * t.ln() - t + a.ln()
}

/// Regularized upper incomplete gamma Q(a, x) (Numerical Recipes' series / Lentz).
fn gamma_q(a: f64, x: f64) -> f64 {
    let prefix = (-x + a * x.ln() - ln_gamma(a)).exp();
    if x < a + 1.0 {
        let (mut sum, mut term, mut n) = (1.0 / a, 1.0 / a, a);
        for _ in 0..10_000 {
            n += 1.0;
            term *= x / n;
            sum += term;
            if term.abs() < sum.abs() * 1e-16 {
                break;
            }
        }
        1.0 - sum * prefix
    } else {
        let tiny = 1e-300;
        let mut b = x + 1.0 - a;
        let mut c = 1.0 / tiny;
        let mut d = 1.0 / b;
        let mut h = d;
        for i in 1..10_000 {
            let an = -(i as f64) * (i as f64 - a);
            b += 2.0;
            d = an * d + b;
            if d.abs() < tiny {
                d = tiny;
            }
            c = b + an / c;
            if c.abs() < tiny {
                c = tiny;
            }
            d = 1.0 / d;
            let delta = d * c;
            h *= delta;
            if (delta - 1.0).abs() < 1e-16 {
                break;
            }
        }
        prefix * h
    }
}

/// P(X > x) for X ~ chi-square(k).
fn chi2_sf(x: f64, k: f64) -> f64 {
    gamma_q(k / 2.0, x / 2.0)
}

/// The x with P(X > x) = p, by bisection.
fn chi2_upper_quantile(p: f64, k: f64) -> f64 {
    let (mut lo, mut hi) = (0.0, 10.0 * k + 1000.0);
    for _ in 0..200 {
        let mid = (lo + hi) / 2.0;
        if chi2_sf(mid, k) > p {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    (lo + hi) / 2.0
}

fn threshold() -> f64 {
    chi2_upper_quantile(ALPHA, DF)
}

#[test]
fn chi_square_math_matches_the_tables() {
    // Tabulated upper quantiles of chi-square(35): 0.05 -> 49.802, 0.001 -> 66.619.
    assert!((chi2_upper_quantile(0.05, 35.0) - 49.802).abs() < 0.01);
    assert!((chi2_upper_quantile(0.001, 35.0) - 66.619).abs() < 0.01);
    // chi-square(2) has the closed form P(X > x) = exp(-x/2).
    for x in [0.5, 3.0, 40.0, 90.0] {
        let exact = (-x / 2.0f64).exp();
        assert!((chi2_sf(x, 2.0) / exact - 1.0).abs() < 1e-9, "{x}");
    }
    println!(
        "chi-square(35): upper {ALPHA:e} quantile = {:.2} (0.999 quantile = {:.3})",
        threshold(),
        chi2_upper_quantile(0.001, 35.0)
    );
}

// ---- token samples ----

fn index(c: u8) -> usize {
    TOKEN_ALPHABET
        .iter()
        .position(|&a| a == c)
        .expect("token alphabet")
}

/// The token string a holder of a `flavor` token receives, minted as `token create` does.
fn mint(flavor: &str, generate: &mut dyn FnMut() -> BootstrapToken) -> [u8; CHARS] {
    let token = generate();
    let secret = flavored_token_secret(
        &token,
        &flavor.parse().unwrap(),
        None,
        NonZeroU32::MIN,
        &Default::default(),
    );
    let mut out = [0u8; CHARS];
    let id = secret.string_data[KEY_TOKEN_ID].as_bytes();
    let s = secret.string_data[KEY_TOKEN_SECRET].as_bytes();
    out[..6].copy_from_slice(id);
    out[6..].copy_from_slice(s);
    out
}

fn sample(
    flavor: &str,
    n: usize,
    generate: &mut dyn FnMut() -> BootstrapToken,
) -> Vec<[u8; CHARS]> {
    (0..n).map(|_| mint(flavor, generate)).collect()
}

fn os_token() -> BootstrapToken {
    BootstrapToken::generate().unwrap()
}

/// counts[position][character]
fn counts(tokens: &[[u8; CHARS]]) -> Vec<[u64; K]> {
    let mut c = vec![[0u64; K]; CHARS];
    for t in tokens {
        for (pos, &ch) in t.iter().enumerate() {
            c[pos][index(ch)] += 1;
        }
    }
    c
}

fn chi2_uniform(observed: &[u64; K]) -> f64 {
    let n: u64 = observed.iter().sum();
    let e = n as f64 / K as f64;
    observed.iter().map(|&o| (o as f64 - e).powi(2) / e).sum()
}

/// Pearson's chi-square for homogeneity of two samples over K categories (df K-1).
fn chi2_homogeneity(a: &[u64; K], b: &[u64; K]) -> f64 {
    let (na, nb) = (a.iter().sum::<u64>() as f64, b.iter().sum::<u64>() as f64);
    let n = na + nb;
    let mut x = 0.0;
    for i in 0..K {
        let col = (a[i] + b[i]) as f64;
        if col == 0.0 {
            continue;
        }
        let (ea, eb) = (na * col / n, nb * col / n);
        x += (a[i] as f64 - ea).powi(2) / ea + (b[i] as f64 - eb).powi(2) / eb;
    }
    x
}

/// Naive Bayes over per-position character frequencies: trained on the first half of each
/// sample, accuracy measured on the second half.
fn classifier_accuracy(a: &[[u8; CHARS]], b: &[[u8; CHARS]]) -> (f64, usize) {
    let (a_train, a_test) = a.split_at(a.len() / 2);
    let (b_train, b_test) = b.split_at(b.len() / 2);
    let log_freq = |train: &[[u8; CHARS]]| -> Vec<[f64; K]> {
        counts(train)
            .iter()
            .map(|row| {
                let n: u64 = row.iter().sum();
                let mut l = [0.0; K];
                for i in 0..K {
                    l[i] = ((row[i] + 1) as f64 / (n + K as u64) as f64).ln();
                }
                l
            })
            .collect()
    };
    let (la, lb) = (log_freq(a_train), log_freq(b_train));
    let score = |t: &[u8; CHARS], l: &[[f64; K]]| -> f64 {
        t.iter().enumerate().map(|(p, &c)| l[p][index(c)]).sum()
    };
    let says_a = |t: &[u8; CHARS]| score(t, &la) >= score(t, &lb);
    let correct =
        a_test.iter().filter(|t| says_a(t)).count() + b_test.iter().filter(|t| !says_a(t)).count();
    let n = a_test.len() + b_test.len();
    (correct as f64 / n as f64, n)
}

/// Hoeffding: P(|accuracy - 1/2| >= t) <= 2 exp(-2 n t^2) when the predictions are
/// independent of the labels; solve for the t that makes it ALPHA.
fn accuracy_half_width(n: usize) -> f64 {
    ((2.0 / ALPHA).ln() / (2.0 * n as f64)).sqrt()
}

struct P1Figures {
    max_uniform: f64,
    mean_uniform: f64,
    max_homogeneity: f64,
    accuracy: f64,
    test_size: usize,
}

fn p1_figures(
    gen_a: &mut dyn FnMut() -> BootstrapToken,
    gen_b: &mut dyn FnMut() -> BootstrapToken,
) -> P1Figures {
    let a = sample("sweet", TOKENS_PER_FLAVOR, gen_a);
    let b = sample("sour", TOKENS_PER_FLAVOR, gen_b);
    let (ca, cb) = (counts(&a), counts(&b));
    let uniform: Vec<f64> = ca.iter().chain(cb.iter()).map(chi2_uniform).collect();
    let homogeneity: Vec<f64> = ca
        .iter()
        .zip(&cb)
        .map(|(x, y)| chi2_homogeneity(x, y))
        .collect();
    let (accuracy, test_size) = classifier_accuracy(&a, &b);
    P1Figures {
        max_uniform: uniform.iter().cloned().fold(0.0, f64::max),
        mean_uniform: uniform.iter().sum::<f64>() / uniform.len() as f64,
        max_homogeneity: homogeneity.iter().cloned().fold(0.0, f64::max),
        accuracy,
        test_size,
    }
}

/// P1 (hidden flavor): token strings carry no flavor information.
#[test]
fn token_strings_carry_no_flavor_information() {
    let started = Instant::now();
    let f = p1_figures(&mut os_token, &mut os_token);
    let limit = threshold();
    let band = accuracy_half_width(f.test_size);
    println!(
        "P1 (hidden flavor) over {TOKENS_PER_FLAVOR} tokens per flavor (sweet, sour), {CHARS} positions, {:.2?}:",
        started.elapsed()
    );
    println!(
        "  per-position chi-square vs uniform (df 35, 44 tests): max {:.2}, mean {:.2} (expected 35), limit {limit:.2}",
        f.max_uniform, f.mean_uniform
    );
    println!(
        "  per-position chi-square sweet vs sour (df 35, 22 tests): max {:.2}, limit {limit:.2}",
        f.max_homogeneity
    );
    println!(
        "  naive Bayes classifier on {} held-out tokens: accuracy {:.4} (allowed 0.5 +/- {band:.4})",
        f.test_size, f.accuracy
    );
    assert!(f.max_uniform < limit);
    assert!(f.max_homogeneity < limit);
    assert!((f.accuracy - 0.5).abs() < band);
}

/// The statistics above can fail: a generator that leaks the flavor in the first character
/// (sour tokens start in the first half of the alphabet) is caught by every measure.
#[test]
fn a_flavor_leaking_generator_would_be_caught() {
    let mut leaky = || {
        let mut first = true;
        BootstrapToken::generate_with(|buf| {
            getrandom::fill(buf).unwrap();
            if first {
                buf[0] %= 18;
                first = false;
            }
        })
    };
    let f = p1_figures(&mut os_token, &mut leaky);
    let limit = threshold();
    println!(
        "leaky control: max chi-square vs uniform {:.1}, sweet vs sour {:.1}, classifier accuracy {:.4}",
        f.max_uniform, f.max_homogeneity, f.accuracy
    );
    assert!(f.max_uniform > limit);
    assert!(f.max_homogeneity > limit);
    assert!(f.accuracy - 0.5 > accuracy_half_width(f.test_size));
}

/// kubeadm's distribution: every character of the alphabet equally likely. Pooled over all
/// positions of 2 x 20,000 tokens (880,000 characters), so even the bias of `% 36` without
/// rejection (characters 0-3 at 8/256 instead of 7/252) gives a statistic near 1,700.
#[test]
fn generated_tokens_are_uniform_over_the_36_characters() {
    let tokens: Vec<[u8; CHARS]> = sample("sweet", 2 * TOKENS_PER_FLAVOR, &mut os_token);
    let mut pooled = [0u64; K];
    for row in counts(&tokens) {
        for i in 0..K {
            pooled[i] += row[i];
        }
    }
    let x = chi2_uniform(&pooled);
    let limit = threshold();
    println!(
        "uniformity: {} characters, chi-square {x:.2} (df 35, p = {:.3}), limit {limit:.2}",
        pooled.iter().sum::<u64>(),
        chi2_sf(x, DF)
    );
    assert!(x < limit);

    // The same statistic on `b % 36` without rejection, to show the check has the power
    // to see kubeadm's rejection step missing.
    let mut folded = [0u64; K];
    let mut buf = vec![0u8; pooled.iter().sum::<u64>() as usize];
    getrandom::fill(&mut buf).unwrap();
    for b in buf {
        folded[usize::from(b) % K] += 1;
    }
    let y = chi2_uniform(&folded);
    println!("  without rejection: chi-square {y:.2}");
    assert!(y > limit);
}
