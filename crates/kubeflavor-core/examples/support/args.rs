//! The command line of every example and benchmark of the workspace: `--help` prints the
//! usage and exits 0; any other command-line error is one line on stderr and exit code 2.
//! Included by path (`#[path = ...] mod args;`), so examples of every crate share it.

/// Parses the process arguments into `T`, or exits as described above.
pub fn parse_or_exit<T: clap::Parser>() -> T {
    T::try_parse().unwrap_or_else(|e| {
        use clap::error::ErrorKind;
        if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
            e.exit();
        }
        let rendered = e.render().to_string();
        let line = rendered
            .lines()
            .map(str::trim)
            .find(|l| !l.is_empty())
            .unwrap_or("bad arguments");
        eprintln!("error: {} (see --help)", line.trim_start_matches("error: "));
        std::process::exit(2);
    })
}

/// A count of one or more (`value_parser = args::at_least_one`).
#[allow(dead_code)] // not every example counts something
pub fn at_least_one(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(0) => Err("must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(e.to_string()),
    }
}
