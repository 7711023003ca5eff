/* host_cpu.c: which CPU kernel sets this machine can run, found once at run time.
 *
 * A set is usable when the CPU has its instructions (CPUID) and the operating system
 * saves the registers they use (XCR0, read with XGETBV): AVX2 needs the YMM state, AVX-512
 * the opmask and both ZMM states as well. AMX needs CPUID's tile and int8 bits, XCR0's tile
 * bits and Linux offering the tile data state (ARCH_GET_XCOMP_SUPP); permission to use it
 * (ARCH_REQ_XCOMP_PERM) is asked only when a backend picks the amx set
 * (host__amx_request_tiles): it is granted for the process's life and raises the signal
 * stack size every sigaltstack must then have.
 *
 * The probe runs once (CPUID traps to the hypervisor in VMs, so it is slow); any thread
 * may ask, and racing first calls store the same answer.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "gpu/host/host_internal.h"

/* CPUID bits: leaf 1 ECX; leaf 7 (subleaf 0) EBX, ECX, EDX. */
static const uint32_t CPUID1_FMA = 1u << 12, CPUID1_OSXSAVE = 1u << 27, CPUID1_F16C = 1u << 29;
static const uint32_t CPUID7_AVX2 = 1u << 5, CPUID7_AVX512F = 1u << 16, CPUID7_AVX512BW = 1u << 30,
                      CPUID7_AVX512VL = 1u << 31;
static const uint32_t CPUID7_AVX512VNNI = 1u << 11;
static const uint32_t CPUID7_AMX_TILE = 1u << 24, CPUID7_AMX_INT8 = 1u << 25;
/* XCR0: the register states the OS saves. */
static const uint64_t XCR0_SSE = 1u << 1, XCR0_YMM = 1u << 2, XCR0_OPMASK = 1u << 5, XCR0_ZMM_HI256 = 1u << 6,
                      XCR0_HI16_ZMM = 1u << 7, XCR0_TILECFG = 1u << 17, XCR0_TILEDATA = 1u << 18;

static bool all_set(uint64_t word, uint64_t bits) {
    return (word & bits) == bits;
}

host_cpu_features host__cpu_features_decide(const host_cpuid_words *w) {
    host_cpu_features f = {0};
    if (!(w->leaf1_ecx & CPUID1_OSXSAVE)) return f;
    const bool ymm_saved = all_set(w->xcr0, XCR0_SSE | XCR0_YMM);
    const bool zmm_saved = ymm_saved && all_set(w->xcr0, XCR0_OPMASK | XCR0_ZMM_HI256 | XCR0_HI16_ZMM);
    const bool tiles_saved = all_set(w->xcr0, XCR0_TILECFG | XCR0_TILEDATA);
    f.avx2 = ymm_saved && (w->leaf7_ebx & CPUID7_AVX2) && all_set(w->leaf1_ecx, CPUID1_FMA | CPUID1_F16C);
    f.avx512 = f.avx2 && zmm_saved && all_set(w->leaf7_ebx, CPUID7_AVX512F | CPUID7_AVX512BW | CPUID7_AVX512VL) &&
               (w->leaf7_ecx & CPUID7_AVX512VNNI);
    f.amx = f.avx512 && all_set(w->leaf7_edx, CPUID7_AMX_TILE | CPUID7_AMX_INT8) && tiles_saved && w->tiles_offered;
    return f;
}

#if defined(__x86_64__) && defined(__GNUC__) && defined(__linux__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

enum {
    ARCH_GET_XCOMP_SUPP = 0x1021, /* linux/arch/x86/include/uapi/asm/prctl.h */
    ARCH_REQ_XCOMP_PERM = 0x1023,
    XFEATURE_XTILEDATA = 18,
};

static uint64_t read_xcr0(void) {
    uint32_t eax, edx;
    __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
    return ((uint64_t)edx << 32) | eax;
}

static host_cpu_features probe(void) {
    host_cpuid_words w = {0};
    unsigned eax, ebx, ecx, edx;
    if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return (host_cpu_features){0};
    w.leaf1_ecx = ecx;
    /* XGETBV faults without OSXSAVE: then the OS saves no extended state we could use */
    if (ecx & CPUID1_OSXSAVE) w.xcr0 = read_xcr0();
    if (__get_cpuid_max(0, NULL) >= 7) {
        __cpuid_count(7, 0, eax, ebx, ecx, edx);
        w.leaf7_ebx = ebx;
        w.leaf7_ecx = ecx;
        w.leaf7_edx = edx;
    }
    /* the kernel would hand the tile state to a process that asked for it (asked only
     * where the CPU has AMX and the OS saves the tiles: no needless syscall elsewhere) */
    if (all_set(w.leaf7_edx, CPUID7_AMX_TILE | CPUID7_AMX_INT8) && all_set(w.xcr0, XCR0_TILECFG | XCR0_TILEDATA)) {
        unsigned long supported = 0;
        w.tiles_offered = syscall(SYS_arch_prctl, ARCH_GET_XCOMP_SUPP, &supported) == 0 &&
                          (supported & (1ul << XFEATURE_XTILEDATA)) != 0;
    }
    return host__cpu_features_decide(&w);
}

sp_status host__amx_request_tiles(void) {
    if (syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) != 0)
        return sp_fail(SP_ERR_UNSUPPORTED, "CPU kernel set amx: Linux refused this process the AMX tile state");
    return SP_OK;
}

#else

static host_cpu_features probe(void) {
    return (host_cpu_features){0};
}

sp_status host__amx_request_tiles(void) {
    return sp_fail(SP_ERR_UNSUPPORTED, "CPU kernel set amx: not built for x86-64 Linux");
}

#endif

host_cpu_features host__cpu_features(void) {
    static _Atomic int known; /* 0 = not probed; else 1 + 2 avx2 + 4 avx512 + 8 amx */
    int bits = atomic_load_explicit(&known, memory_order_relaxed);
    if (bits == 0) {
        host_cpu_features f = probe();
        bits = 1 + (f.avx2 ? 2 : 0) + (f.avx512 ? 4 : 0) + (f.amx ? 8 : 0);
        atomic_store_explicit(&known, bits, memory_order_relaxed);
    }
    return (host_cpu_features){.avx2 = bits & 2, .avx512 = bits & 4, .amx = bits & 8};
}

sp_cpu_isa host__isa_best(void) {
    host_cpu_features f = host__cpu_features();
    return f.amx ? SP_CPU_ISA_AMX : f.avx512 ? SP_CPU_ISA_AVX512 : f.avx2 ? SP_CPU_ISA_AVX2 : SP_CPU_ISA_GENERIC;
}

sp_status host__isa_resolve(sp_cpu_isa wanted, sp_cpu_isa *out) {
    host_cpu_features f = host__cpu_features();
    switch (wanted) {
    case SP_CPU_ISA_AUTO: *out = host__isa_best(); return SP_OK;
    case SP_CPU_ISA_GENERIC: *out = wanted; return SP_OK;
    case SP_CPU_ISA_AVX2:
        if (!f.avx2) return sp_fail(SP_ERR_UNSUPPORTED, "CPU kernel set avx2: this CPU lacks AVX2, FMA or F16C");
        *out = wanted;
        return SP_OK;
    case SP_CPU_ISA_AVX512:
        if (!f.avx512)
            return sp_fail(SP_ERR_UNSUPPORTED,
                           "CPU kernel set avx512: this CPU (or its OS) lacks AVX-512 F/BW/VL/VNNI");
        *out = wanted;
        return SP_OK;
    case SP_CPU_ISA_AMX:
        if (!f.amx)
            return sp_fail(SP_ERR_UNSUPPORTED, "CPU kernel set amx: this CPU (or its OS) lacks AMX tile/int8 or "
                                               "AVX-512 F/BW/VL/VNNI");
        *out = wanted;
        return SP_OK;
    }
    return sp_fail(SP_ERR_INVALID_ARG, "unknown CPU kernel set %d", (int)wanted);
}

sp_status dev_cpu_isa_check(sp_cpu_isa wanted) {
    sp_cpu_isa resolved;
    return host__isa_resolve(wanted, &resolved);
}

const char *dev_cpu_isa_rounding(sp_cpu_isa isa) {
    /* the avx512 set computes the avx2 set's numbers with other instructions */
    return isa == SP_CPU_ISA_GENERIC ? "generic" : isa == SP_CPU_ISA_AMX ? "amx" : "avx2";
}

bool dev_cpu_has_amx(void) {
    return host__cpu_features().amx;
}
