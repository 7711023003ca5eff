/* ui.c: GET /, the built-in chat page. server/ui/chat.html is embedded into the binary
 * at compile time (the assembler's .incbin below; the Makefile rebuilds this object when
 * the page changes) and served as it is, with a Content-Security-Policy that lets the
 * page run only its own style and script (by their SHA-256) and talk only to this server.
 *
 * DESIGN: any HTTP pool thread serves the page. The page is read-only data; the policy
 * is computed once, on the first request (pthread_once), and only read after.
 */

#include <microhttpd.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "common/assert.h"
#include "server/server_internal.h"

/* The page's bytes between srv_ui_page and srv_ui_page_end, then a NUL so that it can
 * be searched as a string. The path is relative to the repository root, where make
 * runs the compiler; no xxd or generated source needed. */
__asm__(".section .rodata\n"
        "srv_ui_page:\n"
        ".incbin \"server/ui/chat.html\"\n"
        "srv_ui_page_end:\n"
        ".byte 0\n"
        ".previous\n");
extern const char srv_ui_page[], srv_ui_page_end[];

/* ---- SHA-256 (FIPS 180-4), for the policy's script and style hashes ---- */

static const uint32_t SHA256_K[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

static uint32_t rotr(uint32_t x, int n) {
    return (x >> n) | (x << (32 - n));
}

/* One 64-byte block into the state h (8 words). */
static void sha256_block(uint32_t h[8], const unsigned char *block) {
    uint32_t w[64];
    for (int i = 0; i < 16; i++)
        w[i] = (uint32_t)block[4 * i] << 24 | (uint32_t)block[4 * i + 1] << 16 | (uint32_t)block[4 * i + 2] << 8 |
               (uint32_t)block[4 * i + 3];
    for (int i = 16; i < 64; i++) {
        uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
        uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
        w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], hh = h[7];
    for (int i = 0; i < 64; i++) {
        uint32_t t1 = hh + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + SHA256_K[i] + w[i];
        uint32_t t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
        hh = g;
        g = f;
        f = e;
        e = d + t1;
        d = c;
        c = b;
        b = a;
        a = t1 + t2;
    }
    h[0] += a, h[1] += b, h[2] += c, h[3] += d, h[4] += e, h[5] += f, h[6] += g, h[7] += hh;
}

static void sha256(const char *data, size_t len, unsigned char out[32]) {
    uint32_t h[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
    size_t full = len / 64 * 64;
    for (size_t off = 0; off < full; off += 64) sha256_block(h, (const unsigned char *)data + off);
    /* the tail, the 0x80 marker and the length in bits: one or two last blocks */
    unsigned char last[128] = {0};
    size_t rest = len - full;
    memcpy(last, data + full, rest);
    last[rest] = 0x80;
    size_t n_last = rest + 9 <= 64 ? 64 : 128;
    uint64_t bits = (uint64_t)len * 8;
    for (int i = 0; i < 8; i++) last[n_last - 1 - i] = (unsigned char)(bits >> (8 * i));
    for (size_t off = 0; off < n_last; off += 64) sha256_block(h, last + off);
    for (int i = 0; i < 32; i++) out[i] = (unsigned char)(h[i / 4] >> (24 - 8 * (i % 4)));
}

/* ---- the Content-Security-Policy ---- */

static char ui_csp[512];
static pthread_once_t ui_csp_once = PTHREAD_ONCE_INIT;

/* "'sha256-BASE64'" of the text of the page's one <tag> element (the bytes between its
 * start and end tags, which is what a browser hashes) into out. */
static void csp_hash_source(const char *tag, char *out, size_t cap) {
    static const char BASE64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char open[16], close[16];
    snprintf(open, sizeof open, "<%s>", tag);
    snprintf(close, sizeof close, "</%s>", tag);
    const char *start = strstr(srv_ui_page, open);
    SP_ASSERT(start && "server/ui/chat.html needs its style and script elements");
    start += strlen(open);
    const char *end = strstr(start, close);
    SP_ASSERT(end && !strstr(end, open) && "server/ui/chat.html: one style and one script element, each closed");
    unsigned char digest[33] = {0}; /* one zero byte past the digest: 33 bytes, 11 whole base64 groups */
    sha256(start, (size_t)(end - start), digest);
    char b64[45];
    for (int i = 0, o = 0; i < 33; i += 3, o += 4) {
        uint32_t v = (uint32_t)digest[i] << 16 | (uint32_t)digest[i + 1] << 8 | digest[i + 2];
        for (int k = 0; k < 4; k++) b64[o + k] = BASE64[(v >> (18 - 6 * k)) & 63];
    }
    b64[43] = '='; /* 32 bytes: 43 characters and one '=' of padding */
    b64[44] = '\0';
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
