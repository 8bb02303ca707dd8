//! kubectl-like output: aligned tables with UPPERCASE headers and two spaces between
//! columns, ages such as `5m` / `3h` / `2d`, and `-o json|yaml|wide|name`; comments in
//! rendered YAML ([`yaml`]).

pub mod yaml;

use std::io::Write;

use jiff::{SignedDuration, Timestamp};
use serde::Serialize;

use crate::error::{CliError, Result};

/// The `-o` values of list and get commands.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// An aligned table (the default).
    #[default]
    #[value(skip)]
    Table,
    /// The table with more columns.
    Wide,
    /// JSON: one object, or a `List` with `items` for several.
    Json,
    /// YAML: one document, or a `List` with `items` for several.
    Yaml,
    /// `<resource>/<name>` per line.
    Name,
}

/// Rows of text cells under a header. Column widths come from the content.
#[derive(Debug, Default)]
pub struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new<S: AsRef<str>>(header: &[S]) -> Table {
        Table {
            header: header.iter().map(|h| h.as_ref().to_uppercase()).collect(),
            rows: Vec::new(),
        }
    }

    /// Adds a row. A cell's invisible characters (control and format characters such as
    /// U+202E) are shown as escapes: text from the cluster (a token's issued-to) cannot
    /// make a row read other than it is stored.
    pub fn row(&mut self, cells: Vec<String>) {
        debug_assert_eq!(
            cells.len(),
            self.header.len(),
            "row width must match the header"
        );
        let cells = cells
            .into_iter()
            .map(|c| kubeflavor_core::invisible::shown(&c).into_owned())
            .collect();
        self.rows.push(cells);
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// kubectl's printer: every column but the last padded to its widest cell plus two
    /// spaces; no trailing spaces.
    pub fn render(&self) -> String {
        let columns = self.header.len();
        let mut widths = vec![0usize; columns];
        for line in std::iter::once(&self.header).chain(&self.rows) {
            for (i, cell) in line.iter().enumerate() {
                widths[i] = widths[i].max(cell.chars().count());
            }
        }
        let mut out = String::new();
        for line in std::iter::once(&self.header).chain(&self.rows) {
            let mut text = String::new();
            for (i, cell) in line.iter().enumerate() {
                text.push_str(cell);
                if i + 1 < columns {
                    let pad = widths[i] - cell.chars().count() + 2;
                    text.extend(std::iter::repeat_n(' ', pad));
                }
            }
            out.push_str(text.trim_end());
            out.push('\n');
        }
        out
    }
}

/// A list printed by `-o json|yaml`: kubectl wraps several objects in `kind: List`.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct List<'a, T: Serialize> {
    pub api_version: &'static str,
    pub kind: &'static str,
    pub items: &'a [T],
}

impl<'a, T: Serialize> List<'a, T> {
    pub fn of(items: &'a [T]) -> Self {
        List {
            api_version: "v1",
            kind: "List",
            items,
        }
    }
}

pub fn write_json<T: Serialize + ?Sized>(out: &mut dyn Write, value: &T) -> Result<()> {
    let text = serde_json::to_string_pretty(value).map_err(|e| {
        CliError::failed(format!("cannot render JSON: {e}"), "report this as a bug")
    })?;
    writeln!(out, "{text}")?;
    Ok(())
}

/// YAML as kubectl would read it back: no folded (`>`) scalars, so long strings such as
/// CEL rules stay on one line exactly as written.
pub fn to_yaml<T: Serialize>(value: &T) -> Result<String> {
    let options = serde_saphyr::ser_options! { prefer_block_scalars: false };
    serde_saphyr::to_string_with_options(value, options)
        .map_err(|e| CliError::failed(format!("cannot render YAML: {e}"), "report this as a bug"))
}

pub fn write_yaml<T: Serialize>(out: &mut dyn Write, value: &T) -> Result<()> {
    let text = to_yaml(value)?;
    out.write_all(text.as_bytes())?;
    if !text.ends_with('\n') {
        writeln!(out)?;
    }
    Ok(())
}

/// kubectl's `HumanDuration` (k8s.io/apimachinery/pkg/util/duration): seconds under 2
/// minutes, minutes under 3 hours (with seconds under 10 minutes), hours under 2 days (with
/// minutes under 8 hours), days under 2 years (with hours under 8 days), then years. A skew
/// of one second into the future is "0s"; more is `<invalid>`.
pub fn human_duration(d: SignedDuration) -> String {
    let secs = d.as_secs();
    if secs < -1 {
        return "<invalid>".into();
    }
    if secs < 0 {
        return "0s".into();
    }
    let seconds = secs;
    let minutes = seconds / 60;
    let hours = seconds / 3600;
    if seconds < 120 {
        return format!("{seconds}s");
    }
    if minutes < 10 {
        let s = seconds % 60;
        return if s == 0 {
            format!("{minutes}m")
        } else {
            format!("{minutes}m{s}s")
        };
    }
    if minutes < 180 {
        return format!("{minutes}m");
    }
    if hours < 8 {
        let m = minutes % 60;
        return if m == 0 {
            format!("{hours}h")
        } else {
            format!("{hours}h{m}m")
        };
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    let days = hours / 24;
    if hours < 24 * 8 {
        let h = hours % 24;
        return if h == 0 {
            format!("{days}d")
        } else {
            format!("{days}d{h}h")
        };
    }
    if hours < 24 * 365 * 2 {
        return format!("{days}d");
    }
    let years = days / 365;
    if hours < 24 * 365 * 8 {
        let dy = days % 365;
        return if dy == 0 {
            format!("{years}y")
        } else {
            format!("{years}y{dy}d")
        };
    }
    format!("{years}y")
}

/// An object's creation time, for the AGE column.
pub fn created(meta: &kube::api::ObjectMeta) -> Option<Timestamp> {
    meta.creation_timestamp.as_ref().map(|t| t.0)
}

/// The AGE column: time since `then`, or `<unknown>` when the server sent none.
pub fn age(then: Option<Timestamp>, now: Timestamp) -> String {
    match then {
        Some(t) => human_duration(now.duration_since(t)),
        None => "<unknown>".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_columns_align_on_the_widest_cell() {
        let mut t = Table::new(&["id", "flavor", "age"]);
        t.row(vec!["abcdef".into(), "sweet".into(), "5m".into()]);
        t.row(vec!["x".into(), "<none>".into(), "12d".into()]);
        assert_eq!(
            t.render(),
            "ID      FLAVOR  AGE\nabcdef  sweet   5m\nx       <none>  12d\n"
        );
    }

    #[test]
    fn a_cell_cannot_hide_what_it_holds() {
        let mut t = Table::new(&["node", "issued-to"]);
        t.row(vec!["n1".into(), "eve\u{202e}ecila".into()]);
        let out = t.render();
        assert!(out.contains("eve\\u{202e}ecila"), "{out}");
        assert!(!out.contains('\u{202e}'), "{out}");
    }

    #[test]
    fn table_lines_have_no_trailing_spaces() {
        let mut t = Table::new(&["a", "b"]);
        t.row(vec!["long-value".into(), String::new()]);
        for line in t.render().lines() {
            assert_eq!(line, line.trim_end());
        }
    }

    #[test]
    fn durations_read_like_kubectl() {
        let cases = [
            (0, "0s"),
            (59, "59s"),
            (119, "119s"),
            (120, "2m"),
            (150, "2m30s"),
            (600, "10m"),
            (179 * 60, "179m"),
            (3 * 3600, "3h"),
            (3 * 3600 + 25 * 60, "3h25m"),
            (8 * 3600, "8h"),
            (47 * 3600, "47h"),
            (48 * 3600, "2d"),
            (50 * 3600, "2d2h"),
            (8 * 24 * 3600, "8d"),
            (400 * 24 * 3600, "400d"),
            (730 * 24 * 3600, "2y"),
            (3000 * 24 * 3600, "8y"),
            (-1, "0s"),
            (-5, "<invalid>"),
        ];
        for (secs, want) in cases {
            assert_eq!(
                human_duration(SignedDuration::from_secs(secs)),
                want,
                "{secs}s"
            );
        }
    }
}
