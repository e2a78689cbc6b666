//! Files in the state folder that only the person who runs toolpilot may read: the admin
//! token, the key that signs paused approvals, the paused runs themselves, the saved "always
//! allow" rules, the checkpoints and the codebase index's manifest. This is the one atomic
//! write of the crate.
//!
//! Each is written under a new name with mode 0600 from the start (never readable by others,
//! not even for a moment), synced, then renamed over the old one, so a reader sees the old file
//! or the new one, never half of one. Two writers of the same file never share a temporary
//! name; a read-modify-write of one file needs a lock of its owner's.

use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// Writes `bytes` to `path` (mode 0600, atomically), creating its folder if needed.
pub fn write(path: &Path, bytes: &[u8]) -> io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let mut tmp_name = path.file_name().unwrap_or_default().to_os_string();
    tmp_name.push(format!(".{:08x}.tmp", fastrand::u32(..)));
    let tmp = path.with_file_name(tmp_name);
    let written = (|| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn written_for_the_owner_only_and_replaced_whole() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().unwrap();
        let p = tmp.path().join("sub/secret");
        write(&p, b"one").unwrap();
        write(&p, b"two").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"two");
        let mode = std::fs::metadata(&p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert_eq!(std::fs::read_dir(p.parent().unwrap()).unwrap().count(), 1);
    }
}
