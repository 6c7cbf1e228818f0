//! Where the trail lives on the shared root: `<root>/audit/<node>/<YYYY-MM-DD>.jsonl`, one
//! file per node per UTC day, appended by that node alone. The share keeps the trail when
//! the node is gone; the day files make retention a matter of removing whole files and a
//! query read only the days it asks about.

use crate::audit::chain::Record;
use std::io::{BufRead, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

/// The directory of every node's trail under the storage root.
pub fn audit_dir(root: &Path) -> PathBuf {
    root.join("audit")
}

/// A node id as a directory name: ids are free text, so anything but `[A-Za-z0-9._-]` is
/// percent-escaped (no `/`, no `..`).
pub fn node_dir_name(node: &str) -> String {
    let mut out = String::new();
    for b in node.bytes() {
        if b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || (b == b'.' && !out.is_empty()) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The UTC day of `at_ms`, as the file is named.
pub fn day_of(at_ms: i64) -> String {
    jiff::Timestamp::from_millisecond(at_ms)
        .map(|t| t.strftime("%Y-%m-%d").to_string())
        .unwrap_or_else(|_| "1970-01-01".into())
}

/// The day files of one node's directory, oldest first.
pub fn day_files(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut files: Vec<PathBuf> = match std::fs::read_dir(dir) {
        Ok(rd) => rd
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|e| e == "jsonl"))
            .collect(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(e),
    };
    files.sort();
    Ok(files)
}

/// Every node directory under `audit_dir`.
pub fn node_dirs(audit: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut dirs: Vec<PathBuf> = match std::fs::read_dir(audit) {
        Ok(rd) => rd
            .filter_map(Result::ok)
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .map(|e| e.path())
            .collect(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(e),
    };
    dirs.sort();
    Ok(dirs)
}

/// The last complete line of `file` (a crash may leave a partial one after it, which the
/// writer then ends before appending), read from its end.
pub fn last_line(file: &Path) -> std::io::Result<Option<String>> {
    let mut f = std::fs::File::open(file)?;
    let len = f.metadata()?.len();
    let back = len.min(256 * 1024);
    f.seek(SeekFrom::Start(len - back))?;
    let mut tail = Vec::new();
    f.read_to_end(&mut tail)?;
    let text = String::from_utf8_lossy(&tail);
    let complete = match text.rfind('\n') {
        Some(end) => &text[..end],
        None => return Ok(None),
    };
    Ok(complete
        .rsplit('\n')
        .find(|l| !l.trim().is_empty())
        .map(str::to_string))
}

/// Whether `file` ends in the middle of a line (a crash while appending).
pub fn ends_mid_line(file: &Path) -> std::io::Result<bool> {
    let mut f = std::fs::File::open(file)?;
    let len = f.metadata()?.len();
    if len == 0 {
        return Ok(false);
    }
    f.seek(SeekFrom::Start(len - 1))?;
    let mut b = [0u8; 1];
    f.read_exact(&mut b)?;
    Ok(b[0] != b'\n')
}

/// The lines of one node's trail, oldest first, across its day files.
pub fn lines_of(dir: &Path) -> std::io::Result<Vec<String>> {
    let mut out = Vec::new();
    for f in day_files(dir)? {
        let r = std::io::BufReader::new(std::fs::File::open(&f)?);
        for line in r.lines() {
            out.push(line?);
        }
    }
    Ok(out)
}

/// What a query asks for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Query {
    pub camera: Option<String>,
    pub user: Option<String>,
    pub kind: Option<String>,
    pub from_ms: Option<i64>,
    pub to_ms: Option<i64>,
    /// Newest first (the console's view); else oldest first.
    pub newest_first: bool,
}

impl Query {
    /// Whether `r` answers the query; checkpoints never do.
    pub fn matches(&self, r: &Record) -> bool {
        r.kind != crate::audit::chain::CHECKPOINT
            && self
                .camera
                .as_ref()
                .is_none_or(|c| r.camera.as_ref() == Some(c))
            && self.user.as_ref().is_none_or(|u| &r.user == u)
            && self
                .kind
                .as_ref()
                .is_none_or(|k| r.kind == *k || r.kind.starts_with(&format!("{k}.")))
            && self.from_ms.is_none_or(|f| r.at_ms >= f)
            && self.to_ms.is_none_or(|t| r.at_ms < t)
    }

    /// Whether a day file may hold an answer (its day overlaps `[from, to)`).
    fn may_hold(&self, file: &Path) -> bool {
        let Some(day) = file.file_stem().and_then(|s| s.to_str()) else {
            return false;
        };
        self.from_ms.is_none_or(|f| day >= day_of(f).as_str())
            && self.to_ms.is_none_or(|t| day <= day_of(t).as_str())
    }
}

/// The records of every node under `audit` answering `q`, oldest first, at most `limit`
/// after skipping `skip` (the page's cursor). Unreadable lines are skipped (`verify` names
/// them). Reads only the day files the range touches.
pub fn query(audit: &Path, q: &Query, skip: usize, limit: usize) -> std::io::Result<Vec<Record>> {
    let mut found = Vec::new();
    for dir in node_dirs(audit)? {
        for f in day_files(&dir)?.into_iter().filter(|f| q.may_hold(f)) {
            let r = std::io::BufReader::new(std::fs::File::open(&f)?);
            for line in r.lines() {
                let line = line?;
                if let Ok(rec) = serde_json::from_str::<Record>(&line) {
                    if q.matches(&rec) {
                        found.push(rec);
                    }
                }
            }
        }
    }
    found.sort_by(|a, b| (a.at_ms, &a.node, a.seq).cmp(&(b.at_ms, &b.node, b.seq)));
    if q.newest_first {
        found.reverse();
    }
    Ok(found.into_iter().skip(skip).take(limit).collect())
}

/// Removes the day files of every node older than `keep_days` before `now_ms`'s day: the
/// number removed.
pub fn apply_retention(audit: &Path, now_ms: i64, keep_days: u32) -> std::io::Result<usize> {
    let cut = day_of(now_ms - i64::from(keep_days) * 86_400_000);
    let mut removed = 0;
    for dir in node_dirs(audit)? {
        for f in day_files(&dir)? {
            let old = f
                .file_stem()
                .and_then(|s| s.to_str())
                .is_some_and(|d| d < cut.as_str());
            if old {
                std::fs::remove_file(&f)?;
                removed += 1;
            }
        }
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::chain::{Chain, Event};

    #[test]
    fn node_ids_become_safe_directory_names() {
        assert_eq!(node_dir_name("node-1.site_a"), "node-1.site_a");
        assert_eq!(node_dir_name("../x"), "%2E.%2Fx");
        assert_eq!(node_dir_name("a/b c"), "a%2Fb%20c");
    }

    #[test]
    fn days_are_utc() {
        assert_eq!(day_of(0), "1970-01-01");
        assert_eq!(day_of(1_780_000_000_000), "2026-05-28");
    }

    #[test]
    fn queries_filter_and_page_across_nodes_and_retention_removes_old_days() {
        let root = tempfile::tempdir().expect("dir");
        let audit = audit_dir(root.path());
        let day = 86_400_000i64;
        let t0 = 1_780_000_000_000i64;
        for node in ["n1", "n2"] {
            let dir = audit.join(node);
            std::fs::create_dir_all(&dir).expect("dir");
            let mut c = Chain::new(node);
            for d in 0..3 {
                let mut text = String::new();
                for (i, cam) in ["gate-1", "lobby"].iter().enumerate() {
                    let line = c.append(Event {
                        at_ms: t0 + d * day + i as i64,
                        kind: "live.start".into(),
                        user: "guard".into(),
                        camera: Some(cam.to_string()),
                        ..Event::default()
                    });
                    text.push_str(&line);
                    text.push('\n');
                }
                std::fs::write(dir.join(format!("{}.jsonl", day_of(t0 + d * day))), text)
                    .expect("write");
            }
        }
        let q = Query {
            camera: Some("gate-1".into()),
            ..Query::default()
        };
        let all = query(&audit, &q, 0, 100).expect("query");
        assert_eq!(all.len(), 6);
        assert!(all.windows(2).all(|w| w[0].at_ms <= w[1].at_ms));
        let page = query(&audit, &q, 4, 100).expect("page");
        assert_eq!(page.len(), 2);
        let q = Query {
            from_ms: Some(t0 + day),
            to_ms: Some(t0 + 2 * day),
            kind: Some("live".into()),
            ..Query::default()
        };
        assert_eq!(query(&audit, &q, 0, 100).expect("range").len(), 4);
        let last = last_line(&audit.join("n1").join(format!("{}.jsonl", day_of(t0))))
            .expect("read")
            .expect("a line");
        assert!(last.contains("lobby"), "{last}");
        assert_eq!(
            apply_retention(&audit, t0 + 2 * day, 1).expect("retention"),
            2
        );
        assert_eq!(lines_of(&audit.join("n1")).expect("lines").len(), 4);
    }
}
