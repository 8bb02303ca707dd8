//! A shell line as words, enough for the README's commands: quotes, `$(...)`, comments,
//! pipes and `&&`, redirections and leading variable assignments.

/// The simple commands of `line`, each as its words (variable assignments before the
/// command and redirections left out). A line that only assigns gives no command.
pub fn commands(line: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let mut current: Vec<String> = Vec::new();
    let mut words = words(line).into_iter();
    while let Some(word) = words.next() {
        match word.as_str() {
            "|" | "||" | "&&" | ";" => out.push(std::mem::take(&mut current)),
            ">" | ">>" | "<" | "2>" | "2>>" => {
                words.next();
            }
            // A placeholder the README writes in angle brackets, `<crate>` or
            // `<one package>`, is one word to the reader.
            w if w.starts_with('<') && w[1..].starts_with(|c: char| c.is_alphabetic()) => {
                if w.ends_with('>') {
                    current.push(word);
                    continue;
                }
                let mut placeholder = word.clone();
                for next in words.by_ref() {
                    placeholder.push(' ');
                    placeholder.push_str(&next);
                    if next.ends_with('>') {
                        break;
                    }
                }
                current.push(placeholder);
            }
            w if w.starts_with('>') || w.starts_with('<') || w.starts_with("2>") => {}
            _ => current.push(word),
        }
    }
    out.push(current);
    out.into_iter()
        .map(|mut command| {
            // A subshell's parentheses: `(cd dir && tool ...)`.
            if let Some(first) = command.first_mut() {
                *first = first.trim_start_matches('(').to_string();
            }
            if let Some(last) = command.last_mut()
                && last.ends_with(')')
                && !last.contains("$(")
            {
                last.pop();
            }
            // `export NAME=value` only assigns, as a bare `NAME=value` does.
            if command.first().is_some_and(|w| w == "export") {
                command.remove(0);
            }
            let assignments = command.iter().take_while(|w| is_assignment(w)).count();
            command.split_off(assignments)
        })
        .filter(|c| !c.is_empty())
        .collect()
}

/// `NAME=value`, as the shell reads a word before the command.
fn is_assignment(word: &str) -> bool {
    match word.split_once('=') {
        Some((name, _)) => {
            !name.is_empty()
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                && !name.starts_with(|c: char| c.is_ascii_digit())
        }
        None => false,
    }
}

/// Whether `text` ends inside a quote (the shell then reads on to the next line); a `#`
/// comment's apostrophes are not quotes.
pub fn quote_left_open(text: &str) -> bool {
    let mut quote: Option<char> = None;
    let mut at_word_start = true;
    for c in text.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '#') if at_word_start => return false,
            (None, '\'' | '"') => quote = Some(c),
            _ => {}
        }
        at_word_start = c.is_whitespace();
    }
    quote.is_some()
}

/// The words of `line`: quotes removed, `$(...)` kept whole, a `#` at a word's start
/// ending the line.
fn words(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            c if c.is_whitespace() => {
                if in_word {
                    out.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            '#' if !in_word => break,
            '\'' | '"' => {
                in_word = true;
                for q in chars.by_ref() {
                    if q == c {
                        break;
                    }
                    word.push(q);
                }
            }
            '$' if chars.peek() == Some(&'(') => {
                in_word = true;
                word.push(c);
                let mut depth = 0;
                for inner in chars.by_ref() {
                    word.push(inner);
                    match inner {
                        '(' => depth += 1,
                        ')' => {
                            depth -= 1;
                            if depth == 0 {
                                break;
                            }
                        }
                        _ => {}
                    }
                }
            }
            _ => {
                in_word = true;
                word.push(c);
            }
        }
    }
    if in_word {
        out.push(word);
    }
    out
}

#[test]
fn a_line_splits_into_its_commands() {
    assert_eq!(
        commands("X=1 cargo test -p a --test b c && ../stop # done"),
        vec![
            vec!["cargo", "test", "-p", "a", "--test", "b", "c"],
            vec!["../stop"]
        ]
    );
    assert_eq!(
        commands("kubeflavor install | kubectl apply -f - >/dev/null"),
        vec![
            vec!["kubeflavor", "install"],
            vec!["kubectl", "apply", "-f", "-"]
        ]
    );
    assert_eq!(
        commands("(cd monitoring && promtool test rules r.yaml)"),
        vec![
            vec!["cd", "monitoring"],
            vec!["promtool", "test", "rules", "r.yaml"]
        ]
    );
    assert!(commands("img=$(../shared/appliance/build | tail -1)   # Debian").is_empty());
    assert!(quote_left_open("curl -d '{\"a\": 1,"));
    assert!(!quote_left_open(
        "kind load x   # or your cluster's equivalent"
    ));
    assert!(commands("export K=$(../shared/real-k8s/start | tail -1)").is_empty());
    assert_eq!(
        commands("cargo run -p <one package> --x"),
        vec![vec!["cargo", "run", "-p", "<one package>", "--x"]]
    );
    assert_eq!(
        commands(r#"a --x "$KUBECONFIG" --y '{"a": 1}'"#),
        vec![vec!["a", "--x", "$KUBECONFIG", "--y", r#"{"a": 1}"#]]
    );
}
