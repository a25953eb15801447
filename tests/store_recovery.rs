//! A data dir the daemon cannot use must give a clear message and a recovery (move it aside:
//! the cache rebuilds from VK), never a panic or a silent reset: an incompatible schema, and
//! files overwritten with garbage.

use vk_observer_store::{StoreOwner, StoreSettings};

#[test]
fn an_incompatible_schema_is_refused_with_the_recovery() {
    let dir = tempfile::tempdir().unwrap();
    let owner = StoreOwner::open(dir.path(), Default::default()).unwrap();
    owner.flush().unwrap();
    drop(owner);
    {
        let db = sled_open(dir.path());
        let tree = db.open_tree("projections").unwrap();
        let mut key = vec![0u8];
        key.extend_from_slice(b"schema");
        assert!(
            tree.get(&key).unwrap().is_some(),
            "schema key layout changed"
        );
        tree.insert(key, 999u32.to_be_bytes().to_vec()).unwrap();
        db.flush().unwrap();
    }
    let err = StoreOwner::open(dir.path(), Default::default())
        .err()
        .expect("refused")
        .to_string();
    assert!(err.contains("move the directory aside"), "{err}");
    assert!(err.contains("rebuild"), "{err}");
}

#[test]
fn garbage_files_are_an_error_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let owner = StoreOwner::open(dir.path(), Default::default()).unwrap();
    owner.flush().unwrap();
    drop(owner);
    let mut n = 0;
    for entry in walk(dir.path()) {
        let len = std::fs::metadata(&entry).map(|m| m.len()).unwrap_or(0) as usize;
        let junk: Vec<u8> = (0..len.max(64)).map(|i| (i * 7919 % 251) as u8).collect();
        std::fs::write(&entry, junk).unwrap();
        n += 1;
    }
    assert!(n > 0, "no sled files found to corrupt");
    let r =
        std::panic::catch_unwind(|| StoreOwner::open(dir.path(), Default::default()).map(|_| ()));
    match r {
        Ok(Err(e)) => {
            let msg = e.to_string();
            assert!(msg.contains("move it aside"), "{msg}");
            eprintln!("garbage data dir refused: {msg}");
        }
        Ok(Ok(())) => panic!("a data dir of garbage opened as if it were fine"),
        Err(_) => panic!("opening a garbage data dir panicked"),
    }
}

/// sled's own open (with the compression the store was created with: the default), waiting for
/// the dropped store's flusher thread to release the lock.
fn sled_open(dir: &std::path::Path) -> sled::Db {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let config = sled::Config::new()
        .path(dir)
        .use_compression(StoreSettings::default().page_compression);
    loop {
        match config.open() {
            Ok(db) => return db,
            Err(e) if std::time::Instant::now() < deadline => {
                eprintln!("sled::open: {e}; retrying");
                std::thread::sleep(std::time::Duration::from_millis(25));
            }
            Err(e) => panic!("sled::open: {e}"),
        }
    }
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}
