// Fused prefill attention on Hopper warpgroup MMA (wgmma, sm_90a).
//
// Same semantics and launch contract as attention_fused.cu (head-major
// q/out [q_heads][q_len][D], k/v [kv_heads][kv_len][D], lower-right causal
// with history, integer GQA, f32 online softmax, NaN propagates); grid
// (ceil(q_len / BLOCK_M), q_heads), CTA of 128 threads per warpgroup.
//
// Structure: one warpgroup per CTA (two CTAs per SM), owning 64 query rows. S = Q.K^T is
// D/16 wgmma m64n64k16 with both operands read by the tensor cores straight
// from shared memory (K-major, 128-byte swizzle); O += P.V is BLOCK_N/16
// wgmma m64nDk16 with P from registers (the S accumulator re-packed to
// 16 bits) and V from shared memory as an N-major operand. Tiles live in
// shared memory as [D/64 column blocks][rows][64 elements], 16-byte chunks
// XOR-swizzled by (row mod 8): the canonical SW128 layout of the descriptors.
// K/V streaming (cp.async), tile order, masking and softmax follow the
// mma.sync kernel: the wgmma accumulator fragment of each warp has the same
// register layout as that kernel's m16n8 fragments. No global workspace.

#include <cuda_fp16.h>
#include <cuda_bf16.h>

#ifndef INFINITY  // NVRTC has no <math.h>
#define INFINITY __int_as_float(0x7f800000)
#endif

namespace headroom_wg {

// One warpgroup per CTA (64 query rows), two CTAs per SM whose softmax and
// GEMM phases interleave; one K/V stage in shared memory (the two CTAs of an
// SM share it). The CTA order runs over the whole grid longest-first (heads
// innermost); the row max is taken on raw scores, the softmax scale folded
// into the exponent's FFMA; O is rescaled only in warps where a row max grew
// (exact: an unchanged max means a factor of 1).
constexpr int WG_ROWS = 64;             // query rows per warpgroup (the wgmma M)
constexpr int NUM_WG = 1;               // warpgroups per CTA
constexpr int MIN_BLOCKS = 2;           // CTAs per SM the registers are sized for
constexpr int BLOCK_M = WG_ROWS * NUM_WG;  // query rows per CTA
constexpr int BLOCK_N = 64;             // keys per K/V tile
constexpr int THREADS = NUM_WG * 128;
constexpr int CHUNK = 8;                // 16-byte chunk = 8 half/bf16 elements
constexpr int ATOM_COLS = 64;           // elements per 128-byte swizzle row

template <int D>
struct Smem {
    static constexpr int Q_BYTES = BLOCK_M * D * 2;
    static constexpr int KV_BYTES = BLOCK_N * D * 2;
    // +1024: the tiles are placed at the first 1024-byte boundary (the swizzle period).
    static constexpr int BYTES = Q_BYTES + 2 * KV_BYTES + 1024;
};

__device__ __forceinline__ float fast_exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

__device__ __forceinline__ unsigned smem_u32(const void* p) {
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void cp_async_16(unsigned dst, const void* src, bool valid) {
    int n = valid ? 16 : 0;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(n));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_group 0;\n" ::: "memory"); }
// Make this thread's generic-proxy shared-memory writes visible to the tensor cores.
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_wait_all() { asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_wait_1() { asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory"); }

// Shared-memory matrix descriptor, 128-byte swizzle.
__device__ __forceinline__ unsigned long long desc_sw128(unsigned addr, unsigned lbo, unsigned sbo) {
    unsigned long long d = (unsigned long long)((addr & 0x3FFFF) >> 4);
    d |= (unsigned long long)((lbo >> 4) & 0x3FFF) << 16;
    d |= (unsigned long long)((sbo >> 4) & 0x3FFF) << 32;
    d |= 1ull << 62;
    return d;
}

// Byte offset of 16-byte chunk c of row r in a tile of ROWS rows in the SW128 layout.
template <int ROWS>
__device__ __forceinline__ unsigned sw128(int r, int c) {
    return (unsigned)((c / 8) * ROWS * 128 + r * 128 + (((c % 8) ^ (r & 7)) * 16));
}

// Copies ROWS x D elements (row stride D) into a SW128 tile; rows at or past
// valid_rows are zero-filled.
template <int D, int ROWS, typename T>
__device__ __forceinline__ void load_tile(unsigned dst, const T* src, int valid_rows, int tid) {
    constexpr int CHUNKS_PER_ROW = D / CHUNK;
    constexpr int ROWS_PER_PASS = THREADS / CHUNKS_PER_ROW;
    static_assert(THREADS % CHUNKS_PER_ROW == 0 && ROWS % ROWS_PER_PASS == 0, "tile split");
    const int r0 = tid / CHUNKS_PER_ROW;
    const int c = tid % CHUNKS_PER_ROW;
    const T* g_base = src + (size_t)r0 * D + c * CHUNK;
    // Rows r0 + i * ROWS_PER_PASS; their swizzle (row mod 8) repeats every 8 / ROWS_PER_PASS passes.
    if (valid_rows >= ROWS) {
#pragma unroll
        for (int i = 0; i < ROWS / ROWS_PER_PASS; ++i)
            cp_async_16(dst + sw128<ROWS>(r0 + i * ROWS_PER_PASS, c), g_base + (size_t)i * ROWS_PER_PASS * D, true);
    } else {
#pragma unroll
        for (int i = 0; i < ROWS / ROWS_PER_PASS; ++i) {
            const bool valid = r0 + i * ROWS_PER_PASS < valid_rows;
            cp_async_16(dst + sw128<ROWS>(r0 + i * ROWS_PER_PASS, c),
                        valid ? g_base + (size_t)i * ROWS_PER_PASS * D : src, valid);
        }
    }
}

// ---- wgmma wrappers (generated: one per shape and dtype) ----
__device__ __forceinline__ void wgmma_ss_m64n64k16_bf16(float (&d)[32], unsigned long long da, unsigned long long db) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
        "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, %32, %33, p, 1, 1, 0, 0;\n"
        "}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "l"(da), "l"(db), "r"(1));
}

__device__ __forceinline__ void wgmma_rs_m64n64k16_bf16_tb(float (&d)[32], unsigned a0, unsigned a1, unsigned a2, unsigned a3, unsigned long long db) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
        "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, {%32,%33,%34,%35}, %36, p, 1, 1, 1;\n"
        "}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(db), "r"(1));
}

__device__ __forceinline__ void wgmma_rs_m64n128k16_bf16_tb(float (&d)[64], unsigned a0, unsigned a1, unsigned a2, unsigned a3, unsigned long long db) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
        "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, {%64,%65,%66,%67}, %68, p, 1, 1, 1;\n"
        "}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(db), "r"(1));
}

__device__ __forceinline__ void wgmma_rs_m64n256k16_bf16_tb(float (&d)[128], unsigned a0, unsigned a1, unsigned a2, unsigned a3, unsigned long long db) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %133, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 "
        "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95,%96,%97,%98,%99,%100,%101,%102,%103,%104,%105,%106,%107,%108,%109,%110,%111,%112,%113,%114,%115,%116,%117,%118,%119,%120,%121,%122,%123,%124,%125,%126,%127}, {%128,%129,%130,%131}, %132, p, 1, 1, 1;\n"
        "}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(db), "r"(1));
}

__device__ __forceinline__ void wgmma_ss_m64n64k16_f16(float (&d)[32], unsigned long long da, unsigned long long db) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 "
        "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, %32, %33, p, 1, 1, 0, 0;\n"
        "}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "l"(da), "l"(db), "r"(1));
}

__device__ __forceinline__ void wgmma_rs_m64n64k16_f16_tb(float (&d)[32], unsigned a0, unsigned a1, unsigned a2, unsigned a3, unsigned long long db) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 "
        "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, {%32,%33,%34,%35}, %36, p, 1, 1, 1;\n"
        "}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(db), "r"(1));
}

__device__ __forceinline__ void wgmma_rs_m64n128k16_f16_tb(float (&d)[64], unsigned a0, unsigned a1, unsigned a2, unsigned a3, unsigned long long db) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 "
        "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, {%64,%65,%66,%67}, %68, p, 1, 1, 1;\n"
        "}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(db), "r"(1));
}

__device__ __forceinline__ void wgmma_rs_m64n256k16_f16_tb(float (&d)[128], unsigned a0, unsigned a1, unsigned a2, unsigned a3, unsigned long long db) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %133, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16 "
        "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95,%96,%97,%98,%99,%100,%101,%102,%103,%104,%105,%106,%107,%108,%109,%110,%111,%112,%113,%114,%115,%116,%117,%118,%119,%120,%121,%122,%123,%124,%125,%126,%127}, {%128,%129,%130,%131}, %132, p, 1, 1, 1;\n"
        "}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(db), "r"(1));
}

// ---- end of generated wrappers ----

template <typename T> struct Ops;
template <> struct Ops<__nv_bfloat16> {
    __device__ __forceinline__ static void qk(float (&d)[32], unsigned long long a, unsigned long long b) {
        wgmma_ss_m64n64k16_bf16(d, a, b);
    }
    template <int N>
    __device__ __forceinline__ static void pv(float (&d)[N / 2], unsigned a0, unsigned a1, unsigned a2, unsigned a3,
                                              unsigned long long b) {
        if constexpr (N == 256) wgmma_rs_m64n256k16_bf16_tb(d, a0, a1, a2, a3, b);
        else if constexpr (N == 128) wgmma_rs_m64n128k16_bf16_tb(d, a0, a1, a2, a3, b);
        else wgmma_rs_m64n64k16_bf16_tb(d, a0, a1, a2, a3, b);
    }
    __device__ __forceinline__ static unsigned pack(float lo, float hi) {
        __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
        return *reinterpret_cast<unsigned*>(&v);
    }
};
template <> struct Ops<__half> {
    __device__ __forceinline__ static void qk(float (&d)[32], unsigned long long a, unsigned long long b) {
        wgmma_ss_m64n64k16_f16(d, a, b);
    }
    template <int N>
    __device__ __forceinline__ static void pv(float (&d)[N / 2], unsigned a0, unsigned a1, unsigned a2, unsigned a3,
                                              unsigned long long b) {
        if constexpr (N == 256) wgmma_rs_m64n256k16_f16_tb(d, a0, a1, a2, a3, b);
        else if constexpr (N == 128) wgmma_rs_m64n128k16_f16_tb(d, a0, a1, a2, a3, b);
        else wgmma_rs_m64n64k16_f16_tb(d, a0, a1, a2, a3, b);
    }
    __device__ __forceinline__ static unsigned pack(float lo, float hi) {
        __half2 v = __floats2half2_rn(lo, hi);
        return *reinterpret_cast<unsigned*>(&v);
    }
};

// S = Q.K^T for one 64-key tile: D/16 wgmma m64n64k16 over the SW128 tiles.
template <int D, typename T>
__device__ __forceinline__ void qk_tile(float (&acc_s)[32], unsigned q_wg, unsigned sK) {
    constexpr unsigned SBO = 8 * 128;  // 8 rows of 128 bytes
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks) {
        // Column block of 64 elements, then 16-element (32-byte) step inside its swizzle row.
        const unsigned blk = ks * 16 / ATOM_COLS;
        const unsigned col = (ks % (ATOM_COLS / 16)) * 32;
        const unsigned qa = q_wg + blk * (BLOCK_M * 128) + col;
        const unsigned ka = sK + blk * (BLOCK_N * 128) + col;
        Ops<T>::qk(acc_s, desc_sw128(qa, 16, SBO), desc_sw128(ka, 16, SBO));
    }
}

// Split-KV and packed-GQA parameters (all three plain prefill when
// splits == 1, q_period == q_len and kv_stride == kv_len * D):
//  kv_stride  elements between two KV heads' rows (a cache slot's capacity * D).
//  q_period   query positions repeat every q_period rows: the rows of a head are
//             the query group's heads stacked (q_len = group * q_period), so one
//             CTA serves a whole GQA group of a short chunk; history = kv_len - q_period.
//  splits     CTAs per (query tile, head) along the keys (blockIdx.z); with
//             splits > 1 each writes its f32 output normalised by its own sum
//             and that sum's log2-sum-exp to part_o / part_lse, and
//             attn_split_combine makes the result.
template <int D, typename T>
__device__ __forceinline__ void attn_fused_prefill(
    const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v, T* __restrict__ out,
    int q_len, int kv_len, int q_heads, int kv_heads, float scale_log2, long long kv_stride,
    int q_period, int splits, float* __restrict__ part_o, float* __restrict__ part_lse) {
    static_assert(D == 64 || D == 128 || D == 256, "wgmma N is the head dim");
    constexpr int N_TILES = BLOCK_N / 8;   // n8 blocks of S per thread
    constexpr int D_TILES = D / 8;         // n8 blocks of O per thread

    extern __shared__ unsigned char smem_raw[];
    const unsigned base = (smem_u32(smem_raw) + 1023u) & ~1023u;
    const unsigned sQ = base;
    // K, then V right after it.
    const unsigned sK = sQ + Smem<D>::Q_BYTES;
    const unsigned sV = sK + Smem<D>::KV_BYTES;

    const int tid = threadIdx.x;
    const int warp = tid / 32;              // 0..3: the one warpgroup
    const int wg = warp / 4;
    const int lane = tid % 32;
    const int g = lane / 4;
    const int t4 = lane % 4;

    const int num_m_blocks = (q_len + BLOCK_M - 1) / BLOCK_M;
    // CTAs start in linear block order: longest query blocks of every head
    // first, so the short ones fill the tail of the grid (grid = (m blocks, q_heads)).
    const int lin = blockIdx.y * gridDim.x + blockIdx.x;
    const int m_block = num_m_blocks - 1 - lin / q_heads;
    const int head = lin % q_heads;
    const int kv_head = head / (q_heads / kv_heads);
    const int history = kv_len - q_period;
    const int m0 = m_block * BLOCK_M;
    const int split = blockIdx.z;

    const T* gQ = q + ((size_t)head * q_len + m0) * D;
    const T* gK = k + (size_t)kv_head * kv_stride;
    const T* gV = v + (size_t)kv_head * kv_stride;
    T* gO = out + ((size_t)head * q_len + m0) * D;

    const int last_row = min(m0 + BLOCK_M, q_len) - 1;
    // Positions of the tile's rows: contiguous unless the tile crosses a period.
    const bool wraps = m0 / q_period != last_row / q_period;
    const int first_pos = history + (wraps ? 0 : m0 % q_period);
    const int last_pos = history + (wraps ? q_period - 1 : last_row % q_period);
    const int n_limit = min(kv_len, last_pos + 1);
    const int n_total = (n_limit + BLOCK_N - 1) / BLOCK_N;
    const int n_unmasked = (first_pos + 1) / BLOCK_N;
    // This split's key tiles [n_lo, n_blocks): an even share of the tile's keys.
    const int per_split = (n_total + splits - 1) / splits;
    const int n_lo = min(n_total, split * per_split);
    const int n_blocks = min(n_total, n_lo + per_split);
    if (n_lo >= n_blocks) {
        // No keys for this split: an empty partial (zero output, log-sum -inf).
        const int rows = min(BLOCK_M, q_len - m0);
        const size_t prow = ((size_t)split * q_heads + head) * q_len + m0;
        for (int i = threadIdx.x; i < rows * D; i += THREADS) part_o[prow * D + i] = 0.f;
        for (int i = threadIdx.x; i < rows; i += THREADS) part_lse[prow + i] = -INFINITY;
        return;
    }

    load_tile<D, BLOCK_M>(sQ, gQ, q_len - m0, tid);
    {
        const int n0 = (n_blocks - 1) * BLOCK_N;
        load_tile<D, BLOCK_N>(sK, gK + (size_t)n0 * D, kv_len - n0, tid);
    }
    cp_async_commit();

    float acc_o[D / 2];
#pragma unroll
    for (int i = 0; i < D / 2; ++i) acc_o[i] = 0.f;
    float row_max[2] = {-INFINITY, -INFINITY};
    float row_sum[2] = {0.f, 0.f};

    const int warp_row0 = warp * 16;  // = wg * 64 + (warp % 4) * 16
    const int pos0 = history + (m0 + warp_row0 + g) % q_period;
    const int pos1 = history + (m0 + warp_row0 + g + 8) % q_period;

    // Descriptor bases: Q rows of this warpgroup; K and V whole tiles.
    const unsigned q_wg = sQ + wg * WG_ROWS * 128;
    constexpr unsigned SBO = 8 * 128;                 // 8 rows of 128 bytes
    constexpr unsigned V_LBO = BLOCK_N * 128;         // next 64 columns of V

    float acc_s[N_TILES * 4];

    for (int nb = n_blocks - 1; nb >= n_lo; --nb) {
        const int n0 = nb * BLOCK_N;
        cp_async_wait_all();
        fence_proxy_async();
        __syncthreads();
        load_tile<D, BLOCK_N>(sV, gV + (size_t)n0 * D, kv_len - n0, tid);
        cp_async_commit();

#pragma unroll
        for (int i = 0; i < N_TILES * 4; ++i) acc_s[i] = 0.f;
        wgmma_fence();
        qk_tile<D, T>(acc_s, q_wg, sK);
        wgmma_commit();
        wgmma_wait_all();

        const bool masked = nb >= n_unmasked;
        constexpr float pre = 1.f;  // the scale is applied in the exponent
#pragma unroll
        for (int nt = 0; nt < N_TILES; ++nt) {
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const int key = n0 + nt * 8 + t4 * 2 + (j & 1);
                const int pos = (j < 2) ? pos0 : pos1;
                float s = acc_s[nt * 4 + j] * pre;
                if (masked && (key > pos || key >= kv_len)) s = -INFINITY;
                acc_s[nt * 4 + j] = s;
            }
        }

        float new_max[2] = {row_max[0], row_max[1]};
#pragma unroll
        for (int nt = 0; nt < N_TILES; ++nt) {
            new_max[0] = fmaxf(new_max[0], fmaxf(acc_s[nt * 4 + 0], acc_s[nt * 4 + 1]));
            new_max[1] = fmaxf(new_max[1], fmaxf(acc_s[nt * 4 + 2], acc_s[nt * 4 + 3]));
        }
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            new_max[r] = fmaxf(new_max[r], __shfl_xor_sync(0xffffffffu, new_max[r], 1));
            new_max[r] = fmaxf(new_max[r], __shfl_xor_sync(0xffffffffu, new_max[r], 2));
        }
        float alpha[2];
        float sub[2];
        bool grew = false;  // a row max of this thread changed
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            // sub and alpha in the exp2 domain (scores * scale_log2).
            const float m_new = new_max[r] * scale_log2;  // scale > 0: the max commutes with it
            const float m_old = row_max[r] * scale_log2;
            sub[r] = (new_max[r] == -INFINITY) ? 0.f : m_new;
            const bool changed = new_max[r] != row_max[r];
            alpha[r] = changed ? fast_exp2(m_old - sub[r]) : 1.f;
            grew = grew || changed;
            row_max[r] = new_max[r];
        }

        cp_async_wait_all();
        fence_proxy_async();
        __syncthreads();
        if (nb > n_lo) {
            const int np = (nb - 1) * BLOCK_N;
            load_tile<D, BLOCK_N>(sK, gK + (size_t)np * D, kv_len - np, tid);
            cp_async_commit();
        }

        float tile_sum[2] = {0.f, 0.f};
#pragma unroll
        for (int nt = 0; nt < N_TILES; ++nt) {
            acc_s[nt * 4 + 0] = fast_exp2(fmaf(acc_s[nt * 4 + 0], scale_log2, -sub[0]));
            acc_s[nt * 4 + 1] = fast_exp2(fmaf(acc_s[nt * 4 + 1], scale_log2, -sub[0]));
            acc_s[nt * 4 + 2] = fast_exp2(fmaf(acc_s[nt * 4 + 2], scale_log2, -sub[1]));
            acc_s[nt * 4 + 3] = fast_exp2(fmaf(acc_s[nt * 4 + 3], scale_log2, -sub[1]));
            tile_sum[0] += acc_s[nt * 4 + 0] + acc_s[nt * 4 + 1];
            tile_sum[1] += acc_s[nt * 4 + 2] + acc_s[nt * 4 + 3];
        }
        row_sum[0] = row_sum[0] * alpha[0] + tile_sum[0];
        row_sum[1] = row_sum[1] * alpha[1] + tile_sum[1];
        if (__any_sync(0xffffffffu, grew))
        {
#pragma unroll
            for (int dt = 0; dt < D_TILES; ++dt) {
                acc_o[dt * 4 + 0] *= alpha[0];
                acc_o[dt * 4 + 1] *= alpha[0];
                acc_o[dt * 4 + 2] *= alpha[1];
                acc_o[dt * 4 + 3] *= alpha[1];
            }
        }

        unsigned p[BLOCK_N / 16][4];
#pragma unroll
        for (int kk = 0; kk < BLOCK_N / 16; ++kk) {
            p[kk][0] = Ops<T>::pack(acc_s[(2 * kk) * 4 + 0], acc_s[(2 * kk) * 4 + 1]);
            p[kk][1] = Ops<T>::pack(acc_s[(2 * kk) * 4 + 2], acc_s[(2 * kk) * 4 + 3]);
            p[kk][2] = Ops<T>::pack(acc_s[(2 * kk + 1) * 4 + 0], acc_s[(2 * kk + 1) * 4 + 1]);
            p[kk][3] = Ops<T>::pack(acc_s[(2 * kk + 1) * 4 + 2], acc_s[(2 * kk + 1) * 4 + 3]);
        }
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < BLOCK_N / 16; ++kk) {
            Ops<T>::template pv<D>(acc_o, p[kk][0], p[kk][1], p[kk][2], p[kk][3],
                                   desc_sw128(sV + kk * 16 * 128, V_LBO, SBO));
        }
        wgmma_commit();
        wgmma_wait_all();
    }

#pragma unroll
    for (int r = 0; r < 2; ++r) {
        row_sum[r] += __shfl_xor_sync(0xffffffffu, row_sum[r], 1);
        row_sum[r] += __shfl_xor_sync(0xffffffffu, row_sum[r], 2);
    }
    const int row0 = warp_row0 + g;
    const int row1 = row0 + 8;
    if (splits > 1) {
        // This split's partial: O / its own sum, and log2(sum) + max in the exp2 domain
        // (a row with no visible key here: zero and -inf; NaN stays NaN).
        const float inv0 = row_sum[0] == 0.f ? 0.f : 1.f / row_sum[0];
        const float inv1 = row_sum[1] == 0.f ? 0.f : 1.f / row_sum[1];
        const float mx0 = row_max[0] * scale_log2, mx1 = row_max[1] * scale_log2;
        const float lse0 = row_sum[0] == 0.f ? -INFINITY : mx0 + __log2f(row_sum[0]);
        const float lse1 = row_sum[1] == 0.f ? -INFINITY : mx1 + __log2f(row_sum[1]);
        const size_t prow = ((size_t)split * q_heads + head) * q_len + m0;
        float* pO = part_o + prow * D;
        if (t4 == 0) {
            if (m0 + row0 < q_len) part_lse[prow + row0] = lse0;
            if (m0 + row1 < q_len) part_lse[prow + row1] = lse1;
        }
#pragma unroll
        for (int dt = 0; dt < D_TILES; ++dt) {
            const int col = dt * 8 + t4 * 2;
            if (m0 + row0 < q_len)
                *reinterpret_cast<float2*>(pO + (size_t)row0 * D + col) =
                    make_float2(acc_o[dt * 4 + 0] * inv0, acc_o[dt * 4 + 1] * inv0);
            if (m0 + row1 < q_len)
                *reinterpret_cast<float2*>(pO + (size_t)row1 * D + col) =
                    make_float2(acc_o[dt * 4 + 2] * inv1, acc_o[dt * 4 + 3] * inv1);
        }
        return;
    }
    const float inv0 = 1.f / row_sum[0];
    const float inv1 = 1.f / row_sum[1];
#pragma unroll
    for (int dt = 0; dt < D_TILES; ++dt) {
        const int col = dt * 8 + t4 * 2;
        if (m0 + row0 < q_len) {
            *reinterpret_cast<unsigned*>(gO + (size_t)row0 * D + col) =
                Ops<T>::pack(acc_o[dt * 4 + 0] * inv0, acc_o[dt * 4 + 1] * inv0);
        }
        if (m0 + row1 < q_len) {
            *reinterpret_cast<unsigned*>(gO + (size_t)row1 * D + col) =
                Ops<T>::pack(acc_o[dt * 4 + 2] * inv1, acc_o[dt * 4 + 3] * inv1);
        }
    }
}

// Combines the splits' partials of one output row (blockIdx.x over q_heads * q_len
// rows): out = sum_s 2^(lse_s - M) O_s / sum_s 2^(lse_s - M), M = max_s lse_s.
// A NaN partial makes the row NaN, as the unsplit kernel does; empty splits
// (lse -inf) weigh 0.
// One CTA (COMBINE_THREADS) per (row, COMBINE_QUADS float4 column quads):
// the splits' log2-sum-exps reduced in parallel (max, NaN flag, then each
// split's weight in shared memory), then each quad's splits shared by
// COMBINE_THREADS / COMBINE_QUADS threads whose partial sums meet in shared
// memory. d % (4 * COMBINE_QUADS) == 0; grid (rows, d / (4 * COMBINE_QUADS)).
constexpr int COMBINE_THREADS = 256;
constexpr int COMBINE_QUADS = 16;
constexpr int COMBINE_MAX_SPLITS = 1024;
template <typename T>
__device__ __forceinline__ void split_combine(const float* __restrict__ part_o,
                                              const float* __restrict__ part_lse, T* __restrict__ out,
                                              int rows, int d, int splits) {
    __shared__ float wsplit[COMBINE_MAX_SPLITS];
    __shared__ float red[COMBINE_THREADS / 32];
    __shared__ float4 acc[COMBINE_THREADS];
    __shared__ float row_max, row_den;
    __shared__ int row_nan;
    const int row = blockIdx.x, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    // Max of the log2-sum-exps, and whether any is NaN.
    float m = -INFINITY;
    int nan = 0;
    for (int s = tid; s < splits; s += COMBINE_THREADS) {
        const float l = part_lse[(size_t)s * rows + row];
        nan |= l != l;
        m = fmaxf(m, l);
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    nan = __any_sync(0xffffffffu, nan);
    if (tid == 0) row_nan = 0;
    if (lane == 0) red[warp] = m;
    __syncthreads();
    if (nan) row_nan = 1;
    if (tid == 0) {
        float mm = red[0];
        for (int w = 1; w < COMBINE_THREADS / 32; ++w) mm = fmaxf(mm, red[w]);
        row_max = mm;
    }
    __syncthreads();
    // Each split's weight (0 for an empty split) and their sum.
    float den = 0.f;
    for (int s = tid; s < splits; s += COMBINE_THREADS) {
        const float l = part_lse[(size_t)s * rows + row];
        const float w = l == -INFINITY ? 0.f : exp2f(l - row_max);
        wsplit[s] = w;
        den += w;
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) den += __shfl_xor_sync(0xffffffffu, den, o);
    __syncthreads();
    if (lane == 0) red[warp] = den;
    __syncthreads();
    if (tid == 0) {
        float dd = 0.f;
        for (int w = 0; w < COMBINE_THREADS / 32; ++w) dd += red[w];
        row_den = dd;
    }
    // Columns: this CTA's quad q = tid % COMBINE_QUADS, splits s = g (mod groups).
    const int quads = d >> 2;
    constexpr int groups = COMBINE_THREADS / COMBINE_QUADS;
    const int q = blockIdx.y * COMBINE_QUADS + tid % COMBINE_QUADS, g = tid / COMBINE_QUADS;
    float4 sum = make_float4(0.f, 0.f, 0.f, 0.f);
    const float4* po = reinterpret_cast<const float4*>(part_o);
#pragma unroll 4
    for (int s = g; s < splits; s += groups) {
        const float w = wsplit[s];
        const float4 v = po[((size_t)s * rows + row) * quads + q];
        sum.x += w * v.x;
        sum.y += w * v.y;
        sum.z += w * v.z;
        sum.w += w * v.w;
    }
    acc[tid] = sum;
    __syncthreads();
    if (tid < COMBINE_QUADS) {
        float4 t = acc[tid];
        for (int k = 1; k < groups; ++k) {
            const float4 v = acc[k * COMBINE_QUADS + tid];
            t.x += v.x;
            t.y += v.y;
            t.z += v.z;
            t.w += v.w;
        }
        const float inv_nan = __int_as_float(0x7fffffff);
        const bool bad = row_nan != 0;
        const float dn = row_den;
        T* o = out + (size_t)row * d + 4 * (blockIdx.y * COMBINE_QUADS + tid);
        o[0] = static_cast<T>(bad ? inv_nan : t.x / dn);
        o[1] = static_cast<T>(bad ? inv_nan : t.y / dn);
        o[2] = static_cast<T>(bad ? inv_nan : t.z / dn);
        o[3] = static_cast<T>(bad ? inv_nan : t.w / dn);
    }
}

}  // namespace headroom_wg

// Entry points: attn_fused_prefill_wgmma_d{64,128,256}_{f16,bf16}. Launch:
// grid (ceil(q_len / BLOCK_M), q_heads), block THREADS, dynamic shared memory
// (BLOCK_M + 2 * BLOCK_N) * D * 2 + 1024 bytes.
#define WGMMA_ENTRY(D, NAME, T)                                                            \
    extern "C" __global__ void __launch_bounds__(headroom_wg::THREADS, headroom_wg::MIN_BLOCKS)     \
    attn_fused_prefill_wgmma_d##D##_##NAME(const T* q, const T* k, const T* v, T* out, int q_len,   \
                                           int kv_len, int q_heads, int kv_heads, float scale_log2, \
                                           long long kv_stride, int q_period, int splits,           \
                                           float* part_o, float* part_lse) {                        \
        headroom_wg::attn_fused_prefill<D, T>(q, k, v, out, q_len, kv_len, q_heads, kv_heads,       \
                                              scale_log2, kv_stride, q_period, splits, part_o,      \
                                              part_lse);                                            \
    }

// Split-KV combine: grid (q_heads * q_len rows, d / (4 * COMBINE_QUADS)), block COMBINE_THREADS threads;
// part_o [splits][rows][d] f32, part_lse [splits][rows] f32, out [rows][d].
extern "C" __global__ void attn_split_combine_bf16(const float* part_o, const float* part_lse,
                                                   __nv_bfloat16* out, int rows, int d, int splits) {
    headroom_wg::split_combine<__nv_bfloat16>(part_o, part_lse, out, rows, d, splits);
}
extern "C" __global__ void attn_split_combine_f16(const float* part_o, const float* part_lse, __half* out,
                                                  int rows, int d, int splits) {
    headroom_wg::split_combine<__half>(part_o, part_lse, out, rows, d, splits);
}

WGMMA_ENTRY(256, bf16, __nv_bfloat16)
WGMMA_ENTRY(256, f16, __half)
WGMMA_ENTRY(128, bf16, __nv_bfloat16)
WGMMA_ENTRY(128, f16, __half)
WGMMA_ENTRY(64, bf16, __nv_bfloat16)
WGMMA_ENTRY(64, f16, __half)
