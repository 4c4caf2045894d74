//! Who holds which node-wide object: the book profiles are judged by, kept durably in the state
//! directory so it survives restarts and hand-offs (the next daemon reads the same file).
//!
//! The file is text, one holder per line: `<kind> <profile> <key>`, the key percent-escaped
//! (`%`, space, tab, CR and LF), so any path or remote name round-trips. It is rewritten whole
//! (atomically, by the store) after every change; a line that cannot be read is skipped with a
//! warning, never guessed at.

use crate::error::{Error, Kind, Result};
use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Mutex, MutexGuard};

/// A node-wide object a profile can hold.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Object {
    /// A per-volume directory kubelet made (its key: the directory, case-folded on Windows).
    Dir(String),
    /// An SMB global mapping (its share root, lower-cased `\\server\share`).
    SmbMapping(String),
    /// An iSCSI target portal (`address:port`).
    Portal(String),
    /// An iSCSI session (`address:port iqn`, the IQN lower-cased).
    Session(String),
    /// A disk's storage, by its strongest identifier ([`crate::disk::StorageId::key`]).
    Storage(String),
}

impl Object {
    fn kind(&self) -> &'static str {
        match self {
            Object::Dir(_) => "dir",
            Object::SmbMapping(_) => "smb",
            Object::Portal(_) => "portal",
            Object::Session(_) => "session",
            Object::Storage(_) => "storage",
        }
    }

    fn key(&self) -> &str {
        match self {
            Object::Dir(k)
            | Object::SmbMapping(k)
            | Object::Portal(k)
            | Object::Session(k)
            | Object::Storage(k) => k,
        }
    }

    fn from_parts(kind: &str, key: String) -> Option<Object> {
        Some(match kind {
            "dir" => Object::Dir(key),
            "smb" => Object::SmbMapping(key),
            "portal" => Object::Portal(key),
            "session" => Object::Session(key),
            "storage" => Object::Storage(key),
            _ => return None,
        })
    }
}

impl fmt::Display for Object {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Object::Dir(k) => write!(f, "directory {k:?}"),
            Object::SmbMapping(k) => write!(f, "mapping {k:?}"),
            Object::Portal(k) => write!(f, "portal {k}"),
            Object::Session(k) => write!(f, "session {k}"),
            Object::Storage(k) => write!(f, "storage {k}"),
        }
    }
}

/// Where the book is kept between runs.
pub trait OwnersStore: Send + Sync {
    /// The stored book, `None` when there is none yet.
    fn load(&self) -> std::io::Result<Option<Vec<u8>>>;
    /// Replaces the stored book atomically and durably.
    fn save(&self, bytes: &[u8]) -> std::io::Result<()>;
}

/// The book: every held object and its holders, in the order they took it.
pub struct Owners {
    book: Mutex<BTreeMap<Object, Vec<String>>>,
    store: Option<Box<dyn OwnersStore>>,
}

/// The name of the book's file in the state directory.
pub const FILE_NAME: &str = "profile-owners";

/// The most holder lines a stored book is read to (a bound on what a damaged file can make the
/// daemon hold); far above what a node's volumes, mappings and sessions need.
const MAX_LINES: usize = 200_000;

impl Owners {
    /// A book kept only in memory (tests, and the daemon without a state directory).
    pub fn in_memory() -> Self {
        Owners {
            book: Mutex::new(BTreeMap::new()),
            store: None,
        }
    }

    /// The book `store` holds (empty when it holds none).
    pub fn load(store: Box<dyn OwnersStore>) -> Result<Self> {
        let book = read_store(store.as_ref())?;
        Ok(Owners {
            book: Mutex::new(book),
            store: Some(store),
        })
    }

    fn book(&self) -> MutexGuard<'_, BTreeMap<Object, Vec<String>>> {
        self.book.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The holders of `object`, first taker first.
    pub fn holders(&self, object: &Object) -> Vec<String> {
        self.book().get(object).cloned().unwrap_or_default()
    }

    /// Everything held, by holder: what `csi-proxy-ctl profiles` shows.
    pub fn by_holder(&self) -> BTreeMap<String, Vec<Object>> {
        let mut out: BTreeMap<String, Vec<Object>> = BTreeMap::new();
        for (object, holders) in self.book().iter() {
            for h in holders {
                out.entry(h.clone()).or_default().push(object.clone());
            }
        }
        out
    }

    /// Makes `profile` the holder of `object` unless someone holds it: `Ok(None)` when it is
    /// now `profile`'s (or was), `Ok(Some(owner))` when another holds it.
    pub fn claim(&self, object: &Object, profile: &str) -> Result<Option<String>> {
        let mut book = self.book();
        if let Some(first) = book.get(object).and_then(|h| h.first()) {
            return Ok((first != profile).then(|| first.clone()));
        }
        book.insert(object.clone(), vec![profile.to_string()]);
        self.persist(&book)?;
        Ok(None)
    }

    /// Adds `profile` to `object`'s holders.
    pub fn add(&self, object: &Object, profile: &str) -> Result<()> {
        let mut book = self.book();
        let holders = book.entry(object.clone()).or_default();
        if holders.iter().any(|h| h == profile) {
            return Ok(());
        }
        holders.push(profile.to_string());
        self.persist(&book)
    }

    /// Removes `profile` from `object`'s holders.
    pub fn remove(&self, object: &Object, profile: &str) -> Result<()> {
        let mut book = self.book();
        let Some(holders) = book.get_mut(object) else {
            return Ok(());
        };
        holders.retain(|h| h != profile);
        if holders.is_empty() {
            book.remove(object);
        }
        self.persist(&book)
    }

    /// Adds what the store holds now to the book (after a hand-off: the daemon this one took
    /// over from went on claiming and holding until it exited, after this one had read the
    /// book). Holders the store lists come first; the book's own follow.
    pub fn merge_stored(&self) -> Result<()> {
        let Some(store) = &self.store else {
            return Ok(());
        };
        let stored = read_store(store.as_ref())?;
        let mut book = self.book();
        for (object, holders) in stored {
            let mine = book.remove(&object).unwrap_or_default();
            let mut merged = holders;
            for h in mine {
                if !merged.contains(&h) {
                    merged.push(h);
                }
            }
            book.insert(object, merged);
        }
        self.persist(&book)
    }

    /// Keeps only the objects `keep` accepts, and says how many went: at start-up, the claims
    /// of per-volume directories kubelet has removed since (a pod gone, a volume unstaged).
    pub fn retain(&self, keep: impl Fn(&Object) -> bool) -> Result<usize> {
        let mut book = self.book();
        let before = book.len();
        book.retain(|object, _| keep(object));
        let gone = before - book.len();
        if gone > 0 {
            self.persist(&book)?;
        }
        Ok(gone)
    }

    /// Writes the book (under its lock, so writes happen in the order of the changes).
    fn persist(&self, book: &BTreeMap<Object, Vec<String>>) -> Result<()> {
        let Some(store) = &self.store else {
            return Ok(());
        };
        store.save(&render(book)).map_err(|e| {
            Error::new(
                Kind::Unavailable,
                "profiles",
                "the owners book",
                format!("cannot be written to the state directory: {e}"),
            )
        })
    }
}

/// The book `store` holds now (empty when it holds none).
fn read_store(store: &dyn OwnersStore) -> Result<BTreeMap<Object, Vec<String>>> {
    let bytes = store.load().map_err(|e| {
        Error::io(
            "profiles",
            "reading the owners book from the state directory",
            &e,
        )
    })?;
    Ok(bytes.map(|b| parse(&b)).unwrap_or_default())
}

/// The book as its file holds it.
pub fn render(book: &BTreeMap<Object, Vec<String>>) -> Vec<u8> {
    let mut out = String::from("# csi-proxy profile owners: <kind> <profile> <key>\n");
    for (object, holders) in book {
        for h in holders {
            out.push_str(&format!(
                "{} {} {}\n",
                object.kind(),
                escape(h),
                escape(object.key())
            ));
        }
    }
    out.into_bytes()
}

/// Reads a stored book; lines that cannot be read are skipped (and logged).
pub fn parse(bytes: &[u8]) -> BTreeMap<Object, Vec<String>> {
    let mut book: BTreeMap<Object, Vec<String>> = BTreeMap::new();
    let text = String::from_utf8_lossy(bytes);
    let lines = text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.is_empty() && !l.starts_with('#'));
    for (n, line) in lines.take(MAX_LINES) {
        let mut parts = line.splitn(3, ' ');
        let read = (|| {
            let kind = parts.next()?;
            let holder = unescape(parts.next()?)?;
            let key = unescape(parts.next()?)?;
            if holder.is_empty() || key.is_empty() {
                return None;
            }
            Some((Object::from_parts(kind, key)?, holder))
        })();
        match read {
            Some((object, holder)) => {
                let holders = book.entry(object).or_default();
                if !holders.contains(&holder) {
                    holders.push(holder);
                }
            }
            None => tracing::warn!(
                line = n + 1,
                "owners book: a line that cannot be read is skipped"
            ),
        }
    }
    book
}

fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '%' | ' ' | '\t' | '\r' | '\n' => out.push_str(&format!("%{:02X}", c as u32)),
            c => out.push(c),
        }
    }
    out
}

fn unescape(s: &str) -> Option<String> {
    let mut out = Vec::with_capacity(s.len());
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = s.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// A book test double whose store is a shared buffer: what one daemon saved, the next loads.
#[cfg(any(test, feature = "testing"))]
#[derive(Clone, Default)]
pub struct MemoryStore(pub std::sync::Arc<Mutex<Option<Vec<u8>>>>);

#[cfg(any(test, feature = "testing"))]
impl OwnersStore for MemoryStore {
    fn load(&self) -> std::io::Result<Option<Vec<u8>>> {
        Ok(self.0.lock().unwrap().clone())
    }
    fn save(&self, bytes: &[u8]) -> std::io::Result<()> {
        *self.0.lock().unwrap() = Some(bytes.to_vec());
        Ok(())
    }
}
