use super::*;
use std::os::unix::fs::MetadataExt;

fn planned(rel: &str, mode: u32, bytes: &[u8]) -> PkiFile {
    PkiFile::new(rel, mode, Zeroizing::new(bytes.to_vec()))
}

fn kubeadm_like_plan() -> Vec<PkiFile> {
    vec![
        planned("ca.crt", 0o644, b"ca cert"),
        planned("ca.key", 0o600, b"ca key"),
        planned("sa.pub", 0o644, b"sa pub"),
        planned("sa.key", 0o600, b"sa key"),
        planned("etcd/ca.crt", 0o644, b"etcd cert"),
        planned("etcd/ca.key", 0o600, b"etcd key"),
    ]
}

fn mode_of(p: &Path) -> u32 {
    fs::metadata(p).unwrap().permissions().mode() & 0o7777
}

/// Every entry under `dir`, recursively, as relative paths: "nothing written" checks.
fn tree(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    fn walk(base: &Path, dir: &Path, out: &mut Vec<String>) {
        let Ok(rd) = fs::read_dir(dir) else { return };
        for e in rd.flatten() {
            let p = e.path();
            out.push(p.strip_prefix(base).unwrap().display().to_string());
            if e.file_type().unwrap().is_dir() {
                walk(base, &p, out);
            }
        }
    }
    walk(dir, dir, &mut out);
    out.sort();
    out
}

#[test]
fn writes_every_file_with_kubeadm_modes() {
    let tmp = tempfile::tempdir().unwrap();
    let target = tmp.path().join("pki");
    let plan = kubeadm_like_plan();
    let report = write_all(&target, &plan, false).unwrap();
    assert_eq!(report.written(), plan.len());
    for f in &plan {
        let p = target.join(&f.rel_path);
        assert_eq!(fs::read(&p).unwrap(), f.contents(), "{}", f.rel_path);
        assert_eq!(mode_of(&p), f.mode, "{}", f.rel_path);
    }
    assert_eq!(mode_of(&target), DIR_MODE);
    assert_eq!(mode_of(&target.join("etcd")), DIR_MODE);
    // No staging directory is left behind.
    assert_eq!(
        tree(&target),
        [
            "ca.crt",
            "ca.key",
            "etcd",
            "etcd/ca.crt",
            "etcd/ca.key",
            "sa.key",
            "sa.pub"
        ]
    );
}

#[test]
fn identical_files_are_left_alone() {
    let tmp = tempfile::tempdir().unwrap();
    let plan = kubeadm_like_plan();
    write_all(tmp.path(), &plan, false).unwrap();
    let inode_before = fs::metadata(tmp.path().join("ca.key")).unwrap().ino();
    let report = write_all(tmp.path(), &plan, false).unwrap();
    assert_eq!(report.written(), 0);
    assert!(
        report
            .files
            .iter()
            .all(|(_, o)| *o == FileOutcome::Unchanged)
    );
    assert_eq!(
        fs::metadata(tmp.path().join("ca.key")).unwrap().ino(),
        inode_before
    );
}

#[test]
fn identical_file_with_another_mode_is_reported_not_changed() {
    let tmp = tempfile::tempdir().unwrap();
    fs::write(tmp.path().join("ca.key"), b"ca key").unwrap();
    fs::set_permissions(tmp.path().join("ca.key"), fs::Permissions::from_mode(0o644)).unwrap();
    let report = write_all(tmp.path(), &[planned("ca.key", 0o600, b"ca key")], false).unwrap();
    assert_eq!(
        report.mode_warnings,
        vec![("ca.key".to_owned(), 0o644, 0o600)]
    );
    assert_eq!(mode_of(&tmp.path().join("ca.key")), 0o644);
}

#[test]
fn a_different_existing_file_blocks_everything_without_force() {
    let tmp = tempfile::tempdir().unwrap();
    fs::write(tmp.path().join("sa.key"), b"another key").unwrap();
    let err = write_all(tmp.path(), &kubeadm_like_plan(), false).unwrap_err();
    match &err {
        WriteError::Conflict { paths } => assert_eq!(paths, &["sa.key"]),
        other => panic!("expected a conflict, got {other:?}"),
    }
    assert!(err.to_string().contains("--force"), "{err}");
    assert_eq!(tree(tmp.path()), ["sa.key"]);
    assert_eq!(fs::read(tmp.path().join("sa.key")).unwrap(), b"another key");
}

#[test]
fn force_replaces_different_files_and_reports_it() {
    let tmp = tempfile::tempdir().unwrap();
    fs::write(tmp.path().join("sa.key"), b"another key").unwrap();
    let report = write_all(tmp.path(), &kubeadm_like_plan(), true).unwrap();
    let sa = report.files.iter().find(|(p, _)| p == "sa.key").unwrap();
    assert_eq!(sa.1, FileOutcome::Replaced);
    assert_eq!(fs::read(tmp.path().join("sa.key")).unwrap(), b"sa key");
    assert_eq!(mode_of(&tmp.path().join("sa.key")), 0o600);
}

#[test]
fn an_unwritable_target_writes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    // A regular file where a directory is needed fails for every user, root included.
    fs::write(tmp.path().join("blocker"), b"").unwrap();
    let target = tmp.path().join("blocker").join("pki");
    let err = write_all(&target, &kubeadm_like_plan(), false).unwrap_err();
    assert!(matches!(err, WriteError::Unwritable { .. }), "{err:?}");
    assert_eq!(tree(tmp.path()), ["blocker"]);
}

#[test]
fn a_failed_rename_rolls_back_created_and_replaced_files() {
    let tmp = tempfile::tempdir().unwrap();
    let target = tmp.path().join("pki");
    fs::create_dir(&target).unwrap();
    fs::write(target.join("ca.key"), b"old key").unwrap();
    let before = tree(tmp.path());
    // ca.crt and ca.key are renamed, sa.pub fails.
    FAIL_RENAME_AT.with(|c| c.set(Some(2)));
    let err = write_all(&target, &kubeadm_like_plan(), true).unwrap_err();
    assert!(matches!(err, WriteError::Unwritable { .. }), "{err:?}");
    assert_eq!(tree(tmp.path()), before);
    assert_eq!(fs::read(target.join("ca.key")).unwrap(), b"old key");
}

#[test]
fn a_failed_write_removes_the_directories_it_created() {
    let tmp = tempfile::tempdir().unwrap();
    let target = tmp.path().join("new").join("pki");
    FAIL_RENAME_AT.with(|c| c.set(Some(4)));
    write_all(&target, &kubeadm_like_plan(), false).unwrap_err();
    assert!(tree(tmp.path()).is_empty(), "{:?}", tree(tmp.path()));
}

#[test]
fn a_stale_staging_directory_is_removed_and_the_job_finished() {
    let tmp = tempfile::tempdir().unwrap();
    let plan = kubeadm_like_plan();
    // What a crash between two renames leaves: a staging dir and some of the files.
    let stale = tmp.path().join(format!("{STAGING_PREFIX}crashed"));
    fs::create_dir(&stale).unwrap();
    fs::write(stale.join("new-5"), b"etcd key").unwrap();
    write_all(tmp.path(), &plan[..2], false).unwrap();
    let report = write_all(tmp.path(), &plan, false).unwrap();
    assert_eq!(report.written(), plan.len() - 2);
    assert!(!stale.exists());
    for f in &plan {
        assert_eq!(
            fs::read(tmp.path().join(&f.rel_path)).unwrap(),
            f.contents()
        );
    }
}

#[test]
fn paths_escaping_the_target_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    for rel in [
        "../x",
        "/etc/passwd",
        "a/../../b",
        "",
        "./x",
        ".kubeflavor-staging-x/y",
    ] {
        let err = write_all(tmp.path(), &[planned(rel, 0o600, b"k")], false).unwrap_err();
        assert!(matches!(err, WriteError::BadPath { .. }), "{rel}: {err:?}");
    }
    assert!(tree(tmp.path()).is_empty());
}

#[test]
fn a_directory_in_place_of_a_file_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    fs::create_dir(tmp.path().join("ca.crt")).unwrap();
    let err = write_all(tmp.path(), &kubeadm_like_plan(), true).unwrap_err();
    assert!(matches!(err, WriteError::NotAFile { .. }), "{err:?}");
    assert_eq!(tree(tmp.path()), ["ca.crt"]);
}

#[test]
fn reading_distinguishes_missing_from_unreadable() {
    let tmp = tempfile::tempdir().unwrap();
    assert!(read_optional(&tmp.path().join("absent")).unwrap().is_none());
    fs::write(tmp.path().join("ok"), b"data").unwrap();
    assert_eq!(
        read_optional(&tmp.path().join("ok"))
            .unwrap()
            .unwrap()
            .as_slice(),
        b"data"
    );
    // A symlink loop cannot be read by anyone, root included.
    std::os::unix::fs::symlink("loop", tmp.path().join("loop")).unwrap();
    let err = read_optional(&tmp.path().join("loop")).unwrap_err();
    assert!(matches!(err, ReadError::Unreadable { .. }), "{err:?}");
    fs::create_dir(tmp.path().join("dir")).unwrap();
    let err = read_optional(&tmp.path().join("dir")).unwrap_err();
    assert!(matches!(err, ReadError::NotAFile { .. }), "{err:?}");
}

#[test]
fn a_symlinked_directory_below_the_target_is_refused_and_nothing_written() {
    let tmp = tempfile::tempdir().unwrap();
    let (target, elsewhere) = (tmp.path().join("pki"), tmp.path().join("elsewhere"));
    fs::create_dir_all(&target).unwrap();
    fs::create_dir(&elsewhere).unwrap();
    std::os::unix::fs::symlink(&elsewhere, target.join("etcd")).unwrap();
    let err = write_all(&target, &kubeadm_like_plan(), true).unwrap_err();
    assert!(
        matches!(&err, WriteError::Symlink { path } if *path == target.join("etcd")),
        "{err:?}"
    );
    assert_eq!(tree(&target), ["etcd"]);
    assert!(tree(&elsewhere).is_empty());
}

#[test]
fn a_symlinked_file_below_the_target_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let target = tmp.path().join("pki");
    fs::create_dir(&target).unwrap();
    fs::write(tmp.path().join("outside"), b"ca key").unwrap();
    std::os::unix::fs::symlink(tmp.path().join("outside"), target.join("ca.key")).unwrap();
    let err = write_all(&target, &kubeadm_like_plan(), true).unwrap_err();
    assert!(matches!(err, WriteError::Symlink { .. }), "{err:?}");
    assert_eq!(fs::read(tmp.path().join("outside")).unwrap(), b"ca key");
}

#[test]
fn the_target_itself_may_be_a_symlink_and_created_directories_are_reported() {
    let tmp = tempfile::tempdir().unwrap();
    let disk = tmp.path().join("other-disk");
    fs::create_dir(&disk).unwrap();
    let target = tmp.path().join("pki");
    std::os::unix::fs::symlink(&disk, &target).unwrap();
    let report = write_all(&target, &kubeadm_like_plan(), false).unwrap();
    assert_eq!(report.created_dirs, [target.join("etcd")]);
    assert!(disk.join("etcd/ca.key").is_file());

    let fresh = tmp.path().join("new").join("pki");
    let report = write_all(&fresh, &kubeadm_like_plan(), false).unwrap();
    assert_eq!(
        report.created_dirs,
        [tmp.path().join("new"), fresh.clone(), fresh.join("etcd")]
    );
    // Nothing to write: nothing created.
    let again = write_all(&fresh, &kubeadm_like_plan(), false).unwrap();
    assert!(again.created_dirs.is_empty());
}

#[test]
fn reading_below_the_pki_dir_refuses_links_and_tolerates_absence() {
    let tmp = tempfile::tempdir().unwrap();
    let (root, elsewhere) = (tmp.path().join("pki"), tmp.path().join("elsewhere"));
    fs::create_dir_all(elsewhere.join("etcd")).unwrap();
    fs::write(elsewhere.join("etcd/ca.key"), b"key").unwrap();
    fs::create_dir(&root).unwrap();
    assert!(read_optional_below(&root, "etcd/ca.key").unwrap().is_none());
    std::os::unix::fs::symlink(elsewhere.join("etcd"), root.join("etcd")).unwrap();
    let err = read_optional_below(&root, "etcd/ca.key").unwrap_err();
    assert!(
        matches!(&err, ReadError::Symlink { path } if *path == root.join("etcd")),
        "{err:?}"
    );
    std::os::unix::fs::symlink(elsewhere.join("etcd/ca.key"), root.join("ca.key")).unwrap();
    assert!(matches!(
        read_optional_below(&root, "ca.key"),
        Err(ReadError::Symlink { .. })
    ));
    // The PKI directory itself may be a link.
    let linked = tmp.path().join("linked");
    std::os::unix::fs::symlink(&elsewhere, &linked).unwrap();
    assert_eq!(
        read_optional_below(&linked, "etcd/ca.key")
            .unwrap()
            .unwrap()
            .as_slice(),
        b"key"
    );
}
