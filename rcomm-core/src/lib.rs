//! rcomm.
