//! The attribute calls of a communicator (`MPI_Comm_set_attr`, `MPI_Comm_get_attr`,
//! `MPI_Comm_delete_attr`), above `comm`: the storage (`attr`) sits below it, since every
//! communicator holds its attributes.

use crate::attr::Keyval;
use crate::comm::Communicator;
use std::any::Any;

impl Communicator {
    /// Sets the attribute of `key` to `value` (`MPI_Comm_set_attr`); a value it replaces goes
    /// to the key's delete callback. Seen by every handle (clone) of this communicator.
    pub fn set_attr<T: Any + Send + Sync + Clone>(&self, key: &Keyval<T>, value: T) {
        self.attrs().set(key, value);
    }

    /// A copy of the attribute of `key`, `None` when not set (`MPI_Comm_get_attr`).
    pub fn get_attr<T: Any + Send + Sync + Clone>(&self, key: &Keyval<T>) -> Option<T> {
        self.attrs().get(key)
    }

    /// Deletes the attribute of `key` (`MPI_Comm_delete_attr`), running the key's delete
    /// callback; whether it was set.
    pub fn delete_attr<T: Any + Send + Sync + Clone>(&self, key: &Keyval<T>) -> bool {
        self.attrs().delete(key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attr::AttrCopy;
    use std::sync::{Arc, Mutex};

    #[test]
    fn attributes_follow_their_copy_policy_on_dup_and_deletes_run_once_per_value() {
        let w = crate::init().unwrap();
        let deleted = Arc::new(Mutex::new(Vec::<String>::new()));
        let d2 = deleted.clone();
        let named = Keyval::new(AttrCopy::Clone)
            .with_delete(move |s: String| d2.lock().unwrap_or_else(|p| p.into_inner()).push(s));
        let never: Keyval<u32> = Keyval::new(AttrCopy::Never);
        let doubled: Keyval<u64> = Keyval::new(AttrCopy::With(Arc::new(|v: &u64| {
            (*v < 50).then_some(v * 2)
        })));
        let c = w.dup().unwrap();
        assert_eq!(c.get_attr(&named), None);
        c.set_attr(&named, "a".to_string());
        c.set_attr(&named, "b".to_string());
        assert_eq!(*deleted.lock().unwrap(), ["a"], "replaced value deleted");
        c.set_attr(&never, 5);
        c.set_attr(&doubled, 21);
        // A clone is the same communicator.
        assert_eq!(c.clone().get_attr(&never), Some(5));
        let d = c.dup().unwrap();
        assert_eq!(d.get_attr(&named).as_deref(), Some("b"));
        assert_eq!(d.get_attr(&never), None, "Never is not copied");
        assert_eq!(d.get_attr(&doubled), Some(42));
        let e = d.dup().unwrap();
        assert_eq!(e.get_attr(&doubled), Some(84));
        // A dup dropped at once: its copy of "b" goes to the delete callback.
        assert_eq!(
            e.dup().unwrap().get_attr(&doubled),
            None,
            "the copy fn said None"
        );
        assert_eq!(*deleted.lock().unwrap(), ["a", "b"]);
        assert!(d.delete_attr(&named));
        assert!(!d.delete_attr(&named));
        assert_eq!(deleted.lock().unwrap().len(), 3);
        let e2 = e.clone();
        drop(e);
        assert_eq!(deleted.lock().unwrap().len(), 3, "a handle is left");
        drop(e2);
        drop(c);
        // e's copy of "b" and c's own went with their last handles.
        assert_eq!(deleted.lock().unwrap().len(), 5);
        // A split starts with none.
        d.set_attr(&named, "s".into());
        let s = d.split(Some(0), 0).unwrap().unwrap();
        assert_eq!(s.get_attr(&named), None);
        // Another key of the same type is another attribute.
        let other: Keyval<String> = Keyval::new(AttrCopy::Clone);
        assert_eq!(d.get_attr(&other), None);
    }
}
