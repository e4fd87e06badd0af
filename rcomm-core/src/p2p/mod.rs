//! Point-to-point messaging: the sans-IO matching engine and the protocol engine on top.
pub(crate) mod done;
pub(crate) mod engine;
pub(crate) mod hook;
#[cfg(test)]
mod ibsimtests;
pub mod matcher;
pub(crate) mod region;
#[cfg(test)]
mod simtests;
