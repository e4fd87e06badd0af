//! Helpers shared by rcomm multi-process tests.
