//! The Prometheus text format (0.0.4) from prometheus-client's OpenMetrics text, for the
//! readers of /metrics that do not ask for OpenMetrics: `curl`, `promtool check metrics`,
//! older scrapers. Prometheus itself asks for OpenMetrics and gets it unchanged.
//!
//! The two formats differ, for the metric kinds kubeflavor exposes (counters, gauges,
//! histograms), in three places: a counter family is named without `_total` in OpenMetrics
//! and with it in the text format (its samples are `_total` in both); OpenMetrics has `#
//! UNIT` lines; and it ends with `# EOF`.

use std::collections::HashSet;

/// The media type of [`prometheus_text`]'s output.
pub const PROMETHEUS_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";
/// The media type of prometheus-client's output.
pub const OPENMETRICS_TEXT: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Whether a request's `Accept` header asks for OpenMetrics (Prometheus' scrapes do).
pub fn wants_openmetrics(accept: Option<&str>) -> bool {
    accept.is_some_and(|a| {
        a.split(',')
            .any(|range| range.trim().starts_with("application/openmetrics-text"))
    })
}

/// `openmetrics` (prometheus-client's text) in the Prometheus text format.
pub fn prometheus_text(openmetrics: &str) -> String {
    let counters: HashSet<&str> = openmetrics
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.strip_suffix(" counter"))
        .collect();
    let mut out = String::with_capacity(openmetrics.len());
    for line in openmetrics.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        match descriptor(line) {
            Some((kind, name, rest)) if counters.contains(name) => {
                out.push_str(&format!("# {kind} {name}_total{rest}"));
            }
            _ => out.push_str(line),
        }
        out.push('\n');
    }
    out
}

/// A `# HELP` or `# TYPE` line as (HELP|TYPE, family name, the rest with its leading space).
fn descriptor(line: &str) -> Option<(&str, &str, &str)> {
    let rest = line.strip_prefix("# ")?;
    let (kind, rest) = rest.split_once(' ')?;
    if kind != "HELP" && kind != "TYPE" {
        return None;
    }
    let end = rest.find(' ').unwrap_or(rest.len());
    Some((kind, &rest[..end], &rest[end..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_are_named_with_total_and_openmetrics_only_lines_go() {
        let om = "# HELP kf_decisions CSR decisions.\n# TYPE kf_decisions counter\n\
                  kf_decisions_total{cause=\"x\"} 2\n# HELP kf_leader 1 while leading.\n\
                  # TYPE kf_leader gauge\nkf_leader 1\n# HELP kf_wait_seconds Waits.\n\
                  # TYPE kf_wait_seconds histogram\n# UNIT kf_wait_seconds seconds\n\
                  kf_wait_seconds_sum 0.5\nkf_wait_seconds_count 1\n\
                  kf_wait_seconds_bucket{le=\"+Inf\"} 1\n# EOF\n";
        assert_eq!(
            prometheus_text(om),
            "# HELP kf_decisions_total CSR decisions.\n# TYPE kf_decisions_total counter\n\
             kf_decisions_total{cause=\"x\"} 2\n# HELP kf_leader 1 while leading.\n\
             # TYPE kf_leader gauge\nkf_leader 1\n# HELP kf_wait_seconds Waits.\n\
             # TYPE kf_wait_seconds histogram\n\
             kf_wait_seconds_sum 0.5\nkf_wait_seconds_count 1\n\
             kf_wait_seconds_bucket{le=\"+Inf\"} 1\n"
        );
    }

    #[test]
    fn prometheus_scrapes_get_openmetrics_and_everyone_else_the_text_format() {
        let prometheus = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        assert!(wants_openmetrics(Some(prometheus)));
        assert!(!wants_openmetrics(Some("*/*")), "curl");
        assert!(!wants_openmetrics(Some("text/plain")));
        assert!(!wants_openmetrics(None));
    }
}
