//! `bool` and `char` elements (`MPI_C_BOOL`, `MPI_WCHAR`-like) for point-to-point. They are
//! not `bytemuck::Pod` (not every bit pattern is a valid `bool` or `char`), so the generic calls
//! do not take them: these send a `bool` as one byte (0 or 1) and a `char` as its 4-byte scalar
//! value, and check on receipt that every element is valid (an error otherwise, never an
//! invalid value). `usize`/`isize` are `Pod` and go through the generic calls.

use crate::comm::{Communicator, Tag};
use crate::p2p::engine::Status;
use crate::p2p::matcher::Source;
use crate::{CommError, Result};

impl Communicator {
    /// Sends `bool`s, one byte each ([`send`](Self::send)).
    pub fn send_bools(&self, buf: &[bool], dest: u32, tag: Tag) -> Result<()> {
        let b: Vec<u8> = buf.iter().map(|&x| u8::from(x)).collect();
        self.send(&b, dest, tag)
    }

    /// Receives `bool`s sent by [`send_bools`](Self::send_bools) into the first elements of
    /// `buf` ([`recv`](Self::recv)); `status.count::<bool>()` says how many. A byte other than
    /// 0 or 1 is an error (and `buf` is left as it was).
    pub fn recv_bools(&self, buf: &mut [bool], src: impl Into<Source>, tag: Tag) -> Result<Status> {
        let mut b = vec![0u8; buf.len()];
        let st = self.recv(&mut b, src, tag)?;
        let got = &b[..st.bytes];
        if let Some(i) = got.iter().position(|&x| x > 1) {
            return Err(CommError::InvalidArg(format!(
                "recv_bools: element {i} is the byte {}, not a bool",
                got[i]
            )));
        }
        for (d, &x) in buf.iter_mut().zip(got) {
            *d = x == 1;
        }
        Ok(st)
    }

    /// Sends `char`s as their 4-byte scalar values ([`send`](Self::send)).
    pub fn send_chars(&self, buf: &[char], dest: u32, tag: Tag) -> Result<()> {
        let b: Vec<u32> = buf.iter().map(|&c| u32::from(c)).collect();
        self.send(&b, dest, tag)
    }

    /// Receives `char`s sent by [`send_chars`](Self::send_chars) into the first elements of
    /// `buf`; `status.count::<char>()` says how many. A value that is not a Unicode scalar
    /// value, or a length that is not whole chars, is an error (and `buf` is left as it was).
    pub fn recv_chars(&self, buf: &mut [char], src: impl Into<Source>, tag: Tag) -> Result<Status> {
        let mut b = vec![0u32; buf.len()];
        let st = self.recv(&mut b, src, tag)?;
        let got = &b[..st.bytes / 4];
        let chars: Option<Vec<char>> = got.iter().map(|&x| char::from_u32(x)).collect();
        let Some(chars) = chars else {
            let i = got
                .iter()
                .position(|&x| char::from_u32(x).is_none())
                .unwrap_or(0);
            return Err(CommError::InvalidArg(format!(
                "recv_chars: element {i} is {:#x}, not a char",
                got[i]
            )));
        };
        buf[..chars.len()].copy_from_slice(&chars);
        Ok(st)
    }
}

#[cfg(test)]
mod tests {
    use crate::Tag;

    #[test]
    fn bools_and_chars_go_to_oneself_and_invalid_ones_are_refused() {
        let w = crate::init().unwrap();
        let me = w.rank();
        w.send_bools(&[true, false, true], me, Tag(1)).unwrap();
        let mut b = [false; 4];
        let st = w.recv_bools(&mut b, me, Tag(1)).unwrap();
        assert_eq!((b, st.count::<bool>()), ([true, false, true, false], 3));
        w.send(&[0u8, 2], me, Tag(2)).unwrap();
        let mut b = [true; 2];
        assert!(w.recv_bools(&mut b, me, Tag(2)).is_err());
        assert_eq!(b, [true; 2], "left as it was");
        let s = ['a', 'é', '\u{1F600}', '\0'];
        w.send_chars(&s, me, Tag(3)).unwrap();
        let mut c = ['x'; 5];
        let st = w.recv_chars(&mut c, me, Tag(3)).unwrap();
        assert_eq!((&c[..4], c[4], st.count::<char>()), (&s[..], 'x', 4));
        w.send(&[0xD800u32], me, Tag(4)).unwrap();
        assert!(w.recv_chars(&mut c, me, Tag(4)).is_err(), "a surrogate");
        w.send(&[0u8; 3], me, Tag(5)).unwrap();
        assert!(w.recv_chars(&mut c, me, Tag(5)).is_err(), "not whole chars");
    }
}
