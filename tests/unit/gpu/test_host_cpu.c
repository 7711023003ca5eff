/* test_host_cpu.c: which CPU kernel sets the probe allows (gpu/host/host_cpu.c): its
 * decision on the CPUID and XCR0 words of the machines the project runs on and of the
 * traps between them, and its answer on this machine against /proc/cpuinfo. (Picking
 * the best set and refusing a missing one: test_quant_dot.c.) */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "gpu/host/host_internal.h"

/* The probe's decision on other machines' CPUID and XCR0 words: the sets the machines
 * this project runs on (and the traps: AVX-512 without VNNI, an OS that saves no ZMM
 * state, a Linux that does not offer the tile state) must get. */
Test(host_cpu, kernel_sets_for_other_cpus) {
    const uint32_t fma = 1u << 12, osxsave = 1u << 27, f16c = 1u << 29, avx2 = 1u << 5;
    const uint32_t avx512 = (1u << 16) | (1u << 30) | (1u << 31) /* F, BW, VL */, vnni = 1u << 11;
    const uint32_t amx = (1u << 24) | (1u << 25) /* tile, int8 */;
    const uint64_t ymm_os = 0x7, zmm_os = 0xe7, tile_os = 0x600e7;
    const struct {
        const char *cpu;
        host_cpuid_words w;
        host_cpu_features want;
    } cases[] = {
        {"AVX2-only EPYC (Zen 2/3)", {fma | osxsave | f16c, avx2, 0, 0, ymm_os, false}, {true, false, false}},
        {"EPYC with AVX-512 (Zen 4)",
         {fma | osxsave | f16c, avx2 | avx512, vnni, 0, zmm_os, true},
         {true, true, false}},
        {"Xeon with AMX", {fma | osxsave | f16c, avx2 | avx512, vnni, amx, tile_os, true}, {true, true, true}},
        {"Xeon with AMX, Linux not offering the tiles",
         {fma | osxsave | f16c, avx2 | avx512, vnni, amx, tile_os, false},
         {true, true, false}},
        {"Xeon with AMX, tile state not saved",
         {fma | osxsave | f16c, avx2 | avx512, vnni, amx, zmm_os, true},
         {true, true, false}},
        {"AVX-512 without VNNI (Skylake-SP)",
         {fma | osxsave | f16c, avx2 | avx512, 0, 0, zmm_os, false},
         {true, false, false}},
        {"AVX-512 CPU, OS saving no ZMM state",
         {fma | osxsave | f16c, avx2 | avx512, vnni, 0, ymm_os, false},
         {true, false, false}},
        {"AVX2 without F16C (a masked VM)", {fma | osxsave, avx2, 0, 0, ymm_os, false}, {false, false, false}},
        {"AVX-512 F without BW and VL",
         {fma | osxsave | f16c, avx2 | (1u << 16), vnni, 0, zmm_os, false},
         {true, false, false}},
        {"AMX tile without int8",
         {fma | osxsave | f16c, avx2 | avx512, vnni, 1u << 24, tile_os, true},
         {true, true, false}},
        /* words as they would read if XGETBV were run anyway: OSXSAVE alone decides */
        {"no OSXSAVE", {fma | f16c, avx2 | avx512, vnni, amx, tile_os, true}, {false, false, false}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const host_cpu_features f = host__cpu_features_decide(&cases[i].w);
        cr_expect(f.avx2 == cases[i].want.avx2 && f.avx512 == cases[i].want.avx512 && f.amx == cases[i].want.amx,
                  "%s: got avx2 %d avx512 %d amx %d", cases[i].cpu, f.avx2, f.avx512, f.amx);
    }
}

/* The probe on this machine agrees with what Linux reports in /proc/cpuinfo, which lists
 * AVX2 and AVX-512 only where the kernel saves their state. For AMX the flags may be
 * listed by a kernel that does not offer the tile state (before 5.16): only the probe's
 * yes is checked against them. */
Test(host_cpu, probe_agrees_with_proc_cpuinfo) {
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) cr_skip_test("no /proc/cpuinfo");
    char line[8192], flags[8192 + 2] = "";
    while (fgets(line, sizeof line, f))
        if (strncmp(line, "flags", 5) == 0) {
            const char *list = strchr(line, ':') ? strchr(line, ':') + 1 : line;
            flags[0] = ' ';
            memcpy(flags + 1, list, strlen(list) + 1); /* fits: list is shorter than line */
            strcat(flags, " ");
            break;
        }
    fclose(f);
    if (!flags[0]) cr_skip_test("/proc/cpuinfo lists no flags (not x86?)");
    char *nl = strchr(flags, '\n');
    if (nl) *nl = ' ';
#define HAS(x) (strstr(flags, " " x " ") != NULL)
    const bool avx2 = HAS("avx2") && HAS("fma") && HAS("f16c");
    const bool avx512 = avx2 && HAS("avx512f") && HAS("avx512bw") && HAS("avx512vl") && HAS("avx512_vnni");
    const bool amx = avx512 && HAS("amx_tile") && HAS("amx_int8");
#undef HAS
    const host_cpu_features probed = host__cpu_features();
    cr_expect_eq(probed.avx2, avx2, "avx2: probe %d, /proc/cpuinfo %d", probed.avx2, avx2);
    cr_expect_eq(probed.avx512, avx512, "avx512: probe %d, /proc/cpuinfo %d", probed.avx512, avx512);
    cr_expect(!probed.amx || amx, "amx: probe says yes, /proc/cpuinfo does not list amx_tile and amx_int8");
}
