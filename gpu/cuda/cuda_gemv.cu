/* cuda_gemv.cu: out (R, N) = in (R, K) . W (N, K)^T [+ bias (N)] for a few activation rows,
 * reading W straight from its GGUF blocks (Q8_0, Q4_0, Q4_1): the decode path, where the
 * time is the time to read the weights once.
 *
 * Legend: R = activation rows (1..CUDA_GEMV_MAX_ROWS), N = weight rows (outputs), K = row
 * length, QK = 32 elements per block, BB = bytes per block (Q8_0 34, Q4_0 18, Q4_1 20),
 * nb = K / QK blocks per weight row, RB = nb * BB bytes per weight row.
 * G = 8 blocks (256 elements): a group, the stretch of a row one warp takes in one step.
 * NW = weight rows per warp (8 when R <= 4, else 4). S = pipeline stages per warp.
 * ks = warps that split one set of NW rows along K (1, 2 or 4).
 *
 * Layout: W is N rows of nb blocks each, back to back, byte for byte as in the GGUF
 * (quant/quant.h); in and out are row-major F32, bias is F32 or NULL.
 *
 * Work split. A block is 4 warps. Its warps form 4/ks row sets of NW consecutive weight
 * rows; the ks warps of a set take every ks-th group of the set's rows (warp j of the set:
 * groups j, j + ks, ...). ks > 1 only when N is too small for one warp per row set to
 * give the GPU ~16 warps per SM. Each warp streams its rows' groups through its own
 * S-stage ring in shared memory with cp.async: the G*BB bytes of a row's group (272, 144
 * or 160, each a multiple of 16) are one contiguous run, copied with 16-byte `cg` copies
 * (which skip L1) when RB and W's address allow, else 8, 4 (`ca`) or, for rows of an odd
 * number of 34- or 18-byte blocks, plain 2-byte copies. S-1 stages are in flight while
 * the warp computes on the oldest: 3 * NW * G*BB bytes per warp (1.7 to 6.5 KiB), enough
 * with a dozen warps per SM to cover DRAM latency. Every byte of W is read once.
 *
 * In a group, lane l takes block b = l / 4 and quarter s = l % 4 of it: 8 elements (Q8_0:
 * qs[8s..8s+7], elements 8s..8s+7; Q4_0/Q4_1: qs[4s..4s+3], whose low nibbles are
 * elements 4s..4s+3 and high nibbles elements 16+4s..19+4s). It loads those 8 activations
 * of every row (two float4 per row, read-only path) once per group and uses them for all
 * NW weight rows, so the activations cost R*4/NW bytes of L1 traffic per weight element,
 * not R*4. They are not staged in shared memory: R * K floats (512 KiB at R = 8, K =
 * 16384) do not fit, tiles would need block barriers, and every warp of the GPU reads the
 * same vector, which stays in L2 and, for the stretch of K the SM's warps are on, in L1.
 *
 * Dequantization: bits 0x4B0000qq are the float 2^23 + qq, so a quant byte (Q8_0 with its
 * sign bit flipped, q + 128) or nibble becomes an exact float with one byte permute and
 * one subtraction of 2^23 plus its offset (128, 8, 0). A lane sums q * x over its 8
 * elements per activation row and scales once per block: acc += d * sum(q x) (Q4_1: plus
 * m * sum(x), the same sum as sum((d q + m) x)).
 *
 * Reduction: each lane holds NW * R sums (<= 32). A transposed butterfly over the warp
 * (at each of the 5 shuffle steps a lane keeps half of its values and sends the other
 * half) leaves value i, summed over the 32 lanes, in lane i * (32 / P) (P = NW * R
 * rounded up to a power of two): 31 shuffles for 32 values instead of 160. Warps write
 * their sums to shared memory; after one barrier a thread per output adds the ks warps'
 * sums in warp order, then the bias. No atomics: the result is the same on every run.
 *
 * Accuracy: F32 arithmetic throughout. The dequantized weights are exact (q as a float,
 * d widened from F16), products and sums are rounded in F32. So the result differs from
 * the CPU's products (activations quantized to Q8_0/Q8_1 per block, integer dots) and from
 * the F16 cuBLAS path (weights and activations rounded to F16) only by rounding, and is
 * the closest of the three to the exact product of the dequantized weights.
 *
 * Speed (H100/H200: 132 SMs, 3.35/4.8 TB/s; estimates from the compiled sm_90 loop, not
 * yet measured). An SM issues 128 thread-instructions a clock. At R = 1 an element costs
 * ~5 (byte permute, subtraction, FMA; per 8 elements a funnel shift, masks, three shared
 * loads and the scale; the copies), so ~25 elements per SM per clock: Q8_0 (17 needed
 * for full H200 bandwidth) is bandwidth bound, Q4_0 (33 needed) reaches ~75% of it.
 * Each further row adds ~1.4 (its FMA, its share of the activation loads): at R = 8 ~16
 * an element, about cuBLAS's rate on F16 weights, so the crossover the lead's
 * calibration (cuda__gemv_measure in cuda_matmul.cu) finds should lie near R = 8.
 */
#include <stdint.h>
#include <stdio.h>

#include "gpu/cuda/cuda_internal.cuh"

enum {
    GEMV_WARPS = 4, /* per block */
    GEMV_THREADS = GEMV_WARPS * 32,
    GEMV_GROUP = 8,  /* G: blocks of a row per warp step (32 lanes x 8 elements) */
    GEMV_STAGES = 4, /* S */
    /* after each stage: a lane's last aligned shared word can lie past the end of its
     * block (and of the stage), by at most 4 bytes; reading it is harmless, the shift
     * discards it */
    GEMV_PAD = 16,
    GEMV_QK = 32,
};

/* NW for R activation rows: 8 weight rows per warp while that keeps NW * R <= 32 values
 * per lane, 4 beyond. */
__host__ __device__ constexpr int gemv_rows_per_warp(int rows) {
    return rows <= 4 ? 8 : 4;
}

__host__ __device__ constexpr int gemv_pow2_at_least(int v) {
    return v <= 1 ? 1 : 2 * gemv_pow2_at_least((v + 1) / 2);
}

/* ---- block formats ---------------------------------------------------------------------- */

/* The bytes of one block, as quant/quant.h lays them out (this file reads them as
 * bytes at these offsets rather than through its structs):
 *   Q8_0: d (F16) at 0, qs[32] (int8) at 2                                   34 bytes
 *   Q4_0: d (F16) at 0, qs[16] at 2: qs[i] = element i (low) | element i+16 (high)  18 bytes
 *   Q4_1: d (F16) at 0, m (F16) at 2, qs[16] at 4, same nibble order        20 bytes
 * X_STEP, X_HI: lane quarter s's elements are X_STEP*s + 0..3 and X_STEP*s + X_HI + 0..3. */
template <quant_type T> struct gemv_format;
template <> struct gemv_format<QUANT_Q8_0> { static constexpr int BYTES = 34, QS = 2, X_STEP = 8, X_HI = 4; };
template <> struct gemv_format<QUANT_Q4_0> { static constexpr int BYTES = 18, QS = 2, X_STEP = 4, X_HI = 16; };
template <> struct gemv_format<QUANT_Q4_1> { static constexpr int BYTES = 20, QS = 4, X_STEP = 4, X_HI = 16; };
static_assert((GEMV_GROUP * 34) % 16 == 0 && (GEMV_GROUP * 18) % 16 == 0 && (GEMV_GROUP * 20) % 16 == 0,
              "a group of every format is a whole number of 16-byte copies");

/* ---- asynchronous copies (cp.async on sm_80 and newer; plain copies before) -------------- */

/* Copies W bytes (16, 8 or 4; both addresses W-aligned) from global to shared memory,
 * completing at gemv_copy_wait; W = 2 is a plain copy (cp.async has no 2-byte form). */
template <int W> __device__ static inline void gemv_copy(void *dst, const void *src) {
    static_assert(W == 16 || W == 8 || W == 4 || W == 2, "copy width");
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    if constexpr (W == 2) {
        *(uint16_t *)dst = *(const uint16_t *)src;
    } else {
        const unsigned shared = (unsigned)__cvta_generic_to_shared(dst);
        if constexpr (W == 16)
            asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(shared), "l"(src) : "memory");
        else
            asm volatile("cp.async.ca.shared.global [%0], [%1], %2;\n" ::"r"(shared), "l"(src), "n"(W) : "memory");
    }
#else
    if constexpr (W == 16)
        *(uint4 *)dst = *(const uint4 *)src;
    else if constexpr (W == 8)
        *(uint2 *)dst = *(const uint2 *)src;
    else if constexpr (W == 4)
        *(uint32_t *)dst = *(const uint32_t *)src;
    else
        *(uint16_t *)dst = *(const uint16_t *)src;
#endif
}

/* Closes the group of copies issued since the last commit. */
__device__ static inline void gemv_copy_commit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}

/* Waits until at most N committed groups of this thread's copies are still pending. */
template <int N> __device__ static inline void gemv_copy_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
#endif
}

/* ---- the kernel ------------------------------------------------------------------------- */

/* Copies `bytes` (a multiple of W) of each of NW rows to dst + i * GROUP_BYTES, row i
 * from src + min(i, rows - 1) * row_bytes (rows >= 1: the rows that exist; the rest
 * repeat the last, so the stage holds defined data); the lanes take W-byte pieces. */
template <int W, int NW, int GROUP_BYTES>
__device__ static inline void gemv_copy_rows(uint8_t *dst, const uint8_t *src, int64_t row_bytes, int rows, int bytes,
                                             int lane) {
#pragma unroll 1
    for (int i = 0; i < NW; i++) {
        for (int o = lane * W; o < bytes; o += 32 * W) gemv_copy<W>(dst + i * GROUP_BYTES + o, src + o);
        if (i + 1 < rows) src += row_bytes;
    }
}

/* The float 2^23 + byte c of word (0x4B0000qq). */
__device__ static inline float gemv_magic(uint32_t word, int c) {
    return __int_as_float((int)__byte_perm(word, 0x4B000000u, 0x7440u + (unsigned)c));
}

__device__ static inline float gemv_half(uint32_t bits) {
    return __half2float(__ushort_as_half((unsigned short)bits));
}

/* Lane quarter s of block b of one row's group in shared memory (`row`: 16-byte
 * aligned): its 8 quants as exact floats in the order of its elements (see X_STEP), the
 * block's scale d and, for Q4_1, its min m. */
template <quant_type T>
__device__ static inline void gemv_decode(const uint8_t *row, int b, int s, float (&q)[8], float &d, float &m) {
    using F = gemv_format<T>;
    const uint32_t *words = (const uint32_t *)row;
    const int block = b * F::BYTES;                   /* byte offset of the block in the row's group */
    const int quants = block + F::QS + F::X_STEP * s; /* its first quant byte: qs[8s] (Q8_0), qs[4s] (Q4) */
    const int first = quants >> 2;                    /* the aligned word holding it */
    const unsigned shift = (unsigned)(quants & 3) * 8;
    if constexpr (T == QUANT_Q8_0) {
        /* 8 bytes at a 2-byte boundary: three aligned words, shifted into two; q + 128 */
        const uint32_t w0 = words[first], w1 = words[first + 1], w2 = words[first + 2];
        const uint32_t lo = __funnelshift_r(w0, w1, shift) ^ 0x80808080u; /* elements 8s..8s+3 */
        const uint32_t hi = __funnelshift_r(w1, w2, shift) ^ 0x80808080u; /* elements 8s+4..8s+7 */
#pragma unroll
        for (int c = 0; c < 4; c++) {
            q[c] = gemv_magic(lo, c) - 8388736.0f; /* 2^23 + 128 */
            q[4 + c] = gemv_magic(hi, c) - 8388736.0f;
        }
        d = gemv_half(((const uint16_t *)row)[block >> 1]);
        m = 0.0f;
    } else {
        /* 4 bytes: Q4_0's at a 2-byte boundary, Q4_1's aligned (shift 0) */
        uint32_t qs;
        if constexpr (T == QUANT_Q4_0)
            qs = __funnelshift_r(words[first], words[first + 1], shift);
        else
            qs = words[first];
        const uint32_t lo = qs & 0x0F0F0F0Fu;                           /* elements 4s..4s+3 */
        const uint32_t hi = (qs >> 4) & 0x0F0F0F0Fu;                    /* elements 16+4s..19+4s */
        const float offset = T == QUANT_Q4_0 ? 8388616.0f : 8388608.0f; /* 2^23 + 8, 2^23 */
#pragma unroll
        for (int c = 0; c < 4; c++) {
            q[c] = gemv_magic(lo, c) - offset;
            q[4 + c] = gemv_magic(hi, c) - offset;
        }
        if constexpr (T == QUANT_Q4_0) {
            d = gemv_half(((const uint16_t *)row)[block >> 1]);
            m = 0.0f;
        } else {
            const uint32_t dm = words[block >> 2]; /* d in the low half, m in the high */
            d = gemv_half(dm & 0xFFFFu);
            m = gemv_half(dm >> 16);
        }
    }
}

/* Four activations at x: one 16-byte load when in is 16-byte aligned (vec, the same for
 * the whole launch; the forward pass's activations always are), else four. */
__device__ static inline float4 gemv_load4(const float *x, bool vec) {
    if (vec) return __ldg((const float4 *)x);
    return make_float4(__ldg(x), __ldg(x + 1), __ldg(x + 2), __ldg(x + 3));
}

/* One step of the transposed butterfly: C values per lane, exchanged across lanes that
 * differ in bit O. A lane with bit O set keeps the upper half of its values (indices
 * C/2..C-1, now at 0..C/2-1), the other the lower half; each adds the partner's copy of
 * the half it keeps. With one value left, the rest are plain butterfly steps. */
template <int C, int O> __device__ static inline void gemv_fold(float *v, int lane) {
    if constexpr (O > 0) {
        if constexpr (C == 1) {
            v[0] += __shfl_xor_sync(0xFFFFFFFFu, v[0], O);
        } else {
            const bool upper = (lane & O) != 0;
#pragma unroll
            for (int j = 0; j < C / 2; j++) {
                const float send = upper ? v[j] : v[j + C / 2];
                const float keep = upper ? v[j + C / 2] : v[j];
                v[j] = keep + __shfl_xor_sync(0xFFFFFFFFu, send, O);
            }
        }
        gemv_fold<C == 1 ? 1 : C / 2, O / 2>(v, lane);
    }
}

/* The weights of one launch: blocks [first_block[p], first_block[p + 1]) take part p
 * (a matmul group's Q/K/V or gate/up: one launch instead of one each), each with the
 * K split it would get alone, so its results are the same bits. */
typedef struct gemv_parts {
    int count;
    int64_t first_block[CUDA_GEMV_MAX_PARTS + 1];
    int ksplit[CUDA_GEMV_MAX_PARTS];
    const uint8_t *w[CUDA_GEMV_MAX_PARTS];
    float *out[CUDA_GEMV_MAX_PARTS];
    const float *bias[CUDA_GEMV_MAX_PARTS];
    int64_t n[CUDA_GEMV_MAX_PARTS];
} gemv_parts;

/* out (R, N) = in (R, K) . W (N, K)^T [+ bias] for each part; see the top of the file.
 * `width`: the bytes per copy (16, 8, 4 or 2). */
template <quant_type T, int R>
__global__ static void __launch_bounds__(GEMV_THREADS)
    gemv_kernel(const __grid_constant__ gemv_parts parts, const float *in, int nb, int width, bool x_vec) {
    using F = gemv_format<T>;
    constexpr int NW = gemv_rows_per_warp(R);
    constexpr int GROUP_BYTES = GEMV_GROUP * F::BYTES;       /* one row's part of a stage */
    constexpr int STAGE_BYTES = NW * GROUP_BYTES + GEMV_PAD; /* a multiple of 16 */
    constexpr int V = NW * R;                                /* sums per lane */
    constexpr int P = gemv_pow2_at_least(V);
    static_assert(P <= 32, "at most one value per lane after the reduction");

    __shared__ __align__(16) uint8_t ring[GEMV_WARPS][GEMV_STAGES][STAGE_BYTES];
    __shared__ float sums[GEMV_WARPS][P]; /* each warp's reduced sums, index r * NW + i */

    int part = 0; /* this block's weight */
    while (part + 1 < parts.count && (int64_t)blockIdx.x >= parts.first_block[part + 1]) part++;
    float *out = parts.out[part];
    const uint8_t *w = parts.w[part];
    const float *bias = parts.bias[part];
    const int64_t n = parts.n[part];
    const int ksplit = parts.ksplit[part];

    const int lane = (int)threadIdx.x % 32, warp = (int)threadIdx.x / 32;
    const int sets = GEMV_WARPS / ksplit;                 /* row sets in the block */
    const int set = warp / ksplit, slice = warp % ksplit; /* this warp's set, and its share of K */
    const int64_t block_row0 = ((int64_t)blockIdx.x - parts.first_block[part]) * sets * NW;
    const int64_t row0 = block_row0 + (int64_t)set * NW; /* this warp's first weight row */
    const int64_t left = n - row0;
    const int rows_here = left <= 0 ? 0 : left < NW ? (int)left : NW; /* its rows that exist */
    const int64_t k = (int64_t)nb * GEMV_QK;
    const int64_t row_bytes = (int64_t)nb * F::BYTES;
    const int n_groups = (nb + GEMV_GROUP - 1) / GEMV_GROUP;
    /* its groups: slice, slice + ksplit, ...; none for a warp wholly past the last row */
    const int my_groups = slice < n_groups && rows_here > 0 ? (n_groups - slice + ksplit - 1) / ksplit : 0;
    uint8_t *my_ring = &ring[warp][0][0];
    const uint8_t *my_rows = rows_here > 0 ? w + row0 * row_bytes : w; /* row0's first byte */

    /* The common case, a full group at 16 bytes a copy, has the same pattern every step:
     * lane l copies pieces c = l + 32m of the stage's NW * PIECES 16-byte pieces (row c /
     * PIECES, bytes 16 (c % PIECES) of its group; shared offset 16c), so the source
     * offsets are worked out once. Rows past the last that exists repeat it (as in
     * gemv_copy_rows): every row of a stage is computed on, and only real rows stored. */
    constexpr int PIECES = GROUP_BYTES / 16, COPIES = (NW * PIECES + 31) / 32;
    int piece_src[COPIES]; /* < NW * row_bytes: cuda__gemv_quant keeps that in an int */
#pragma unroll
    for (int m = 0; m < COPIES; m++) {
        const int c = lane + 32 * m, i = c / PIECES;
        piece_src[m] = (i < rows_here ? i : rows_here - 1) * (int)row_bytes + (c % PIECES) * 16;
    }

    /* Issues the copies of the warp's j-th group into stage j % S. */
    auto issue = [&](int j) {
        const int g = slice + j * ksplit;
        const int blocks = nb - g * GEMV_GROUP < GEMV_GROUP ? nb - g * GEMV_GROUP : GEMV_GROUP;
        const int bytes = blocks * F::BYTES; /* a multiple of width: see cuda__gemv_quant */
        uint8_t *dst = my_ring + (j % GEMV_STAGES) * STAGE_BYTES;
        const uint8_t *src = my_rows + (int64_t)g * GROUP_BYTES;
        if (width == 16 && blocks == GEMV_GROUP) {
#pragma unroll
            for (int m = 0; m < COPIES; m++)
                if (lane + 32 * m < NW * PIECES) gemv_copy<16>(dst + (lane + 32 * m) * 16, src + piece_src[m]);
            return;
        }
        switch (width) {
        case 16: gemv_copy_rows<16, NW, GROUP_BYTES>(dst, src, row_bytes, rows_here, bytes, lane); break;
        case 8: gemv_copy_rows<8, NW, GROUP_BYTES>(dst, src, row_bytes, rows_here, bytes, lane); break;
        case 4: gemv_copy_rows<4, NW, GROUP_BYTES>(dst, src, row_bytes, rows_here, bytes, lane); break;
        default: gemv_copy_rows<2, NW, GROUP_BYTES>(dst, src, row_bytes, rows_here, bytes, lane); break;
        }
    };

    float acc[NW][R];
#pragma unroll
    for (int i = 0; i < NW; i++)
#pragma unroll
        for (int r = 0; r < R; r++) acc[i][r] = 0.0f;

    const int b = lane / 4, s = lane % 4; /* the lane's block in a group, and its quarter */

    /* Ring: stages 0..S-2 are requested up front; at step j the warp waits for stage j,
     * requests stage j+S-1 into the buffer step j-1 read (every lane is past it: the
     * __syncwarp), and computes on stage j. One commit per step, empty or not, so
     * wait<S-2> always means "stage j has landed". */
#pragma unroll 1
    for (int j = 0; j < GEMV_STAGES - 1; j++) {
        if (j < my_groups) issue(j);
        gemv_copy_commit();
    }
    for (int j = 0; j < my_groups; j++) {
        gemv_copy_wait<GEMV_STAGES - 2>();
        __syncwarp(); /* every lane's copies of stage j are visible to all */
        if (j + GEMV_STAGES - 1 < my_groups) issue(j + GEMV_STAGES - 1);
        gemv_copy_commit();

        const int g = slice + j * ksplit;
        const int64_t block_index = (int64_t)g * GEMV_GROUP + b;
        if (block_index >= nb) continue; /* the lane's block is past the row's end (last group only) */
        const uint8_t *stage = my_ring + (j % GEMV_STAGES) * STAGE_BYTES;
        const int64_t e = block_index * GEMV_QK + F::X_STEP * s; /* the lane's first element */

        float4 xa[R], xb[R]; /* its 8 activations of every row: elements e..e+3, e+X_HI..e+X_HI+3 */
        float xsum[R];       /* Q4_1: their sum */
#pragma unroll
        for (int r = 0; r < R; r++) {
            xa[r] = gemv_load4(in + r * k + e, x_vec);
            xb[r] = gemv_load4(in + r * k + e + F::X_HI, x_vec);
            if constexpr (T == QUANT_Q4_1)
                xsum[r] = ((xa[r].x + xa[r].y) + (xa[r].z + xa[r].w)) + ((xb[r].x + xb[r].y) + (xb[r].z + xb[r].w));
        }
#pragma unroll
        for (int i = 0; i < NW; i++) {
            float q[8], d, m;
            gemv_decode<T>(stage + i * GROUP_BYTES, b, s, q, d, m);
#pragma unroll
            for (int r = 0; r < R; r++) {
                float t = q[0] * xa[r].x;
                t = fmaf(q[1], xa[r].y, t);
                t = fmaf(q[2], xa[r].z, t);
                t = fmaf(q[3], xa[r].w, t);
                t = fmaf(q[4], xb[r].x, t);
                t = fmaf(q[5], xb[r].y, t);
                t = fmaf(q[6], xb[r].z, t);
                t = fmaf(q[7], xb[r].w, t);
                acc[i][r] = fmaf(d, t, acc[i][r]);
                if constexpr (T == QUANT_Q4_1) acc[i][r] = fmaf(m, xsum[r], acc[i][r]);
            }
        }
    }

    /* the warp's sums, then the block's outputs */
    float v[P];
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int i = 0; i < NW; i++) v[r * NW + i] = acc[i][r];
#pragma unroll
    for (int x = V; x < P; x++) v[x] = 0.0f;
    gemv_fold<P, 16>(v, lane);
    constexpr int LANES_PER_VALUE = 32 / P; /* lane l holds value l / LANES_PER_VALUE */
    if (lane % LANES_PER_VALUE == 0) sums[warp][lane / LANES_PER_VALUE] = v[0];
    __syncthreads();

    const int block_rows = sets * NW; /* weight rows of the block */
    const int t = (int)threadIdx.x;
    if (t < block_rows * R) {
        const int r = t / block_rows, j = t % block_rows; /* activation row, weight row in the block */
        const int t_set = j / NW, i = j % NW;
        const int64_t row = block_row0 + j;
        if (row < n) {
            float sum = 0.0f;
            for (int x = 0; x < ksplit; x++) sum += sums[t_set * ksplit + x][r * NW + i];
            out[r * n + row] = bias ? sum + bias[row] : sum;
        }
    }
}

/* ---- launch ---------------------------------------------------------------------------- */

/* parts: every field but first_block filled; the launch sets the block ranges. */
template <quant_type T, int R>
static void gemv_launch(cuda_backend *cb, gemv_parts parts, const float *in, int nb, int width) {
    constexpr int NW = gemv_rows_per_warp(R);
    const int64_t n_groups = (nb + GEMV_GROUP - 1) / GEMV_GROUP;
    const int64_t target_warps = (int64_t)(cb->n_sms > 0 ? cb->n_sms : 132) * 16;
    int64_t grid = 0;
    for (int p = 0; p < parts.count; p++) {
        /* split K across the warps of a row set only while that is needed for ~16 warps
         * per SM, and never so far that a warp would get no group */
        int ksplit = 1;
        for (;;) {
            const int64_t rows_per_block = (int64_t)(GEMV_WARPS / ksplit) * NW;
            const int64_t warps = (parts.n[p] + rows_per_block - 1) / rows_per_block * GEMV_WARPS;
            if (ksplit == GEMV_WARPS || 2 * ksplit > n_groups || warps >= target_warps) break;
            ksplit *= 2;
        }
        const int64_t rows_per_block = (int64_t)(GEMV_WARPS / ksplit) * NW;
        parts.ksplit[p] = ksplit;
        parts.first_block[p] = grid;
        grid += (parts.n[p] + rows_per_block - 1) / rows_per_block;
    }
    parts.first_block[parts.count] = grid;
    if (grid > 0x7FFFFFFF) {
        cuda__fault(cb, "gemv: too many weight rows for one launch");
        return;
    }
    const bool x_vec = ((uintptr_t)in & 15) == 0;
    gemv_kernel<T, R><<<(unsigned)grid, GEMV_THREADS, 0, cb->stream>>>(parts, in, nb, width, x_vec);
    cuda__launched(cb, "gemv_kernel");
}

template <quant_type T>
static void gemv_launch_rows(cuda_backend *cb, const gemv_parts &parts, const float *in, int nb, int64_t rows,
                             int width) {
    switch (rows) {
    case 1: gemv_launch<T, 1>(cb, parts, in, nb, width); break;
    case 2: gemv_launch<T, 2>(cb, parts, in, nb, width); break;
    case 3: gemv_launch<T, 3>(cb, parts, in, nb, width); break;
    case 4: gemv_launch<T, 4>(cb, parts, in, nb, width); break;
    case 5: gemv_launch<T, 5>(cb, parts, in, nb, width); break;
    case 6: gemv_launch<T, 6>(cb, parts, in, nb, width); break;
    case 7: gemv_launch<T, 7>(cb, parts, in, nb, width); break;
    default: gemv_launch<T, 8>(cb, parts, in, nb, width); break;
    }
}

void cuda__gemv_quant(cuda_backend *cb, float *out, const float *in, const void *w, quant_type type, int64_t n,
                      int64_t k, int64_t rows, const float *bias) {
    const cuda_gemv_part part = {out, w, n, bias};
    cuda__gemv_quant_group(cb, &part, 1, in, type, k, rows);
}

void cuda__gemv_quant_group(cuda_backend *cb, const cuda_gemv_part *group, int n_parts, const float *in,
                            quant_type type, int64_t k, int64_t rows) {
    if (cb->faulted) return;
    char what[200];
    int block_bytes = 0;
    switch (type) {
    case QUANT_Q8_0: block_bytes = gemv_format<QUANT_Q8_0>::BYTES; break;
    case QUANT_Q4_0: block_bytes = gemv_format<QUANT_Q4_0>::BYTES; break;
    case QUANT_Q4_1: block_bytes = gemv_format<QUANT_Q4_1>::BYTES; break;
    default:
        snprintf(what, sizeof what, "gemv: weight type %s (%d) is not Q8_0, Q4_0 or Q4_1", quant_type_name(type),
                 (int)type);
        cuda__fault(cb, what);
        return;
    }
    if (rows < 1 || rows > CUDA_GEMV_MAX_ROWS) {
        snprintf(what, sizeof what, "gemv: %lld activation rows, outside 1..%d", (long long)rows,
                 (int)CUDA_GEMV_MAX_ROWS);
        cuda__fault(cb, what);
        return;
    }
    if (n_parts < 1 || n_parts > CUDA_GEMV_MAX_PARTS) {
        snprintf(what, sizeof what, "gemv: %d weights in one launch, outside 1..%d", n_parts, (int)CUDA_GEMV_MAX_PARTS);
        cuda__fault(cb, what);
        return;
    }
    const int nb = (int)(k / GEMV_QK);
    const uintptr_t row_bytes = (uintptr_t)nb * (uintptr_t)block_bytes;
    gemv_parts parts = {};
    parts.count = n_parts;
    uintptr_t addresses = 0; /* every part's address bits, for the copy width */
    for (int p = 0; p < n_parts; p++) {
        const int64_t n = group[p].n;
        /* k's bound keeps a warp's rows' byte offsets (8 rows + 3 pieces' worth) in an int */
        if (k < GEMV_QK || k % GEMV_QK != 0 || k > ((int64_t)1 << 24) || n < 1) {
            snprintf(what, sizeof what, "gemv: weight of %lld x %lld: rows must be a multiple of %d long, up to %d",
                     (long long)n, (long long)k, (int)GEMV_QK, 1 << 24);
            cuda__fault(cb, what);
            return;
        }
        if (((uintptr_t)group[p].w & 1) != 0) {
            cuda__fault(cb, "gemv: weight blocks at an odd address");
            return;
        }
        addresses |= (uintptr_t)group[p].w;
        parts.w[p] = (const uint8_t *)group[p].w;
        parts.out[p] = group[p].out;
        parts.bias[p] = group[p].bias;
        parts.n[p] = n;
    }
    /* the widest copy that every row's group start (row * RB + g * G*BB, G*BB a multiple
     * of 16) of every part and every group's length (a multiple of RB's alignment) allow */
    int width = 16;
    while (width > 2 && ((row_bytes | addresses) & (uintptr_t)(width - 1)) != 0) width /= 2;
    switch (type) {
    case QUANT_Q8_0: gemv_launch_rows<QUANT_Q8_0>(cb, parts, in, nb, rows, width); break;
    case QUANT_Q4_0: gemv_launch_rows<QUANT_Q4_0>(cb, parts, in, nb, rows, width); break;
    default: gemv_launch_rows<QUANT_Q4_1>(cb, parts, in, nb, rows, width); break;
    }
}
