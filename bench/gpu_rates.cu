/* gpu_rates.cu: the two ceilings bench/gpu_check.sh holds spindle's GPU speed against,
 * measured on the GPU at hand in one run:
 *
 *   copy: device-to-device bandwidth, cudaMemcpyAsync of one buffer (2 GiB by default)
 *         into another; the median of the timed repetitions after a warm-up. Reported
 *         as bytes read plus bytes written per second (2 * bytes / s: the memory
 *         traffic, the figure to hold a decode step's reads against) and as bytes read
 *         per second (bytes / s).
 *   gemm: cuBLAS BF16 GEMM in the layout spindle's CUDA matmul uses (cublasGemmEx,
 *         weights W (N, K) BF16 transposed, activations X (M, K) BF16, output (M, N)
 *         F32, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT): out = X . W^T for M = 2048
 *         tokens and the weight shapes of Llama 3 8B: N x K = 4096 x 4096 (q, o),
 *         14336 x 4096 (gate, up) and 4096 x 14336 (down). 2 * M * N * K FLOP; the
 *         median of the timed repetitions, each a run of back-to-back GEMMs that
 *         rotates over weight copies larger than the L2 cache.
 *
 * Inputs are random (never zeros: zeros run faster than real data). Times come from
 * CUDA events. Prints one JSON object on stdout; without a usable GPU prints why on
 * stderr and exits 2; a CUDA or cuBLAS failure exits 1.
 *
 *   build/gpu_rates [--copy-mib 2048] [--reps 10]
 */
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

/* GEMMs per timed repetition: enough that one repetition is far above event resolution. */
constexpr int GEMMS_PER_REP = 8;
/* Weight copies rotated through span at least this many bytes (the H200's L2 is 60 MB). */
constexpr size_t ROTATE_BYTES = (size_t)256 << 20;

bool cuda_ok(cudaError_t err, const char *what) {
    if (err == cudaSuccess) return true;
    fprintf(stderr, "gpu_rates: %s: %s\n", what, cudaGetErrorString(err));
    return false;
}

bool cublas_ok(cublasStatus_t st, const char *what) {
    if (st == CUBLAS_STATUS_SUCCESS) return true;
    fprintf(stderr, "gpu_rates: %s: %s\n", what, cublasGetStatusString(st));
    return false;
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* x (n) = uniform values in [-scale, scale) from a hash of (seed, index). */
__global__ void fill_bf16(__nv_bfloat16 *x, size_t n, uint64_t seed, float scale) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        uint64_t z = seed + i * 0x9E3779B97F4A7C15ull;
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        z ^= z >> 31;
        const float u = (float)(z >> 40) / (float)(1u << 24); /* [0, 1) */
        x[i] = __float2bfloat16(scale * (2.0f * u - 1.0f));
    }
}

bool fill_random(__nv_bfloat16 *x, size_t n, uint64_t seed, float scale) {
    fill_bf16<<<1024, 256>>>(x, n, seed, scale);
    return cuda_ok(cudaGetLastError(), "fill_bf16 launch");
}

/* Milliseconds of each of reps runs of fn() (after one warm-up run), timed with events. */
template <typename Fn> bool time_reps(int reps, Fn fn, std::vector<double> *ms_out) {
    cudaEvent_t start = nullptr, stop = nullptr;
    bool ok = cuda_ok(cudaEventCreate(&start), "cudaEventCreate") && cuda_ok(cudaEventCreate(&stop), "cudaEventCreate");
    ok = ok && fn() && cuda_ok(cudaDeviceSynchronize(), "warm-up");
    for (int r = 0; ok && r < reps; r++) {
        float ms = 0;
        ok = cuda_ok(cudaEventRecord(start), "cudaEventRecord") && fn() &&
             cuda_ok(cudaEventRecord(stop), "cudaEventRecord") &&
             cuda_ok(cudaEventSynchronize(stop), "cudaEventSynchronize") &&
             cuda_ok(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
        ms_out->push_back(ms);
    }
    if (start) cudaEventDestroy(start);
    if (stop) cudaEventDestroy(stop);
    return ok;
}

/* The device-to-device copy: prints its JSON fields. */
bool measure_copy(size_t bytes, int reps) {
    void *src = nullptr, *dst = nullptr;
    bool ok = cuda_ok(cudaMalloc(&src, bytes), "cudaMalloc(copy source)") &&
              cuda_ok(cudaMalloc(&dst, bytes), "cudaMalloc(copy destination)") &&
              fill_random((__nv_bfloat16 *)src, bytes / 2, 1, 1.0f) &&
              cuda_ok(cudaMemset(dst, 0x5a, bytes), "cudaMemset(copy destination)");
    std::vector<double> ms;
    ok = ok &&
         time_reps(
             reps,
             [&] { return cuda_ok(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice), "cudaMemcpyAsync"); },
             &ms);
    if (ok) {
        const double med = median(ms);
        printf("\"copy_bytes\":%zu,\"copy_reps\":%d,\"copy_ms_median\":%.4f,\"copy_gbps_read_write\":%.1f,"
               "\"copy_gbps_read\":%.1f,",
               bytes, reps, med, 2.0 * (double)bytes / (med * 1e-3) / 1e9, (double)bytes / (med * 1e-3) / 1e9);
    }
    if (src) cudaFree(src);
    if (dst) cudaFree(dst);
    return ok;
}

/* out (M, N) F32 = X (M, K) BF16 . W (N, K)^T BF16: prints its JSON fields. */
bool measure_gemm(cublasHandle_t h, int m, int n, int k, int reps) {
    const size_t w_elems = (size_t)n * (size_t)k, w_bytes = w_elems * sizeof(__nv_bfloat16);
    const int n_copies = (int)(ROTATE_BYTES / w_bytes) + 2;
    __nv_bfloat16 *w = nullptr, *x = nullptr;
    float *out = nullptr;
    const float scale_w = 1.0f / sqrtf((float)k); /* unit-variance dot products, as in a model */
    bool ok = cuda_ok(cudaMalloc(&w, w_bytes * (size_t)n_copies), "cudaMalloc(weights)") &&
              cuda_ok(cudaMalloc(&x, (size_t)m * (size_t)k * sizeof(__nv_bfloat16)), "cudaMalloc(activations)") &&
              cuda_ok(cudaMalloc(&out, (size_t)m * (size_t)n * sizeof(float)), "cudaMalloc(output)") &&
              fill_random(w, w_elems * (size_t)n_copies, 2, scale_w) && fill_random(x, (size_t)m * (size_t)k, 3, 1.0f);
    const float alpha = 1.0f, beta = 0.0f;
    int next = 0;
    auto run = [&] {
        for (int g = 0; g < GEMMS_PER_REP; g++) {
            const __nv_bfloat16 *wg = w + (size_t)next * w_elems;
            next = (next + 1) % n_copies;
            /* column-major: out^T (N, M) = W^T(op T of the (K, N) column-major W) . X^T (K, M) */
            if (!cublas_ok(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, &alpha, wg, CUDA_R_16BF, k, x,
                                        CUDA_R_16BF, k, &beta, out, CUDA_R_32F, n, CUBLAS_COMPUTE_32F,
                                        CUBLAS_GEMM_DEFAULT),
                           "cublasGemmEx"))
                return false;
        }
        return true;
    };
    std::vector<double> ms;
    ok = ok && time_reps(reps, run, &ms);
    if (ok) {
        const double med = median(ms) / GEMMS_PER_REP;
        const double flop = 2.0 * m * (double)n * (double)k;
        printf("\"gemm_%dx%dx%d_ms_median\":%.5f,\"gemm_%dx%dx%d_tflops\":%.1f,", m, n, k, med, m, n, k,
               flop / (med * 1e-3) / 1e12);
    }
    if (w) cudaFree(w);
    if (x) cudaFree(x);
    if (out) cudaFree(out);
    return ok;
}

bool parse_flag(const char *flag, const char *text, long lo, long hi, long *out) {
    char *end;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (errno || end == text || *end || v < lo || v > hi) {
        fprintf(stderr, "gpu_rates: %s: '%s' is not a whole number between %ld and %ld\n", flag, text, lo, hi);
        return false;
    }
    *out = v;
    return true;
}

} // namespace

int main(int argc, char **argv) {
    long copy_mib = 2048, reps = 10;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            printf("usage: gpu_rates [--copy-mib 2048] [--reps 10]\n"
                   "  the GPU's device-to-device copy bandwidth and cuBLAS BF16 GEMM rates, as one JSON object\n");
            return 0;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "gpu_rates: %s: unknown flag or missing value (see --help)\n", argv[i]);
            return 2;
        }
        if (strcmp(argv[i], "--copy-mib") == 0) {
            if (!parse_flag("--copy-mib", argv[++i], 1, 65536, &copy_mib)) return 2;
        } else if (strcmp(argv[i], "--reps") == 0) {
            if (!parse_flag("--reps", argv[++i], 1, 1000, &reps)) return 2;
        } else {
            fprintf(stderr, "gpu_rates: %s: unknown flag (see --help)\n", argv[i]);
            return 2;
        }
    }

    int n_devices = 0;
    cudaError_t err = cudaGetDeviceCount(&n_devices);
    if (err != cudaSuccess || n_devices == 0) {
        fprintf(stderr, "gpu_rates: no usable CUDA GPU: %s\n",
                err != cudaSuccess ? cudaGetErrorString(err) : "no device found");
        return 2;
    }
    cudaDeviceProp prop;
    if (!cuda_ok(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties")) return 1;
    cublasHandle_t h = nullptr;
    if (!cublas_ok(cublasCreate(&h), "cublasCreate")) return 1;

    printf("{\"device\":\"%s\",\"sm\":%d,\"gemm_types\":\"BF16 x BF16 -> F32, compute 32F\",", prop.name,
           prop.major * 10 + prop.minor);
    const int m = 2048;
    bool ok = measure_copy((size_t)copy_mib << 20, (int)reps) && measure_gemm(h, m, 4096, 4096, (int)reps) &&
              measure_gemm(h, m, 14336, 4096, (int)reps) && measure_gemm(h, m, 4096, 14336, (int)reps);
    cublasDestroy(h);
    if (!ok) {
        printf("\"error\":true}\n");
        return 1;
    }
    printf("\"reps\":%ld}\n", reps);
    return 0;
}
