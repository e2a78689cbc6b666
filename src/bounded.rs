//! Reads with a size cap, checked before anything is allocated.
//!
//! Every read of a file or stream whose size someone else controls (a workspace file a
//! command can grow or swap for a FIFO, a file in the state folder, a child's output) goes
//! through here or through its own `Read::take`: a file is read to at most `cap` bytes (one
//! more tells that it is larger), a line is kept to at most `cap` bytes and the rest of it is
//! read past without being kept. Nothing here decides what the cap is or what to tell the
//! user when it is hit: callers do, with the limit and what to do instead.

use std::fs::File;
use std::io::{self, BufRead, Read};
use std::path::Path;

/// Why a capped read of a file gave nothing.
#[derive(Debug, thiserror::Error)]
pub enum CappedError {
    #[error("it is larger than {} bytes", crate::text::group(*cap))]
    TooLarge { cap: u64 },
    #[error("it is {0}, not a regular file")]
    NotAFile(&'static str),
    #[error("{0}")]
    Io(#[from] io::Error),
}

impl CappedError {
    /// Whether the file does not exist (callers often treat that as "nothing saved yet").
    pub fn is_not_found(&self) -> bool {
        matches!(self, CappedError::Io(e) if e.kind() == io::ErrorKind::NotFound)
    }
}

/// Whether a final symbolic link is followed when a file is opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Links {
    Follow,
    /// A final symbolic link is refused (files that toolpilot writes itself are never links).
    Refuse,
}

/// All of `r`, if it is at most `cap` bytes.
pub fn read_to_end(r: impl Read, cap: u64) -> Result<Vec<u8>, CappedError> {
    let mut buf = Vec::new();
    r.take(cap.saturating_add(1)).read_to_end(&mut buf)?;
    if buf.len() as u64 > cap {
        return Err(CappedError::TooLarge { cap });
    }
    Ok(buf)
}

/// Opens `path` for reading without blocking on a FIFO (`O_NONBLOCK`, which does not change
/// reads of a regular file) and checks that it is a regular file.
pub fn open_regular(path: &Path, links: Links) -> Result<File, CappedError> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut flags = rustix::fs::OFlags::NONBLOCK;
    if links == Links::Refuse {
        flags |= rustix::fs::OFlags::NOFOLLOW;
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(flags.bits() as i32)
        .open(path)?;
    let kind = file.metadata()?.file_type();
    if !kind.is_file() {
        return Err(CappedError::NotAFile(file_kind(kind)));
    }
    Ok(file)
}

/// What a file of this type is, in words for a message: "a named pipe (FIFO)", "a socket", …
/// Readers say this when they refuse something that is not a regular file.
pub fn file_kind(t: std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if t.is_file() {
        "a regular file"
    } else if t.is_dir() {
        "a folder"
    } else if t.is_symlink() {
        "a symbolic link"
    } else if t.is_fifo() {
        "a named pipe (FIFO)"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else {
        "a special file"
    }
}

/// The whole of a regular file, if it is at most `cap` bytes (the size is checked before the
/// read, and the read stops one byte past the cap if the file grew meanwhile).
pub fn read_file(path: &Path, cap: u64, links: Links) -> Result<Vec<u8>, CappedError> {
    let file = open_regular(path, links)?;
    if file.metadata()?.len() > cap {
        return Err(CappedError::TooLarge { cap });
    }
    read_to_end(file, cap)
}

/// [`read_file`] as UTF-8 text.
pub fn read_file_string(path: &Path, cap: u64, links: Links) -> Result<String, CappedError> {
    let bytes = read_file(path, cap, links)?;
    String::from_utf8(bytes).map_err(|e| {
        CappedError::Io(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("it is not UTF-8 text ({e})"),
        ))
    })
}

/// One line read by [`read_line`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Line {
    /// Bytes the line had in the stream, its `\n` included (0: end of the stream).
    pub len: u64,
    /// The line was longer than the cap: only its first `cap` bytes were kept.
    pub cut: bool,
}

/// Reads one line (through its `\n`) into `line`, keeping at most `cap` bytes of it. With
/// `rest = Rest::Skip`, the remainder of a longer line is read past (not kept), so the next
/// call starts at the next line; with `Rest::Leave` it is left unread (for a caller that stops
/// there, which then never waits for a line that does not end).
pub fn read_line(
    r: &mut impl BufRead,
    line: &mut Vec<u8>,
    cap: usize,
    rest: Rest,
) -> io::Result<Line> {
    line.clear();
    let n = r.by_ref().take(cap as u64).read_until(b'\n', line)?;
    if n < cap || line.last() == Some(&b'\n') {
        return Ok(Line {
            len: n as u64,
            cut: false,
        });
    }
    // `cap` bytes and no end of line yet: is there more of this line?
    if r.fill_buf()?.is_empty() {
        return Ok(Line {
            len: n as u64,
            cut: false,
        });
    }
    let skipped = match rest {
        Rest::Skip => r.skip_until(b'\n')?,
        Rest::Leave => 0,
    };
    Ok(Line {
        len: (n + skipped) as u64,
        cut: true,
    })
}

/// What [`read_line`] does with the part of a line past its cap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rest {
    Skip,
    Leave,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_read_stops_one_byte_past_the_cap() {
        assert_eq!(read_to_end(&b"abc"[..], 3).unwrap(), b"abc");
        assert!(matches!(
            read_to_end(&b"abcd"[..], 3),
            Err(CappedError::TooLarge { cap: 3 })
        ));
        // An endless stream: the read ends at the cap.
        assert!(matches!(
            read_to_end(io::repeat(b'x'), 1000),
            Err(CappedError::TooLarge { cap: 1000 })
        ));
    }

    #[test]
    fn long_lines_are_kept_to_the_cap_and_skipped_past() {
        let text = format!("short\n{}\nlast", "y".repeat(100));
        let mut r = io::BufReader::with_capacity(16, text.as_bytes());
        let mut line = Vec::new();
        let mut next = |r: &mut io::BufReader<&[u8]>| {
            let l = read_line(r, &mut line, 10, Rest::Skip).unwrap();
            (String::from_utf8(line.clone()).unwrap(), l.len, l.cut)
        };
        assert_eq!(next(&mut r), ("short\n".into(), 6, false));
        assert_eq!(next(&mut r), ("yyyyyyyyyy".into(), 101, true));
        assert_eq!(next(&mut r), ("last".into(), 4, false));
        assert_eq!(next(&mut r), ("".into(), 0, false));
        // Exactly the cap, at the end of the stream: not cut.
        let mut r = io::BufReader::new(&b"0123456789"[..]);
        let l = read_line(&mut r, &mut line, 10, Rest::Skip).unwrap();
        assert_eq!((l.len, l.cut), (10, false));
        // Leave: an endless line is not waited for.
        let mut endless = io::BufReader::new(io::repeat(b'z'));
        let l = read_line(&mut endless, &mut line, 10, Rest::Leave).unwrap();
        assert_eq!((l.len, l.cut, line.len()), (10, true, 10));
    }

    #[test]
    fn only_regular_files_are_read_and_fifos_do_not_block() {
        let tmp = tempfile::tempdir().unwrap();
        let fifo = tmp.path().join("fifo");
        assert!(
            std::process::Command::new("mkfifo")
                .arg(&fifo)
                .status()
                .unwrap()
                .success()
        );
        assert_eq!(
            read_file(&fifo, 10, Links::Follow).unwrap_err().to_string(),
            "it is a named pipe (FIFO), not a regular file"
        );
        assert!(matches!(
            read_file(tmp.path(), 10, Links::Follow),
            Err(CappedError::NotAFile("a folder"))
        ));
        assert!(matches!(
            read_file(Path::new("/dev/null"), 10, Links::Follow),
            Err(CappedError::NotAFile("a character device"))
        ));
        let file = tmp.path().join("f");
        std::fs::write(&file, "0123456789a").unwrap();
        assert!(matches!(
            read_file(&file, 10, Links::Follow),
            Err(CappedError::TooLarge { cap: 10 })
        ));
        assert_eq!(read_file(&file, 11, Links::Follow).unwrap(), b"0123456789a");
        let link = tmp.path().join("link");
        std::os::unix::fs::symlink(&file, &link).unwrap();
        assert!(read_file(&link, 11, Links::Follow).is_ok());
        assert!(read_file(&link, 11, Links::Refuse).is_err());
        assert!(
            read_file(&tmp.path().join("none"), 1, Links::Follow)
                .unwrap_err()
                .is_not_found()
        );
    }
}
