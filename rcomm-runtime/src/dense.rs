//! A table of per-peer state found by rank: what a hash map keyed by small dense integers
//! (ranks on this node, peers of a communicator) costs per lookup — hashing, probing — is
//! paid on every message of the hot paths, where an index is one load.

/// Values by `u32` key, stored at the key's index (keys are ranks: bounded by the job's size,
/// which callers check before inserting).
#[derive(Debug)]
pub struct DenseMap<V> {
    slots: Vec<Option<V>>,
    len: usize,
}

impl<V> Default for DenseMap<V> {
    fn default() -> Self {
        Self {
            slots: Vec::new(),
            len: 0,
        }
    }
}

impl<V> DenseMap<V> {
    /// The value at `k`.
    pub fn get(&self, k: &u32) -> Option<&V> {
        self.slots.get(*k as usize)?.as_ref()
    }

    /// The value at `k`, mutably.
    pub fn get_mut(&mut self, k: &u32) -> Option<&mut V> {
        self.slots.get_mut(*k as usize)?.as_mut()
    }

    /// Whether `k` holds a value.
    pub fn contains_key(&self, k: &u32) -> bool {
        self.get(k).is_some()
    }

    /// Puts `v` at `k` (growing the table to `k`); returns what was there.
    pub fn insert(&mut self, k: u32, v: V) -> Option<V> {
        let i = k as usize;
        if i >= self.slots.len() {
            self.slots.resize_with(i + 1, || None);
        }
        let old = self.slots[i].replace(v);
        if old.is_none() {
            self.len += 1;
        }
        old
    }

    /// The value at `k`, put there as `V::default()` first if there is none.
    pub fn get_or_default(&mut self, k: u32) -> &mut V
    where
        V: Default,
    {
        let i = k as usize;
        if i >= self.slots.len() {
            self.slots.resize_with(i + 1, || None);
        }
        if self.slots[i].is_none() {
            self.len += 1;
        }
        self.slots[i].get_or_insert_with(V::default)
    }

    /// Takes the value at `k` out.
    pub fn remove(&mut self, k: &u32) -> Option<V> {
        let old = self.slots.get_mut(*k as usize)?.take();
        if old.is_some() {
            self.len -= 1;
        }
        old
    }

    /// How many keys hold a value.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Slots the table has grown to (one past the highest key ever inserted).
    pub fn slots(&self) -> usize {
        self.slots.len()
    }

    /// Whether no key holds a value.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The keys holding a value, in increasing order.
    pub fn keys(&self) -> impl Iterator<Item = u32> + '_ {
        self.iter().map(|(k, _)| k)
    }

    /// (key, value) pairs in key order.
    pub fn iter(&self) -> impl Iterator<Item = (u32, &V)> + '_ {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(i, v)| v.as_ref().map(|v| (i as u32, v)))
    }

    /// The values, in key order.
    pub fn values(&self) -> impl Iterator<Item = &V> + '_ {
        self.slots.iter().filter_map(Option::as_ref)
    }

    /// The values, mutably, in key order.
    pub fn values_mut(&mut self) -> impl Iterator<Item = &mut V> + '_ {
        self.slots.iter_mut().filter_map(Option::as_mut)
    }
}

#[cfg(test)]
mod tests {
    use super::DenseMap;

    #[test]
    fn a_dense_map_keeps_what_a_map_would() {
        let mut m = DenseMap::default();
        assert!(m.is_empty() && m.get(&3).is_none() && m.remove(&9).is_none());
        assert_eq!(m.insert(5, "five"), None);
        assert_eq!(m.insert(1, "one"), None);
        assert_eq!(
            m.insert(5, "FIVE"),
            Some("five"),
            "a second insert replaces"
        );
        assert_eq!(m.len(), 2);
        assert_eq!(m.keys().collect::<Vec<_>>(), [1, 5]);
        assert_eq!(m.values().copied().collect::<Vec<_>>(), ["one", "FIVE"]);
        assert!(m.contains_key(&1) && !m.contains_key(&0) && !m.contains_key(&6));
        *m.get_mut(&1).unwrap() = "uno";
        assert_eq!(m.iter().collect::<Vec<_>>(), [(1, &"uno"), (5, &"FIVE")]);
        assert_eq!(m.remove(&5), Some("FIVE"));
        assert_eq!((m.len(), m.get(&5)), (1, None));
        assert_eq!(m.remove(&5), None);
        for v in m.values_mut() {
            *v = "x";
        }
        assert_eq!(m.get(&1), Some(&"x"));
        let mut d = DenseMap::<u32>::default();
        *d.get_or_default(3) += 2;
        *d.get_or_default(3) += 2;
        assert_eq!((d.get(&3), d.len(), d.get(&0)), (Some(&4), 1, None));
    }
}
