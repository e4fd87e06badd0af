//! Point-to-point messaging: the matching engine and (soon) the protocols on top.
pub mod matcher;
