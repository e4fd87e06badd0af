//! [`Mesh`]: the ranks of a communicator arranged as a named grid (`dp × pp × tp`, …) with one
//! communicator per dimension, placed so that the fastest dimensions stay inside a node.
//!
//! **Placement.** The communicator's ranks are listed node by node — nodes in the order of
//! their lowest rank, a node's ranks in rank order — and the `i`-th rank of that list gets
//! *mesh rank* `i`. Node identity is the one `init` established (hostname, boot id and network
//! namespace; `RCOMM_HOSTID` splits a machine into several nodes). Mesh rank `m` has the
//! coordinates of `m` in row-major order, the **last dimension varying fastest**: for sizes
//! `(s₀, s₁, …, sₖ₋₁)`, `m = (…((c₀·s₁ + c₁)·s₂ + c₂)…)·sₖ₋₁ + cₖ₋₁`. So the last dimension
//! fills a node first: with 4 ranks per node a `(dp 2, tp 4)` mesh has each `tp` group on one
//! node, also under `rcomm-run --map-by node`, where consecutive world ranks alternate between
//! nodes. (With the default `--map-by slot` and equal nodes, mesh rank = world rank.)
//!
//! **Chatty dimensions.** A dimension named `tp`, or marked with [`MeshBuilder::chatty`], is
//! expected to stay inside a node (tensor parallelism exchanges activations every layer). When
//! one of its groups would span nodes, [`Mesh::new`] logs a warning naming the dimension, its
//! size and the node size (rank 0 of the communicator logs it, under `RCOMM_DEBUG`'s default
//! level `WARN`); with [`MeshBuilder::strict`] building the mesh fails with that message on
//! every rank instead.
//!
//! ```
//! use rcomm::{Mesh, Op};
//! let world = rcomm::init()?;
//! let n = world.size();
//! // Run as a world of one, or e.g. `rcomm-run -n 8`: dp × pp × tp = 1 × 1 × n.
//! let mesh = Mesh::new(&world, &[("dp", 1), ("pp", 1), ("tp", n)])?;
//! let mut activ = vec![1.0f32; 16];
//! mesh.comm("tp")?.allreduce_in_place(&mut activ, Op::Sum)?;
//! assert_eq!(activ[0], n as f32);
//! let [dp, pp, tp] = mesh.coords() else { unreachable!() };
//! assert_eq!(mesh.rank_at(&[*dp, *pp, *tp])?, world.rank());
//! if let Some(next) = mesh.next("pp")? {
//!     mesh.comm("pp")?.send(&activ, next, rcomm::Tag(0))?; // to the next pipeline stage
//! }
//! # Ok::<(), rcomm::CommError>(())
//! ```

use crate::comm::Communicator;
use crate::{CommError, Result};
use rcomm_runtime::rlog;

/// Dimensions chatty without being marked so.
const CHATTY_BY_NAME: &[&str] = &["tp"];

/// A communicator's ranks as a grid of named dimensions, with a communicator per dimension
/// (see the [module documentation](crate::mesh) for the placement). Built collectively by
/// every rank of the communicator, with the same dimensions.
#[derive(Debug)]
pub struct Mesh {
    dims: Vec<(String, u32)>,
    /// This rank's coordinates.
    coords: Vec<u32>,
    /// Mesh rank → rank in `parent`.
    order: Vec<u32>,
    /// Rank in `parent` → mesh rank.
    mesh_rank: Vec<u32>,
    /// One per dimension: the ranks that share every other coordinate, ranked by their
    /// coordinate in this dimension.
    comms: Vec<Communicator>,
    parent: Communicator,
}

/// Options for a [`Mesh`]: `Mesh::builder(&world).dims(&[("dp", 2), ("tp", 4)]).strict(true)
/// .build()`.
#[derive(Debug)]
#[must_use = "a builder does nothing until build() is called"]
pub struct MeshBuilder<'a> {
    parent: &'a Communicator,
    dims: Vec<(String, u32)>,
    chatty: Vec<String>,
    strict: bool,
}

impl<'a> MeshBuilder<'a> {
    /// The dimensions, slowest first: `(name, size)`; the sizes multiply to the communicator's
    /// size.
    pub fn dims(mut self, dims: &[(&str, u32)]) -> Self {
        self.dims = dims.iter().map(|&(n, s)| (n.to_string(), s)).collect();
        self
    }

    /// Marks a dimension as chatty: it should stay inside a node, like one named `tp`.
    pub fn chatty(mut self, dim: &str) -> Self {
        self.chatty.push(dim.to_string());
        self
    }

    /// When a chatty dimension spans nodes: `false` (the default) logs a warning, `true` makes
    /// [`build`](Self::build) fail.
    pub fn strict(mut self, strict: bool) -> Self {
        self.strict = strict;
        self
    }

    /// Builds the mesh: collective over the communicator (it creates one communicator per
    /// dimension). Errors, alike on every rank given the same arguments: no dimensions, an
    /// empty or repeated name, a zero size, sizes whose product is not the communicator's
    /// size, an unknown chatty dimension, and in strict mode a chatty dimension that spans
    /// nodes.
    pub fn build(self) -> Result<Mesh> {
        let parent = self.parent;
        let shape = shape_text(&self.dims);
        if self.dims.is_empty() {
            return Err(CommError::InvalidArg("mesh: no dimensions given".into()));
        }
        for (i, (name, size)) in self.dims.iter().enumerate() {
            if name.is_empty() || self.dims[..i].iter().any(|(n, _)| n == name) {
                return Err(CommError::InvalidArg(format!(
                    "mesh {shape}: dimension names must be distinct and not empty"
                )));
            }
            if *size == 0 {
                return Err(CommError::InvalidArg(format!(
                    "mesh {shape}: dimension {name} has size 0"
                )));
            }
        }
        let total: u64 = self.dims.iter().map(|(_, s)| u64::from(*s)).product();
        if total != u64::from(parent.size()) {
            return Err(CommError::InvalidArg(format!(
                "mesh {shape} has {total} ranks but the communicator has {}",
                parent.size()
            )));
        }
        if let Some(c) = self
            .chatty
            .iter()
            .find(|c| !self.dims.iter().any(|(n, _)| n == *c))
        {
            return Err(CommError::InvalidArg(format!(
                "mesh {shape}: chatty dimension {c} is not one of its dimensions"
            )));
        }
        let node: Vec<u32> = (0..parent.size())
            .map(|r| parent.topology().node_of(r))
            .collect::<Result<_>>()?;
        let order = placement(&node);
        let mut mesh_rank = vec![0u32; order.len()];
        for (m, &r) in order.iter().enumerate() {
            mesh_rank[r as usize] = m as u32;
        }
        let sizes: Vec<u32> = self.dims.iter().map(|(_, s)| *s).collect();
        for (d, (name, size)) in self.dims.iter().enumerate() {
            let chatty = CHATTY_BY_NAME.contains(&name.as_str()) || self.chatty.contains(name);
            if !chatty || !spans_nodes(&node, &order, &sizes, d) {
                continue;
            }
            let msg = span_message(name, *size, &node, &sizes[d..]);
            if self.strict {
                return Err(CommError::InvalidArg(format!("mesh {shape}: {msg}")));
            }
            if parent.rank() == 0 {
                rlog!(Warn, "MESH", "mesh {shape}: {msg}");
            }
        }
        let me = mesh_rank[parent.rank() as usize];
        let coords = coords_of(me, &sizes);
        let mut comms = Vec::with_capacity(sizes.len());
        for d in 0..sizes.len() {
            let keep: Vec<bool> = (0..sizes.len()).map(|e| e == d).collect();
            let c = split_along(parent, &coords, &sizes, &keep)?;
            // The hang report and timeout errors name it by its dimension.
            c.set_name(&self.dims[d].0);
            comms.push(c);
        }
        rlog!(
            Info,
            "MESH",
            "mesh {shape}: rank {} (world rank {}) at {coords:?}",
            parent.rank(),
            parent.world_rank(parent.rank())?
        );
        Ok(Mesh {
            dims: self.dims,
            coords,
            order,
            mesh_rank,
            comms,
            parent: parent.clone(),
        })
    }
}

impl Mesh {
    /// A mesh of `comm`'s ranks (usually the world) with these dimensions, slowest first, a
    /// warning logged if a `tp` dimension spans nodes. Collective over `comm`. See
    /// [`Mesh::builder`] for chatty dimensions and strict mode.
    pub fn new(comm: &Communicator, dims: &[(&str, u32)]) -> Result<Mesh> {
        Mesh::builder(comm).dims(dims).build()
    }

    /// A builder for a mesh of `comm`'s ranks.
    pub fn builder(comm: &Communicator) -> MeshBuilder<'_> {
        MeshBuilder {
            parent: comm,
            dims: Vec::new(),
            chatty: Vec::new(),
            strict: false,
        }
    }

    /// The dimensions, slowest first, with their sizes.
    pub fn dims(&self) -> &[(String, u32)] {
        &self.dims
    }

    /// This rank's mesh rank (its position in the placement order).
    pub fn rank(&self) -> u32 {
        self.mesh_rank[self.parent.rank() as usize]
    }

    /// This rank's coordinates, one per dimension, slowest first.
    pub fn coords(&self) -> &[u32] {
        &self.coords
    }

    /// This rank's coordinate along `dim` (its rank in [`comm(dim)`](Self::comm)).
    pub fn coord(&self, dim: &str) -> Result<u32> {
        Ok(self.coords[self.dim(dim)?])
    }

    /// The size of dimension `dim`.
    pub fn dim_size(&self, dim: &str) -> Result<u32> {
        Ok(self.dims[self.dim(dim)?].1)
    }

    /// The communicator along `dim`: the ranks that share every other coordinate, ranked by
    /// their coordinate along `dim`.
    pub fn comm(&self, dim: &str) -> Result<&Communicator> {
        Ok(&self.comms[self.dim(dim)?])
    }

    /// The rank, in the communicator the mesh was made of (the world rank for a mesh of the
    /// world), at `coords`.
    pub fn rank_at(&self, coords: &[u32]) -> Result<u32> {
        if coords.len() != self.dims.len() {
            return Err(CommError::InvalidArg(format!(
                "mesh {}: {} coordinates given for {} dimensions",
                shape_text(&self.dims),
                coords.len(),
                self.dims.len()
            )));
        }
        let mut m = 0u32;
        for (c, (name, size)) in coords.iter().zip(&self.dims) {
            if c >= size {
                return Err(CommError::InvalidArg(format!(
                    "mesh {}: coordinate {c} is out of range for dimension {name} of size {size}",
                    shape_text(&self.dims)
                )));
            }
            m = m * size + c;
        }
        Ok(self.order[m as usize])
    }

    /// The coordinates of `rank` (a rank in the communicator the mesh was made of).
    pub fn coords_of(&self, rank: u32) -> Result<Vec<u32>> {
        let m = *self
            .mesh_rank
            .get(rank as usize)
            .ok_or(CommError::InvalidRank {
                rank,
                size: self.parent.size(),
            })?;
        Ok(coords_of(m, &self.sizes()))
    }

    /// A communicator along several dimensions: the ranks that share the coordinates of every
    /// dimension not named, ranked row-major over the named ones in the mesh's order (the
    /// order of `dims` does not matter; as MPI_Cart_sub). Collective over the communicator the
    /// mesh was made of.
    pub fn sub(&self, dims: &[&str]) -> Result<Communicator> {
        let mut keep = vec![false; self.dims.len()];
        for d in dims {
            let i = self.dim(d)?;
            if keep[i] {
                return Err(CommError::InvalidArg(format!(
                    "mesh sub: dimension {d} is named twice"
                )));
            }
            keep[i] = true;
        }
        let c = split_along(&self.parent, &self.coords, &self.sizes(), &keep)?;
        c.set_name(&dims.join(","));
        Ok(c)
    }

    /// The next rank along `dim` (coordinate + 1), as a rank of [`comm(dim)`](Self::comm);
    /// `None` on the last (no wrap-around: a pipeline's last stage has no next).
    pub fn next(&self, dim: &str) -> Result<Option<u32>> {
        let d = self.dim(dim)?;
        Ok(Some(self.coords[d] + 1).filter(|&c| c < self.dims[d].1))
    }

    /// The previous rank along `dim` (coordinate − 1), as a rank of
    /// [`comm(dim)`](Self::comm); `None` on the first.
    pub fn prev(&self, dim: &str) -> Result<Option<u32>> {
        let d = self.dim(dim)?;
        Ok(self.coords[d].checked_sub(1))
    }

    fn sizes(&self) -> Vec<u32> {
        self.dims.iter().map(|(_, s)| *s).collect()
    }

    /// The index of dimension `name`, or an error listing the dimensions.
    fn dim(&self, name: &str) -> Result<usize> {
        self.dims
            .iter()
            .position(|(n, _)| n == name)
            .ok_or_else(|| {
                let names: Vec<&str> = self.dims.iter().map(|(n, _)| n.as_str()).collect();
                CommError::InvalidArg(format!(
                    "mesh has no dimension {name:?} (it has {})",
                    names.join(", ")
                ))
            })
    }
}

/// `dp=2 × tp=4`.
fn shape_text(dims: &[(String, u32)]) -> String {
    let parts: Vec<String> = dims.iter().map(|(n, s)| format!("{n}={s}")).collect();
    format!("({})", parts.join(" × "))
}

/// Splits `parent` into the communicators along the dimensions marked in `keep`: the colour
/// is the row-major index of the other coordinates, the key that of the kept ones.
fn split_along(
    parent: &Communicator,
    coords: &[u32],
    sizes: &[u32],
    keep: &[bool],
) -> Result<Communicator> {
    let (mut color, mut key) = (0u32, 0u32);
    for ((&c, &s), &k) in coords.iter().zip(sizes).zip(keep) {
        if k {
            key = key * s + c;
        } else {
            color = color * s + c;
        }
    }
    parent
        .split(Some(color), key as i32)?
        .ok_or_else(|| CommError::InvalidArg("mesh split opted out".into()))
}

/// The placement: mesh rank → rank, given each rank's node (`node[r]`, equal for ranks on one
/// node). Nodes in the order of their lowest rank, a node's ranks in rank order.
pub(crate) fn placement(node: &[u32]) -> Vec<u32> {
    let mut first: Vec<(u32, u32)> = Vec::new(); // (node, its lowest rank)
    for (r, &n) in node.iter().enumerate() {
        if !first.iter().any(|&(m, _)| m == n) {
            first.push((n, r as u32));
        }
    }
    let mut order: Vec<u32> = (0..node.len() as u32).collect();
    order.sort_by_key(|&r| {
        let pos = first.iter().position(|&(m, _)| m == node[r as usize]);
        (pos, r)
    });
    order
}

/// Mesh rank `m`'s coordinates, row-major (last dimension fastest).
pub(crate) fn coords_of(mut m: u32, sizes: &[u32]) -> Vec<u32> {
    let mut c = vec![0u32; sizes.len()];
    for (ci, &s) in c.iter_mut().zip(sizes).rev() {
        *ci = m % s;
        m /= s;
    }
    c
}

/// Whether some group along dimension `d` (mesh ranks that share every other coordinate)
/// has ranks on more than one node.
pub(crate) fn spans_nodes(node: &[u32], order: &[u32], sizes: &[u32], d: usize) -> bool {
    let stride: u32 = sizes[d + 1..].iter().product();
    (0..order.len() as u32)
        .filter(|&m| coords_of(m, sizes)[d] == 0)
        .any(|m0| {
            let n0 = node[order[m0 as usize] as usize];
            (1..sizes[d]).any(|i| node[order[(m0 + i * stride) as usize] as usize] != n0)
        })
}

/// "dimension tp of size 8 spans nodes: nodes have 4 ranks", with what would fix it.
/// `inner` are the sizes of the dimension and those after it.
fn span_message(name: &str, size: u32, node: &[u32], inner: &[u32]) -> String {
    let mut per_node: Vec<(u32, u32)> = Vec::new();
    for &n in node {
        match per_node.iter_mut().find(|(m, _)| *m == n) {
            Some(e) => e.1 += 1,
            None => per_node.push((n, 1)),
        }
    }
    let lo = per_node.iter().map(|e| e.1).min().unwrap_or(0);
    let hi = per_node.iter().map(|e| e.1).max().unwrap_or(0);
    let have = if lo == hi {
        format!("nodes have {lo} ranks")
    } else {
        format!("nodes have {lo} to {hi} ranks")
    };
    let block: u32 = inner.iter().product();
    let fix = if inner.len() == 1 {
        format!("make {name} divide the ranks of every node")
    } else {
        format!(
            "{name} and the dimensions after it span {block} ranks: put {name} last, or make \
             that product divide the ranks of every node"
        )
    };
    format!("dimension {name} of size {size} spans nodes: {have} ({fix})")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Node of each rank from a per-rank label list.
    fn nodes(s: &str) -> Vec<u32> {
        s.split(',').map(|x| x.trim().parse().unwrap()).collect()
    }

    #[test]
    fn placement_is_node_major_in_rank_order() {
        // --map-by slot, two nodes of 4: the identity.
        assert_eq!(
            placement(&nodes("0,0,0,0,4,4,4,4")),
            (0..8).collect::<Vec<_>>()
        );
        // --map-by node: consecutive ranks alternate.
        assert_eq!(
            placement(&nodes("0,1,0,1,0,1,0,1")),
            [0, 2, 4, 6, 1, 3, 5, 7]
        );
        // Node keys need not be sorted or be ranks; nodes come in the order of their
        // lowest rank.
        assert_eq!(placement(&nodes("9,3,3,9,7")), [0, 3, 1, 2, 4]);
        assert_eq!(placement(&[]), Vec::<u32>::new());
    }

    #[test]
    fn coordinates_are_row_major_last_fastest() {
        let sizes = [2, 4, 8];
        for m in 0..64 {
            let c = coords_of(m, &sizes);
            assert_eq!((c[0] * 4 + c[1]) * 8 + c[2], m);
            assert!(c.iter().zip(&sizes).all(|(c, s)| c < s));
        }
        assert_eq!(coords_of(13, &sizes), [0, 1, 5]);
        assert_eq!(coords_of(5, &[8]), [5]);
    }

    #[test]
    fn tp_stays_in_a_node_when_it_fits_and_spans_when_not() {
        let slot = nodes("0,0,0,0,4,4,4,4");
        let by_node = nodes("0,1,0,1,0,1,0,1");
        for node in [&slot, &by_node] {
            let order = placement(node);
            // (dp 2, tp 4): tp groups are whole nodes.
            assert!(!spans_nodes(node, &order, &[2, 4], 1));
            assert!(spans_nodes(node, &order, &[2, 4], 0), "dp crosses nodes");
            // (dp 4, tp 2) and (dp 2, pp 2, tp 2): tp inside.
            assert!(!spans_nodes(node, &order, &[4, 2], 1));
            assert!(!spans_nodes(node, &order, &[2, 2, 2], 2));
            assert!(!spans_nodes(node, &order, &[2, 2, 2], 1), "pp·tp = 4 fits");
            assert!(spans_nodes(node, &order, &[2, 2, 2], 0));
            // (tp 8) and (tp 2, dp 4): tp spans.
            assert!(spans_nodes(node, &order, &[8], 0));
            assert!(spans_nodes(node, &order, &[2, 4], 0));
        }
        // Without node-major placement, --map-by node would put every tp group across both
        // nodes: the identity order shows it.
        let identity: Vec<u32> = (0..8).collect();
        assert!(spans_nodes(&by_node, &identity, &[2, 4], 1));
        // Unequal nodes (3 and 5 ranks): tp 4's first group straddles them.
        let uneven = nodes("0,0,0,3,3,3,3,3");
        assert!(spans_nodes(&uneven, &placement(&uneven), &[2, 4], 1));
        // (2 and 6 ranks): tp 2 fits.
        let uneven = nodes("0,0,2,2,2,2,2,2");
        assert!(!spans_nodes(&uneven, &placement(&uneven), &[4, 2], 1));
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(300))]

        /// Any node assignment, any shape: the placement is a permutation keeping each node's
        /// ranks together and in rank order; a dimension spans nodes exactly when one of its
        /// groups has ranks on two nodes (checked by brute force); and the dimensions whose
        /// block (its size times those after it) divides every node's rank count never do.
        #[test]
        fn placement_keeps_nodes_together_and_spanning_is_exact(
            node in proptest::collection::vec(0..4u32, 1..25),
            split in proptest::collection::vec(1..5u32, 0..3),
        ) {
            let n = node.len() as u32;
            // A shape of n: factors taken from `split` where they divide, then the rest.
            let mut sizes = Vec::new();
            let mut left = n;
            for f in split {
                if left.is_multiple_of(f) {
                    sizes.push(f);
                    left /= f;
                }
            }
            sizes.push(left);
            let order = placement(&node);
            let mut sorted = order.clone();
            sorted.sort_unstable();
            proptest::prop_assert_eq!(sorted, (0..n).collect::<Vec<_>>());
            for w in order.windows(2) {
                let (a, b) = (w[0] as usize, w[1] as usize);
                if node[a] == node[b] {
                    proptest::prop_assert!(a < b);
                }
            }
            let mut seen = Vec::new();
            for &r in &order {
                let k = node[r as usize];
                if seen.last() != Some(&k) {
                    proptest::prop_assert!(!seen.contains(&k), "node {} split", k);
                    seen.push(k);
                }
            }
            for d in 0..sizes.len() {
                let mut brute = false;
                for a in 0..n {
                    for b in 0..n {
                        let (ca, cb) = (coords_of(a, &sizes), coords_of(b, &sizes));
                        let same_group = (0..sizes.len()).all(|e| e == d || ca[e] == cb[e]);
                        brute |= same_group
                            && node[order[a as usize] as usize] != node[order[b as usize] as usize];
                    }
                }
                proptest::prop_assert_eq!(spans_nodes(&node, &order, &sizes, d), brute);
                let block: u32 = sizes[d..].iter().product();
                let fits = node
                    .iter()
                    .all(|k| (node.iter().filter(|x| *x == k).count() as u32).is_multiple_of(block));
                if fits {
                    proptest::prop_assert!(!brute);
                }
            }
        }
    }

    #[test]
    fn the_message_names_dimension_size_and_node_size() {
        let m = span_message("tp", 8, &nodes("0,0,0,0,4,4,4,4"), &[8]);
        assert!(
            m.starts_with("dimension tp of size 8 spans nodes: nodes have 4 ranks"),
            "{m}"
        );
        let m = span_message("tp", 4, &nodes("0,0,0,3,3,3,3,3"), &[4]);
        assert!(m.contains("nodes have 3 to 5 ranks"), "{m}");
        let m = span_message("pp", 4, &nodes("0,0,0,0,4,4,4,4"), &[4, 2]);
        assert!(m.contains("span 8 ranks: put pp last"), "{m}");
    }

    #[test]
    fn a_world_of_one_makes_meshes_and_rejects_bad_shapes() {
        let w = crate::init().unwrap();
        let m = Mesh::new(&w, &[("dp", 1), ("tp", 1)]).unwrap();
        assert_eq!(
            (m.coords(), m.rank(), m.rank_at(&[0, 0]).unwrap()),
            (&[0, 0][..], 0, 0)
        );
        assert_eq!((m.next("tp").unwrap(), m.prev("tp").unwrap()), (None, None));
        assert_eq!(m.comm("dp").unwrap().size(), 1);
        assert_eq!(m.sub(&["tp", "dp"]).unwrap().size(), 1);
        // Named for the hang report: the world, each dimension, a sub-mesh.
        assert_eq!(w.name(), "world");
        assert_eq!(m.comm("tp").unwrap().name(), "tp");
        assert_eq!(m.sub(&["tp", "dp"]).unwrap().name(), "tp,dp");
        let d = w.dup().unwrap();
        assert_eq!(d.name(), "");
        d.set_name("halo");
        assert_eq!(d.clone().name(), "halo");
        let e = m.comm("ep").unwrap_err().to_string();
        assert!(
            e.contains("no dimension \"ep\"") && e.contains("dp, tp"),
            "{e}"
        );
        assert!(m.rank_at(&[0]).is_err() && m.rank_at(&[0, 1]).is_err());
        assert!(m.sub(&["tp", "tp"]).is_err());
        let e = Mesh::new(&w, &[("dp", 2), ("tp", 4)])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("(dp=2 × tp=4) has 8 ranks but the communicator has 1"),
            "{e}"
        );
        assert!(Mesh::new(&w, &[]).is_err());
        assert!(Mesh::new(&w, &[("a", 1), ("a", 1)]).is_err());
        assert!(Mesh::new(&w, &[("a", 0)]).is_err());
        let e = Mesh::builder(&w)
            .dims(&[("a", 1)])
            .chatty("b")
            .build()
            .unwrap_err()
            .to_string();
        assert!(e.contains("chatty dimension b"), "{e}");
    }
}
