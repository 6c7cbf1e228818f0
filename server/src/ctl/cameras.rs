//! `vigil ctl cameras`: every configured camera, the node holding it, live / asleep,
//! viewers, bitrate, recording, and where it is bound and why.

use anyhow::Context;
use comfy_table::{presets::UTF8_BORDERS_ONLY, Table};

use crate::admin::cameras_api::CameraView;

pub fn show(api: &str, token: Option<&str>, json: bool) -> anyhow::Result<()> {
    let body = super::get(api, token, "/api/cameras")?;
    if json {
        println!("{}", body.trim_end());
        return Ok(());
    }
    let rows: Vec<CameraView> = serde_json::from_str(&body).context("unexpected answer")?;
    let mut t = Table::new();
    t.load_preset(UTF8_BORDERS_ONLY);
    t.set_header([
        "CAMERA",
        "SOURCE",
        "NODE",
        "STATE",
        "VIEWERS",
        "KBIT/S",
        "RECORDING",
        "BOUND",
    ]);
    let opt = |v: Option<u64>| v.map_or("-".into(), |x| x.to_string());
    for c in rows {
        t.add_row([
            c.camera,
            c.source,
            c.node.unwrap_or_else(|| "-".into()),
            c.state,
            opt(c.viewers),
            opt(c.bitrate_kbps),
            if c.recording {
                "yes".into()
            } else {
                "no".into()
            },
            c.bound,
        ]);
    }
    println!("{t}");
    Ok(())
}
