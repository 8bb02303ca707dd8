//! Just enough of PromQL to say which series an expression reads: its selectors (metric,
//! label, operator, value) and the labels it groups or matches by. And the Prometheus text
//! format, read into the names, labels and values a scrape exposes.

use std::collections::{BTreeMap, BTreeSet};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Matcher {
    pub label: String,
    pub op: String,
    pub value: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selector {
    pub metric: String,
    pub matchers: Vec<Matcher>,
}

/// What an expression reads.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Reads {
    pub selectors: Vec<Selector>,
    /// Labels named by `by`, `without`, `on`, `ignoring`, `group_left`, `group_right`.
    pub grouping: BTreeSet<String>,
}

const GROUPING: [&str; 6] = [
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
];

fn is_ident_start(c: char) -> bool {
    c.is_ascii_alphabetic() || c == '_' || c == ':'
}

fn is_ident(c: char) -> bool {
    is_ident_start(c) || c.is_ascii_digit()
}

struct Scan<'a> {
    chars: Vec<char>,
    at: usize,
    _text: &'a str,
}

impl Scan<'_> {
    fn peek(&self) -> Option<char> {
        self.chars.get(self.at).copied()
    }
    fn skip_ws(&mut self) {
        while self.peek().is_some_and(char::is_whitespace) {
            self.at += 1;
        }
    }
    fn ident(&mut self) -> String {
        let start = self.at;
        while self.peek().is_some_and(is_ident) {
            self.at += 1;
        }
        self.chars[start..self.at].iter().collect()
    }
    fn string(&mut self) -> String {
        let quote = self.peek().expect("a quote");
        self.at += 1;
        let mut out = String::new();
        while let Some(c) = self.peek() {
            self.at += 1;
            match c {
                '\\' => {
                    if let Some(n) = self.peek() {
                        out.push(n);
                        self.at += 1;
                    }
                }
                c if c == quote => break,
                c => out.push(c),
            }
        }
        out
    }
    fn skip_past(&mut self, end: char) {
        while let Some(c) = self.peek() {
            self.at += 1;
            if c == end {
                break;
            }
        }
    }
    fn matchers(&mut self) -> Vec<Matcher> {
        self.at += 1; // {
        let mut out = Vec::new();
        loop {
            self.skip_ws();
            match self.peek() {
                None => break,
                Some('}') => {
                    self.at += 1;
                    break;
                }
                Some(',') => self.at += 1,
                Some(_) => {
                    let label = self.ident();
                    self.skip_ws();
                    let mut op = String::new();
                    while self.peek().is_some_and(|c| "=!~".contains(c)) {
                        op.push(self.peek().unwrap());
                        self.at += 1;
                    }
                    self.skip_ws();
                    let value = self.string();
                    out.push(Matcher { label, op, value });
                }
            }
        }
        out
    }
    fn label_list(&mut self) -> Vec<String> {
        self.at += 1; // (
        let mut out = Vec::new();
        loop {
            self.skip_ws();
            match self.peek() {
                None => break,
                Some(')') => {
                    self.at += 1;
                    break;
                }
                Some(',') => self.at += 1,
                Some(_) => out.push(self.ident()),
            }
        }
        out
    }
}

/// The selectors and grouping labels of `expr`.
pub fn reads(expr: &str) -> Reads {
    let mut s = Scan {
        chars: expr.chars().collect(),
        at: 0,
        _text: expr,
    };
    let mut reads = Reads::default();
    while let Some(c) = s.peek() {
        match c {
            '"' | '\'' | '`' => {
                s.string();
            }
            '[' => s.skip_past(']'),
            '{' => {
                // A selector without a metric name: `{__name__=...}`; kubeflavor's have one.
                reads.selectors.push(Selector {
                    metric: String::new(),
                    matchers: s.matchers(),
                });
            }
            c if c.is_ascii_digit() || c == '.' => {
                while s
                    .peek()
                    .is_some_and(|c| c.is_ascii_alphanumeric() || c == '.')
                {
                    s.at += 1;
                }
            }
            c if is_ident_start(c) => {
                let word = s.ident();
                s.skip_ws();
                match s.peek() {
                    Some('(') if GROUPING.contains(&word.as_str()) => {
                        reads.grouping.extend(s.label_list());
                    }
                    Some('(') => {} // a function or an aggregation
                    Some('{') => reads.selectors.push(Selector {
                        metric: word,
                        matchers: s.matchers(),
                    }),
                    _ if word.starts_with("kubeflavor_") => reads.selectors.push(Selector {
                        metric: word,
                        matchers: Vec::new(),
                    }),
                    _ => {} // or, and, unless, bool, group_left without labels
                }
            }
            _ => s.at += 1,
        }
    }
    reads
}

/// A scrape: every sample name, with the values each of its labels takes.
#[derive(Debug, Default)]
pub struct Scrape {
    pub series: BTreeMap<String, BTreeMap<String, BTreeSet<String>>>,
}

impl Scrape {
    /// Reads the Prometheus text format (HELP and TYPE lines are skipped: only samples
    /// say which names and labels exist).
    pub fn read(text: &str) -> Scrape {
        let mut scrape = Scrape::default();
        for line in text.lines() {
            if line.starts_with('#') || line.trim().is_empty() {
                continue;
            }
            let name_end = line.find(['{', ' ']).unwrap_or(line.len());
            let labels = scrape
                .series
                .entry(line[..name_end].to_string())
                .or_default();
            if line[name_end..].starts_with('{') {
                let mut s = Scan {
                    chars: line[name_end..].chars().collect(),
                    at: 0,
                    _text: line,
                };
                for m in s.matchers() {
                    labels.entry(m.label).or_default().insert(m.value);
                }
            }
        }
        scrape
    }

    pub fn extend(&mut self, other: Scrape) {
        for (name, labels) in other.series {
            let mine = self.series.entry(name).or_default();
            for (label, values) in labels {
                mine.entry(label).or_default().extend(values);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selectors_and_grouping_labels_are_read() {
        let r = reads(
            r#"sum by (cause) (increase(kubeflavor_csr_decisions_total{outcome="denied",cause=~"a|b"}[10m])) > 0 or max(kubeflavor_leader) * on (flavor) group_left (trust_level) vector(0)"#,
        );
        assert_eq!(r.selectors.len(), 2);
        assert_eq!(r.selectors[0].metric, "kubeflavor_csr_decisions_total");
        assert_eq!(
            r.selectors[0].matchers[1],
            Matcher {
                label: "cause".into(),
                op: "=~".into(),
                value: "a|b".into()
            }
        );
        assert_eq!(r.selectors[1].metric, "kubeflavor_leader");
        assert_eq!(
            r.grouping.into_iter().collect::<Vec<_>>(),
            ["cause", "flavor", "trust_level"]
        );
    }

    #[test]
    fn a_scrape_is_read_into_names_labels_and_values() {
        let s = Scrape::read(
            "# TYPE a_total counter\na_total{x=\"1\",y=\"q\\\"uote\"} 3\na_total{x=\"2\"} 1\nb 0\n",
        );
        assert_eq!(s.series["a_total"]["x"].len(), 2);
        assert!(s.series["a_total"]["y"].contains("q\"uote"));
        assert!(s.series["b"].is_empty());
    }
}
