/* template_strings.c: Python's str operations as chat templates use them, shared by the
 * string methods (template_str_methods.c) and the filters (trim, title, upper, indent,
 * wordcount ...): UTF-8 stepping, character classes, case mapping, searching, splitting,
 * stripping, and Python's repr() of a string.
 *
 * Strings are UTF-8 bytes; Python works on code points, so every operation here steps
 * over whole code points: offsets, lengths and widths count code points, and whitespace,
 * letters and case are those of Unicode. A byte that starts no well-formed sequence
 * stands alone as one character that belongs to no class and maps to itself.
 *
 * Character classes and case mapping outside ASCII come from glibc's C.UTF-8 locale,
 * opened once (newlocale, never freed) and used only through the *_l functions, so the
 * process locale does not matter and threads share it safely. Where Python's Unicode
 * database differs from glibc the gaps that matter are patched here: 'ß' uppercases to
 * "SS", 'İ' lowercases to "i̇", a final 'Σ' lowercases to 'ς', titlecase digraphs (ǅ),
 * digits of other scripts are not letters, format characters are not printable. Without
 * the locale only ASCII letters have case.
 */
#include <ctype.h>
#include <locale.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <wctype.h>

#include "template/template_internal.h"

#define NONE tmpl__none

/* ---- UTF-8 ---------------------------------------------------------------------- */

/* A byte that starts no well-formed sequence decodes to CP_INVALID + the byte. */
#define CP_INVALID 0x110000u

/* Decodes the code point at s (n > 0 bytes); returns its length in bytes. Encoded
 * surrogates (ED A0..BF xx) are accepted: the lexer writes '\ud800' that way. */
size_t tmpl__u8_decode(const char *s, size_t n, uint32_t *cp) {
    const unsigned char *p = (const unsigned char *)s;
    unsigned char c = p[0];
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    size_t len = c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
    unsigned char lo = c == 0xE0 ? 0xA0 : c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
    if (len == 0 || len > n || p[1] < lo || p[1] > hi) goto invalid;
    for (size_t k = 2; k < len; k++)
        if ((p[k] & 0xC0) != 0x80) goto invalid;
    uint32_t v = c & (0x7Fu >> len);
    for (size_t k = 1; k < len; k++) v = v << 6 | (p[k] & 0x3Fu);
    *cp = v;
    return len;
invalid:
    *cp = CP_INVALID + c;
    return 1;
}

/* The length in bytes of the code point that ends at s[i] (i > 0), as forward decoding
 * from the start would have cut it. */
static size_t u8_prev_len(const char *s, size_t i) {
    uint32_t cp;
    for (size_t k = 1; k <= 4 && k <= i; k++)
        if (((unsigned char)s[i - k] & 0xC0) != 0x80) return tmpl__u8_decode(s + i - k, k, &cp) == k ? k : 1;
    return 1;
}

/* The code point that ends at s[i] (i > 0); *len its bytes. */
static uint32_t u8_before(const char *s, size_t i, size_t *len) {
    uint32_t cp;
    *len = u8_prev_len(s, i);
    tmpl__u8_decode(s + i - *len, *len, &cp);
    return cp;
}

static void u8_put(tmpl_buf *b, uint32_t cp) {
    char out[4];
    size_t n;
    if (cp >= CP_INVALID) {
        out[0] = (char)(cp - CP_INVALID);
        n = 1;
    } else if (cp < 0x80) {
        out[0] = (char)cp;
        n = 1;
    } else if (cp < 0x800) {
        out[0] = (char)(0xC0 | cp >> 6);
        out[1] = (char)(0x80 | (cp & 0x3F));
        n = 2;
    } else if (cp < 0x10000) {
        out[0] = (char)(0xE0 | cp >> 12);
        out[1] = (char)(0x80 | (cp >> 6 & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        n = 3;
    } else {
        out[0] = (char)(0xF0 | cp >> 18);
        out[1] = (char)(0x80 | (cp >> 12 & 0x3F));
        out[2] = (char)(0x80 | (cp >> 6 & 0x3F));
        out[3] = (char)(0x80 | (cp & 0x3F));
        n = 4;
    }
    tmpl__buf_put(b, out, n);
}

size_t tmpl__cp_count(const char *s, size_t n) {
    size_t count = 0;
    uint32_t cp;
    for (size_t i = 0; i < n; count++) i += (unsigned char)s[i] < 0x80 ? 1 : tmpl__u8_decode(s + i, n - i, &cp);
    return count;
}

/* The byte offset of code point index k (k <= the string's code points). */
size_t tmpl__cp_offset(const char *s, size_t n, size_t k) {
    size_t i = 0;
    uint32_t cp;
    for (; k > 0 && i < n; k--) i += tmpl__u8_decode(s + i, n - i, &cp);
    return i;
}

size_t tmpl__str_cp_len(tv s) {
    return tmpl__cp_count(s.s, s.len);
}

/* ---- character classes ---------------------------------------------------------- */

static locale_t utf8_locale;
static wctype_t utf8_combining; /* glibc's class of combining marks */
static pthread_once_t utf8_locale_once = PTHREAD_ONCE_INIT;

static void utf8_locale_open(void) {
    utf8_locale = newlocale(LC_CTYPE_MASK, "C.UTF-8", (locale_t)0);
    if (utf8_locale) utf8_combining = wctype_l("combining", utf8_locale);
}

/* glibc's C.UTF-8 character tables, or (locale_t)0 when the system lacks them. */
static locale_t uloc(void) {
    pthread_once(&utf8_locale_once, utf8_locale_open);
    return utf8_locale;
}

typedef struct cp_range {
    uint32_t lo, hi;
} cp_range;

static bool in_ranges(const cp_range *t, size_t n, uint32_t cp) {
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (cp < t[mid].lo)
            hi = mid;
        else if (cp > t[mid].hi)
            lo = mid + 1;
        else
            return true;
    }
    return false;
}
#define IN(table, cp) in_ranges(table, sizeof(table) / sizeof(table[0]), cp)

/* Python's str.isdecimal (category Nd, Unicode 14). */
static const cp_range DECIMAL[] = {
    {0x30, 0x39},       {0x660, 0x669},     {0x6F0, 0x6F9},     {0x7C0, 0x7C9},     {0x966, 0x96F},
    {0x9E6, 0x9EF},     {0xA66, 0xA6F},     {0xAE6, 0xAEF},     {0xB66, 0xB6F},     {0xBE6, 0xBEF},
    {0xC66, 0xC6F},     {0xCE6, 0xCEF},     {0xD66, 0xD6F},     {0xDE6, 0xDEF},     {0xE50, 0xE59},
    {0xED0, 0xED9},     {0xF20, 0xF29},     {0x1040, 0x1049},   {0x1090, 0x1099},   {0x17E0, 0x17E9},
    {0x1810, 0x1819},   {0x1946, 0x194F},   {0x19D0, 0x19D9},   {0x1A80, 0x1A89},   {0x1A90, 0x1A99},
    {0x1B50, 0x1B59},   {0x1BB0, 0x1BB9},   {0x1C40, 0x1C49},   {0x1C50, 0x1C59},   {0xA620, 0xA629},
    {0xA8D0, 0xA8D9},   {0xA900, 0xA909},   {0xA9D0, 0xA9D9},   {0xA9F0, 0xA9F9},   {0xAA50, 0xAA59},
    {0xABF0, 0xABF9},   {0xFF10, 0xFF19},   {0x104A0, 0x104A9}, {0x10D30, 0x10D39}, {0x11066, 0x1106F},
    {0x110F0, 0x110F9}, {0x11136, 0x1113F}, {0x111D0, 0x111D9}, {0x112F0, 0x112F9}, {0x11450, 0x11459},
    {0x114D0, 0x114D9}, {0x11650, 0x11659}, {0x116C0, 0x116C9}, {0x11730, 0x11739}, {0x118E0, 0x118E9},
    {0x11950, 0x11959}, {0x11C50, 0x11C59}, {0x11D50, 0x11D59}, {0x11DA0, 0x11DA9}, {0x16A60, 0x16A69},
    {0x16AC0, 0x16AC9}, {0x16B50, 0x16B59}, {0x1D7CE, 0x1D7FF}, {0x1E140, 0x1E149}, {0x1E2F0, 0x1E2F9},
    {0x1E950, 0x1E959}, {0x1FBF0, 0x1FBF9}};

/* str.isdigit adds these (superscripts, circled digits ...). */
static const cp_range DIGIT_MORE[] = {{0xB2, 0xB3},       {0xB9, 0xB9},       {0x1369, 0x1371},   {0x19DA, 0x19DA},
                                      {0x2070, 0x2070},   {0x2074, 0x2079},   {0x2080, 0x2089},   {0x2460, 0x2468},
                                      {0x2474, 0x247C},   {0x2488, 0x2490},   {0x24EA, 0x24EA},   {0x24F5, 0x24FD},
                                      {0x24FF, 0x24FF},   {0x2776, 0x277E},   {0x2780, 0x2788},   {0x278A, 0x2792},
                                      {0x10A40, 0x10A43}, {0x10E60, 0x10E68}, {0x11052, 0x1105A}, {0x1F100, 0x1F10A}};

/* str.isnumeric adds fractions, Roman and other numerals, CJK number ideographs ... */
static const cp_range NUMERIC_MORE[] = {
    {0xBC, 0xBE},       {0x9F4, 0x9F9},     {0xB72, 0xB77},     {0xBF0, 0xBF2},     {0xC78, 0xC7E},
    {0xD58, 0xD5E},     {0xD70, 0xD78},     {0xF2A, 0xF33},     {0x1372, 0x137C},   {0x16EE, 0x16F0},
    {0x17F0, 0x17F9},   {0x2150, 0x2182},   {0x2185, 0x2189},   {0x2469, 0x2473},   {0x247D, 0x2487},
    {0x2491, 0x249B},   {0x24EB, 0x24F4},   {0x24FE, 0x24FE},   {0x277F, 0x277F},   {0x2789, 0x2789},
    {0x2793, 0x2793},   {0x2CFD, 0x2CFD},   {0x3007, 0x3007},   {0x3021, 0x3029},   {0x3038, 0x303A},
    {0x3192, 0x3195},   {0x3220, 0x3229},   {0x3248, 0x324F},   {0x3251, 0x325F},   {0x3280, 0x3289},
    {0x32B1, 0x32BF},   {0x3405, 0x3405},   {0x3483, 0x3483},   {0x382A, 0x382A},   {0x3B4D, 0x3B4D},
    {0x4E00, 0x4E00},   {0x4E03, 0x4E03},   {0x4E07, 0x4E07},   {0x4E09, 0x4E09},   {0x4E5D, 0x4E5D},
    {0x4E8C, 0x4E8C},   {0x4E94, 0x4E94},   {0x4E96, 0x4E96},   {0x4EBF, 0x4EC0},   {0x4EDF, 0x4EDF},
    {0x4EE8, 0x4EE8},   {0x4F0D, 0x4F0D},   {0x4F70, 0x4F70},   {0x5104, 0x5104},   {0x5146, 0x5146},
    {0x5169, 0x5169},   {0x516B, 0x516B},   {0x516D, 0x516D},   {0x5341, 0x5341},   {0x5343, 0x5345},
    {0x534C, 0x534C},   {0x53C1, 0x53C4},   {0x56DB, 0x56DB},   {0x58F1, 0x58F1},   {0x58F9, 0x58F9},
    {0x5E7A, 0x5E7A},   {0x5EFE, 0x5EFF},   {0x5F0C, 0x5F0E},   {0x5F10, 0x5F10},   {0x62FE, 0x62FE},
    {0x634C, 0x634C},   {0x67D2, 0x67D2},   {0x6F06, 0x6F06},   {0x7396, 0x7396},   {0x767E, 0x767E},
    {0x8086, 0x8086},   {0x842C, 0x842C},   {0x8CAE, 0x8CAE},   {0x8CB3, 0x8CB3},   {0x8D30, 0x8D30},
    {0x9621, 0x9621},   {0x9646, 0x9646},   {0x964C, 0x964C},   {0x9678, 0x9678},   {0x96F6, 0x96F6},
    {0xA6E6, 0xA6EF},   {0xA830, 0xA835},   {0xF96B, 0xF96B},   {0xF973, 0xF973},   {0xF978, 0xF978},
    {0xF9B2, 0xF9B2},   {0xF9D1, 0xF9D1},   {0xF9D3, 0xF9D3},   {0xF9FD, 0xF9FD},   {0x10107, 0x10133},
    {0x10140, 0x10178}, {0x1018A, 0x1018B}, {0x102E1, 0x102FB}, {0x10320, 0x10323}, {0x10341, 0x10341},
    {0x1034A, 0x1034A}, {0x103D1, 0x103D5}, {0x10858, 0x1085F}, {0x10879, 0x1087F}, {0x108A7, 0x108AF},
    {0x108FB, 0x108FF}, {0x10916, 0x1091B}, {0x109BC, 0x109BD}, {0x109C0, 0x109CF}, {0x109D2, 0x109FF},
    {0x10A44, 0x10A48}, {0x10A7D, 0x10A7E}, {0x10A9D, 0x10A9F}, {0x10AEB, 0x10AEF}, {0x10B58, 0x10B5F},
    {0x10B78, 0x10B7F}, {0x10BA9, 0x10BAF}, {0x10CFA, 0x10CFF}, {0x10E69, 0x10E7E}, {0x10F1D, 0x10F26},
    {0x10F51, 0x10F54}, {0x10FC5, 0x10FCB}, {0x1105B, 0x11065}, {0x111E1, 0x111F4}, {0x1173A, 0x1173B},
    {0x118EA, 0x118F2}, {0x11C5A, 0x11C6C}, {0x11FC0, 0x11FD4}, {0x12400, 0x1246E}, {0x16B5B, 0x16B61},
    {0x16E80, 0x16E96}, {0x1D2E0, 0x1D2F3}, {0x1D360, 0x1D378}, {0x1E8C7, 0x1E8CF}, {0x1EC71, 0x1ECAB},
    {0x1ECAD, 0x1ECAF}, {0x1ECB1, 0x1ECB4}, {0x1ED01, 0x1ED2D}, {0x1ED2F, 0x1ED3D}, {0x1F10B, 0x1F10C},
    {0x20001, 0x20001}, {0x20064, 0x20064}, {0x200E2, 0x200E2}, {0x20121, 0x20121}, {0x2092A, 0x2092A},
    {0x20983, 0x20983}, {0x2098C, 0x2098C}, {0x2099C, 0x2099C}, {0x20AEA, 0x20AEA}, {0x20AFD, 0x20AFD},
    {0x20B19, 0x20B19}, {0x22390, 0x22390}, {0x22998, 0x22998}, {0x23B1B, 0x23B1B}, {0x2626D, 0x2626D},
    {0x2F890, 0x2F890}};

/* Format characters (Cf) that glibc counts as printable and Python does not. */
static const cp_range FORMAT_CHARS[] = {{0x600, 0x605},     {0x61C, 0x61C},     {0x6DD, 0x6DD},     {0x70F, 0x70F},
                                        {0x890, 0x891},     {0x8E2, 0x8E2},     {0x180E, 0x180E},   {0x200B, 0x200F},
                                        {0x202A, 0x202E},   {0x2060, 0x2064},   {0x2066, 0x206F},   {0xFEFF, 0xFEFF},
                                        {0xFFF9, 0xFFFB},   {0x110BD, 0x110BD}, {0x110CD, 0x110CD}, {0x13430, 0x1343F},
                                        {0x1BCA0, 0x1BCA3}, {0x1D173, 0x1D17A}, {0xE0001, 0xE0001}, {0xE0020, 0xE007F}};

/* str.isspace */
bool tmpl__cp_space(uint32_t cp) {
    if (cp < 0x80) return cp == ' ' || (cp >= '\t' && cp <= '\r') || (cp >= 0x1c && cp <= 0x1f);
    return cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
           cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

bool tmpl__py_space(unsigned char c) {
    return c < 0x80 && tmpl__cp_space(c);
}

size_t tmpl__py_space_len(const char *s, size_t n) {
    if (n == 0) return 0;
    uint32_t cp;
    size_t len = tmpl__u8_decode(s, n, &cp);
    return tmpl__cp_space(cp) ? len : 0;
}

/* Titlecase letters (category Lt): ǅ ǈ ǋ ǲ and Greek with prosgegrammeni. */
bool tmpl__cp_title_letter(uint32_t cp) {
    return cp == 0x1C5 || cp == 0x1C8 || cp == 0x1CB || cp == 0x1F2 || (cp >= 0x1F88 && cp <= 0x1F8F) ||
           (cp >= 0x1F98 && cp <= 0x1F9F) || (cp >= 0x1FA8 && cp <= 0x1FAF) || cp == 0x1FBC || cp == 0x1FCC ||
           cp == 0x1FFC;
}

bool tmpl__cp_decimal(uint32_t cp) {
    return cp < 0x80 ? cp >= '0' && cp <= '9' : IN(DECIMAL, cp);
}
bool tmpl__cp_digit(uint32_t cp) {
    return tmpl__cp_decimal(cp) || (cp >= 0x80 && IN(DIGIT_MORE, cp));
}
bool tmpl__cp_numeric(uint32_t cp) {
    return tmpl__cp_digit(cp) || (cp >= 0x80 && IN(NUMERIC_MORE, cp));
}

/* str.isalpha. glibc also counts digits and numerals (but for CJK number ideographs, which
 * are letters), some marks and the circled and squared letters (Ⓐ 🄰) as letters. */
bool tmpl__cp_alpha(uint32_t cp) {
    if (cp < 0x80) return (cp | 0x20) >= 'a' && (cp | 0x20) <= 'z';
    if ((cp >= 0x24B6 && cp <= 0x24E9) || (cp >= 0x1F130 && cp <= 0x1F189)) return false;
    locale_t l = uloc();
    bool cjk = (cp >= 0x3400 && cp <= 0x9FFF) || (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0x20000 && cp <= 0x3134F);
    return cp < CP_INVALID && l && iswalpha_l((wint_t)cp, l) && (cjk || !tmpl__cp_numeric(cp)) &&
           !(utf8_combining && iswctype_l((wint_t)cp, utf8_combining, l));
}
bool tmpl__cp_alnum(uint32_t cp) {
    return tmpl__cp_alpha(cp) || tmpl__cp_numeric(cp);
}

/* The Uppercase / Lowercase properties (glibc counts titlecase letters as upper). */
bool tmpl__cp_upper(uint32_t cp) {
    if (cp < 0x80) return cp >= 'A' && cp <= 'Z';
    locale_t l = uloc();
    return cp < CP_INVALID && l && iswupper_l((wint_t)cp, l) && !tmpl__cp_title_letter(cp);
}
bool tmpl__cp_lower(uint32_t cp) {
    if (cp < 0x80) return cp >= 'a' && cp <= 'z';
    locale_t l = uloc();
    return cp < CP_INVALID && l && iswlower_l((wint_t)cp, l) && !tmpl__cp_title_letter(cp);
}
static bool cp_cased(uint32_t cp) {
    return tmpl__cp_upper(cp) || tmpl__cp_lower(cp) || tmpl__cp_title_letter(cp);
}

/* Case_Ignorable, roughly: the apostrophes, dots and modifiers that sit inside words. */
static bool cp_case_ignorable(uint32_t cp) {
    return cp == '\'' || cp == '.' || cp == ':' || cp == '^' || cp == '`' || cp == 0xA8 || cp == 0xAD || cp == 0xAF ||
           cp == 0xB4 || cp == 0xB7 || cp == 0xB8 || (cp >= 0x2B0 && cp <= 0x36F) || cp == 0x2018 || cp == 0x2019 ||
           cp == 0x2024 || cp == 0x2027;
}

/* str.isprintable: not Cc, Cf, Cs, Co, Cn, Zl, Zp, nor Zs other than ' '. */
bool tmpl__cp_printable(uint32_t cp) {
    if (cp < 0x7F) return cp >= 0x20;
    if (cp <= 0xA0 || cp == 0xAD || cp >= CP_INVALID || tmpl__cp_space(cp)) return false;
    if ((cp >= 0xD800 && cp <= 0xF8FF) || cp >= 0xF0000) return false;           /* surrogates, private use */
    if ((cp >= 0xFDD0 && cp <= 0xFDEF) || (cp & 0xFFFE) == 0xFFFE) return false; /* noncharacters */
    if (IN(FORMAT_CHARS, cp)) return false;
    locale_t l = uloc();
    return !l || iswprint_l((wint_t)cp, l);
}

/* re's \w on str: letters, digits, numerals and '_'. */
static bool cp_word(uint32_t cp) {
    if (cp < 0x80) return cp == '_' || tmpl__cp_alnum(cp);
    if (cp >= CP_INVALID) return false;
    return uloc() ? tmpl__cp_alnum(cp) : true;
}

size_t tmpl__str_count_words(tv s) {
    size_t words = 0;
    bool in_word = false;
    uint32_t cp;
    for (size_t i = 0; i < s.len;) {
        i += tmpl__u8_decode(s.s + i, s.len - i, &cp);
        bool w = cp_word(cp);
        words += w && !in_word;
        in_word = w;
    }
    return words;
}

/* ---- case mapping --------------------------------------------------------------- */

/* Each writes Python's full mapping of cp (at most 3 code points) to m and returns the
 * count. */
static int map_upper(uint32_t cp, uint32_t m[3]) {
    locale_t l;
    if (cp < 0x80) {
        m[0] = cp >= 'a' && cp <= 'z' ? cp - 32 : cp;
    } else if (cp == 0xDF) { /* ß */
        m[0] = m[1] = 'S';
        return 2;
    } else {
        m[0] = cp < CP_INVALID && (l = uloc()) ? (uint32_t)towupper_l((wint_t)cp, l) : cp;
    }
    return 1;
}

static int map_lower(uint32_t cp, uint32_t m[3]) {
    locale_t l;
    if (cp < 0x80) {
        m[0] = cp >= 'A' && cp <= 'Z' ? cp + 32 : cp;
    } else if (cp == 0x130) { /* İ -> i + combining dot above */
        m[0] = 'i';
        m[1] = 0x307;
        return 2;
    } else {
        m[0] = cp < CP_INVALID && (l = uloc()) ? (uint32_t)towlower_l((wint_t)cp, l) : cp;
    }
    return 1;
}

static int map_title(uint32_t cp, uint32_t m[3]) {
    if (cp == 0xDF) {
        m[0] = 'S';
        m[1] = 's';
        return 2;
    }
    if (cp >= 0x1C4 && cp <= 0x1CC) { /* Ǆ ǅ ǆ -> ǅ, and the same for Ǉ and Ǌ */
        m[0] = 0x1C4 + (cp - 0x1C4) / 3 * 3 + 1;
        return 1;
    }
    if (cp >= 0x1F1 && cp <= 0x1F3) {
        m[0] = 0x1F2;
        return 1;
    }
    if ((cp >= 0x10D0 && cp <= 0x10FA) || (cp >= 0x10FD && cp <= 0x10FF)) { /* Georgian: its own titlecase */
        m[0] = cp;
        return 1;
    }
    return map_upper(cp, m);
}

/* casefold: the lowercase of the uppercase (µ -> μ, ſ -> s, ς -> σ), but Cherokee folds
 * to its capitals and dotless ı stays. */
static int map_fold(uint32_t cp, uint32_t m[3]) {
    if (cp == 0xDF || cp == 0x1E9E) { /* ß ẞ */
        m[0] = m[1] = 's';
        return 2;
    }
    if (cp < 0x80 || cp == 0x130) return map_lower(cp, m);
    if (cp == 0x131 || (cp >= 0x13A0 && cp <= 0x13F5)) {
        m[0] = cp;
        return 1;
    }
    if ((cp >= 0x13F8 && cp <= 0x13FD) || (cp >= 0xAB70 && cp <= 0xABBF)) return map_upper(cp, m);
    map_upper(cp, m);
    return map_lower(m[0], m);
}

/* Lowercase of the code point at s[i] (len bytes) within s[0, n): a capital sigma is
 * final ('ς') after a cased letter and not before one, ignoring case-ignorables. */
static int map_lower_at(const char *s, size_t n, size_t i, size_t len, uint32_t cp, uint32_t m[3]) {
    if (cp != 0x3A3) return map_lower(cp, m);
    uint32_t c = 0;
    size_t j = i, k;
    bool final = false;
    while (j > 0) {
        c = u8_before(s, j, &k);
        j -= k;
        if (!cp_case_ignorable(c)) {
            final = cp_cased(c);
            break;
        }
    }
    for (j = i + len; final && j < n;) {
        j += tmpl__u8_decode(s + j, n - j, &c);
        if (!cp_case_ignorable(c)) {
            final = !cp_cased(c);
            break;
        }
    }
    m[0] = final ? 0x3C2 : 0x3C3;
    return 1;
}

/* Appends s[0, n) case-mapped as Python's str method of the mode. */
static void case_map(tmpl_buf *b, const char *s, size_t n, tmpl_case mode) {
    bool prev_cased = false; /* TMPL_CASE_TITLE */
    for (size_t i = 0; i < n;) {
        uint32_t cp, m[3];
        size_t len = tmpl__u8_decode(s + i, n - i, &cp);
        int k;
        switch (mode) {
        case TMPL_CASE_UPPER: k = map_upper(cp, m); break;
        case TMPL_CASE_LOWER: k = map_lower_at(s, n, i, len, cp, m); break;
        case TMPL_CASE_FOLD: k = map_fold(cp, m); break;
        case TMPL_CASE_SWAP:
            if (tmpl__cp_upper(cp)) {
                k = map_lower_at(s, n, i, len, cp, m);
            } else if (tmpl__cp_lower(cp)) {
                k = map_upper(cp, m);
            } else {
                m[0] = cp;
                k = 1;
            }
            break;
        case TMPL_CASE_TITLE:
            k = prev_cased ? map_lower_at(s, n, i, len, cp, m) : map_title(cp, m);
            prev_cased = cp_cased(cp);
            break;
        case TMPL_CASE_CAPITALIZE: k = i == 0 ? map_title(cp, m) : map_lower_at(s, n, i, len, cp, m); break;
        default: k = 0;
        }
        for (int j = 0; j < k; j++) u8_put(b, m[j]);
        i += len;
    }
}

tv tmpl__str_case(tmpl_render_state *r, tv s, tmpl_case mode) {
    tmpl_buf b;
    tmpl__buf_init(&b, &r->arena, s.len + 8);
    case_map(&b, s.s, s.len, mode);
    return tmpl__buf_value(&b);
}

tv tmpl__str_map_case(tmpl_render_state *r, tv s, int (*f)(int)) {
    if (f == toupper) return tmpl__str_case(r, s, TMPL_CASE_UPPER);
    if (f == tolower) return tmpl__str_case(r, s, TMPL_CASE_LOWER);
    char *out = tmpl__alloc(&r->arena, s.len + 1);
    for (size_t i = 0; i < s.len; i++) {
        unsigned char c = (unsigned char)s.s[i];
        out[i] = c < 0x80 ? (char)f(c) : (char)c;
    }
    return tmpl__str(out, s.len);
}

tv tmpl__str_capitalize(tmpl_render_state *r, tv s) {
    return tmpl__str_case(r, s, TMPL_CASE_CAPITALIZE);
}

/* Separators of jinja2's title filter: re [-\s({\[<] */
static size_t title_sep_len(const char *s, size_t n) {
    char c = s[0];
    if (c == '-' || c == '(' || c == '{' || c == '[' || c == '<') return 1;
    return tmpl__py_space_len(s, n);
}

tv tmpl__str_title(tmpl_render_state *r, tv s, bool jinja_filter) {
    if (!jinja_filter) return tmpl__str_case(r, s, TMPL_CASE_TITLE);
    /* jinja2: "".join(w[0].upper() + w[1:].lower() for w in re.split(r"([-\s({\[<]+)", s) if w) */
    tmpl_buf b;
    tmpl__buf_init(&b, &r->arena, s.len + 8);
    for (size_t i = 0; i < s.len;) {
        size_t start = i, len;
        while (i < s.len && (len = title_sep_len(s.s + i, s.len - i)) > 0) i += len;
        tmpl__buf_put(&b, s.s + start, i - start);
        if (i == s.len) break;
        start = i;
        uint32_t cp, m[3];
        while (i < s.len && title_sep_len(s.s + i, s.len - i) == 0) i += tmpl__u8_decode(s.s + i, s.len - i, &cp);
        len = tmpl__u8_decode(s.s + start, i - start, &cp);
        int k = map_upper(cp, m);
        for (int j = 0; j < k; j++) u8_put(&b, m[j]);
        case_map(&b, s.s + start + len, i - start - len, TMPL_CASE_LOWER);
    }
    return tmpl__buf_value(&b);
}

/* ---- searching, splitting, stripping ------------------------------------------ */

/* The last occurrence of needle in hay, or NULL; an empty needle is found at the end. */
const char *tmpl__mem_last(const char *hay, size_t hn, const char *needle, size_t nn) {
    if (nn > hn) return NULL;
    if (nn == 0) return hay + hn;
    for (size_t i = hn - nn + 1; i-- > 0;)
        if (hay[i] == needle[0] && memcmp(hay + i, needle, nn) == 0) return hay + i;
    return NULL;
}

static bool cp_in(tv chars, uint32_t cp) {
    uint32_t c;
    for (size_t i = 0; i < chars.len;) {
        i += tmpl__u8_decode(chars.s + i, chars.len - i, &c);
        if (c == cp) return true;
    }
    return false;
}

/* str.strip/lstrip/rstrip: whitespace, or any of the characters in chars. */
tv tmpl__str_strip(tv s, tv chars, bool left, bool right) {
    size_t lo = 0, hi = s.len, len;
    bool ws = chars.kind != TV_STR;
    uint32_t cp;
    if (left)
        for (; lo < hi; lo += len) {
            len = tmpl__u8_decode(s.s + lo, hi - lo, &cp);
            if (ws ? !tmpl__cp_space(cp) : !cp_in(chars, cp)) break;
        }
    if (right)
        for (; hi > lo; hi -= len) {
            cp = u8_before(s.s + lo, hi - lo, &len);
            if (ws ? !tmpl__cp_space(cp) : !cp_in(chars, cp)) break;
        }
    return tmpl__str(s.s + lo, hi - lo);
}

tv tmpl__str_replace(tmpl_render_state *r, tv s, tv old, tv new_, int64_t count) {
    tmpl_buf b;
    tmpl__buf_init(&b, &r->arena, s.len + 16);
    size_t i = 0;
    int64_t done = 0;
    if (old.len == 0) { /* Python inserts new before every character and at the end */
        uint32_t cp;
        for (; count < 0 || done < count; done++) {
            tmpl__buf_put(&b, new_.s, new_.len);
            if (i == s.len) return tmpl__buf_value(&b);
            size_t len = tmpl__u8_decode(s.s + i, s.len - i, &cp);
            tmpl__buf_put(&b, s.s + i, len);
            i += len;
        }
        tmpl__buf_put(&b, s.s + i, s.len - i);
        return tmpl__buf_value(&b);
    }
    while (i < s.len && (count < 0 || done < count)) {
        const char *hit = memmem(s.s + i, s.len - i, old.s, old.len);
        if (!hit) break;
        size_t at = (size_t)(hit - s.s);
        tmpl__buf_put(&b, s.s + i, at - i);
        tmpl__buf_put(&b, new_.s, new_.len);
        i = at + old.len;
        done++;
    }
    tmpl__buf_put(&b, s.s + i, s.len - i);
    return tmpl__buf_value(&b);
}

static void check_sep(tmpl_render_state *r, const char *what, tv sep) {
    if (sep.kind != TV_STR && sep.kind != TV_NONE)
        tmpl__fail(r, SP_ERR_FORMAT, "%s: must be str or None, not %s", what, tmpl__type_name(sep));
    if (sep.kind == TV_STR && sep.len == 0) tmpl__fail(r, SP_ERR_FORMAT, "%s: empty separator", what);
}

/* str.split(sep=None, maxsplit=-1) */
tv tmpl__str_split(tmpl_render_state *r, tv s, tv sep, int64_t maxsplit) {
    check_sep(r, "split", sep);
    tv out = tmpl__list_new(&r->arena, 4);
    size_t i = 0, len;
    int64_t done = 0;
    if (sep.kind != TV_STR) {
        while (i < s.len) {
            while (i < s.len && (len = tmpl__py_space_len(s.s + i, s.len - i)) > 0) i += len;
            if (i == s.len) break;
            if (maxsplit >= 0 && done == maxsplit) { /* the rest, trailing whitespace and all */
                tmpl__list_push(&r->arena, out.list, tmpl__str(s.s + i, s.len - i));
                break;
            }
            size_t start = i;
            uint32_t cp;
            while (i < s.len && tmpl__py_space_len(s.s + i, s.len - i) == 0)
                i += tmpl__u8_decode(s.s + i, s.len - i, &cp);
            tmpl__list_push(&r->arena, out.list, tmpl__str(s.s + start, i - start));
            done++;
        }
        return out;
    }
    for (;;) {
        const char *hit = maxsplit >= 0 && done == maxsplit ? NULL : memmem(s.s + i, s.len - i, sep.s, sep.len);
        if (!hit) {
            tmpl__list_push(&r->arena, out.list, tmpl__str(s.s + i, s.len - i));
            return out;
        }
        size_t at = (size_t)(hit - s.s);
        tmpl__list_push(&r->arena, out.list, tmpl__str(s.s + i, at - i));
        i = at + sep.len;
        done++;
    }
}

static void list_reverse(tlist *l) {
    for (size_t i = 0, j = l->n; i + 1 < j; i++, j--) {
        tv t = l->items[i];
        l->items[i] = l->items[j - 1];
        l->items[j - 1] = t;
    }
}

/* str.rsplit(sep=None, maxsplit=-1): split from the right */
tv tmpl__str_rsplit(tmpl_render_state *r, tv s, tv sep, int64_t maxsplit) {
    check_sep(r, "rsplit", sep);
    tv out = tmpl__list_new(&r->arena, 4);
    size_t j = s.len, len;
    int64_t done = 0;
    if (sep.kind != TV_STR) {
        while (j > 0) {
            while (j > 0 && tmpl__cp_space(u8_before(s.s, j, &len))) j -= len;
            if (j == 0) break;
            if (maxsplit >= 0 && done == maxsplit) {
                tmpl__list_push(&r->arena, out.list, tmpl__str(s.s, j));
                break;
            }
            size_t end = j;
            while (j > 0 && !tmpl__cp_space(u8_before(s.s, j, &len))) j -= len;
            tmpl__list_push(&r->arena, out.list, tmpl__str(s.s + j, end - j));
            done++;
        }
    } else {
        for (;;) {
            const char *hit = maxsplit >= 0 && done == maxsplit ? NULL : tmpl__mem_last(s.s, j, sep.s, sep.len);
            if (!hit) {
                tmpl__list_push(&r->arena, out.list, tmpl__str(s.s, j));
                break;
            }
            size_t at = (size_t)(hit - s.s);
            tmpl__list_push(&r->arena, out.list, tmpl__str(s.s + at + sep.len, j - at - sep.len));
            j = at;
            done++;
        }
    }
    list_reverse(out.list);
    return out;
}

static bool line_break(uint32_t cp) {
    return cp == '\n' || cp == '\r' || cp == '\v' || cp == '\f' || (cp >= 0x1c && cp <= 0x1e) || cp == 0x85 ||
           cp == 0x2028 || cp == 0x2029;
}

/* str.splitlines(keepends): lines end at \n, \r\n, \r, \v, \f, \x1c-\x1e, \x85, U+2028/9 */
tv tmpl__str_splitlines_keep(tmpl_render_state *r, tv s, bool keepends) {
    tv out = tmpl__list_new(&r->arena, 8);
    size_t start = 0;
    uint32_t cp;
    for (size_t i = 0; i < s.len;) {
        size_t len = tmpl__u8_decode(s.s + i, s.len - i, &cp);
        if (!line_break(cp)) {
            i += len;
            continue;
        }
        size_t next = i + len;
        if (cp == '\r' && next < s.len && s.s[next] == '\n') next++;
        tmpl__list_push(&r->arena, out.list, tmpl__str(s.s + start, (keepends ? next : i) - start));
        start = i = next;
    }
    if (start < s.len) tmpl__list_push(&r->arena, out.list, tmpl__str(s.s + start, s.len - start));
    return out;
}

tv tmpl__str_splitlines(tmpl_render_state *r, tv s) {
    return tmpl__str_splitlines_keep(r, s, false);
}

/* ---- repr ----------------------------------------------------------------------- */

/* Python's repr(str): quoted with ' unless the text has ' and no "; backslash, the
 * quote, \n \r \t and other unprintable characters escaped (\xNN, \uNNNN, \UNNNNNNNN).
 * A byte that starts no UTF-8 sequence shows as \xNN. */
void tmpl__append_str_repr(tmpl_buf *b, const char *s, size_t n) {
    bool has_single = memchr(s, '\'', n) != NULL, has_double = memchr(s, '"', n) != NULL;
    char quote = has_single && !has_double ? '"' : '\'';
    tmpl__buf_putc(b, quote);
    size_t run = 0; /* start of the bytes that go out as they are */
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c < 0x7F && c != (unsigned char)quote && c != '\\') {
            i++;
            continue;
        }
        uint32_t cp;
        size_t len = tmpl__u8_decode(s + i, n - i, &cp);
        if (cp >= 0x80 && tmpl__cp_printable(cp)) {
            i += len;
            continue;
        }
        tmpl__buf_put(b, s + run, i - run);
        if (cp == (uint32_t)quote || cp == '\\') {
            tmpl__buf_putc(b, '\\');
            tmpl__buf_putc(b, (char)cp);
        } else if (cp == '\n') {
            tmpl__buf_put(b, "\\n", 2);
        } else if (cp == '\r') {
            tmpl__buf_put(b, "\\r", 2);
        } else if (cp == '\t') {
            tmpl__buf_put(b, "\\t", 2);
        } else if (cp >= CP_INVALID) {
            tmpl__buf_printf(b, "\\x%02x", (unsigned)(cp - CP_INVALID));
        } else if (cp < 0x100) {
            tmpl__buf_printf(b, "\\x%02x", (unsigned)cp);
        } else if (cp < 0x10000) {
            tmpl__buf_printf(b, "\\u%04x", (unsigned)cp);
        } else {
            tmpl__buf_printf(b, "\\U%08x", (unsigned)cp);
        }
        i += len;
        run = i;
    }
    tmpl__buf_put(b, s + run, n - run);
    tmpl__buf_putc(b, quote);
}
