//! Attributes cached on communicators (rsmpi's `mpi::attribute`).

use std::any::{Any, TypeId};

/// A value cached on a communicator, one per type.
pub trait CommAttribute
where
    Self: 'static + Sized + Clone,
{
    /// Whether `duplicate` copies the attribute (by `Clone`) to the new communicator.
    const CLONE_ON_DUP: bool = false;
}

/// Copies an attribute's value on `duplicate`.
pub(crate) type Cloner = fn(&dyn Any) -> Box<dyn Any>;

/// One stored attribute: its type, the value, and how to copy it on `duplicate`.
pub(crate) struct Slot {
    pub(crate) id: TypeId,
    pub(crate) val: Box<dyn Any>,
    pub(crate) clone: Option<Cloner>,
}

fn clone_as<A: CommAttribute>(v: &dyn Any) -> Box<dyn Any> {
    Box::new(
        v.downcast_ref::<A>()
            .expect("attribute of its own type")
            .clone(),
    )
}

impl Slot {
    pub(crate) fn new<A: CommAttribute>(a: A) -> Slot {
        Slot {
            id: TypeId::of::<A>(),
            val: Box::new(a),
            clone: if A::CLONE_ON_DUP {
                Some(clone_as::<A>)
            } else {
                None
            },
        }
    }
}

/// Useful traits.
pub mod traits {
    pub use super::CommAttribute;
}
