/* fuzz_config.c: libFuzzer harness for the YAML config reader (config/). Each input is
 * a config file. The reader's contract is checked and traps when broken:
 *   - a rejected file gives SP_ERR_INVALID_ARG with a message that names the file
 *     ("fuzz.yaml:"), and the settings it leaves can still be printed and freed;
 *   - an accepted file's settings, printed with cfg_print, read back to the same
 *     printout (--print-config round trip).
 * Everything is freed per input, so LeakSanitizer sees any leak. Built and run by
 * tools/fuzz.sh (which links -lyaml for it).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/cfg.h"

#define FUZZ_CHECK(cond)               \
    do {                               \
        if (!(cond)) __builtin_trap(); \
    } while (0)

static char *print_settings(const cfg_settings *s, size_t *len) {
    char *text = NULL;
    FILE *out = open_memstream(&text, len);
    FUZZ_CHECK(out);
    cfg_print(s, out);
    fclose(out);
    return text;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    cfg_settings s;
    cfg_settings_init(&s);
    sp_status st = cfg_load_yaml(&s, "fuzz.yaml", (const char *)data, size);
    size_t len;
    char *printed = print_settings(&s, &len);
    if (st != SP_OK) {
        FUZZ_CHECK(st == SP_ERR_INVALID_ARG);
        FUZZ_CHECK(strncmp(sp_last_error(), "fuzz.yaml", 9) == 0);
    } else {
        /* the printout is the settings' own YAML: it reads back to the same printout
         * (API keys are printed redacted, so compare printouts, not the settings) */
        cfg_settings back;
        cfg_settings_init(&back);
        FUZZ_CHECK(cfg_load_yaml(&back, "fuzz.yaml", printed, len) == SP_OK);
        /* the header line names the file read; both name fuzz.yaml */
        size_t len2;
        char *again = print_settings(&back, &len2);
        /* the origin comments differ (line numbers), so compare without them */
        for (char *p = printed, *q = again;;) {
            char *pe = strchr(p, '\n'), *qe = strchr(q, '\n');
            FUZZ_CHECK((pe == NULL) == (qe == NULL));
            if (!pe) break;
            char *pc = strstr(p, "  # "), *qc = strstr(q, "  # ");
            size_t pn = (size_t)((pc && pc < pe ? pc : pe) - p), qn = (size_t)((qc && qc < qe ? qc : qe) - q);
            if (p != printed) FUZZ_CHECK(pn == qn && memcmp(p, q, pn) == 0);
            p = pe + 1;
            q = qe + 1;
        }
        free(again);
        cfg_settings_free(&back);
    }
    free(printed);
    cfg_settings_free(&s);
    return 0;
}
