/* json_text.c: JSON strings from bytes that may not be UTF-8 (a token, a model name,
 * an error message): the check every encoder of server/api runs and the U+FFFD
 * repair. A leaf: it calls no other file of server/api.
 */
#include <stdlib.h>
#include <string.h>

#include "server/api/api_internal.h"

/* ---- UTF-8 and JSON strings ---- */

/* Length of the valid UTF-8 character at s[0..n), or 0 when the bytes there are not one. */
static size_t utf8_char_len(const unsigned char *s, size_t n) {
    unsigned char c = s[0];
    size_t len = c < 0x80                   ? 1
                 : (c >= 0xC2 && c <= 0xDF) ? 2
                 : (c >= 0xE0 && c <= 0xEF) ? 3
                 : (c >= 0xF0 && c <= 0xF4) ? 4
                                            : 0;
    if (len == 0 || len > n) return 0;
    for (size_t k = 1; k < len; k++)
        if ((s[k] & 0xC0) != 0x80) return 0;
    if (len == 3 && ((c == 0xE0 && s[1] < 0xA0) || (c == 0xED && s[1] > 0x9F))) return 0; /* overlong, surrogate */
    if (len == 4 && ((c == 0xF0 && s[1] < 0x90) || (c == 0xF4 && s[1] > 0x8F))) return 0; /* overlong, > U+10FFFF */
    return len;
}

bool srv__utf8_valid(const char *s, size_t len) {
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < len;) {
        size_t c = utf8_char_len(u + i, len - i);
        if (c == 0) return false;
        i += c;
    }
    return true;
}

json_t *srv__json_text(const char *s, size_t len) {
    if (srv__utf8_valid(s, len)) return json_stringn_nocheck(s, len);
    if (len > (SIZE_MAX - 1) / 3) return NULL;
    char *fixed = malloc(len * 3 + 1);
    if (!fixed) return NULL;
    const unsigned char *u = (const unsigned char *)s;
    size_t o = 0;
    for (size_t i = 0; i < len;) {
        size_t c = utf8_char_len(u + i, len - i);
        if (c == 0) { /* one replacement character per byte that starts no character */
            memcpy(fixed + o, "\xEF\xBF\xBD", 3);
            o += 3;
            i++;
        } else {
            memcpy(fixed + o, s + i, c);
            o += c;
            i += c;
        }
    }
    json_t *j = json_stringn_nocheck(fixed, o);
    free(fixed);
    return j;
}
