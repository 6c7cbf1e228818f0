//! PTZ service (ver20): ContinuousMove, Stop, GotoPreset, SetPreset, GetPresets of a
//! profile. Velocities are clamped to the generic space's [-1, 1].

use crate::soap::body;
use crate::xml::Element;
use crate::{printable, Error};
use quick_xml::escape::escape;
use serde::Serialize;

fn unit(v: f64) -> f64 {
    if v.is_finite() {
        v.clamp(-1.0, 1.0)
    } else {
        0.0
    }
}

/// ContinuousMove of `profile` at (pan, tilt, zoom), for `timeout_ms` at most.
pub fn continuous_move(profile: &str, pan: f64, tilt: f64, zoom: f64, timeout_ms: u32) -> String {
    format!(
        "<tptz:ContinuousMove><tptz:ProfileToken>{}</tptz:ProfileToken><tptz:Velocity>\
         <tt:PanTilt x=\"{}\" y=\"{}\"/><tt:Zoom x=\"{}\"/></tptz:Velocity>\
         <tptz:Timeout>PT{}.{:03}S</tptz:Timeout></tptz:ContinuousMove>",
        escape(profile),
        unit(pan),
        unit(tilt),
        unit(zoom),
        timeout_ms / 1000,
        timeout_ms % 1000
    )
}

pub fn stop(profile: &str) -> String {
    format!(
        "<tptz:Stop><tptz:ProfileToken>{}</tptz:ProfileToken><tptz:PanTilt>true</tptz:PanTilt>\
         <tptz:Zoom>true</tptz:Zoom></tptz:Stop>",
        escape(profile)
    )
}

pub fn goto_preset(profile: &str, preset: &str) -> String {
    format!(
        "<tptz:GotoPreset><tptz:ProfileToken>{}</tptz:ProfileToken>\
         <tptz:PresetToken>{}</tptz:PresetToken></tptz:GotoPreset>",
        escape(profile),
        escape(preset)
    )
}

pub fn set_preset(profile: &str, name: &str) -> String {
    format!(
        "<tptz:SetPreset><tptz:ProfileToken>{}</tptz:ProfileToken>\
         <tptz:PresetName>{}</tptz:PresetName></tptz:SetPreset>",
        escape(profile),
        escape(name)
    )
}

pub fn get_presets(profile: &str) -> String {
    format!(
        "<tptz:GetPresets><tptz:ProfileToken>{}</tptz:ProfileToken></tptz:GetPresets>",
        escape(profile)
    )
}

/// What an operator asks of a PTZ camera.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Command {
    /// Move at this velocity (each in [-1, 1]) until Stop or `timeout_ms`.
    Move {
        #[serde(default)]
        pan: f64,
        #[serde(default)]
        tilt: f64,
        #[serde(default)]
        zoom: f64,
        #[serde(default = "default_move_ms")]
        timeout_ms: u32,
    },
    Stop,
    GotoPreset {
        preset: String,
    },
    SetPreset {
        name: String,
    },
    Presets,
}

fn default_move_ms() -> u32 {
    1000
}

/// What the device answered a [`Command`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Answer {
    Done,
    Presets(Vec<Preset>),
    /// SetPreset's new preset token.
    Preset(String),
}

impl Command {
    pub fn operation(&self) -> &'static str {
        match self {
            Command::Move { .. } => "ContinuousMove",
            Command::Stop => "Stop",
            Command::GotoPreset { .. } => "GotoPreset",
            Command::SetPreset { .. } => "SetPreset",
            Command::Presets => "GetPresets",
        }
    }

    /// The request's body element for `profile`; the timeout is capped at 60 s.
    pub fn body(&self, profile: &str) -> String {
        match self {
            Command::Move {
                pan,
                tilt,
                zoom,
                timeout_ms,
            } => continuous_move(profile, *pan, *tilt, *zoom, (*timeout_ms).min(60_000)),
            Command::Stop => stop(profile),
            Command::GotoPreset { preset } => goto_preset(profile, preset),
            Command::SetPreset { name } => set_preset(profile, name),
            Command::Presets => get_presets(profile),
        }
    }

    /// The answer's body element → what it says.
    pub fn answer(&self, el: &Element) -> Result<Answer, Error> {
        Ok(match self {
            Command::Presets => Answer::Presets(presets(el)),
            Command::SetPreset { .. } => Answer::Preset(set_preset_token(el)?),
            _ => Answer::Done,
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Preset {
    pub token: String,
    pub name: String,
}

pub fn presets(el: &Element) -> Vec<Preset> {
    el.children_named("Preset")
        .filter_map(|p| {
            let token = printable(p.attr("token")?);
            let name = printable(p.child("Name").map_or("", Element::text));
            Some(Preset { token, name })
        })
        .take(1000)
        .collect()
}

pub fn parse_presets(bytes: &[u8]) -> Result<Vec<Preset>, Error> {
    Ok(presets(&body(bytes, "GetPresets")?))
}

/// SetPreset's answer: the new preset's token.
pub fn set_preset_token(el: &Element) -> Result<String, Error> {
    el.child("PresetToken")
        .map(|t| printable(t.text()))
        .filter(|t| !t.is_empty())
        .ok_or(Error::Missing {
            action: "SetPreset",
            what: "PresetToken",
        })
}

pub fn parse_set_preset(bytes: &[u8]) -> Result<String, Error> {
    set_preset_token(&body(bytes, "SetPreset")?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_clamped_and_escaped() {
        let m = continuous_move("p&1", 2.0, -0.5, f64::NAN, 1500);
        assert!(m.contains("<tptz:ProfileToken>p&amp;1</tptz:ProfileToken>"));
        assert!(m.contains("x=\"1\" y=\"-0.5\""));
        assert!(m.contains("<tt:Zoom x=\"0\"/>"));
        assert!(m.contains("PT1.500S"));
        assert!(goto_preset("a", "<b>").contains("&lt;b&gt;"));
        for b in [stop("a"), set_preset("a", "n"), get_presets("a"), m] {
            let env = crate::soap::envelope(None, &b);
            assert!(crate::xml::parse(env.as_bytes()).is_ok(), "{b}");
        }
    }

    #[test]
    fn commands_read_from_json() {
        let c: Command = serde_json::from_str(r#"{"move": {"pan": 0.5}}"#).unwrap();
        assert_eq!(
            c,
            Command::Move {
                pan: 0.5,
                tilt: 0.0,
                zoom: 0.0,
                timeout_ms: 1000
            }
        );
        assert_eq!(
            serde_json::from_str::<Command>(r#""stop""#).unwrap(),
            Command::Stop
        );
        let c: Command = serde_json::from_str(r#"{"goto_preset": {"preset": "1"}}"#).unwrap();
        assert_eq!(c.operation(), "GotoPreset");
        assert!(serde_json::from_str::<Command>(r#"{"move": {"speed": 1}}"#).is_err());
        let long = Command::Move {
            pan: 0.0,
            tilt: 0.0,
            zoom: 0.0,
            timeout_ms: u32::MAX,
        };
        assert!(long.body("p").contains("PT60.000S"));
    }

    #[test]
    fn reads_presets_and_a_new_preset_token() {
        let doc = br#"<s:Envelope xmlns:s="e"><s:Body><tptz:GetPresetsResponse xmlns:tptz="p" xmlns:tt="t"><tptz:Preset token="1"><tt:Name>Gate</tt:Name></tptz:Preset><tptz:Preset token="2"/><tptz:Preset><tt:Name>no token</tt:Name></tptz:Preset></tptz:GetPresetsResponse></s:Body></s:Envelope>"#;
        let p = parse_presets(doc).unwrap();
        assert_eq!(
            p,
            vec![
                Preset {
                    token: "1".into(),
                    name: "Gate".into()
                },
                Preset {
                    token: "2".into(),
                    name: String::new()
                }
            ]
        );
        let set = br#"<Envelope><Body><SetPresetResponse><PresetToken>7</PresetToken></SetPresetResponse></Body></Envelope>"#;
        assert_eq!(parse_set_preset(set).unwrap(), "7");
    }
}
