//! The commands a Markdown file shows: every line of its fenced `sh` blocks (a `console`
//! block's `$ ` lines), and its inline code spans that start with a command.

/// One command as the reader sees it, with where it is.
#[derive(Debug, Clone)]
pub struct Shown {
    pub file: &'static str,
    pub line: usize,
    /// From a fenced block (every command is checked) or an inline span (only commands
    /// this test knows are checked; prose such as `kubectl flavor ...` is left alone).
    pub fenced: bool,
    pub text: String,
}

/// The commands of `markdown`, which is the file `file`.
pub fn commands(file: &'static str, markdown: &str) -> Vec<Shown> {
    let mut out = Vec::new();
    let mut prose = String::new();
    let mut prose_lines = Vec::new();
    let mut fence: Option<String> = None;
    let mut pending: Option<(usize, String)> = None;
    for (i, line) in markdown.lines().enumerate() {
        let number = i + 1;
        let trimmed = line.trim_start();
        if let Some(lang) = trimmed.strip_prefix("```") {
            fence = match fence {
                None => Some(lang.trim().to_string()),
                Some(_) => None,
            };
            // A block ends what it started, a quote left open included.
            if let Some((line, text)) = pending.take() {
                out.push(Shown {
                    file,
                    line,
                    fenced: true,
                    text,
                });
            }
            continue;
        }
        let Some(lang) = &fence else {
            prose.push_str(line);
            prose.push('\n');
            prose_lines.push(number);
            continue;
        };
        let command = match lang.as_str() {
            "sh" | "bash" | "shell" => Some(line),
            "console" => line.strip_prefix("$ "),
            _ => None,
        };
        let Some(command) = command else { continue };
        // A continued line joins the next one, as the shell reads it.
        let (start, mut text) = pending.take().unwrap_or((number, String::new()));
        match command.trim_end().strip_suffix('\\') {
            Some(head) => {
                text.push_str(head);
                text.push(' ');
                pending = Some((start, text));
            }
            None if crate::shell::quote_left_open(&format!("{text}{command}")) => {
                text.push_str(command);
                text.push(' ');
                pending = Some((start, text));
            }
            None => {
                text.push_str(command);
                out.push(Shown {
                    file,
                    line: start,
                    fenced: true,
                    text,
                });
            }
        }
    }
    out.extend(spans(file, &prose, &prose_lines));
    out
}

/// The inline code spans of `prose` (the file's lines outside fences, `lines` their
/// numbers), a span across a line break read as one line.
fn spans(file: &'static str, prose: &str, lines: &[usize]) -> Vec<Shown> {
    let bytes = prose.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b'`' {
            i += 1;
            continue;
        }
        let ticks = bytes[i..].iter().take_while(|b| **b == b'`').count();
        let start = i + ticks;
        let fence = &prose[i..start];
        let Some(len) = prose[start..].find(fence) else {
            break;
        };
        let line = lines[prose[..start].matches('\n').count()];
        let text = prose[start..start + len].replace('\n', " ");
        out.push(Shown {
            file,
            line,
            fenced: false,
            text: text.trim().to_string(),
        });
        i = start + len + ticks;
    }
    out
}
