//! The group commit's ordering against a model file system that crashes (a power loss) after
//! every possible number of steps of a pass, and the recovery of temp segments.

use super::*;
use std::collections::{HashMap, HashSet};

/// A segment file in the model: which segment it holds and whether its data is durable.
#[derive(Clone, Copy, Debug)]
struct ModelFile {
    seg: usize,
    synced: bool,
}

/// A file system whose steps stop reaching the disk after `steps_left` of them (the machine
/// lost power there; the process's later calls do nothing).
struct ModelFs {
    files: HashMap<PathBuf, ModelFile>,
    dirs: HashSet<PathBuf>,
    steps_left: usize,
    stop_at: Option<CommitPoint>,
    sync_fails: bool,
}

impl ModelFs {
    fn step(&mut self) -> bool {
        if self.steps_left == 0 {
            return false;
        }
        self.steps_left -= 1;
        true
    }

    /// What the disk holds after the power comes back: unsynced data is gone (the file
    /// is torn), names stay as they were last set (the pessimistic case for renames).
    fn after_power_loss(&self) -> HashMap<PathBuf, ModelFile> {
        self.files.clone()
    }
}

impl CommitFs for ModelFs {
    fn sync(&mut self, batch: &[&Pending]) -> io::Result<()> {
        if self.sync_fails {
            return Err(io::Error::from_raw_os_error(libc::EIO));
        }
        if self.step() {
            for p in batch {
                if let Some(f) = self.files.get_mut(&p.tmp) {
                    f.synced = true;
                }
            }
        }
        Ok(())
    }

    fn ensure_dir(&mut self, dir: &Path) -> io::Result<()> {
        if self.step() {
            self.dirs.insert(dir.to_path_buf());
        }
        Ok(())
    }

    fn rename(&mut self, from: &Path, to: &Path) -> io::Result<()> {
        if self.step() {
            let f = self.files.remove(from).ok_or(io::ErrorKind::NotFound)?;
            assert!(self.dirs.contains(to.parent().unwrap()));
            self.files.insert(to.to_path_buf(), f);
        }
        Ok(())
    }

    fn remove(&mut self, path: &Path) {
        if self.step() {
            self.files.remove(path);
        }
    }

    fn reached(&mut self, point: CommitPoint) -> bool {
        self.stop_at != Some(point)
    }
}

const CAMERAS: usize = 4;

/// One closed segment per camera (what a batch holds), each written to its temp file.
fn batch(fs: &mut ModelFs, lease_expires_ms: i64) -> Vec<Pending> {
    (0..CAMERAS)
        .map(|cam| {
            let cam_dir = PathBuf::from(format!("/root/cameras/c{cam}"));
            let tmp = cam_dir.join(".tmp").join(format!("{cam}.seg.tmp"));
            fs.files.insert(
                tmp.clone(),
                ModelFile {
                    seg: cam,
                    synced: false,
                },
            );
            let mut meta = crate::testing::meta(&format!("c{cam}"), 1000, 2000);
            meta.file = PathBuf::from(format!("cameras/c{cam}/hour/{cam}.seg"));
            Pending {
                file: None,
                dest: cam_dir.join("hour").join(format!("{cam}.seg")),
                tmp,
                cam_dir,
                dir_name: "hour".into(),
                meta,
                lease_expires_ms,
                ticket: Arc::default(),
            }
        })
        .collect()
}

fn model(steps_left: usize) -> ModelFs {
    ModelFs {
        files: HashMap::new(),
        dirs: HashSet::new(),
        steps_left,
        stop_at: None,
        sync_fails: false,
    }
}

fn is_listed(path: &Path) -> bool {
    !path.components().any(|c| c.as_os_str() == ".tmp")
}

/// Power lost after every possible number of steps of a pass: no listed file ever holds
/// unsynced data, and after recovery (synced temp files renamed, torn ones deleted) every
/// segment not listed is one of the batch, at most one per camera.
#[test]
fn a_power_loss_anywhere_in_a_pass_never_lists_unsynced_data() {
    let full = {
        let mut fs = model(usize::MAX);
        let b = batch(&mut fs, i64::MAX);
        let out = run_pass(&mut fs, &b, 0).expect("the pass ran");
        assert!(out.iter().all(Result::is_ok));
        assert!(fs.files.keys().all(|p| is_listed(p)));
        usize::MAX - fs.steps_left
    };
    assert_eq!(
        full,
        1 + 2 * CAMERAS,
        "one sync, then a mkdir and a rename each"
    );
    for steps in 0..=full {
        let mut fs = model(steps);
        let b = batch(&mut fs, i64::MAX);
        let _ = run_pass(&mut fs, &b, 0);
        let disk = fs.after_power_loss();
        for (path, f) in &disk {
            assert!(
                !is_listed(path) || f.synced,
                "after {steps} steps {} is listed with unsynced data",
                path.display()
            );
        }
        // Recovery: a synced temp file decodes whole and is renamed; a torn one is deleted.
        let recovered: HashSet<usize> = disk.values().filter(|f| f.synced).map(|f| f.seg).collect();
        let lost: Vec<usize> = (0..CAMERAS).filter(|c| !recovered.contains(c)).collect();
        if steps == 0 {
            assert_eq!(lost.len(), CAMERAS, "nothing synced: the batch is lost");
        } else {
            assert!(lost.is_empty(), "after {steps} steps lost {lost:?}");
        }
    }
}

/// The test hook stops a pass at each point; what it leaves is what a crash there leaves.
#[test]
fn a_pass_stopped_at_a_point_renames_nothing() {
    for point in [CommitPoint::BeforeSync, CommitPoint::BeforeRename] {
        let mut fs = model(usize::MAX);
        fs.stop_at = Some(point);
        let b = batch(&mut fs, i64::MAX);
        assert!(run_pass(&mut fs, &b, 0).is_none());
        assert!(fs.files.keys().all(|p| !is_listed(p)));
        let synced = fs.files.values().filter(|f| f.synced).count();
        assert_eq!(
            synced,
            if point == CommitPoint::BeforeSync {
                0
            } else {
                CAMERAS
            }
        );
    }
}

/// A failed sync fails every segment of the batch and leaves nothing behind.
#[test]
fn a_failed_sync_fails_the_whole_batch() {
    let mut fs = model(usize::MAX);
    fs.sync_fails = true;
    let b = batch(&mut fs, i64::MAX);
    let out = run_pass(&mut fs, &b, 0).expect("the pass ran");
    assert!(out.iter().all(Result::is_err));
    assert!(fs.files.is_empty());
}

/// A pass that runs after a segment's lease deadline renames nothing of it (another node
/// may own the camera by then) and deletes it.
#[test]
fn a_pass_past_the_lease_renames_nothing() {
    let mut fs = model(usize::MAX);
    let b = batch(&mut fs, 1_000);
    let out = run_pass(&mut fs, &b, 1_000).expect("the pass ran");
    assert!(out
        .iter()
        .all(|r| matches!(r, Err(StorageError::LeaseLost { .. }))));
    assert!(fs.files.is_empty());
}

fn encoded(frames: u32) -> Vec<u8> {
    use crate::format::{encode_header, SegmentEncoder};
    let header = crate::testing::header(&[("H264", 90_000)]);
    let mut enc = SegmentEncoder::new(Vec::new(), &encode_header(&header)).unwrap();
    for n in 0..frames {
        enc.frame(&crate::Frame {
            track: 0,
            keyframe: n == 0,
            time_ms: 1_700_000_000_000 + i64::from(n) * 40,
            media_ts: u64::from(n) * 3600,
            data: bytes::Bytes::from(vec![7u8; 100]),
        })
        .unwrap();
    }
    let (out, _, _) = enc
        .finish(
            frames,
            1_700_000_000_000,
            1_700_000_000_000 + i64::from(frames) * 40,
        )
        .unwrap();
    out
}

/// A whole segment is renamed to the name its recorder would have given it; a torn one
/// (the open segment, or unsynced data after a power loss) and an empty one are deleted.
#[test]
fn recovery_renames_whole_segments_only() {
    let cam = Path::new("/r/cameras/c");
    let whole = encoded(10);
    let d = crate::format::decode_segment(bytes::Bytes::from(whole.clone())).unwrap();
    let name = crate::index::segment_file_name(
        1_700_000_000_000,
        1_700_000_000_400,
        10,
        whole.len() as u64,
        d.crc32,
    );
    assert_eq!(
        recover_plan(cam, bytes::Bytes::from(whole.clone())),
        Recovery::Rename(
            cam.join(crate::index::hour_dir_name(1_700_000_000_000))
                .join(name)
        )
    );
    let torn = &whole[..whole.len() - 10];
    assert_eq!(
        recover_plan(cam, bytes::Bytes::copy_from_slice(torn)),
        Recovery::Delete
    );
    let mut flipped = whole.clone();
    flipped[40] ^= 1;
    assert_eq!(
        recover_plan(cam, bytes::Bytes::from(flipped)),
        Recovery::Delete
    );
    assert_eq!(
        recover_plan(cam, bytes::Bytes::from(encoded(0))),
        Recovery::Delete
    );
}
