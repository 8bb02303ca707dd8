//! The PKI directory on disk: reading the files `certs upload` encrypts, and writing the
//! files `certs download` decrypted, all or nothing.
//!
//! Writing is staged (P6, "no half-written PKI directory"): every file is first written and
//! fsynced in a private directory inside the target (same filesystem, so `rename` is
//! atomic), then renamed into place one by one; a failure at any step before or during the
//! renames puts back what was there and removes what was created. A crash mid-way leaves at
//! most a stale staging directory, which the next run removes, and a subset of files whose
//! content equals what the next run writes, so that run finishes the job.
//!
//! Symbolic links inside the PKI directory are refused, both ways: a link `etcd ->
//! /elsewhere` would send the etcd CA key wherever it points on a download, and send
//! whatever is there on an upload. The PKI directory itself may be a link (kubeadm's
//! /etc/kubernetes/pki on another disk), and so may its parents: the administrator named
//! that directory; what is below it is the set.

use std::fs::{self, DirBuilder, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use kubeflavor_core::crypto::pki::PkiFile;
use zeroize::Zeroizing;

/// Mode of every directory kubeflavor creates, as kubeadm creates them.
pub const DIR_MODE: u32 = 0o755;

/// Prefix of the private staging directory created inside the target.
const STAGING_PREFIX: &str = ".kubeflavor-staging-";

/// What happened to one file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileOutcome {
    /// The file did not exist and was written.
    Created,
    /// The file existed with other content and was replaced (`--force`).
    Replaced,
    /// The file already had exactly this content; it was left alone.
    Unchanged,
}

impl FileOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            FileOutcome::Created => "created",
            FileOutcome::Replaced => "replaced",
            FileOutcome::Unchanged => "unchanged",
        }
    }
}

/// Per-file result of [`write_all`], in the order of the plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteReport {
    pub files: Vec<(String, FileOutcome)>,
    /// Unchanged files whose mode differs from kubeadm's (left alone, reported).
    pub mode_warnings: Vec<(String, u32, u32)>,
    /// Directories the write created (the target, `etcd/`), parents first: a caller that
    /// fails later (`join --control-plane`) removes them with the files it created.
    pub created_dirs: Vec<PathBuf>,
}

impl WriteReport {
    pub fn written(&self) -> usize {
        self.files
            .iter()
            .filter(|(_, o)| *o != FileOutcome::Unchanged)
            .count()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    #[error(
        "{} already exist with different content: {}; nothing was written (compare them, or pass --force to replace them)",
        if .paths.len() == 1 { "1 file" } else { "some files" },
        .paths.join(", ")
    )]
    Conflict { paths: Vec<String> },
    #[error(
        "cannot write {}: {source}; nothing was written (check that the directory is writable by this user, e.g. run as root)",
        .path.display()
    )]
    Unwritable { path: PathBuf, source: io::Error },
    #[error(
        "cannot read the existing {} to compare it: {source}; nothing was written (check its permissions)",
        .path.display()
    )]
    ReadExisting { path: PathBuf, source: io::Error },
    #[error("{} exists and is not a regular file; nothing was written (move it away)", .path.display())]
    NotAFile { path: PathBuf },
    #[error(
        "{} is a symbolic link, and kubeflavor does not follow links inside the PKI directory; nothing was written (replace the link with the directory or file it points to, or pass the real directory as the target)",
        .path.display()
    )]
    Symlink { path: PathBuf },
    #[error("invalid relative path {path:?} in the plan: {why}")]
    BadPath { path: String, why: &'static str },
}

/// Errors reading a PKI directory.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error(
        "cannot read {}: {source} (check its permissions, e.g. run as root on a control-plane node)",
        .path.display()
    )]
    Unreadable { path: PathBuf, source: io::Error },
    #[error("{} is not a regular file (point --pki-dir at kubeadm's PKI directory)", .path.display())]
    NotAFile { path: PathBuf },
    #[error(
        "{} is a symbolic link, and kubeflavor does not follow links inside --pki-dir (replace the link with the directory or file it points to)",
        .path.display()
    )]
    Symlink { path: PathBuf },
}

/// Reads the file `rel` below the PKI directory `root` as [`read_optional`] does, refusing
/// a symbolic link at `rel` or at any directory between `root` and it.
pub fn read_optional_below(
    root: &Path,
    rel: &str,
) -> Result<Option<Zeroizing<Vec<u8>>>, ReadError> {
    let mut path = root.to_path_buf();
    for component in Path::new(rel).components() {
        path.push(component);
        match fs::symlink_metadata(&path) {
            Ok(m) if m.file_type().is_symlink() => return Err(ReadError::Symlink { path }),
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(source) => return Err(ReadError::Unreadable { path, source }),
        }
    }
    read_optional(&path)
}

/// Refuses a symbolic link at `rel` below `target` or at any directory between them (what
/// does not exist yet is no link).
fn check_no_symlink_below(target: &Path, rel: &Path) -> Result<(), WriteError> {
    let mut path = target.to_path_buf();
    for component in rel.components() {
        path.push(component);
        match fs::symlink_metadata(&path) {
            Ok(m) if m.file_type().is_symlink() => return Err(WriteError::Symlink { path }),
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(source) => return Err(WriteError::Unwritable { path, source }),
        }
    }
    Ok(())
}

/// Reads one PKI file. A missing file is `Ok(None)`: kubeadm stores it as an empty value
/// (kubeadm's copycerts phase), e.g. `ca.key` under an external CA. Anything else that stops the
/// read (permissions, a directory in the way) is an error, never an empty value.
pub fn read_optional(path: &Path) -> Result<Option<Zeroizing<Vec<u8>>>, ReadError> {
    match fs::metadata(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(ReadError::Unreadable {
                path: path.to_owned(),
                source,
            });
        }
        Ok(m) if !m.is_file() => {
            return Err(ReadError::NotAFile {
                path: path.to_owned(),
            });
        }
        Ok(_) => {}
    }
    fs::read(path)
        .map(|b| Some(Zeroizing::new(b)))
        .map_err(|source| ReadError::Unreadable {
            path: path.to_owned(),
            source,
        })
}

/// Checks that a planned path is relative and stays inside the target.
fn check_rel_path(rel: &str) -> Result<PathBuf, WriteError> {
    let bad = |why| WriteError::BadPath {
        path: rel.to_owned(),
        why,
    };
    if rel.is_empty() {
        return Err(bad("empty"));
    }
    let p = PathBuf::from(rel);
    for c in p.components() {
        match c {
            Component::Normal(s) if !s.to_string_lossy().starts_with(STAGING_PREFIX) => {}
            Component::Normal(_) => return Err(bad("reserved name")),
            _ => return Err(bad("must be relative, without '.' or '..'")),
        }
    }
    Ok(p)
}

struct Step {
    dest: PathBuf,
    staged: PathBuf,
    backup: Option<PathBuf>,
}

/// Writes every file of `plan` under `target`, or none.
///
/// Existing files with identical content are left alone. Existing files with different
/// content make the whole write fail with [`WriteError::Conflict`] unless `force`: keeping
/// some old files next to new ones could pair a new CA certificate with an old key.
pub fn write_all(target: &Path, plan: &[PkiFile], force: bool) -> Result<WriteReport, WriteError> {
    let mut outcomes = Vec::with_capacity(plan.len());
    let mut mode_warnings = Vec::new();
    let mut conflicts = Vec::new();
    let mut rels = Vec::with_capacity(plan.len());
    for f in plan {
        let rel = check_rel_path(&f.rel_path)?;
        check_no_symlink_below(target, &rel)?;
        let outcome = compare_existing(&target.join(&rel), f, &mut mode_warnings)?;
        if outcome == FileOutcome::Replaced {
            conflicts.push(f.rel_path.clone());
        }
        outcomes.push(outcome);
        rels.push(rel);
    }
    if !conflicts.is_empty() && !force {
        return Err(WriteError::Conflict { paths: conflicts });
    }
    let mut report = WriteReport {
        files: plan
            .iter()
            .zip(&outcomes)
            .map(|(f, o)| (f.rel_path.clone(), *o))
            .collect(),
        mode_warnings,
        created_dirs: Vec::new(),
    };
    if report.written() == 0 {
        return Ok(report);
    }

    let mut created_dirs = Vec::new();
    let result = stage_and_commit(target, plan, &rels, &outcomes, &mut created_dirs);
    if result.is_err() {
        // Deepest first, and only if still empty: never remove anything we did not create.
        for d in created_dirs.iter().rev() {
            let _ = fs::remove_dir(d);
        }
    }
    report.created_dirs = created_dirs;
    result.map(|()| report)
}

/// What writing `f` to `dest` would do: create it, keep it (identical content; a mode
/// other than kubeadm's is noted in `mode_warnings`), or replace different content.
fn compare_existing(
    dest: &Path,
    f: &PkiFile,
    mode_warnings: &mut Vec<(String, u32, u32)>,
) -> Result<FileOutcome, WriteError> {
    match fs::symlink_metadata(dest) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(FileOutcome::Created),
        Err(source) => Err(WriteError::Unwritable {
            path: dest.to_path_buf(),
            source,
        }),
        Ok(m) if m.is_dir() => Err(WriteError::NotAFile {
            path: dest.to_path_buf(),
        }),
        Ok(_) => {
            let existing =
                fs::read(dest)
                    .map(Zeroizing::new)
                    .map_err(|source| WriteError::ReadExisting {
                        path: dest.to_path_buf(),
                        source,
                    })?;
            if existing.as_slice() != f.contents() {
                return Ok(FileOutcome::Replaced);
            }
            let mode = fs::metadata(dest)
                .map(|m| m.permissions().mode() & 0o7777)
                .unwrap_or(f.mode);
            if mode != f.mode {
                mode_warnings.push((f.rel_path.clone(), mode, f.mode));
            }
            Ok(FileOutcome::Unchanged)
        }
    }
}

fn unwritable(path: &Path) -> impl FnOnce(io::Error) -> WriteError + '_ {
    move |source| WriteError::Unwritable {
        path: path.to_owned(),
        source,
    }
}

/// Creates `dir` and its missing parents with [`DIR_MODE`], recording what it created.
fn ensure_dir(dir: &Path, created: &mut Vec<PathBuf>) -> Result<(), WriteError> {
    match fs::symlink_metadata(dir) {
        Ok(m) if m.is_dir() => return Ok(()),
        Ok(_) => {
            // A symlink to a directory is accepted (e.g. /etc/kubernetes/pki on another disk).
            if fs::metadata(dir).map(|m| m.is_dir()).unwrap_or(false) {
                return Ok(());
            }
            return Err(WriteError::NotAFile {
                path: dir.to_owned(),
            });
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(source) => {
            return Err(WriteError::Unwritable {
                path: dir.to_owned(),
                source,
            });
        }
    }
    if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
        ensure_dir(parent, created)?;
    }
    DirBuilder::new()
        .mode(DIR_MODE)
        .create(dir)
        .map_err(unwritable(dir))?;
    created.push(dir.to_owned());
    // The umask may have narrowed the mode; kubeadm's directories are 0755.
    fs::set_permissions(dir, fs::Permissions::from_mode(DIR_MODE)).map_err(unwritable(dir))?;
    Ok(())
}

fn unique_suffix() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!(
        "{}-{}-{}",
        std::process::id(),
        nanos,
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

/// Removes staging directories a crashed run left behind (they may hold private keys).
fn remove_stale_staging(target: &Path) {
    let Ok(entries) = fs::read_dir(target) else {
        return;
    };
    for e in entries.flatten() {
        if e.file_name().to_string_lossy().starts_with(STAGING_PREFIX)
            && e.file_type().map(|t| t.is_dir()).unwrap_or(false)
        {
            let _ = fs::remove_dir_all(e.path());
        }
    }
}

fn sync_dir(dir: &Path) -> Result<(), WriteError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(unwritable(dir))
}

fn stage_and_commit(
    target: &Path,
    plan: &[PkiFile],
    rels: &[PathBuf],
    outcomes: &[FileOutcome],
    created_dirs: &mut Vec<PathBuf>,
) -> Result<(), WriteError> {
    ensure_dir(target, created_dirs)?;
    remove_stale_staging(target);
    for rel in rels {
        if let Some(parent) = rel.parent().filter(|p| !p.as_os_str().is_empty()) {
            ensure_dir(&target.join(parent), created_dirs)?;
        }
    }

    let staging = target.join(format!("{STAGING_PREFIX}{}", unique_suffix()));
    DirBuilder::new()
        .mode(0o700)
        .create(&staging)
        .map_err(unwritable(&staging))?;
    let result =
        stage_files(&staging, target, plan, rels, outcomes).and_then(|steps| commit(&steps));
    let _ = fs::remove_dir_all(&staging);
    result
}

fn stage_files(
    staging: &Path,
    target: &Path,
    plan: &[PkiFile],
    rels: &[PathBuf],
    outcomes: &[FileOutcome],
) -> Result<Vec<Step>, WriteError> {
    let mut steps = Vec::new();
    for (i, f) in plan.iter().enumerate() {
        if outcomes[i] == FileOutcome::Unchanged {
            continue;
        }
        let staged = staging.join(format!("new-{i}"));
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(f.mode)
            .open(&staged)
            .map_err(unwritable(&staged))?;
        file.set_permissions(fs::Permissions::from_mode(f.mode))
            .and_then(|()| file.write_all(f.contents()))
            .and_then(|()| file.sync_all())
            .map_err(unwritable(&staged))?;
        let dest = target.join(&rels[i]);
        let backup = if outcomes[i] == FileOutcome::Replaced {
            // A hard link keeps the old content reachable for rollback without a moment
            // where the destination is missing.
            let b = staging.join(format!("old-{i}"));
            fs::hard_link(&dest, &b)
                .or_else(|_| fs::copy(&dest, &b).map(|_| ()))
                .map_err(unwritable(&b))?;
            Some(b)
        } else {
            None
        };
        steps.push(Step {
            dest,
            staged,
            backup,
        });
    }
    sync_dir(staging)?;
    Ok(steps)
}

fn commit(steps: &[Step]) -> Result<(), WriteError> {
    for (done, step) in steps.iter().enumerate() {
        if let Err(source) = rename(&step.staged, &step.dest) {
            for undone in steps[..done].iter().rev() {
                match &undone.backup {
                    Some(b) => {
                        let _ = fs::rename(b, &undone.dest);
                    }
                    None => {
                        let _ = fs::remove_file(&undone.dest);
                    }
                }
            }
            return Err(WriteError::Unwritable {
                path: step.dest.clone(),
                source,
            });
        }
    }
    // Make the renames durable: fsync every directory that received a file.
    let mut dirs: Vec<PathBuf> = steps
        .iter()
        .filter_map(|s| s.dest.parent().map(Path::to_owned))
        .collect();
    dirs.sort();
    dirs.dedup();
    for d in dirs {
        sync_dir(&d)?;
    }
    Ok(())
}

#[cfg(not(test))]
fn rename(from: &Path, to: &Path) -> io::Result<()> {
    fs::rename(from, to)
}

// Tests inject a failure of the n-th rename to exercise the rollback, which no real
// filesystem condition reaches reliably from a test.
#[cfg(test)]
thread_local! {
    static FAIL_RENAME_AT: std::cell::Cell<Option<usize>> = const { std::cell::Cell::new(None) };
}

#[cfg(test)]
fn rename(from: &Path, to: &Path) -> io::Result<()> {
    let left = FAIL_RENAME_AT.with(|c| c.get());
    match left {
        Some(0) => {
            FAIL_RENAME_AT.with(|c| c.set(None));
            Err(io::Error::other("injected rename failure"))
        }
        Some(n) => {
            FAIL_RENAME_AT.with(|c| c.set(Some(n - 1)));
            fs::rename(from, to)
        }
        None => fs::rename(from, to),
    }
}

#[cfg(test)]
mod tests;
