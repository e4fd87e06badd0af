//! Attributes cached on communicators (rsmpi's `mpi::attribute`).
//!
//! rsmpi's `get_attr(&self) -> Option<&A>` lends a reference for as long as the communicator
//! is borrowed, and `set_attr(&mut self, A)` takes any `A: Clone + 'static` (not `Send`, not
//! `Sync`). rcomm's keyvals (`rcomm::Keyval`) need `Send + Sync` values and hand back clones,
//! so the facade keeps its own store per communicator object ([`AttrStore`]). `&mut self` does
//! not make a replacement safe to free at once: `&C` is a communicator too, so
//! `(&mut &world).set_attr(..)` may run while `world.get_attr()`'s reference is alive. A
//! replaced value is therefore retired, not dropped, and freed with the communicator object.

use std::any::{Any, TypeId};
use std::sync::Mutex;

/// A value cached on a communicator, one per type.
pub trait CommAttribute
where
    Self: 'static + Sized + Clone,
{
    /// Whether `duplicate` copies the attribute (by `Clone`) to the new communicator.
    const CLONE_ON_DUP: bool = false;
}

/// Copies an attribute's value on `duplicate`.
type Cloner = fn(&dyn Any) -> Box<dyn Any>;

/// One stored attribute: its type, the value, and how to copy it on `duplicate`.
struct Slot {
    id: TypeId,
    /// From `Box::into_raw`: never moved, mutated or freed until the store drops, so the
    /// references `get` lends stay valid (a raw pointer, not a `Box`, so moving the slot
    /// asserts nothing about the value).
    val: *mut dyn Any,
    clone: Option<Cloner>,
}

fn clone_as<A: CommAttribute>(v: &dyn Any) -> Box<dyn Any> {
    Box::new(
        v.downcast_ref::<A>()
            .expect("attribute of its own type")
            .clone(),
    )
}

#[derive(Default)]
struct Slots {
    live: Vec<Slot>,
    /// Values replaced by a later `set` of their type, kept for references lent before.
    retired: Vec<*mut dyn Any>,
}

/// The attributes of one communicator object. A `Mutex` (not an `UnsafeCell`) guards the
/// slots: `set` can be reached through shared paths (`&C`) and from other threads.
#[derive(Default)]
pub(crate) struct AttrStore {
    slots: Mutex<Slots>,
}

impl AttrStore {
    fn lock(&self) -> std::sync::MutexGuard<'_, Slots> {
        self.slots.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The attribute of type `A`, borrowed for as long as the store.
    pub(crate) fn get<A: CommAttribute>(&self) -> Option<&A> {
        let p = self
            .lock()
            .live
            .iter()
            .find(|s| s.id == TypeId::of::<A>())
            .map(|s| s.val)?;
        // SAFETY: `p` came from `Box::into_raw` and is freed only when the store drops (which
        // `&self` rules out for the lifetime lent); nothing writes through it.
        unsafe { &*p }.downcast_ref::<A>()
    }

    /// Sets (replaces) the attribute of type `A`; a replaced value is retired, not dropped.
    pub(crate) fn set<A: CommAttribute>(&self, val: A) {
        let slot = Slot {
            id: TypeId::of::<A>(),
            val: Box::into_raw(Box::new(val) as Box<dyn Any>),
            clone: if A::CLONE_ON_DUP {
                Some(clone_as::<A>)
            } else {
                None
            },
        };
        let mut s = self.lock();
        if let Some(i) = s.live.iter().position(|x| x.id == slot.id) {
            let old = std::mem::replace(&mut s.live[i], slot);
            s.retired.push(old.val);
        } else {
            s.live.push(slot);
        }
    }

    /// Copies the attributes whose type says `CLONE_ON_DUP` into `to` (a new communicator's
    /// store). The user's `Clone` runs outside the lock.
    pub(crate) fn dup_into(&self, to: &AttrStore) {
        let copies: Vec<(TypeId, *mut dyn Any, Cloner)> = self
            .lock()
            .live
            .iter()
            .filter_map(|s| s.clone.map(|c| (s.id, s.val, c)))
            .collect();
        for (id, val, clone) in copies {
            // SAFETY: as in `get`: the value lives as long as `self`.
            let v = clone(unsafe { &*val });
            to.lock().live.push(Slot {
                id,
                val: Box::into_raw(v),
                clone: Some(clone),
            });
        }
    }
}

impl Drop for AttrStore {
    fn drop(&mut self) {
        let s = std::mem::take(self.slots.get_mut().unwrap_or_else(|p| p.into_inner()));
        for p in s.live.into_iter().map(|s| s.val).chain(s.retired) {
            // SAFETY: each pointer came from `Box::into_raw` and is freed once, here; no
            // reference lent by `get` outlives `&mut self`.
            drop(unsafe { Box::from_raw(p) });
        }
    }
}

/// Useful traits.
pub mod traits {
    pub use super::CommAttribute;
}
