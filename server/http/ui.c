/* ui.c: GET /, the built-in chat page. server/http/ui/chat.html is embedded into the binary
 * at compile time (the assembler's .incbin below; the Makefile rebuilds this object when
 * the page changes) and served as it is, with a Content-Security-Policy that lets the
 * page run only its own style and script (by their SHA-256) and talk only to this server.
 *
 * DESIGN: any HTTP pool thread serves the page. The page is read-only data; the policy
 * is computed once, on the first request (pthread_once), and only read after.
 */

#include <microhttpd.h>
#include <nettle/base64.h>
#include <nettle/sha2.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "common/assert.h"
#include "server/http/http_internal.h"

/* The page's bytes between srv_ui_page and srv_ui_page_end, then a NUL so that it can
 * be searched as a string. The path is relative to the repository root, where make
 * runs the compiler; no xxd or generated source needed. */
__asm__(".section .rodata\n"
        "srv_ui_page:\n"
        ".incbin \"server/http/ui/chat.html\"\n"
        "srv_ui_page_end:\n"
        ".byte 0\n"
        ".previous\n");
extern const char srv_ui_page[], srv_ui_page_end[];

/* ---- the Content-Security-Policy ---- */

static char ui_csp[512];
static pthread_once_t ui_csp_once = PTHREAD_ONCE_INIT;

/* "'sha256-BASE64'" of the text of the page's one <tag> element (the bytes between its
 * start and end tags, which is what a browser hashes) into out. */
static void csp_hash_source(const char *tag, char *out, size_t cap) {
    char open[16], close[16];
    snprintf(open, sizeof open, "<%s>", tag);
    snprintf(close, sizeof close, "</%s>", tag);
    const char *start = strstr(srv_ui_page, open);
    SP_ASSERT(start && "server/http/ui/chat.html needs its style and script elements");
    start += strlen(open);
    const char *end = strstr(start, close);
    SP_ASSERT(end && !strstr(end, open) && "server/http/ui/chat.html: one style and one script element, each closed");
    /* nettle (GnuTLS's crypto library, which libmicrohttpd already brings) */
    struct sha256_ctx ctx;
    uint8_t digest[SHA256_DIGEST_SIZE];
    sha256_init(&ctx);
    sha256_update(&ctx, (size_t)(end - start), (const uint8_t *)start);
    sha256_digest(&ctx, sizeof digest, digest);
    char b64[BASE64_ENCODE_RAW_LENGTH(SHA256_DIGEST_SIZE) + 1];
    base64_encode_raw(b64, sizeof digest, digest);
    b64[sizeof b64 - 1] = '\0';
    snprintf(out, cap, "'sha256-%s'", b64);
}

static void ui_csp_init(void) {
    char style[64], script[64];
    csp_hash_source("style", style, sizeof style);
    csp_hash_source("script", script, sizeof script);
    /* nothing but the page's own style and script, fetches to this origin, and no framing
     * (clickjacking) or form posts elsewhere */
    snprintf(ui_csp, sizeof ui_csp,
             "default-src 'none'; style-src %s; script-src %s; connect-src 'self'; "
             "base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
             style, script);
}

enum MHD_Result srv__ui_page(srv_conn *conn) {
    pthread_once(&ui_csp_once, ui_csp_init);
    size_t len = (size_t)(srv_ui_page_end - srv_ui_page);
    /* persistent: libmicrohttpd neither copies nor frees the embedded bytes */
    struct MHD_Response *resp = MHD_create_response_from_buffer(len, (void *)srv_ui_page, MHD_RESPMEM_PERSISTENT);
    if (!resp) return MHD_NO;
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/html; charset=utf-8");
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache"); /* a new build's page at once */
    MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
    MHD_add_response_header(resp, "Content-Security-Policy", ui_csp);
    MHD_add_response_header(resp, "Referrer-Policy", "no-referrer");
    return srv__queue_response(conn, MHD_HTTP_OK, resp);
}
