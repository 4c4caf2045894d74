//! Limits on the lists the daemon keeps for clients (the node's iSCSI target portals, kept by the
//! host across restarts), checked and taken in one step.
//!
//! A limit checked against a listing and then acted on by a host call that may take long (on
//! Windows, registering a portal discovers its targets over the network) lets every call that
//! checked before the others' adds landed pass: 300 concurrent adds registered 127 portals
//! against a limit of 64. Here each call that passes takes a place before its host call and
//! keeps it until the call has ended, so the places taken and the entries listed together never
//! exceed the limit; no lock is held across the host's listing or its add, so a host that hangs
//! holds up only the calls it hangs.
//!
//! Exact while the host's listing shows every add that ended before the listing began: a place
//! whose call ended while a listing was under way still counts for that listing.

use crate::{Error, Kind, Result};
use std::collections::HashSet;
use std::hash::Hash;
use std::sync::{Mutex, MutexGuard};

/// The limit on one kept list, and the places calls have taken in it.
pub struct Quota<K> {
    limit: usize,
    /// What the list holds, plural, for messages ("target portals").
    what: &'static str,
    state: Mutex<State<K>>,
}

struct State<K> {
    /// Counts events (a listing begun, a call ended), to order them.
    clock: u64,
    /// Places taken: the entry, and when its call ended (`None` while it runs).
    places: Vec<Place<K>>,
    /// When each listing under way began.
    listings: Vec<u64>,
}

struct Place<K> {
    id: u64,
    key: K,
    ended: Option<u64>,
}

/// A place taken in a [`Quota`], given back (as having ended) when dropped.
#[must_use = "the place is given back when this is dropped"]
pub struct Taken<'a, K> {
    quota: &'a Quota<K>,
    id: u64,
}

impl<K: Eq + Hash + Clone> Quota<K> {
    /// A quota of `limit` entries of `what` (plural, for messages: "target portals").
    pub const fn new(limit: usize, what: &'static str) -> Self {
        Quota {
            limit,
            what,
            state: Mutex::new(State {
                clock: 0,
                places: Vec::new(),
                listings: Vec::new(),
            }),
        }
    }

    /// The limit.
    pub fn limit(&self) -> usize {
        self.limit
    }

    fn lock(&self) -> MutexGuard<'_, State<K>> {
        // Each change is one step; a panic elsewhere cannot leave it half done.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes a place for `key` for `op` on `object`, given the host's `list` of the entries
    /// kept now: RESOURCE_EXHAUSTED naming the limit when the entries kept and the places
    /// taken, with `key`, would be more than the limit; the listing's error as it is. An entry
    /// listed already is never refused (adding it again changes nothing), and takes a place
    /// too, without counting twice: a removal and another add beside its call would otherwise
    /// let it be added back past the limit.
    pub fn take(
        &self,
        op: &str,
        object: &str,
        key: K,
        list: impl FnOnce() -> Result<Vec<K>>,
    ) -> Result<Taken<'_, K>> {
        let began = {
            let mut st = self.lock();
            st.clock += 1;
            let began = st.clock;
            st.listings.push(began);
            began
        };
        let listed = list();
        let mut st = self.lock();
        if let Some(i) = st.listings.iter().position(|b| *b == began) {
            st.listings.swap_remove(i);
        }
        let outcome = listed.map_err(|e| e.context(op)).and_then(|listed| {
            if listed.contains(&key) {
                return Ok(());
            }
            // A place whose call ended before this listing began is in the listing (or was
            // removed since); any other may not be.
            let mut counted: HashSet<&K> = listed.iter().collect();
            counted.extend(
                st.places
                    .iter()
                    .filter(|p| p.ended.is_none_or(|e| e > began))
                    .map(|p| &p.key),
            );
            let others = counted.len();
            counted.insert(&key);
            if counted.len() <= self.limit {
                return Ok(());
            }
            Err(Error::new(
                Kind::ResourceExhausted,
                op,
                object,
                format!(
                    "{others} {} are registered or being added, the daemon's limit ({}); \
                     remove one first",
                    self.what, self.limit
                ),
            ))
        });
        let taken = outcome.map(|()| {
            st.clock += 1;
            let id = st.clock;
            st.places.push(Place {
                id,
                key,
                ended: None,
            });
            Taken { quota: self, id }
        });
        st.forget_ended();
        taken
    }
}

impl<K> State<K> {
    /// Drops the places whose calls ended before every listing under way began: no count
    /// needs them any more.
    fn forget_ended(&mut self) {
        let oldest = self.listings.iter().min().copied();
        self.places.retain(|p| match (p.ended, oldest) {
            (None, _) => true,
            (Some(_), None) => false,
            (Some(e), Some(o)) => e > o,
        });
    }
}

impl<K> Drop for Taken<'_, K> {
    fn drop(&mut self) {
        let mut st = self.quota.state.lock().unwrap_or_else(|p| p.into_inner());
        st.clock += 1;
        let now = st.clock;
        if let Some(p) = st.places.iter_mut().find(|p| p.id == self.id) {
            p.ended = Some(now);
        }
        st.forget_ended();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A place whose call ended during a listing still counts for that listing; one that
    /// ended before it began does not (the listing shows it).
    #[test]
    fn a_call_ending_during_a_listing_still_counts_for_it() {
        let q = Quota::new(2, "things");
        let take = |key, listed: Vec<&'static str>| q.take("Add", key, key, || Ok(listed));
        let a = take("a", vec![]).unwrap();
        // b lists while a's add lands and a's call ends: b's listing missed "a".
        let b = q
            .take("Add", "b", "b", || {
                drop(a);
                Ok(vec![])
            })
            .unwrap();
        // c began after a ended (its listing shows "a") and b still runs: full.
        let e = take("c", vec!["a"]).err().expect("c passed a full quota");
        assert_eq!(e.kind(), Kind::ResourceExhausted);
        assert!(
            e.message()
                .contains("Add c: 2 things are registered or being added, the daemon's limit (2)"),
            "{}",
            e.message()
        );
        drop(b);
        // b's add landed and its call ended before this listing: it shows both.
        assert!(take("c", vec!["a", "b"]).is_err());
        // An entry listed already is given a place, over the limit too (kept by others).
        drop(take("a", vec!["a", "b", "x"]).unwrap());
        assert!(q.lock().places.is_empty(), "ended places are forgotten");
        let e = q
            .take("Add", "c", "c", || {
                Err(Error::new(Kind::Unavailable, "List", "x", "down"))
            })
            .err()
            .unwrap();
        assert_eq!(e.kind(), Kind::Unavailable);
    }
}
