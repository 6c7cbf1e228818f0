//! Per-node state of the modules above the node, one value per type, made on first use.
//!
//! A module that needs one thing per node (migration's heartbeat task to the nodes sending
//! its moved sessions) keeps it here under its own type, so the node holds it without
//! naming it: the node sits below those modules and must not import them. A few lines of
//! std (a map from `TypeId` to `Arc<dyn Any>`) rather than `http::Extensions`, which is an
//! HTTP message's bag and would put the HTTP crate under the node.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

#[derive(Default)]
pub struct Extensions {
    values: Mutex<HashMap<TypeId, Arc<dyn Any + Send + Sync>>>,
}

impl Extensions {
    /// The node's `T` if one was made (a handler a higher module registered at start-up).
    pub fn get<T: Any + Send + Sync>(&self) -> Option<Arc<T>> {
        let values = self.values.lock().unwrap_or_else(|p| p.into_inner());
        let value = values.get(&TypeId::of::<T>())?.clone();
        value.downcast::<T>().ok()
    }

    /// The node's `T`, made by `make` if there is none yet (once: concurrent callers get
    /// the same value). `make` runs under the map's lock, so it must not call back here.
    pub fn get_or_init<T: Any + Send + Sync>(&self, make: impl FnOnce() -> Arc<T>) -> Arc<T> {
        let mut values = self.values.lock().unwrap_or_else(|p| p.into_inner());
        let value = values
            .entry(TypeId::of::<T>())
            .or_insert_with(|| make() as Arc<dyn Any + Send + Sync>)
            .clone();
        match value.downcast::<T>() {
            Ok(v) => v,
            // Keyed by the value's own type: the entry is always a T.
            Err(_) => unreachable!("extension stored under another type's id"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Extensions;
    use std::sync::Arc;

    #[test]
    fn one_value_per_type_made_once() {
        let ext = Extensions::default();
        let a = ext.get_or_init(|| Arc::new(7u32));
        let b = ext.get_or_init::<u32>(|| panic!("made twice"));
        assert!(Arc::ptr_eq(&a, &b));
        let s = ext.get_or_init(|| Arc::new(String::from("other type")));
        assert_eq!((*a, s.as_str()), (7, "other type"));
        assert_eq!(ext.get::<u32>().as_deref(), Some(&7));
        assert!(ext.get::<u64>().is_none());
    }
}
