//! Snapshots of the host state the tests must leave unchanged.

use std::collections::BTreeMap;
use std::path::Path;

/// What the tests must leave unchanged on the host: the kubelet tree and the global mount,
/// partition and loop-device tables.
#[derive(Debug, PartialEq, Eq)]
pub struct HostSnapshot {
    pub tree: BTreeMap<String, String>,
    pub mountinfo: Vec<String>,
    pub partitions: String,
    pub loops: BTreeMap<String, String>,
}

impl HostSnapshot {
    /// The state now, with the tree below `root`.
    pub fn take(root: &Path) -> HostSnapshot {
        let mut tree = BTreeMap::new();
        walk(root, root, &mut tree);
        // Mount IDs and the order of unrelated lines are stable; compare whole lines.
        let mut mountinfo: Vec<String> = std::fs::read_to_string("/proc/self/mountinfo")
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect();
        mountinfo.sort();
        let partitions = std::fs::read_to_string("/proc/partitions").unwrap_or_default();
        let mut loops = BTreeMap::new();
        if let Ok(rd) = std::fs::read_dir("/sys/block") {
            for e in rd.flatten() {
                let name = e.file_name().to_string_lossy().to_string();
                if let Ok(b) = std::fs::read_to_string(e.path().join("loop/backing_file")) {
                    loops.insert(name, b.trim().to_string());
                }
            }
        }
        HostSnapshot {
            tree,
            mountinfo,
            partitions,
            loops,
        }
    }

    /// Panics with the differences if `after` is not the same host state.
    pub fn assert_same(&self, after: &HostSnapshot, what: &str) {
        if self == after {
            return;
        }
        let mut diff = String::new();
        for (k, v) in &self.tree {
            if after.tree.get(k) != Some(v) {
                diff += &format!("  tree {k}: {v} -> {:?}\n", after.tree.get(k));
            }
        }
        for k in after.tree.keys().filter(|k| !self.tree.contains_key(*k)) {
            diff += &format!("  tree {k}: new\n");
        }
        for l in after
            .mountinfo
            .iter()
            .filter(|l| !self.mountinfo.contains(l))
        {
            diff += &format!("  mount added: {l}\n");
        }
        for l in self
            .mountinfo
            .iter()
            .filter(|l| !after.mountinfo.contains(l))
        {
            diff += &format!("  mount removed: {l}\n");
        }
        if self.partitions != after.partitions {
            diff += &format!(
                "  /proc/partitions:\n{}\n  ->\n{}\n",
                self.partitions, after.partitions
            );
        }
        if self.loops != after.loops {
            diff += &format!("  loops: {:?} -> {:?}\n", self.loops, after.loops);
        }
        panic!("{what} changed the host:\n{diff}");
    }
}

fn walk(root: &Path, p: &Path, out: &mut BTreeMap<String, String>) {
    use std::os::unix::fs::MetadataExt;
    let Ok(m) = std::fs::symlink_metadata(p) else {
        return;
    };
    let rel = p.strip_prefix(root).unwrap_or(p).display().to_string();
    let link = std::fs::read_link(p).ok();
    out.insert(
        rel,
        format!(
            "mode={:o} size={} mtime={}.{} ino={} link={link:?}",
            m.mode(),
            if m.is_dir() { 0 } else { m.size() },
            m.mtime(),
            m.mtime_nsec(),
            m.ino()
        ),
    );
    if m.is_dir()
        && let Ok(rd) = std::fs::read_dir(p)
    {
        for e in rd.flatten() {
            walk(root, &e.path(), out);
        }
    }
}
