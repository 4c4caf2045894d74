//! A client racing the path, in the simulated Windows: links in the middle of a path are followed
//! as Windows follows them, and a test can have two entries exchanged (renamed into each other's
//! place) before every seam call, as a node plugin that owns a directory below the kubelet path
//! can do at any instant.
//!
//! What it models, as Microsoft documents it:
//! - A symbolic link or junction in the middle of a path is followed ("Symbolic links can either
//!   be absolute or relative links ... the path is parsed from the symbolic link", *Symbolic
//!   Links*; the I/O manager reparses at each reparse point), at most 63 times
//!   (ERROR_CANT_RESOLVE_FILENAME, "The name of the file cannot be resolved by the system").
//! - Renaming an entry needs delete access to it, and a handle open on it without
//!   `FILE_SHARE_DELETE` denies that (CreateFileW, dwShareMode: FILE_SHARE_DELETE "Enables
//!   subsequent open operations on a file or device to request delete access. Otherwise, other
//!   processes cannot open the file or device if they request delete access";
//!   ERROR_SHARING_VIOLATION). That a rename opens its source for delete access is **inferred**
//!   (MoveFileEx does not say; the rename information class of NtSetInformationFile is set on
//!   such a handle). Handles open below a renamed directory stay open on the same entries, under
//!   their new path: NTFS lets a directory be renamed while something below it is open, so the
//!   filesystem host keeps every directory above what it acts on open itself.
//!
use super::{SimWindows, State, key};
use crate::windows::os::{OsError, Win32Result, code};

/// ERROR_CANT_RESOLVE_FILENAME: too many reparse points on the way.
const ERROR_CANT_RESOLVE_FILENAME: u32 = 1921;

/// How many reparse points one path may pass through.
const MAX_REPARSE_HOPS: usize = 63;

impl State {
    /// `path` with every link before its final component followed (the final one is the
    /// caller's to follow or not).
    pub(super) fn through_links(&self, path: &str) -> Win32Result<String> {
        if self.links.is_empty() {
            return Ok(path.to_string());
        }
        let mut cur = path.to_string();
        for _ in 0..=MAX_REPARSE_HOPS {
            let comps: Vec<&str> = cur.split('\\').collect();
            let hit = (1..comps.len().saturating_sub(1)).find_map(|i| {
                let prefix = comps[..=i].join("\\");
                self.links.get(&key(&prefix)).map(|l| (i, prefix, l))
            });
            let Some((i, prefix, link)) = hit else {
                return Ok(cur);
            };
            let rest = comps[i + 1..].join("\\");
            let target = link.target.trim_end_matches('\\');
            let base = if target.starts_with(r"\\") || target.get(1..2) == Some(":") {
                target.to_string()
            } else {
                // Relative to the link's directory.
                let dir = prefix.rsplit_once('\\').map_or("", |(d, _)| d);
                format!("{dir}\\{target}")
            };
            cur = format!("{base}\\{rest}");
        }
        Err(OsError::new(ERROR_CANT_RESOLVE_FILENAME))
    }

    /// Renames the entries at `a` and `b` into each other's place, with everything below them.
    fn exchange(&mut self, a: &str, b: &str) -> Win32Result<()> {
        let (ka, kb) = (key(a), key(b));
        if self.pinned(&ka) || self.pinned(&kb) {
            return Err(OsError::new(code::SHARING_VIOLATION));
        }
        const SWAP: &str = "\u{1}swap";
        self.rekey(&ka, SWAP);
        self.rekey(&kb, &ka);
        self.rekey(SWAP, &kb);
        Ok(())
    }

    /// `MoveFileExW(from, to, 0)` (ledger rows 37 and 86): renames the entry at `from` to `to`
    /// with everything below it, handles open below it staying open on the same entries
    /// (the worst reading: NTFS lets the directory move while something below it is open).
    /// Fails with ERROR_SHARING_VIOLATION while a handle holds it without FILE_SHARE_DELETE
    /// (the rename's own open asks DELETE, inferred) and ERROR_ALREADY_EXISTS when something is
    /// at `to`.
    pub(super) fn rename_checked(&mut self, from: &str, to: &str) -> Win32Result<()> {
        let (from, to) = (self.through_links(from)?, self.through_links(to)?);
        self.not_pending(&from)?;
        if self.entry(&from).is_none() {
            return Err(self.missing(&from));
        }
        if self.entry(&to).is_some() {
            return Err(OsError::new(code::ALREADY_EXISTS));
        }
        self.parent_is_directory(&to)?;
        if self.pinned(&key(&from)) {
            return Err(OsError::new(code::SHARING_VIOLATION));
        }
        self.rename_entry(&from, &to);
        Ok(())
    }

    /// Renames the entry at `from` to `to`, with everything below it (the caller checked it
    /// may).
    pub(super) fn rename_entry(&mut self, from: &str, to: &str) {
        let (kf, kt) = (key(from), key(to));
        self.rekey(&kf, &kt);
        if let Some(text) = self.dirs.get_mut(&kt) {
            *text = to.to_string();
        }
    }

    /// Moves every entry at or below the key `from` to `to`.
    fn rekey(&mut self, from: &str, to: &str) {
        let moved = |k: &str| -> Option<String> {
            if k == from {
                Some(to.to_string())
            } else {
                k.strip_prefix(from)
                    .filter(|rest| rest.starts_with('\\'))
                    .map(|rest| format!("{to}{rest}"))
            }
        };
        fn remap<V>(
            map: &mut std::collections::BTreeMap<String, V>,
            moved: &dyn Fn(&str) -> Option<String>,
        ) {
            let keys: Vec<String> = map.keys().filter(|k| moved(k).is_some()).cloned().collect();
            for k in keys {
                if let (Some(v), Some(n)) = (map.remove(&k), moved(&k)) {
                    map.insert(n, v);
                }
            }
        }
        remap(&mut self.dirs, &moved);
        remap(&mut self.links, &moved);
        remap(&mut self.ids, &moved);
        remap(&mut self.files, &moved);
        let set = &mut self.readonly;
        let keys: Vec<String> = set.iter().filter(|k| moved(k).is_some()).cloned().collect();
        for k in keys {
            set.remove(&k);
            if let Some(n) = moved(&k) {
                set.insert(n);
            }
        }
        // Directory texts and link texts follow their keys (the sim shows texts in listings).
        for (k, text) in self.dirs.iter_mut() {
            if text.to_ascii_lowercase().replace('/', "\\") != *k {
                *text = k.clone();
            }
        }
        for (k, l) in self.links.iter_mut() {
            if key(&l.text) != *k {
                l.text = k.clone();
            }
        }
        for open in self.entries.values_mut() {
            if let Some(n) = moved(&open.key) {
                open.key = n;
            }
        }
    }

    /// The swap a test asked for, made before a seam call (see [`SimWindows::swap_before_calls`]).
    pub(super) fn race(&mut self) {
        let Some((a, b)) = self.swapping.clone() else {
            return;
        };
        // Even odds per call, from a fixed seed: an exchange before *every* call would keep
        // the state's parity in lockstep with the host's call sequence, so an RPC whose calls
        // happen to come in an even number would never see the swapped state at its act.
        let mut x = self.race_draw;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.race_draw = x;
        if x & 1 == 1 && self.exchange(&a, &b).is_ok() {
            self.swaps += 1;
        }
    }
}

impl SimWindows {
    /// Before seam calls from now on (each with even odds, drawn from a fixed seed so a run
    /// repeats exactly), exchanges the entries at `a` and `b` (as a client renaming them into
    /// each other's place would), unless one of them is held open without `FILE_SHARE_DELETE`. [`SimWindows::stop_swapping`] ends it.
    pub fn swap_before_calls(&self, a: &str, b: &str) {
        let mut s = self.lock();
        s.swapping = Some((a.to_string(), b.to_string()));
        s.race_draw = 0x9e37_79b9_7f4a_7c15;
    }

    /// Ends [`SimWindows::swap_before_calls`]; returns how many exchanges were made.
    pub fn stop_swapping(&self) -> u64 {
        let mut s = self.lock();
        s.swapping = None;
        s.swaps
    }

    /// Exchanges the entries at `a` and `b` once (as renaming them into each other's place
    /// would); ERROR_SHARING_VIOLATION while one is held open without `FILE_SHARE_DELETE`.
    pub fn exchange_entries(&self, a: &str, b: &str) -> Win32Result<()> {
        self.lock().exchange(a, b)
    }

    /// Adds a directory symbolic link at `link` to `target` (a client's own link).
    pub fn add_dir_link(&self, link: &str, target: &str) {
        self.lock()
            .add_link(link, target, true)
            .expect("the link's directory exists and the link does not");
    }
}
