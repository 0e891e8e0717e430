//! A map for the model's largest collections (objects, threads): a vector of entries kept in
//! key order, searched by bisection. Logs give ids mostly in increasing order, so entries are
//! appended; one given out of order switches on a hash index until [`Table::finish`] sorts the
//! entries again. An entry costs its size and a few bytes, where a `BTreeMap`, its nodes two
//! thirds full when filled in order, costs half as much again.

use crate::critical::FastMap as HashMap;
use std::cell::Cell;
use std::hash::Hash;

#[derive(Debug, Clone)]
pub struct Table<K, V> {
    entries: Vec<(K, V)>,
    /// Where each key's entry is, while the entries are out of key order.
    index: Option<HashMap<K, usize>>,
    /// The entry found last: records about one object come together, and a log's periodic
    /// counters go through the objects in order, so the entry looked for is often this one or
    /// the next, found without a search.
    last: Cell<usize>,
}

impl<K, V> Default for Table<K, V> {
    fn default() -> Self {
        Table {
            entries: Vec::new(),
            index: None,
            last: Cell::new(0),
        }
    }
}

impl<K: Ord + Hash + Copy, V> Table<K, V> {
    fn position(&self, key: &K) -> Option<usize> {
        if let Some(index) = &self.index {
            return index.get(key).copied();
        }
        // Ids come mostly in increasing order: a key past the last is a new one.
        if self.entries.last().is_none_or(|(k, _)| k < key) {
            return None;
        }
        let last = self.last.get();
        let found = [last, last + 1]
            .into_iter()
            .find(|&i| self.entries.get(i).is_some_and(|(k, _)| k == key))
            .or_else(|| self.entries.binary_search_by(|(k, _)| k.cmp(key)).ok())?;
        self.last.set(found);
        Some(found)
    }

    pub fn get(&self, key: &K) -> Option<&V> {
        let i = self.position(key)?;
        self.entries.get(i).map(|(_, v)| v)
    }

    pub fn get_mut(&mut self, key: &K) -> Option<&mut V> {
        let i = self.position(key)?;
        self.entries.get_mut(i).map(|(_, v)| v)
    }

    pub fn contains_key(&self, key: &K) -> bool {
        self.position(key).is_some()
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Adds an entry for a key the table does not have (a key it has keeps its entry).
    pub fn insert_new(&mut self, key: K, value: V) {
        let in_order = self.entries.last().is_none_or(|(last, _)| *last < key);
        // In key order, a key past the last is new: appended without a search, and found
        // next without one.
        if in_order && self.index.is_none() {
            self.last.set(self.entries.len());
            self.entries.push((key, value));
            return;
        }
        if self.contains_key(&key) {
            return;
        }
        if !in_order && self.index.is_none() {
            self.index = Some(
                self.entries
                    .iter()
                    .enumerate()
                    .map(|(i, (k, _))| (*k, i))
                    .collect(),
            );
        }
        if let Some(index) = &mut self.index {
            index.insert(key, self.entries.len());
        }
        self.entries.push((key, value));
    }

    /// Sorts the entries back into key order, if they are not, and frees what the table does
    /// not use.
    pub fn finish(&mut self) {
        if self.index.take().is_some() {
            self.entries.sort_unstable_by_key(|&(k, _)| k);
        }
        self.entries.shrink_to_fit();
    }

    /// Keeps the entries for which `keep` holds, dropping the others.
    pub fn retain(&mut self, mut keep: impl FnMut(&V) -> bool) {
        self.entries.retain(|(_, v)| keep(v));
        if let Some(index) = &mut self.index {
            *index = self
                .entries
                .iter()
                .enumerate()
                .map(|(i, (k, _))| (*k, i))
                .collect();
        }
        self.last.set(0);
    }

    /// The values in key order (while the entries are out of order, through a sorted list of
    /// their positions).
    pub fn values(&self) -> Values<'_, K, V> {
        let order = self.index.as_ref().map(|_| {
            let mut order: Vec<usize> = (0..self.entries.len()).collect();
            order.sort_unstable_by(|&a, &b| self.entries[a].0.cmp(&self.entries[b].0));
            order
        });
        Values {
            entries: &self.entries,
            order,
            next: 0,
        }
    }
}

/// The values of a [`Table`], in key order.
pub struct Values<'t, K, V> {
    entries: &'t [(K, V)],
    /// Positions of the entries in key order, when they are not in order themselves.
    order: Option<Vec<usize>>,
    next: usize,
}

impl<'t, K, V> Iterator for Values<'t, K, V> {
    type Item = &'t V;

    fn next(&mut self) -> Option<&'t V> {
        let i = match &self.order {
            Some(order) => *order.get(self.next)?,
            None => self.next,
        };
        self.next += 1;
        self.entries.get(i).map(|(_, v)| v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_out_of_order_are_found_and_listed_in_order() {
        let mut t = Table::default();
        for k in [5u64, 7, 9, 2, 8, 1] {
            t.insert_new(k, k * 10);
        }
        t.insert_new(7, 0);
        assert_eq!(t.get(&2), Some(&20));
        assert_eq!(t.get(&7), Some(&70), "a key given again keeps its entry");
        assert!(!t.contains_key(&3));
        assert_eq!(
            t.values().copied().collect::<Vec<_>>(),
            [10, 20, 50, 70, 80, 90]
        );
        t.finish();
        assert_eq!(t.get(&8), Some(&80));
        assert_eq!(
            t.values().copied().collect::<Vec<_>>(),
            [10, 20, 50, 70, 80, 90]
        );
        t.insert_new(100, 1000);
        *t.get_mut(&100).expect("added in order") += 1;
        assert_eq!(t.get(&100), Some(&1001));
        assert_eq!(t.len(), 7);
    }

    #[test]
    fn keys_in_order_are_appended_and_found_missing_or_not() {
        let mut t = Table::default();
        for k in (0u64..1000).map(|k| k * 2) {
            assert!(!t.contains_key(&k));
            t.insert_new(k, k + 1);
            assert_eq!(t.get(&k), Some(&(k + 1)));
        }
        t.insert_new(10, 0);
        assert_eq!(t.get(&10), Some(&11), "a key given again keeps its entry");
        assert_eq!((t.get(&11), t.get(&1999), t.get(&2000)), (None, None, None));
        assert_eq!(t.get(&0), Some(&1));
        assert_eq!(t.get(&1998), Some(&1999));
        assert_eq!(t.len(), 1000);
    }

    #[test]
    fn entries_dropped_are_gone_and_the_rest_still_found() {
        let mut t = Table::default();
        for k in [5u64, 7, 9, 2, 8, 1] {
            t.insert_new(k, k * 10);
        }
        t.retain(|&v| v != 70 && v != 20);
        assert_eq!((t.get(&7), t.get(&2)), (None, None));
        assert_eq!(t.get(&9), Some(&90));
        assert_eq!(t.values().copied().collect::<Vec<_>>(), [10, 50, 80, 90]);
        t.finish();
        t.retain(|&v| v != 10);
        assert_eq!(t.get(&5), Some(&50));
        assert_eq!(t.len(), 3);
    }
}
