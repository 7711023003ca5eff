/* test_kinds.c: common/kinds.c: every value of the shared enums (KV element format, CPU
 * kernel set, policy) has its name in value order, parses back to itself, and an
 * unknown name is refused naming the accepted ones. */
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

Test(kinds, unknown_names_are_refused) {
    sp_kv_type t = SP_KV_Q8_0;
    cr_assert_eq(sp_kv_type_parse("q5_0", &t), SP_ERR_INVALID_ARG);
    cr_assert_eq(t, SP_KV_Q8_0, "unchanged");
    cr_assert(strstr(sp_last_error(), "q4_0"));
    sp_cpu_isa isa = SP_CPU_ISA_AVX2;
    cr_assert_eq(sp_cpu_isa_parse("sse2", &isa), SP_ERR_INVALID_ARG);
    cr_assert_eq(isa, SP_CPU_ISA_AVX2);
    cr_assert(strstr(sp_last_error(), "avx512"));
}
