//! The messages between a rank's connection and the hub: a frame is a little-endian `u64`
//! length, then a tag byte and the fields, little-endian. Writes use `MSG_NOSIGNAL`: a peer
//! that died must be an error, not a SIGPIPE killing a C program that never ignored it.

use std::io::{self, Read};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;

/// The largest frame accepted (16 GiB): a bound on what a corrupt length can make us allocate.
const MAX_FRAME: u64 = 16 << 30;

/// What an operation is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    /// `ncclAllReduce`.
    AllReduce = 0,
    /// `ncclBroadcast`.
    Broadcast = 1,
    /// `ncclReduce`.
    Reduce = 2,
    /// `ncclAllGather`.
    AllGather = 3,
    /// `ncclReduceScatter`.
    ReduceScatter = 4,
    /// `ncclCommSplit`.
    Split = 5,
}

impl Kind {
    fn from_u8(v: u8) -> Option<Kind> {
        Some(match v {
            0 => Kind::AllReduce,
            1 => Kind::Broadcast,
            2 => Kind::Reduce,
            3 => Kind::AllGather,
            4 => Kind::ReduceScatter,
            5 => Kind::Split,
            _ => return None,
        })
    }

    /// The NCCL call's name.
    pub fn name(self) -> &'static str {
        match self {
            Kind::AllReduce => "ncclAllReduce",
            Kind::Broadcast => "ncclBroadcast",
            Kind::Reduce => "ncclReduce",
            Kind::AllGather => "ncclAllGather",
            Kind::ReduceScatter => "ncclReduceScatter",
            Kind::Split => "ncclCommSplit",
        }
    }
}

/// The arguments of one rank's part in a collective, which every rank must give alike
/// (except `color` and `key`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpHdr {
    /// The operation.
    pub kind: Kind,
    /// `ncclDataType_t`.
    pub dtype: i32,
    /// `ncclRedOp_t`.
    pub op: i32,
    /// The root of a broadcast or reduce, else 0.
    pub root: i32,
    /// Elements per rank (as the call's `count`).
    pub count: u64,
    /// Split's color.
    pub color: i32,
    /// Split's key.
    pub key: i32,
}

/// One frame.
#[derive(Debug, PartialEq, Eq)]
pub enum Msg {
    /// Rank → hub, first: this connection is `rank` of `nranks`, from process `pid`.
    Join { nranks: u32, rank: u32, pid: u32 },
    /// Rank → hub: its part of operation `seq` of communicator `comm`.
    Op {
        comm: u64,
        seq: u64,
        hdr: OpHdr,
        data: Vec<u8>,
    },
    /// Rank → hub: bytes for communicator rank `dst`.
    P2p { comm: u64, dst: u32, data: Vec<u8> },
    /// Rank → hub: this rank is done with `comm` (its connection closing is no failure of
    /// `comm` any more).
    Leave { comm: u64 },
    /// Hub → rank: every rank joined; `comm` is the communicator's id; `hub_rank` the rank
    /// living in the hub's process (-1: none).
    Joined { comm: u64, hub_rank: i32 },
    /// Hub → rank: this join was refused.
    JoinFailed { text: String },
    /// Hub → rank: the result of operation `seq` for this rank.
    Done { comm: u64, seq: u64, data: Vec<u8> },
    /// Hub → rank: split `seq` of `comm` made communicator `child` (0: none for this rank), in
    /// which this rank is `rank`; `members` are the child's ranks as ranks of the first
    /// communicator.
    Split {
        comm: u64,
        seq: u64,
        child: u64,
        rank: u32,
        members: Vec<u32>,
    },
    /// Hub → rank: bytes from communicator rank `src`.
    Deliver { comm: u64, src: u32, data: Vec<u8> },
    /// Hub → rank: `comm` failed (a peer lost, arguments that differ); it stays failed.
    CommError { comm: u64, text: String },
}

struct W(Vec<u8>);

impl W {
    fn u8(&mut self, v: u8) -> &mut Self {
        self.0.push(v);
        self
    }
    fn u32(&mut self, v: u32) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn i32(&mut self, v: i32) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn u64(&mut self, v: u64) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn bytes(&mut self, v: &[u8]) -> &mut Self {
        self.u64(v.len() as u64);
        self.0.extend_from_slice(v);
        self
    }
}

struct R<'a>(&'a [u8]);

fn bad(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("bad frame: {what}"))
}

impl R<'_> {
    fn take(&mut self, n: usize) -> io::Result<&[u8]> {
        if self.0.len() < n {
            return Err(bad("truncated"));
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Ok(a)
    }
    fn u8(&mut self) -> io::Result<u8> {
        Ok(self.take(1)?[0])
    }
    fn u32(&mut self) -> io::Result<u32> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().unwrap()))
    }
    fn i32(&mut self) -> io::Result<i32> {
        Ok(i32::from_le_bytes(self.take(4)?.try_into().unwrap()))
    }
    fn u64(&mut self) -> io::Result<u64> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().unwrap()))
    }
    fn bytes(&mut self) -> io::Result<Vec<u8>> {
        let n = usize::try_from(self.u64()?).map_err(|_| bad("length"))?;
        Ok(self.take(n)?.to_vec())
    }
    fn text(&mut self) -> io::Result<String> {
        String::from_utf8(self.bytes()?).map_err(|_| bad("text is not UTF-8"))
    }
}

impl Msg {
    fn encode(&self) -> Vec<u8> {
        let mut w = W(vec![0; 8]);
        match self {
            Msg::Join { nranks, rank, pid } => w.u8(1).u32(*nranks).u32(*rank).u32(*pid),
            Msg::Op {
                comm,
                seq,
                hdr,
                data,
            } => w
                .u8(2)
                .u64(*comm)
                .u64(*seq)
                .u8(hdr.kind as u8)
                .i32(hdr.dtype)
                .i32(hdr.op)
                .i32(hdr.root)
                .u64(hdr.count)
                .i32(hdr.color)
                .i32(hdr.key)
                .bytes(data),
            Msg::P2p { comm, dst, data } => w.u8(3).u64(*comm).u32(*dst).bytes(data),
            Msg::Leave { comm } => w.u8(4).u64(*comm),
            Msg::Joined { comm, hub_rank } => w.u8(5).u64(*comm).i32(*hub_rank),
            Msg::JoinFailed { text } => w.u8(6).bytes(text.as_bytes()),
            Msg::Done { comm, seq, data } => w.u8(7).u64(*comm).u64(*seq).bytes(data),
            Msg::Split {
                comm,
                seq,
                child,
                rank,
                members,
            } => {
                w.u8(8).u64(*comm).u64(*seq).u64(*child).u32(*rank);
                w.u32(members.len() as u32);
                for m in members {
                    w.u32(*m);
                }
                &mut w
            }
            Msg::Deliver { comm, src, data } => w.u8(9).u64(*comm).u32(*src).bytes(data),
            Msg::CommError { comm, text } => w.u8(10).u64(*comm).bytes(text.as_bytes()),
        };
        let len = (w.0.len() - 8) as u64;
        w.0[..8].copy_from_slice(&len.to_le_bytes());
        w.0
    }

    fn decode(body: &[u8]) -> io::Result<Msg> {
        let mut r = R(body);
        let m = match r.u8()? {
            1 => Msg::Join {
                nranks: r.u32()?,
                rank: r.u32()?,
                pid: r.u32()?,
            },
            2 => Msg::Op {
                comm: r.u64()?,
                seq: r.u64()?,
                hdr: OpHdr {
                    kind: Kind::from_u8(r.u8()?).ok_or_else(|| bad("operation kind"))?,
                    dtype: r.i32()?,
                    op: r.i32()?,
                    root: r.i32()?,
                    count: r.u64()?,
                    color: r.i32()?,
                    key: r.i32()?,
                },
                data: r.bytes()?,
            },
            3 => Msg::P2p {
                comm: r.u64()?,
                dst: r.u32()?,
                data: r.bytes()?,
            },
            4 => Msg::Leave { comm: r.u64()? },
            5 => Msg::Joined {
                comm: r.u64()?,
                hub_rank: r.i32()?,
            },
            6 => Msg::JoinFailed { text: r.text()? },
            7 => Msg::Done {
                comm: r.u64()?,
                seq: r.u64()?,
                data: r.bytes()?,
            },
            8 => {
                let (comm, seq, child, rank) = (r.u64()?, r.u64()?, r.u64()?, r.u32()?);
                let n = r.u32()? as usize;
                if n > r.0.len() / 4 {
                    return Err(bad("member count"));
                }
                let members = (0..n).map(|_| r.u32()).collect::<io::Result<_>>()?;
                Msg::Split {
                    comm,
                    seq,
                    child,
                    rank,
                    members,
                }
            }
            9 => Msg::Deliver {
                comm: r.u64()?,
                src: r.u32()?,
                data: r.bytes()?,
            },
            10 => Msg::CommError {
                comm: r.u64()?,
                text: r.text()?,
            },
            t => return Err(bad(&format!("tag {t}"))),
        };
        if !r.0.is_empty() {
            return Err(bad("trailing bytes"));
        }
        Ok(m)
    }
}

/// Writes `msg` whole (the caller serialises writers of one stream).
pub fn send(s: &UnixStream, msg: &Msg) -> io::Result<()> {
    let buf = msg.encode();
    let mut at = 0;
    while at < buf.len() {
        // SAFETY: a valid buffer of `buf.len() - at` bytes on an open socket.
        let n = unsafe {
            libc::send(
                s.as_raw_fd(),
                buf[at..].as_ptr().cast(),
                buf.len() - at,
                libc::MSG_NOSIGNAL,
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        at += n as usize;
    }
    Ok(())
}

/// The next frame; `None` when the peer closed between frames.
pub fn recv(mut s: &UnixStream) -> io::Result<Option<Msg>> {
    let mut len = [0u8; 8];
    let mut got = 0;
    while got < 8 {
        match s.read(&mut len[got..]) {
            Ok(0) if got == 0 => return Ok(None),
            Ok(0) => return Err(bad("truncated length")),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    let len = u64::from_le_bytes(len);
    if len == 0 || len > MAX_FRAME {
        return Err(bad(&format!("length {len}")));
    }
    let mut body = vec![0; len as usize];
    s.read_exact(&mut body)?;
    Msg::decode(&body).map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_message_round_trips_and_truncation_is_an_error() {
        let hdr = OpHdr {
            kind: Kind::ReduceScatter,
            dtype: 9,
            op: 4,
            root: 2,
            count: 65539,
            color: -1,
            key: 7,
        };
        let all = [
            Msg::Join {
                nranks: 4,
                rank: 3,
                pid: 77,
            },
            Msg::Op {
                comm: 2,
                seq: 9,
                hdr,
                data: vec![1, 2, 3],
            },
            Msg::P2p {
                comm: 1,
                dst: 2,
                data: vec![],
            },
            Msg::Leave { comm: 5 },
            Msg::Joined {
                comm: 1,
                hub_rank: -1,
            },
            Msg::JoinFailed { text: "no".into() },
            Msg::Done {
                comm: 1,
                seq: 3,
                data: vec![9; 10],
            },
            Msg::Split {
                comm: 1,
                seq: 4,
                child: 3,
                rank: 1,
                members: vec![0, 2],
            },
            Msg::Deliver {
                comm: 1,
                src: 0,
                data: vec![4],
            },
            Msg::CommError {
                comm: 1,
                text: "rank 2 of communicator 1 disconnected".into(),
            },
        ];
        for m in all {
            let buf = m.encode();
            assert_eq!(Msg::decode(&buf[8..]).unwrap(), m);
            for cut in 8..buf.len() - 1 {
                assert!(Msg::decode(&buf[8..cut]).is_err(), "{m:?} cut at {cut}");
            }
        }
        assert!(Msg::decode(&[99]).is_err());
    }
}
