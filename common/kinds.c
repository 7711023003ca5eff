/* kinds.c: see kinds.h. */
#include "common/kinds.h"

#include <string.h>

const char *const sp_kv_type_names[] = {[SP_KV_F16] = "f16", [SP_KV_Q8_0] = "q8_0", [SP_KV_Q4_0] = "q4_0", NULL};
const char *const sp_cpu_isa_names[] = {
    [SP_CPU_ISA_AUTO] = "auto",     [SP_CPU_ISA_GENERIC] = "generic", [SP_CPU_ISA_AVX2] = "avx2",
    [SP_CPU_ISA_AVX512] = "avx512", [SP_CPU_ISA_AMX] = "amx",         NULL};
const char *const sp_policy_names[] = {
    [SP_POLICY_FCFS] = "fcfs", [SP_POLICY_PRIORITY] = "priority", [SP_POLICY_SLO] = "slo", NULL};
const char *const sp_device_names[] = {
    [SP_DEVICE_AUTO] = "auto", [SP_DEVICE_CPU] = "cpu", [SP_DEVICE_CUDA] = "cuda", NULL};
const char *const sp_cuda_gemv_names[] = {
    [SP_CUDA_GEMV_AUTO] = "auto", [SP_CUDA_GEMV_ALWAYS] = "always", [SP_CUDA_GEMV_NEVER] = "never", NULL};
const char *const sp_pooling_names[] = {
    [SP_POOLING_NONE] = "auto", [SP_POOLING_MEAN] = "mean", [SP_POOLING_LAST] = "last", [SP_POOLING_CLS] = "cls", NULL};
const char *const sp_log_format_names[] = {[SP_LOG_FORMAT_TEXT] = "text", [SP_LOG_FORMAT_JSON] = "json", NULL};

/* names[i] of a table of count names, or "unknown" past its end. */
static const char *name_at(const char *const *names, unsigned count, unsigned i) {
    return i < count ? names[i] : "unknown";
}

const char *sp_kv_type_name(sp_kv_type type) {
    return name_at(sp_kv_type_names, SP_KV_TYPE_COUNT, (unsigned)type);
}

const char *sp_cpu_isa_name(sp_cpu_isa isa) {
    return name_at(sp_cpu_isa_names, SP_CPU_ISA_COUNT, (unsigned)isa);
}

const char *sp_policy_name(sp_policy policy) {
    return name_at(sp_policy_names, SP_POLICY_COUNT, (unsigned)policy);
}

const char *sp_device_name(sp_device device) {
    return name_at(sp_device_names, SP_DEVICE_COUNT, (unsigned)device);
}

const char *sp_cuda_gemv_name(sp_cuda_gemv gemv) {
    return name_at(sp_cuda_gemv_names, SP_CUDA_GEMV_COUNT, (unsigned)gemv);
}

const char *sp_pooling_name(sp_pooling pooling) {
    return name_at(sp_pooling_names, SP_POOLING_COUNT, (unsigned)pooling);
}

const char *sp_log_format_name(sp_log_format format) {
    return name_at(sp_log_format_names, SP_LOG_FORMAT_COUNT, (unsigned)format);
}

/* The index of name in names (NULL-terminated), or -1. */
static int find(const char *const *names, const char *name) {
    for (int i = 0; names[i]; i++)
        if (strcmp(names[i], name) == 0) return i;
    return -1;
}

sp_status sp_kv_type_parse(const char *name, sp_kv_type *out) {
    int i = find(sp_kv_type_names, name);
    if (i < 0) return sp_fail(SP_ERR_INVALID_ARG, "kv type \"%s\" unknown (f16, q8_0 or q4_0)", name);
    *out = (sp_kv_type)i;
    return SP_OK;
}

sp_status sp_cpu_isa_parse(const char *name, sp_cpu_isa *out) {
    int i = find(sp_cpu_isa_names, name);
    if (i < 0) return sp_fail(SP_ERR_INVALID_ARG, "'%s' is not one of auto, generic, avx2, avx512, amx", name);
    *out = (sp_cpu_isa)i;
    return SP_OK;
}

sp_status sp_device_parse(const char *name, sp_device *out) {
    int i = find(sp_device_names, name);
    if (i < 0) return sp_fail(SP_ERR_INVALID_ARG, "'%s' is not one of auto, cpu, cuda", name);
    *out = (sp_device)i;
    return SP_OK;
}
