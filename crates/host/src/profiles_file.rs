//! The `--profiles` file (TOML) and the owners book's place in the state directory: read by the
//! daemon at start-up and by `csi-proxy-ctl profiles`.
//!
//! ```toml
//! [[profile]]
//! driver = "ebs.csi.aws.com"
//! socket_dir = "/run/csi-proxy/ebs"   # Linux: its sockets
//! pipe_prefix = "csi-proxy-ebs"       # Windows: \\.\pipe\csi-proxy-ebs-<group>-<version>
//! groups = ["disk", "volume", "filesystem"]
//! paths = []                          # optional extra directories
//! ```

use csi_proxy_core::profiles::owners::OwnersStore;
use csi_proxy_core::profiles::{Group, Profile};
use serde::Deserialize;
use std::io;
use std::path::{Path, PathBuf};

/// One `[[profile]]` as written.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ProfileEntry {
    /// The driver's CSI name.
    pub driver: String,
    /// Linux: the directory of its sockets.
    pub socket_dir: Option<String>,
    /// Windows: the prefix of its pipes.
    pub pipe_prefix: Option<String>,
    /// The API groups it may call.
    pub groups: Vec<String>,
    /// Extra directories it may use.
    #[serde(default)]
    pub paths: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileShape {
    profile: Vec<ProfileEntry>,
}

/// A profile and where its endpoints are named.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProfileSpec {
    /// What it may touch.
    pub profile: Profile,
    /// Its socket directory (Linux) or pipe prefix (Windows), as written.
    pub place: String,
}

/// The most bytes of a profiles file read: far above any node's list of drivers.
const MAX_FILE: u64 = 1024 * 1024;

/// Which endpoint field this platform uses.
const PLACE_FIELD: &str = if cfg!(windows) {
    "pipe_prefix"
} else {
    "socket_dir"
};

/// Reads and checks the profiles file at `path` (the checks that need the kubelet path are
/// [`csi_proxy_core::profiles::Profiles::new`]'s). Errors name the file, the profile and the
/// field.
pub fn read(path: &Path) -> Result<Vec<ProfileSpec>, String> {
    let shown = path.display();
    let file = std::fs::File::open(path).map_err(|e| format!("--profiles {shown}: {e}"))?;
    let mut text = String::new();
    io::Read::read_to_string(&mut io::Read::take(file, MAX_FILE + 1), &mut text)
        .map_err(|e| format!("--profiles {shown}: {e}"))?;
    if text.len() as u64 > MAX_FILE {
        return Err(format!("--profiles {shown}: larger than {MAX_FILE} bytes"));
    }
    parse(&text).map_err(|e| format!("--profiles {shown}: {e}"))
}

/// Parses and checks a profiles file's text.
pub fn parse(text: &str) -> Result<Vec<ProfileSpec>, String> {
    let shape: FileShape = toml::from_str(text).map_err(|e| e.to_string())?;
    if shape.profile.is_empty() {
        return Err("lists no [[profile]]".into());
    }
    let mut out: Vec<ProfileSpec> = Vec::with_capacity(shape.profile.len());
    for entry in shape.profile {
        let what = format!("profile {:?}", entry.driver);
        let mut groups = Vec::with_capacity(entry.groups.len());
        for g in &entry.groups {
            let group = Group::parse(g).ok_or_else(|| {
                format!(
                    "{what}: groups: unknown group {g:?} (one of {})",
                    Group::ALL.map(|g| g.as_str()).join(", ")
                )
            })?;
            if !groups.contains(&group) {
                groups.push(group);
            }
        }
        let place = if cfg!(windows) {
            entry.pipe_prefix.clone()
        } else {
            entry.socket_dir.clone()
        };
        let place = place
            .filter(|p| !p.is_empty())
            .ok_or_else(|| format!("{what}: {PLACE_FIELD} is required on this platform"))?;
        check_place(&place).map_err(|why| format!("{what}: {PLACE_FIELD} {place:?}: {why}"))?;
        if let Some(other) = out.iter().find(|o| same_place(&o.place, &place)) {
            return Err(format!(
                "{what}: {PLACE_FIELD} {place:?} is profile {:?}'s too: each profile has its own \
                 endpoints",
                other.profile.driver
            ));
        }
        out.push(ProfileSpec {
            profile: Profile {
                driver: entry.driver,
                groups,
                paths: entry.paths,
            },
            place,
        });
    }
    Ok(out)
}

/// Windows pipe names compare without case; socket directories as written.
fn same_place(a: &str, b: &str) -> bool {
    if cfg!(windows) {
        a.eq_ignore_ascii_case(b)
    } else {
        Path::new(a) == Path::new(b)
    }
}

/// A socket directory is absolute; a pipe prefix is one name of letters, digits, `-`, `_`, `.`.
fn check_place(place: &str) -> Result<(), &'static str> {
    if cfg!(windows) {
        let ok = place.len() <= 200
            && place
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
        ok.then_some(())
            .ok_or("a pipe prefix is at most 200 letters, digits, '-', '_' or '.'")
    } else {
        Path::new(place)
            .is_absolute()
            .then_some(())
            .ok_or("must be an absolute directory")
    }
}

/// The owners book's file in the state directory.
pub struct StateDirBook {
    dir: PathBuf,
}

impl StateDirBook {
    /// The book kept in the state directory `dir`.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        StateDirBook { dir: dir.into() }
    }
}

impl OwnersStore for StateDirBook {
    fn load(&self) -> io::Result<Option<Vec<u8>>> {
        crate::format_record::read_state_file(
            &self.dir,
            csi_proxy_core::profiles::owners::FILE_NAME,
        )
    }

    fn save(&self, bytes: &[u8]) -> io::Result<()> {
        crate::format_record::write_state_file(
            &self.dir,
            csi_proxy_core::profiles::owners::FILE_NAME,
            bytes,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The profiles file docs/install.md shows operators is one this daemon accepts, on the
    /// platform the test runs on.
    #[test]
    fn the_documented_profiles_file_parses() {
        let doc = include_str!("../../../docs/install.md");
        let block = doc
            .split("```toml\n")
            .nth(1)
            .and_then(|rest| rest.split("```").next())
            .expect("docs/install.md shows a profiles file");
        let specs = parse(block).unwrap();
        let drivers: Vec<&str> = specs.iter().map(|s| s.profile.driver.as_str()).collect();
        assert!(
            drivers.contains(&"ebs.csi.aws.com") && drivers.len() >= 6,
            "{drivers:?}"
        );
    }

    #[test]
    fn a_file_reads_into_profiles_and_mistakes_are_named() {
        let field = PLACE_FIELD;
        let good = format!(
            "[[profile]]\ndriver = \"a.csi\"\n{field} = \"{}\"\ngroups = [\"disk\", \"volume\"]\n",
            if cfg!(windows) {
                "csi-proxy-a"
            } else {
                "/run/a"
            }
        );
        let specs = parse(&good).unwrap();
        assert_eq!(specs[0].profile.groups, vec![Group::Disk, Group::Volume]);
        assert!(parse("").unwrap_err().contains("profile"));
        let bad_group = good.replace("\"volume\"", "\"volumes\"");
        assert!(
            parse(&bad_group)
                .unwrap_err()
                .contains("unknown group \"volumes\"")
        );
        let unknown = format!("{good}colour = 1\n");
        assert!(parse(&unknown).unwrap_err().contains("colour"));
        let twice = format!("{good}{}", good.replace("a.csi", "b.csi"));
        assert!(
            parse(&twice)
                .unwrap_err()
                .contains("profile \"a.csi\"'s too")
        );
        let missing = good.replace(field, "elsewhere");
        assert!(parse(&missing).is_err());
    }
}
