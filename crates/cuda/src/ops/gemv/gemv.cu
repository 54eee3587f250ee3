// Skinny bf16 GEMV for decode (crates/cuda/src/ops/gemv/mod.rs): the bf16
// weight format (Bf16W) of the GEMV in gemv_body.cuh, which precedes this
// file in the program and holds the units, the groups loaded one ahead, the
// warp sums and the scalar path. W bf16 [n][k]: a 16-byte chunk is 8 weights
// of one row, no scales; a chunk's 8 products are added to the lane's sum in
// one chain. At one row one output per unit, 8 chunks a lane in flight; at
// 2 ..= MAX_ROWS rows two outputs, 4 chunks of each row (C * U = 8 loads a
// lane). `vec` needs k a multiple of 8 and x and every W 16-byte aligned.
// The kernels' parameter is Params<Bf16W>, whose layout gemv/mod.rs repeats.

namespace headroom_gemv {

// bf16 weights: 8 a chunk, unscaled.
struct Bf16W {
    typedef bf16 Weight;
    enum { CHUNK_SHIFT = 3, PER_CHUNK = 8, SCALE_BLOCK = 1 };

    struct Mat {
        const bf16* w;   // [n][k]
        void* y;         // [rows][n], bf16 or f32
        int n;
        int first_unit;  // its first unit (C outputs each)
    };

    // No scales.
    static __device__ __forceinline__ const float* mat_scales(const Mat&) { return nullptr; }
    static __device__ __forceinline__ const float* block_scales(const float*, long long, int) {
        return nullptr;
    }
    static __device__ __forceinline__ float chunk_scale(const float*, int, bool) { return 0.f; }

    // The launch's x rows (taken once).
    template <class X>
    static __device__ __forceinline__ const X* x_rows(const X* launch, const bf16*) {
        return launch;
    }

    // The output type, read where an output is stored.
    template <class P>
    static __device__ __forceinline__ const int& out_f32(const P& p) {
        return p.out_f32;
    }

    static __device__ __forceinline__ void unpack(const uint4& v, float (&f)[8]) {
        unpack_bf16(v, f);
    }

    // The 8 x under chunk i: x chunk i of the row.
    static __device__ __forceinline__ void load_x(const uint4* x4, size_t row, int i,
                                                  float (&xf)[8]) {
        unpack_bf16(__ldg(x4 + row + i), xf);
    }

    // acc += the chunk's 8 products, in order.
    static __device__ __forceinline__ void fma_chunk(const float (&wf)[8], const float (&xf)[8],
                                                     float, float& acc) {
#pragma unroll
        for (int e = 0; e < 8; ++e) acc = fmaf(wf[e], xf[e], acc);
    }

    static __device__ __forceinline__ float weight(bf16 w, const float*, int) {
        return __bfloat162float(w);
    }
};

typedef Params<Bf16W> Bf16Params;
static_assert(sizeof(Bf16W::Mat) == 24, "Mat layout (gemv/mod.rs)");
static_assert(sizeof(Bf16Params) == 32 + 24 * MAX_MATS, "Params layout (gemv/mod.rs)");

}  // namespace headroom_gemv

// gemv_c{C}_r{R}: C outputs per unit, U chunks per row in a group, R rows:
// one output per unit at one row, two at 2 ..= MAX_ROWS rows.
#define GEMV_ENTRY(NAME, C, U, R)                                                          \
    extern "C" __global__ void __launch_bounds__(headroom_gemv::THREADS,                  \
                                                 headroom_gemv::CTAS_PER_SM)              \
        gemv_##NAME##_r##R(const headroom_gemv::Bf16Params p) {                            \
        headroom_gemv::gemv<headroom_gemv::Bf16W, R, C, U>(p);                             \
    }

GEMV_ENTRY(c1, 1, 8, 1)
GEMV_ENTRY(c2, 2, 4, 2)
GEMV_ENTRY(c2, 2, 4, 3)
GEMV_ENTRY(c2, 2, 4, 4)
GEMV_ENTRY(c2, 2, 4, 5)
GEMV_ENTRY(c2, 2, 4, 6)
GEMV_ENTRY(c2, 2, 4, 7)
GEMV_ENTRY(c2, 2, 4, 8)
