//! kubectl's kubeconfig resolution (client-go's `ClientConfigLoadingRules` plus its
//! in-cluster fallback):
//! 1. `--kubeconfig FILE`: that file only; a missing file is an error.
//! 2. `KUBECONFIG`: a path list (`:`-separated), merged with "the first file to set a value
//!    wins"; files that do not exist are skipped, as client-go does.
//! 3. `~/.kube/config`, if it exists.
//! 4. The in-cluster service account (`KUBERNETES_SERVICE_HOST` set), when no kubeconfig
//!    file was found. `--context` needs a kubeconfig.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use kube::config::{KubeConfigOptions, Kubeconfig, KubeconfigError};

use super::{ClusterArgs, Origin};
use crate::error::{CliError, Result};

/// Where the configuration comes from, decided before anything is read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ConfigSource {
    /// Kubeconfig files, merged in this order.
    Files(Vec<PathBuf>),
    /// The pod's service account.
    InCluster,
}

/// Decide the source from the flag, the `KUBECONFIG` value, the home directory and whether
/// an in-cluster configuration is possible. `exists` is the file-system check (a parameter
/// so the precedence rules are testable without touching the disk).
pub fn resolve(
    flag: Option<&Path>,
    env: Option<&OsStr>,
    home: Option<&Path>,
    in_cluster_possible: bool,
    exists: impl Fn(&Path) -> bool,
) -> Result<ConfigSource> {
    if let Some(path) = flag {
        if !exists(path) {
            return Err(CliError::failed(
                format!("kubeconfig {} does not exist", path.display()),
                "check the path given to --kubeconfig",
            ));
        }
        return Ok(ConfigSource::Files(vec![path.to_path_buf()]));
    }
    if let Some(value) = env.filter(|v| !v.is_empty()) {
        let files: Vec<PathBuf> = std::env::split_paths(value)
            .filter(|p| !p.as_os_str().is_empty() && exists(p))
            .collect();
        if !files.is_empty() {
            return Ok(ConfigSource::Files(files));
        }
    }
    if let Some(default) = home.map(|h| h.join(".kube").join("config"))
        && exists(&default)
    {
        return Ok(ConfigSource::Files(vec![default]));
    }
    if in_cluster_possible {
        return Ok(ConfigSource::InCluster);
    }
    let mut fix = "pass --kubeconfig FILE, set KUBECONFIG, or create ~/.kube/config".to_string();
    if let Some(value) = env.filter(|v| !v.is_empty()) {
        fix = format!(
            "none of the files in KUBECONFIG={} exists; {fix}",
            value.to_string_lossy()
        );
    }
    Err(CliError::failed(
        "no kubeconfig found and not running in a cluster",
        fix,
    ))
}

/// Read the configuration the way [`resolve`] decides, for the context asked for.
pub(super) async fn load(args: &ClusterArgs) -> Result<(kube::Config, Origin)> {
    let env = std::env::var_os("KUBECONFIG");
    let home = std::env::home_dir();
    let in_cluster = std::env::var_os("KUBERNETES_SERVICE_HOST").is_some();
    let source = resolve(
        args.kubeconfig.as_deref(),
        env.as_deref(),
        home.as_deref(),
        in_cluster,
        Path::exists,
    )?;
    match source {
        ConfigSource::InCluster => load_in_cluster(args),
        ConfigSource::Files(files) => load_files(args, &files).await,
    }
}

/// The pod's ServiceAccount configuration; a `--context` cannot apply to it.
fn load_in_cluster(args: &ClusterArgs) -> Result<(kube::Config, Origin)> {
    if let Some(context) = &args.context {
        return Err(CliError::failed(
            format!("--context {context} needs a kubeconfig, and none was found"),
            "pass --kubeconfig FILE or set KUBECONFIG",
        ));
    }
    let config = kube::Config::incluster().map_err(|err| {
        CliError::failed(
            format!("cannot load the in-cluster configuration: {err}"),
            "run inside a pod with a service account, or pass --kubeconfig",
        )
    })?;
    let origin = Origin {
        server: config.cluster_url.to_string(),
        kubeconfig: "in-cluster service account".into(),
        context: String::new(),
    };
    Ok((config, origin))
}

/// The kubeconfig files merged (the first file to set a value wins), for `--context` or
/// the merged current context.
async fn load_files(args: &ClusterArgs, files: &[PathBuf]) -> Result<(kube::Config, Origin)> {
    let shown = files
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(":");
    let merged = merge_files(files, &shown)?;
    let context = args
        .context
        .clone()
        .or_else(|| merged.current_context.clone());
    let available: Vec<String> = merged.contexts.iter().map(|c| c.name.clone()).collect();
    let options = KubeConfigOptions {
        context: args.context.clone(),
        ..Default::default()
    };
    let config = kube::Config::from_custom_kubeconfig(merged, &options)
        .await
        .map_err(|err| context_error(err, &shown, &available))?;
    let origin = Origin {
        server: config
            .cluster_url
            .to_string()
            .trim_end_matches('/')
            .to_string(),
        kubeconfig: shown,
        context: context.unwrap_or_default(),
    };
    Ok((config, origin))
}

fn merge_files(files: &[PathBuf], shown: &str) -> Result<Kubeconfig> {
    let mut merged = Kubeconfig::default();
    for file in files {
        let one = Kubeconfig::read_from(file).map_err(|err| {
            CliError::failed(
                format!("cannot read kubeconfig {}: {}", file.display(), short(&err)),
                "fix the file or point --kubeconfig/KUBECONFIG elsewhere",
            )
        })?;
        merged = merged.merge(one).map_err(|err| {
            CliError::failed(
                format!("cannot merge kubeconfig {shown}: {err}"),
                "use one file with --kubeconfig",
            )
        })?;
    }
    Ok(merged)
}

fn context_error(err: KubeconfigError, shown: &str, available: &[String]) -> CliError {
    let list = if available.is_empty() {
        "none".to_string()
    } else {
        available.join(", ")
    };
    match err {
        KubeconfigError::CurrentContextNotSet => CliError::failed(
            format!("kubeconfig {shown} has no current-context"),
            format!("pass --context NAME; contexts: {list}"),
        ),
        KubeconfigError::LoadContext(name) => CliError::failed(
            format!("context {name} is not in kubeconfig {shown}"),
            format!("pass --context with one of: {list}"),
        ),
        other => CliError::failed(
            format!("cannot use kubeconfig {shown}: {}", short(&other)),
            "fix the kubeconfig or pass another with --kubeconfig",
        ),
    }
}

/// kube's errors nest their cause; one line with the innermost reason reads best.
fn short(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(inner) = source {
        let inner_text = inner.to_string();
        if !text.contains(&inner_text) {
            text = format!("{text}: {inner_text}");
        }
        source = inner.source();
    }
    text.replace('\n', " ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(paths: &[&str]) -> ConfigSource {
        ConfigSource::Files(paths.iter().map(PathBuf::from).collect())
    }

    fn exists_in(present: &'static [&'static str]) -> impl Fn(&Path) -> bool {
        move |p: &Path| present.iter().any(|q| Path::new(q) == p)
    }

    #[test]
    fn flag_wins_over_env_and_home() {
        let got = resolve(
            Some(Path::new("/flag")),
            Some(OsStr::new("/env")),
            Some(Path::new("/home/u")),
            true,
            exists_in(&["/flag", "/env", "/home/u/.kube/config"]),
        );
        assert_eq!(got.unwrap(), files(&["/flag"]));
    }

    #[test]
    fn missing_flag_file_is_an_error_even_if_others_exist() {
        let err = resolve(
            Some(Path::new("/nope")),
            Some(OsStr::new("/env")),
            None,
            true,
            exists_in(&["/env"]),
        )
        .unwrap_err();
        assert!(err.message.contains("/nope does not exist"), "{err}");
    }

    #[test]
    fn env_list_keeps_order_and_skips_missing_files() {
        let got = resolve(
            None,
            Some(OsStr::new("/a::/missing:/b")),
            Some(Path::new("/home/u")),
            false,
            exists_in(&["/a", "/b", "/home/u/.kube/config"]),
        );
        assert_eq!(got.unwrap(), files(&["/a", "/b"]));
    }

    #[test]
    fn env_with_only_missing_files_falls_back_to_home() {
        let got = resolve(
            None,
            Some(OsStr::new("/missing")),
            Some(Path::new("/home/u")),
            false,
            exists_in(&["/home/u/.kube/config"]),
        );
        assert_eq!(got.unwrap(), files(&["/home/u/.kube/config"]));
    }

    #[test]
    fn in_cluster_only_when_no_kubeconfig_exists() {
        let got = resolve(None, None, Some(Path::new("/home/u")), true, exists_in(&[]));
        assert_eq!(got.unwrap(), ConfigSource::InCluster);
        let got = resolve(
            None,
            None,
            Some(Path::new("/home/u")),
            true,
            exists_in(&["/home/u/.kube/config"]),
        );
        assert_eq!(got.unwrap(), files(&["/home/u/.kube/config"]));
    }

    #[test]
    fn nothing_found_says_how_to_fix_it() {
        let err =
            resolve(None, Some(OsStr::new("/gone")), None, false, exists_in(&[])).unwrap_err();
        assert!(err.message.contains("KUBECONFIG=/gone"), "{err}");
        assert!(err.message.contains("--kubeconfig"), "{err}");
    }
}
