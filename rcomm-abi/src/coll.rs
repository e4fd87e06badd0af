//! Collectives (blocking, non-blocking, persistent) over rcomm's: the other half of P18.
