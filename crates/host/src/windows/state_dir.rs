//! The daemon's state directory on Windows (`--state-dir`, `C:\ProgramData\csi-proxy` by
//! default), which holds the format records: a record says whether FormatVolume may format a
//! volume, so a record no administrator wrote must never be read.
//!
//! ProgramData's own ACL lets BUILTIN\Users create folders and files in the folders they did not
//! create, and a folder made without a security descriptor inherits it ("If lpSecurityAttributes
//! is NULL, the directory gets a default security descriptor. The ACLs in the default security
//! descriptor for a directory are inherited from its parent directory", CreateDirectoryW). So
//! the state directory and its `format` folder are created with a protected DACL that grants
//! SYSTEM and Administrators alone, inherited by everything made inside; one found already there
//! (made by an earlier release, or planted) is kept only when SYSTEM, Administrators or the
//! daemon's own user owns it and is no reparse point, and gets the same DACL (SetSecurityInfo
//! propagates it to what is inside); anything else stops the start-up with what to do. Files
//! inside it keep their owners through that DACL, so every one of them is checked too (a
//! user's is removed, and the daemon makes its own).

use std::io;
use std::path::Path;

/// The folder under the state directory holding the format records.
pub const FORMAT_DIR: &str = "format";

/// Who owns a file or folder, as far as trusting what it holds goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Owner {
    /// SYSTEM, BUILTIN\Administrators, or the user the daemon runs as.
    Trusted,
    /// Anyone else, by SID string.
    Other(String),
}

/// What the start-up check learns of an existing folder, without following a reparse point.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Facts {
    /// Its owner.
    pub owner: Owner,
    /// A directory (not a file).
    pub directory: bool,
    /// A reparse point (a junction or a link), which could lead anywhere.
    pub reparse_point: bool,
}

/// The Windows calls the check makes, one documented call (or open and call) per method; the
/// real ones are in `win32::state_dir`, tests use a fake.
pub trait StateDirOs {
    /// Creates folder `path` (its parent exists) with the private DACL; `AlreadyExists` when
    /// something is there already.
    fn create_private_dir(&self, path: &Path) -> io::Result<()>;
    /// What `path` is and who owns it; `NotFound` when nothing is there.
    fn facts(&self, path: &Path) -> io::Result<Facts>;
    /// Replaces `path`'s DACL with the private one, protected from its parent's.
    fn make_private(&self, path: &Path) -> io::Result<()>;
    /// The entries of folder `dir` (full paths), without following anything.
    fn entries(&self, dir: &Path) -> io::Result<Vec<std::path::PathBuf>>;
    /// Deletes file (or link) `path` itself.
    fn remove_file(&self, path: &Path) -> io::Result<()>;
}

/// Prepares the state directory `dir` and its format folder at start-up, as the module says.
/// The parents of `dir` are the operator's and are created with their defaults.
pub fn prepare(os: &dyn StateDirOs, dir: &Path) -> Result<(), String> {
    if !dir.is_absolute() {
        return Err(format!(
            "--state-dir {:?} must be an absolute path",
            dir.display()
        ));
    }
    if let Some(parent) = dir.parent() {
        std::fs::create_dir_all(parent)
            .map_err(|e| format!("--state-dir {:?}: {e}", dir.display()))?;
    }
    for folder in [dir.to_path_buf(), dir.join(FORMAT_DIR)] {
        private_folder(os, &folder)
            .map_err(|why| format!("--state-dir {:?}: {why}", dir.display()))?;
    }
    untrusted_files_removed(os, dir)
        .map_err(|why| format!("--state-dir {:?}: {why}", dir.display()))
}

/// Every entry of the state directory besides the format folder (whose records are checked
/// one by one when read) is the daemon's own and made again when missing: the hand-off locks
/// (`serving.lock`, `take-over.lock`), the serving daemon's pid and listen records, a take-over
/// request. One that SYSTEM, Administrators or the daemon's user does not own, or that is a
/// reparse point, was planted before the folder was made private (the DACL just set does not
/// change an owner): it is removed, so the daemon makes its own. A folder there is refused.
fn untrusted_files_removed(os: &dyn StateDirOs, dir: &Path) -> Result<(), String> {
    let entries = os
        .entries(dir)
        .map_err(|e| format!("cannot list {:?}: {e}", dir.display()))?;
    for entry in entries {
        if entry.file_name() == Some(std::ffi::OsStr::new(FORMAT_DIR)) {
            continue;
        }
        let facts = match os.facts(&entry) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            // Not even its owner can be read (a DACL that keeps Administrators out): not the
            // daemon's file. The folder's own DACL still lets it be deleted.
            Err(e) => {
                os.remove_file(&entry).map_err(|r| {
                    format!(
                        "cannot read the owner of {:?} ({e}) nor remove it ({r}); remove it as \
                         Administrator and start csi-proxy again",
                        entry.display()
                    )
                })?;
                continue;
            }
        };
        if facts.directory && !facts.reparse_point {
            return Err(format!(
                "{:?} is a folder the daemon never makes; remove it as Administrator and start \
                 csi-proxy again",
                entry.display()
            ));
        }
        if facts.owner == Owner::Trusted && !facts.reparse_point {
            continue;
        }
        os.remove_file(&entry).map_err(|e| {
            format!(
                "{:?} is owned by another user or is a link, and cannot be removed ({e}); \
                 remove it as Administrator and start csi-proxy again",
                entry.display()
            )
        })?;
    }
    Ok(())
}

fn private_folder(os: &dyn StateDirOs, folder: &Path) -> Result<(), String> {
    match os.create_private_dir(folder) {
        Ok(()) => return Ok(()),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(format!("cannot create {:?}: {e}", folder.display())),
    }
    let facts = os
        .facts(folder)
        .map_err(|e| format!("cannot read the owner of {:?}: {e}", folder.display()))?;
    let refuse = |what: String| {
        Err(format!(
            "{:?} {what}; a folder another user could make or redirect could hold format \
             records nobody here wrote. Remove it as Administrator and start csi-proxy again, \
             which creates it for SYSTEM and Administrators only",
            folder.display()
        ))
    };
    if facts.reparse_point {
        return refuse("is a reparse point (a junction or a link)".into());
    }
    if !facts.directory {
        return refuse("is not a folder".into());
    }
    if let Owner::Other(sid) = facts.owner {
        return refuse(format!(
            "is owned by {sid}, not by SYSTEM, Administrators or the daemon's user"
        ));
    }
    os.make_private(folder).map_err(|e| {
        format!(
            "cannot restrict {:?} to SYSTEM and Administrators: {e}",
            folder.display()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use std::path::PathBuf;
    use std::sync::Mutex;

    /// Folders by path: their facts and whether their DACL is the private one.
    #[derive(Default)]
    struct Fake(Mutex<BTreeMap<PathBuf, (Facts, bool)>>);

    impl Fake {
        fn plant(&self, path: &Path, facts: Facts) {
            self.0.lock().unwrap().insert(path.into(), (facts, false));
        }
        fn private(&self, path: &Path) -> Option<bool> {
            self.0.lock().unwrap().get(path).map(|f| f.1)
        }
    }

    fn folder(owner: Owner) -> Facts {
        Facts {
            owner,
            directory: true,
            reparse_point: false,
        }
    }

    impl StateDirOs for Fake {
        fn create_private_dir(&self, path: &Path) -> io::Result<()> {
            let mut all = self.0.lock().unwrap();
            if all.contains_key(path) {
                return Err(io::ErrorKind::AlreadyExists.into());
            }
            all.insert(path.into(), (folder(Owner::Trusted), true));
            Ok(())
        }
        fn facts(&self, path: &Path) -> io::Result<Facts> {
            let all = self.0.lock().unwrap();
            match all.get(path) {
                // A DACL that does not let the daemon read the owner.
                Some((f, _)) if f.owner == Owner::Other("unreadable".into()) => {
                    Err(io::ErrorKind::PermissionDenied.into())
                }
                Some((f, _)) => Ok(f.clone()),
                None => Err(io::ErrorKind::NotFound.into()),
            }
        }
        fn make_private(&self, path: &Path) -> io::Result<()> {
            let mut all = self.0.lock().unwrap();
            // The DACL is set on the folder and inherited by what is inside; owners stay.
            let inside: Vec<PathBuf> = all
                .keys()
                .filter(|p| p.starts_with(path))
                .cloned()
                .collect();
            for p in inside {
                all.get_mut(&p).unwrap().1 = true;
            }
            Ok(())
        }
        fn entries(&self, dir: &Path) -> io::Result<Vec<PathBuf>> {
            let all = self.0.lock().unwrap();
            Ok(all
                .keys()
                .filter(|p| p.parent() == Some(dir))
                .cloned()
                .collect())
        }
        fn remove_file(&self, path: &Path) -> io::Result<()> {
            let mut all = self.0.lock().unwrap();
            all.remove(path)
                .map(|_| ())
                .ok_or(io::ErrorKind::NotFound.into())
        }
    }

    fn file(owner: Owner) -> Facts {
        Facts {
            owner,
            directory: false,
            reparse_point: false,
        }
    }

    /// A lock or record file a user planted in the state directory before it was made private
    /// keeps its owner through the new DACL: it is removed (the daemon makes its own), while
    /// the daemon's own files stay. Before, only format records had their owner checked, and a
    /// user-owned `serving.lock` stayed the user's.
    #[test]
    fn files_a_user_planted_in_the_state_directory_are_removed() {
        let (_p, dir) = state();
        let os = Fake::default();
        let user = Owner::Other("S-1-5-21-1-2-3-1001".into());
        os.plant(&dir, folder(Owner::Trusted));
        os.plant(&dir.join("serving.lock"), file(user.clone()));
        os.plant(&dir.join("take-over.lock"), file(user));
        os.plant(
            &dir.join("serving.pid"),
            Facts {
                reparse_point: true,
                ..file(Owner::Trusted)
            },
        );
        os.plant(&dir.join("serving.listen"), file(Owner::Trusted));
        os.plant(
            &dir.join("request"),
            file(Owner::Other("unreadable".into())),
        );
        prepare(&os, &dir).unwrap();
        for gone in ["serving.lock", "take-over.lock", "serving.pid", "request"] {
            assert_eq!(os.private(&dir.join(gone)), None, "{gone} was kept");
        }
        assert_eq!(os.private(&dir.join("serving.listen")), Some(true));
        // A folder the daemon never makes is refused, with what to do.
        os.plant(&dir.join("extra"), folder(Owner::Trusted));
        let err = prepare(&os, &dir).unwrap_err();
        assert!(
            err.contains("extra") && err.contains("remove it as Administrator"),
            "{err}"
        );
    }

    fn state() -> (tempfile::TempDir, PathBuf) {
        let parent = tempfile::tempdir().unwrap();
        let dir = parent.path().join("csi-proxy");
        (parent, dir)
    }

    #[test]
    fn a_new_state_directory_and_its_format_folder_are_private() {
        let (_p, dir) = state();
        let os = Fake::default();
        prepare(&os, &dir).unwrap();
        assert_eq!(os.private(&dir), Some(true));
        assert_eq!(os.private(&dir.join(FORMAT_DIR)), Some(true));
    }

    #[test]
    fn an_existing_administrators_folder_is_kept_and_made_private() {
        // As an earlier release left it: ProgramData's inherited ACL.
        let (_p, dir) = state();
        let os = Fake::default();
        os.plant(&dir, folder(Owner::Trusted));
        os.plant(&dir.join(FORMAT_DIR), folder(Owner::Trusted));
        prepare(&os, &dir).unwrap();
        assert_eq!(os.private(&dir), Some(true));
        assert_eq!(os.private(&dir.join(FORMAT_DIR)), Some(true));
    }

    #[test]
    fn a_folder_a_user_made_or_redirected_is_refused_and_left_alone() {
        let user = Owner::Other("S-1-5-21-1-2-3-1001".into());
        let cases = [
            (
                PathBuf::new(),
                folder(user.clone()),
                "is owned by S-1-5-21-1-2-3-1001",
            ),
            (
                PathBuf::from(FORMAT_DIR),
                folder(user),
                "is owned by S-1-5-21-1-2-3-1001",
            ),
            (
                PathBuf::new(),
                Facts {
                    reparse_point: true,
                    ..folder(Owner::Trusted)
                },
                "is a reparse point",
            ),
            (
                PathBuf::from(FORMAT_DIR),
                Facts {
                    directory: false,
                    ..folder(Owner::Trusted)
                },
                "is not a folder",
            ),
        ];
        for (at, facts, why) in cases {
            let (_p, dir) = state();
            let os = Fake::default();
            let planted = if at.as_os_str().is_empty() {
                dir.clone()
            } else {
                dir.join(&at)
            };
            os.plant(&planted, facts);
            let err = prepare(&os, &dir).unwrap_err();
            assert!(
                err.contains(why) && err.contains("Remove it as Administrator"),
                "{err}"
            );
            assert_eq!(
                os.private(&planted),
                Some(false),
                "its DACL was changed: {err}"
            );
        }
    }

    #[test]
    fn a_relative_state_directory_is_refused() {
        let err = prepare(&Fake::default(), Path::new("state")).unwrap_err();
        assert!(err.contains("must be an absolute path"), "{err}");
    }
}
