//! Creating files as root in directories others may write to (a spool under /tmp, a
//! group-writable textfile-collector directory): never through a link someone planted, never
//! over a file this process did not create, and whole files only (written under a temporary
//! name, then renamed; `rename` replaces a link at the final name instead of following it).
use std::{
    fs::{File, OpenOptions},
    io::{ErrorKind, Write as _},
    os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _},
    path::{Path, PathBuf},
    sync::atomic::{AtomicU64, Ordering},
};

use anyhow::{bail, Context as _, Result};

/// Creates `path` as a new file (mode 0644): `O_CREAT | O_EXCL | O_NOFOLLOW`, so an existing
/// file or a link at that name (even a dangling one) is an error, not a target.
pub fn create_new(path: &Path) -> Result<File> {
    match OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .mode(0o644)
        .open(path)
    {
        Ok(f) => Ok(f),
        Err(e) if e.kind() == ErrorKind::AlreadyExists => bail!(
            "{} already exists ({}): refusing to write through or over something this run did not create",
            path.display(),
            describe(path)
        ),
        Err(e) => Err(e).with_context(|| format!("creating {}", path.display())),
    }
}

/// Creates `dir` below `root` (the output the user chose, which may itself be a link) one
/// level at a time, refusing any directory between them that is a link or not a directory:
/// files created below would land wherever a planted link points. (Checked by path, not by
/// descriptor: a link swapped in between the check and the write is not caught.)
pub fn create_dir_safely(root: &Path, dir: &Path) -> Result<()> {
    let Ok(below) = dir.strip_prefix(root) else {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        return check_real_dir(dir);
    };
    std::fs::create_dir_all(root).with_context(|| format!("creating {}", root.display()))?;
    let mut p = root.to_path_buf();
    for part in below.components() {
        p.push(part);
        match std::fs::create_dir(&p) {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::AlreadyExists => check_real_dir(&p)?,
            Err(e) => return Err(e).with_context(|| format!("creating {}", p.display())),
        }
    }
    Ok(())
}

/// An exclusive claim on a directory, held for a process's life: a lock file in it, locked
/// with flock. The kernel drops the lock when the process dies, however it dies, so a stale
/// lock file never blocks a restart; the file holds the holder's pid and what it is (`tag`),
/// for the message only.
#[derive(Debug)]
pub struct DirLock {
    _file: File,
}

impl DirLock {
    /// Takes the lock `name` in `dir` (which must exist), writing `<pid> <tag>` into it, or
    /// fails with `busy(holder)`, `holder` being the holder's file as written (empty if unread).
    pub fn take(
        dir: &Path,
        name: &str,
        tag: &str,
        busy: impl FnOnce(&str) -> String,
    ) -> Result<DirLock> {
        Self::lock(dir, name, Some(tag), busy)
    }

    /// Takes the lock `name` as `take` does but writes nothing into it: a lock file that an
    /// older version reads for its own message, held only to exclude that version.
    pub fn hold(dir: &Path, name: &str, busy: impl FnOnce(&str) -> String) -> Result<DirLock> {
        Self::lock(dir, name, None, busy)
    }

    fn lock(
        dir: &Path,
        name: &str,
        tag: Option<&str>,
        busy: impl FnOnce(&str) -> String,
    ) -> Result<DirLock> {
        use std::io::{Read as _, Seek as _};
        let path = dir.join(name);
        // O_NOFOLLOW: as root, a link planted at this name must not be opened (and truncated).
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o644)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&path)
            .map_err(|e| {
                // a non-root recorder (one run with capabilities) in a directory a root agent
                // or record used before: the lock file is theirs and read-only to this user
                match owner_uid(&path) {
                    Some(uid) if e.kind() == std::io::ErrorKind::PermissionDenied => {
                        another_users_lock(&path, uid, dir)
                    }
                    _ => anyhow::Error::new(e)
                        .context(format!("opening the lock {}", path.display())),
                }
            })?;
        // As root in a directory others may write to: a FIFO, a hard link to another file or
        // a file another user planted there is not ours to lock and truncate.
        {
            use std::os::unix::fs::MetadataExt as _;
            let meta = file
                .metadata()
                .with_context(|| format!("reading {}", path.display()))?;
            // SAFETY: geteuid has no preconditions and cannot fail.
            let euid = unsafe { libc::geteuid() };
            if meta.is_file() && meta.nlink() == 1 && meta.uid() != euid {
                return Err(another_users_lock(&path, meta.uid(), dir));
            }
            if !meta.is_file() || meta.nlink() != 1 {
                bail!(
                    "{} is not a lock file this user created ({}): refusing to use it; remove it if it is stale",
                    path.display(),
                    describe(&path)
                );
            }
        }
        // Another recorder looking for nested outputs holds a shared lock for an instant
        // (`layout::claim_output`): a refusal only after a few tries over ~50 ms.
        let mut tries = 0;
        loop {
            match file.try_lock() {
                Ok(()) => break,
                Err(std::fs::TryLockError::WouldBlock) if tries < 5 => {
                    tries += 1;
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
                Err(std::fs::TryLockError::WouldBlock) => {
                    let mut holder = String::new();
                    let _ = file.read_to_string(&mut holder);
                    bail!("{}", busy(holder.trim()));
                }
                Err(std::fs::TryLockError::Error(e)) => {
                    return Err(e).with_context(|| format!("locking {}", path.display()))
                }
            }
        }
        if let Some(tag) = tag {
            // one write of the whole line: a process refused meanwhile reads it whole or not at all
            let line = format!("{} {tag}\n", std::process::id());
            let mut pid = || -> std::io::Result<()> {
                file.set_len(0)?;
                file.rewind()?;
                file.write_all(line.as_bytes())
            };
            pid().with_context(|| format!("writing {}", path.display()))?;
        }
        Ok(DirLock { _file: file })
    }
}

/// Whether users other than the owner may create and rename files in `dir` (group- or
/// world-writable): there, as root, only names created new are safe, and the data can still be
/// tampered with after it is written.
pub fn writable_by_others(dir: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::metadata(dir).is_ok_and(|m| m.permissions().mode() & 0o022 != 0)
}

/// Says so once at start, as system daemons do, when an output directory is writable by others.
pub fn warn_if_writable_by_others(dir: &Path, flag: &str) {
    if writable_by_others(dir) {
        log::warn!(
            "{flag} {} is writable by other users: scaletrace never follows or replaces their files there, but they can alter what it writes; prefer a directory only root can write",
            dir.display()
        );
    }
}

/// Creates the output directory the user named (`flag`: the option that named it) with its
/// parents, saying what is in the way where it cannot: a file, or a symbolic link to nothing
/// (the system says only "File exists" for both).
pub fn create_output_dir(flag: &str, dir: &Path) -> Result<()> {
    let Err(e) = std::fs::create_dir_all(dir) else {
        return Ok(());
    };
    check_output_dir(flag, dir)?;
    Err(e).with_context(|| format!("{flag} {}: cannot create it", dir.display()))
}

/// Refuses an output directory that cannot be created because a file or a symbolic link to
/// nothing is in its place or above it; creates nothing (`import` creates its output only once
/// a trace has been read, so a mistyped trace leaves no empty directory behind).
pub fn check_output_dir(flag: &str, dir: &Path) -> Result<()> {
    // `a/` as `a`: the lookup of `afile/` fails where the one of `afile` names the file
    let dir: PathBuf = dir.components().collect();
    // the deepest part of the path that is there: what stops the creation
    if let Some((p, meta)) = dir
        .ancestors()
        .find_map(|p| std::fs::symlink_metadata(p).ok().map(|m| (p, m)))
    {
        // "--out a/b: a is ...", or "--out a is ..." when it is the directory itself
        let which = if p == dir {
            format!("{flag} {}", dir.display())
        } else {
            format!("{flag} {}: {}", dir.display(), p.display())
        };
        if meta.file_type().is_symlink() && !p.exists() {
            let to = std::fs::read_link(p).unwrap_or_default();
            bail!(
                "{which} is a symbolic link to {}, which does not exist",
                to.display()
            );
        }
        if !p.is_dir() {
            bail!("{which} is not a directory");
        }
    }
    Ok(())
}

fn check_real_dir(p: &Path) -> Result<()> {
    let meta = std::fs::symlink_metadata(p).with_context(|| format!("reading {}", p.display()))?;
    if meta.file_type().is_symlink() {
        bail!(
            "{} is a symbolic link: refusing to write below it (remove it or point the output elsewhere)",
            p.display()
        );
    }
    if !meta.is_dir() {
        bail!("{} is not a directory", p.display());
    }
    Ok(())
}

/// The refusal of a lock file another user's scaletrace created (opening it failed, or it is
/// not ours to lock and truncate).
fn another_users_lock(path: &Path, uid: u32, dir: &Path) -> anyhow::Error {
    anyhow::anyhow!(
        "{} belongs to uid {uid}, another user whose scaletrace used {} before: a recorder locks only files its own user created; give this run another directory, or run it as that user",
        path.display(),
        dir.display()
    )
}

/// The owner of a file, not following a link.
fn owner_uid(path: &Path) -> Option<u32> {
    use std::os::unix::fs::MetadataExt as _;
    std::fs::symlink_metadata(path).ok().map(|m| m.uid())
}

fn describe(path: &Path) -> &'static str {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_symlink() => "a symbolic link",
        Ok(m) if m.is_dir() => "a directory",
        Ok(_) => "a file",
        Err(_) => "gone since",
    }
}

/// A temporary name beside `path` that no one can predict: the pid, a counter and the clock.
fn temporary_name(path: &Path) -> PathBuf {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let name = path
        .file_name()
        .map_or_else(Default::default, |n| n.to_string_lossy().into_owned());
    path.with_file_name(format!(
        ".{name}.{}-{}-{nanos:09}.partial",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    ))
}

/// Whether [`write_atomically`] can write `path`, checked before long work whose result it will
/// hold: not a directory, in a directory that exists, where a file can be created (one is,
/// and removed at once). The error names `path`, not the temporary file.
pub fn check_writable(path: &Path) -> Result<()> {
    if path.is_dir() {
        bail!("{} is a directory: give a file name", path.display());
    }
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    if !dir.is_dir() {
        bail!(
            "cannot write {}: no directory {}",
            path.display(),
            dir.display()
        );
    }
    let probe = temporary_name(path);
    create_new(&probe).map_err(|e| {
        anyhow::anyhow!(
            "cannot write {}: {}",
            path.display(),
            e.root_cause().to_string().trim_end_matches('.')
        )
    })?;
    let _ = std::fs::remove_file(&probe);
    Ok(())
}

/// Writes `bytes` to a new temporary file beside `path` (see [`create_new`]), then renames it
/// over `path`, so a reader never sees half of it.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> Result<()> {
    let mut last_error = None;
    for _ in 0..3 {
        let tmp = temporary_name(path);
        let mut file = match create_new(&tmp) {
            Ok(f) => f,
            // someone holds that name: draw another
            Err(e) => {
                last_error = Some(e);
                continue;
            }
        };
        let written = file
            .write_all(bytes)
            .and_then(|()| file.set_permissions(std::fs::Permissions::from_mode(0o644)));
        if let Err(e) = written {
            let _ = std::fs::remove_file(&tmp);
            return Err(e).with_context(|| format!("writing {}", tmp.display()));
        }
        return std::fs::rename(&tmp, path)
            .with_context(|| format!("renaming into {}", path.display()));
    }
    Err(last_error.expect("three attempts"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_lock_is_exclusive_and_only_taken_on_a_file_of_ours() {
        let dir = tempfile::tempdir().unwrap();
        let busy = |holder: &str| format!("held by {holder}");
        let held = DirLock::take(dir.path(), "l.lock", "first", busy).unwrap();
        let again = DirLock::take(dir.path(), "l.lock", "second", busy).unwrap_err();
        assert_eq!(
            again.to_string(),
            format!("held by {} first", std::process::id())
        );
        drop(held);
        DirLock::take(dir.path(), "l.lock", "second", busy).unwrap();
        // a hard link to another file, and a FIFO: refused, the file untouched
        let other = dir.path().join("other");
        std::fs::write(&other, "keep").unwrap();
        std::fs::hard_link(&other, dir.path().join("linked.lock")).unwrap();
        let e = DirLock::take(dir.path(), "linked.lock", "t", busy).unwrap_err();
        assert!(
            e.to_string().contains("not a lock file this user created"),
            "{e}"
        );
        assert_eq!(std::fs::read_to_string(&other).unwrap(), "keep");
        let fifo = std::ffi::CString::new(dir.path().join("fifo.lock").to_str().unwrap()).unwrap();
        // SAFETY: a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o644) }, 0);
        let e = DirLock::take(dir.path(), "fifo.lock", "t", busy).unwrap_err();
        assert!(e.to_string().contains("not a lock file"), "{e}");
        // another user's lock file (as root here: a non-root recorder meets a root one's as
        // "Permission denied" when opening it): its owner named, the file untouched
        // SAFETY: geteuid has no preconditions and cannot fail.
        if unsafe { libc::geteuid() } == 0 {
            let theirs = dir.path().join("theirs.lock");
            std::fs::write(&theirs, "77 agent\n").unwrap();
            std::os::unix::fs::chown(&theirs, Some(12345), None).unwrap();
            let e = DirLock::take(dir.path(), "theirs.lock", "t", busy).unwrap_err();
            assert!(
                e.to_string().starts_with(&format!(
                    "{} belongs to uid 12345, another user whose scaletrace used {} before",
                    theirs.display(),
                    dir.path().display()
                )),
                "{e}"
            );
            assert_eq!(std::fs::read_to_string(&theirs).unwrap(), "77 agent\n");
        }
    }

    #[test]
    fn directories_others_can_write_are_recognised() {
        use std::os::unix::fs::PermissionsExt as _;
        let d = tempfile::tempdir().unwrap();
        std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        assert!(!writable_by_others(d.path()));
        std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o1777)).unwrap();
        assert!(writable_by_others(d.path()));
        std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o775)).unwrap();
        assert!(writable_by_others(d.path()));
    }
    use std::os::unix::fs::symlink;

    #[test]
    fn a_planted_link_is_never_written_through() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, b"precious").unwrap();
        let planted = dir.path().join("out.parquet.partial");
        symlink(&victim, &planted).unwrap();
        let e = create_new(&planted).unwrap_err().to_string();
        assert!(
            e.contains("a symbolic link") && e.contains("refusing"),
            "{e}"
        );
        // a dangling link is refused too (O_EXCL), and nothing is created at its target
        let dangling = dir.path().join("dangling.partial");
        symlink(dir.path().join("nowhere"), &dangling).unwrap();
        assert!(create_new(&dangling).is_err());
        assert!(!dir.path().join("nowhere").exists());
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
    }

    #[test]
    fn whole_files_replace_links_at_the_final_name() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, b"precious").unwrap();
        // the old predictable temporary name and the final name, both planted
        symlink(&victim, dir.path().join("status.json.partial")).unwrap();
        let status = dir.path().join("status.json");
        symlink(&victim, &status).unwrap();
        write_atomically(&status, b"{}").unwrap();
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
        let meta = std::fs::symlink_metadata(&status).unwrap();
        assert!(meta.is_file(), "the link itself was replaced");
        assert_eq!(meta.permissions().mode() & 0o777, 0o644);
        assert_eq!(std::fs::read(&status).unwrap(), b"{}");
        let left: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| n.starts_with('.'))
            .collect();
        assert!(left.is_empty(), "temporary files left: {left:?}");
    }

    #[test]
    fn a_linked_output_directory_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let elsewhere = dir.path().join("elsewhere");
        std::fs::create_dir(&elsewhere).unwrap();
        let planted = dir.path().join("table=flows");
        symlink(&elsewhere, &planted).unwrap();
        // the link is the directory itself, or one between the output and it
        for target in [planted.clone(), planted.join("date=2026-12-03/hour=8")] {
            let e = create_dir_safely(dir.path(), &target)
                .unwrap_err()
                .to_string();
            assert!(e.contains("table=flows is a symbolic link"), "{e}");
        }
        assert!(
            std::fs::read_dir(&elsewhere).unwrap().next().is_none(),
            "a directory was created through the link"
        );
        create_dir_safely(dir.path(), &dir.path().join("a/b")).unwrap();
        // the output the user chose may be a link
        let chosen = dir.path().join("chosen");
        symlink(&elsewhere, &chosen).unwrap();
        create_dir_safely(&chosen, &chosen.join("flows")).unwrap();
    }
}
