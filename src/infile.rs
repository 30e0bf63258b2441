//! Opening and reading a file someone else may have written (a rule file, a matrix
//! file, the restore journal) without trusting it: a regular file only, of a bounded
//! size.
//!
//! The type is checked before opening (opening a FIFO for reading would wait for a
//! writer, and opening a device may do something) and again on the open descriptor (the
//! path may have been swapped in between). The open never blocks (`O_NONBLOCK`), never
//! becomes the controlling terminal (`O_NOCTTY`) and, with [`Links::Refuse`], never
//! follows a symlink (`O_NOFOLLOW`). The read stops one byte past the limit, so a file
//! that grows while it is read cannot fill memory.
//!
//! Owns: those checks. Must not touch: what the file means; callers word the errors
//! and add the path.

use std::fs::{File, FileType, Metadata};
use std::io::{self, Read};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;

/// Whether the last component of a path may be a symlink.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Links {
    /// Followed to the file it names (which must be regular).
    Follow,
    /// Refused: a symlink is not a regular file.
    Refuse,
}

/// Why a file was not opened or read.
#[derive(Debug, thiserror::Error)]
pub enum InError {
    /// The system call failed (`NotFound` when there is no such file).
    #[error("{0}")]
    Io(#[from] io::Error),
    /// A FIFO, a device, a directory, a socket or (with [`Links::Refuse`]) a symlink.
    #[error("not a regular file but a {0}")]
    NotRegular(&'static str),
    /// Over the limit: `size` bytes as the file said, or as read when it grew.
    #[error("{size} bytes is over the {limit}-byte limit")]
    TooLarge { size: u64, limit: u64 },
    /// Not UTF-8, from the byte at `offset` on.
    #[error("not valid UTF-8 (first bad byte at offset {offset})")]
    NotUtf8 { offset: usize },
}

/// Opens `path` for reading if it is a regular file; its metadata from the open
/// descriptor comes with it (`len()` is its size when opened).
pub fn open_regular(path: &Path, links: Links) -> Result<(File, Metadata), InError> {
    let md = match links {
        Links::Follow => std::fs::metadata(path)?,
        Links::Refuse => std::fs::symlink_metadata(path)?,
    };
    regular(&md.file_type())?;
    let nofollow = match links {
        Links::Follow => 0,
        Links::Refuse => libc::O_NOFOLLOW,
    };
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC | libc::O_NOCTTY | nofollow)
        .open(path)?;
    let md = file.metadata()?;
    regular(&md.file_type())?;
    Ok((file, md))
}

/// Reads an opened file whole as UTF-8 text, refusing more than `limit` bytes: at once
/// when its `size` says so, else one byte past the limit.
pub fn read_text(file: File, size: u64, limit: u64) -> Result<String, InError> {
    if size > limit {
        return Err(InError::TooLarge { size, limit });
    }
    let mut bytes = Vec::new();
    file.take(limit + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit {
        return Err(InError::TooLarge {
            size: bytes.len() as u64,
            limit,
        });
    }
    String::from_utf8(bytes).map_err(|e| InError::NotUtf8 {
        offset: e.utf8_error().valid_up_to(),
    })
}

fn regular(ft: &FileType) -> Result<(), InError> {
    if ft.is_file() {
        Ok(())
    } else {
        Err(InError::NotRegular(type_name(ft)))
    }
}

/// A file type in words: `FIFO`, `character device`, `directory`…
pub fn type_name(ft: &FileType) -> &'static str {
    if ft.is_fifo() {
        "FIFO"
    } else if ft.is_socket() {
        "socket"
    } else if ft.is_char_device() {
        "character device"
    } else if ft.is_block_device() {
        "block device"
    } else if ft.is_dir() {
        "directory"
    } else if ft.is_symlink() {
        "symlink"
    } else {
        "special file"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_regular_files_are_opened_and_reads_stop_at_the_limit() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("f");
        std::fs::write(&file, "abcd").unwrap();
        let (f, md) = open_regular(&file, Links::Refuse).unwrap();
        assert_eq!(read_text(f, md.len(), 4).unwrap(), "abcd");
        let (f, md) = open_regular(&file, Links::Follow).unwrap();
        let e = read_text(f, md.len(), 3).unwrap_err();
        assert_eq!(e.to_string(), "4 bytes is over the 3-byte limit");
        // A size that understates the file (it grew): the read stops past the limit.
        let (f, _) = open_regular(&file, Links::Follow).unwrap();
        let e = read_text(f, 0, 3).unwrap_err();
        assert!(matches!(e, InError::TooLarge { size: 4, limit: 3 }), "{e}");

        let fifo = dir.path().join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRUSR).unwrap();
        let e = open_regular(&fifo, Links::Follow).unwrap_err();
        assert_eq!(e.to_string(), "not a regular file but a FIFO");
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&file, &link).unwrap();
        assert!(open_regular(&link, Links::Follow).is_ok());
        let e = open_regular(&link, Links::Refuse).unwrap_err();
        assert_eq!(e.to_string(), "not a regular file but a symlink");
        let e = open_regular(Path::new("/dev/null"), Links::Follow).unwrap_err();
        assert_eq!(e.to_string(), "not a regular file but a character device");

        std::fs::write(&file, b"ab\xffc").unwrap();
        let (f, md) = open_regular(&file, Links::Refuse).unwrap();
        let e = read_text(f, md.len(), 10).unwrap_err();
        assert!(matches!(e, InError::NotUtf8 { offset: 2 }), "{e}");
    }
}
