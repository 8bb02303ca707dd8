//! A `kubeflavor ...` command line against the real clap definition: every subcommand
//! exists, every flag exists where it is given, a value from a fixed set is in the set.
//! Placeholders the README uses (`NAME`, `<version>`, `...`, `[--optional]`,
//! `a|b` for alternatives) are read as the reader reads them.

use clap::{Arg, Command};

/// The kubeflavor command tree, as the binary parses it (global flags propagated).
pub fn kubeflavor() -> Command {
    let mut command = <kubeflavor::cmd::Cli as clap::CommandFactory>::command();
    command.build();
    command
}

/// Checks `words` (the words after `kubeflavor`) against `root`; what is wrong, if anything.
pub fn check(root: &Command, words: &[String]) -> Result<(), String> {
    let mut command = root;
    let mut path = vec![root.get_name().to_string()];
    let mut positionals_only = false;
    let mut took_positional = false;
    let mut words = words.iter().map(|w| unbracket(w)).peekable();
    while let Some(word) = words.next() {
        if word.is_empty() || word == "..." {
            continue;
        }
        if !positionals_only && word == "--" {
            positionals_only = true;
            continue;
        }
        let here = || path.join(" ");
        if !positionals_only && word.starts_with("--") {
            let (name, value) = match word[2..].split_once('=') {
                Some((n, v)) => (n, Some(v.to_string())),
                None => (&word[2..], None),
            };
            let arg = command
                .get_arguments()
                .find(|a| a.get_long() == Some(name) || has_alias(a, name))
                .ok_or_else(|| format!("'{}' has no flag --{name}", here()))?;
            if takes_value(arg) {
                let value = value.or_else(|| words.next_if(is_value));
                if let Some(value) = value {
                    check_value(arg, &value).map_err(|e| format!("'{}' --{name}: {e}", here()))?;
                }
            }
            continue;
        }
        if !positionals_only && word.starts_with('-') && word.len() > 1 {
            let shorts: Vec<char> = word[1..].chars().collect();
            for (i, c) in shorts.iter().enumerate() {
                let arg = command
                    .get_arguments()
                    .find(|a| a.get_short() == Some(*c))
                    .ok_or_else(|| format!("'{}' has no flag -{c}", here()))?;
                if takes_value(arg) {
                    let rest: String = shorts[i + 1..].iter().collect();
                    let value = if rest.is_empty() {
                        words.next_if(is_value)
                    } else {
                        Some(rest)
                    };
                    if let Some(value) = value {
                        check_value(arg, &value).map_err(|e| format!("'{}' -{c}: {e}", here()))?;
                    }
                    break;
                }
            }
            continue;
        }
        if !took_positional
            && !positionals_only
            && let Some(sub) = command.find_subcommand(&word)
        {
            command = sub;
            path.push(sub.get_name().to_string());
            continue;
        }
        if !command.get_arguments().any(Arg::is_positional) {
            return Err(match command.has_subcommands() {
                true => format!("'{}' has no subcommand {word}", here()),
                false => format!("'{}' takes no argument {word}", here()),
            });
        }
        took_positional = true;
    }
    Ok(())
}

/// The README writes optional parts in brackets: `[--force]`, `[-o wide|json]`.
fn unbracket(word: &str) -> String {
    word.trim_start_matches('[')
        .trim_end_matches(']')
        .to_string()
}

fn has_alias(arg: &Arg, name: &str) -> bool {
    arg.get_all_aliases()
        .is_some_and(|aliases| aliases.contains(&name))
}

fn takes_value(arg: &Arg) -> bool {
    arg.get_action().takes_values()
}

/// A word a flag takes as its value: anything but another flag (`-` is stdin).
fn is_value(word: &String) -> bool {
    word == "-" || !word.starts_with('-')
}

/// A value from a fixed set must be in it; `a|b` lists alternatives, each checked.
fn check_value(arg: &Arg, value: &str) -> Result<(), String> {
    let possible = arg.get_possible_values();
    if possible.is_empty() {
        return Ok(());
    }
    for one in value.split('|').filter(|v| !is_placeholder(v)) {
        if !possible.iter().any(|p| p.matches(one, false)) {
            let names: Vec<&str> = possible.iter().map(|p| p.get_name()).collect();
            return Err(format!("{one} is not one of {}", names.join(", ")));
        }
    }
    Ok(())
}

/// `NAME`, `<version>`, `$VAR`, `...`: a placeholder, not a value.
fn is_placeholder(value: &str) -> bool {
    value.contains(['<', '$', '.'])
        || value
            .chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_' || c == '-')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(line: &str) -> Vec<String> {
        line.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn real_commands_pass_and_wrong_ones_say_what_is_wrong() {
        let root = kubeflavor();
        for good in [
            "token create --flavor sweet [--ttl 24h] [-o token|json|yaml]",
            "--kubeconfig admin.conf controller --lease-namespace kubeflavor",
            "certs download --certificate-key-file - --server S",
            "join ... --control-plane --certificate-key-file /root/cert-key",
            "flavor list -o wide",
            "-vv node get NAME",
        ] {
            assert_eq!(check(&root, &words(good)), Ok(()), "{good}");
        }
        for (bad, why) in [
            (
                "token create --flavour sweet",
                "'kubeflavor token create' has no flag --flavour",
            ),
            ("tokens list", "'kubeflavor' has no subcommand tokens"),
            (
                "flavor list -o wide|xml",
                "'kubeflavor flavor list' -o: xml is not one of",
            ),
            ("install --apply -Z", "'kubeflavor install' has no flag -Z"),
        ] {
            let got = check(&root, &words(bad)).expect_err(bad);
            assert!(got.starts_with(why), "{bad}: {got}");
        }
    }
}
