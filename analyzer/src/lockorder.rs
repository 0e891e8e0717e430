//! Potential deadlocks: every elementary cycle of the lock-order graph (an edge A → B when B was
//! acquired while A was held) is a lock-order inversion, a deadlock waiting for the wrong
//! interleaving, whether or not this run hung.
//!
//! Cycles are found with Johnson's algorithm, restricted to the strongly connected components of
//! the graph, and iterative so that no input can exhaust the stack. The search is bounded three
//! ways so that a huge or hostile graph cannot hang the analyzer: at most [`MAX_CYCLES`] cycles,
//! at most [`MAX_CYCLE_LEN`] objects per cycle, and at most [`WORK_LIMIT`] steps in all. The
//! result says which bound, if any, cut it short.

use std::collections::{BTreeMap, BTreeSet};

use crate::model::Model;

/// Cycles reported at most.
pub const MAX_CYCLES: usize = 100;
/// Objects in one cycle at most: longer cycles are not searched for.
pub const MAX_CYCLE_LEN: usize = 32;
/// Steps (edges followed, blocks and unblocks) the search may take in all.
pub const WORK_LIMIT: u64 = 20_000_000;

/// One lock-order inversion.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PotentialDeadlock {
    /// Object ids around the cycle, smallest first: each was acquired while the one before it
    /// (the last one, for the first) was held.
    pub cycle: Vec<u64>,
    /// The same set of objects deadlocked for real in this run (a `Deadlock` record).
    pub deadlocked: bool,
}

impl PotentialDeadlock {
    /// The edges of the cycle: (held, acquired).
    pub fn edges(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        let next = self.cycle.iter().cycle().skip(1);
        self.cycle.iter().copied().zip(next.copied())
    }
}

/// Why the search stopped before it had looked at every cycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stopped {
    /// [`MAX_CYCLES`] cycles were found.
    CycleLimit,
    /// [`WORK_LIMIT`] steps were taken.
    WorkLimit,
}

impl Stopped {
    pub fn as_str(self) -> &'static str {
        match self {
            Stopped::CycleLimit => "cycle_limit",
            Stopped::WorkLimit => "work_limit",
        }
    }
}

/// The lock-order inversions of one log.
#[derive(Debug, Clone, Default)]
pub struct Inversions {
    /// Shortest cycles first, then by object ids.
    pub cycles: Vec<PotentialDeadlock>,
    /// `None` when every cycle of at most [`MAX_CYCLE_LEN`] objects was found.
    pub stopped: Option<Stopped>,
    /// A path of [`MAX_CYCLE_LEN`] objects was cut: longer cycles may exist, not reported.
    pub depth_limited: bool,
}

impl Inversions {
    pub fn deadlocked(&self) -> usize {
        self.cycles.iter().filter(|c| c.deadlocked).count()
    }
}

/// Finds the lock-order inversions of `model`.
pub fn find(model: &Model) -> Inversions {
    // Objects as dense indices in id order, so that cycles come out smallest id first. An edge
    // from an object to itself (a recursive lock taken again) is not an inversion.
    let ids: Vec<u64> = model
        .lock_order
        .keys()
        .filter(|(a, b)| a != b)
        .flat_map(|&(a, b)| [a, b])
        .collect::<BTreeSet<u64>>()
        .into_iter()
        .collect();
    let index: BTreeMap<u64, usize> = ids.iter().enumerate().map(|(i, &id)| (id, i)).collect();
    let mut adj: Vec<Vec<usize>> = vec![Vec::new(); ids.len()];
    for &(a, b) in model.lock_order.keys() {
        if let (Some(&ia), Some(&ib)) = (index.get(&a), index.get(&b)) {
            if ia != ib {
                if let Some(out) = adj.get_mut(ia) {
                    out.push(ib);
                }
            }
        }
    }
    let (raw, stopped, depth_limited) = Johnson::new(&adj).run();
    // Cycles that broke (a wait with a deadline gave up) were no deadlock.
    let deadlock_sets: Vec<BTreeSet<u64>> = model
        .real_deadlocks()
        .map(|d| d.cycle.iter().map(|e| e.object_id).collect())
        .collect();
    let mut cycles: Vec<PotentialDeadlock> = raw
        .into_iter()
        .map(|c| {
            let cycle: Vec<u64> = c.iter().filter_map(|&i| ids.get(i).copied()).collect();
            let set: BTreeSet<u64> = cycle.iter().copied().collect();
            let deadlocked = deadlock_sets.contains(&set);
            PotentialDeadlock { cycle, deadlocked }
        })
        .collect();
    cycles.sort_by(|a, b| {
        a.cycle
            .len()
            .cmp(&b.cycle.len())
            .then(a.cycle.cmp(&b.cycle))
    });
    Inversions {
        cycles,
        stopped,
        depth_limited,
    }
}

/// Strongly connected components (Tarjan, iterative): the component number of each vertex.
fn components(adj: &[Vec<usize>]) -> Vec<usize> {
    const NONE: usize = usize::MAX;
    let n = adj.len();
    let mut order = vec![NONE; n];
    let mut low = vec![0usize; n];
    let mut on_stack = vec![false; n];
    let mut comp = vec![NONE; n];
    let mut stack: Vec<usize> = Vec::new();
    // (vertex, next edge to follow)
    let mut calls: Vec<(usize, usize)> = Vec::new();
    let mut next_order = 0;
    let mut next_comp = 0;
    for root in 0..n {
        if order[root] != NONE {
            continue;
        }
        calls.push((root, 0));
        order[root] = next_order;
        low[root] = next_order;
        next_order += 1;
        stack.push(root);
        on_stack[root] = true;
        while let Some(&mut (v, ref mut i)) = calls.last_mut() {
            if let Some(&w) = adj[v].get(*i) {
                *i += 1;
                if order[w] == NONE {
                    order[w] = next_order;
                    low[w] = next_order;
                    next_order += 1;
                    stack.push(w);
                    on_stack[w] = true;
                    calls.push((w, 0));
                } else if on_stack[w] {
                    low[v] = low[v].min(order[w]);
                }
                continue;
            }
            calls.pop();
            if let Some(&(parent, _)) = calls.last() {
                low[parent] = low[parent].min(low[v]);
            }
            if low[v] == order[v] {
                while let Some(w) = stack.pop() {
                    on_stack[w] = false;
                    comp[w] = next_comp;
                    if w == v {
                        break;
                    }
                }
                next_comp += 1;
            }
        }
    }
    comp
}

/// Johnson's elementary-circuit search over the vertices of each component, each cycle found
/// once, from its smallest vertex.
struct Johnson<'a> {
    adj: &'a [Vec<usize>],
    comp: Vec<usize>,
    blocked: Vec<bool>,
    /// Johnson's B sets: the vertices to unblock when this one is unblocked.
    block_map: Vec<Vec<usize>>,
    /// Vertices whose `blocked` or `block_map` this start vertex touched (reset before the next).
    touched: Vec<usize>,
    is_touched: Vec<bool>,
    work: u64,
    found: Vec<Vec<usize>>,
    depth_limited: bool,
}

struct Step {
    v: usize,
    next: usize,
    closes: bool,
}

impl<'a> Johnson<'a> {
    fn new(adj: &'a [Vec<usize>]) -> Self {
        let n = adj.len();
        Johnson {
            adj,
            comp: components(adj),
            blocked: vec![false; n],
            block_map: vec![Vec::new(); n],
            touched: Vec::new(),
            is_touched: vec![false; n],
            work: 0,
            found: Vec::new(),
            depth_limited: false,
        }
    }

    fn run(mut self) -> (Vec<Vec<usize>>, Option<Stopped>, bool) {
        let mut size = vec![0usize; self.adj.len()];
        for &c in &self.comp {
            if let Some(s) = size.get_mut(c) {
                *s += 1;
            }
        }
        let mut stopped = None;
        for s in 0..self.adj.len() {
            if size.get(self.comp[s]).copied().unwrap_or(0) < 2 {
                continue;
            }
            if let Some(why) = self.circuits_from(s) {
                stopped = Some(why);
                break;
            }
        }
        (self.found, stopped, self.depth_limited)
    }

    /// Whether `w` belongs to the subgraph searched from start vertex `s`.
    fn inside(&self, s: usize, w: usize) -> bool {
        w >= s && self.comp[w] == self.comp[s]
    }

    fn touch(&mut self, v: usize) {
        if !self.is_touched[v] {
            self.is_touched[v] = true;
            self.touched.push(v);
        }
    }

    fn block(&mut self, v: usize) {
        self.blocked[v] = true;
        self.touch(v);
    }

    fn unblock(&mut self, u: usize) {
        self.blocked[u] = false;
        let mut pending = vec![u];
        while let Some(x) = pending.pop() {
            for w in std::mem::take(&mut self.block_map[x]) {
                self.work += 1;
                if self.blocked[w] {
                    self.blocked[w] = false;
                    pending.push(w);
                }
            }
        }
    }

    /// Every cycle through `s` over vertices above it; `Some` when a bound stopped the search.
    fn circuits_from(&mut self, s: usize) -> Option<Stopped> {
        for v in std::mem::take(&mut self.touched) {
            self.blocked[v] = false;
            self.is_touched[v] = false;
            self.block_map[v].clear();
        }
        let mut path = vec![s];
        let mut steps = vec![Step {
            v: s,
            next: 0,
            closes: false,
        }];
        self.block(s);
        while let Some(top) = steps.last_mut() {
            if self.work >= WORK_LIMIT {
                return Some(Stopped::WorkLimit);
            }
            let v = top.v;
            if let Some(&w) = self.adj[v].get(top.next) {
                top.next += 1;
                self.work += 1;
                if !self.inside(s, w) {
                    continue;
                }
                if w == s {
                    top.closes = true;
                    self.found.push(path.clone());
                    if self.found.len() >= MAX_CYCLES {
                        return Some(Stopped::CycleLimit);
                    }
                } else if !self.blocked[w] {
                    if path.len() >= MAX_CYCLE_LEN {
                        // Not explored: treated as if it closed a cycle, so that nothing stays
                        // blocked because of the cut (which would hide shorter cycles).
                        self.depth_limited = true;
                        top.closes = true;
                    } else {
                        path.push(w);
                        steps.push(Step {
                            v: w,
                            next: 0,
                            closes: false,
                        });
                        self.block(w);
                    }
                }
                continue;
            }
            let closes = top.closes;
            steps.pop();
            path.pop();
            if closes {
                self.unblock(v);
            } else {
                for i in 0..self.adj[v].len() {
                    let w = self.adj[v][i];
                    self.work += 1;
                    if !self.inside(s, w) {
                        continue;
                    }
                    self.work += self.block_map[w].len() as u64;
                    if !self.block_map[w].contains(&v) {
                        self.block_map[w].push(v);
                        self.touch(w);
                    }
                }
            }
            if let Some(parent) = steps.last_mut() {
                parent.closes |= closes;
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cycles(edges: &[(usize, usize)], n: usize) -> Vec<Vec<usize>> {
        let mut adj = vec![Vec::new(); n];
        for &(a, b) in edges {
            adj[a].push(b);
        }
        let mut c = Johnson::new(&adj).run().0;
        c.sort();
        c
    }

    #[test]
    fn finds_each_elementary_cycle_once() {
        assert_eq!(cycles(&[(0, 1), (1, 0)], 2), vec![vec![0, 1]]);
        assert_eq!(
            cycles(&[(0, 1), (1, 2), (2, 0), (1, 0)], 3),
            vec![vec![0, 1], vec![0, 1, 2]]
        );
        assert!(cycles(&[(0, 1), (0, 2), (1, 2)], 3).is_empty());
        // The complete graph on 4 vertices has 20 elementary cycles.
        let k4: Vec<(usize, usize)> = (0..4)
            .flat_map(|a| (0..4).filter(move |&b| b != a).map(move |b| (a, b)))
            .collect();
        assert_eq!(cycles(&k4, 4).len(), 20);
    }
}
