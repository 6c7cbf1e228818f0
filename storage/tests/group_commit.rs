//! Group commit on a real file system: segments are listed after their pass, never before
//! it; a pass stopped before its renames (a crash) leaves synced temp files that the next
//! owner of the camera lists.

mod common;

use common::*;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use vigil_storage::{CommitPoint, Store, StoreConfig};

fn grouped() -> StoreConfig {
    StoreConfig {
        commit_interval: Duration::from_millis(20),
        ..config()
    }
}

#[test]
fn segments_are_listed_after_their_pass() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), "n1", grouped()).unwrap();
    let mut rec = store.recorder("cam", header()).unwrap();
    let mut closed = write_all(&mut rec, av_frames(T0, 21));
    assert_eq!(closed.len(), 5);
    closed.extend(rec.finish().unwrap());
    // `finish` returns once its last segment is in place; every earlier one was before.
    assert!(files_ending(dir.path(), ".tmp").is_empty());
    let ix = store.index("cam").unwrap();
    assert_eq!(ix.segments().collect::<Vec<_>>(), closed);
    for m in ix.segments() {
        store.read_segment("cam", &m).unwrap();
    }
}

#[test]
fn a_pass_stopped_before_its_renames_is_recovered() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), "n1", grouped()).unwrap();
    // Every pass stops after its sync: a crash between the sync and the renames.
    let stopped = Arc::new(AtomicBool::new(false));
    let s = stopped.clone();
    store.set_commit_hook(Some(Arc::new(move |p| {
        let go = p != CommitPoint::BeforeRename;
        s.fetch_or(!go, Ordering::SeqCst);
        go
    })));
    let mut rec = store.recorder("cam", header()).unwrap();
    let closed = write_all(&mut rec, av_frames(T0, 6));
    assert_eq!(closed.len(), 1);
    store.flush_commits();
    assert!(stopped.load(Ordering::SeqCst));
    // Synced, not renamed: nothing listed, the closed and the open segment are temp files.
    assert!(files_ending(dir.path(), ".seg").is_empty());
    assert_eq!(files_ending(dir.path(), ".tmp").len(), 2);
    std::mem::forget(rec); // the process dies: no close, the lease stays
    drop(store);

    let store = Store::open(dir.path(), "n1", grouped()).unwrap();
    assert!(files_ending(dir.path(), ".tmp").is_empty());
    let ix = store.index("cam").unwrap();
    assert_eq!(ix.segments().collect::<Vec<_>>(), closed);
    store.read_segment("cam", &closed[0]).unwrap();
}
