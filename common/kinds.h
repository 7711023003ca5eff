/* kinds.h: the enums that more than one layer names, each written once: the KV
 * cache's element format (config, scheduler, device), the CPU kernel set (config,
 * device) and the scheduling policy (config, scheduler). config/ sees only common/, and
 * the scheduler's public header stays free of the device API (the server reads it), so
 * they live here rather than in the layer that acts on them. Each comes with its names,
 * the spellings of the settings and flags, in value order. */
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

/* How many values each has. */
enum { SP_KV_TYPE_COUNT = SP_KV_Q4_0 + 1, SP_CPU_ISA_COUNT = SP_CPU_ISA_AMX + 1, SP_POLICY_COUNT = SP_POLICY_SLO + 1 };

/* The names, indexed by value and NULL-terminated: {"f16", "q8_0", "q4_0"},
 * {"auto", "generic", "avx2", "avx512", "amx"}, {"fcfs", "priority", "slo"}. */
extern const char *const sp_kv_type_names[];
extern const char *const sp_cpu_isa_names[];
extern const char *const sp_policy_names[];

/* A value's name ("unknown" for a value out of range). */
const char *sp_kv_type_name(sp_kv_type type);
const char *sp_cpu_isa_name(sp_cpu_isa isa);
const char *sp_policy_name(sp_policy policy);

/* The value named name; SP_ERR_INVALID_ARG naming the accepted names when it is none. */
sp_status sp_kv_type_parse(const char *name, sp_kv_type *out);
sp_status sp_cpu_isa_parse(const char *name, sp_cpu_isa *out);

#endif
