/* test_ui.c: the chat page's Content-Security-Policy: SHA-256 against FIPS 180-4's
 * examples and lengths around the padding's block boundaries, and the policy naming the
 * page's own style and script hashes. The page's served bytes and headers, and a browser
 * running it under the policy, are tests/integration/test_chat_page.py. */
#include <criterion/criterion.h>

#include "server/ui.c"

static void expect_sha256(const char *data, size_t len, const char *hex) {
    unsigned char digest[32];
    sha256(data, len, digest);
    char got[65];
    for (int i = 0; i < 32; i++) snprintf(got + 2 * i, 3, "%02x", digest[i]);
    cr_expect_str_eq(got, hex, "sha256 of %zu bytes", len);
}

Test(ui_sha256, matches_the_standard_examples) {
    expect_sha256("", 0, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    expect_sha256("abc", 3, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    const char *two_blocks = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"; /* 56 bytes */
    expect_sha256(two_blocks, strlen(two_blocks), "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

/* 55 bytes is the longest tail whose marker and length fit one block; 56 to 63 need two. */
Test(ui_sha256, pads_at_every_block_boundary) {
    static const struct {
        size_t len;
        const char *hex;
    } cases[] = {
        {55, "9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e910f734318"},
        {56, "b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef7970686ec6738a"},
        {63, "7d3e74a05d7db15bce4ad9ec0658ea98e3f06eeecf16b4c6fff2da457ddc2f34"},
        {64, "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb"},
        {65, "635361c48bb9eab14198e76ea8ab7f1a41685d6ad62aa9146d301d4f17eb0ae0"},
        {119, "31eba51c313a5c08226adf18d4a359cfdfd8d2e816b13f4af952f7ea6584dcfb"},
        {120, "2f3d335432c70b580af0e8e1b3674a7c020d683aa5f73aaaedfdc55af904c21c"},
        {128, "6836cf13bac400e9105071cd6af47084dfacad4e5e302c94bfed24e013afb73e"},
    };
    char a[128];
    memset(a, 'a', sizeof a);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) expect_sha256(a, cases[i].len, cases[i].hex);
}

Test(ui_csp, names_the_pages_own_style_and_script_and_nothing_else) {
    pthread_once(&ui_csp_once, ui_csp_init);
    cr_expect(strncmp(ui_csp, "default-src 'none'; style-src 'sha256-", 38) == 0, "%s", ui_csp);
    cr_expect(strstr(ui_csp, "; script-src 'sha256-") != NULL, "%s", ui_csp);
    cr_expect(strstr(ui_csp, "; connect-src 'self';") != NULL, "%s", ui_csp);
    cr_expect(strstr(ui_csp, "unsafe") == NULL, "%s", ui_csp);
    /* a hash source is 'sha256-' and 44 base64 characters, the last one '=' */
    const char *script = strstr(ui_csp, "script-src 'sha256-") + strlen("script-src 'sha256-");
    cr_expect(script[43] == '=' && script[44] == '\'', "%s", ui_csp);
    /* the embedded page ends where the file does, then its NUL */
    size_t len = (size_t)(srv_ui_page_end - srv_ui_page);
    cr_expect(len > 1000 && strlen(srv_ui_page) == len, "%zu bytes embedded", len);
}
