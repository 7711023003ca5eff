/* test_ui.c: the chat page's Content-Security-Policy names the page's own style and
 * script hashes and nothing else. That the hashes are the elements' SHA-256 (computed
 * again with Python's hashlib), the page's served bytes and headers, and a browser
 * running it under the policy, are tests/integration/test_chat_page.py. */
#include <criterion/criterion.h>

#include "server/http/ui.c"

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
