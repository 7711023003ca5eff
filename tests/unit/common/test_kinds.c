/* test_kinds.c: common/kinds.c: every value of the shared enums (KV element format, CPU
 * kernel set, policy, device, CUDA GEMV mode, pooling, log format) has its name in value order, parses back to itself,
 * and an unknown name is refused naming the accepted ones. */
#include <criterion/criterion.h>
#include <string.h>

#include "common/kinds.h"

Test(kinds, kv_type_names_round_trip) {
    int n = 0;
    while (sp_kv_type_names[n]) n++;
    cr_assert_eq(n, SP_KV_TYPE_COUNT);
    for (int i = 0; i < SP_KV_TYPE_COUNT; i++) {
        sp_kv_type t;
        cr_assert_eq(sp_kv_type_parse(sp_kv_type_name(i), &t), SP_OK);
        cr_assert_eq((int)t, i);
    }
    cr_assert_str_eq(sp_kv_type_name(SP_KV_F16), "f16");
    cr_assert_str_eq(sp_kv_type_name(SP_KV_Q4_0), "q4_0");
    int past_the_end = SP_KV_TYPE_COUNT;
    cr_assert_str_eq(sp_kv_type_name(past_the_end), "unknown");
}

Test(kinds, cpu_isa_names_round_trip) {
    int n = 0;
    while (sp_cpu_isa_names[n]) n++;
    cr_assert_eq(n, SP_CPU_ISA_COUNT);
    for (int i = 0; i < SP_CPU_ISA_COUNT; i++) {
        sp_cpu_isa isa;
        cr_assert_eq(sp_cpu_isa_parse(sp_cpu_isa_name(i), &isa), SP_OK);
        cr_assert_eq((int)isa, i);
    }
    cr_assert_str_eq(sp_cpu_isa_name(SP_CPU_ISA_AUTO), "auto");
    cr_assert_str_eq(sp_cpu_isa_name(SP_CPU_ISA_AMX), "amx");
}

Test(kinds, policy_names) {
    int n = 0;
    while (sp_policy_names[n]) n++;
    cr_assert_eq(n, SP_POLICY_COUNT);
    cr_assert_str_eq(sp_policy_name(SP_POLICY_FCFS), "fcfs");
    cr_assert_str_eq(sp_policy_name(SP_POLICY_PRIORITY), "priority");
    cr_assert_str_eq(sp_policy_name(SP_POLICY_SLO), "slo");
}

Test(kinds, device_names_round_trip) {
    int n = 0;
    while (sp_device_names[n]) n++;
    cr_assert_eq(n, SP_DEVICE_COUNT);
    for (int i = 0; i < SP_DEVICE_COUNT; i++) {
        sp_device d;
        cr_assert_eq(sp_device_parse(sp_device_name(i), &d), SP_OK);
        cr_assert_eq((int)d, i);
    }
    cr_assert_eq(SP_DEVICE_AUTO, 0, "a setting left out is auto");
    cr_assert_str_eq(sp_device_name(SP_DEVICE_CPU), "cpu");
    cr_assert_str_eq(sp_device_name(SP_DEVICE_CUDA), "cuda");
}

/* The settings' spellings, which config/ reads from these tables. */
Test(kinds, setting_names) {
    const struct {
        const char *const *names;
        int count;
        const char *spelled;
    } tables[] = {{sp_cuda_gemv_names, SP_CUDA_GEMV_COUNT, "auto always never"},
                  {sp_pooling_names, SP_POOLING_COUNT, "auto mean last cls"},
                  {sp_log_format_names, SP_LOG_FORMAT_COUNT, "text json"}};
    for (size_t t = 0; t < sizeof tables / sizeof tables[0]; t++) {
        char joined[64] = "";
        int n = 0;
        for (; tables[t].names[n]; n++) {
            if (n) strcat(joined, " ");
            strcat(joined, tables[t].names[n]);
        }
        cr_assert_eq(n, tables[t].count);
        cr_assert_str_eq(joined, tables[t].spelled);
    }
    cr_assert_str_eq(sp_cuda_gemv_name(SP_CUDA_GEMV_NEVER), "never");
    cr_assert_str_eq(sp_pooling_name(SP_POOLING_NONE), "auto", "none chosen is the setting's auto");
    cr_assert_str_eq(sp_pooling_name(SP_POOLING_CLS), "cls");
    cr_assert_str_eq(sp_log_format_name(SP_LOG_FORMAT_JSON), "json");
    int past_the_end = SP_LOG_FORMAT_COUNT;
    cr_assert_str_eq(sp_log_format_name(past_the_end), "unknown");
}

Test(kinds, unknown_names_are_refused) {
    sp_kv_type t = SP_KV_Q8_0;
    cr_assert_eq(sp_kv_type_parse("q5_0", &t), SP_ERR_INVALID_ARG);
    cr_assert_eq(t, SP_KV_Q8_0, "unchanged");
    cr_assert(strstr(sp_last_error(), "q4_0"));
    sp_cpu_isa isa = SP_CPU_ISA_AVX2;
    cr_assert_eq(sp_cpu_isa_parse("sse2", &isa), SP_ERR_INVALID_ARG);
    cr_assert_eq(isa, SP_CPU_ISA_AVX2);
    cr_assert(strstr(sp_last_error(), "avx512"));
    sp_device d = SP_DEVICE_CPU;
    cr_assert_eq(sp_device_parse("gpu", &d), SP_ERR_INVALID_ARG);
    cr_assert_eq(d, SP_DEVICE_CPU);
    cr_assert_str_eq(sp_last_error(), "'gpu' is not one of auto, cpu, cuda");
}
