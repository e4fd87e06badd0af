//! CPU SIMD and CUDA reduction kernels. Filled by the collectives work (issue P3).
