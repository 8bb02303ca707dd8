//! What a `cargo ...` line can name, read from the workspace itself: packages and their
//! targets (`cargo metadata`), the flags cargo takes (`cargo <subcommand> --help`), the
//! tests a target holds and the flags an example takes (from their sources, which
//! `cargo fmt` keeps in a shape a line reader can follow).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

/// A build target of a workspace package.
#[derive(Debug)]
pub struct Target {
    pub package: String,
    pub name: String,
    pub kinds: Vec<String>,
    pub src: PathBuf,
}

impl Target {
    pub fn is(&self, kind: &str) -> bool {
        self.kinds.iter().any(|k| k == kind)
    }
}

/// The workspace at `root`.
pub struct Workspace {
    pub packages: BTreeMap<String, PathBuf>,
    pub targets: Vec<Target>,
}

impl Workspace {
    pub fn read(root: &Path) -> Workspace {
        let out = cargo(
            root,
            &[
                "metadata",
                "--no-deps",
                "--offline",
                "--format-version",
                "1",
            ],
        );
        let metadata: Value = serde_json::from_str(&out).expect("cargo metadata's JSON");
        let mut packages = BTreeMap::new();
        let mut targets = Vec::new();
        for package in metadata["packages"].as_array().expect("packages") {
            let name = package["name"]
                .as_str()
                .expect("a package name")
                .to_string();
            let manifest = PathBuf::from(package["manifest_path"].as_str().expect("manifest"));
            packages.insert(
                name.clone(),
                manifest.parent().expect("a dir").to_path_buf(),
            );
            for target in package["targets"].as_array().expect("targets") {
                targets.push(Target {
                    package: name.clone(),
                    name: target["name"].as_str().expect("a target name").to_string(),
                    kinds: target["kind"]
                        .as_array()
                        .expect("kinds")
                        .iter()
                        .map(|k| k.as_str().expect("a kind").to_string())
                        .collect(),
                    src: PathBuf::from(target["src_path"].as_str().expect("src_path")),
                });
            }
        }
        Workspace { packages, targets }
    }

    /// Targets of `kind` named `name`, in `packages` (every package when empty).
    pub fn find(&self, packages: &[String], kind: &str, name: &str) -> Vec<&Target> {
        self.targets
            .iter()
            .filter(|t| t.is(kind) && t.name == name)
            .filter(|t| packages.is_empty() || packages.contains(&t.package))
            .collect()
    }
}

/// Runs the cargo that builds this test, in `dir`; its stdout.
pub fn cargo(dir: &Path, args: &[&str]) -> String {
    let out = Command::new(env!("CARGO"))
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| panic!("cargo {args:?}: {e}"));
    assert!(
        out.status.success(),
        "cargo {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8")
}

/// The options of `cargo <subcommand>`, from its --help: long name (or `-x`) and whether
/// it takes a value.
pub fn cargo_options(root: &Path, subcommand: &str) -> BTreeMap<String, bool> {
    let help = cargo(root, &[subcommand, "--help"]);
    let mut options = BTreeMap::new();
    for line in help.lines() {
        let line = line.trim_start();
        if !line.starts_with('-') {
            continue;
        }
        // "-p, --package [<SPEC>]  Package to ..." : the spec is before the description.
        let spec = line.split("  ").next().unwrap_or(line);
        let takes_value = spec.contains('<');
        for word in spec.split([',', ' ']) {
            let name = word.split(['=', '[', '<']).next().unwrap_or("");
            if name.starts_with('-') && name.len() > 1 {
                options.insert(name.to_string(), takes_value);
            }
        }
    }
    options
}

/// The full names of the tests (`#[test]`, `#[tokio::test]`, ...) of the target whose root
/// source file is `src`, as libtest names them: `module::path::function`.
pub fn test_names(src: &Path) -> Vec<String> {
    let mut names = Vec::new();
    collect_tests(src, true, &[], &mut names);
    names
}

/// Tests of the file `file` (a module root when `is_root`, as `main.rs`, `lib.rs` and
/// `mod.rs` are), whose module path is `module`.
fn collect_tests(file: &Path, is_root: bool, module: &[String], names: &mut Vec<String>) {
    let text = std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    // Where `mod x;` finds x.rs: beside a module root, in a folder named after any other file.
    let dir = match is_root {
        true => file.parent().expect("a dir").to_path_buf(),
        false => file.with_extension(""),
    };
    let here = file.parent().expect("a dir");
    // Inline modules by indentation, which rustfmt keeps: (indent, name).
    let mut inline: Vec<(usize, String)> = Vec::new();
    let mut path_attr: Option<String> = None;
    let mut test_attr = false;
    for line in text.lines() {
        let indent = line.len() - line.trim_start().len();
        let code = line.trim();
        if inline
            .last()
            .is_some_and(|(i, _)| *i == indent && code == "}")
        {
            inline.pop();
            continue;
        }
        if let Some(p) = code
            .strip_prefix("#[path = \"")
            .and_then(|p| p.strip_suffix("\"]"))
        {
            path_attr = Some(p.to_string());
            continue;
        }
        if is_test_attribute(code) {
            test_attr = true;
            continue;
        }
        let mut path: Vec<String> = module.to_vec();
        path.extend(inline.iter().map(|(_, n)| n.clone()));
        if let Some(rest) = strip_visibility(code).strip_prefix("mod ") {
            let name: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            let after = rest[name.len()..].trim();
            if after == "{" {
                inline.push((indent, name));
            } else if after == ";" && inline.is_empty() {
                path.push(name.clone());
                match path_attr.take() {
                    Some(p) => collect_tests(&here.join(p), true, &path, names),
                    None => {
                        let flat = dir.join(format!("{name}.rs"));
                        match flat.exists() {
                            true => collect_tests(&flat, false, &path, names),
                            false => {
                                collect_tests(&dir.join(&name).join("mod.rs"), true, &path, names)
                            }
                        }
                    }
                }
            }
            path_attr = None;
            continue;
        }
        if test_attr && let Some(name) = function_name(code) {
            path.push(name);
            names.push(path.join("::"));
            test_attr = false;
        }
        if !code.starts_with("#[") && !code.starts_with("//") && !code.is_empty() {
            path_attr = None;
        }
    }
}

fn is_test_attribute(code: &str) -> bool {
    code == "#[test]" || code.starts_with("#[tokio::test")
}

fn strip_visibility(code: &str) -> &str {
    let code = code.strip_prefix("pub ").unwrap_or(code);
    match code.strip_prefix("pub(") {
        Some(rest) => rest.split_once(") ").map_or(code, |(_, r)| r),
        None => code,
    }
}

/// `fn name(` or `async fn name(`: the name.
fn function_name(code: &str) -> Option<String> {
    let code = strip_visibility(code);
    let code = code.strip_prefix("async ").unwrap_or(code);
    let rest = code.strip_prefix("fn ")?;
    Some(
        rest.chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect(),
    )
}

/// The long flags (and `-x` short ones) of the clap `Parser` an example's source derives:
/// its fields with `#[arg(long ...)]`, named as clap names them, and those of the
/// `clap::Args` structs it flattens (`#[command(flatten)]`), found in the example's own
/// file or in a module it includes with `#[path = "..."]`.
pub fn example_flags(src: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(src).unwrap_or_else(|e| panic!("{}: {e}", src.display()));
    let mut structs = clap_structs(&text);
    let dir = src.parent().expect("an example's folder");
    for line in text.lines() {
        if let Some(path) = line
            .trim()
            .strip_prefix("#[path = \"")
            .and_then(|r| r.strip_suffix("\"]"))
        {
            let module = dir.join(path);
            let module_text = std::fs::read_to_string(&module)
                .unwrap_or_else(|e| panic!("{}: {e}", module.display()));
            for (name, s) in clap_structs(&module_text) {
                structs.entry(name).or_insert(s);
            }
        }
    }
    let mut flags = vec!["--help".to_string(), "-h".to_string()];
    let parsers = structs.values().filter(|s| s.parser);
    let mut pending: Vec<&ClapStruct> = parsers.collect();
    let mut seen = 0;
    while let Some(s) = pending.pop() {
        seen += 1;
        assert!(
            seen < 64,
            "{}: flattened structs in a circle",
            src.display()
        );
        flags.extend(s.flags.iter().cloned());
        for ty in &s.flattened {
            let name = ty.rsplit("::").next().unwrap_or(ty);
            match structs.get(name) {
                Some(inner) => pending.push(inner),
                None => panic!(
                    "{}: flattens {ty}, whose struct is neither in it nor in a #[path] module",
                    src.display()
                ),
            }
        }
    }
    flags
}

/// A struct deriving clap's `Parser` or `Args`: its own flags and the types it flattens.
#[derive(Debug, Default)]
struct ClapStruct {
    parser: bool,
    flags: Vec<String>,
    flattened: Vec<String>,
}

/// The structs of a source file that derive `Parser` or `Args`, by name.
fn clap_structs(text: &str) -> BTreeMap<String, ClapStruct> {
    let mut out = BTreeMap::new();
    let mut current: Option<(String, ClapStruct)> = None;
    let mut derived: Option<bool> = None;
    let mut attr = String::new();
    let mut flatten = false;
    // An outer attribute spread over lines (`#[command(` ... `)]`) before a struct.
    let mut outer_attr = false;
    for line in text.lines() {
        let code = line.trim();
        if current.is_none() {
            if outer_attr {
                outer_attr = !code.ends_with(")]");
                continue;
            }
            if code.starts_with("#[") && !code.ends_with(']') {
                outer_attr = true;
                continue;
            }
            if code.starts_with("#[derive(") {
                derived = if code.contains("Parser") {
                    Some(true)
                } else if code.contains("Args") {
                    Some(false)
                } else {
                    None
                };
                continue;
            }
            if let Some(parser) = derived {
                if let Some(rest) = strip_visibility(code).strip_prefix("struct ") {
                    let name: String = rest
                        .chars()
                        .take_while(|c| c.is_alphanumeric() || *c == '_')
                        .collect();
                    current = Some((
                        name,
                        ClapStruct {
                            parser,
                            ..ClapStruct::default()
                        },
                    ));
                    derived = None;
                } else if !code.starts_with("#[") && !code.starts_with("///") {
                    derived = None;
                }
            }
            continue;
        }
        if code == "}" {
            let (name, s) = current.take().expect("in a struct");
            out.insert(name, s);
            continue;
        }
        let (_, s) = current.as_mut().expect("in a struct");
        if code == "#[command(flatten)]" {
            flatten = true;
            continue;
        }
        if code.starts_with("#[arg(") || (!attr.is_empty() && !attr.ends_with(")]")) {
            attr.push_str(code);
            continue;
        }
        let Some((field, ty)) = strip_visibility(code).split_once(':') else {
            continue;
        };
        if field.contains(' ') || field.is_empty() {
            attr.clear();
            flatten = false;
            continue;
        }
        if flatten {
            s.flattened
                .push(ty.trim().trim_end_matches(',').trim().to_string());
            flatten = false;
        }
        let spec = attr
            .trim_start_matches("#[arg(")
            .trim_end_matches(")]")
            .to_string();
        for part in spec.split(',').map(str::trim) {
            if part == "long" {
                s.flags.push(format!("--{}", field.replace('_', "-")));
            } else if let Some(name) = part.strip_prefix("long = ") {
                s.flags.push(format!("--{}", name.trim_matches('"')));
            } else if part == "short" {
                s.flags.push(format!("-{}", &field[..1]));
            } else if let Some(c) = part.strip_prefix("short = ") {
                s.flags.push(format!("-{}", c.trim_matches('\'')));
            }
        }
        attr.clear();
    }
    out
}

/// The fuzz targets of `fuzz/`, its own workspace: one file each in `fuzz_targets/`.
pub fn fuzz_targets(root: &Path) -> Vec<String> {
    std::fs::read_dir(root.join("fuzz/fuzz_targets"))
        .expect("fuzz/fuzz_targets")
        .map(|e| {
            e.expect("an entry")
                .path()
                .file_stem()
                .expect("a name")
                .to_string_lossy()
                .into_owned()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flattened_args_count_and_plain_structs_do_not() {
        let text = r#"
#[derive(Debug, clap::Args)]
pub struct VmArgs {
    /// The kubeconfig.
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: PathBuf,
}

#[derive(Debug)]
struct Other {
    #[arg(long)]
    not_a_flag: bool,
}

#[derive(Debug, Parser)]
#[command(
    name = "x",
    after_help = "Run: x --nodes 3"
)]
struct Args {
    #[command(flatten)]
    vm: appliance::VmArgs,
    #[arg(long, short = 'n')]
    nodes: u64,
}
"#;
        let structs = clap_structs(text);
        assert_eq!(
            structs.keys().collect::<Vec<_>>(),
            vec!["Args", "VmArgs"],
            "only clap structs"
        );
        assert!(structs["Args"].parser && !structs["VmArgs"].parser);
        assert_eq!(structs["Args"].flags, vec!["--nodes", "-n"]);
        assert_eq!(structs["Args"].flattened, vec!["appliance::VmArgs"]);
        assert_eq!(structs["VmArgs"].flags, vec!["--kubeconfig"]);
    }
}
