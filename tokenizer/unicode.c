/* unicode.c: the little Unicode the tokenizers need by hand: well-formed UTF-8
 * checks (Unicode 15, table 3-7), UTF-8 encoding, GPT-2's byte-level alphabet, and the
 * string hash of the vocab's lookup tables. Character classes (\p{L}, \s, ...) are
 * PCRE2's business (tokenizer_bpe.c). Pure functions: any thread may call them.
 */
#include "tokenizer/tokenizer_internal.h"

#include <string.h>

int tok__utf8_lead_len(unsigned char lead) {
    if (lead < 0x80) return 1;
    if (lead >= 0xC2 && lead <= 0xDF) return 2;
    if (lead >= 0xE0 && lead <= 0xEF) return 3;
    if (lead >= 0xF0 && lead <= 0xF4) return 4;
    return 0; /* continuation byte, overlong lead C0/C1, or F5..FF */
}

bool tok__utf8_cont_ok(unsigned char lead, int pos, unsigned char c) {
    if (pos == 1) {
        /* The second byte carries the range limits that rule out overlongs,
         * surrogates and code points past U+10FFFF. */
        switch (lead) {
        case 0xE0: return c >= 0xA0 && c <= 0xBF;
        case 0xED: return c >= 0x80 && c <= 0x9F;
        case 0xF0: return c >= 0x90 && c <= 0xBF;
        case 0xF4: return c >= 0x80 && c <= 0x8F;
        default: break;
        }
    }
    return c >= 0x80 && c <= 0xBF;
}

size_t tok__utf8_valid_len(const unsigned char *s, size_t n) {
    int len = tok__utf8_lead_len(s[0]);
    if (len == 0 || (size_t)len > n) return 0;
    for (int i = 1; i < len; i++) {
        if (!tok__utf8_cont_ok(s[0], i, s[i])) return 0;
    }
    return (size_t)len;
}

size_t tok__utf8_encode(uint32_t cp, char *out) {
    unsigned char *o = (unsigned char *)out;
    if (cp < 0x80) {
        o[0] = (unsigned char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (unsigned char)(0xC0 | (cp >> 6));
        o[1] = (unsigned char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (unsigned char)(0xE0 | (cp >> 12));
        o[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (unsigned char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (unsigned char)(0xF0 | (cp >> 18));
    o[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (unsigned char)(0x80 | (cp & 0x3F));
    return 4;
}

/* GPT-2's alphabet keeps the 188 printable bytes ('!'..'~', 0xA1..0xAC, 0xAE..0xFF) as
 * the code points of the same value and moves the other 68, in byte order, to
 * U+0100..U+0143: 0x00..0x20 first, then 0x7F..0xA0, then 0xAD. */
#define GPT2_LOW_COUNT  33 /* 0x00..0x20 */
#define GPT2_HIGH_COUNT 34 /* 0x7F..0xA0 */

uint32_t tok__gpt2_byte_to_cp(uint8_t b) {
    if (b <= 0x20) return 0x100u + b;
    if (b >= 0x7F && b <= 0xA0) return 0x100u + GPT2_LOW_COUNT + (uint32_t)(b - 0x7F);
    if (b == 0xAD) return 0x100u + GPT2_LOW_COUNT + GPT2_HIGH_COUNT;
    return b;
}

int tok__gpt2_cp_to_byte(uint32_t cp) {
    if (cp < 0x100) {
        bool printable = (cp >= 0x21 && cp <= 0x7E) || (cp >= 0xA1 && cp <= 0xAC) || cp >= 0xAE;
        return printable ? (int)cp : -1;
    }
    uint32_t n = cp - 0x100;
    if (n < GPT2_LOW_COUNT) return (int)n;
    if (n < GPT2_LOW_COUNT + GPT2_HIGH_COUNT) return (int)(0x7F + n - GPT2_LOW_COUNT);
    if (n == GPT2_LOW_COUNT + GPT2_HIGH_COUNT) return 0xAD;
    return -1;
}

/* FNV-1a over 8-byte words with a final avalanche: token texts are short, so this is
 * about one multiply per token. */
uint64_t tok__hash(const void *data, size_t len) {
    const unsigned char *p = data;
    uint64_t h = 0xcbf29ce484222325ull ^ (uint64_t)len;
    while (len >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        h = (h ^ w) * 0x100000001b3ull;
        h ^= h >> 29;
        p += 8;
        len -= 8;
    }
    uint64_t tail = 0;
    memcpy(&tail, p, len);
    h = (h ^ tail) * 0x100000001b3ull;
    h ^= h >> 32;
    h *= 0xd6e8feb86659fd93ull;
    h ^= h >> 32;
    return h;
}
