//! The root's own files: the layout marker and the root's identity.

use crate::error::{IoContext, StorageError};
use std::fs;
use std::io;
use std::path::Path;

/// Marker file at the root naming the layout version, so a future layout is never misread.
pub const ROOT_MARKER: &str = "VIGIL-STORAGE";
const ROOT_MARKER_TEXT: &str = "vigil-storage 1\n";
/// File at the root holding the root's identity (32 hex digits and a newline), made by the
/// first node that opens it and never rewritten: every member of a cluster reports the id of
/// the root it opened, so a node that records to another directory (the share not mounted,
/// a typo in `[storage] root`) is told apart from one that records to the shared root
/// (`vigil ctl doctor`). The layout marker cannot do this: its text is the same in every root.
pub const ROOT_ID_FILE: &str = "VIGIL-STORAGE-ID";

/// The id in `root`'s [`ROOT_ID_FILE`]; None while no node has opened the root.
pub fn read_root_id(root: &Path) -> io::Result<Option<String>> {
    match fs::read_to_string(root.join(ROOT_ID_FILE)) {
        Ok(t) => Ok(Some(t.trim().to_string())),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// The root's id, made if the root has none. Nodes starting together on a fresh root race:
/// each writes a whole temp file and links it into place, link(2) failing for all but the
/// first (atomic on local file systems and NFS, as leases rely on), so all read one id.
pub(crate) fn ensure_root_id(root: &Path) -> Result<String, StorageError> {
    let path = root.join(ROOT_ID_FILE);
    if let Some(id) = read_root_id(root).at(&path)? {
        return Ok(id);
    }
    let id = format!(
        "{:016x}{:016x}",
        crate::lease::unique_token(),
        crate::lease::unique_token().rotate_left(29) ^ u64::from(std::process::id())
    );
    let tmp = root.join(format!(
        ".{ROOT_ID_FILE}.{:016x}.tmp",
        crate::lease::unique_token()
    ));
    fs::write(&tmp, format!("{id}\n")).at(&tmp)?;
    let linked = fs::hard_link(&tmp, &path);
    let _ = fs::remove_file(&tmp);
    match linked {
        Ok(()) => Ok(id),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => read_root_id(root)
            .at(&path)?
            .ok_or_else(|| StorageError::from_io(&path, io::ErrorKind::NotFound.into())),
        Err(e) => Err(StorageError::from_io(&path, e)),
    }
}
/// Checks the layout marker, writing it on a fresh root; another layout is refused.
pub(crate) fn ensure_layout(root: &Path) -> Result<(), StorageError> {
    let marker = root.join(ROOT_MARKER);
    match fs::read_to_string(&marker) {
        Ok(t) if t == ROOT_MARKER_TEXT => {}
        Ok(t) => {
            return Err(StorageError::Corrupt {
                path: marker,
                reason: format!("unsupported layout {:?}", t.trim()),
            })
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            // Several nodes may race here (a cluster starting on a fresh root): each
            // writes its own temp file and renames it into place, so a reader sees no
            // marker or a whole one, never the empty file a plain write shows for a
            // moment. They all write the same text; the last rename wins.
            let tmp = root.join(format!(
                ".{ROOT_MARKER}.{:016x}.tmp",
                crate::lease::unique_token()
            ));
            fs::write(&tmp, ROOT_MARKER_TEXT).at(&tmp)?;
            if let Err(e) = fs::rename(&tmp, &marker) {
                let _ = fs::remove_file(&tmp);
                return Err(StorageError::from_io(&marker, e));
            }
        }
        Err(e) => return Err(StorageError::from_io(&marker, e)),
    }
    Ok(())
}
