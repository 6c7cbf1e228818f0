//! `vigil user add`: put a user into a config file's `[[auth.user]]` with the password's
//! HA1 hashes (what Digest needs), never the password itself.

use anyhow::Context;
use clap::Subcommand;
use std::io::{BufRead, IsTerminal, Write};
use std::path::{Path, PathBuf};
use vigil_conf::{Config, Rights};
use vigil_proto::rtsp::auth::{ha1, Algorithm};

#[derive(Subcommand, Debug)]
pub enum UserCmd {
    /// Add a user (reads the password from stdin) to the config file. A running node picks
    /// it up on SIGHUP.
    Add {
        /// The config file to change (created if missing).
        #[arg(long, short)]
        config: PathBuf,
        name: String,
        /// Camera-id patterns the user may watch live (`*`, `gate-*`), comma-separated.
        #[arg(long, value_delimiter = ',')]
        read: Vec<String>,
        /// Camera-id patterns whose recordings the user may play.
        #[arg(long, value_delimiter = ',')]
        playback: Vec<String>,
        /// Camera-id patterns the user may publish.
        #[arg(long, value_delimiter = ',')]
        publish: Vec<String>,
        /// Camera-id patterns the user may steer (PTZ).
        #[arg(long, value_delimiter = ',')]
        ptz: Vec<String>,
        /// Camera-id patterns whose recordings the user may export (HTTP).
        #[arg(long, value_delimiter = ',')]
        export: Vec<String>,
        /// The operate role: migrate sessions, drain nodes, move cameras (HTTP).
        #[arg(long)]
        operate: bool,
        /// The admin role: everything the admin token may (HTTP).
        #[arg(long)]
        admin: bool,
    },
}

pub fn run(cmd: UserCmd) -> anyhow::Result<()> {
    let UserCmd::Add {
        config,
        name,
        read,
        playback,
        publish,
        ptz,
        export,
        operate,
        admin,
    } = cmd;
    let text = match std::fs::read_to_string(&config) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(e).with_context(|| format!("reading {}", config.display())),
    };
    let password = read_password()?;
    let rights = Rights {
        read,
        playback,
        publish,
        ptz,
        export,
        operate,
        admin,
        metrics: false,
    };
    let new = add_user(&text, &name, &password, &rights)?;
    write_atomically(&config, &new)?;
    eprintln!(
        "user {name} added to {} (send SIGHUP to a running node to apply)",
        config.display()
    );
    Ok(())
}

/// The first line of stdin (a prompt first when it is a terminal).
fn read_password() -> anyhow::Result<String> {
    let stdin = std::io::stdin();
    if stdin.is_terminal() {
        eprint!("password: ");
        std::io::stderr().flush()?;
    }
    let mut line = String::new();
    stdin.lock().read_line(&mut line)?;
    let password = line.trim_end_matches(['\r', '\n']).to_string();
    anyhow::ensure!(!password.is_empty(), "empty password");
    Ok(password)
}

/// `text` with a `[[auth.user]]` table for `name` appended (the realm is the config's).
/// Checked by parsing the result, so a broken file is never written.
pub fn add_user(text: &str, name: &str, password: &str, rights: &Rights) -> anyhow::Result<String> {
    let current = Config::from_toml(text).context("the config file does not parse")?;
    let realm = current.auth.as_ref().map_or_else(
        || vigil_conf::AuthConfig::default().realm,
        |a| a.realm.clone(),
    );
    if current
        .auth
        .as_ref()
        .is_some_and(|a| a.users.iter().any(|u| u.name == name))
    {
        anyhow::bail!("user {name} is already in the config");
    }
    let quote = |s: &str| toml::Value::String(s.to_string()).to_string();
    let list = |v: &[String]| {
        let items: Vec<String> = v.iter().map(|s| quote(s)).collect();
        format!("[{}]", items.join(", "))
    };
    let mut out = text.to_string();
    if !out.is_empty() && !out.ends_with('\n') {
        out.push('\n');
    }
    out.push_str(&format!(
        "\n[[auth.user]]\nname = {}\nha1_md5 = \"{}\"\nha1_sha256 = \"{}\"\nread = {}\nplayback = {}\npublish = {}\n",
        quote(name),
        ha1(Algorithm::Md5, name, &realm, password),
        ha1(Algorithm::Sha256, name, &realm, password),
        list(&rights.read),
        list(&rights.playback),
        list(&rights.publish),
    ));
    for (key, v) in [("ptz", &rights.ptz), ("export", &rights.export)] {
        if !v.is_empty() {
            out.push_str(&format!("{key} = {}\n", list(v)));
        }
    }
    for (key, on) in [("operate", rights.operate), ("admin", rights.admin)] {
        if on {
            out.push_str(&format!("{key} = true\n"));
        }
    }
    Config::from_toml(&out).context("the config with the new user does not parse")?;
    Ok(out)
}

fn write_atomically(path: &Path, text: &str) -> anyhow::Result<()> {
    let tmp = path.with_extension("toml.tmp");
    std::fs::write(&tmp, text).with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("replacing {}", path.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adds_hashes_not_the_password() {
        let rights = Rights {
            read: vec!["*".into()],
            playback: vec!["gate-*".into()],
            publish: vec![],
            export: vec!["gate-1".into()],
            operate: true,
            ..Rights::default()
        };
        let text = add_user("[auth]\nrealm = \"site\"\n", "al ice", "s3cret", &rights).unwrap();
        assert!(!text.contains("s3cret"), "{text}");
        let c = Config::from_toml(&text).unwrap();
        let auth = c.auth.unwrap();
        let u = &auth.users[0];
        assert_eq!(u.name, "al ice");
        assert_eq!(u.ha1_md5, ha1(Algorithm::Md5, "al ice", "site", "s3cret"));
        assert_eq!(u.rights, rights);
        assert!(add_user(&text, "al ice", "x", &rights).is_err());
        // From an empty file: [auth] on with the default realm.
        let text = add_user("", "bob", "pw", &rights).unwrap();
        let c = Config::from_toml(&text).unwrap();
        assert_eq!(
            c.auth.unwrap().users[0].ha1_sha256,
            ha1(Algorithm::Sha256, "bob", "vigil", "pw")
        );
    }
}
