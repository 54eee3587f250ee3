// Copies of byte ranges within device memory in one launch
// (crates/cuda/src/ops/state/mod.rs): a prefix-cache hit resumes a slot from
// a snapshot by copying every GDN layer's conv and recurrent state, which
// were ~60 queued memcpy calls on the host. The table holds one
// (src, dst, bytes) triple of u64 per range; blockIdx.y is the range,
// blockIdx.x one CHUNK of it (blocks past a short range's end return).
// Ranges must not overlap. 16-byte loads and stores where the range's
// pointers and length allow, bytes otherwise.

constexpr unsigned long long CHUNK = 64 * 1024;

extern "C" __global__ void copy_ranges(const unsigned long long* table) {
    const unsigned long long* r = table + 3 * blockIdx.y;
    const unsigned long long src = r[0], dst = r[1], bytes = r[2];
    const unsigned long long start = (unsigned long long)blockIdx.x * CHUNK;
    if (start >= bytes) return;
    const unsigned long long end = bytes - start < CHUNK ? bytes : start + CHUNK;
    if (((src | dst | bytes) & 15ull) == 0) {
        const uint4* s = reinterpret_cast<const uint4*>(src);
        uint4* d = reinterpret_cast<uint4*>(dst);
        for (unsigned long long i = start / 16 + threadIdx.x; i < end / 16; i += blockDim.x) {
            d[i] = s[i];
        }
    } else {
        const unsigned char* s = reinterpret_cast<const unsigned char*>(src);
        unsigned char* d = reinterpret_cast<unsigned char*>(dst);
        for (unsigned long long i = start + threadIdx.x; i < end; i += blockDim.x) {
            d[i] = s[i];
        }
    }
}
