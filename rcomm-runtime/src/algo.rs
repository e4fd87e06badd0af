//! The collective algorithm registry: every operation `RCOMM_ALGO` knows ([`Coll`]), every
//! algorithm ([`Algo`]), and the one table of which algorithms each operation accepts. An
//! algorithm's name is spelled here and nowhere else (`tests/tests/registry.rs` holds that
//! rule): configuration parses through it, the tuner and the executors match on [`Algo`], and
//! the flight recorder stores [`Algo::code`], turning it into a name only when it prints.
//!
//! This module names nothing else of its crate, so that it can move with the configuration.

use std::fmt;

/// The word `RCOMM_ALGO` and `with_algo` take for "let the tuner choose"; not an algorithm.
pub const AUTO: &str = "auto";

/// A collective algorithm (or a variant a schedule is cached under).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum Algo {
    /// Ring (reduce-scatter then allgather for the reductions).
    Ring = 1,
    /// Recursive doubling.
    Rd = 2,
    /// Rabenseifner's reduce-scatter by halving, allgather by doubling.
    Rabenseifner = 3,
    /// Every rank to every owner at once, combined in rank order.
    Direct = 4,
    /// Node-local shared-memory windows.
    Shm = 5,
    /// A composition: within each node, across nodes, within each node.
    Hier = 6,
    /// Binomial tree.
    Tree = 7,
    /// The binomial reduce combining in rank order (a non-commutative op's tree).
    TreeOrdered = 8,
    /// Scatter, then ring allgather.
    ScatterAllgather = 9,
    /// Segmented chain.
    Pipeline = 10,
    /// Bruck's log-step exchange.
    Bruck = 11,
    /// Pairwise exchange.
    Pairwise = 12,
    /// The root to or from every rank in turn.
    Linear = 13,
    /// A chain in rank order.
    Chain = 14,
    /// The exclusive scan's chain.
    ExscanChain = 15,
    /// The dissemination barrier.
    Dissemination = 16,
    /// Device: every rank reads every other rank's buffer in one step.
    OneShot = 17,
    /// Device: reduce-scatter then allgather, two steps.
    TwoShot = 18,
    /// Device: the host collective over host copies.
    Staged = 19,
}

impl Algo {
    /// Every algorithm, in code order.
    pub const ALL: [Algo; 19] = [
        Algo::Ring,
        Algo::Rd,
        Algo::Rabenseifner,
        Algo::Direct,
        Algo::Shm,
        Algo::Hier,
        Algo::Tree,
        Algo::TreeOrdered,
        Algo::ScatterAllgather,
        Algo::Pipeline,
        Algo::Bruck,
        Algo::Pairwise,
        Algo::Linear,
        Algo::Chain,
        Algo::ExscanChain,
        Algo::Dissemination,
        Algo::OneShot,
        Algo::TwoShot,
        Algo::Staged,
    ];

    /// Its name, as `RCOMM_ALGO`, logs and hang reports spell it.
    pub const fn name(self) -> &'static str {
        match self {
            Algo::Ring => "ring",
            Algo::Rd => "rd",
            Algo::Rabenseifner => "rabenseifner",
            Algo::Direct => "direct",
            Algo::Shm => "shm",
            Algo::Hier => "hier",
            Algo::Tree => "tree",
            Algo::TreeOrdered => "tree-ordered",
            Algo::ScatterAllgather => "scatter_allgather",
            Algo::Pipeline => "pipeline",
            Algo::Bruck => "bruck",
            Algo::Pairwise => "pairwise",
            Algo::Linear => "linear",
            Algo::Chain => "chain",
            Algo::ExscanChain => "exscan-chain",
            Algo::Dissemination => "dissemination",
            Algo::OneShot => "one_shot",
            Algo::TwoShot => "two_shot",
            Algo::Staged => "staged",
        }
    }

    /// The algorithm called `name`.
    pub fn from_name(name: &str) -> Option<Algo> {
        Algo::ALL.into_iter().find(|a| a.name() == name)
    }

    /// A small stable number (1..=255; 0 is left for "none"), for the flight recorder's slot.
    pub const fn code(self) -> u8 {
        self as u8
    }

    /// The algorithm of [`code`](Self::code) `c`.
    pub fn from_code(c: u8) -> Option<Algo> {
        (c as usize)
            .checked_sub(1)
            .and_then(|i| Algo::ALL.get(i))
            .copied()
    }
}

impl fmt::Display for Algo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Declares [`Coll`] and the table: each operation, its name, and the algorithms it accepts in
/// the order the tuner breaks ties of predicted time by (so equal costs resolve alike on
/// every rank) and `RCOMM_ALGO`'s messages list them.
macro_rules! registry {
    (
        host { $($h:ident $hn:literal => [$($ha:ident),* $(,)?],)* }
        device { $($d:ident $dn:literal => [$($da:ident),* $(,)?],)* }
    ) => {
        /// A collective operation, as `RCOMM_ALGO` names it: the host ones first (their
        /// discriminants, 0 up, index per-kind tables), then those on device buffers.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum Coll {
            $(#[doc = $hn] $h,)*
            $(#[doc = $dn] $d,)*
        }

        impl Coll {
            /// The collectives on host buffers.
            pub const HOST: &'static [Coll] = &[$(Coll::$h),*];
            /// The collectives on device buffers.
            pub const DEVICE: &'static [Coll] = &[$(Coll::$d),*];

            /// Its name in `RCOMM_ALGO`.
            pub const fn name(self) -> &'static str {
                match self {
                    $(Coll::$h => $hn,)*
                    $(Coll::$d => $dn,)*
                }
            }

            /// The algorithms it accepts (without `auto`), in the table's order.
            pub const fn algos(self) -> &'static [Algo] {
                match self {
                    $(Coll::$h => &[$(Algo::$ha),*],)*
                    $(Coll::$d => &[$(Algo::$da),*],)*
                }
            }

            /// The names `RCOMM_ALGO` accepts for it: `auto`, then [`algos`](Self::algos).
            pub const fn algo_names(self) -> &'static [&'static str] {
                match self {
                    $(Coll::$h => {
                        const N: &[&str] = &[AUTO, $(Algo::$ha.name()),*];
                        N
                    })*
                    $(Coll::$d => {
                        const N: &[&str] = &[AUTO, $(Algo::$da.name()),*];
                        N
                    })*
                }
            }
        }

        /// (operation, accepted names with `auto` first) of the host collectives.
        pub const HOST_NAMES: &[(&str, &[&str])] = &[$(($hn, Coll::$h.algo_names())),*];
        /// The same for the collectives on device buffers.
        pub const DEVICE_NAMES: &[(&str, &[&str])] = &[$(($dn, Coll::$d.algo_names())),*];
    };
}

registry! {
    host {
        Allreduce "allreduce" => [Ring, Rd, Rabenseifner, Direct, Shm, Hier],
        Bcast "bcast" => [Tree, ScatterAllgather, Pipeline, Shm, Hier],
        Reduce "reduce" => [Tree, Direct],
        Allgather "allgather" => [Ring, Bruck, Shm, Hier],
        ReduceScatter "reduce_scatter" => [Ring, Direct, Shm, Hier],
        Alltoall "alltoall" => [Pairwise, Bruck, Shm],
        Gather "gather" => [Linear, Tree],
        Scatter "scatter" => [Linear, Tree],
        Scan "scan" => [Chain],
    }
    // rcomm's own algorithms run by the device executor; `staged`: the host collective over
    // host copies.
    device {
        AllreduceDevice "allreduce_device" => [OneShot, TwoShot, Ring, Hier, Staged],
        ReduceScatterDevice "reduce_scatter_device" => [Direct, Ring, Staged],
        AllgatherDevice "allgather_device" => [Direct, Ring, Staged],
        BcastDevice "bcast_device" => [Tree, Staged],
        AlltoallDevice "alltoall_device" => [Pairwise, Staged],
    }
}

impl Coll {
    /// Every operation, host then device.
    pub fn all() -> impl Iterator<Item = Coll> {
        Coll::HOST.iter().chain(Coll::DEVICE).copied()
    }

    /// The operation called `name`.
    pub fn from_name(name: &str) -> Option<Coll> {
        Coll::all().find(|c| c.name() == name)
    }

    /// Whether it runs on device buffers.
    pub fn is_device(self) -> bool {
        Coll::DEVICE.contains(&self)
    }

    /// Whether it accepts `algo`.
    pub fn accepts(self, algo: Algo) -> bool {
        self.algos().contains(&algo)
    }
}

impl fmt::Display for Coll {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One operation's forced algorithm (`None`: `auto`, the tuner's choice).
pub type Forced = (Coll, Option<Algo>);

/// Parses `op:algo,op:algo` (case and spaces ignored) into (operation, forced algorithm;
/// `None` for `auto`), checking every name against the table; the error says what was
/// expected.
pub fn parse_forced(v: &str) -> Result<Vec<Forced>, String> {
    let mut out = Vec::new();
    for item in v.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (op, algo) = item
            .split_once(':')
            .ok_or_else(|| format!("op:algo pairs; `{item}` has no `:`"))?;
        let (op, algo) = (
            op.trim().to_ascii_lowercase(),
            algo.trim().to_ascii_lowercase(),
        );
        let Some(coll) = Coll::from_name(&op) else {
            let ops: Vec<&str> = Coll::all().map(Coll::name).collect();
            return Err(format!(
                "an operation among {}; `{op}` is not one",
                ops.join(", ")
            ));
        };
        let forced = match Algo::from_name(&algo) {
            _ if algo == AUTO => None,
            Some(a) if coll.accepts(a) => Some(a),
            _ => {
                return Err(format!(
                    "for {op} one of {}; `{algo}` is not one",
                    coll.algo_names().join(", ")
                ));
            }
        };
        out.push((coll, forced));
    }
    Ok(out)
}

/// The `op:algo` spelling of a forced choice (`auto` for `None`).
pub fn forced_name(forced: Option<Algo>) -> &'static str {
    forced.map_or(AUTO, Algo::name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_codes_round_trip_and_are_distinct() {
        for (i, a) in Algo::ALL.into_iter().enumerate() {
            assert_eq!(Algo::from_name(a.name()), Some(a));
            assert_eq!(Algo::from_code(a.code()), Some(a));
            assert_eq!(a.code() as usize, i + 1, "{a}: ALL is in code order");
        }
        assert_eq!(Algo::from_code(0), None);
        assert_eq!(Algo::from_name(AUTO), None);
        for (i, c) in Coll::all().enumerate() {
            assert_eq!(Coll::from_name(c.name()), Some(c));
            if i < Coll::HOST.len() {
                assert_eq!(c as usize, i, "host kinds index tables by discriminant");
            }
            assert_eq!(c.algo_names()[0], AUTO);
            let names: Vec<&str> = c.algos().iter().map(|a| a.name()).collect();
            assert_eq!(&c.algo_names()[1..], &names[..]);
        }
    }

    #[test]
    fn parsing_names_operations_and_algorithms() {
        assert_eq!(
            parse_forced(" AllReduce:RING , bcast:auto,").unwrap(),
            vec![(Coll::Allreduce, Some(Algo::Ring)), (Coll::Bcast, None)]
        );
        assert!(
            parse_forced("reduce:ring")
                .unwrap_err()
                .contains("auto, tree, direct")
        );
        assert!(parse_forced("reduce").unwrap_err().contains("has no `:`"));
        assert!(
            parse_forced("x:ring")
                .unwrap_err()
                .contains("allreduce, bcast")
        );
        assert!(parse_forced("reduce:tree-ordered").is_err(), "not a choice");
    }
}
