//! Reduction operations: the predefined ops on each datatype, and user ops (`MPI_Op_create`).
