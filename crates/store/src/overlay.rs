//! A pending write batch that can be read through: gets and prefix scans see the batch's own
//! writes over the tree's committed state, so one event batch can upsert, replace and cascade
//! deletes consistently before it is committed with a single atomic `apply_batch`.

use std::collections::{BTreeMap, BTreeSet};

pub(crate) struct Overlay<'t> {
    tree: &'t sled::Tree,
    pending: BTreeMap<Vec<u8>, Option<Vec<u8>>>,
    /// Inserts and removals so far (the writer asks which events wrote anything).
    writes: usize,
}

impl<'t> Overlay<'t> {
    pub(crate) fn new(tree: &'t sled::Tree) -> Self {
        Overlay {
            tree,
            pending: BTreeMap::new(),
            writes: 0,
        }
    }

    pub(crate) fn get(&self, key: &[u8]) -> sled::Result<Option<Vec<u8>>> {
        if let Some(v) = self.pending.get(key) {
            return Ok(v.clone());
        }
        Ok(self.tree.get(key)?.map(|v| v.to_vec()))
    }

    pub(crate) fn contains(&self, key: &[u8]) -> sled::Result<bool> {
        if let Some(v) = self.pending.get(key) {
            return Ok(v.is_some());
        }
        self.tree.contains_key(key)
    }

    pub(crate) fn insert(&mut self, key: &[u8], value: Vec<u8>) {
        self.writes += 1;
        self.pending.insert(key.to_vec(), Some(value));
    }

    pub(crate) fn remove(&mut self, key: &[u8]) {
        self.writes += 1;
        self.pending.insert(key.to_vec(), None);
    }

    /// How many inserts and removals the batch made so far.
    pub(crate) fn writes(&self) -> usize {
        self.writes
    }

    /// Keys present under `prefix`, the batch's own inserts and removals applied.
    pub(crate) fn keys_with_prefix(&self, prefix: &[u8]) -> sled::Result<BTreeSet<Vec<u8>>> {
        let mut keys = BTreeSet::new();
        for item in self.tree.scan_prefix(prefix) {
            let (k, _) = item?;
            keys.insert(k.to_vec());
        }
        for (k, v) in self
            .pending
            .range(prefix.to_vec()..)
            .take_while(|(k, _)| k.starts_with(prefix))
        {
            if v.is_some() {
                keys.insert(k.clone());
            } else {
                keys.remove(k);
            }
        }
        Ok(keys)
    }

    /// Keys in `[start, end)`, the batch's own writes applied.
    pub(crate) fn keys_in_range(
        &self,
        start: &[u8],
        end: &[u8],
    ) -> sled::Result<BTreeSet<Vec<u8>>> {
        let mut keys = BTreeSet::new();
        for item in self.tree.range(start..end) {
            let (k, _) = item?;
            keys.insert(k.to_vec());
        }
        for (k, v) in self.pending.range(start.to_vec()..end.to_vec()) {
            if v.is_some() {
                keys.insert(k.clone());
            } else {
                keys.remove(k);
            }
        }
        Ok(keys)
    }

    /// The greatest key under `prefix`, the batch's own writes applied, without a full scan.
    pub(crate) fn last_key_with_prefix(&self, prefix: &[u8]) -> sled::Result<Option<Vec<u8>>> {
        let mut from_tree = None;
        for item in self.tree.scan_prefix(prefix).rev() {
            let (k, _) = item?;
            if !matches!(self.pending.get(k.as_ref()), Some(None)) {
                from_tree = Some(k.to_vec());
                break;
            }
        }
        let from_pending = self
            .pending
            .range(prefix.to_vec()..)
            .take_while(|(k, _)| k.starts_with(prefix))
            .filter(|(_, v)| v.is_some())
            .map(|(k, _)| k.clone())
            .last();
        Ok(from_tree.max(from_pending))
    }

    /// The batch's own writes under `prefix` (None: a removal), in key order.
    pub(crate) fn pending_with_prefix(&self, prefix: &[u8]) -> Vec<(Vec<u8>, Option<Vec<u8>>)> {
        self.pending
            .range(prefix.to_vec()..)
            .take_while(|(k, _)| k.starts_with(prefix))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    /// The committed value of `key`, ignoring the batch's own writes.
    pub(crate) fn committed(&self, key: &[u8]) -> sled::Result<Option<Vec<u8>>> {
        Ok(self.tree.get(key)?.map(|v| v.to_vec()))
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }

    pub(crate) fn into_batch(self) -> sled::Batch {
        let mut b = sled::Batch::default();
        for (k, v) in self.pending {
            match v {
                Some(v) => b.insert(k, v),
                None => b.remove(k),
            }
        }
        b
    }
}
