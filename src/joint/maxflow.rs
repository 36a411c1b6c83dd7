//! Maximum flow and minimum s-t cut (Dinic's algorithm) on integer capacities.
//!
//! Written here rather than taken from a crate because the min-cut partitioner
//! needs one particular minimum cut among the equal ones (see
//! [`FlowNetwork::min_cut`]) and capacities near `u128`; it is tested against
//! the `pathfinding` crate's Edmonds-Karp and against brute force.

/// A capacity that stands for infinity: far above any sum of finite
/// capacities the partitioner builds (sizes fit in `u64`, weights scale them
/// by under 2^15), yet four of them still add up without overflow.
pub const INFINITE: u128 = 1 << 125;

/// A directed graph with integer edge capacities.
#[derive(Clone, Debug, Default)]
pub struct FlowNetwork {
    /// `adj[u]`: ids of the edges leaving `u` (residual reverse edges included).
    adj: Vec<Vec<usize>>,
    /// Edge `e` goes to `head[e]`; edge `e ^ 1` is its reverse.
    head: Vec<usize>,
    /// Residual capacity of each edge.
    residual: Vec<u128>,
}

/// The result of [`FlowNetwork::min_cut`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MinCut {
    /// The value of a maximum flow = the capacity of a minimum cut;
    /// `None` when every cut has an infinite edge.
    pub value: Option<u128>,
    /// `sink_side[v]`: whether vertex `v` is on the sink's side.
    pub sink_side: Vec<bool>,
}

impl FlowNetwork {
    /// A network of `vertices` vertices and no edges.
    pub fn new(vertices: usize) -> FlowNetwork {
        FlowNetwork { adj: vec![Vec::new(); vertices], head: Vec::new(), residual: Vec::new() }
    }

    /// Number of vertices.
    pub fn vertices(&self) -> usize {
        self.adj.len()
    }

    /// Adds an edge `from -> to` of capacity `capacity` (capped at
    /// [`INFINITE`]). Parallel edges are allowed. O(1).
    pub fn add_edge(&mut self, from: usize, to: usize, capacity: u128) {
        let e = self.head.len();
        self.head.push(to);
        self.residual.push(capacity.min(INFINITE));
        self.adj[from].push(e);
        self.head.push(from);
        self.residual.push(0);
        self.adj[to].push(e + 1);
    }

    /// A maximum flow from `source` to `sink`, and the minimum cut whose sink
    /// side is smallest: the vertices that can still reach the sink in the
    /// residual graph. That set is the same for every maximum flow, so the
    /// answer does not depend on the order of augmentations, and it is the cut
    /// NetworkX's `minimum_cut` returns (PyTorch's partitioner uses it). For the
    /// partitioner it means: among cheapest plans, save values as late in the
    /// forward as possible.
    ///
    /// Dinic's algorithm: O(V^2 E) worst case, far less on these graphs.
    /// Consumes the capacities (the network holds the residual graph after).
    pub fn min_cut(&mut self, source: usize, sink: usize) -> MinCut {
        let n = self.vertices();
        let mut total: u128 = 0;
        let mut level = vec![usize::MAX; n];
        let mut next = vec![0usize; n];
        let mut queue = std::collections::VecDeque::with_capacity(n);
        while total < INFINITE {
            // Levels by BFS from the source over edges with residual capacity.
            level.fill(usize::MAX);
            level[source] = 0;
            queue.clear();
            queue.push_back(source);
            while let Some(u) = queue.pop_front() {
                for &e in &self.adj[u] {
                    let v = self.head[e];
                    if self.residual[e] > 0 && level[v] == usize::MAX {
                        level[v] = level[u] + 1;
                        queue.push_back(v);
                    }
                }
            }
            if level[sink] == usize::MAX {
                break;
            }
            next.fill(0);
            total = total.saturating_add(self.blocking_flow(source, sink, &level, &mut next));
        }
        if total >= INFINITE {
            return MinCut { value: None, sink_side: vec![false; n] };
        }
        // Vertices that reach the sink: BFS backwards over residual edges.
        let mut sink_side = vec![false; n];
        sink_side[sink] = true;
        queue.clear();
        queue.push_back(sink);
        while let Some(v) = queue.pop_front() {
            for &e in &self.adj[v] {
                // e: v -> w, so e ^ 1 is w -> v.
                let w = self.head[e];
                if self.residual[e ^ 1] > 0 && !sink_side[w] {
                    sink_side[w] = true;
                    queue.push_back(w);
                }
            }
        }
        MinCut { value: Some(total), sink_side }
    }

    /// One phase of Dinic: augmenting paths along the level graph until none is
    /// left, by an iterative depth-first search (no recursion, so deep graphs
    /// cannot overflow the stack). Returns the flow added.
    fn blocking_flow(&mut self, source: usize, sink: usize, level: &[usize], next: &mut [usize]) -> u128 {
        let mut added: u128 = 0;
        let mut path: Vec<usize> = Vec::new();
        let mut dead = vec![false; self.vertices()];
        let mut u = source;
        loop {
            if u == sink {
                let push = path.iter().map(|&e| self.residual[e]).min().unwrap_or(0);
                for &e in &path {
                    self.residual[e] -= push;
                    self.residual[e ^ 1] += push;
                }
                added = added.saturating_add(push);
                if added >= INFINITE {
                    return added;
                }
                // Back up to the tail of the first saturated edge.
                let cut = path.iter().position(|&e| self.residual[e] == 0).unwrap_or(0);
                path.truncate(cut);
                u = path.last().map_or(source, |&e| self.head[e]);
                continue;
            }
            let mut advanced = false;
            while next[u] < self.adj[u].len() {
                let e = self.adj[u][next[u]];
                let v = self.head[e];
                if self.residual[e] > 0 && !dead[v] && level[v] == level[u].wrapping_add(1) {
                    path.push(e);
                    u = v;
                    advanced = true;
                    break;
                }
                next[u] += 1;
            }
            if advanced {
                continue;
            }
            // No way on from u in this phase.
            dead[u] = true;
            match path.pop() {
                None => return added,
                Some(e) => {
                    u = self.head[e ^ 1];
                    next[u] += 1;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn textbook_network() {
        // CLRS figure 26.1: max flow 23.
        let mut g = FlowNetwork::new(6);
        for (u, v, c) in
            [(0, 1, 16), (0, 2, 13), (1, 3, 12), (2, 1, 4), (2, 4, 14), (3, 2, 9), (3, 5, 20), (4, 3, 7), (4, 5, 4)]
        {
            g.add_edge(u, v, c);
        }
        let cut = g.min_cut(0, 5);
        assert_eq!(cut.value, Some(23));
        assert_eq!(cut.sink_side, vec![false, false, false, true, false, true]);
    }

    #[test]
    fn infinite_cut_is_reported() {
        let mut g = FlowNetwork::new(3);
        g.add_edge(0, 1, INFINITE);
        g.add_edge(1, 2, INFINITE);
        g.add_edge(0, 2, 5);
        assert_eq!(g.min_cut(0, 2).value, None);
    }

    #[test]
    fn equal_cuts_pick_the_smallest_sink_side() {
        // s -> a -> b -> t, all capacity 1: three minimum cuts; the last edge's.
        let mut g = FlowNetwork::new(4);
        g.add_edge(0, 1, 1);
        g.add_edge(1, 2, 1);
        g.add_edge(2, 3, 1);
        let cut = g.min_cut(0, 3);
        assert_eq!(cut.value, Some(1));
        assert_eq!(cut.sink_side, vec![false, false, false, true]);
    }
}
