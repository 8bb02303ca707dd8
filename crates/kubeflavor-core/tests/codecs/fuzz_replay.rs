//! The fuzz corpora and the inputs that once crashed a fuzz target, replayed through the
//! same entry points the fuzz targets call (`kubeflavor_core::fuzzing`). A panic in any of
//! them fails this test.

use std::path::{Path, PathBuf};
use std::time::Instant;

use kubeflavor_core::fuzzing::TARGETS;

/// `fuzz/` at the repository root.
fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz")
}

/// The files of `dir`, sorted; none when it does not exist.
fn files(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    files
}

#[test]
fn fuzz_replay_every_corpus_and_regression_input() {
    let started = Instant::now();
    let mut replayed = 0;
    for (target, run) in TARGETS {
        let corpus = files(&fuzz_dir().join("corpus").join(target));
        assert!(
            !corpus.is_empty(),
            "fuzz/corpus/{target} has no seeds (regenerate them with fuzz/seed)"
        );
        let regressions = files(&fuzz_dir().join("regressions").join(target));
        for file in corpus.iter().chain(&regressions) {
            let data = std::fs::read(file).unwrap();
            eprintln!("replaying {target}: {}", file.display());
            run(&data);
            replayed += 1;
        }
    }
    // Every directory under corpus/ and regressions/ names a target.
    for kind in ["corpus", "regressions"] {
        for entry in std::fs::read_dir(fuzz_dir().join(kind)).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                let name = path.file_name().unwrap().to_string_lossy().into_owned();
                assert!(
                    TARGETS.iter().any(|(t, _)| *t == name),
                    "fuzz/{kind}/{name} names no fuzz target"
                );
            }
        }
    }
    eprintln!("replayed {replayed} inputs in {:?}", started.elapsed());
}
