// rcomm's device reductions, compiled at run time with NVRTC (no CUDA headers: the half types
// are their bits, converted here exactly as the CPU kernels convert them).
//
// out[i] = a[i] (op) b[i] for i < n, and buf[i] = buf[i] / count (the end of an average), with
// the CPU kernels' semantics (kernels/src/op.rs) so results are bitwise identical for the same
// operand order:
// - integer sum and prod wrap (computed in the unsigned type of the same width);
// - float min/max are IEEE 754-2019 minimum/maximum (NaN wins, -0 < +0);
// - every NaN produced is the canonical quiet NaN (0x7fc00000, 0x7ff8000000000000, 0x7e00 f16,
//   0x7fc0 bf16);
// - f16 and bf16 compute in f32 and round once, to nearest even (bf16 by the same integer steps
//   as the CPU; f16 by cvt.rn, which rounds as IEEE does, NaN special-cased).
// Loads are 16 bytes wide where all three pointers are 16-byte aligned; grid-stride loops, so
// any grid size is correct (the launcher sizes it by SM count).

typedef signed char i8;
typedef short i16;
typedef int i32;
typedef long long i64;
typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;

__device__ __forceinline__ float canon32(float x) { return isnan(x) ? __uint_as_float(0x7fc00000u) : x; }
__device__ __forceinline__ double canon64(double x) {
    return isnan(x) ? __longlong_as_double(0x7ff8000000000000ll) : x;
}

__device__ __forceinline__ float min32(float a, float b) {
    if (isnan(a) || isnan(b)) return __uint_as_float(0x7fc00000u);
    if (a < b) return a;
    if (b < a) return b;
    return __uint_as_float(__float_as_uint(a) | __float_as_uint(b));
}
__device__ __forceinline__ float max32(float a, float b) {
    if (isnan(a) || isnan(b)) return __uint_as_float(0x7fc00000u);
    if (a > b) return a;
    if (b > a) return b;
    return __uint_as_float(__float_as_uint(a) & __float_as_uint(b));
}
__device__ __forceinline__ double min64(double a, double b) {
    if (isnan(a) || isnan(b)) return __longlong_as_double(0x7ff8000000000000ll);
    if (a < b) return a;
    if (b < a) return b;
    return __longlong_as_double(__double_as_longlong(a) | __double_as_longlong(b));
}
__device__ __forceinline__ double max64(double a, double b) {
    if (isnan(a) || isnan(b)) return __longlong_as_double(0x7ff8000000000000ll);
    if (a > b) return a;
    if (b > a) return b;
    return __longlong_as_double(__double_as_longlong(a) & __double_as_longlong(b));
}

// bf16: the top half of an f32; f32 -> bf16 rounds to nearest even on the bits (the input is
// never a non-canonical NaN: every caller canonicalises first).
__device__ __forceinline__ float bf16_to_f32(u16 x) { return __uint_as_float(((u32)x) << 16); }
__device__ __forceinline__ u16 f32_to_bf16(float x) {
    u32 b = __float_as_uint(x);
    u32 r = b + (0x7fffu + ((b >> 16) & 1u));
    return (u16)(r >> 16);
}
__device__ __forceinline__ float f16_to_f32(u16 x) {
    float f;
    asm("{ .reg .b16 h; mov.b16 h, %1; cvt.f32.f16 %0, h; }" : "=f"(f) : "h"(x));
    return f;
}
__device__ __forceinline__ u16 f32_to_f16(float x) {
    if (isnan(x)) return (u16)0x7e00;
    u16 h;
    asm("{ .reg .b16 t; cvt.rn.f16.f32 t, %1; mov.b16 %0, t; }" : "=h"(h) : "f"(x));
    return h;
}

// The operations, as functors over the storage type.
template <typename T, typename U> struct Sum { __device__ T operator()(T a, T b) const { return (T)((U)a + (U)b); } };
template <typename T, typename U> struct Prod { __device__ T operator()(T a, T b) const { return (T)((U)a * (U)b); } };
template <typename T> struct Min { __device__ T operator()(T a, T b) const { return b < a ? b : a; } };
template <typename T> struct Max { __device__ T operator()(T a, T b) const { return b > a ? b : a; } };
template <typename T> struct BAnd { __device__ T operator()(T a, T b) const { return a & b; } };
template <typename T> struct BOr { __device__ T operator()(T a, T b) const { return a | b; } };
template <typename T> struct BXor { __device__ T operator()(T a, T b) const { return a ^ b; } };

struct SumF32 { __device__ float operator()(float a, float b) const { return canon32(a + b); } };
struct ProdF32 { __device__ float operator()(float a, float b) const { return canon32(a * b); } };
struct MinF32 { __device__ float operator()(float a, float b) const { return min32(a, b); } };
struct MaxF32 { __device__ float operator()(float a, float b) const { return max32(a, b); } };
struct SumF64 { __device__ double operator()(double a, double b) const { return canon64(a + b); } };
struct ProdF64 { __device__ double operator()(double a, double b) const { return canon64(a * b); } };
struct MinF64 { __device__ double operator()(double a, double b) const { return min64(a, b); } };
struct MaxF64 { __device__ double operator()(double a, double b) const { return max64(a, b); } };

// A half type's op: widen, the f32 op, round once.
template <typename F32Op, int BF> struct Narrow {
    __device__ u16 operator()(u16 a, u16 b) const {
        F32Op f;
        if (BF) return f32_to_bf16(f(bf16_to_f32(a), bf16_to_f32(b)));
        return f32_to_f16(f(f16_to_f32(a), f16_to_f32(b)));
    }
};

template <typename T, typename F>
__device__ __forceinline__ void apply(T* out, const T* a, const T* b, u64 n, F f) {
    const u64 tid = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    const u64 stride = (u64)gridDim.x * blockDim.x;
    const int V = 16 / sizeof(T);
    u64 done = 0;
    if (((((u64)out) | ((u64)a) | ((u64)b)) & 15) == 0) {
        const u64 nv = n / V;
        const uint4* av = (const uint4*)a;
        const uint4* bv = (const uint4*)b;
        uint4* ov = (uint4*)out;
        for (u64 i = tid; i < nv; i += stride) {
            uint4 x = av[i];
            uint4 y = bv[i];
            uint4 z;
            const T* xs = (const T*)&x;
            const T* ys = (const T*)&y;
            T* zs = (T*)&z;
#pragma unroll
            for (int k = 0; k < V; k++) zs[k] = f(xs[k], ys[k]);
            ov[i] = z;
        }
        done = nv * V;
    }
    for (u64 i = done + tid; i < n; i += stride) out[i] = f(a[i], b[i]);
}

#define KERNEL(name, T, F) \
    extern "C" __global__ void rcomm_reduce_##name(T* out, const T* a, const T* b, u64 n) { apply<T>(out, a, b, n, F()); }

// A macro argument with a comma needs parentheses; these aliases avoid them.
typedef Sum<i8, u8> SumI8; typedef Prod<i8, u8> ProdI8;
typedef Sum<i16, u16> SumI16; typedef Prod<i16, u16> ProdI16;
typedef Sum<i32, u32> SumI32; typedef Prod<i32, u32> ProdI32;
typedef Sum<i64, u64> SumI64; typedef Prod<i64, u64> ProdI64;
typedef Sum<u8, u8> SumU8; typedef Prod<u8, u8> ProdU8;
typedef Sum<u16, u16> SumU16; typedef Prod<u16, u16> ProdU16;
typedef Sum<u32, u32> SumU32; typedef Prod<u32, u32> ProdU32;
typedef Sum<u64, u64> SumU64; typedef Prod<u64, u64> ProdU64;

#define INTS(t, S, P) \
    KERNEL(sum_##t, t, S) \
    KERNEL(prod_##t, t, P) \
    KERNEL(min_##t, t, Min<t>) \
    KERNEL(max_##t, t, Max<t>) \
    KERNEL(band_##t, t, BAnd<t>) \
    KERNEL(bor_##t, t, BOr<t>) \
    KERNEL(bxor_##t, t, BXor<t>)

INTS(i8, SumI8, ProdI8)
INTS(i16, SumI16, ProdI16)
INTS(i32, SumI32, ProdI32)
INTS(i64, SumI64, ProdI64)
INTS(u8, SumU8, ProdU8)
INTS(u16, SumU16, ProdU16)
INTS(u32, SumU32, ProdU32)
INTS(u64, SumU64, ProdU64)

KERNEL(sum_f32, float, SumF32)
KERNEL(prod_f32, float, ProdF32)
KERNEL(min_f32, float, MinF32)
KERNEL(max_f32, float, MaxF32)
KERNEL(sum_f64, double, SumF64)
KERNEL(prod_f64, double, ProdF64)
KERNEL(min_f64, double, MinF64)
KERNEL(max_f64, double, MaxF64)

typedef Narrow<SumF32, 1> SumBf16; typedef Narrow<ProdF32, 1> ProdBf16;
typedef Narrow<MinF32, 1> MinBf16; typedef Narrow<MaxF32, 1> MaxBf16;
typedef Narrow<SumF32, 0> SumF16; typedef Narrow<ProdF32, 0> ProdF16;
typedef Narrow<MinF32, 0> MinF16; typedef Narrow<MaxF32, 0> MaxF16;
KERNEL(sum_bf16, u16, SumBf16)
KERNEL(prod_bf16, u16, ProdBf16)
KERNEL(min_bf16, u16, MinBf16)
KERNEL(max_bf16, u16, MaxBf16)
KERNEL(sum_f16, u16, SumF16)
KERNEL(prod_f16, u16, ProdF16)
KERNEL(min_f16, u16, MinF16)
KERNEL(max_f16, u16, MaxF16)

// The end of an average: buf[i] = buf[i] / count (count > 0). Floats divide in their own
// precision (f16/bf16 in f32, rounded once); integers truncate toward zero, exactly, whatever
// the count (as the CPU's i128 fallback).
__device__ __forceinline__ i64 idiv(i64 x, u64 c) {
    if (c > 9223372036854775807ull) return (x == (-9223372036854775807ll - 1) && c == 9223372036854775808ull) ? -1 : 0;
    return x / (i64)c;
}
#define DIV_INT(t) \
    extern "C" __global__ void rcomm_div_##t(t* buf, u64 n, u64 count) { \
        const u64 stride = (u64)gridDim.x * blockDim.x; \
        for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) buf[i] = (t)idiv((i64)buf[i], count); \
    }
#define DIV_UINT(t) \
    extern "C" __global__ void rcomm_div_##t(t* buf, u64 n, u64 count) { \
        const u64 stride = (u64)gridDim.x * blockDim.x; \
        for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) buf[i] = (t)((u64)buf[i] / count); \
    }
DIV_INT(i8) DIV_INT(i16) DIV_INT(i32) DIV_INT(i64)
DIV_UINT(u8) DIV_UINT(u16) DIV_UINT(u32) DIV_UINT(u64)

extern "C" __global__ void rcomm_div_f32(float* buf, u64 n, u64 count) {
    const u64 stride = (u64)gridDim.x * blockDim.x;
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) buf[i] = canon32(buf[i] / (float)count);
}
extern "C" __global__ void rcomm_div_f64(double* buf, u64 n, u64 count) {
    const u64 stride = (u64)gridDim.x * blockDim.x;
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) buf[i] = canon64(buf[i] / (double)count);
}
extern "C" __global__ void rcomm_div_bf16(u16* buf, u64 n, u64 count) {
    const u64 stride = (u64)gridDim.x * blockDim.x;
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        buf[i] = f32_to_bf16(canon32(bf16_to_f32(buf[i]) / (float)count));
}
extern "C" __global__ void rcomm_div_f16(u16* buf, u64 n, u64 count) {
    const u64 stride = (u64)gridDim.x * blockDim.x;
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        buf[i] = f32_to_f16(canon32(f16_to_f32(buf[i]) / (float)count));
}
