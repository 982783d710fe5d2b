//! An ordered map kept as a B⁺-tree.
//!
//! Nodes live in an arena and refer to each other by `NodeId`. Every entry is in a leaf; the
//! leaves are chained left to right (`next`), so an ordered range read descends once and then
//! walks the chain. An internal node with children `c_0 … c_n` holds `n` separators: every key
//! under `c_i` is below `separators[i]`, and every key under `c_{i+1}` is at or above it.
//!
//! With fan-out `f` a node holds at most `f` entries (a leaf) or `f` children (an internal
//! node), and every node but the root at least `f / 2`. An insert that overfills a node splits
//! it in two and pushes a separator up, a delete that underfills one borrows an entry from a
//! sibling that can spare one or else merges with a sibling and pulls a separator down; the tree
//! grows and shrinks at the root, so all leaves stay at the same depth.
use std::ops::Bound;

/// The fan-out of [`BPlusTree::new`]: entries per leaf and children per internal node at most.
pub const FANOUT_DEFAULT: usize = 64;

/// The smallest fan-out: with fewer, a node at its minimum could not be split or merged.
pub const FANOUT_MIN: usize = 4;

/// A node's place in the arena.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct NodeId(u32);

impl NodeId {
    fn index(self) -> usize {
        self.0 as usize
    }
}

#[derive(Debug)]
struct Leaf<K, V> {
    keys: Vec<K>,
    values: Vec<V>,
    /// The leaf to the right, holding the next larger keys.
    next: Option<NodeId>,
}

#[derive(Debug)]
struct Internal<K> {
    separators: Vec<K>,
    children: Vec<NodeId>,
}

#[derive(Debug)]
enum Node<K, V> {
    Leaf(Leaf<K, V>),
    Internal(Internal<K>),
    /// An arena slot on the free list.
    Free,
}

/// An ordered map from `K` to `V` kept as a B⁺-tree (see the module docs).
#[derive(Debug)]
pub struct BPlusTree<K, V> {
    nodes: Vec<Node<K, V>>,
    free: Vec<NodeId>,
    root: NodeId,
    len: usize,
    fanout: usize,
}

impl<K: Ord + Clone, V> Default for BPlusTree<K, V> {
    fn default() -> Self {
        BPlusTree::new()
    }
}

impl<K: Ord + Clone, V> BPlusTree<K, V> {
    /// An empty tree with [`FANOUT_DEFAULT`].
    pub fn new() -> BPlusTree<K, V> {
        BPlusTree::with_fanout(FANOUT_DEFAULT)
    }

    /// An empty tree whose nodes hold at most `fanout` entries or children.
    ///
    /// # Panics
    /// If `fanout` is below [`FANOUT_MIN`].
    pub fn with_fanout(fanout: usize) -> BPlusTree<K, V> {
        assert!(
            fanout >= FANOUT_MIN,
            "a fan-out of {fanout} is below {FANOUT_MIN}"
        );
        BPlusTree {
            nodes: vec![Node::Leaf(Leaf::empty())],
            free: Vec::new(),
            root: NodeId(0),
            len: 0,
            fanout,
        }
    }

    /// The most entries or children a node holds.
    pub fn fanout(&self) -> usize {
        self.fanout
    }

    /// The number of entries.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the tree holds no entry.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The number of levels: 1 for a tree that is one leaf.
    pub fn depth(&self) -> usize {
        let mut depth = 1;
        let mut node = self.root;
        while let Node::Internal(internal) = &self.nodes[node.index()] {
            node = internal.children[0];
            depth += 1;
        }
        depth
    }

    /// The value of `key`.
    pub fn get(&self, key: &K) -> Option<&V> {
        let leaf = self.leaf(self.leaf_for(key));
        let slot = leaf.keys.binary_search(key).ok()?;
        Some(&leaf.values[slot])
    }

    /// The value of `key`, to change in place (the tree's shape does not change).
    pub fn get_mut(&mut self, key: &K) -> Option<&mut V> {
        let id = self.leaf_for(key);
        let Node::Leaf(leaf) = &mut self.nodes[id.index()] else {
            unreachable!("leaf_for ends at a leaf")
        };
        let slot = leaf.keys.binary_search(key).ok()?;
        Some(&mut leaf.values[slot])
    }

    /// Sets `key` to `value` and gives the value it replaces.
    pub fn insert(&mut self, key: K, value: V) -> Option<V> {
        let (replaced, split) = self.insert_below(self.root, key, value);
        if let Some((separator, right)) = split {
            let left = self.root;
            self.root = self.allocate(Node::Internal(Internal {
                separators: vec![separator],
                children: vec![left, right],
            }));
        }
        if replaced.is_none() {
            self.len += 1;
        }
        replaced
    }

    /// Removes `key` and gives its value.
    pub fn remove(&mut self, key: &K) -> Option<V> {
        let removed = self.remove_below(self.root, key)?;
        self.len -= 1;
        // A root left with one child hands the root over to it: the tree loses a level.
        if let Node::Internal(root) = &self.nodes[self.root.index()] {
            if root.children.len() == 1 {
                let only = root.children[0];
                self.release(self.root);
                self.root = only;
            }
        }
        Some(removed)
    }

    /// The entries in key order, starting at `start`.
    pub fn range_from(&self, start: Bound<&K>) -> Iter<'_, K, V> {
        let (leaf, slot) = match start {
            Bound::Unbounded => (self.leftmost_leaf(), 0),
            Bound::Included(key) => {
                let leaf = self.leaf_for(key);
                (leaf, self.leaf(leaf).keys.partition_point(|k| k < key))
            }
            Bound::Excluded(key) => {
                let leaf = self.leaf_for(key);
                (leaf, self.leaf(leaf).keys.partition_point(|k| k <= key))
            }
        };
        Iter {
            tree: self,
            leaf: Some(leaf),
            slot,
        }
    }

    /// All entries in key order.
    pub fn iter(&self) -> Iter<'_, K, V> {
        self.range_from(Bound::Unbounded)
    }

    /// Checks every structural invariant and panics with the first broken one: sorted keys,
    /// separators that bound their subtrees, node sizes within the fan-out, all leaves at one
    /// depth, a leaf chain that visits every leaf in order, and the entry count.
    pub fn check(&self) {
        let mut leaves = Vec::new();
        let count = self.check_node(self.root, None, None, 1, self.depth(), &mut leaves);
        assert_eq!(count, self.len, "entry count");
        let mut chain = Vec::new();
        let mut next = Some(self.leftmost_leaf());
        while let Some(id) = next {
            chain.push(id);
            next = self.leaf(id).next;
        }
        assert_eq!(chain, leaves, "the leaf chain skips or repeats a leaf");
        let live = self.nodes.len() - self.free.len();
        let reachable = self.count_nodes(self.root);
        assert_eq!(live, reachable, "nodes leaked from the arena");
    }

    fn check_node(
        &self,
        id: NodeId,
        low: Option<&K>,
        high: Option<&K>,
        level: usize,
        depth: usize,
        leaves: &mut Vec<NodeId>,
    ) -> usize {
        let min = self.min_size();
        let is_root = id == self.root;
        match &self.nodes[id.index()] {
            Node::Leaf(leaf) => {
                assert_eq!(level, depth, "leaves at different depths");
                assert_eq!(leaf.keys.len(), leaf.values.len());
                assert!(leaf.keys.len() <= self.fanout, "overfull leaf");
                assert!(is_root || leaf.keys.len() >= min, "underfull leaf");
                assert!(leaf.keys.windows(2).all(|w| w[0] < w[1]), "unsorted leaf");
                assert!(low.is_none_or(|low| leaf.keys.iter().all(|k| k >= low)));
                assert!(high.is_none_or(|high| leaf.keys.iter().all(|k| k < high)));
                leaves.push(id);
                leaf.keys.len()
            }
            Node::Internal(internal) => {
                let children = internal.children.len();
                assert_eq!(internal.separators.len() + 1, children);
                assert!(children <= self.fanout, "overfull internal node");
                assert!(children >= if is_root { 2 } else { min }, "underfull node");
                let separators = &internal.separators;
                assert!(separators.windows(2).all(|w| w[0] < w[1]), "unsorted node");
                (0..children)
                    .map(|i| {
                        let low = if i == 0 {
                            low
                        } else {
                            Some(&separators[i - 1])
                        };
                        let high = separators.get(i).or(high);
                        let child = internal.children[i];
                        self.check_node(child, low, high, level + 1, depth, leaves)
                    })
                    .sum()
            }
            Node::Free => panic!("a freed node is still linked"),
        }
    }

    fn count_nodes(&self, id: NodeId) -> usize {
        match &self.nodes[id.index()] {
            Node::Internal(internal) => {
                1 + internal
                    .children
                    .iter()
                    .map(|&child| self.count_nodes(child))
                    .sum::<usize>()
            }
            _ => 1,
        }
    }

    /// The fewest entries or children a node other than the root holds.
    fn min_size(&self) -> usize {
        self.fanout / 2
    }

    fn leaf(&self, id: NodeId) -> &Leaf<K, V> {
        match &self.nodes[id.index()] {
            Node::Leaf(leaf) => leaf,
            _ => unreachable!("node {id:?} is not a leaf"),
        }
    }

    /// The leaf that holds `key` if the tree does.
    fn leaf_for(&self, key: &K) -> NodeId {
        let mut node = self.root;
        while let Node::Internal(internal) = &self.nodes[node.index()] {
            node = internal.children[internal.child_for(key)];
        }
        node
    }

    fn leftmost_leaf(&self) -> NodeId {
        let mut node = self.root;
        while let Node::Internal(internal) = &self.nodes[node.index()] {
            node = internal.children[0];
        }
        node
    }

    fn allocate(&mut self, node: Node<K, V>) -> NodeId {
        match self.free.pop() {
            Some(id) => {
                self.nodes[id.index()] = node;
                id
            }
            None => {
                let id = NodeId(u32::try_from(self.nodes.len()).expect("under 2^32 nodes"));
                self.nodes.push(node);
                id
            }
        }
    }

    fn release(&mut self, id: NodeId) {
        self.nodes[id.index()] = Node::Free;
        self.free.push(id);
    }

    fn take(&mut self, id: NodeId) -> Node<K, V> {
        std::mem::replace(&mut self.nodes[id.index()], Node::Free)
    }

    fn put(&mut self, id: NodeId, node: Node<K, V>) {
        self.nodes[id.index()] = node;
    }

    /// Inserts under `id`; gives the replaced value and, if `id` split, the separator and the
    /// new right sibling its parent must link.
    fn insert_below(&mut self, id: NodeId, key: K, value: V) -> (Option<V>, Option<(K, NodeId)>) {
        match self.take(id) {
            Node::Leaf(mut leaf) => {
                let replaced = match leaf.keys.binary_search(&key) {
                    Ok(slot) => Some(std::mem::replace(&mut leaf.values[slot], value)),
                    Err(slot) => {
                        leaf.keys.insert(slot, key);
                        leaf.values.insert(slot, value);
                        None
                    }
                };
                let split = (leaf.keys.len() > self.fanout).then(|| self.split_leaf(&mut leaf));
                self.put(id, Node::Leaf(leaf));
                (replaced, split)
            }
            Node::Internal(mut internal) => {
                let slot = internal.child_for(&key);
                let (replaced, split) = self.insert_below(internal.children[slot], key, value);
                if let Some((separator, right)) = split {
                    internal.separators.insert(slot, separator);
                    internal.children.insert(slot + 1, right);
                }
                let split = (internal.children.len() > self.fanout)
                    .then(|| self.split_internal(&mut internal));
                self.put(id, Node::Internal(internal));
                (replaced, split)
            }
            Node::Free => unreachable!("descended into a freed node"),
        }
    }

    /// Moves the upper half of an overfull leaf to a new right sibling linked after it.
    fn split_leaf(&mut self, leaf: &mut Leaf<K, V>) -> (K, NodeId) {
        let half = leaf.keys.len() / 2;
        let right = Leaf {
            keys: leaf.keys.split_off(half),
            values: leaf.values.split_off(half),
            next: leaf.next,
        };
        let separator = right.keys[0].clone();
        let right = self.allocate(Node::Leaf(right));
        leaf.next = Some(right);
        (separator, right)
    }

    /// Moves the upper half of an overfull internal node to a new right sibling; the middle
    /// separator goes up to the parent.
    fn split_internal(&mut self, internal: &mut Internal<K>) -> (K, NodeId) {
        let half = internal.separators.len() / 2;
        let mut upper = internal.separators.split_off(half);
        let separator = upper.remove(0);
        let right = Internal {
            separators: upper,
            children: internal.children.split_off(half + 1),
        };
        (separator, self.allocate(Node::Internal(right)))
    }

    /// Removes `key` under `id`, rebalancing any child left underfull on the way back up.
    fn remove_below(&mut self, id: NodeId, key: &K) -> Option<V> {
        let slot = match &mut self.nodes[id.index()] {
            Node::Leaf(leaf) => {
                let slot = leaf.keys.binary_search(key).ok()?;
                leaf.keys.remove(slot);
                return Some(leaf.values.remove(slot));
            }
            Node::Internal(internal) => internal.child_for(key),
            Node::Free => unreachable!("descended into a freed node"),
        };
        let child = self.internal(id).children[slot];
        let removed = self.remove_below(child, key)?;
        if self.size(child) < self.min_size() {
            self.rebalance(id, slot);
        }
        Some(removed)
    }

    fn internal(&self, id: NodeId) -> &Internal<K> {
        match &self.nodes[id.index()] {
            Node::Internal(internal) => internal,
            _ => unreachable!("node {id:?} is not internal"),
        }
    }

    /// A node's entries (leaf) or children (internal node).
    fn size(&self, id: NodeId) -> usize {
        match &self.nodes[id.index()] {
            Node::Leaf(leaf) => leaf.keys.len(),
            Node::Internal(internal) => internal.children.len(),
            Node::Free => unreachable!("size of a freed node"),
        }
    }

    /// Refills the underfull child `slot` of `parent`: borrow from a sibling that can spare one,
    /// else merge with a sibling.
    fn rebalance(&mut self, parent: NodeId, slot: usize) {
        let children = &self.internal(parent).children;
        let left = slot.checked_sub(1).map(|s| children[s]);
        let right = children.get(slot + 1).copied();
        let spare =
            |sibling: Option<NodeId>| sibling.is_some_and(|s| self.size(s) > self.min_size());
        let (left_spares, right_spares) = (spare(left), spare(right));
        let mut node = match self.take(parent) {
            Node::Internal(internal) => internal,
            _ => unreachable!("a parent is internal"),
        };
        if left_spares {
            self.borrow_from_left(&mut node, slot);
        } else if right_spares {
            self.borrow_from_right(&mut node, slot);
        } else if left.is_some() {
            self.merge_children(&mut node, slot - 1);
        } else {
            self.merge_children(&mut node, slot);
        }
        self.put(parent, Node::Internal(node));
    }

    /// Moves the last entry (or child) of child `slot - 1` to the front of child `slot`.
    fn borrow_from_left(&mut self, parent: &mut Internal<K>, slot: usize) {
        let (left, child) = (parent.children[slot - 1], parent.children[slot]);
        match (self.take(left), self.take(child)) {
            (Node::Leaf(mut from), Node::Leaf(mut to)) => {
                let key = from.keys.pop().expect("a sibling with a spare entry");
                let value = from.values.pop().expect("as many values as keys");
                parent.separators[slot - 1] = key.clone();
                to.keys.insert(0, key);
                to.values.insert(0, value);
                self.put(left, Node::Leaf(from));
                self.put(child, Node::Leaf(to));
            }
            (Node::Internal(mut from), Node::Internal(mut to)) => {
                let grandchild = from.children.pop().expect("a sibling with a spare child");
                let up = from
                    .separators
                    .pop()
                    .expect("one separator fewer than children");
                let down = std::mem::replace(&mut parent.separators[slot - 1], up);
                to.separators.insert(0, down);
                to.children.insert(0, grandchild);
                self.put(left, Node::Internal(from));
                self.put(child, Node::Internal(to));
            }
            _ => unreachable!("siblings at different depths"),
        }
    }

    /// Moves the first entry (or child) of child `slot + 1` to the end of child `slot`.
    fn borrow_from_right(&mut self, parent: &mut Internal<K>, slot: usize) {
        let (child, right) = (parent.children[slot], parent.children[slot + 1]);
        match (self.take(child), self.take(right)) {
            (Node::Leaf(mut to), Node::Leaf(mut from)) => {
                to.keys.push(from.keys.remove(0));
                to.values.push(from.values.remove(0));
                parent.separators[slot] = from.keys[0].clone();
                self.put(child, Node::Leaf(to));
                self.put(right, Node::Leaf(from));
            }
            (Node::Internal(mut to), Node::Internal(mut from)) => {
                let grandchild = from.children.remove(0);
                let up = from.separators.remove(0);
                let down = std::mem::replace(&mut parent.separators[slot], up);
                to.separators.push(down);
                to.children.push(grandchild);
                self.put(child, Node::Internal(to));
                self.put(right, Node::Internal(from));
            }
            _ => unreachable!("siblings at different depths"),
        }
    }

    /// Merges child `slot + 1` into child `slot` and frees it; their separator leaves the parent.
    fn merge_children(&mut self, parent: &mut Internal<K>, slot: usize) {
        let (left, right) = (parent.children[slot], parent.children.remove(slot + 1));
        let separator = parent.separators.remove(slot);
        match (self.take(left), self.take(right)) {
            (Node::Leaf(mut into), Node::Leaf(from)) => {
                into.keys.extend(from.keys);
                into.values.extend(from.values);
                into.next = from.next;
                self.put(left, Node::Leaf(into));
            }
            (Node::Internal(mut into), Node::Internal(from)) => {
                into.separators.push(separator);
                into.separators.extend(from.separators);
                into.children.extend(from.children);
                self.put(left, Node::Internal(into));
            }
            _ => unreachable!("siblings at different depths"),
        }
        self.release(right);
    }
}

impl<K, V> Leaf<K, V> {
    fn empty() -> Leaf<K, V> {
        Leaf {
            keys: Vec::new(),
            values: Vec::new(),
            next: None,
        }
    }
}

impl<K: Ord> Internal<K> {
    /// The child whose subtree holds `key`.
    fn child_for(&self, key: &K) -> usize {
        self.separators
            .partition_point(|separator| separator <= key)
    }
}

/// The entries of a [`BPlusTree`] in key order, walking the leaf chain.
pub struct Iter<'a, K, V> {
    tree: &'a BPlusTree<K, V>,
    leaf: Option<NodeId>,
    slot: usize,
}

impl<'a, K: Ord + Clone, V> Iterator for Iter<'a, K, V> {
    type Item = (&'a K, &'a V);

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let leaf = self.tree.leaf(self.leaf?);
            if let Some(key) = leaf.keys.get(self.slot) {
                let value = &leaf.values[self.slot];
                self.slot += 1;
                return Some((key, value));
            }
            self.leaf = leaf.next;
            self.slot = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree_of(keys: impl IntoIterator<Item = u32>) -> BPlusTree<u32, u32> {
        let mut tree = BPlusTree::with_fanout(FANOUT_MIN);
        for key in keys {
            tree.insert(key, key * 10);
            tree.check();
        }
        tree
    }

    #[test]
    fn inserts_split_leaves_and_grow_the_root() {
        let tree = tree_of(0..4);
        assert_eq!(tree.depth(), 1);
        let tree = tree_of(0..5);
        assert_eq!(tree.depth(), 2, "the fifth entry splits the only leaf");
        let tree = tree_of(0..100);
        assert!(tree.depth() >= 4);
        assert_eq!(tree.len(), 100);
        assert_eq!(tree.get(&42), Some(&420));
        assert_eq!(tree.get(&100), None);
    }

    #[test]
    fn deletes_borrow_merge_and_shrink_the_root() {
        let mut tree = tree_of(0..100);
        for key in (0..100).rev().step_by(3) {
            assert_eq!(tree.remove(&key), Some(key * 10));
            tree.check();
        }
        for key in 0..100 {
            tree.remove(&key);
            tree.check();
        }
        assert!(tree.is_empty());
        assert_eq!(tree.depth(), 1);
        assert_eq!(
            tree.nodes.len() - tree.free.len(),
            1,
            "one empty leaf is left"
        );
    }

    #[test]
    fn an_insert_of_a_present_key_replaces_its_value() {
        let mut tree = tree_of(0..10);
        assert_eq!(tree.insert(3, 7), Some(30));
        assert_eq!(tree.len(), 10);
        *tree.get_mut(&3).unwrap() += 1;
        assert_eq!(tree.get(&3), Some(&8));
    }

    #[test]
    fn a_range_walks_the_leaf_chain_from_its_start() {
        let tree = tree_of((0..50).map(|k| k * 2));
        let from = |bound| {
            tree.range_from(bound)
                .take(3)
                .map(|(k, _)| *k)
                .collect::<Vec<_>>()
        };
        assert_eq!(from(Bound::Included(&10)), [10, 12, 14]);
        assert_eq!(from(Bound::Included(&11)), [12, 14, 16]);
        assert_eq!(from(Bound::Excluded(&10)), [12, 14, 16]);
        assert_eq!(from(Bound::Unbounded), [0, 2, 4]);
        assert_eq!(from(Bound::Excluded(&98)), Vec::<u32>::new());
        assert_eq!(tree.iter().count(), 50);
    }

    #[test]
    #[should_panic(expected = "below 4")]
    fn a_fanout_below_the_minimum_is_refused() {
        BPlusTree::<u32, u32>::with_fanout(3);
    }
}
