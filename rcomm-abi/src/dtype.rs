//! Datatype constructors, queries, pack/unpack (`MPI_Type_*`, `MPI_Pack*`).
