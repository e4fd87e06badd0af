//! Cartesian process topologies (`MPI_Dims_create`, `MPI_Cart_*`) and their neighbour
//! collectives (blocking and non-blocking; see [`neighbor`](crate::neighbor)) — what stencil
//! codes build their halo exchanges on.
//!
//! A [`CartComm`] is a communicator whose ranks sit on a grid in row-major order (the last
//! dimension varies fastest, as in MPI); `reorder` is accepted and ranks keep their order.
//! Neighbours are listed as MPI lists them: for each dimension, the one at −1, then the one at
//! +1; off the edge of a non-periodic dimension there is none (`MPI_PROC_NULL`): nothing is
//! sent there and its receive block is left as it was.

use crate::neighbor::{self, Edges, Layout, NeighborRequest};
use crate::{CommError, Communicator, Result, Tag};
use bytemuck::Pod;

/// Internal tags of neighbour exchanges: data travelling to the +1 neighbour of a dimension,
/// and to the −1 one (a rank can be both neighbours of another, in a periodic dimension of 2).
const TAG_UP: Tag = Tag(8);
const TAG_DOWN: Tag = Tag(9);

/// Fills the zeros of `dims` so that their product with the given entries is `nnodes`, as
/// balanced as possible and in non-increasing order (`MPI_Dims_create`).
pub fn dims_create(nnodes: u32, dims: &mut [u32]) -> Result<()> {
    let fixed: u64 = dims
        .iter()
        .filter(|&&d| d > 0)
        .map(|&d| u64::from(d))
        .product();
    let free = dims.iter().filter(|&&d| d == 0).count();
    if nnodes == 0 || fixed == 0 || u64::from(nnodes) % fixed != 0 {
        return Err(CommError::InvalidArg(format!(
            "dims_create: {nnodes} ranks cannot fill dims {dims:?}"
        )));
    }
    let mut left = u64::from(nnodes) / fixed;
    if free == 0 {
        return if left == 1 {
            Ok(())
        } else {
            Err(CommError::InvalidArg(format!(
                "dims_create: dims {dims:?} multiply to {fixed}, not {nnodes}"
            )))
        };
    }
    // Prime factors, largest first, each to the currently smallest free dimension.
    let mut factors = Vec::new();
    let mut p = 2;
    while p * p <= left {
        while left.is_multiple_of(p) {
            factors.push(p);
            left /= p;
        }
        p += 1;
    }
    if left > 1 {
        factors.push(left);
    }
    let mut out = vec![1u64; free];
    for f in factors.into_iter().rev() {
        let i = (0..free).min_by_key(|&i| out[i]).expect("free > 0");
        out[i] *= f;
    }
    out.sort_unstable_by(|a, b| b.cmp(a));
    let mut it = out.into_iter();
    for d in dims.iter_mut().filter(|d| **d == 0) {
        *d = it.next().expect("one per free dimension") as u32;
    }
    Ok(())
}

/// A communicator with a Cartesian grid (see the module notes). Dereferences to its
/// [`Communicator`].
#[derive(Debug, Clone)]
pub struct CartComm {
    comm: Communicator,
    dims: Vec<u32>,
    periods: Vec<bool>,
}

impl std::ops::Deref for CartComm {
    type Target = Communicator;
    fn deref(&self) -> &Communicator {
        &self.comm
    }
}

impl Communicator {
    /// A communicator of the first `dims.iter().product()` ranks on a grid of `dims` with
    /// `periods` (`MPI_Cart_create`); ranks beyond the grid get `None`. Collective.
    pub fn cart_create(
        &self,
        dims: &[u32],
        periods: &[bool],
        reorder: bool,
    ) -> Result<Option<CartComm>> {
        let _ = reorder; // accepted; ranks keep their order
        let cells = check_grid(dims, periods)?;
        if cells > u64::from(self.size()) {
            return Err(CommError::InvalidArg(format!(
                "cart_create: a grid of {dims:?} needs {cells} ranks, the communicator has {}",
                self.size()
            )));
        }
        let inside = u64::from(self.rank()) < cells;
        let comm = self.split(inside.then_some(0), self.rank() as i32)?;
        Ok(comm.map(|comm| CartComm {
            comm,
            dims: dims.to_vec(),
            periods: periods.to_vec(),
        }))
    }
}

fn check_grid(dims: &[u32], periods: &[bool]) -> Result<u64> {
    if dims.len() != periods.len() {
        return Err(CommError::InvalidArg(format!(
            "cart: {} dims but {} periods",
            dims.len(),
            periods.len()
        )));
    }
    if dims.contains(&0) {
        return Err(CommError::InvalidArg(format!(
            "cart: dims {dims:?} has an empty dimension"
        )));
    }
    dims.iter().try_fold(1u64, |acc, &d| {
        acc.checked_mul(u64::from(d))
            .filter(|&c| c <= u64::from(u32::MAX))
            .ok_or_else(|| {
                CommError::InvalidArg(format!("cart: dims {dims:?} hold too many ranks"))
            })
    })
}

impl CartComm {
    /// The communicator underneath.
    pub fn comm(&self) -> &Communicator {
        &self.comm
    }

    /// Extent of each dimension.
    pub fn dims(&self) -> &[u32] {
        &self.dims
    }

    /// Whether each dimension wraps around.
    pub fn periods(&self) -> &[bool] {
        &self.periods
    }

    /// The grid coordinates of `rank` (`MPI_Cart_coords`).
    pub fn coords(&self, rank: u32) -> Result<Vec<u32>> {
        if rank >= self.comm.size() {
            return Err(CommError::InvalidRank {
                rank,
                size: self.comm.size(),
            });
        }
        let mut c = vec![0; self.dims.len()];
        let mut r = rank;
        for (i, &d) in self.dims.iter().enumerate().rev() {
            c[i] = r % d;
            r /= d;
        }
        Ok(c)
    }

    /// The rank at `coords` (`MPI_Cart_rank`): periodic dimensions wrap, a coordinate off a
    /// non-periodic one is an error.
    pub fn rank_of(&self, coords: &[i64]) -> Result<u32> {
        if coords.len() != self.dims.len() {
            return Err(CommError::InvalidArg(format!(
                "cart_rank: {} coordinates for {} dimensions",
                coords.len(),
                self.dims.len()
            )));
        }
        let mut r: u64 = 0;
        for ((&c, &d), &p) in coords.iter().zip(&self.dims).zip(&self.periods) {
            let d64 = i64::from(d);
            let c = if p {
                c.rem_euclid(d64)
            } else if (0..d64).contains(&c) {
                c
            } else {
                return Err(CommError::InvalidArg(format!(
                    "cart_rank: coordinate {c} is off a non-periodic dimension of {d}"
                )));
            };
            r = r * u64::from(d) + c as u64;
        }
        Ok(r as u32)
    }

    /// The ranks `disp` steps down and up dimension `dim` from this one (`MPI_Cart_shift`):
    /// (source, destination), `None` off the edge of a non-periodic dimension.
    pub fn shift(&self, dim: usize, disp: i32) -> Result<(Option<u32>, Option<u32>)> {
        if dim >= self.dims.len() {
            return Err(CommError::InvalidArg(format!(
                "cart_shift: dimension {dim} of {}",
                self.dims.len()
            )));
        }
        let me = self.coords(self.comm.rank())?;
        let at = |delta: i64| {
            let mut c: Vec<i64> = me.iter().map(|&x| i64::from(x)).collect();
            c[dim] += delta;
            self.rank_of(&c).ok()
        };
        Ok((at(-i64::from(disp)), at(i64::from(disp))))
    }

    /// The sub-grid keeping the dimensions where `remain` is true (`MPI_Cart_sub`): one
    /// communicator per combination of the dropped coordinates. Collective.
    pub fn sub(&self, remain: &[bool]) -> Result<CartComm> {
        if remain.len() != self.dims.len() {
            return Err(CommError::InvalidArg(format!(
                "cart_sub: {} flags for {} dimensions",
                remain.len(),
                self.dims.len()
            )));
        }
        let me = self.coords(self.comm.rank())?;
        let (mut colour, mut key) = (0u64, 0u64);
        let (mut dims, mut periods) = (Vec::new(), Vec::new());
        for (i, &keep) in remain.iter().enumerate() {
            let d = u64::from(self.dims[i]);
            if keep {
                key = key * d + u64::from(me[i]);
                dims.push(self.dims[i]);
                periods.push(self.periods[i]);
            } else {
                colour = colour * d + u64::from(me[i]);
            }
        }
        let comm = self
            .comm
            .split(Some(colour as u32), key as i32)?
            .expect("every rank has a colour");
        Ok(CartComm {
            comm,
            dims,
            periods,
        })
    }

    /// The neighbours in MPI's order: per dimension, at −1 then at +1.
    pub fn neighbors(&self) -> Result<Vec<Option<u32>>> {
        let mut v = Vec::with_capacity(2 * self.dims.len());
        for d in 0..self.dims.len() {
            let (down, up) = self.shift(d, 1)?;
            v.push(down);
            v.push(up);
        }
        Ok(v)
    }

    /// This rank's edges for an exchange, in [`neighbors`](Self::neighbors)' order. Block 2d
    /// comes from the −1 neighbour, which sent it upwards; block 2d+1 from the +1 neighbour,
    /// which sent it downwards (the blocking tags). A non-blocking exchange (one tag) posts
    /// block 2d+1's receive before block 2d's: that is the order in which the neighbour at
    /// −1, sending down before up, sends them when it is also the neighbour at +1.
    fn edges(&self) -> Result<Edges> {
        let nb = self.neighbors()?;
        let dir = |i: usize, even: Tag, odd: Tag| if i.is_multiple_of(2) { even.0 } else { odd.0 };
        let at = |even, odd| -> Vec<Option<(u32, i32)>> {
            (nb.iter().enumerate())
                .map(|(i, w)| w.map(|w| (w, dir(i, even, odd))))
                .collect()
        };
        Ok(Edges {
            out: at(TAG_DOWN, TAG_UP),
            inn: at(TAG_UP, TAG_DOWN),
            recv_order: (0..nb.len()).map(|i| i ^ 1).collect(),
        })
    }

    /// Sends `send` to every neighbour and receives each neighbour's into its block of
    /// `recv` (`send.len()` elements per neighbour, in [`neighbors`](Self::neighbors)' order)
    /// (`MPI_Neighbor_allgather`). Collective.
    pub fn neighbor_allgather<T: Pod>(&self, send: &[T], recv: &mut [T]) -> Result<()> {
        let (e, op) = (self.edges()?, "neighbor_allgather");
        let l = Layout::allgather(&e, send.len(), recv.len())?;
        neighbor::exchange(&self.comm, &e, send, recv, &l, op)
    }

    /// Sends `send` to every neighbour and receives `recv_counts[k]` elements from neighbour k
    /// at `recv_displs[k]` of `recv`, in [`neighbors`](Self::neighbors)' order
    /// (`MPI_Neighbor_allgatherv`; in elements). No neighbour: nothing sent, its block
    /// untouched. What a neighbour sends must be exactly what this rank expects from it;
    /// receive blocks may not overlap. Collective.
    pub fn neighbor_allgatherv<T: Pod>(
        &self,
        send: &[T],
        recv: &mut [T],
        recv_counts: &[usize],
        recv_displs: &[usize],
    ) -> Result<()> {
        let (e, op) = (self.edges()?, "neighbor_allgatherv");
        let l = Layout::allgatherv(&e, send.len(), recv_counts, recv_displs);
        neighbor::exchange(&self.comm, &e, send, recv, &l, op)
    }

    /// Sends block k of `send` to neighbour k and receives neighbour k's into block k of
    /// `recv` (equal blocks, in [`neighbors`](Self::neighbors)' order;
    /// `MPI_Neighbor_alltoall`). Collective.
    pub fn neighbor_alltoall<T: Pod>(&self, send: &[T], recv: &mut [T]) -> Result<()> {
        let (e, op) = (self.edges()?, "neighbor_alltoall");
        let l = Layout::alltoall(&e, send.len(), recv.len())?;
        neighbor::exchange(&self.comm, &e, send, recv, &l, op)
    }

    /// Sends `send_counts[k]` elements at `send_displs[k]` of `send` to neighbour k and
    /// receives `recv_counts[k]` elements from neighbour k at `recv_displs[k]` of `recv`, in
    /// [`neighbors`](Self::neighbors)' order (`MPI_Neighbor_alltoallv`; counts and
    /// displacements in elements). No neighbour: nothing sent, its block untouched. What a
    /// neighbour sends must be exactly what this rank expects from it. Collective.
    pub fn neighbor_alltoallv<T: Pod>(
        &self,
        send: &[T],
        send_counts: &[usize],
        send_displs: &[usize],
        recv: &mut [T],
        recv_counts: &[usize],
        recv_displs: &[usize],
    ) -> Result<()> {
        let (e, op) = (self.edges()?, "neighbor_alltoallv");
        let l = Layout::alltoallv(send_counts, send_displs, recv_counts, recv_displs);
        neighbor::exchange(&self.comm, &e, send, recv, &l, op)
    }

    /// Starts [`neighbor_allgather`](Self::neighbor_allgather) over owned buffers
    /// (`MPI_Ineighbor_allgather`); `wait` hands back `recv`.
    pub fn ineighbor_allgather<T: Pod + Send>(
        &self,
        send: Vec<T>,
        recv: Vec<T>,
    ) -> Result<NeighborRequest<T>> {
        let e = self.edges()?;
        let l = Layout::allgather(&e, send.len(), recv.len());
        neighbor::start(&self.comm, &e, send, recv, l, "ineighbor_allgather")
    }

    /// Starts [`neighbor_allgatherv`](Self::neighbor_allgatherv) over owned buffers
    /// (`MPI_Ineighbor_allgatherv`); `wait` hands back `recv`.
    pub fn ineighbor_allgatherv<T: Pod + Send>(
        &self,
        send: Vec<T>,
        recv: Vec<T>,
        recv_counts: &[usize],
        recv_displs: &[usize],
    ) -> Result<NeighborRequest<T>> {
        let e = self.edges()?;
        let l = Ok(Layout::allgatherv(&e, send.len(), recv_counts, recv_displs));
        neighbor::start(&self.comm, &e, send, recv, l, "ineighbor_allgatherv")
    }

    /// Starts [`neighbor_alltoall`](Self::neighbor_alltoall) over owned buffers
    /// (`MPI_Ineighbor_alltoall`); `wait` hands back `recv`.
    pub fn ineighbor_alltoall<T: Pod + Send>(
        &self,
        send: Vec<T>,
        recv: Vec<T>,
    ) -> Result<NeighborRequest<T>> {
        let e = self.edges()?;
        let l = Layout::alltoall(&e, send.len(), recv.len());
        neighbor::start(&self.comm, &e, send, recv, l, "ineighbor_alltoall")
    }

    /// Starts [`neighbor_alltoallv`](Self::neighbor_alltoallv) over owned buffers
    /// (`MPI_Ineighbor_alltoallv`); `wait` hands back `recv`.
    pub fn ineighbor_alltoallv<T: Pod + Send>(
        &self,
        send: Vec<T>,
        send_counts: &[usize],
        send_displs: &[usize],
        recv: Vec<T>,
        recv_counts: &[usize],
        recv_displs: &[usize],
    ) -> Result<NeighborRequest<T>> {
        let e = self.edges()?;
        let l = Ok(Layout::alltoallv(
            send_counts,
            send_displs,
            recv_counts,
            recv_displs,
        ));
        neighbor::start(&self.comm, &e, send, recv, l, "ineighbor_alltoallv")
    }
}

impl Communicator {
    /// The rank this process would have in [`cart_create`](Self::cart_create) of this grid
    /// (`MPI_Cart_map`): its own rank if the grid holds it, `None` otherwise (rcomm does not
    /// reorder).
    pub fn cart_map(&self, dims: &[u32], periods: &[bool]) -> Result<Option<u32>> {
        let cells = check_grid(dims, periods)?;
        if cells > u64::from(self.size()) {
            return Err(CommError::InvalidArg(format!(
                "cart_map: a grid of {dims:?} needs {cells} ranks, the communicator has {}",
                self.size()
            )));
        }
        Ok((u64::from(self.rank()) < cells).then_some(self.rank()))
    }
}

#[cfg(test)]
mod tests {
    use super::dims_create;

    #[test]
    fn dims_create_balances_in_non_increasing_order_and_keeps_given_entries() {
        let cases: [(u32, &[u32], &[u32]); 7] = [
            (6, &[0, 0], &[3, 2]),
            (7, &[0, 0], &[7, 1]),
            (12, &[0, 0, 0], &[3, 2, 2]),
            (16, &[0, 0], &[4, 4]),
            (24, &[0, 3, 0], &[4, 3, 2]),
            (1, &[0, 0, 0], &[1, 1, 1]),
            (60, &[0, 0, 0], &[5, 4, 3]),
        ];
        for (n, given, want) in cases {
            let mut d = given.to_vec();
            dims_create(n, &mut d).unwrap();
            assert_eq!(d, want, "{n} into {given:?}");
        }
        assert!(dims_create(10, &mut [3, 0]).is_err());
        assert!(dims_create(6, &mut [2, 2]).is_err());
        assert!(dims_create(0, &mut [0]).is_err());
    }
}
