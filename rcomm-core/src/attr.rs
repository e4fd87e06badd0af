//! Communicator attributes (MPI's keyvals: `MPI_Comm_create_keyval`, `MPI_Comm_set_attr`,
//! `MPI_Comm_get_attr`, `MPI_Comm_delete_attr`), typed.
//!
//! A [`Keyval<T>`] names an attribute of type `T` and says what
//! [`Communicator::dup`](crate::Communicator::dup) does with it ([`AttrCopy`]) and what runs
//! when a value goes ([`Keyval::with_delete`]): when it is replaced, deleted, or when the last
//! handle of its communicator is dropped. Clones of a communicator are handles of the same
//! communicator and share its attributes; `split`, `create` and the like start with none, as
//! in MPI. The calls on a communicator are in `comm_attr`; this module, below `comm`, keeps
//! the values.

use std::any::Any;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

type AnyBox = Box<dyn Any + Send + Sync>;
type CopyFn = Arc<dyn Fn(&(dyn Any + Send + Sync)) -> Option<AnyBox> + Send + Sync>;
type DeleteFn = Arc<dyn Fn(AnyBox) + Send + Sync>;

/// What [`Communicator::dup`](crate::Communicator::dup) does with an attribute (MPI's copy
/// callback).
pub enum AttrCopy<T> {
    /// Not copied: the new communicator does not have it (`MPI_COMM_NULL_COPY_FN`).
    Never,
    /// Copied by `Clone` (`MPI_COMM_DUP_FN`).
    Clone,
    /// Copied as the function says: `Some(value)` for the new communicator, `None` for none.
    With(AttrCopyFn<T>),
}

/// A copy callback of [`AttrCopy::With`].
pub type AttrCopyFn<T> = Arc<dyn Fn(&T) -> Option<T> + Send + Sync>;

impl<T> std::fmt::Debug for AttrCopy<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            AttrCopy::Never => "Never",
            AttrCopy::Clone => "Clone",
            AttrCopy::With(_) => "With(..)",
        })
    }
}

/// The key of a typed communicator attribute (`MPI_Comm_create_keyval`); cheap to clone, a
/// clone is the same key. Keys are never reused within a process.
pub struct Keyval<T> {
    id: u64,
    copy: CopyFn,
    delete: Option<DeleteFn>,
    _t: std::marker::PhantomData<fn(T) -> T>,
}

impl<T> Clone for Keyval<T> {
    fn clone(&self) -> Self {
        Keyval {
            id: self.id,
            copy: self.copy.clone(),
            delete: self.delete.clone(),
            _t: std::marker::PhantomData,
        }
    }
}

impl<T> std::fmt::Debug for Keyval<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Keyval({})", self.id)
    }
}

impl<T: Any + Send + Sync + Clone> Keyval<T> {
    /// A new key whose values `dup` treats as `copy` says.
    pub fn new(copy: AttrCopy<T>) -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        let copy: CopyFn = match copy {
            AttrCopy::Never => Arc::new(|_| None),
            AttrCopy::Clone => {
                Arc::new(|v| v.downcast_ref::<T>().map(|v| Box::new(v.clone()) as AnyBox))
            }
            AttrCopy::With(f) => Arc::new(move |v| {
                v.downcast_ref::<T>()
                    .and_then(|v| f(v))
                    .map(|v| Box::new(v) as AnyBox)
            }),
        };
        Keyval {
            id: NEXT.fetch_add(1, Ordering::Relaxed),
            copy,
            delete: None,
            _t: std::marker::PhantomData,
        }
    }

    /// The same key with a delete callback (MPI's delete function): it gets each value of
    /// this key when the value is replaced, deleted, or its communicator's last handle goes.
    pub fn with_delete(mut self, delete: impl Fn(T) + Send + Sync + 'static) -> Self {
        self.delete = Some(Arc::new(move |v: AnyBox| {
            if let Ok(v) = v.downcast::<T>() {
                delete(*v);
            }
        }));
        self
    }
}

struct Entry {
    value: AnyBox,
    copy: CopyFn,
    delete: Option<DeleteFn>,
}

impl Entry {
    fn drop_value(self) {
        if let Some(d) = self.delete {
            d(self.value);
        }
    }
}

/// The attributes of one communicator, shared by its handles.
#[derive(Default)]
pub(crate) struct Attrs(Mutex<HashMap<u64, Entry>>);

impl std::fmt::Debug for Attrs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Attrs({})", self.lock().len())
    }
}

impl Attrs {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Entry>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The attributes a `dup` of this communicator gets, by each key's copy policy. The copy
    /// callbacks run with this communicator's attributes locked: they must not use them.
    pub(crate) fn copied(&self) -> Attrs {
        let m = self.lock();
        let out = m
            .iter()
            .filter_map(|(&k, e)| {
                (e.copy)(&*e.value).map(|value| {
                    (
                        k,
                        Entry {
                            value,
                            copy: e.copy.clone(),
                            delete: e.delete.clone(),
                        },
                    )
                })
            })
            .collect();
        Attrs(Mutex::new(out))
    }
}

impl Drop for Attrs {
    fn drop(&mut self) {
        let m = std::mem::take(&mut *self.lock());
        for (_, e) in m {
            e.drop_value();
        }
    }
}

impl Attrs {
    /// Sets the value of `key`; a value it replaces goes to the key's delete callback.
    pub(crate) fn set<T: Any + Send + Sync + Clone>(&self, key: &Keyval<T>, value: T) {
        let old = self.lock().insert(
            key.id,
            Entry {
                value: Box::new(value),
                copy: key.copy.clone(),
                delete: key.delete.clone(),
            },
        );
        if let Some(e) = old {
            e.drop_value();
        }
    }

    /// A copy of the value of `key`, `None` when not set.
    pub(crate) fn get<T: Any + Send + Sync + Clone>(&self, key: &Keyval<T>) -> Option<T> {
        self.lock()
            .get(&key.id)
            .and_then(|e| e.value.downcast_ref::<T>())
            .cloned()
    }

    /// Deletes the value of `key`, running the key's delete callback; whether it was set.
    pub(crate) fn delete<T: Any + Send + Sync + Clone>(&self, key: &Keyval<T>) -> bool {
        match self.lock().remove(&key.id) {
            Some(e) => {
                e.drop_value();
                true
            }
            None => false,
        }
    }
}
