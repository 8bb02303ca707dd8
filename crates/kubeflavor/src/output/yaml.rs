//! Comments in rendered YAML: `# ` lines wrapped to the page, and notes placed above the
//! field they explain. Works on the block YAML [`super::to_yaml`] writes, so a YAML reader
//! sees the same document with or without them.

/// Block YAML (as [`super::to_yaml`] writes it: one key or item per line, no multi-line
/// scalars) with each note's comment inserted above the first line of its key path. A
/// note's path is its keys joined by `.`, list items transparent
/// (`spec.template.spec.containers.resources` is the `resources` of the first container);
/// the comment is indented like the key, or like the `- ` of a list item whose first key it
/// is. Err names the path of a note that matched no line.
pub fn with_notes(yaml: &str, notes: &[(String, String)]) -> Result<String, String> {
    if notes.is_empty() {
        return Ok(yaml.to_string());
    }
    let mut used = vec![false; notes.len()];
    // The keys leading to the current line, with the column each key starts at.
    let mut path: Vec<(usize, String)> = Vec::new();
    let mut out = String::new();
    for line in yaml.lines() {
        let indent = line.len() - line.trim_start_matches(' ').len();
        let mut column = indent;
        let mut rest = &line[indent..];
        while let Some(item) = rest.strip_prefix("- ") {
            column += 2;
            rest = item;
        }
        if let Some(key) = mapping_key(rest) {
            path.retain(|(c, _)| *c < column);
            path.push((column, key));
            let here = path
                .iter()
                .map(|(_, k)| k.as_str())
                .collect::<Vec<_>>()
                .join(".");
            for (i, (at, text)) in notes.iter().enumerate() {
                if !used[i] && *at == here {
                    used[i] = true;
                    out.push_str(&comment(text, &line[..indent]));
                }
            }
        }
        out.push_str(line);
        out.push('\n');
    }
    match notes.iter().zip(&used).find(|(_, used)| !**used) {
        Some(((at, _), _)) => Err(at.clone()),
        None => Ok(out),
    }
}

/// The key of a `key: value` or `key:` line (plain, or quoted as the YAML writer quotes
/// keys that need it); None for a scalar list item.
fn mapping_key(line: &str) -> Option<String> {
    if line.starts_with('"') || line.starts_with('\'') {
        // A quoted key: parse it as the YAML string it is.
        let end = quoted_end(line)?;
        let after = &line[end..];
        if after.starts_with(": ") || after == ":" {
            return serde_saphyr::from_str::<String>(&line[..end]).ok();
        }
        return None;
    }
    let key = match line.split_once(": ") {
        Some((key, _)) => key,
        None => line.strip_suffix(':')?,
    };
    (!key.is_empty() && !key.starts_with(['{', '[', '#'])).then(|| key.to_string())
}

/// The byte just past the closing quote of the quoted scalar `line` starts with.
fn quoted_end(line: &str) -> Option<usize> {
    let quote = line.chars().next()?;
    let mut chars = line.char_indices().skip(1);
    while let Some((i, c)) = chars.next() {
        match (quote, c) {
            ('"', '\\') => {
                chars.next();
            }
            ('\'', '\'') if line[i + 1..].starts_with('\'') => {
                chars.next();
            }
            (q, c) if c == q => return Some(i + 1),
            _ => {}
        }
    }
    None
}

/// `# ` lines, wrapped near 96 columns (indent included).
pub fn comment(text: &str, indent: &str) -> String {
    let width = 94usize.saturating_sub(indent.len()).max(40);
    let mut out = String::new();
    for paragraph in text.lines() {
        let mut line = String::new();
        for word in paragraph.split_whitespace() {
            if !line.is_empty() && line.len() + word.len() + 1 > width {
                out.push_str(&format!("{indent}# {line}\n"));
                line.clear();
            }
            if !line.is_empty() {
                line.push(' ');
            }
            line.push_str(word);
        }
        out.push_str(&format!("{indent}# {line}\n"));
    }
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use serde_json::Value;

    use super::*;

    /// `object` as block YAML with `notes` placed.
    fn noted(object: &Value, notes: &[(&str, &str)]) -> Result<String, String> {
        let notes: Vec<(String, String)> = notes
            .iter()
            .map(|(path, text)| (path.to_string(), text.to_string()))
            .collect();
        with_notes(&super::super::to_yaml(object).unwrap(), &notes)
    }

    /// The line of `text` that is exactly `line`, and the comment lines right above it.
    pub(crate) fn comments_above<'a>(text: &'a str, line: &str) -> Vec<&'a str> {
        let lines: Vec<&str> = text.lines().collect();
        let at = lines
            .iter()
            .position(|l| *l == line)
            .unwrap_or_else(|| panic!("no line {line:?} in\n{text}"));
        let mut above: Vec<&str> = lines[..at]
            .iter()
            .rev()
            .take_while(|l| l.trim_start().starts_with('#'))
            .copied()
            .collect();
        above.reverse();
        above
    }

    #[test]
    fn a_note_lands_above_its_key_indented_like_it() {
        let object = serde_json::json!({
            "kind": "Thing",
            "spec": {
                "replicas": 2,
                "template": {"spec": {"containers": [
                    {"image": "i", "name": "a", "resources": {"limits": {"memory": "1Mi"}}},
                ]}},
            },
        });
        let text = noted(
            &object,
            &[
                ("spec.replicas", "How many."),
                ("spec.template.spec.containers.resources", "Sized."),
                ("spec.template.spec.containers.name", "Named."),
                (
                    "spec.template.spec.containers.image",
                    "First key of the item.",
                ),
                ("spec", "The spec."),
            ],
        )
        .unwrap();
        assert_eq!(comments_above(&text, "spec:"), ["# The spec."]);
        assert_eq!(comments_above(&text, "  replicas: 2"), ["  # How many."]);
        assert_eq!(
            comments_above(&text, "      - image: i"),
            ["      # First key of the item."]
        );
        assert_eq!(
            comments_above(&text, "        name: a"),
            ["        # Named."]
        );
        assert_eq!(
            comments_above(&text, "        resources:"),
            ["        # Sized."]
        );
        // Comments change nothing a YAML reader sees.
        let read: Value = serde_saphyr::from_str(&text).unwrap();
        assert_eq!(read, object);
    }

    #[test]
    fn a_note_matches_whole_keys_only_and_quoted_keys_by_their_value() {
        let text = noted(
            &serde_json::json!({
                "metadata": {"annotations": {"prometheus.io/port": "8080", "true": "yes"}},
                "spec": {"replica": 1, "replicas": 2, "args": ["a: b", "c"]},
            }),
            &[
                ("spec.replicas", "Two."),
                ("metadata.annotations.prometheus.io/port", "Port."),
                ("metadata.annotations.true", "Quoted."),
            ],
        )
        .unwrap();
        assert!(comments_above(&text, "  replica: 1").is_empty(), "{text}");
        assert_eq!(comments_above(&text, "  replicas: 2"), ["  # Two."]);
        let port = text
            .lines()
            .find(|l| l.contains("prometheus.io/port"))
            .unwrap();
        assert_eq!(comments_above(&text, port), ["    # Port."]);
        let quoted = text.lines().find(|l| l.contains("yes")).unwrap();
        assert_eq!(comments_above(&text, quoted), ["    # Quoted."]);
    }

    #[test]
    fn a_note_for_a_path_no_line_has_is_named_in_the_error() {
        let object = serde_json::json!({"spec": {"replicas": 2}});
        assert_eq!(
            noted(
                &object,
                &[("spec.replicas", "Fine."), ("spec.replica", "Misspelt.")]
            ),
            Err("spec.replica".to_string())
        );
        // A list item's key is addressed without an index.
        let object = serde_json::json!({"items": [{"name": "a"}]});
        assert_eq!(
            noted(&object, &[("items.0.name", "Indexed.")]),
            Err("items.0.name".to_string())
        );
    }

    #[test]
    fn long_notes_wrap_within_the_width_at_any_depth() {
        let long = "word ".repeat(60);
        let text = noted(
            &serde_json::json!({"a": {"b": {"c": {"d": 1}}}}),
            &[("a.b.c.d", &long)],
        )
        .unwrap();
        let lines = comments_above(&text, "      d: 1");
        assert!(lines.len() > 2, "{text}");
        for line in lines {
            assert!(line.starts_with("      # ") && line.len() <= 96, "{line:?}");
        }
    }

    #[test]
    fn a_paragraph_break_starts_a_new_comment_line() {
        assert_eq!(comment("One.\nTwo.", "  "), "  # One.\n  # Two.\n");
    }
}
