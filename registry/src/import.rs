//! Bulk imports (`POST /api/cameras/import`, `/api/users/import`, `vigil ctl … import`):
//! JSON (an array of objects) or CSV (a header row naming the columns), read whole into
//! typed rows before anything is applied; the first bad row is refused naming its number
//! (data rows from 1) and its field.
//!
//! Camera CSV columns: `id` (required), `source`, `on_demand`, `record`, `enabled`,
//! `pull_transport`, `retention_hours`, `segment_secs`, `group`, `labels` (`k=v;k2=v2`), `onvif`,
//! `onvif_profile`.
//! User CSV columns: `name` (required), `password` or `ha1_md5` + `ha1_sha256`, `read`,
//! `playback`, `publish`, `ptz`, `export` (camera patterns separated by `;`), `operate`, `admin`
//! (true/false). Empty cells take the default.

use crate::edit::UserInput;
use crate::FieldError;
use serde_json::Value;
use std::collections::BTreeMap;
use vigil_conf::{CameraConfig, PullTransport, Source};

/// One cell: a JSON value, or a CSV cell's text.
enum Cell<'a> {
    Json(&'a Value),
    Text(&'a str),
}

impl Cell<'_> {
    fn empty(&self) -> bool {
        match self {
            Cell::Json(v) => v.is_null(),
            Cell::Text(t) => t.trim().is_empty(),
        }
    }

    fn text(&self) -> Result<String, String> {
        match self {
            Cell::Json(Value::String(s)) => Ok(s.clone()),
            Cell::Json(_) => Err("must be a string".into()),
            Cell::Text(t) => Ok(t.trim().to_string()),
        }
    }

    fn bool(&self) -> Result<bool, String> {
        match self {
            Cell::Json(Value::Bool(b)) => Ok(*b),
            Cell::Json(_) => Err("must be true or false".into()),
            Cell::Text(t) => match t.trim().to_ascii_lowercase().as_str() {
                "true" | "yes" | "1" => Ok(true),
                "false" | "no" | "0" => Ok(false),
                _ => Err("must be true or false".into()),
            },
        }
    }

    fn number(&self) -> Result<f64, String> {
        match self {
            Cell::Json(Value::Number(n)) => n.as_f64().ok_or_else(|| "must be a number".into()),
            Cell::Json(_) => Err("must be a number".into()),
            Cell::Text(t) => t.trim().parse().map_err(|_| "must be a number".into()),
        }
    }

    /// A list of strings: a JSON array, or `;`-separated text.
    fn list(&self) -> Result<Vec<String>, String> {
        match self {
            Cell::Json(Value::Array(a)) => a
                .iter()
                .map(|v| {
                    v.as_str()
                        .map(str::to_string)
                        .ok_or("must be strings".to_string())
                })
                .collect(),
            Cell::Json(_) => Err("must be an array of strings".into()),
            Cell::Text(t) => Ok(t
                .split(';')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .collect()),
        }
    }

    /// `key=value` labels: a JSON object of strings, or `k=v;k2=v2`.
    fn labels(&self) -> Result<BTreeMap<String, String>, String> {
        match self {
            Cell::Json(Value::Object(o)) => o
                .iter()
                .map(|(k, v)| {
                    Ok((
                        k.clone(),
                        v.as_str().ok_or("values must be strings")?.to_string(),
                    ))
                })
                .collect(),
            Cell::Json(_) => Err("must be an object of strings".into()),
            Cell::Text(t) => t
                .split(';')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(|kv| {
                    let (k, v) = kv.split_once('=').ok_or("write labels as k=v;k2=v2")?;
                    Ok((k.trim().to_string(), v.trim().to_string()))
                })
                .collect(),
        }
    }
}

const CAMERA_FIELDS: [&str; 12] = [
    "id",
    "source",
    "on_demand",
    "record",
    "enabled",
    "pull_transport",
    "retention_hours",
    "segment_secs",
    "group",
    "labels",
    "onvif",
    "onvif_profile",
];

fn set_camera(cam: &mut CameraConfig, field: &str, cell: &Cell) -> Result<(), String> {
    if cell.empty() {
        return Ok(());
    }
    match field {
        "id" => cam.id = cell.text()?,
        "source" => cam.source = Source::from(cell.text()?),
        "on_demand" => cam.on_demand = cell.bool()?,
        "record" => cam.record = cell.bool()?,
        "enabled" => cam.enabled = cell.bool()?,
        "pull_transport" => {
            cam.pull_transport = match cell.text()?.to_ascii_lowercase().as_str() {
                "tcp" => PullTransport::Tcp,
                "udp" => PullTransport::Udp,
                _ => return Err("must be tcp or udp".into()),
            }
        }
        "retention_hours" => cam.retention_hours = Some(cell.number()?),
        "segment_secs" => cam.segment_secs = Some(cell.number()?),
        "group" => cam.group = Some(cell.text()?),
        "labels" => cam.labels = cell.labels()?,
        "onvif" => cam.onvif = Some(cell.text()?),
        "onvif_profile" => cam.onvif_profile = Some(cell.text()?),
        _ => return Err("unknown field".into()),
    }
    Ok(())
}

/// A camera row from its cells; `id` first so errors name the camera.
fn camera_row(
    row: usize,
    cells: &mut dyn Iterator<Item = (&str, Cell<'_>)>,
) -> Result<CameraConfig, FieldError> {
    let cells: Vec<_> = cells.collect();
    let id = cells
        .iter()
        .find(|(f, _)| *f == "id")
        .and_then(|(_, c)| c.text().ok())
        .unwrap_or_default();
    let mut cam = CameraConfig::new(&id, Source::Push);
    for (field, cell) in &cells {
        set_camera(&mut cam, field, cell)
            .map_err(|m| FieldError::camera(&id, field, m).at_row(row))?;
    }
    if cam.id.is_empty() {
        return Err(FieldError::camera("", "id", "required").at_row(row));
    }
    vigil_conf::check_camera(&cam).map_err(|e| FieldError::from(e).at_row(row))?;
    Ok(cam)
}

fn json_rows(
    text: &str,
    what: &'static str,
) -> Result<Vec<serde_json::Map<String, Value>>, FieldError> {
    let whole = |m: String| FieldError {
        row: None,
        what,
        id: String::new(),
        field: "body".into(),
        message: m,
    };
    let v: Value = serde_json::from_str(text).map_err(|e| whole(format!("not JSON: {e}")))?;
    let Value::Array(rows) = v else {
        return Err(whole("must be a JSON array of objects".into()));
    };
    rows.into_iter()
        .enumerate()
        .map(|(i, r)| match r {
            Value::Object(o) => Ok(o),
            _ => Err(whole("must be an object".into()).at_row(i + 1)),
        })
        .collect()
}

/// The rows of a CSV text with its header; an unknown column is refused before any row.
fn csv_rows(
    text: &str,
    known: &[&str],
    what: &'static str,
) -> Result<(Vec<String>, Vec<csv::StringRecord>), FieldError> {
    let err = |row: Option<usize>, field: &str, m: String| FieldError {
        row,
        what,
        id: String::new(),
        field: field.into(),
        message: m,
    };
    let mut rd = csv::ReaderBuilder::new()
        .trim(csv::Trim::All)
        .from_reader(text.as_bytes());
    let header: Vec<String> = rd
        .headers()
        .map_err(|e| err(None, "header", e.to_string()))?
        .iter()
        .map(str::to_string)
        .collect();
    if let Some(bad) = header.iter().find(|h| !known.contains(&h.as_str())) {
        return Err(err(
            None,
            bad,
            format!("unknown column (known: {})", known.join(", ")),
        ));
    }
    let mut rows = Vec::new();
    for (i, r) in rd.records().enumerate() {
        rows.push(r.map_err(|e| err(Some(i + 1), "row", e.to_string()))?);
    }
    Ok((header, rows))
}

const USER_FIELDS: [&str; 11] = [
    "name",
    "password",
    "ha1_md5",
    "ha1_sha256",
    "read",
    "playback",
    "publish",
    "ptz",
    "export",
    "operate",
    "admin",
];

fn user_row(
    row: usize,
    cells: &mut dyn Iterator<Item = (&str, Cell<'_>)>,
) -> Result<UserInput, FieldError> {
    let mut u = UserInput::default();
    let cells: Vec<_> = cells.collect();
    if let Some((_, c)) = cells.iter().find(|(f, _)| *f == "name") {
        u.name = c.text().unwrap_or_default();
    }
    for (field, cell) in &cells {
        if cell.empty() {
            continue;
        }
        let set = match *field {
            "name" => cell.text().map(|t| u.name = t),
            "password" => cell.text().map(|t| u.password = Some(t)),
            "ha1_md5" => cell.text().map(|t| u.ha1_md5 = Some(t)),
            "ha1_sha256" => cell.text().map(|t| u.ha1_sha256 = Some(t)),
            "read" => cell.list().map(|l| u.read = l),
            "playback" => cell.list().map(|l| u.playback = l),
            "publish" => cell.list().map(|l| u.publish = l),
            "ptz" => cell.list().map(|l| u.ptz = l),
            "export" => cell.list().map(|l| u.export = l),
            "operate" => cell.bool().map(|b| u.operate = b),
            "admin" => cell.bool().map(|b| u.admin = b),
            _ => Err("unknown field".into()),
        };
        set.map_err(|m| FieldError::user(&u.name, field, m).at_row(row))?;
    }
    if u.name.is_empty() {
        return Err(FieldError::user("", "name", "required").at_row(row));
    }
    Ok(u)
}

/// One row's cells (field name, cell) → its typed row, or the refusal naming row and field.
type RowFn<'a, T> =
    &'a dyn Fn(usize, &mut dyn Iterator<Item = (&str, Cell<'_>)>) -> Result<T, FieldError>;

/// Every row of a JSON array of objects through `row`.
fn from_json<T>(text: &str, what: &'static str, row: RowFn<'_, T>) -> Result<Vec<T>, FieldError> {
    json_rows(text, what)?
        .iter()
        .enumerate()
        .map(|(i, o)| {
            row(
                i + 1,
                &mut o.iter().map(|(k, v)| (k.as_str(), Cell::Json(v))),
            )
        })
        .collect()
}

/// Every row of a CSV text (header first, columns among `known`) through `row`.
fn from_csv<T>(
    text: &str,
    what: &'static str,
    known: &[&str],
    row: RowFn<'_, T>,
) -> Result<Vec<T>, FieldError> {
    let (header, rows) = csv_rows(text, known, what)?;
    rows.iter()
        .enumerate()
        .map(|(i, r)| {
            let mut cells = header
                .iter()
                .map(String::as_str)
                .zip(r.iter().map(Cell::Text));
            row(i + 1, &mut cells)
        })
        .collect()
}

pub fn cameras_from_json(text: &str) -> Result<Vec<CameraConfig>, FieldError> {
    from_json(text, "camera", &|i, cells| camera_row(i, cells))
}

pub fn cameras_from_csv(text: &str) -> Result<Vec<CameraConfig>, FieldError> {
    from_csv(text, "camera", &CAMERA_FIELDS, &|i, cells| {
        camera_row(i, cells)
    })
}

pub fn users_from_json(text: &str) -> Result<Vec<UserInput>, FieldError> {
    from_json(text, "user", &|i, cells| user_row(i, cells))
}

pub fn users_from_csv(text: &str) -> Result<Vec<UserInput>, FieldError> {
    from_csv(text, "user", &USER_FIELDS, &|i, cells| user_row(i, cells))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_and_json_give_the_same_cameras() {
        let csv = "id,source,on_demand,record,labels,group\n\
                   gate,rtsp://h/gate,no,yes,site=north;floor=1,lobby\n\
                   door,push,,false,,\n";
        let json = r#"[{"id":"gate","source":"rtsp://h/gate","on_demand":false,"record":true,
                        "labels":{"site":"north","floor":"1"},"group":"lobby"},
                       {"id":"door","source":"push","record":false}]"#;
        let a = cameras_from_csv(csv).unwrap();
        assert_eq!(a, cameras_from_json(json).unwrap());
        assert_eq!(a[0].labels["floor"], "1");
        assert!(!a[0].on_demand && a[0].record && !a[1].record);
    }

    #[test]
    fn the_first_bad_row_is_named_with_its_field() {
        let e = cameras_from_csv("id,source\na,push\nb,http://x/y\n").unwrap_err();
        assert_eq!((e.row, e.field.as_str()), (Some(2), "source"));
        let e = cameras_from_csv("id,colour\na,red\n").unwrap_err();
        assert_eq!((e.row, e.field.as_str()), (None, "colour"));
        let e = cameras_from_csv("id,record\na,perhaps\n").unwrap_err();
        assert_eq!((e.row, e.field.as_str()), (Some(1), "record"));
        let e = cameras_from_csv("id,source\na,push,extra\n").unwrap_err();
        assert_eq!(e.row, Some(1));
        let e = cameras_from_json(r#"[{"id":"a"},{"id":"b","segment_secs":"x"}]"#).unwrap_err();
        assert_eq!((e.row, e.field.as_str()), (Some(2), "segment_secs"));
        let e = cameras_from_json(r#"[{"source":"push"}]"#).unwrap_err();
        assert_eq!((e.row, e.field.as_str()), (Some(1), "id"));
        let e = cameras_from_json(r#"{"id":"a"}"#).unwrap_err();
        assert_eq!(e.field, "body");
        let e = cameras_from_json(r#"[{"id":"a/.."}]"#).unwrap_err();
        assert_eq!((e.row, e.field.as_str()), (Some(1), "id"));
    }

    #[test]
    fn users_import_with_patterns_lists() {
        let u =
            users_from_csv("name,password,read,publish\nalice,pw,gate-*;door,gate-1\n").unwrap();
        assert_eq!(u[0].read, ["gate-*", "door"]);
        assert_eq!(u[0].publish, ["gate-1"]);
        let e = users_from_json(r#"[{"name":"bob","read":"*"}]"#).unwrap_err();
        assert_eq!((e.row, e.field.as_str()), (Some(1), "read"));
    }
}
