//! Handle values and the tables of live objects behind them.
//!
//! A C handle is an opaque pointer-sized number. Predefined handles are the standard's small
//! constants (below 0x400, see `consts`); every handle rcomm makes encodes its kind, a slot
//! index and the slot's generation, and fits in 31 bits so `MPI_*_toint` can return it. A
//! value is never dereferenced: [`decode`] checks its bits, then the kind's [`Table`] checks
//! the slot is live and of the same generation, so a stale, forged or foreign value is an
//! error (the MPI class of that kind), never a read of freed memory.

use std::sync::{Arc, Mutex, MutexGuard};

/// What a handle names. The numbers are part of the handle's bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Kind {
    /// `MPI_Comm`.
    Comm = 1,
    /// `MPI_Group`.
    Group = 2,
    /// `MPI_Datatype`.
    Datatype = 3,
    /// `MPI_Op`.
    Op = 4,
    /// `MPI_Request`.
    Request = 5,
    /// `MPI_Errhandler`.
    Errhandler = 6,
    /// `MPI_Info`.
    Info = 7,
    /// `MPI_Message`.
    Message = 8,
    /// `MPI_Session`.
    Session = 9,
    /// `MPI_Win` (only the null handle exists: no windows yet).
    Win = 10,
    /// `MPI_File` (only the null handle exists: no files yet).
    File = 11,
}

impl Kind {
    fn from_bits(b: usize) -> Option<Kind> {
        Some(match b {
            1 => Kind::Comm,
            2 => Kind::Group,
            3 => Kind::Datatype,
            4 => Kind::Op,
            5 => Kind::Request,
            6 => Kind::Errhandler,
            7 => Kind::Info,
            8 => Kind::Message,
            9 => Kind::Session,
            10 => Kind::Win,
            11 => Kind::File,
            _ => return None,
        })
    }
}

const INDEX_BITS: u32 = 18;
const GEN_BITS: u32 = 8;
const KIND_SHIFT: u32 = INDEX_BITS + GEN_BITS;
/// Live objects of one kind at once.
pub const MAX_SLOTS: usize = 1 << INDEX_BITS;
/// Handles at or above this are rcomm-made; below, predefined.
pub const FIRST_DYNAMIC: usize = 1 << KIND_SHIFT;

/// A rcomm-made handle's parts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Decoded {
    /// Its kind.
    pub kind: Kind,
    /// The slot's generation when the handle was made.
    pub generation: u8,
    /// The slot.
    pub index: u32,
}

/// Splits a handle value into kind, generation and slot, or `None` when it cannot be a
/// rcomm-made handle (predefined, too large, unknown kind). Pure arithmetic: safe on any value.
pub fn decode(h: usize) -> Option<Decoded> {
    if !(FIRST_DYNAMIC..1 << 31).contains(&h) {
        return None;
    }
    let kind = Kind::from_bits(h >> KIND_SHIFT)?;
    Some(Decoded {
        kind,
        generation: ((h >> INDEX_BITS) & ((1 << GEN_BITS) - 1)) as u8,
        index: (h & (MAX_SLOTS - 1)) as u32,
    })
}

/// The handle value of a slot.
pub fn encode(kind: Kind, generation: u8, index: u32) -> usize {
    ((kind as usize) << KIND_SHIFT) | ((generation as usize) << INDEX_BITS) | index as usize
}

struct Slot<T> {
    generation: u8,
    value: Option<T>,
}

/// The live objects of one kind. Freed slots are reused with the next generation, so an old
/// handle to a reused slot is refused (until the generation wraps, 256 reuses later).
pub struct Table<T> {
    kind: Kind,
    slots: Vec<Slot<T>>,
    free: Vec<u32>,
}

impl<T> Table<T> {
    /// An empty table for `kind`.
    pub const fn new(kind: Kind) -> Self {
        Table {
            kind,
            slots: Vec::new(),
            free: Vec::new(),
        }
    }

    /// Stores `value`; its handle, or `None` when the kind's slots are all taken.
    pub fn insert(&mut self, value: T) -> Option<usize> {
        let index = match self.free.pop() {
            Some(i) => i,
            None if self.slots.len() < MAX_SLOTS => {
                self.slots.push(Slot {
                    generation: 0,
                    value: None,
                });
                (self.slots.len() - 1) as u32
            }
            None => return None,
        };
        let slot = &mut self.slots[index as usize];
        slot.value = Some(value);
        Some(encode(self.kind, slot.generation, index))
    }

    fn slot_of(&self, h: usize) -> Option<usize> {
        let d = decode(h)?;
        let slot = self.slots.get(d.index as usize)?;
        (d.kind == self.kind && slot.generation == d.generation && slot.value.is_some())
            .then_some(d.index as usize)
    }

    /// The live object `h` names.
    pub fn get(&self, h: usize) -> Option<&T> {
        self.slot_of(h).and_then(|i| self.slots[i].value.as_ref())
    }

    /// The live object `h` names, to change.
    pub fn get_mut(&mut self, h: usize) -> Option<&mut T> {
        let i = self.slot_of(h)?;
        self.slots[i].value.as_mut()
    }

    /// Takes the object out; its handle (and every copy of it) is dead from now on.
    pub fn remove(&mut self, h: usize) -> Option<T> {
        let i = self.slot_of(h)?;
        let slot = &mut self.slots[i];
        slot.generation = slot.generation.wrapping_add(1);
        self.free.push(i as u32);
        slot.value.take()
    }

    /// Live objects.
    pub fn len(&self) -> usize {
        self.slots.len() - self.free.len()
    }

    /// Whether no object is live.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every live (handle, object).
    pub fn iter(&self) -> impl Iterator<Item = (usize, &T)> {
        self.slots.iter().enumerate().filter_map(|(i, s)| {
            s.value
                .as_ref()
                .map(|v| (encode(self.kind, s.generation, i as u32), v))
        })
    }

    /// Drops every object (finalize).
    pub fn clear(&mut self) {
        let kind = self.kind;
        *self = Table::new(kind);
    }
}

/// A table behind a mutex, for the process-wide registries. Objects are `Arc`s so a call
/// clones one out and lets go of the lock before it blocks (a `MPI_Wait` must not stop other
/// threads' calls).
pub struct Registry<T>(Mutex<Table<Arc<T>>>);

impl<T> Registry<T> {
    /// An empty registry for `kind`.
    pub const fn new(kind: Kind) -> Self {
        Registry(Mutex::new(Table::new(kind)))
    }

    /// The table, locked. A panic while it was held cannot leave it half-changed (each change
    /// is one `Vec` operation), so a poisoned lock is taken over.
    pub fn lock(&self) -> MutexGuard<'_, Table<Arc<T>>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The object `h` names.
    pub fn get(&self, h: usize) -> Option<Arc<T>> {
        self.lock().get(h).cloned()
    }

    /// Stores `value`; its handle.
    pub fn insert(&self, value: T) -> Option<usize> {
        self.lock().insert(Arc::new(value))
    }

    /// Stores an object already counted (one kept for reuse); its handle.
    pub fn insert_arc(&self, value: Arc<T>) -> Option<usize> {
        self.lock().insert(value)
    }

    /// Takes the object out.
    pub fn remove(&self, h: usize) -> Option<Arc<T>> {
        self.lock().remove(h)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn freed_handles_are_refused_and_slots_reused_with_a_new_generation() {
        let mut t = Table::new(Kind::Comm);
        let a = t.insert(1).unwrap();
        assert_eq!(t.get(a), Some(&1));
        assert_eq!(t.remove(a), Some(1));
        assert_eq!(t.get(a), None);
        assert_eq!(t.remove(a), None);
        let b = t.insert(2).unwrap();
        assert_ne!(a, b);
        assert_eq!(decode(a).unwrap().index, decode(b).unwrap().index);
        assert_eq!(t.get(b), Some(&2));
        assert_eq!(t.len(), 1);
    }

    #[test]
    fn a_handle_of_another_kind_is_refused() {
        let mut comms = Table::new(Kind::Comm);
        let mut groups = Table::new(Kind::Group);
        let c = comms.insert(1).unwrap();
        let g = groups.insert(2).unwrap();
        assert_eq!(comms.get(g), None);
        assert_eq!(groups.get(c), None);
    }

    #[test]
    fn predefined_values_are_not_dynamic() {
        for v in [0, 1, 0x101, 0x3ff, FIRST_DYNAMIC - 1, usize::MAX, 1 << 31] {
            assert_eq!(decode(v), None, "{v:#x}");
        }
    }

    proptest! {
        #[test]
        fn decode_inverts_encode(k in 1usize..=11, g: u8, i in 0u32..MAX_SLOTS as u32) {
            let kind = Kind::from_bits(k).unwrap();
            let h = encode(kind, g, i);
            prop_assert!(h < 1 << 31);
            prop_assert_eq!(decode(h), Some(Decoded { kind, generation: g, index: i }));
        }

        #[test]
        fn any_value_is_checked_without_panicking(h: usize, n in 0usize..8) {
            let mut t = Table::new(Kind::Request);
            let live: Vec<usize> = (0..n).map(|i| t.insert(i).unwrap()).collect();
            let got = t.get(h).copied();
            match live.iter().position(|&l| l == h) {
                Some(i) => prop_assert_eq!(got, Some(i)),
                None => prop_assert_eq!(got, None),
            }
        }
    }
}
