//! The `request_id` records of the mutating tools: a tree of their own beside the projections,
//! written by the proxy (not by the projection writer: a record is not an event of VK's), built
//! only by the store that owns the files. Keys and values are opaque bytes to the store.

use super::StoreError;

/// Durable key → value records for idempotency. Cheap to clone (a sled tree handle).
#[derive(Clone)]
pub struct IdempotencyRecords {
    tree: sled::Tree,
}

impl IdempotencyRecords {
    pub(super) fn new(tree: sled::Tree) -> Self {
        IdempotencyRecords { tree }
    }

    /// Records in a throwaway database (unit tests of the proxy).
    pub fn temporary() -> Result<Self, StoreError> {
        let db = sled::Config::new().temporary(true).open()?;
        Ok(IdempotencyRecords::new(db.open_tree("idempotency")?))
    }

    pub fn get(&self, key: &[u8]) -> Result<Option<sled::IVec>, StoreError> {
        Ok(self.tree.get(key)?)
    }

    pub fn put(&self, key: &[u8], value: Vec<u8>) -> Result<(), StoreError> {
        self.tree.insert(key, value)?;
        Ok(())
    }

    pub fn remove(&self, key: &[u8]) -> Result<(), StoreError> {
        self.tree.remove(key)?;
        Ok(())
    }

    /// Make every record written so far durable.
    pub async fn flush(&self) -> Result<(), StoreError> {
        self.tree.flush_async().await?;
        Ok(())
    }

    /// Every record, in key order; unreadable ones are skipped.
    pub fn entries(&self) -> impl Iterator<Item = (sled::IVec, sled::IVec)> + '_ {
        self.tree.iter().filter_map(Result::ok)
    }

    pub fn len(&self) -> usize {
        self.tree.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tree.is_empty()
    }
}
