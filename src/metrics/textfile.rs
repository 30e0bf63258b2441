//! The textfile for node_exporter's textfile collector: `DIR/pinnerd.prom`, written to a
//! temporary file in the same directory (unpredictable name, created exclusively, no
//! link followed) and renamed over the old one, so the collector
//! reads the old file or the new one, never half of one. Its temporary name does not end
//! in `.prom`, so the collector never reads it either.
//!
//! Owns: that one file. No fsync: after a crash the collector reads the previous
//! complete file or none, and the next period rewrites it.

use std::path::{Path, PathBuf};

/// The file name inside the textfile directory.
pub const FILE_NAME: &str = "pinnerd.prom";

/// Writing the textfile failed; names the file.
#[derive(Debug, thiserror::Error)]
#[error("writing the metrics textfile {path}: {source}")]
pub struct TextfileError {
    pub path: PathBuf,
    #[source]
    pub source: std::io::Error,
}

/// Writes `text` to `dir/pinnerd.prom` atomically; returns the path. No link is
/// followed, and a directory writable by others is refused (see [`crate::outfile`]).
pub fn write(dir: &Path, text: &str) -> Result<PathBuf, TextfileError> {
    let path = dir.join(FILE_NAME);
    crate::outfile::replace(&path, text.as_bytes(), false).map_err(|source| TextfileError {
        path: path.clone(),
        source,
    })?;
    Ok(path)
}

/// [`write`], a failure logged as a warning: the daemon keeps running without it.
pub fn write_logged(dir: &Path, text: &str) {
    if let Err(e) = write(dir, text) {
        tracing::warn!(error = %e, "metrics textfile not written: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replaces_the_file_and_leaves_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(FILE_NAME), "old\n").unwrap();
        let p = write(dir.path(), "pinnerd_rescans_total 1\n").unwrap();
        assert_eq!(
            std::fs::read_to_string(&p).unwrap(),
            "pinnerd_rescans_total 1\n"
        );
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from(FILE_NAME)]);
        let e = write(&dir.path().join("missing"), "x").unwrap_err();
        assert!(e.to_string().contains("missing/pinnerd.prom"), "{e}");
    }
}
