/* kinds.h: the enums that more than one layer names, each written once: the KV
 * cache's element format (config, scheduler, device), the CPU kernel set (config,
 * device), the device and the CUDA GEMV mode (config, device), the scheduling policy
 * (config, scheduler), the embeddings' pooling (config, scheduler, server) and the access
 * log's format (config, server). config/ sees only common/, and the scheduler's public
 * header stays free of the device API (the server reads it), so they live here rather
 * than in the layer that acts on them. Each comes with its names, the spellings of the
 * settings and flags, in value order. */
#ifndef SP_COMMON_KINDS_H
#define SP_COMMON_KINDS_H

#include "common/status.h"

/* The element format of the KV pools (gpu/). Each (token, KV head) row of Dh elements is
 * stored in the chosen type: F16 as Dh halves; Q8_0 and Q4_0 as Dh/32 of ggml's blocks
 * of that type (quant/quant.h), quantized when the row is written, so they need Dh a
 * multiple of 32. Attention reads the blocks directly. 0 is F16, so a shape that names
 * no type is F16. */
typedef enum sp_kv_type {
    SP_KV_F16,
    SP_KV_Q8_0, /* 34 bytes per 32 elements: 1.88x the tokens of F16 in the same bytes */
    SP_KV_Q4_0, /* 18 bytes per 32 elements: 3.56x */
} sp_kv_type;

/* The CPU backend's kernel sets, chosen at run time (gpu/host/host_cpu.c). avx512 uses
 * AVX-512 VL/VNNI instructions where they give the very same numbers as avx2 (integer dot
 * products, more rows per call), so avx2 and avx512 results are identical bit for bit;
 * generic is portable C with its own summation order. amx multiplies Q4_0/Q4_1/Q8_0
 * weights with AMX int8 tiles in an arithmetic of its own (gpu/host/host_amx.c: one exact
 * integer sum per 32-element block), and runs avx512's kernels for every other type. */
typedef enum sp_cpu_isa {
    SP_CPU_ISA_AUTO, /* the best set this CPU runs */
    SP_CPU_ISA_GENERIC,
    SP_CPU_ISA_AVX2,   /* AVX2, FMA, F16C */
    SP_CPU_ISA_AVX512, /* the above plus AVX-512 F, BW, VL and VNNI */
    SP_CPU_ISA_AMX,    /* the above plus AMX tile and int8, with Linux's permission */
} sp_cpu_isa;

/* The scheduler's admission and preemption order (scheduler/policy.c, slo.c). */
typedef enum sp_policy {
    SP_POLICY_FCFS,     /* first come, first served */
    SP_POLICY_PRIORITY, /* lower `priority` first, then arrival (as vLLM) */
    SP_POLICY_SLO       /* latency targets first (slo.c): fcfs order, the queue head then the shortest
                           prompts, no new prefill that would make a decode miss its inter-token target,
                           early refusal of what cannot meet its TTFT target */
} sp_policy;

/* Where the model runs (gpu/device.c's dev_create). */
typedef enum sp_device {
    SP_DEVICE_AUTO, /* CUDA when built and a usable GPU is present, else the CPU (with a log line) */
    SP_DEVICE_CPU,
    SP_DEVICE_CUDA
} sp_device;

/* When a GPU matmul of few rows runs the backend's own GEMV instead of cuBLAS: on
 * Q8_0/Q4_0/Q4_1 weights it reads the blocks directly (a fused dequantize-GEMV) instead
 * of the F16 copy; on F16/BF16 weights it reads them with F32 inputs. */
typedef enum sp_cuda_gemv {
    SP_CUDA_GEMV_AUTO,   /* for the row counts where it measured faster at load (dev_reserve) */
    SP_CUDA_GEMV_ALWAYS, /* for every row count it takes (tests) */
    SP_CUDA_GEMV_NEVER   /* never; the blocks are then not uploaded at all */
} sp_cuda_gemv;

/* How /v1/embeddings makes one vector of a prompt's token vectors (scheduler/embed.c).
 * 0 is none chosen: as the setting (spelled "auto") the model file's pooling_type, else
 * mean (cli/cmd_serve.c); in a scheduler request, not an embedding but a generation; in
 * the server's model info, mean. */
typedef enum sp_pooling {
    SP_POOLING_NONE,
    SP_POOLING_MEAN, /* the mean over every prompt token */
    SP_POOLING_LAST, /* the last prompt token's */
    SP_POOLING_CLS   /* the first prompt token's */
} sp_pooling;

/* The access log's lines (server/http/access_log.c). */
typedef enum sp_log_format { SP_LOG_FORMAT_TEXT, SP_LOG_FORMAT_JSON } sp_log_format;

/* How many values each has. */
enum {
    SP_KV_TYPE_COUNT = SP_KV_Q4_0 + 1,
    SP_CPU_ISA_COUNT = SP_CPU_ISA_AMX + 1,
    SP_POLICY_COUNT = SP_POLICY_SLO + 1,
    SP_DEVICE_COUNT = SP_DEVICE_CUDA + 1,
    SP_CUDA_GEMV_COUNT = SP_CUDA_GEMV_NEVER + 1,
    SP_POOLING_COUNT = SP_POOLING_CLS + 1,
    SP_LOG_FORMAT_COUNT = SP_LOG_FORMAT_JSON + 1
};

/* The names, indexed by value and NULL-terminated: {"f16", "q8_0", "q4_0"},
 * {"auto", "generic", "avx2", "avx512", "amx"}, {"fcfs", "priority", "slo"},
 * {"auto", "cpu", "cuda"}, {"auto", "always", "never"}, {"auto", "mean", "last", "cls"},
 * {"text", "json"}. */
extern const char *const sp_kv_type_names[];
extern const char *const sp_cpu_isa_names[];
extern const char *const sp_policy_names[];
extern const char *const sp_device_names[];
extern const char *const sp_cuda_gemv_names[];
extern const char *const sp_pooling_names[];
extern const char *const sp_log_format_names[];

/* A value's name ("unknown" for a value out of range). */
const char *sp_kv_type_name(sp_kv_type type);
const char *sp_cpu_isa_name(sp_cpu_isa isa);
const char *sp_policy_name(sp_policy policy);
const char *sp_device_name(sp_device device);
const char *sp_cuda_gemv_name(sp_cuda_gemv gemv);
const char *sp_pooling_name(sp_pooling pooling);
const char *sp_log_format_name(sp_log_format format);

/* The value named name; SP_ERR_INVALID_ARG naming the accepted names when it is none.
 * (config/ parses its settings with the tables above.) */
sp_status sp_kv_type_parse(const char *name, sp_kv_type *out);
sp_status sp_cpu_isa_parse(const char *name, sp_cpu_isa *out);
sp_status sp_device_parse(const char *name, sp_device *out);

#endif
