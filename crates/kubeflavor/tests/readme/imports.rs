//! The import graph of each crate's modules, file by file, as `use crate::...` and
//! `use super::...` draw it (comments and `#[cfg(test)]` modules aside): README's Layout
//! promises no module imports in a circle, and cargo keeps that only between crates.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Module path (`store::gc_index`, `""` for the crate root) to the modules it imports.
pub type Graph = BTreeMap<String, BTreeSet<String>>;

/// The graph of the crate whose sources are under `src`.
pub fn graph(src: &Path) -> Graph {
    let mut files = BTreeMap::new();
    collect(src, src, &mut files);
    let modules: BTreeSet<String> = files.keys().cloned().collect();
    files
        .iter()
        .map(|(module, text)| {
            let imports = references(module, &code_of(text))
                .into_iter()
                .filter_map(|path| resolve(&modules, &path))
                .filter(|target| target != module)
                .collect();
            (module.clone(), imports)
        })
        .collect()
}

fn collect(root: &Path, dir: &Path, files: &mut BTreeMap<String, String>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            collect(root, &path, files);
            continue;
        }
        if path.extension().is_none_or(|e| e != "rs") {
            continue;
        }
        let rel = path
            .strip_prefix(root)
            .expect("under root")
            .with_extension("");
        let mut segments: Vec<String> = rel
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect();
        if segments.last().is_some_and(|s| s == "mod") {
            segments.pop();
        }
        if segments.len() == 1 && (segments[0] == "lib" || segments[0] == "main") {
            segments.clear();
        }
        // Test modules in their own files import what they test; they are not layers.
        if segments.iter().any(|s| s == "tests") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        files.insert(segments.join("::"), text);
    }
}

/// The code of a file without its comments and its trailing `#[cfg(test)] mod tests`.
fn code_of(text: &str) -> String {
    let text = match text.find("#[cfg(test)]\nmod tests {") {
        Some(at) => &text[..at],
        None => text,
    };
    text.lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Every path after `crate::` or a run of `super::` in `code`, made absolute from `module`:
/// those of `use` items (braces expanded) and those written inline.
fn references(module: &str, code: &str) -> Vec<String> {
    let here: Vec<&str> = module.split("::").filter(|s| !s.is_empty()).collect();
    let mut paths = Vec::new();
    // `use` items start a line (after a visibility) and end at the first `;`.
    let mut lines = code.lines();
    while let Some(line) = lines.next() {
        let line = line.trim_start();
        let Some(item) = ["use ", "pub use ", "pub(crate) use ", "pub(super) use "]
            .iter()
            .find_map(|p| line.strip_prefix(p))
        else {
            continue;
        };
        let mut item = item.to_string();
        while !item.contains(';') {
            match lines.next() {
                Some(more) => item.push_str(more),
                None => break,
            }
        }
        let item = item.split(';').next().unwrap_or_default();
        paths.extend(expand(item));
    }
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == ':';
    paths.extend(code.split(|c: char| !ident(c)).map(str::to_string));
    paths
        .iter()
        .filter_map(|path| {
            let mut segments: Vec<&str> = path.split("::").filter(|s| !s.is_empty()).collect();
            let base: Vec<&str> = match segments.first() {
                Some(&"crate") => {
                    segments.remove(0);
                    Vec::new()
                }
                Some(&"super") => {
                    let ups = segments.iter().take_while(|s| **s == "super").count();
                    segments.drain(..ups);
                    here[..here.len().saturating_sub(ups)].to_vec()
                }
                _ => return None,
            };
            if segments.is_empty() {
                // A bare `super::` run (the head of a braced `use`, expanded above).
                return None;
            }
            let absolute: Vec<&str> = base.into_iter().chain(segments).collect();
            Some(absolute.join("::"))
        })
        .collect()
}

/// The paths one `use` item imports: `a::{b, c::{d, self}}` is `a::b`, `a::c::d`, `a::c`.
fn expand(item: &str) -> Vec<String> {
    let item = item.trim();
    let Some(open) = item.find('{') else {
        let path = item.split(" as ").next().unwrap_or(item).trim();
        return vec![path.trim_end_matches("::self").to_string()];
    };
    let prefix = item[..open].trim().trim_end_matches("::");
    let close = item.rfind('}').filter(|c| *c > open).unwrap_or(item.len());
    let inner = &item[open + 1..close];
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (i, c) in inner.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&inner[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&inner[start..]);
    parts
        .into_iter()
        .filter(|p| !p.trim().is_empty())
        .flat_map(expand)
        .map(|p| match p.as_str() {
            "self" => prefix.to_string(),
            _ => format!("{prefix}::{p}"),
        })
        .collect()
}

/// The longest module that `path` starts with (`None` for the crate root: its items are
/// re-exports or the crate's face, not a layer).
fn resolve(modules: &BTreeSet<String>, path: &str) -> Option<String> {
    let segments: Vec<&str> = path.split("::").collect();
    (1..=segments.len())
        .rev()
        .map(|n| segments[..n].join("::"))
        .find(|m| modules.contains(m))
}

/// The circles of the graph: its strongly connected components of more than one module.
pub fn circles(graph: &Graph) -> Vec<Vec<String>> {
    // Tarjan's algorithm, iterative over the (small) graph by recursion on modules.
    struct Walk<'a> {
        graph: &'a Graph,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        found: Vec<Vec<String>>,
    }
    impl<'a> Walk<'a> {
        fn visit(&mut self, v: &'a str) {
            let n = self.index.len();
            self.index.insert(v, n);
            self.low.insert(v, n);
            self.stack.push(v);
            self.on_stack.insert(v);
            for w in self.graph.get(v).into_iter().flatten() {
                let w = w.as_str();
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let lw = self.low[w];
                    let lv = self.low.get_mut(v).expect("visited");
                    *lv = (*lv).min(lw);
                } else if self.on_stack.contains(w) {
                    let iw = self.index[w];
                    let lv = self.low.get_mut(v).expect("visited");
                    *lv = (*lv).min(iw);
                }
            }
            if self.low[v] == self.index[v] {
                let mut component = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on_stack.remove(w);
                    component.push(w.to_string());
                    if w == v {
                        break;
                    }
                }
                if component.len() > 1 {
                    component.sort();
                    self.found.push(component);
                }
            }
        }
    }
    let mut walk = Walk {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for v in graph.keys() {
        if !walk.index.contains_key(v.as_str()) {
            walk.visit(v);
        }
    }
    walk.found
}

#[test]
fn references_are_made_absolute() {
    let code = "use super::super::{Context, Error};\nuse crate::{authn, store::{self, gc_index::GcIndex}};\nlet x = super::read::list();";
    let found: BTreeSet<String> = references("controller::csr::facts", code)
        .into_iter()
        .collect();
    let want: BTreeSet<String> = [
        "controller::Context",
        "controller::Error",
        "authn",
        "store",
        "store::gc_index::GcIndex",
        "controller::csr::read::list",
    ]
    .into_iter()
    .map(String::from)
    .collect();
    assert_eq!(found, want);
}

#[test]
fn a_circle_is_found_and_a_chain_is_not() {
    let g = |edges: &[(&str, &str)]| {
        let mut graph = Graph::new();
        for (a, b) in edges {
            graph
                .entry(a.to_string())
                .or_default()
                .insert(b.to_string());
            graph.entry(b.to_string()).or_default();
        }
        graph
    };
    assert_eq!(
        circles(&g(&[("gc", "store"), ("store", "gc"), ("server", "gc")])),
        vec![vec!["gc".to_string(), "store".to_string()]]
    );
    assert!(
        circles(&g(&[
            ("server", "handlers"),
            ("handlers", "store"),
            ("gc", "store")
        ]))
        .is_empty()
    );
}
