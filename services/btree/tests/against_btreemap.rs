//! The B⁺-tree against std's `BTreeMap`: random inserts, deletes, reads and range reads on a
//! small fan-out (so that splits, borrows, merges and root changes happen often) give the same
//! answers, and the tree's invariants hold after every step.
use std::collections::BTreeMap;
use std::ops::Bound;

use logless_btree::tree::FANOUT_MIN;
use logless_btree::BPlusTree;
use proptest::prelude::*;

#[derive(Clone, Debug)]
enum Op {
    Insert(u16, u32),
    Remove(u16),
    Get(u16),
    Range(u16, usize),
}

fn op() -> impl Strategy<Value = Op> {
    // Keys from a small space so that removes and replacing inserts hit present keys.
    let key = 0u16..300;
    prop_oneof![
        3 => (key.clone(), any::<u32>()).prop_map(|(k, v)| Op::Insert(k, v)),
        2 => key.clone().prop_map(Op::Remove),
        1 => key.clone().prop_map(Op::Get),
        1 => (key, 0usize..20).prop_map(|(k, n)| Op::Range(k, n)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn the_tree_answers_like_a_btreemap(
        fanout in FANOUT_MIN..9,
        ops in prop::collection::vec(op(), 1..600),
    ) {
        let mut tree = BPlusTree::with_fanout(fanout);
        let mut model = BTreeMap::new();
        for op in ops {
            match op {
                Op::Insert(k, v) => prop_assert_eq!(tree.insert(k, v), model.insert(k, v)),
                Op::Remove(k) => prop_assert_eq!(tree.remove(&k), model.remove(&k)),
                Op::Get(k) => prop_assert_eq!(tree.get(&k), model.get(&k)),
                Op::Range(k, n) => {
                    let got: Vec<_> = tree.range_from(Bound::Included(&k)).take(n).collect();
                    let want: Vec<_> = model.range(k..).take(n).collect();
                    prop_assert_eq!(got, want);
                }
            }
            tree.check();
            prop_assert_eq!(tree.len(), model.len());
        }
        prop_assert!(tree.iter().eq(model.iter()));
    }
}

#[test]
fn a_large_tree_fills_and_empties_in_random_order() {
    let mut tree = BPlusTree::with_fanout(FANOUT_MIN);
    // A fixed permutation of 0..5000 (multiplication by a unit mod 5000), no RNG needed.
    let keys: Vec<u32> = (0..5000u32).map(|i| i * 3037 % 5000).collect();
    for &key in &keys {
        assert_eq!(tree.insert(key, key), None);
    }
    tree.check();
    assert!(tree.depth() > 5, "a fan-out of 4 over 5000 keys is deep");
    for &key in keys.iter().rev() {
        assert_eq!(tree.remove(&key), Some(key));
    }
    tree.check();
    assert!(tree.is_empty());
    assert_eq!(tree.depth(), 1);
}
