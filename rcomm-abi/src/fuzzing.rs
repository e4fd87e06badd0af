//! The handle decoder's fuzzing entry point (fuzz/fuzz_targets/abi_handles.rs and this
//! crate's proptest): the bytes drive inserts, removals and look-ups of arbitrary values in a
//! handle table, checked against a model of which handles are live.

use crate::handles::{Kind, Table, decode, encode};
use std::collections::BTreeMap;

/// Runs one input. Panics when a look-up finds an object under a handle that is not live, or
/// misses a live one, or when decoding and encoding disagree.
pub fn handles(data: &[u8]) {
    let mut table = Table::new(Kind::Request);
    let mut live: BTreeMap<usize, u32> = BTreeMap::new();
    let mut next = 0u32;
    let it = data.chunks(9);
    for op in it {
        let Some((&code, rest)) = op.split_first() else {
            break;
        };
        let mut word = [0u8; 8];
        word[..rest.len()].copy_from_slice(rest);
        let value = usize::from_le_bytes(word);
        if let Some(d) = decode(value) {
            assert_eq!(encode(d.kind, d.generation, d.index), value, "{value:#x}");
        }
        match code % 4 {
            0 => {
                if let Some(h) = table.insert(next) {
                    assert!(live.insert(h, next).is_none(), "handle {h:#x} given twice");
                    next += 1;
                }
            }
            1 => {
                // Remove an arbitrary value, or a live one picked by the value.
                let h = if value & 1 == 0 || live.is_empty() {
                    value
                } else {
                    *live.keys().nth(value / 2 % live.len()).unwrap_or(&value)
                };
                assert_eq!(table.remove(h), live.remove(&h), "remove {h:#x}");
            }
            _ => assert_eq!(table.get(value), live.get(&value), "get {value:#x}"),
        }
    }
    for (h, v) in &live {
        assert_eq!(table.get(*h), Some(v));
    }
    assert_eq!(table.len(), live.len());
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]
        #[test]
        fn handle_tables_follow_the_model(data in proptest::collection::vec(any::<u8>(), 0..2000)) {
            super::handles(&data);
        }
    }

    /// Inserts, then looks up the exact handles made and their neighbours.
    #[test]
    fn a_seeded_run() {
        let mut data = Vec::new();
        for _ in 0..50 {
            data.extend_from_slice(&[0; 9]);
        }
        for i in 0..50u64 {
            data.push(2);
            data.extend_from_slice(&(((5u64) << 26) | i).to_le_bytes());
            data.push(1);
            data.extend_from_slice(&(((5u64) << 26) | i).to_le_bytes());
        }
        super::handles(&data);
    }
}
