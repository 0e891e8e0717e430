//! The lock-order graph of the live objects: an edge A → B when B was acquired while A was
//! held. Plain data (nodes are opaque keys, edges carry a payload), so that its rules are tested
//! without a running program.
//!
//! Only live objects are in it: an object's edges go when it is destroyed, so a program that
//! makes a mutex per request and takes it under a global lock keeps one edge per request in
//! flight, not one per request ever made. A cycle can only be closed while all its objects live,
//! so each new edge is checked for one at once ([`Graph::add`]); the edges of a cycle are what
//! the log must keep even if their objects die before the next flush.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};

/// The hash of the graph's keys (entry addresses mixed with a generation, pairs of them): a
/// fixed mix, with no per-process random key to fetch (`getrandom`, a cancellation point) and a
/// fraction of SipHash's cost, paid on every new edge (a program that makes a mutex per
/// request and takes it under a global lock adds one per request).
#[derive(Default)]
pub struct NodeHasher(u64);

impl Hasher for NodeHasher {
    fn finish(&self) -> u64 {
        // The finaliser of splitmix64: every bit of the state reaches the low bits the table
        // takes its buckets from (entry addresses have their low six bits clear).
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }

    fn write_u64(&mut self, x: u64) {
        self.0 = (self.0.rotate_left(23) ^ x).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

type Map<K, V> = HashMap<K, V, BuildHasherDefault<NodeHasher>>;
type Set<K> = HashSet<K, BuildHasherDefault<NodeHasher>>;

/// How far a new edge's cycle check may look (nodes visited): a program with a huge, dense
/// graph gets its cycles of moderate reach found, and no check costs more than this.
pub const MAX_VISITS: usize = 4096;

/// What [`Graph::add`] found.
#[derive(Debug, PartialEq, Eq)]
pub enum Added {
    /// The edge was in the graph already.
    Known,
    /// A new edge, closing no cycle.
    New,
    /// A new edge that closes a cycle: the cycle's edges, the new one first, then in order
    /// around the cycle back to it.
    Cycle(Vec<(u64, u64)>),
}

/// One edge and whether it reached the log.
#[derive(Debug, Clone)]
pub struct Edge<T> {
    pub data: T,
    pub written: bool,
}

pub struct Graph<T> {
    edges: Map<(u64, u64), Edge<T>>,
    /// Successors and predecessors of each node that has edges.
    out: Map<u64, Vec<u64>>,
    into: Map<u64, Vec<u64>>,
}

impl<T> Default for Graph<T> {
    fn default() -> Self {
        Graph {
            edges: Map::default(),
            out: Map::default(),
            into: Map::default(),
        }
    }
}

impl<T> Graph<T> {
    #[cfg(test)]
    fn len(&self) -> usize {
        self.edges.len()
    }

    /// Adds the edge `from → to` (a self-edge, a recursive lock taken again, is no order and is
    /// ignored as known) and says whether it closes a cycle.
    pub fn add(&mut self, from: u64, to: u64, data: T) -> Added {
        if from == to || self.edges.contains_key(&(from, to)) {
            return Added::Known;
        }
        self.edges.insert(
            (from, to),
            Edge {
                data,
                written: false,
            },
        );
        self.out.entry(from).or_default().push(to);
        self.into.entry(to).or_default().push(from);
        match self.path(to, from) {
            Some(path) => {
                let mut cycle = vec![(from, to)];
                cycle.extend(path.windows(2).map(|w| (w[0], w[1])));
                Added::Cycle(cycle)
            }
            None => Added::New,
        }
    }

    /// A path `start → … → goal` along edges (the nodes, both ends included), looking at no
    /// more than [`MAX_VISITS`] nodes: a depth-first search, iterative so that no graph can
    /// exhaust the stack.
    fn path(&self, start: u64, goal: u64) -> Option<Vec<u64>> {
        // A node nothing was taken under (the inner lock of most nestings) leads nowhere: no
        // search, no allocation.
        if !self.out.contains_key(&start) {
            return None;
        }
        let mut seen = Set::default();
        seen.insert(start);
        // (node, index of its next successor to try)
        let mut stack = vec![(start, 0usize)];
        while let Some(&mut (node, ref mut next)) = stack.last_mut() {
            let succ = self.out.get(&node).map(Vec::as_slice).unwrap_or(&[]);
            let Some(&s) = succ.get(*next) else {
                stack.pop();
                continue;
            };
            *next += 1;
            if s == goal {
                let mut p: Vec<u64> = stack.iter().map(|&(n, _)| n).collect();
                p.push(goal);
                return Some(p);
            }
            if seen.len() >= MAX_VISITS || !seen.insert(s) {
                continue;
            }
            stack.push((s, 0));
        }
        None
    }

    /// Removes `node` and its edges (its object was destroyed).
    pub fn remove_node(&mut self, node: u64) {
        for to in self.out.remove(&node).unwrap_or_default() {
            self.edges.remove(&(node, to));
            if let Some(v) = self.into.get_mut(&to) {
                v.retain(|&f| f != node);
                if v.is_empty() {
                    self.into.remove(&to);
                }
            }
        }
        for from in self.into.remove(&node).unwrap_or_default() {
            self.edges.remove(&(from, node));
            if let Some(v) = self.out.get_mut(&from) {
                v.retain(|&t| t != node);
                if v.is_empty() {
                    self.out.remove(&from);
                }
            }
        }
    }

    /// The edge `from → to`, if present.
    pub fn get_mut(&mut self, from: u64, to: u64) -> Option<&mut Edge<T>> {
        self.edges.get_mut(&(from, to))
    }

    /// Every edge not yet written, for the caller to write; each is marked written when `write`
    /// returns true for it.
    pub fn write_unwritten(&mut self, mut write: impl FnMut((u64, u64), &T) -> bool) {
        for (&key, e) in self.edges.iter_mut().filter(|(_, e)| !e.written) {
            e.written = write(key, &e.data);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_locks_taken_in_both_orders_close_a_cycle_of_two() {
        let mut g = Graph::default();
        assert_eq!(g.add(1, 2, "A then B"), Added::New);
        assert_eq!(g.add(1, 2, "again"), Added::Known);
        assert_eq!(g.add(2, 1, "B then A"), Added::Cycle(vec![(2, 1), (1, 2)]));
    }

    #[test]
    fn a_cycle_through_three_locks_lists_its_edges_in_order() {
        let mut g = Graph::default();
        assert_eq!(g.add(10, 20, ()), Added::New);
        assert_eq!(g.add(20, 30, ()), Added::New);
        assert_eq!(g.add(5, 10, ()), Added::New);
        assert_eq!(
            g.add(30, 10, ()),
            Added::Cycle(vec![(30, 10), (10, 20), (20, 30)])
        );
    }

    #[test]
    fn nesting_in_one_order_only_closes_no_cycle() {
        let mut g = Graph::default();
        for inner in 100..200 {
            assert_eq!(g.add(1, inner, ()), Added::New);
            assert_eq!(g.add(inner, 1000 + inner, ()), Added::New);
        }
        assert_eq!(g.len(), 200);
    }

    #[test]
    fn a_recursive_lock_taken_again_is_no_order() {
        let mut g: Graph<()> = Graph::default();
        assert_eq!(g.add(7, 7, ()), Added::Known);
        assert_eq!(g.len(), 0);
    }

    #[test]
    fn a_destroyed_object_takes_its_edges_with_it() {
        // A mutex per request, taken under a global lock: one edge per live request.
        let mut g = Graph::default();
        for request in 1..=10_000u64 {
            assert_eq!(g.add(1, 1_000_000 + request, ()), Added::New);
            g.remove_node(1_000_000 + request);
        }
        assert_eq!(g.len(), 0);
        assert!(g.out.is_empty() && g.into.is_empty());
        // The reverse order with a dead request object closes nothing.
        g.add(1, 5, ());
        g.remove_node(5);
        assert_eq!(g.add(5, 1, ()), Added::New);
    }

    #[test]
    fn edges_are_written_once_and_only_when_the_writer_manages() {
        let mut g = Graph::default();
        g.add(1, 2, 12);
        g.add(2, 3, 23);
        let mut seen = Vec::new();
        // The first pass cannot write the edge into 3 (say its object is being destroyed).
        g.write_unwritten(|(a, b), &d| {
            seen.push(d);
            (a, b) != (2, 3)
        });
        seen.sort_unstable();
        assert_eq!(seen, [12, 23]);
        seen.clear();
        g.write_unwritten(|_, &d| {
            seen.push(d);
            true
        });
        assert_eq!(seen, [23]);
        g.write_unwritten(|_, _| panic!("nothing left to write"));
        assert!(g.get_mut(1, 2).is_some_and(|e| e.written));
    }

    #[test]
    fn the_cycle_search_is_bounded_on_a_huge_graph() {
        // A long chain 0 → 1 → … → 20 000: closing it needs a path longer than the search may
        // look, so it is not found; a short cycle still is.
        let mut g = Graph::default();
        for n in 0..20_000u64 {
            g.add(n, n + 1, ());
        }
        assert_eq!(g.add(20_000, 0, ()), Added::New);
        assert!(matches!(g.add(3, 1, ()), Added::Cycle(c) if c.len() == 3));
    }
}
