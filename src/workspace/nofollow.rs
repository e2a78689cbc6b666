//! File operations that never follow a symbolic link, for what toolpilot does on the host
//! side in a tree a command may have rigged (the protected-path guard, rules and skills).
//!
//! Paths are resolved beneath a directory handle with `openat2(RESOLVE_BENEATH |
//! RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)`: a link anywhere on the way, `..` out, or a
//! magic `/proc` link is refused by the kernel. The last name is acted on with `*at` calls
//! that do not follow it, and files are opened non-blocking and checked on the open handle,
//! so a FIFO or a device never blocks or is read.

use std::ffi::{OsStr, OsString};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use rustix::fd::{AsFd, OwnedFd};
use rustix::fs::{self as rfs, AtFlags, FileType, Mode, OFlags, ResolveFlags};
use rustix::io::Errno;

/// What a directory entry is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    File,
    Dir,
    Link,
    Other,
}

pub fn kind_of(mode: u32) -> Kind {
    match FileType::from_raw_mode(mode) {
        FileType::RegularFile => Kind::File,
        FileType::Directory => Kind::Dir,
        FileType::Symlink => Kind::Link,
        _ => Kind::Other,
    }
}

const BENEATH: ResolveFlags = ResolveFlags::BENEATH
    .union(ResolveFlags::NO_SYMLINKS)
    .union(ResolveFlags::NO_MAGICLINKS);

/// Opens `rel` beneath `dir` with `flags`, following no link on the way or at the end.
pub fn open_beneath(dir: impl AsFd, rel: &Path, flags: OFlags) -> io::Result<OwnedFd> {
    let rel = if rel.as_os_str().is_empty() {
        Path::new(".")
    } else {
        rel
    };
    Ok(rfs::openat2(
        dir,
        rel,
        flags | OFlags::CLOEXEC | OFlags::NOFOLLOW,
        Mode::empty(),
        BENEATH,
    )?)
}

/// Opens the folder that holds `rel`, beneath `dir`, following no link.
pub fn open_parent(dir: impl AsFd, rel: &Path) -> io::Result<OwnedFd> {
    open_beneath(
        dir,
        rel.parent().unwrap_or(Path::new("")),
        OFlags::RDONLY | OFlags::DIRECTORY,
    )
}

/// Opens the folder `name` in `dir` without following a link.
pub fn open_dir_at(dir: impl AsFd, name: &OsStr) -> io::Result<OwnedFd> {
    Ok(rfs::openat(
        dir,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )?)
}

/// Why a file was not read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("does not exist")]
    NotFound,
    #[error("is reached through a symbolic link, which is not followed here")]
    Link,
    #[error("is {0}, not a regular file")]
    NotRegular(&'static str),
    #[error("is {size} bytes (the limit is {limit})")]
    TooLarge { size: u64, limit: u64 },
    #[error("{0}")]
    Io(#[from] io::Error),
}

/// What a file of this type is, in the words of [`crate::bounded::file_kind`].
fn describe(kind: FileType) -> &'static str {
    match kind {
        FileType::RegularFile => "a regular file",
        FileType::Directory => "a folder",
        FileType::Fifo => "a named pipe (FIFO)",
        FileType::Socket => "a socket",
        FileType::CharacterDevice => "a character device",
        FileType::BlockDevice => "a block device",
        FileType::Symlink => "a symbolic link",
        _ => "a special file",
    }
}

fn read_fd(fd: OwnedFd, limit: u64) -> Result<Vec<u8>, ReadError> {
    let st = rfs::fstat(&fd).map_err(io::Error::from)?;
    let kind = FileType::from_raw_mode(st.st_mode);
    if kind != FileType::RegularFile {
        return Err(ReadError::NotRegular(describe(kind)));
    }
    let size = st.st_size as u64;
    if size > limit {
        return Err(ReadError::TooLarge { size, limit });
    }
    crate::bounded::read_to_end(std::fs::File::from(fd), limit).map_err(|e| match e {
        crate::bounded::CappedError::Io(e) => ReadError::Io(e),
        // It grew past the limit while it was read.
        _ => ReadError::TooLarge {
            size: limit + 1,
            limit,
        },
    })
}

fn open_error(e: io::Error) -> ReadError {
    match e.raw_os_error() {
        Some(c) if c == Errno::NOENT.raw_os_error() => ReadError::NotFound,
        Some(c) if c == Errno::LOOP.raw_os_error() || c == Errno::XDEV.raw_os_error() => {
            ReadError::Link
        }
        _ => ReadError::Io(e),
    }
}

/// Reads the regular file `rel` beneath `dir` (at most `limit` bytes), following no link.
pub fn read_beneath(dir: impl AsFd, rel: &Path, limit: u64) -> Result<Vec<u8>, ReadError> {
    let fd = open_beneath(dir, rel, OFlags::RDONLY | OFlags::NONBLOCK).map_err(open_error)?;
    read_fd(fd, limit)
}

/// Reads the regular file `name` in `dir` (at most `limit` bytes), not following a link.
pub fn read_at(dir: impl AsFd, name: &OsStr, limit: u64) -> Result<Vec<u8>, ReadError> {
    let fd = rfs::openat(
        dir,
        name,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| open_error(e.into()))?;
    read_fd(fd, limit)
}

/// The entries of the folder `rel` beneath `dir` (not `.` and `..`), with what they are,
/// following no link. A missing folder has none.
pub fn list_beneath(dir: impl AsFd, rel: &Path) -> io::Result<Vec<(OsString, Kind)>> {
    let fd = match open_beneath(dir, rel, OFlags::RDONLY | OFlags::DIRECTORY) {
        Ok(fd) => fd,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    list_fd(&fd)
}

/// The entries of an open folder, with what they are.
pub fn list_fd(fd: &OwnedFd) -> io::Result<Vec<(OsString, Kind)>> {
    let mut out = Vec::new();
    let mut d = rfs::Dir::read_from(fd)?;
    while let Some(e) = d.read() {
        let e = e?;
        let name = e.file_name().to_bytes();
        if name == b"." || name == b".." {
            continue;
        }
        let name = OsStr::from_bytes(name);
        let kind = match e.file_type() {
            FileType::Unknown => match rfs::statat(fd, name, AtFlags::SYMLINK_NOFOLLOW) {
                Ok(st) => kind_of(st.st_mode),
                Err(_) => continue,
            },
            t => kind_of(t.as_raw_mode()),
        };
        out.push((name.to_os_string(), kind));
    }
    Ok(out)
}

/// Removes whatever is at `name` in `dir` (a folder with all it holds), following no link.
pub fn remove_at(dir: impl AsFd, name: &OsStr) -> io::Result<()> {
    let dir = dir.as_fd();
    let st = match rfs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) => st,
        Err(Errno::NOENT) => return Ok(()),
        Err(e) => return Err(e.into()),
    };
    if kind_of(st.st_mode) != Kind::Dir {
        return Ok(rfs::unlinkat(dir, name, AtFlags::empty())?);
    }
    let sub = open_dir_at(dir, name)?;
    for (n, _) in list_fd(&sub)? {
        remove_at(&sub, &n)?;
    }
    Ok(rfs::unlinkat(dir, name, AtFlags::REMOVEDIR)?)
}

/// What [`files_below`] found.
#[derive(Debug, Default)]
pub struct Below {
    /// Regular files (relative to the folder's `dir`), sorted, at most `max`.
    pub files: Vec<std::path::PathBuf>,
    /// Some files were left out past `max`.
    pub cut: bool,
    /// Named pipes, sockets and devices found (never opened), with what each is.
    pub special: Vec<(std::path::PathBuf, &'static str)>,
}

/// Regular files below the folder `rel` beneath `dir` (relative to `dir`, sorted), at most
/// `max_depth` folders deep and `max` files, following no link.
pub fn files_below(dir: impl AsFd, rel: &Path, max_depth: usize, max: usize) -> io::Result<Below> {
    let top = match open_beneath(&dir, rel, OFlags::RDONLY | OFlags::DIRECTORY) {
        Ok(fd) => fd,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Below::default()),
        Err(e) => return Err(e),
    };
    let mut out = Below::default();
    let mut stack = vec![(top, rel.to_path_buf(), 0usize)];
    while let Some((fd, path, depth)) = stack.pop() {
        for (name, kind) in list_fd(&fd)? {
            match kind {
                Kind::File => out.files.push(path.join(&name)),
                Kind::Dir if depth < max_depth => {
                    if let Ok(sub) = open_dir_at(&fd, &name) {
                        stack.push((sub, path.join(&name), depth + 1));
                    }
                }
                Kind::Other if out.special.len() < 64 => {
                    if let Ok(st) = rfs::statat(&fd, &name, AtFlags::SYMLINK_NOFOLLOW) {
                        let what = describe(FileType::from_raw_mode(st.st_mode));
                        out.special.push((path.join(&name), what));
                    }
                }
                _ => {}
            }
        }
    }
    out.files.sort();
    out.special.sort();
    out.cut = out.files.len() > max;
    out.files.truncate(max);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    #[test]
    fn nothing_here_follows_a_link_or_blocks_on_a_fifo() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("ws");
        std::fs::create_dir_all(root.join("rules/sub")).unwrap();
        std::fs::write(root.join("rules/a.md"), "A").unwrap();
        std::fs::write(root.join("rules/sub/b.md"), "B").unwrap();
        std::fs::write(tmp.path().join("secret"), "SECRET").unwrap();
        std::fs::create_dir_all(tmp.path().join("outdir")).unwrap();
        std::fs::write(tmp.path().join("outdir/c.md"), "C").unwrap();
        symlink(tmp.path().join("secret"), root.join("rules/link.md")).unwrap();
        symlink(tmp.path().join("outdir"), root.join("rules/linkdir")).unwrap();
        symlink("rules", root.join("alias")).unwrap();
        let fifo = root.join("rules/pipe.md");
        assert!(
            std::process::Command::new("mkfifo")
                .arg(&fifo)
                .status()
                .unwrap()
                .success()
        );
        let fd = rfs::open(&root, OFlags::RDONLY | OFlags::DIRECTORY, Mode::empty()).unwrap();
        let below = files_below(&fd, Path::new("rules"), 8, 100).unwrap();
        let (files, cut) = (below.files, below.cut);
        assert_eq!(
            files,
            [Path::new("rules/a.md"), Path::new("rules/sub/b.md")]
        );
        assert!(!cut);
        assert_eq!(
            below.special,
            [(
                Path::new("rules/pipe.md").to_path_buf(),
                "a named pipe (FIFO)"
            )]
        );
        assert_eq!(
            read_beneath(&fd, Path::new("rules/a.md"), 10).unwrap(),
            b"A"
        );
        assert!(matches!(
            read_beneath(&fd, Path::new("rules/link.md"), 10),
            Err(ReadError::Link)
        ));
        assert!(matches!(
            read_beneath(&fd, Path::new("alias/a.md"), 10),
            Err(ReadError::Link)
        ));
        assert!(matches!(
            read_beneath(&fd, Path::new("rules/linkdir/c.md"), 10),
            Err(ReadError::Link)
        ));
        assert!(matches!(
            read_beneath(&fd, Path::new("rules/pipe.md"), 10),
            Err(ReadError::NotRegular("a named pipe (FIFO)"))
        ));
        assert!(matches!(
            read_beneath(&fd, Path::new("rules/a.md"), 0),
            Err(ReadError::TooLarge { size: 1, limit: 0 })
        ));
        assert!(matches!(
            read_beneath(&fd, Path::new("../secret"), 10),
            Err(ReadError::Link | ReadError::Io(_))
        ));
        let none = files_below(&fd, Path::new("alias"), 8, 100)
            .unwrap_or_default()
            .files;
        assert!(none.is_empty());
        remove_at(&fd, OsStr::new("rules")).unwrap();
        assert!(!root.join("rules").exists());
        assert_eq!(
            std::fs::read_to_string(tmp.path().join("secret")).unwrap(),
            "SECRET"
        );
        assert_eq!(
            std::fs::read_to_string(tmp.path().join("outdir/c.md")).unwrap(),
            "C"
        );
    }
}
