//! The operators' edits of the registry, pure: each takes a version and gives the next one
//! and what changed, or refuses as a whole (an import with one bad row changes nothing).

use crate::model::{seal, Registry, StoredCamera};
use crate::secret::SecretKey;
use crate::{FieldError, RegistryError};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashSet};
use vigil_conf::{CameraConfig, PullTransport, Rights, Source, TokenConfig, UserConfig};

/// One change of a version, for the change log and `vigil_registry_changes_total{kind}`:
/// field names only (a source's URL may hold a password, a user's hashes are secrets).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChangeItem {
    /// `camera_added`, `camera_changed`, `camera_removed`, `user_added`, …
    pub kind: String,
    pub id: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fields: Vec<String>,
}

/// What `PUT /api/cameras/{id}` and `vigil ctl camera set` change; absent fields keep their
/// value. A new `source` replaces the old one with its password (none if it has none).
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct CameraPatch {
    pub source: Option<Source>,
    pub on_demand: Option<bool>,
    pub pull_transport: Option<PullTransport>,
    pub record: Option<bool>,
    pub enabled: Option<bool>,
    pub retention_hours: Option<f64>,
    pub segment_secs: Option<f64>,
    pub labels: Option<BTreeMap<String, String>>,
    /// `""` clears the group.
    pub group: Option<String>,
    /// The ONVIF device service; `""` clears it.
    pub onvif: Option<String>,
    /// The ONVIF profile token; `""` clears it.
    pub onvif_profile: Option<String>,
}

/// A user as the API and imports take it: a password (hashed with the node's realm into
/// HA1, never stored) or the two HA1 hashes, and rights.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UserInput {
    pub name: String,
    #[serde(default)]
    pub password: Option<String>,
    #[serde(default)]
    pub ha1_md5: Option<String>,
    #[serde(default)]
    pub ha1_sha256: Option<String>,
    #[serde(default)]
    pub read: Vec<String>,
    #[serde(default)]
    pub playback: Vec<String>,
    #[serde(default)]
    pub publish: Vec<String>,
    #[serde(default)]
    pub ptz: Vec<String>,
    #[serde(default)]
    pub export: Vec<String>,
    #[serde(default)]
    pub operate: bool,
    #[serde(default)]
    pub admin: bool,
}

/// HA1 = (MD5, SHA-256) of `name:realm:password`; the node supplies it with its realm.
pub type Hasher<'a> = &'a dyn Fn(&str, &str) -> (String, String);

impl UserInput {
    pub fn into_user(self, hash: Hasher<'_>) -> Result<UserConfig, FieldError> {
        let (ha1_md5, ha1_sha256) = match (self.password, self.ha1_md5, self.ha1_sha256) {
            (Some(p), None, None) if !p.is_empty() => hash(&self.name, &p),
            (None, Some(m), Some(s)) => (m, s),
            _ => {
                return Err(FieldError::user(
                    &self.name,
                    "password",
                    "give a password, or both ha1_md5 and ha1_sha256",
                ))
            }
        };
        let user = UserConfig {
            name: self.name,
            ha1_md5,
            ha1_sha256,
            rights: Rights {
                read: self.read,
                playback: self.playback,
                publish: self.publish,
                ptz: self.ptz,
                export: self.export,
                operate: self.operate,
                admin: self.admin,
                metrics: false,
            },
        };
        vigil_conf::check_user(&user)?;
        Ok(user)
    }
}

/// What `PUT /api/users/{name}` changes; absent fields keep their value.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct UserPatch {
    /// New HA1 hashes (from a new password).
    pub ha1: Option<(String, String)>,
    pub read: Option<Vec<String>>,
    pub playback: Option<Vec<String>>,
    pub publish: Option<Vec<String>>,
    pub ptz: Option<Vec<String>>,
    pub export: Option<Vec<String>>,
    pub operate: Option<bool>,
    pub admin: Option<bool>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Edit {
    AddCamera(CameraConfig),
    SetCamera {
        id: String,
        patch: CameraPatch,
    },
    RemoveCamera(String),
    /// Adds or replaces each camera (ids unique within the import).
    ImportCameras(Vec<CameraConfig>),
    AddUser(UserConfig),
    SetUser {
        name: String,
        patch: UserPatch,
    },
    RemoveUser(String),
    /// Adds or replaces each user (names unique within the import).
    ImportUsers(Vec<UserConfig>),
    AddToken(TokenConfig),
    RemoveToken(String),
}

/// The next version after `edit`, and what it changed; the registry is untouched on error.
pub fn apply(
    reg: &Registry,
    edit: &Edit,
    key: Option<&SecretKey>,
) -> Result<(Registry, Vec<ChangeItem>), RegistryError> {
    let mut next = reg.clone();
    let mut items = Vec::new();
    match edit {
        Edit::AddCamera(cam) => {
            vigil_conf::check_camera(cam).map_err(FieldError::from)?;
            if reg.cameras.contains_key(&cam.id) {
                return Err(RegistryError::Exists {
                    what: "camera",
                    id: cam.id.clone(),
                });
            }
            next.cameras.insert(cam.id.clone(), seal(cam, key)?);
            items.push(item("camera_added", &cam.id, Vec::new()));
        }
        Edit::SetCamera { id, patch } => {
            let old = reg.cameras.get(id).ok_or_else(|| RegistryError::NotFound {
                what: "camera",
                id: id.clone(),
            })?;
            let new = patched(old, patch, key)?;
            let fields = camera_fields(old, &new, patch.source.is_some());
            if !fields.is_empty() {
                items.push(item("camera_changed", id, fields));
            }
            next.cameras.insert(id.clone(), new);
        }
        Edit::RemoveCamera(id) => {
            next.cameras
                .remove(id)
                .ok_or_else(|| RegistryError::NotFound {
                    what: "camera",
                    id: id.clone(),
                })?;
            items.push(item("camera_removed", id, Vec::new()));
        }
        Edit::ImportCameras(cams) => {
            let mut seen = HashSet::new();
            for (row, cam) in cams.iter().enumerate() {
                let at = |e: FieldError| e.at_row(row + 1);
                vigil_conf::check_camera(cam).map_err(|e| at(e.into()))?;
                if !seen.insert(cam.id.as_str()) {
                    return Err(at(FieldError::camera(
                        &cam.id,
                        "id",
                        "listed twice in the import",
                    ))
                    .into());
                }
                let stored = seal(cam, key).map_err(at)?;
                match reg.cameras.get(&cam.id) {
                    None => items.push(item("camera_added", &cam.id, Vec::new())),
                    Some(old) => {
                        let fields = camera_fields(old, &stored, true);
                        if !fields.is_empty() {
                            items.push(item("camera_changed", &cam.id, fields));
                        }
                    }
                }
                next.cameras.insert(cam.id.clone(), stored);
            }
        }
        Edit::AddUser(u) => {
            vigil_conf::check_user(u).map_err(FieldError::from)?;
            if reg.users.contains_key(&u.name) {
                return Err(RegistryError::Exists {
                    what: "user",
                    id: u.name.clone(),
                });
            }
            next.users.insert(u.name.clone(), u.clone());
            items.push(item("user_added", &u.name, Vec::new()));
        }
        Edit::SetUser { name, patch } => {
            let old = reg.users.get(name).ok_or_else(|| RegistryError::NotFound {
                what: "user",
                id: name.clone(),
            })?;
            let mut u = old.clone();
            let mut fields = Vec::new();
            if let Some((m, s)) = &patch.ha1 {
                (u.ha1_md5, u.ha1_sha256) = (m.clone(), s.clone());
                fields.push("password".to_string());
            }
            for (name, new, slot) in [
                ("read", &patch.read, &mut u.rights.read),
                ("playback", &patch.playback, &mut u.rights.playback),
                ("publish", &patch.publish, &mut u.rights.publish),
                ("ptz", &patch.ptz, &mut u.rights.ptz),
                ("export", &patch.export, &mut u.rights.export),
            ] {
                if let Some(v) = new {
                    if v != slot {
                        *slot = v.clone();
                        fields.push(name.to_string());
                    }
                }
            }
            for (name, new, slot) in [
                ("operate", patch.operate, &mut u.rights.operate),
                ("admin", patch.admin, &mut u.rights.admin),
            ] {
                if let Some(v) = new {
                    if v != *slot {
                        *slot = v;
                        fields.push(name.to_string());
                    }
                }
            }
            vigil_conf::check_user(&u).map_err(FieldError::from)?;
            if !fields.is_empty() {
                items.push(item("user_changed", name, fields));
            }
            next.users.insert(name.clone(), u);
        }
        Edit::RemoveUser(name) => {
            next.users
                .remove(name)
                .ok_or_else(|| RegistryError::NotFound {
                    what: "user",
                    id: name.clone(),
                })?;
            items.push(item("user_removed", name, Vec::new()));
        }
        Edit::ImportUsers(users) => {
            let mut seen = HashSet::new();
            for (row, u) in users.iter().enumerate() {
                let at = |e: FieldError| e.at_row(row + 1);
                vigil_conf::check_user(u).map_err(|e| at(e.into()))?;
                if !seen.insert(u.name.as_str()) {
                    return Err(at(FieldError::user(
                        &u.name,
                        "name",
                        "listed twice in the import",
                    ))
                    .into());
                }
                let kind = match reg.users.get(&u.name) {
                    None => Some("user_added"),
                    Some(old) if old != u => Some("user_changed"),
                    Some(_) => None,
                };
                if let Some(kind) = kind {
                    items.push(item(kind, &u.name, Vec::new()));
                }
                next.users.insert(u.name.clone(), u.clone());
            }
        }
        Edit::AddToken(t) => {
            vigil_conf::check_token(t).map_err(FieldError::from)?;
            if reg.tokens.contains_key(&t.name) {
                return Err(RegistryError::Exists {
                    what: "token",
                    id: t.name.clone(),
                });
            }
            next.tokens.insert(t.name.clone(), t.clone());
            items.push(item("token_added", &t.name, Vec::new()));
        }
        Edit::RemoveToken(name) => {
            next.tokens
                .remove(name)
                .ok_or_else(|| RegistryError::NotFound {
                    what: "token",
                    id: name.clone(),
                })?;
            items.push(item("token_removed", name, Vec::new()));
        }
    }
    Ok((next, items))
}

fn item(kind: &str, id: &str, fields: Vec<String>) -> ChangeItem {
    ChangeItem {
        kind: kind.into(),
        id: id.into(),
        fields,
    }
}

fn patched(
    old: &StoredCamera,
    p: &CameraPatch,
    key: Option<&SecretKey>,
) -> Result<StoredCamera, FieldError> {
    let mut cam = old.camera.clone();
    macro_rules! set {
        ($($f:ident),*) => { $( if let Some(v) = &p.$f { cam.$f = v.clone(); } )* };
    }
    set!(on_demand, pull_transport, record, enabled, labels);
    if let Some(h) = p.retention_hours {
        cam.retention_hours = Some(h);
    }
    if let Some(s) = p.segment_secs {
        cam.segment_secs = Some(s);
    }
    if let Some(g) = &p.group {
        cam.group = (!g.is_empty()).then(|| g.clone());
    }
    for (given, slot) in [
        (&p.onvif, &mut cam.onvif),
        (&p.onvif_profile, &mut cam.onvif_profile),
    ] {
        if let Some(v) = given {
            *slot = (!v.is_empty()).then(|| v.clone());
        }
    }
    match &p.source {
        Some(source) => {
            cam.source = source.clone();
            vigil_conf::check_camera(&cam)?;
            seal(&cam, key)
        }
        None => {
            vigil_conf::check_camera(&cam)?;
            Ok(StoredCamera {
                camera: cam,
                sealed_password: old.sealed_password.clone(),
            })
        }
    }
}

/// The fields that differ between two stored cameras; `source_given`: a source was given,
/// so a new password counts as a change even where the bare URL is the same.
fn camera_fields(old: &StoredCamera, new: &StoredCamera, source_given: bool) -> Vec<String> {
    let (a, b) = (&old.camera, &new.camera);
    let mut out = Vec::new();
    let password_given =
        source_given && (old.sealed_password.is_some() || new.sealed_password.is_some());
    if a.source != b.source || password_given {
        out.push("source");
    }
    macro_rules! cmp {
        ($($f:ident),*) => { $( if a.$f != b.$f { out.push(stringify!($f)); } )* };
    }
    cmp!(
        on_demand,
        pull_transport,
        record,
        enabled,
        retention_hours,
        segment_secs,
        labels,
        group,
        onvif,
        onvif_profile
    );
    out.into_iter().map(str::to_string).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pull(id: &str, url: &str) -> CameraConfig {
        CameraConfig::new(id, Source::Pull { url: url.into() })
    }

    fn key() -> SecretKey {
        SecretKey::from_bytes([3; 32])
    }

    #[test]
    fn add_set_and_remove_say_what_changed() {
        let k = key();
        let (r1, items) = apply(
            &Registry::default(),
            &Edit::AddCamera(pull("gate", "rtsp://u:pw@h/a")),
            Some(&k),
        )
        .unwrap();
        assert_eq!(items, vec![item("camera_added", "gate", vec![])]);
        let e = apply(&r1, &Edit::AddCamera(pull("gate", "rtsp://h/b")), Some(&k)).unwrap_err();
        assert!(matches!(e, RegistryError::Exists { .. }), "{e}");
        // A patch without a source keeps the sealed password.
        let patch = CameraPatch {
            enabled: Some(false),
            group: Some("north".into()),
            ..Default::default()
        };
        let (r2, items) = apply(
            &r1,
            &Edit::SetCamera {
                id: "gate".into(),
                patch,
            },
            Some(&k),
        )
        .unwrap();
        assert_eq!(items[0].fields, ["enabled", "group"]);
        assert_eq!(
            r2.cameras["gate"].sealed_password,
            r1.cameras["gate"].sealed_password
        );
        // Re-pointed: source named, the new URL has no password, so none is kept.
        let patch = CameraPatch {
            source: Some(Source::Pull {
                url: "rtsp://h2/b".into(),
            }),
            ..Default::default()
        };
        let (r3, items) = apply(
            &r2,
            &Edit::SetCamera {
                id: "gate".into(),
                patch,
            },
            Some(&k),
        )
        .unwrap();
        assert_eq!(items[0].fields, ["source"]);
        assert!(r3.cameras["gate"].sealed_password.is_none());
        let (r4, items) = apply(&r3, &Edit::RemoveCamera("gate".into()), None).unwrap();
        assert!(r4.cameras.is_empty() && items[0].kind == "camera_removed");
        let e = apply(&r4, &Edit::RemoveCamera("gate".into()), None).unwrap_err();
        assert!(matches!(e, RegistryError::NotFound { .. }));
    }

    #[test]
    fn bad_input_is_refused_naming_the_field_and_nothing_changes() {
        let reg = Registry::default();
        for (cam, field) in [
            (CameraConfig::new("../x", Source::Push), "id"),
            (CameraConfig::new("a/b", Source::Push), "id"),
            (CameraConfig::new("", Source::Push), "id"),
            (pull("a", "http://h/x"), "source"),
            (pull("a", "file:///etc/passwd"), "source"),
            (pull("a", "rtsp://"), "source"),
            (
                CameraConfig {
                    segment_secs: Some(0.1),
                    ..CameraConfig::new("a", Source::Push)
                },
                "segment_secs",
            ),
            (
                CameraConfig {
                    retention_hours: Some(f64::NAN),
                    ..CameraConfig::new("a", Source::Push)
                },
                "retention_hours",
            ),
            (
                CameraConfig {
                    group: Some("x\ny".into()),
                    ..CameraConfig::new("a", Source::Push)
                },
                "group",
            ),
        ] {
            match apply(&reg, &Edit::AddCamera(cam.clone()), None) {
                Err(RegistryError::Invalid(e)) => assert_eq!(e.field, field, "{cam:?}: {e}"),
                other => panic!("{cam:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn an_import_is_all_or_nothing_and_names_the_row() {
        let (reg, _) = apply(
            &Registry::default(),
            &Edit::AddCamera(CameraConfig::new("old", Source::Push)),
            None,
        )
        .unwrap();
        let mut cams: Vec<_> = (0..5)
            .map(|i| pull(&format!("c{i}"), "rtsp://h/x"))
            .collect();
        cams[3].source = Source::Pull {
            url: "ftp://h/x".into(),
        };
        let Err(RegistryError::Invalid(e)) = apply(&reg, &Edit::ImportCameras(cams.clone()), None)
        else {
            panic!("refused")
        };
        assert_eq!((e.row, e.field.as_str()), (Some(4), "source"));
        assert!(
            e.to_string().starts_with("row 4: camera \"c3\": source"),
            "{e}"
        );
        cams[3] = pull("c1", "rtsp://h/y");
        let Err(RegistryError::Invalid(e)) = apply(&reg, &Edit::ImportCameras(cams.clone()), None)
        else {
            panic!("refused")
        };
        assert_eq!((e.row, e.field.as_str()), (Some(4), "id"));
        cams[3] = pull("old", "rtsp://h/y");
        let (next, items) = apply(&reg, &Edit::ImportCameras(cams), None).unwrap();
        assert_eq!(next.cameras.len(), 5);
        assert_eq!(items.iter().filter(|i| i.kind == "camera_added").count(), 4);
        assert_eq!(
            items.iter().filter(|i| i.kind == "camera_changed").count(),
            1
        );
    }

    #[test]
    fn users_take_a_password_as_ha1_only() {
        let hash = |n: &str, p: &str| (format!("{:0>32}", n.len() + p.len()), "a".repeat(64));
        let input = UserInput {
            name: "alice".into(),
            password: Some("secret".into()),
            read: vec!["*".into()],
            ..Default::default()
        };
        let u = input.clone().into_user(&hash).unwrap();
        assert!(!format!("{u:?}").contains("secret"));
        let e = UserInput {
            password: None,
            ..input.clone()
        }
        .into_user(&hash)
        .unwrap_err();
        assert_eq!(e.field, "password");
        let e = UserInput {
            name: "a:b".into(),
            ..input
        }
        .into_user(&hash)
        .unwrap_err();
        assert_eq!(e.field, "name");
        let (r, _) = apply(&Registry::default(), &Edit::AddUser(u.clone()), None).unwrap();
        let patch = UserPatch {
            read: Some(vec!["gate-*".into()]),
            ..Default::default()
        };
        let (r, items) = apply(
            &r,
            &Edit::SetUser {
                name: "alice".into(),
                patch,
            },
            None,
        )
        .unwrap();
        assert_eq!(items[0].fields, ["read"]);
        assert_eq!(r.users["alice"].rights.read, ["gate-*"]);
        let Err(RegistryError::Invalid(e)) =
            apply(&r, &Edit::ImportUsers(vec![u.clone(), u]), None)
        else {
            panic!()
        };
        assert_eq!(e.row, Some(2));
    }

    #[test]
    fn the_onvif_device_and_profile_are_set_cleared_and_checked() {
        let k = key();
        let mut cam = pull("gate", "rtsp://u:p@h/a");
        cam.onvif = Some("http://h/onvif/device_service".into());
        cam.onvif_profile = Some("Profile_1".into());
        let (r1, _) = apply(
            &Registry::default(),
            &Edit::AddCamera(cam.clone()),
            Some(&k),
        )
        .unwrap();
        assert_eq!(r1.cameras["gate"].camera.onvif, cam.onvif);
        let patch = CameraPatch {
            onvif: Some(String::new()),
            onvif_profile: Some("Profile_2".into()),
            ..Default::default()
        };
        let edit = Edit::SetCamera {
            id: "gate".into(),
            patch,
        };
        let (r2, items) = apply(&r1, &edit, Some(&k)).unwrap();
        assert_eq!(items[0].fields, ["onvif", "onvif_profile"]);
        assert_eq!(r2.cameras["gate"].camera.onvif, None);
        for bad in ["http://u:p@h/onvif", "ftp://h/x", "http://", "http://h/a b"] {
            let mut c = pull("other", "rtsp://h/a");
            c.onvif = Some(bad.into());
            let e = apply(&r1, &Edit::AddCamera(c), Some(&k)).unwrap_err();
            assert!(e.to_string().contains("onvif"), "{bad}: {e}");
        }
    }
}
