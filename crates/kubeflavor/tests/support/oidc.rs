//! A real OpenID Provider for the tests: glewlwyd from Debian's packages, started by
//! `testbed/oidc/start` (idempotent: a running one is reused) unless `KUBEFLAVOR_E2E_OIDC`
//! names the env file a start already printed. Tokens come from its password grant through
//! `testbed/oidc/token`, so every token the tests send was signed by the provider itself.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The variable naming the env file `testbed/oidc/start` printed.
pub const PROVIDER_ENV: &str = "KUBEFLAVOR_E2E_OIDC";

/// The running provider, as its env file describes it.
#[derive(Debug, Clone)]
pub struct Provider {
    pub issuer: String,
    pub issuer2: String,
    /// The CA its TLS certificate chains to.
    pub ca: PathBuf,
    pub client_id: String,
    /// The `kubeflavor` client's secret (the web portal redeems codes with it).
    pub client_secret: String,
    env: BTreeMap<String, String>,
}

fn scripts() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testbed/oidc")
}

fn run(script: &str, args: &[&str], env: &BTreeMap<String, String>) -> String {
    let out = Command::new("bash")
        .arg(scripts().join(script))
        .args(args)
        .envs(env)
        .output()
        .unwrap_or_else(|e| panic!("run testbed/oidc/{script}: {e}"));
    assert!(
        out.status.success(),
        "testbed/oidc/{script} {args:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8")
}

fn read_env(path: &Path) -> BTreeMap<String, String> {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| {
            (
                k.trim().to_string(),
                v.trim().trim_matches(['"', '\'']).to_string(),
            )
        })
        .collect()
}

impl Provider {
    /// The shared provider of this machine (started once per test binary, reused after).
    pub fn shared() -> &'static Provider {
        static SHARED: OnceLock<Provider> = OnceLock::new();
        SHARED.get_or_init(|| {
            let file = match std::env::var_os(PROVIDER_ENV) {
                Some(file) => PathBuf::from(file),
                None => {
                    let printed = run("start", &[], &BTreeMap::new());
                    PathBuf::from(
                        printed
                            .lines()
                            .last()
                            .expect("start prints its env file")
                            .trim(),
                    )
                }
            };
            Provider::from_env(read_env(&file))
        })
    }

    fn from_env(env: BTreeMap<String, String>) -> Provider {
        let get = |k: &str| {
            env.get(k)
                .cloned()
                .unwrap_or_else(|| panic!("the provider's env file names no {k}"))
        };
        Provider {
            issuer: get("KUBEFLAVOR_OIDC_ISSUER"),
            issuer2: get("KUBEFLAVOR_OIDC_ISSUER2"),
            ca: PathBuf::from(get("KUBEFLAVOR_OIDC_CA")),
            client_id: get("KUBEFLAVOR_OIDC_CLIENT_ID"),
            client_secret: get("KUBEFLAVOR_OIDC_CLIENT_SECRET"),
            env,
        }
    }

    /// An ID token of `user` (`args`: e.g. `--issuer 2`, `--client other-app`), signed by
    /// the provider.
    pub fn token(&self, user: &str, args: &[&str]) -> String {
        let mut all = vec![user];
        all.extend_from_slice(args);
        run("token", &all, &self.env).trim().to_string()
    }

    /// A value of the provider's env file.
    pub fn env(&self, key: &str) -> Option<&str> {
        self.env.get(key).map(String::as_str)
    }

    /// Runs `testbed/oidc/<script> args` against this provider.
    pub fn script(&self, script: &str, args: &[&str]) -> String {
        run(script, args, &self.env)
    }
}

/// A provider of one test's own (its own state folder and port), for what would disturb
/// the shared one (key rotation, token lifetimes); stopped and wiped when dropped.
pub struct PrivateProvider {
    pub provider: Provider,
    _dir: tempfile::TempDir,
}

impl PrivateProvider {
    pub fn start() -> PrivateProvider {
        let dir = tempfile::tempdir().expect("a temporary folder");
        // A free port: bound, read and released (the provider binds it a moment later).
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let env: BTreeMap<String, String> = [
            (
                "KUBEFLAVOR_OIDC_DIR".to_string(),
                dir.path().join("oidc").display().to_string(),
            ),
            ("KUBEFLAVOR_OIDC_PORT".to_string(), port.to_string()),
        ]
        .into();
        let printed = run("start", &[], &env);
        let file = PathBuf::from(printed.lines().last().expect("an env file").trim());
        PrivateProvider {
            provider: Provider::from_env(read_env(&file)),
            _dir: dir,
        }
    }
}

impl Drop for PrivateProvider {
    fn drop(&mut self) {
        let _ = Command::new("bash")
            .arg(scripts().join("stop"))
            .arg("--wipe")
            .envs(&self.provider.env)
            .output();
    }
}
