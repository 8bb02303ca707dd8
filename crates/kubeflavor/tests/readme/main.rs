//! The README's commands are checked against the code, so a renamed flag, a moved test or
//! a filter that selects nothing fails `cargo test` instead of the reader:
//!
//! - every command of a fenced `sh` block (a `console` block's `$ ` lines) of README.md and
//!   fuzz/regressions/README.md, and every inline span that starts with `kubeflavor`,
//!   `cargo`, an example's name, or a kubeflavor subcommand and a flag;
//! - `kubeflavor ...`: each subcommand and flag against the binary's clap definition,
//!   values of a fixed set against the set;
//! - `cargo ...`: each option against `cargo <subcommand> --help`, each package (`-p`),
//!   example, test target and `--path` against the workspace, a test filter against the
//!   tests it would select (at least one), and an example's flags after `--` against the
//!   `#[arg(long)]` fields of its clap `Parser`;
//! - `cargo fuzz`: the target and corpus directories against `fuzz/`;
//! - anything else in a fenced block must be on [`UNCHECKED`], with the reason;
//! - every Rust path into the workspace's crates (`kubeflavor_core::node::cutoff::decide`)
//!   must name modules and an item that exist (see `paths`);
//! - no crate's modules import one another in a circle (see `imports`), as Layout says.
//!
//! `cargo test -p kubeflavor --test readme`

mod cli;
mod imports;
mod markdown;
mod paths;
mod shell;
mod workspace;

use std::path::{Path, PathBuf};

use markdown::Shown;
use workspace::Workspace;

/// Programs the README shows that this test cannot run or check, and why.
const UNCHECKED: &[(&str, &str)] = &[
    ("kubectl", "talks to a real cluster"),
    ("kubeadm", "talks to a real cluster"),
    ("kind", "loads an image into a local kind cluster"),
    ("curl", "calls a deployed join-token API"),
    ("promtool", "Prometheus' tool; .ci/run runs these lines"),
    (
        "python3",
        "draws the dashboard from a monitoring run's scrapes",
    ),
    ("../shared/real-k8s/stop", "outside this repository"),
];

/// The repository root.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Every command the READMEs show.
fn shown() -> Vec<Shown> {
    let read = |p: &str| std::fs::read_to_string(root().join(p)).expect(p);
    let mut all = markdown::commands("README.md", &read("README.md"));
    all.extend(markdown::commands(
        "fuzz/regressions/README.md",
        &read("fuzz/regressions/README.md"),
    ));
    all
}

/// What each check saw, so a parser that silently skips everything fails too.
#[derive(Default)]
struct Counts {
    kubeflavor: usize,
    cargo: usize,
    filters: usize,
    example_flags: usize,
}

struct Checker {
    root: PathBuf,
    cli: clap::Command,
    workspace: Workspace,
    cargo_options: std::collections::BTreeMap<String, std::collections::BTreeMap<String, bool>>,
    counts: Counts,
}

impl Checker {
    fn new() -> Checker {
        let root = root();
        Checker {
            cli: cli::kubeflavor(),
            workspace: Workspace::read(&root),
            root,
            cargo_options: Default::default(),
            counts: Counts::default(),
        }
    }

    /// Checks one command line as shown: what is wrong, one entry per command.
    fn check(&mut self, shown: &Shown) -> Vec<String> {
        let mut wrong = Vec::new();
        for words in shell::commands(&shown.text) {
            // A program named in prose (`cargo`), not a command line.
            if !shown.fenced && words.len() == 1 {
                continue;
            }
            let program = words[0].as_str();
            let args = &words[1..];
            let outcome = match program {
                "kubeflavor" => {
                    self.counts.kubeflavor += 1;
                    cli::check(&self.cli, args)
                }
                "cargo" => {
                    self.counts.cargo += 1;
                    self.check_cargo(args)
                }
                "bash" => self.check_path(args.first()),
                "cd" => self.check_path(args.first()),
                _ if shown.fenced && UNCHECKED.iter().any(|(p, _)| *p == program) => Ok(()),
                _ if shown.fenced => Err(format!(
                    "{program}: not checked; check it here or add it to UNCHECKED with the reason"
                )),
                // Inline: an example's name and flags (`join_storm --nodes 1000`), or a
                // kubeflavor subcommand and a flag (`install --no-token-node-read`).
                _ if self.example(&[], program).is_ok()
                    && args.iter().any(|a| a.starts_with('-')) =>
                {
                    self.check_example_args(&[], program, args)
                }
                _ if self.cli.find_subcommand(program).is_some()
                    && args.iter().any(|a| a.starts_with("--")) =>
                {
                    self.counts.kubeflavor += 1;
                    cli::check(&self.cli, &words)
                }
                _ => Ok(()),
            };
            if let Err(e) = outcome {
                wrong.push(format!(
                    "{}:{}: `{}`: {e}",
                    shown.file,
                    shown.line,
                    words.join(" ")
                ));
            }
        }
        wrong
    }

    /// A script or directory the line names, relative to the repository root.
    fn check_path(&self, path: Option<&String>) -> Result<(), String> {
        let path = path.ok_or("names nothing")?;
        match self.root.join(path).exists() {
            true => Ok(()),
            false => Err(format!("{path} does not exist")),
        }
    }

    fn options(&mut self, subcommand: &str) -> &std::collections::BTreeMap<String, bool> {
        let root = self.root.clone();
        self.cargo_options
            .entry(subcommand.to_string())
            .or_insert_with(|| workspace::cargo_options(&root, subcommand))
    }

    fn check_cargo(&mut self, args: &[String]) -> Result<(), String> {
        let Some((subcommand, args)) = args.split_first() else {
            return Err("no subcommand".into());
        };
        if subcommand == "fuzz" {
            return self.check_fuzz(args);
        }
        let (ours, after) = match args.iter().position(|a| a == "--") {
            Some(i) => (&args[..i], &args[i + 1..]),
            None => (args, &args[args.len()..]),
        };
        let mut packages = Vec::new();
        let (mut examples, mut tests, mut bins, mut positionals) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let (mut lib, mut all_tests) = (false, false);
        let mut words = ours.iter();
        while let Some(word) = words.next() {
            if !word.starts_with('-') {
                positionals.push(word.clone());
                continue;
            }
            let (name, inline) = match word.split_once('=') {
                Some((n, v)) => (n.to_string(), Some(v.to_string())),
                None => (word.clone(), None),
            };
            let takes_value = *self
                .options(subcommand)
                .get(&name)
                .ok_or_else(|| format!("cargo {subcommand} has no option {name}"))?;
            let value = match takes_value {
                true => inline.or_else(|| words.next().cloned()),
                false => None,
            };
            // `<crate>`: a placeholder, as in `cargo test -p <crate> --test <binary>`.
            let value = value.filter(|v| !v.starts_with('<'));
            match (name.as_str(), value) {
                ("-p" | "--package", Some(p)) => {
                    if !self.workspace.packages.contains_key(&p) {
                        return Err(format!("no package {p} in the workspace"));
                    }
                    packages.push(p);
                }
                ("--example", Some(e)) => examples.push(e),
                ("--test", Some(t)) => tests.push(t),
                ("--bin", Some(b)) => bins.push(b),
                ("--lib", _) => lib = true,
                ("--tests", _) => all_tests = true,
                ("--path", Some(p)) if !self.root.join(&p).join("Cargo.toml").exists() => {
                    return Err(format!("{p} holds no Cargo.toml"));
                }
                _ => {}
            }
        }
        if matches!(subcommand.as_str(), "test" | "bench") && !positionals.is_empty() {
            self.counts.filters += 1;
        }
        for e in &examples {
            self.example(&packages, e)?;
        }
        for b in &bins {
            self.one(&packages, "bin", b)?;
        }
        let mut selected = Vec::new();
        for t in &tests {
            selected.push(self.one(&packages, "test", t)?);
        }
        match subcommand.as_str() {
            "test" | "bench" => {
                if let Some(filter) = positionals.first() {
                    // As cargo picks them: the named test targets and the library with
                    // --lib; every test-bearing target with --tests or when none is named.
                    let mut kinds: Vec<&str> = Vec::new();
                    if lib {
                        kinds.push("lib");
                    }
                    if all_tests || (tests.is_empty() && !lib) {
                        kinds.extend(["lib", "bin", "test"]);
                    }
                    let mut targets: Vec<&workspace::Target> = selected;
                    targets.extend(self.workspace.targets.iter().filter(|t| {
                        (packages.is_empty() || packages.contains(&t.package))
                            && kinds.iter().any(|k| t.is(k))
                    }));
                    let matched = targets
                        .iter()
                        .flat_map(|t| workspace::test_names(&t.src))
                        .filter(|n| n.contains(filter.as_str()))
                        .count();
                    if matched == 0 {
                        return Err(format!("the filter {filter} selects no test"));
                    }
                }
            }
            "run" => {
                if let Some(example) = examples.first() {
                    return self.check_example_args(&packages, example, after);
                }
                if !after.is_empty() {
                    self.counts.kubeflavor += 1;
                    return cli::check(&self.cli, after);
                }
            }
            "install" => {}
            _ if !positionals.is_empty() => {
                return Err(format!("cargo {subcommand} takes no {}", positionals[0]));
            }
            _ => {}
        }
        Ok(())
    }

    /// The one target of `kind` named `name` in `packages` (the workspace when empty).
    fn one(
        &self,
        packages: &[String],
        kind: &str,
        name: &str,
    ) -> Result<&workspace::Target, String> {
        match self.workspace.find(packages, kind, name).as_slice() {
            [one] => Ok(*one),
            [] => Err(format!("no {kind} target {name} in {}", where_(packages))),
            _ => Err(format!(
                "{kind} {name} is in several packages: name one with -p"
            )),
        }
    }

    fn example(&self, packages: &[String], name: &str) -> Result<&workspace::Target, String> {
        self.one(packages, "example", name)
    }

    /// The flags after `--` of `cargo run --example name` against its clap `Parser`.
    fn check_example_args(
        &mut self,
        packages: &[String],
        name: &str,
        args: &[String],
    ) -> Result<(), String> {
        let flags = workspace::example_flags(&self.example(packages, name)?.src);
        for arg in args.iter().filter(|a| a.starts_with('-') && *a != "-") {
            self.counts.example_flags += 1;
            let flag = arg.split('=').next().unwrap_or(arg);
            if !flags.iter().any(|f| f == flag) {
                return Err(format!("example {name} has no flag {flag}"));
            }
        }
        Ok(())
    }

    /// `cargo fuzz <command> [-s none] <target> [corpus dirs] [-- libFuzzer options]`:
    /// the target and the repository's corpus directories. cargo-fuzz's own options are
    /// not checked: it is not part of the workspace.
    fn check_fuzz(&self, args: &[String]) -> Result<(), String> {
        let targets = workspace::fuzz_targets(&self.root);
        let ours = args.split(|a| a == "--").next().unwrap_or(&[]);
        let mut words = ours.iter().skip(1);
        let mut positionals = Vec::new();
        while let Some(word) = words.next() {
            match word.as_str() {
                "-s" | "--sanitizer" => {
                    words.next();
                }
                w if w.starts_with('-') => {}
                w => positionals.push(w),
            }
        }
        if let Some((target, dirs)) = positionals.split_first()
            && !target.starts_with('<')
        {
            if !targets.iter().any(|t| t == target) {
                return Err(format!("no fuzz target {target} (fuzz/fuzz_targets/)"));
            }
            for dir in dirs.iter().filter(|d| d.starts_with("fuzz/")) {
                if !self.root.join(dir).is_dir() {
                    return Err(format!("{dir} does not exist"));
                }
            }
        }
        Ok(())
    }
}

fn where_(packages: &[String]) -> String {
    match packages {
        [] => "the workspace".into(),
        _ => packages.join(", "),
    }
}

#[test]
fn every_readme_command_names_what_exists() {
    let mut checker = Checker::new();
    let wrong: Vec<String> = shown().iter().flat_map(|s| checker.check(s)).collect();
    assert!(
        wrong.is_empty(),
        "README commands that do not match the code:\n{}",
        wrong.join("\n")
    );
    let c = &checker.counts;
    eprintln!(
        "checked: {} kubeflavor commands, {} cargo commands, {} test filters, {} example flags",
        c.kubeflavor, c.cargo, c.filters, c.example_flags
    );
    // The READMEs show dozens of each; far fewer means the reader above lost them.
    assert!(
        c.kubeflavor >= 40,
        "{} kubeflavor commands checked",
        c.kubeflavor
    );
    assert!(c.cargo >= 15, "{} cargo commands checked", c.cargo);
    assert!(c.filters >= 3, "{} test filters checked", c.filters);
    assert!(
        c.example_flags >= 10,
        "{} example flags checked",
        c.example_flags
    );
}

/// The check refuses what the README once said wrongly, and a wrong flag of each kind.
#[test]
fn wrong_commands_are_refused() {
    let mut checker = Checker::new();
    for (line, why) in [
        (
            "cargo test -p kubeflavor-core --test codecs fuzz_replay",
            "the filter fuzz_replay selects no test",
        ),
        (
            "cargo test -p kubeflavor --test controller no_such_test",
            "selects no test",
        ),
        (
            "cargo test -p kubeflavor --test no_such_suite",
            "no test target no_such_suite",
        ),
        (
            "cargo run -p kubeflavr --example join_storm",
            "no package kubeflavr",
        ),
        (
            "cargo run --release --example join_storm -- --idle-secs 60",
            "example join_storm has no flag --idle-secs",
        ),
        ("cargo run --example walkthru", "no example target walkthru"),
        (
            "cargo run --release -p kubeflavor --example bench_authz -- --clients 8",
            "example bench_authz has no flag --clients",
        ),
        (
            "cargo test --workspce",
            "cargo test has no option --workspce",
        ),
        (
            "cargo run -- tokens list",
            "'kubeflavor' has no subcommand tokens",
        ),
        (
            "kubeflavor install --apply --authz-webhok",
            "'kubeflavor install' has no flag --authz-webhok",
        ),
        ("cargo fuzz run -s none csrs", "no fuzz target csrs"),
        ("bash image/buidl", "image/buidl does not exist"),
        ("helm install kubeflavor", "helm: not checked"),
    ] {
        let shown = Shown {
            file: "test",
            line: 1,
            fenced: true,
            text: line.into(),
        };
        let wrong = checker.check(&shown);
        assert!(
            wrong.len() == 1 && wrong[0].contains(why),
            "{line}: {wrong:?}"
        );
    }
}

#[test]
fn every_rust_path_the_readme_names_exists() {
    let root = root();
    let readme = std::fs::read_to_string(root.join("README.md")).expect("README.md");
    let named = paths::named(&readme);
    let wrong: Vec<String> = named
        .iter()
        .filter_map(|(line, path)| {
            paths::check(&root, path)
                .err()
                .map(|e| format!("README.md:{line}: `{path}`: {e}"))
        })
        .collect();
    assert!(
        wrong.is_empty(),
        "Rust paths in README.md that do not match the code:\n{}",
        wrong.join("\n")
    );
    eprintln!("checked: {} Rust paths", named.len());
    // The README names about a dozen; none means the reader above lost them.
    assert!(named.len() >= 8, "{} Rust paths checked", named.len());
}

/// The paths the README named before its modules moved are refused, as is a wrong item.
#[test]
fn moved_rust_paths_are_refused() {
    let root = root();
    for (path, why) in [
        (
            "kubeflavor::controller::csr::serving::latest_serving_csr",
            "no module or item latest_serving_csr",
        ),
        (
            "kubeflavor_core::node_cutoff::decide",
            "no module or item node_cutoff",
        ),
        (
            "kubeflavor_core::node::cutoff::decides",
            "no module or item decides",
        ),
        ("kubeflavor_coer::node", "not a crate"),
    ] {
        let outcome = paths::check(&root, path);
        assert!(
            outcome.as_ref().is_err_and(|e| e.contains(why)),
            "{path}: {outcome:?}"
        );
    }
    assert_eq!(
        paths::check(&root, "kubeflavor_cluster::csrs::latest_serving_csr"),
        Ok(())
    );
}

#[test]
fn no_module_imports_in_a_circle() {
    let root = root();
    let mut wrong = Vec::new();
    let mut modules = 0;
    for krate in [
        "kubeflavor-core",
        "kubeflavor-cluster",
        "kubeflavor",
        "testkube",
    ] {
        let graph = imports::graph(&root.join("crates").join(krate).join("src"));
        modules += graph.len();
        for circle in imports::circles(&graph) {
            let arrows: Vec<String> = circle
                .iter()
                .map(|m| {
                    let to: Vec<&str> = graph[m]
                        .iter()
                        .filter(|t| circle.contains(t))
                        .map(String::as_str)
                        .collect();
                    format!("{m} -> {}", to.join(", "))
                })
                .collect();
            wrong.push(format!("{krate}: {}", arrows.join("; ")));
        }
    }
    assert!(
        wrong.is_empty(),
        "modules that import one another in a circle (move what both need below both):\n{}",
        wrong.join("\n")
    );
    eprintln!("checked: {modules} modules");
    assert!(modules >= 100, "{modules} modules read");
}
