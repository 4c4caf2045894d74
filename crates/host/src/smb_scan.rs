//! Finding the links that use an SMB mapping: a bounded walk of the allowed roots (kubelet path
//! and working dirs) that reads every link it meets and never follows one.
//!
//! This is how "who uses a share root" is derived from what exists on the host, so a daemon
//! restart loses nothing. The walk does not descend into links, mount points of other
//! filesystems (Unix) or reparse points (Windows), so a mounted volume's contents are never
//! walked; depth and entry count are bounded so a huge tree cannot stall a request.

use std::fs;
use std::path::{Path, PathBuf};

/// Deepest directory level visited below a root (kubelet's deepest staging and publish paths
/// are about 7 levels down).
pub const MAX_DEPTH: usize = 12;
/// Most directory entries looked at in one scan.
pub const MAX_ENTRIES: usize = 200_000;

/// Every link under `roots` whose target satisfies `uses` (called with the raw target and the
/// link's path), as (link path, raw target), ordered by link path.
pub fn links_using(
    roots: &[String],
    uses: impl Fn(&Path, &Path) -> bool,
) -> Vec<(String, PathBuf)> {
    let mut found = Vec::new();
    let mut budget = MAX_ENTRIES;
    for root in roots {
        let root = Path::new(root);
        let Ok(meta) = fs::metadata(root) else {
            continue;
        };
        let mut stack: Vec<(PathBuf, usize)> = vec![(root.to_path_buf(), 0)];
        while let Some((dir, depth)) = stack.pop() {
            let Ok(entries) = fs::read_dir(&dir) else {
                continue;
            };
            for e in entries.flatten() {
                if budget == 0 {
                    tracing::warn!(
                        limit = MAX_ENTRIES,
                        "SMB link scan stopped at its entry limit"
                    );
                    return found;
                }
                budget -= 1;
                let path = e.path();
                let Ok(m) = fs::symlink_metadata(&path) else {
                    continue;
                };
                if m.file_type().is_symlink() {
                    if let Ok(target) = fs::read_link(&path)
                        && uses(&target, &path)
                    {
                        found.push((path.display().to_string(), target));
                    }
                } else if m.is_dir() && depth < MAX_DEPTH && same_filesystem(&meta, &m) {
                    stack.push((path, depth + 1));
                }
            }
        }
    }
    found.sort();
    found
}

#[cfg(unix)]
fn same_filesystem(root: &fs::Metadata, dir: &fs::Metadata) -> bool {
    use std::os::unix::fs::MetadataExt;
    root.dev() == dir.dev()
}

#[cfg(windows)]
fn same_filesystem(_root: &fs::Metadata, dir: &fs::Metadata) -> bool {
    use std::os::windows::fs::MetadataExt;
    // FILE_ATTRIBUTE_REPARSE_POINT: junctions and mounted volumes are not walked.
    dir.file_attributes() & 0x400 == 0
}

#[cfg(not(any(unix, windows)))]
fn same_filesystem(_root: &fs::Metadata, _dir: &fs::Metadata) -> bool {
    true
}
