//! Writing the kubelet's files: all or nothing; kubeconfigs owner-only.
//!
//! A kubeconfig holding a bootstrap token or a client key must never be readable by other
//! users, not even for the instant between create and chmod, and a crash or a full disk
//! must never leave a truncated file that the kubelet would try to load. So each file is
//! written to a temporary file created with mode 0600 in the same directory (rename is
//! only atomic within one filesystem), given its final mode, flushed to disk, renamed
//! over the target, and the directory is synced so the rename itself survives a power
//! cut. The kubelet configuration holds no secret and gets 0644 ([`PUBLIC_FILE_MODE`]) the
//! same way.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Mode of the kubeconfigs `join` writes: they hold a token or a private key.
pub const SECRET_FILE_MODE: u32 = 0o600;

/// Mode of a file `join` writes that holds no secret (the kubelet configuration), as
/// kubeadm writes /var/lib/kubelet/config.yaml.
pub const PUBLIC_FILE_MODE: u32 = 0o644;

/// Mode for the kubelet directory when `join` has to create it (as kubeadm's
/// /etc/kubernetes: readable, only root writes).
const DIR_MODE: u32 = 0o755;

/// A file write that failed, with the path it was for.
#[derive(Debug, thiserror::Error)]
#[error("cannot write {path}: {source}")]
pub struct WriteError {
    pub path: PathBuf,
    #[source]
    pub source: io::Error,
}

impl WriteError {
    pub fn at(path: &Path, source: io::Error) -> Self {
        WriteError {
            path: path.to_path_buf(),
            source,
        }
    }
}

/// Writes `bytes` to `path` atomically with mode 0600: after an error, `path` is unchanged
/// (absent or the old content) and no temporary file is left behind.
pub fn write_secret_file(path: &Path, bytes: &[u8]) -> Result<(), WriteError> {
    write_file(path, bytes, SECRET_FILE_MODE)
}

/// Writes `bytes` to `path` atomically with `mode`, as [`write_secret_file`] does: the
/// content is complete and the mode final before the file appears under its name.
pub fn write_file(path: &Path, bytes: &[u8], mode: u32) -> Result<(), WriteError> {
    let dir = parent_dir(path);
    let (tmp_path, mut file) = create_temp_in(dir, path).map_err(|e| WriteError::at(path, e))?;
    let result = (|| {
        file.write_all(bytes)?;
        // The mode given at creation is filtered by the umask; set it explicitly so a
        // permissive umask cannot widen it and a strict one cannot make it unreadable to us.
        file.set_permissions(fs::Permissions::from_mode(mode))?;
        file.sync_all()?;
        drop(file);
        fs::rename(&tmp_path, path)?;
        sync_dir(dir)
    })();
    if let Err(e) = result {
        let _ = fs::remove_file(&tmp_path);
        return Err(WriteError::at(path, e));
    }
    Ok(())
}

/// Removes a file this run wrote, if it is there (used to roll back on a later failure).
pub fn remove_if_present(path: &Path) -> Result<(), WriteError> {
    match fs::remove_file(path) {
        Ok(()) => sync_dir(parent_dir(path)).map_err(|e| WriteError::at(path, e)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(WriteError::at(path, e)),
    }
}

/// Whether anything exists at `path`, a dangling symbolic link included (`Path::exists`
/// follows links and says no to one): for the checks that must not miss a file.
pub fn is_present(path: &Path) -> bool {
    fs::symlink_metadata(path).is_ok()
}

/// The content of `path`, or `None` when nothing is there.
pub fn read_if_present(path: &Path) -> Result<Option<Vec<u8>>, WriteError> {
    match fs::read(path) {
        Ok(bytes) => Ok(Some(bytes)),
        Err(e) if e.kind() == io::ErrorKind::NotFound && !is_present(path) => Ok(None),
        Err(e) => Err(WriteError::at(path, e)),
    }
}

/// Checks, before any network traffic, that files can be created in `dir` (creating the
/// directory and its missing parents if it does not exist): a join that would fail at the
/// very end after using the token is worse than one that fails at once. Returns the
/// directories it created, parents first, for a failed join to remove again.
pub fn ensure_writable_dir(dir: &Path) -> Result<Vec<PathBuf>, WriteError> {
    let mut created = Vec::new();
    match fs::metadata(dir) {
        Ok(meta) if !meta.is_dir() => {
            return Err(WriteError::at(
                dir,
                io::Error::new(
                    io::ErrorKind::NotADirectory,
                    "it exists and is not a directory",
                ),
            ));
        }
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            let missing: Vec<&Path> = dir.ancestors().take_while(|a| !is_present(a)).collect();
            for d in missing.into_iter().rev() {
                if let Err(e) = fs::DirBuilder::new().mode(DIR_MODE).create(d) {
                    remove_dirs(&created);
                    return Err(WriteError::at(d, e));
                }
                created.push(d.to_path_buf());
            }
        }
        Err(e) => return Err(WriteError::at(dir, e)),
    }
    let probe = dir.join(".kubeflavor-write-check");
    let checked = create_temp_in(dir, &probe).and_then(|(tmp_path, file)| {
        drop(file);
        fs::remove_file(&tmp_path)
    });
    if let Err(e) = checked {
        remove_dirs(&created);
        return Err(WriteError::at(dir, e));
    }
    Ok(created)
}

/// Removes directories this run created, deepest first, if they are empty.
fn remove_dirs(created: &[PathBuf]) {
    for d in created.iter().rev() {
        let _ = fs::remove_dir(d);
    }
}

fn parent_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// Creates a fresh temporary file next to `target`, owner-only from the first instant.
/// `create_new` makes a name collision an error instead of a shared file; the loop then
/// picks another name.
fn create_temp_in(dir: &Path, target: &Path) -> io::Result<(PathBuf, File)> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let base = target
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("file");
    loop {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let tmp = dir.join(format!(".{base}.tmp-{}-{n}-{nanos:x}", std::process::id()));
        match OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(SECRET_FILE_MODE)
            .open(&tmp)
        {
            Ok(f) => return Ok((tmp, f)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
}

fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entries(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn written_file_is_owner_only_and_complete() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kubelet.conf");
        write_secret_file(&path, b"secret content").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"secret content");
        let mode = fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert_eq!(entries(dir.path()), vec!["kubelet.conf"]);
    }

    #[test]
    fn overwrite_replaces_content_and_tightens_mode() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bootstrap-kubelet.conf");
        fs::write(&path, b"old, world-readable").unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
        write_secret_file(&path, b"new").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"new");
        assert_eq!(
            fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
        assert_eq!(entries(dir.path()), vec!["bootstrap-kubelet.conf"]);
    }

    #[test]
    fn a_public_file_is_world_readable_whatever_the_umask() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kubelet-config.yaml");
        fs::write(&path, b"old").unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).unwrap();
        write_file(&path, b"kind: KubeletConfiguration\n", PUBLIC_FILE_MODE).unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"kind: KubeletConfiguration\n");
        assert_eq!(
            fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o644
        );
        assert_eq!(entries(dir.path()), vec!["kubelet-config.yaml"]);
    }

    #[test]
    fn failed_write_leaves_no_file_behind() {
        // Renaming a file over a non-empty directory fails after the temporary file was
        // fully written: the exact point where a careless writer leaks its temp file.
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("kubelet.conf");
        fs::create_dir(&target).unwrap();
        fs::write(target.join("keep"), b"x").unwrap();
        let err = write_secret_file(&target, b"secret").unwrap_err();
        assert_eq!(err.path, target);
        assert_eq!(entries(dir.path()), vec!["kubelet.conf"]);
        assert!(target.is_dir());
    }

    #[test]
    fn missing_kubelet_dir_is_created_and_said_so() {
        let dir = tempfile::tempdir().unwrap();
        let kubelet_dir = dir.path().join("etc").join("kubernetes");
        let created = ensure_writable_dir(&kubelet_dir).unwrap();
        assert!(kubelet_dir.is_dir());
        assert_eq!(created, [dir.path().join("etc"), kubelet_dir.clone()]);
        assert!(
            entries(&kubelet_dir).is_empty(),
            "the write probe must be cleaned up"
        );
        assert_eq!(
            ensure_writable_dir(&kubelet_dir).unwrap(),
            Vec::<PathBuf>::new()
        );
    }

    #[test]
    fn a_dangling_symlink_is_present() {
        let dir = tempfile::tempdir().unwrap();
        let link = dir.path().join("kubelet.conf");
        assert!(!is_present(&link));
        std::os::unix::fs::symlink("/nonexistent", &link).unwrap();
        assert!(!link.exists(), "Path::exists follows the link");
        assert!(is_present(&link));
        assert!(read_if_present(&link).is_err());
        assert_eq!(read_if_present(&dir.path().join("none")).unwrap(), None);
    }

    #[test]
    fn a_file_in_place_of_the_kubelet_dir_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let not_a_dir = dir.path().join("kubernetes");
        fs::write(&not_a_dir, b"").unwrap();
        let err = ensure_writable_dir(&not_a_dir).unwrap_err();
        assert!(err.to_string().contains("not a directory"), "{err}");
    }

    #[test]
    fn kubelet_dir_below_a_file_is_refused() {
        // Fails for every user, root included (unlike a read-only directory).
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("file");
        fs::write(&file, b"").unwrap();
        assert!(ensure_writable_dir(&file.join("kubernetes")).is_err());
        assert!(write_secret_file(&file.join("kubelet.conf"), b"x").is_err());
        assert_eq!(entries(dir.path()), vec!["file"]);
    }

    #[test]
    fn remove_if_present_tolerates_absence() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bootstrap-kubelet.conf");
        remove_if_present(&path).unwrap();
        fs::write(&path, b"x").unwrap();
        remove_if_present(&path).unwrap();
        assert!(!path.exists());
    }
}
