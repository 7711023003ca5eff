/* fuzz_framing.c: libFuzzer harness for the request framing check (server/http/http_framing.c).
 * Each input is a header block: lines split at the first ':' into a name and a value
 * (leading blanks dropped from the value, as libmicrohttpd hands them over). The check's
 * verdict is compared with an independent reading of the rules, and traps when they
 * disagree:
 *   - accepted: every name is non-empty RFC 9110 token characters, at most one
 *     Content-Length and it is all digits, at most one Transfer-Encoding and it is
 *     "chunked" (any case), and not both;
 *   - refused: the message starts "bad request framing: ".
 * Built and run by tools/fuzz.sh.
 */
#include <ctype.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "server/http/http_internal.h"

#define FUZZ_CHECK(cond)               \
    do {                               \
        if (!(cond)) __builtin_trap(); \
    } while (0)

enum { MAX_HEADERS = 64, MAX_LINE = 512 };

static bool oracle_token(const char *s) {
    if (!*s) return false;
    for (; *s; s++)
        if (!(isalnum((unsigned char)*s) || strchr("!#$%&'*+-.^_`|~", *s))) return false;
    return true;
}

static bool oracle_digits(const char *s) {
    if (!*s) return false;
    for (; *s; s++)
        if (*s < '0' || *s > '9') return false;
    return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static char names[MAX_HEADERS][MAX_LINE], values[MAX_HEADERS][MAX_LINE];
    int n = 0;
    size_t at = 0;
    while (at < size && n < MAX_HEADERS) {
        size_t end = at;
        while (end < size && data[end] != '\n') end++;
        size_t len = end - at < MAX_LINE - 1 ? end - at : MAX_LINE - 1;
        char line[MAX_LINE];
        memcpy(line, data + at, len);
        line[len] = '\0';
        at = end + 1;
        if (strlen(line) != len) continue; /* a NUL inside: libmicrohttpd would not pass it on */
        char *colon = strchr(line, ':');
        if (!colon) continue;
        *colon = '\0';
        const char *value = colon + 1;
        while (*value == ' ' || *value == '\t') value++;
        strcpy(names[n], line);
        strcpy(values[n], value);
        n++;
    }
    srv_framing scan = {0};
    for (int i = 0; i < n; i++) srv__framing_add(&scan, names[i], values[i]);
    char why[200];
    bool accepted = srv__framing_verdict(&scan, why, sizeof why);

    bool ok = true;
    int lengths = 0, encodings = 0;
    for (int i = 0; i < n && ok; i++) {
        if (!oracle_token(names[i])) ok = false;
        if (strcasecmp(names[i], "Content-Length") == 0 && (++lengths > 1 || !oracle_digits(values[i]))) ok = false;
        if (strcasecmp(names[i], "Transfer-Encoding") == 0 &&
            (++encodings > 1 || strcasecmp(values[i], "chunked") != 0))
            ok = false;
    }
    if (lengths && encodings) ok = false;
    FUZZ_CHECK(accepted == ok);
    if (!accepted) FUZZ_CHECK(strncmp(why, "bad request framing: ", 21) == 0);
    return 0;
}
