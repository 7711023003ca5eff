/* http_framing.c: the request's framing headers checked before its body is read, so that
 * no request can be framed one way by a proxy in front and another way here (request
 * smuggling): at most one Content-Length, all digits; Transfer-Encoding only as exactly
 * "chunked", and never together with Content-Length; header names only of RFC 9110 token
 * characters (a space before the colon is how some proxies and servers disagree).
 * libmicrohttpd parses the request line and headers before spindle sees them, so what
 * it gets wrong before that point (a 400 it writes itself, a malformed chunk inside the
 * body) is documented in docs/operations.md with the proxy settings that close it.
 *
 * DESIGN (threads): runs on the HTTP thread that handles the request; no state.
 */
#include <ctype.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "server/http/http_internal.h"

/* RFC 9110 tchar: what a header name may be made of. */
static bool is_token_char(unsigned char c) {
    return isalnum(c) || (c != '\0' && strchr("!#$%&'*+-.^_`|~", c) != NULL);
}

static bool all_digits(const char *s) {
    if (!*s) return false;
    for (; *s; s++)
        if (!isdigit((unsigned char)*s)) return false;
    return true;
}

void srv__framing_add(srv_framing *scan, const char *key, const char *value) {
    if (scan->why[0]) return; /* one problem is enough */
    for (const char *c = key; *c; c++) {
        if (!is_token_char((unsigned char)*c)) {
            snprintf(scan->why, sizeof scan->why, "malformed header name '%.60s'", key);
            return;
        }
    }
    if (!*key) {
        snprintf(scan->why, sizeof scan->why, "empty header name");
        return;
    }
    if (strcasecmp(key, MHD_HTTP_HEADER_CONTENT_LENGTH) == 0) {
        if (++scan->content_lengths > 1)
            snprintf(scan->why, sizeof scan->why, "more than one Content-Length header");
        else if (!value || !all_digits(value))
            snprintf(scan->why, sizeof scan->why, "Content-Length '%.40s' is not a number of bytes",
                     value ? value : "");
    } else if (strcasecmp(key, MHD_HTTP_HEADER_TRANSFER_ENCODING) == 0) {
        if (++scan->transfer_encodings > 1)
            snprintf(scan->why, sizeof scan->why, "more than one Transfer-Encoding header");
        else if (!value || strcasecmp(value, "chunked") != 0)
            snprintf(scan->why, sizeof scan->why, "Transfer-Encoding '%.40s' is not supported (only chunked)",
                     value ? value : "");
    }
}

bool srv__framing_verdict(srv_framing *scan, char *why, size_t cap) {
    if (!scan->why[0] && scan->content_lengths && scan->transfer_encodings)
        snprintf(scan->why, sizeof scan->why, "both Content-Length and Transfer-Encoding");
    if (!scan->why[0]) return true;
    snprintf(why, cap, "bad request framing: %s", scan->why);
    return false;
}

static enum MHD_Result scan_header(void *cls, enum MHD_ValueKind kind, const char *key, const char *value) {
    (void)kind;
    srv_framing *scan = cls;
    srv__framing_add(scan, key ? key : "", value);
    return scan->why[0] ? MHD_NO : MHD_YES;
}

bool srv__framing_ok(struct MHD_Connection *connection, char *why, size_t cap) {
    srv_framing scan = {0};
    MHD_get_connection_values(connection, MHD_HEADER_KIND, scan_header, &scan);
    return srv__framing_verdict(&scan, why, cap);
}
