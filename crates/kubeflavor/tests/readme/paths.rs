//! Rust paths the README names (`kubeflavor_core::node::cutoff::decide`,
//! `kubeflavor_cluster::csrs::latest_serving_csr`): each module segment must be a module
//! file of that crate and the first segment past the modules an item that module defines,
//! so a module moved or an item renamed fails the test instead of the reader.

use std::path::{Path, PathBuf};

/// The crates whose paths the README may name, with their source roots.
const CRATES: &[(&str, &str)] = &[
    ("kubeflavor_core", "crates/kubeflavor-core/src"),
    ("kubeflavor_cluster", "crates/kubeflavor-cluster/src"),
    ("kubeflavor", "crates/kubeflavor/src"),
    ("testkube", "crates/testkube/src"),
];

/// Every `crate::a::b` path in `text` that starts with one of [`CRATES`], with its line.
pub fn named(text: &str) -> Vec<(usize, String)> {
    let is_path_char = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == ':';
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        for run in line.split(|c: char| !is_path_char(c)) {
            let path = run.trim_matches(':');
            let first = path.split("::").next().unwrap_or_default();
            if path.contains("::") && CRATES.iter().any(|(c, _)| *c == first) {
                out.push((i + 1, path.to_string()));
            }
        }
    }
    out
}

/// Whether `path` resolves in the repository at `root`: why not, when it does not.
pub fn check(root: &Path, path: &str) -> Result<(), String> {
    let mut segments = path.split("::");
    let krate = segments.next().unwrap_or_default();
    let Some((_, src)) = CRATES.iter().find(|(c, _)| *c == krate) else {
        return Err(format!("{krate} is not a crate of this workspace"));
    };
    let mut dir = root.join(src);
    let mut file = if dir.join("lib.rs").exists() {
        dir.join("lib.rs")
    } else {
        dir.join("main.rs")
    };
    let mut walked = krate.to_string();
    for segment in segments {
        match module_file(&dir, segment) {
            Some((next_dir, next_file)) if declares_module(&file, segment) => {
                dir = next_dir;
                file = next_file;
                walked = format!("{walked}::{segment}");
            }
            _ => {
                return if defines_item(&file, segment) {
                    // Anything after an item (a method, a variant) is that item's own.
                    Ok(())
                } else {
                    Err(format!(
                        "{walked} has no module or item {segment} ({})",
                        file.strip_prefix(root).unwrap_or(&file).display()
                    ))
                };
            }
        }
    }
    Ok(())
}

/// The directory and file of module `name` under `dir` (`name.rs` or `name/mod.rs`).
fn module_file(dir: &Path, name: &str) -> Option<(PathBuf, PathBuf)> {
    let flat = dir.join(format!("{name}.rs"));
    if flat.exists() {
        return Some((dir.join(name), flat));
    }
    let nested = dir.join(name).join("mod.rs");
    nested.exists().then(|| (dir.join(name), nested))
}

fn source(file: &Path) -> String {
    std::fs::read_to_string(file).unwrap_or_default()
}

/// Whether `file` declares `mod name;` (public or not: a README may name either).
fn declares_module(file: &Path, name: &str) -> bool {
    source(file).lines().any(|l| {
        let l = l.trim_start();
        let l = l.strip_prefix("pub ").unwrap_or(l);
        let l = l.strip_prefix("pub(crate) ").unwrap_or(l);
        l == format!("mod {name};") || l == format!("mod {name} {{")
    })
}

/// Whether `file` defines or re-exports an item called `name`.
fn defines_item(file: &Path, name: &str) -> bool {
    let text = source(file);
    let kinds = [
        "fn",
        "async fn",
        "struct",
        "enum",
        "trait",
        "type",
        "const",
        "static",
        "macro_rules!",
    ];
    text.lines().any(|l| {
        let l = l.trim_start();
        let l = l
            .strip_prefix("pub(crate) ")
            .or_else(|| l.strip_prefix("pub "))
            .unwrap_or(l);
        let defined = kinds.iter().any(|k| {
            l.strip_prefix(k)
                .and_then(|r| r.strip_prefix(' '))
                .is_some_and(|r| {
                    r.strip_prefix(name).is_some_and(|after| {
                        after.is_empty()
                            || !after.starts_with(|c: char| c.is_alphanumeric() || c == '_')
                    })
                })
        });
        let reexported = l.starts_with("use ")
            && l.trim_end_matches(';')
                .split(|c: char| !(c.is_alphanumeric() || c == '_'))
                .any(|w| w == name);
        defined || reexported
    })
}

#[test]
fn paths_are_read_from_prose() {
    let found =
        named("see `kubeflavor_core::node::cutoff::decide` and kubeflavor::run, not std::fs");
    assert_eq!(
        found,
        vec![
            (1, "kubeflavor_core::node::cutoff::decide".to_string()),
            (1, "kubeflavor::run".to_string())
        ]
    );
}
