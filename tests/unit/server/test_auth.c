/* test_auth.c: the API key set (server/http/auth.c): the constant-time comparison, the
 * Authorization header, the key file's format and errors, and SIGHUP reloads that
 * swap the whole set or keep the old one.
 *
 * auth.c is included so its static comparison can be tested directly.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "server/http/auth.c"

/* ---- helpers ---- */

static char key_path[64];

static void write_keys(const char *text) {
    if (!key_path[0]) {
        snprintf(key_path, sizeof key_path, "/tmp/spindle-test-auth-XXXXXX");
        int fd = mkstemp(key_path);
        cr_assert_geq(fd, 0);
        close(fd);
    }
    FILE *f = fopen(key_path, "w");
    cr_assert_not_null(f);
    fputs(text, f);
    fclose(f);
}

static void remove_keys(void) {
    if (key_path[0]) unlink(key_path);
    key_path[0] = '\0';
}

static srv_http_config config_with(const char *const *keys, int n, const char *file) {
    return (srv_http_config){.api_keys = keys, .n_api_keys = n, .api_key_file = file};
}

static srv_auth *create_ok(const srv_http_config *cfg) {
    srv_auth *a = NULL;
    sp_status st = srv_auth_create(cfg, &a);
    cr_assert_eq(st, SP_OK, "%s", sp_last_error());
    return a;
}

static bool check(srv_auth *a, const char *header) {
    srv_error err;
    return srv_auth_check(a, header, &err);
}

static bool matches(const auth_keys *set, const char *key) {
    return auth_keys_match(set, key, strlen(key));
}

/* ---- the comparison ---- */

Test(srv_auth_match, equal_keys_only) {
    auth_keys set = {0};
    cr_assert_eq(auth_keys_add(&set, "sk-alpha", 8, "t"), SP_OK);
    cr_assert_eq(auth_keys_add(&set, "sk-b", 4, "t"), SP_OK);
    cr_expect(matches(&set, "sk-alpha"));
    cr_expect(matches(&set, "sk-b"));
    cr_expect_not(matches(&set, "sk-alph"), "a prefix is not the key");
    cr_expect_not(matches(&set, "sk-alphaa"), "a longer key is not the key");
    cr_expect_not(matches(&set, "sk-alphb"), "the last byte differs");
    cr_expect_not(matches(&set, "Sk-alpha"), "the first byte differs");
    cr_expect_not(matches(&set, "sk-"), "a common prefix of both");
    cr_expect_not(matches(&set, ""));
    /* bytes past the length are zero in the slot: a key with trailing NULs differs */
    cr_expect_not(auth_keys_match(&set, "sk-b\0\0", 6));
    free(set.keys);
}

Test(srv_auth_match, longest_key_and_beyond) {
    char key[SRV_AUTH_KEY_MAX + 2];
    memset(key, 'k', sizeof key);
    auth_keys set = {0};
    cr_assert_eq(auth_keys_add(&set, key, SRV_AUTH_KEY_MAX, "t"), SP_OK);
    cr_expect(auth_keys_match(&set, key, SRV_AUTH_KEY_MAX));
    cr_expect_not(auth_keys_match(&set, key, SRV_AUTH_KEY_MAX + 1), "same first 256 bytes, longer");
    cr_expect_not(auth_keys_match(&set, key, SRV_AUTH_KEY_MAX - 1));
    cr_expect_neq(auth_keys_add(&set, key, SRV_AUTH_KEY_MAX + 1, "t"), SP_OK, "too long to store");
    free(set.keys);
}

Test(srv_auth_match, empty_set_matches_nothing) {
    auth_keys set = {0};
    cr_expect_not(matches(&set, "anything"));
    cr_expect_not(matches(&set, ""));
}

/* ---- the Authorization header ---- */

Test(srv_auth_check, bearer_header_forms) {
    static const char *const keys[] = {"sk-test"};
    srv_http_config cfg = config_with(keys, 1, NULL);
    srv_auth *a = create_ok(&cfg);
    cr_expect(check(a, "Bearer sk-test"));
    cr_expect(check(a, "bearer sk-test"), "the scheme is case-insensitive");
    cr_expect(check(a, "BEARER \t sk-test  "), "whitespace around the token");
    cr_expect_not(check(a, "Bearersk-test"));
    cr_expect_not(check(a, "Basic sk-test"));
    cr_expect_not(check(a, "sk-test"));
    cr_expect_not(check(a, "Bearer sk-test2"));
    cr_expect_not(check(a, "Bearer sk-tes"));
    cr_expect_not(check(a, "Bearer "));
    cr_expect_not(check(a, NULL));
    srv_auth_destroy(a);
}

Test(srv_auth_check, errors_are_openai_401s) {
    static const char *const keys[] = {"sk-test"};
    srv_http_config cfg = config_with(keys, 1, NULL);
    srv_auth *a = create_ok(&cfg);
    srv_error err;
    cr_assert_not(srv_auth_check(a, NULL, &err));
    cr_expect_eq(err.http_status, 401);
    cr_expect_str_eq(err.type, "invalid_request_error");
    cr_expect_str_eq(err.code, "invalid_api_key");
    cr_expect(strstr(err.message, "You didn't provide an API key") != NULL, "%s", err.message);
    cr_assert_not(srv_auth_check(a, "Bearer wrong", &err));
    cr_expect_eq(err.http_status, 401);
    cr_expect_str_eq(err.code, "invalid_api_key");
    cr_expect(strstr(err.message, "Incorrect API key provided") != NULL, "%s", err.message);
    cr_expect(strstr(err.message, "wrong") == NULL, "the key is not echoed: %s", err.message);
    srv_auth_destroy(a);
}

Test(srv_auth_check, no_keys_means_open) {
    srv_http_config cfg = config_with(NULL, 0, NULL);
    srv_auth *a = create_ok(&cfg);
    cr_expect_eq(srv_auth_key_count(a), 0);
    cr_expect(check(a, NULL));
    cr_expect(check(a, "Bearer whatever"));
    srv_auth_destroy(a);
}

/* ---- the key file ---- */

Test(srv_auth_file, comments_blanks_and_whitespace, .fini = remove_keys) {
    write_keys("# production keys\n"
               "\n"
               "   sk-one   \n"
               "\tsk-two\r\n"
               "   # indented comment\n"
               "sk-three"); /* no final newline */
    static const char *const flag_keys[] = {"sk-flag"};
    srv_http_config cfg = config_with(flag_keys, 1, key_path);
    srv_auth *a = create_ok(&cfg);
    cr_expect_eq(srv_auth_key_count(a), 4);
    cr_expect(check(a, "Bearer sk-one"));
    cr_expect(check(a, "Bearer sk-two"));
    cr_expect(check(a, "Bearer sk-three"));
    cr_expect(check(a, "Bearer sk-flag"));
    cr_expect_not(check(a, "Bearer #"));
    cr_expect_not(check(a, "Bearer # production keys"));
    srv_auth_destroy(a);
}

Test(srv_auth_file, missing_file_names_it) {
    srv_http_config cfg = config_with(NULL, 0, "/nonexistent/spindle-keys.txt");
    srv_auth *a = NULL;
    cr_assert_eq(srv_auth_create(&cfg, &a), SP_ERR_IO);
    cr_expect_null(a);
    cr_expect(strstr(sp_last_error(), "/nonexistent/spindle-keys.txt") != NULL, "%s", sp_last_error());
    cr_expect(strstr(sp_last_error(), "No such file") != NULL, "%s", sp_last_error());
}

Test(srv_auth_file, directory_is_unreadable) {
    srv_http_config cfg = config_with(NULL, 0, "/tmp");
    srv_auth *a = NULL;
    cr_assert_neq(srv_auth_create(&cfg, &a), SP_OK);
    cr_expect(strstr(sp_last_error(), "/tmp") != NULL, "%s", sp_last_error());
}

Test(srv_auth_file, file_without_keys_is_an_error, .fini = remove_keys) {
    write_keys("# nothing here\n\n   \n");
    srv_http_config cfg = config_with(NULL, 0, key_path);
    srv_auth *a = NULL;
    cr_assert_eq(srv_auth_create(&cfg, &a), SP_ERR_INVALID_ARG);
    cr_expect(strstr(sp_last_error(), key_path) != NULL, "%s", sp_last_error());
    cr_expect(strstr(sp_last_error(), "no keys") != NULL, "%s", sp_last_error());
}

Test(srv_auth_file, bad_lines_name_file_and_line, .fini = remove_keys) {
    srv_http_config cfg = config_with(NULL, 0, NULL);
    srv_auth *a = NULL;
    char want[128];

    write_keys("sk-ok\nsk with space\n");
    cfg.api_key_file = key_path;
    cr_assert_eq(srv_auth_create(&cfg, &a), SP_ERR_INVALID_ARG);
    snprintf(want, sizeof want, "%s:2:", key_path);
    cr_expect(strstr(sp_last_error(), want) != NULL, "%s", sp_last_error());

    char text[SRV_AUTH_KEY_MAX + 16];
    memset(text, 'x', sizeof text);
    memcpy(text, "# c\n", 4);
    text[sizeof text - 2] = '\n';
    text[sizeof text - 1] = '\0';
    write_keys(text);
    cr_assert_eq(srv_auth_create(&cfg, &a), SP_ERR_INVALID_ARG);
    snprintf(want, sizeof want, "%s:2:", key_path);
    cr_expect(strstr(sp_last_error(), want) != NULL, "%s", sp_last_error());
    cr_expect(strstr(sp_last_error(), "longer than") != NULL, "%s", sp_last_error());
}

Test(srv_auth_file, empty_flag_key_is_an_error) {
    static const char *const keys[] = {"sk-ok", ""};
    srv_http_config cfg = config_with(keys, 2, NULL);
    srv_auth *a = NULL;
    cr_assert_eq(srv_auth_create(&cfg, &a), SP_ERR_INVALID_ARG);
    cr_expect(strstr(sp_last_error(), "--api-key") != NULL, "%s", sp_last_error());
}

/* ---- reload ---- */

Test(srv_auth_reload, swaps_the_whole_set, .fini = remove_keys) {
    write_keys("sk-old-1\nsk-old-2\n");
    static const char *const flag_keys[] = {"sk-flag"};
    srv_http_config cfg = config_with(flag_keys, 1, key_path);
    srv_auth *a = create_ok(&cfg);
    write_keys("sk-new\n");
    cr_assert_eq(srv_auth_reload(a), SP_OK, "%s", sp_last_error());
    cr_expect_eq(srv_auth_key_count(a), 2);
    cr_expect(check(a, "Bearer sk-new"));
    cr_expect(check(a, "Bearer sk-flag"), "--api-key keys stay");
    cr_expect_not(check(a, "Bearer sk-old-1"));
    cr_expect_not(check(a, "Bearer sk-old-2"));
    srv_auth_destroy(a);
}

Test(srv_auth_reload, failure_keeps_the_old_keys, .fini = remove_keys) {
    write_keys("sk-old\n");
    srv_http_config cfg = config_with(NULL, 0, key_path);
    srv_auth *a = create_ok(&cfg);

    write_keys("sk-new\nbad key\n"); /* a bad line: nothing of the new file is taken */
    cr_expect_eq(srv_auth_reload(a), SP_ERR_INVALID_ARG);
    cr_expect(check(a, "Bearer sk-old"));
    cr_expect_not(check(a, "Bearer sk-new"));

    write_keys("# emptied by mistake\n"); /* would turn authentication off */
    cr_expect_eq(srv_auth_reload(a), SP_ERR_INVALID_ARG);
    cr_expect(check(a, "Bearer sk-old"));

    unlink(key_path); /* gone */
    cr_expect_eq(srv_auth_reload(a), SP_ERR_IO);
    cr_expect(strstr(sp_last_error(), key_path) != NULL, "%s", sp_last_error());
    cr_expect(check(a, "Bearer sk-old"));
    cr_expect_eq(srv_auth_key_count(a), 1);

    write_keys("sk-back\n"); /* fixed: the next reload works */
    cr_expect_eq(srv_auth_reload(a), SP_OK);
    cr_expect(check(a, "Bearer sk-back"));
    cr_expect_not(check(a, "Bearer sk-old"));
    srv_auth_destroy(a);
}

Test(srv_auth_reload, without_a_file_changes_nothing) {
    static const char *const keys[] = {"sk-flag"};
    srv_http_config cfg = config_with(keys, 1, NULL);
    srv_auth *a = create_ok(&cfg);
    cr_expect_eq(srv_auth_reload(a), SP_OK);
    cr_expect(check(a, "Bearer sk-flag"));
    srv_auth_destroy(a);
}

Test(srv_auth_reload, set_in_use_outlives_the_swap, .fini = remove_keys) {
    write_keys("sk-old\n");
    srv_http_config cfg = config_with(NULL, 0, key_path);
    srv_auth *a = create_ok(&cfg);
    auth_keys *in_flight = auth_acquire(a); /* a request between taking the set and comparing */
    write_keys("sk-new\n");
    cr_assert_eq(srv_auth_reload(a), SP_OK);
    cr_expect(matches(in_flight, "sk-old"), "the request finishes with the set it started with");
    cr_expect_not(matches(in_flight, "sk-new"));
    auth_keys_release(in_flight); /* the last reference: freed here */
    cr_expect(check(a, "Bearer sk-new"));
    srv_auth_destroy(a);
}

/* Checks on several threads while the main thread reloads: every check compares
 * with one whole set, never a half-built or freed one (run under `make debug` for
 * ASan and TSan-like failures to show). */
typedef struct checker {
    srv_auth *a;
    _Atomic bool *stop;
    long accepted, wrongly_accepted;
} checker;

static void *checker_run(void *arg) {
    checker *c = arg;
    while (!atomic_load(c->stop)) {
        /* exactly one of sk-a1 and sk-b1 is in whichever set is current */
        c->accepted += check(c->a, "Bearer sk-a1") + check(c->a, "Bearer sk-b1");
        c->wrongly_accepted += check(c->a, "Bearer sk-none");
    }
    return NULL;
}

Test(srv_auth_reload, concurrent_checks_and_reloads, .fini = remove_keys) {
    write_keys("sk-a1\nsk-a2\n");
    srv_http_config cfg = config_with(NULL, 0, key_path);
    srv_auth *a = create_ok(&cfg);
    sp_log_set_level(SP_LOG_ERROR); /* 200 reloads: no log lines */
    _Atomic bool stop = false;
    checker c[4];
    pthread_t t[4];
    for (int i = 0; i < 4; i++) {
        c[i] = (checker){.a = a, .stop = &stop};
        cr_assert_eq(pthread_create(&t[i], NULL, checker_run, &c[i]), 0);
    }
    for (int r = 0; r < 200; r++) {
        write_keys(r % 2 ? "sk-a1\nsk-a2\n" : "sk-b1\n");
        cr_assert_eq(srv_auth_reload(a), SP_OK);
    }
    atomic_store(&stop, true);
    for (int i = 0; i < 4; i++) {
        pthread_join(t[i], NULL);
        cr_expect_gt(c[i].accepted, 0);
        cr_expect_eq(c[i].wrongly_accepted, 0);
    }
    srv_auth_destroy(a);
}
