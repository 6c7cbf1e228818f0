//! The node's side of the camera and user registry (`vigil_registry`, issue 26): loaded
//! (or seeded from the TOML) before the node is made, watched on the share every
//! `[registry] poll_ms`, each new version applied in place (`apply`), and written by the
//! admin API (`write`: compare-and-set on the version, retried on a newer base when the
//! caller named none).
//!
//! The shell is kept in `node.extensions`, so the API and the SIGHUP reload find it
//! without the node naming it.

mod apply;

use crate::cluster::Cluster;
use crate::node::Node;
use anyhow::Context;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;
use tracing::{error, info, warn};
use vigil_conf::{CameraConfig, Config, UserConfig};
use vigil_registry::dir::{Follower, Found};
use vigil_registry::format::Body;
use vigil_registry::{
    ChangeItem, ChangeRecord, Edit, Loaded, Registry, RegistryDir, RegistryError, SecretKey,
};

/// Kinds of `vigil_registry_changes_total` (written at zero at start).
pub const CHANGE_KINDS: [&str; 8] = [
    "camera_added",
    "camera_changed",
    "camera_removed",
    "user_added",
    "user_changed",
    "user_removed",
    "token_added",
    "token_removed",
];

/// A full listing of the directory every this many polls (catches a jump over pruned
/// versions); in between, the next version's name is opened.
const LIST_EVERY: u32 = 20;

pub struct Shell {
    dir: Arc<RegistryDir>,
    key: Option<SecretKey>,
    node_id: String,
    poll: Duration,
    state: Mutex<State>,
    /// One write at a time from this node (other nodes are held off by the link).
    writing: tokio::sync::Mutex<()>,
    /// One version applied at a time, in order: the watcher and a write may both have read
    /// a version, and an older one applied after a newer would take the node back.
    applying: Mutex<()>,
    cluster: OnceLock<Option<Arc<Cluster>>>,
}

/// What the node serves of the registry.
struct State {
    follower: Follower,
    /// The version applied, and its registry as stored.
    version: u64,
    stored: Arc<Registry>,
    /// The last error reading the share or a version (cleared by the next version applied).
    error: Option<String>,
    errors_total: u64,
    /// The newest change applied: when it was made (the writer's clock) and applied here.
    last_change: Option<ChangeRecord>,
    applied_lag_ms: Option<i64>,
    /// A version read whole that this node could not apply (see `unresolved`).
    unresolved: Option<String>,
}

/// What `GET /api/registry` shows.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Status {
    pub version: u64,
    pub path: String,
    pub cameras: usize,
    pub users: usize,
    pub error: Option<String>,
    pub errors_total: u64,
    pub last_change: Option<ChangeRecord>,
    /// From the change's time on its writer to its applying here, ms.
    pub applied_lag_ms: Option<i64>,
    pub secret_key: bool,
}

/// Why a write was refused; the API picks the status from the kind.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    #[error(transparent)]
    Registry(#[from] RegistryError),
    /// The newest version on the share could not be applied here (a corrupt file, another
    /// key): writing on top of it would drop what this node cannot read.
    #[error("the registry is not writable from this node: {0}")]
    Unavailable(String),
}

/// What a write did.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Written {
    pub version: u64,
    pub changes: Vec<ChangeItem>,
}

impl Shell {
    /// Opens the registry on the storage root before the node is made: loads the newest
    /// good version, or seeds version 1 from the file's `[[camera]]` and `[[auth.user]]`
    /// when the registry is empty. `config`'s cameras and users become the registry's.
    pub fn open(config: &mut Config) -> anyhow::Result<Option<Arc<Shell>>> {
        if !config.registry.enabled {
            return Ok(None);
        }
        let root = &config.storage.root;
        let cluster_key = config
            .cluster
            .enabled
            .then_some(config.cluster.key.expose());
        let key = SecretKey::from_source(&config.registry.secret_key(cluster_key)?);
        if key.is_none() {
            warn!(
                "the registry on the storage root is not signed: whoever can write the share \
                 can add users and re-point cameras; set [registry] secret_key (or a cluster key)"
            );
        }
        let dir = RegistryDir::open(root)
            .with_context(|| format!("the registry on the storage root {}", root.display()))?
            .with_key(key.clone());
        let shell = Shell {
            dir: Arc::new(dir),
            key,
            node_id: config.node.id.clone(),
            poll: Duration::from_millis(config.registry.poll_ms),
            state: Mutex::new(State {
                follower: Follower::default(),
                version: 0,
                stored: Arc::default(),
                error: None,
                errors_total: 0,
                last_change: None,
                applied_lag_ms: None,
                unresolved: None,
            }),
            writing: tokio::sync::Mutex::new(()),
            applying: Mutex::new(()),
            cluster: OnceLock::new(),
        };
        let mut found = shell.poll_blocking(true);
        if found.loaded.is_none() && shell.dir.versions()?.is_empty() {
            found = shell.seed(config)?;
        }
        shell.report(&found.errors);
        let Some(loaded) = found.loaded else {
            // Every version on the share is unreadable: nothing is served from it, and
            // nothing is written over it until a good version appears.
            error!(
                dir = %shell.dir.path().display(),
                "no readable registry version: serving no cameras from it (a registry written \
                 before versions were signed, or without this cluster's key, reads as \
                 unsigned: check it and run `vigil cluster sign-registry --config FILE`)"
            );
            config.cameras.clear();
            return Ok(Some(Arc::new(shell)));
        };
        // The newest version this node can open (another key's sealed passwords do not):
        // a restart must not fail on what the share holds.
        let (loaded, cameras) = shell.usable(loaded);
        config.cameras = cameras.into_values().collect();
        if let Some(auth) = config.auth.as_mut() {
            auth.users = loaded.body.registry.users.values().cloned().collect();
        }
        info!(
            version = loaded.version,
            cameras = config.cameras.len(),
            users = loaded.body.registry.users.len(),
            dir = %shell.dir.path().display(),
            "cameras and users from the registry"
        );
        {
            let mut st = shell.state();
            st.version = loaded.version;
            st.last_change = Some(loaded.body.change.clone());
            st.stored = Arc::new(loaded.body.registry);
        }
        Ok(Some(Arc::new(shell)))
    }

    /// `loaded` and its cameras if this node opens its sealed passwords, else the newest
    /// older version it opens (nothing if none), with the version it could not open kept as
    /// the reason this node refuses to write.
    fn usable(&self, loaded: Loaded) -> (Loaded, BTreeMap<String, CameraConfig>) {
        let mut candidate = loaded;
        loop {
            match vigil_registry::resolve(&candidate.body.registry, self.key.as_ref()) {
                Ok(cameras) => return (candidate, cameras),
                Err(e) => {
                    self.unresolved(candidate.version, &e);
                    self.report(&[e]);
                    let older = (1..candidate.version)
                        .rev()
                        .find_map(|v| self.dir.read(v).ok().flatten().map(|body| (v, body)));
                    match older {
                        Some((version, body)) => candidate = Loaded { version, body },
                        None => {
                            let empty = Loaded {
                                version: 0,
                                body: Body {
                                    change: ChangeRecord::new(0, "", &self.node_id, Vec::new()),
                                    registry: Registry::default(),
                                },
                            };
                            return (empty, BTreeMap::new());
                        }
                    }
                }
            }
        }
    }

    /// A version this node read but cannot apply (its key does not open a password): it is
    /// reported, and this node writes nothing until a later version applies (a write would
    /// drop what that version holds).
    fn unresolved(&self, version: u64, e: &RegistryError) {
        self.state().unresolved = Some(format!("version {version}: {e}"));
    }

    /// Version 1 from the config file (the migration path from `[[camera]]` and
    /// `[[auth.user]]`); a node that loses the race to another seeding node takes its
    /// version instead.
    fn seed(&self, config: &Config) -> anyhow::Result<Found> {
        let users: Vec<UserConfig> = config.auth.iter().flat_map(|a| a.users.clone()).collect();
        let base = Registry::default();
        let (with_cameras, mut items) = vigil_registry::apply(
            &base,
            &Edit::ImportCameras(config.cameras.clone()),
            self.key.as_ref(),
        )
        .context("seeding the registry from [[camera]]")?;
        let (registry, more) =
            vigil_registry::apply(&with_cameras, &Edit::ImportUsers(users), self.key.as_ref())
                .context("seeding the registry from [[auth.user]]")?;
        items.extend(more);
        let body = Body {
            change: ChangeRecord::new(1, "seed", &self.node_id, items),
            registry,
        };
        match self.dir.commit(1, &body) {
            Ok(()) => info!(
                cameras = config.cameras.len(),
                "registry seeded from the config file's [[camera]] and [[auth.user]] (version 1)"
            ),
            Err(RegistryError::Conflict { .. }) => {
                info!("another node seeded the registry first: taking its version")
            }
            Err(e) => return Err(e).context("seeding the registry"),
        }
        Ok(self.poll_blocking(true))
    }

    /// `vigil cluster sign-registry`: the newest version on the share that reads whole
    /// (signed or not), written again as the next version signed with this config's key —
    /// the way from a registry written before versions were signed (or by a node that had
    /// no key) to one the nodes read. Run once, by an operator, after checking that the
    /// share holds what it should: an unsigned version is exactly what an intruder writes.
    /// Returns (the version signed, the new version).
    pub fn sign_newest(config: &Config) -> anyhow::Result<(u64, u64, Registry)> {
        let cluster_key = config
            .cluster
            .enabled
            .then_some(config.cluster.key.expose());
        let key = SecretKey::from_source(&config.registry.secret_key(cluster_key)?)
            .context("no key to sign with: set [registry] secret_key or the cluster key")?;
        let root = &config.storage.root;
        let open = || {
            RegistryDir::open(root)
                .with_context(|| format!("the registry on the storage root {}", root.display()))
        };
        let (any, signed) = (open()?, open()?.with_key(Some(key.clone())));
        let versions = any.versions()?;
        let newest = *versions.last().context("the registry holds no version")?;
        let (from, body) = versions
            .iter()
            .rev()
            .find_map(|v| Some((*v, any.read(*v).ok()??)))
            .context("no version on the share reads whole")?;
        let next = newest.saturating_add(1);
        let change = ChangeRecord::new(
            next,
            "vigil cluster sign-registry",
            &config.node.id,
            Vec::new(),
        );
        let registry = body.registry;
        signed.commit(
            next,
            &Body {
                change,
                registry: registry.clone(),
            },
        )?;
        Ok((from, next, registry))
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn poll_blocking(&self, list: bool) -> Found {
        let mut follower = self.state().follower;
        let found = follower.poll(&self.dir, list);
        // Another poll (the watcher's, a write's) may have gone further meanwhile.
        let mut st = self.state();
        st.follower.good = st.follower.good.max(follower.good);
        st.follower.seen = st.follower.seen.max(follower.seen);
        found
    }

    /// Reads the share off the runtime: the versions after the last seen.
    async fn poll(self: &Arc<Self>, list: bool) -> Found {
        let me = self.clone();
        tokio::task::spawn_blocking(move || me.poll_blocking(list))
            .await
            .unwrap_or_default()
    }

    /// Logs and counts errors reading the share (each distinct one once in a row).
    fn report(&self, errors: &[RegistryError]) {
        for e in errors {
            let text = e.to_string();
            metrics::counter!("vigil_registry_errors_total").increment(1);
            let mut st = self.state();
            st.errors_total += 1;
            if st.error.as_deref() != Some(&text) {
                error!("registry: {text}; keeping version {}", st.version);
                st.error = Some(text);
            }
        }
    }

    /// Applies the newest good version another poll has read but not applied yet (the
    /// watcher's `take` follows its poll), so a write starts from it (`Follower::next_write`).
    async fn catch_up(self: &Arc<Self>, node: &Arc<Node>) {
        let (good, version) = {
            let st = self.state();
            (st.follower.good, st.version)
        };
        if good <= version {
            return;
        }
        let dir = self.dir.clone();
        match tokio::task::spawn_blocking(move || dir.read(good)).await {
            Ok(Ok(Some(body))) => {
                if let Err(e) = self.apply(
                    node,
                    Loaded {
                        version: good,
                        body,
                    },
                ) {
                    self.unresolved(good, &e);
                    self.report(&[e]);
                }
            }
            Ok(Err(e)) => self.report(&[e]),
            // Pruned meanwhile (a newer one exists: the next poll reads it), or the task failed.
            Ok(Ok(None)) | Err(_) => {}
        }
    }

    /// Registers the shell with the node and watches the share until shutdown.
    pub fn start(self: &Arc<Self>, node: &Arc<Node>, cluster: Option<&Arc<Cluster>>) {
        let _ = self.cluster.set(cluster.cloned());
        node.extensions.get_or_init(|| self.clone());
        let tokens: Vec<_> = self.state().stored.tokens.values().cloned().collect();
        node.auth.set_registry_tokens(&tokens);
        metrics::gauge!("vigil_registry_version").set(self.state().version as f64);
        let me = self.clone();
        let node = node.clone();
        node.clone().tasks.spawn(async move {
            let mut tick = tokio::time::interval(me.poll);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut n: u32 = 0;
            loop {
                tokio::select! {
                    _ = node.shutdown.cancelled() => return,
                    _ = tick.tick() => {}
                }
                n = n.wrapping_add(1);
                let found = me.poll(n.is_multiple_of(LIST_EVERY)).await;
                me.take(&node, found);
            }
        });
    }

    /// Applies what a poll found (the newest good version) and reports the rest.
    fn take(&self, node: &Arc<Node>, found: Found) {
        self.report(&found.errors);
        if let Some(loaded) = found.loaded {
            let version = loaded.version;
            if let Err(e) = self.apply(node, loaded) {
                self.unresolved(version, &e);
                self.report(&[e]);
            }
        }
    }

    /// A new version applied to the node: the cameras' actions, the users, the bindings.
    fn apply(&self, node: &Arc<Node>, loaded: Loaded) -> Result<(), RegistryError> {
        let _one = self.applying.lock().unwrap_or_else(|p| p.into_inner());
        if loaded.version <= self.state().version {
            return Ok(());
        }
        let cameras: BTreeMap<String, CameraConfig> =
            vigil_registry::resolve(&loaded.body.registry, self.key.as_ref())?;
        let old = node.cameras();
        let actions = vigil_registry::diff(&old, &cameras);
        let (users_changed, tokens_changed) = {
            let st = self.state();
            (
                st.stored.users != loaded.body.registry.users,
                st.stored.tokens != loaded.body.registry.tokens,
            )
        };
        node.set_cameras(Arc::new(cameras));
        let cluster = self.cluster.get().cloned().flatten();
        apply::actions(node, cluster.as_ref(), &actions);
        if users_changed {
            apply::users(node, &loaded.body.registry.users);
        }
        if tokens_changed {
            let tokens: Vec<_> = loaded.body.registry.tokens.values().cloned().collect();
            node.auth.set_registry_tokens(&tokens);
        }
        let change = &loaded.body.change;
        let lag = vigil_storage::now_ms() - change.at_ms;
        info!(
            version = loaded.version,
            by = %change.by,
            from = %change.node,
            changes = change.items.len(),
            actions = actions.len(),
            lag_ms = lag,
            "registry version applied"
        );
        metrics::gauge!("vigil_registry_version").set(loaded.version as f64);
        metrics::gauge!("vigil_registry_apply_lag_ms").set(lag as f64);
        let mut st = self.state();
        st.version = loaded.version;
        st.stored = Arc::new(loaded.body.registry);
        st.last_change = Some(loaded.body.change);
        st.applied_lag_ms = Some(lag);
        st.error = None;
        st.unresolved = None;
        Ok(())
    }

    /// The registry as stored (the API's reads; no password in it, sealed or not, leaves
    /// through the API: see `admin::registry_api`).
    pub fn current(&self) -> (u64, Arc<Registry>) {
        let st = self.state();
        (st.version, st.stored.clone())
    }

    pub fn status(&self) -> Status {
        let st = self.state();
        Status {
            version: st.version,
            path: self.dir.path().display().to_string(),
            cameras: st.stored.cameras.len(),
            users: st.stored.users.len(),
            error: st.error.clone(),
            errors_total: st.errors_total,
            last_change: st.last_change.clone(),
            applied_lag_ms: st.applied_lag_ms,
            secret_key: self.key.is_some(),
        }
    }

    /// The newest `limit` changes, newest first.
    pub async fn changes(self: &Arc<Self>, limit: usize) -> Vec<ChangeRecord> {
        let dir = self.dir.clone();
        tokio::task::spawn_blocking(move || dir.changes(limit))
            .await
            .unwrap_or_default()
    }

    /// Makes `edit` the next version: `expected` (the version the operator read), when
    /// given, must still be the newest (else `Conflict` with the newest); without it, a
    /// version written meanwhile by another node is the base the edit is tried on again.
    pub async fn write(
        self: &Arc<Self>,
        node: &Arc<Node>,
        edit: Edit,
        expected: Option<u64>,
        by: &str,
    ) -> Result<Written, WriteError> {
        let _one = self.writing.lock().await;
        for _ in 0..8 {
            // Up to date with the share first: the edit applies to the newest version.
            let found = self.poll(false).await;
            self.take(node, found);
            self.catch_up(node).await;
            let (version, base, follower, unresolved) = {
                let st = self.state();
                (
                    st.version,
                    st.stored.clone(),
                    st.follower,
                    st.unresolved.clone(),
                )
            };
            if expected.is_some_and(|e| e != version) {
                return Err(RegistryError::Conflict { current: version }.into());
            }
            // Not on top of a version this node could not apply, nor over a share where no
            // version read at all (that would start the registry again from nothing).
            if let Some(why) = unresolved {
                return Err(WriteError::Unavailable(why));
            }
            if version == 0 && follower.seen > 0 {
                return Err(WriteError::Unavailable(
                    "no version on the share reads: restore one before changing it".into(),
                ));
            }
            let (next, items) = vigil_registry::apply(&base, &edit, self.key.as_ref())?;
            if items.is_empty() {
                return Ok(Written {
                    version,
                    changes: items,
                });
            }
            let Some(v) = follower.next_write(version) else {
                // Still behind the newest version read (it did not read again): once more.
                continue;
            };
            let body = Body {
                change: ChangeRecord::new(v, by, &self.node_id, items.clone()),
                registry: next,
            };
            let dir = self.dir.clone();
            let committed = {
                let body = body.clone();
                tokio::task::spawn_blocking(move || dir.commit(v, &body))
                    .await
                    .map_err(|e| WriteError::Unavailable(format!("the writer task failed: {e}")))?
            };
            match committed {
                Ok(()) => {
                    for item in &items {
                        metrics::counter!("vigil_registry_changes_total", "kind" => item.kind.clone())
                            .increment(1);
                    }
                    {
                        let mut st = self.state();
                        st.follower = Follower { good: v, seen: v };
                    }
                    self.apply(node, Loaded { version: v, body })?;
                    info!(version = v, by, changes = items.len(), "registry changed");
                    node.events
                        .emit(crate::node::events::Event::RegistryChanged {
                            version: v,
                            by: by.to_string(),
                            changes: items
                                .iter()
                                .map(|i| format!("{} {}", i.kind, i.id))
                                .collect(),
                        });
                    return Ok(Written {
                        version: v,
                        changes: items,
                    });
                }
                Err(RegistryError::Conflict { .. }) => {
                    // Another node wrote version v first: read it, then either tell the
                    // caller (who named a version) or try again on top of it.
                    let found = self.poll(false).await;
                    self.take(node, found);
                    if expected.is_some() {
                        let current = self.state().version;
                        return Err(RegistryError::Conflict { current }.into());
                    }
                }
                Err(e) => return Err(e.into()),
            }
        }
        let current = self.state().version;
        warn!("registry write gave up after repeated conflicts");
        Err(RegistryError::Conflict { current }.into())
    }
}

/// The node's registry shell, when `[registry] enabled`.
pub fn of(node: &Node) -> Option<Arc<Shell>> {
    node.extensions.get::<Shell>()
}

/// SIGHUP with the registry on: the file's `[auth]` policy, the registry's users.
pub fn auth_with_users(
    node: &Node,
    mut auth: Option<vigil_conf::AuthConfig>,
) -> Option<vigil_conf::AuthConfig> {
    if let (Some(shell), Some(a)) = (of(node), auth.as_mut()) {
        a.users = shell.current().1.users.values().cloned().collect();
    }
    auth
}
