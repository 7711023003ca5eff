/* test_config.c: the settings of `spindle serve` (config/): the defaults, every key
 * read from YAML, the flags and their precedence over the file, each kind of error
 * with the file, line and key in its message, and --print-config's output read back
 * to the same settings. */
#include <math.h>
#include <criterion/criterion.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config/cfg_internal.h"
#include "grammar/grammar.h"
#include "scheduler/sched.h"

/* ---- helpers ---- */

static char yaml_path[64];

/* Writes text to a temporary file; returns its path (removed by remove_yaml). */
static const char *write_yaml(const char *text) {
    snprintf(yaml_path, sizeof yaml_path, "/tmp/spindle-test-cfg-XXXXXX");
    int fd = mkstemp(yaml_path);
    cr_assert_geq(fd, 0);
    cr_assert_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    return yaml_path;
}

static void remove_yaml(void) {
    if (yaml_path[0]) unlink(yaml_path);
    yaml_path[0] = '\0';
}

static sp_status load(cfg_settings *s, const char *text) {
    return cfg_load_yaml(s, "spindle.yaml", text, strlen(text));
}

/* Loading text fails with a message containing want. */
static void expect_error(const char *text, const char *want) {
    cfg_settings s;
    cfg_settings_init(&s);
    sp_status st = load(&s, text);
    cr_log_info("%s", sp_last_error());
    cr_expect_eq(st, SP_ERR_INVALID_ARG, "accepted:\n%s", text);
    cr_expect(strstr(sp_last_error(), want), "message '%s' lacks '%s'", sp_last_error(), want);
    cfg_settings_free(&s);
}

/* argv for cfg_parse_args from a NULL-terminated list (argv[0] is "serve"). */
static sp_status parse(cfg_settings *s, const char *default_path, cfg_action *action, ...) {
    char *argv[64] = {"serve"};
    int argc = 1;
    va_list ap;
    va_start(ap, action);
    for (char *a; (a = va_arg(ap, char *)) != NULL;) argv[argc++] = a;
    va_end(ap);
    return cfg_parse_args(s, argc, argv, default_path, action);
}

/* Whether a and b hold the same value for every key (api_keys: the same count when
 * redacted is set). */
static bool same_settings(const cfg_settings *a, const cfg_settings *b, bool redacted) {
    for (int i = 0; i < CFG_KEY_COUNT; i++) {
        const cfg_key *k = &cfg__keys[i];
        const void *fa = (const char *)a + k->offset, *fb = (const char *)b + k->offset;
        bool same = true;
        switch (k->type) {
        case CFG_T_STRING: {
            const char *x = *(char *const *)fa, *y = *(char *const *)fb;
            same = (!x && !y) || (x && y && strcmp(x, y) == 0);
            break;
        }
        case CFG_T_INT: same = *(const int64_t *)fa == *(const int64_t *)fb; break;
        case CFG_T_FLOAT: {
            double x = *(const double *)fa, y = *(const double *)fb;
            same = x == y || (isnan(x) && isnan(y)); /* NAN: unset */
            break;
        }
        case CFG_T_BOOL: same = *(const bool *)fa == *(const bool *)fb; break;
        case CFG_T_ENUM: same = *(const int *)fa == *(const int *)fb; break;
        case CFG_T_LIST: {
            const cfg_list *x = fa, *y = fb;
            same = x->n == y->n;
            bool compare_items = !(redacted && strcmp(k->name, "api_keys") == 0);
            for (int j = 0; same && compare_items && j < x->n; j++) same = strcmp(x->items[j], y->items[j]) == 0;
            break;
        }
        }
        if (!same) {
            cr_log_info("key %s differs", k->name);
            return false;
        }
    }
    return true;
}

/* Every key set to something other than its default. */
static const char EVERY_KEY[] = "# every key\n"
                                "model: /models/m.gguf\n"
                                "served_model_names: [my-model, gpt-4o]\n"
                                "chat_template: /t/chat.jinja\n"
                                "device: cpu\n"
                                "threads: 3\n"
                                "ctx_size: 1024\n"
                                "host: 0.0.0.0\n"
                                "port: 9001\n"
                                "http_threads: 4\n"
                                "max_body_bytes: 2048\n"
                                "max_connections: 100\n"
                                "keepalive: 0.25\n"
                                "max_header_bytes: 8192\n"
                                "kv_cache_mb: 64\n"
                                "block_size: 32\n"
                                "max_batch_size: 8\n"
                                "max_batch_tokens: 1024\n"
                                "max_prefill_tokens: 128\n"
                                "queue_max_requests: 10\n"
                                "queue_max_tokens: 5000\n"
                                "policy: priority\n"
                                "request_timeout: 12.5\n"
                                "api_keys:\n"
                                "  - sk-one\n"
                                "  - \"sk-two\"\n"
                                "api_key_file: /etc/spindle/keys\n"
                                "metrics_require_key: true\n"
                                "cors_origins: [\"https://a.example\", '*']\n"
                                "tls_cert: /tls/cert.pem\n"
                                "tls_key: /tls/key.pem\n"
                                "log_format: json\n"
                                "access_log: false\n"
                                "log_prompts: yes\n"
                                "drain_timeout: 7\n"
                                "ready_queue_fraction: 0.5\n"
                                "temperature: 0.7\n"
                                "top_p: 0.9\n"
                                "top_k: 40\n"
                                "min_p: 0.05\n"
                                "repeat_penalty: 1.1\n"
                                "responses_store_mb: 8\n"
                                "responses_store_key_mb: 2\n"
                                "responses_store_max: 50\n"
                                "responses_store_ttl: 60\n"
                                "pooling: last\n"
                                "ui: false\n"
                                "metrics_names: vllm\n";

/* ---- defaults ---- */

Test(cfg_settings, defaults_are_those_of_serve_and_the_scheduler) {
    cfg_settings s;
    cfg_settings_init(&s);
    sched_config d = sched_config_default();
    cr_expect_str_eq(s.model, CFG_DEFAULT_MODEL);
    cr_expect_eq(s.served_model_names.n, 0);
    cr_expect_null(s.chat_template);
    cr_expect_eq(s.device, SP_DEVICE_AUTO);
    cr_expect(isnan(s.temperature) && isnan(s.top_p) && isnan(s.min_p) && isnan(s.repeat_penalty));
    cr_expect_eq(s.top_k, CFG_INT_UNSET);
    cr_expect(s.ui);
    cr_expect_eq(s.pooling, SP_POOLING_NONE);
    cr_expect_eq(s.metrics_names, CFG_METRICS_SPINDLE);
    cr_expect_eq(s.threads, CFG_INT_UNSET);
    cr_expect_eq(s.ctx_size, CFG_INT_UNSET);
    cr_expect_str_eq(s.host, "127.0.0.1");
    cr_expect_eq(s.port, 8080);
    cr_expect_eq(s.http_threads, 2);
    cr_expect_eq(s.max_body_bytes, 1 << 20);
    cr_expect_eq(s.max_connections, 4096);
    cr_expect_eq(s.keepalive, 5);
    cr_expect_eq(s.max_header_bytes, 32768);
    cr_expect_eq(s.kv_cache_mb, d.kv_cache_mb);
    cr_expect_eq(s.gpu_memory_fraction, d.gpu_memory_fraction);
    cr_expect_eq(s.prefix_cache, d.prefix_cache);
    cr_expect_eq(s.block_size, d.block_size);
    cr_expect_eq(s.max_batch_size, d.max_batch_size);
    cr_expect_eq(s.max_batch_tokens, d.max_batch_tokens);
    cr_expect_eq(s.max_prefill_tokens, d.max_prefill_tokens);
    cr_expect_eq(s.queue_max_requests, d.queue_max_requests);
    cr_expect_eq(s.queue_max_tokens, d.queue_max_tokens);
    cr_expect_eq(s.policy, SP_POLICY_FCFS);
    cr_expect_eq(d.policy, SP_POLICY_FCFS);
    cr_expect_eq(s.request_timeout, d.request_timeout_s);
    gram_limits g = gram_limits_default();
    cr_expect_eq(s.grammar_max_rules, g.max_rules);
    cr_expect_eq(s.grammar_max_states, g.max_elements);
    cr_expect_eq(s.grammar_max_depth, g.max_depth);
    cr_expect_eq(s.grammar_schema_max_depth, gram_schema_options_default().max_depth);
    cr_expect_eq(s.api_keys.n, 0);
    cr_expect_null(s.api_key_file);
    cr_expect_not(s.metrics_require_key);
    cr_expect_eq(s.cors_origins.n, 0);
    cr_expect_null(s.tls_cert);
    cr_expect_null(s.tls_key);
    cr_expect_eq(s.log_format, SP_LOG_FORMAT_TEXT);
    cr_expect(s.access_log);
    cr_expect_not(s.log_prompts);
    cr_expect_eq(s.drain_timeout, 30);
    cr_expect_eq(s.ready_queue_fraction, 0.9);
    cfg_settings_free(&s);
}

Test(cfg_settings, every_default_is_within_its_range) {
    cfg_settings s;
    cfg_settings_init(&s);
    for (int i = 0; i < CFG_KEY_COUNT; i++) {
        const cfg_key *k = &cfg__keys[i];
        const void *f = (const char *)&s + k->offset;
        if (k->type == CFG_T_INT && !(k->optional && *(const int64_t *)f == CFG_INT_UNSET))
            cr_expect(*(const int64_t *)f >= k->min && *(const int64_t *)f <= k->max, "%s", k->name);
        if (k->type == CFG_T_FLOAT && !(k->optional && isnan(*(const double *)f)))
            cr_expect(*(const double *)f >= k->min && *(const double *)f <= k->max, "%s", k->name);
    }
    cfg_settings_free(&s);
}

Test(cfg_settings, key_names_are_flags_with_underscores) {
    for (int i = 0; i < CFG_KEY_COUNT; i++) {
        const cfg_key *k = &cfg__keys[i];
        char want[64];
        snprintf(want, sizeof want, "%s", k->flag);
        for (char *p = want; *p; p++)
            if (*p == '-') *p = '_';
        if (k->type == CFG_T_LIST) strcat(want, "s"); /* --api-key: api_keys */
        cr_expect_str_eq(k->name, want);
    }
}

/* ---- YAML ---- */

Test(cfg_yaml, reads_every_key) {
    cfg_settings s;
    cfg_settings_init(&s);
    cr_assert_eq(load(&s, EVERY_KEY), SP_OK, "%s", sp_last_error());
    cr_expect_str_eq(s.model, "/models/m.gguf");
    cr_assert_eq(s.served_model_names.n, 2);
    cr_expect_str_eq(s.served_model_names.items[0], "my-model");
    cr_expect_str_eq(s.served_model_names.items[1], "gpt-4o");
    cr_expect_float_eq(s.temperature, 0.7, 1e-12);
    cr_expect_eq(s.top_k, 40);
    cr_expect_eq(s.pooling, SP_POOLING_LAST);
    cr_expect_eq(s.responses_store_mb, 8);
    cr_expect_eq(s.responses_store_key_mb, 2);
    cr_expect(!s.ui);
    cr_expect_eq(s.metrics_names, CFG_METRICS_VLLM);
    cr_expect_str_eq(s.chat_template, "/t/chat.jinja");
    cr_expect_eq(s.device, SP_DEVICE_CPU);
    cr_expect_eq(s.threads, 3);
    cr_expect_eq(s.ctx_size, 1024);
    cr_expect_str_eq(s.host, "0.0.0.0");
    cr_expect_eq(s.port, 9001);
    cr_expect_eq(s.http_threads, 4);
    cr_expect_eq(s.max_body_bytes, 2048);
    cr_expect_eq(s.max_connections, 100);
    cr_expect_eq(s.keepalive, 0.25);
    cr_expect_eq(s.max_header_bytes, 8192);
    cr_expect_eq(s.kv_cache_mb, 64);
    cr_expect_eq(s.block_size, 32);
    cr_expect_eq(s.max_batch_size, 8);
    cr_expect_eq(s.max_batch_tokens, 1024);
    cr_expect_eq(s.max_prefill_tokens, 128);
    cr_expect_eq(s.queue_max_requests, 10);
    cr_expect_eq(s.queue_max_tokens, 5000);
    cr_expect_eq(s.policy, SP_POLICY_PRIORITY);
    cr_expect_eq(s.request_timeout, 12.5);
    cr_assert_eq(s.api_keys.n, 2);
    cr_expect_str_eq(s.api_keys.items[0], "sk-one");
    cr_expect_str_eq(s.api_keys.items[1], "sk-two");
    cr_expect_str_eq(s.api_key_file, "/etc/spindle/keys");
    cr_expect(s.metrics_require_key);
    cr_assert_eq(s.cors_origins.n, 2);
    cr_expect_str_eq(s.cors_origins.items[0], "https://a.example");
    cr_expect_str_eq(s.cors_origins.items[1], "*");
    cr_expect_str_eq(s.tls_cert, "/tls/cert.pem");
    cr_expect_str_eq(s.tls_key, "/tls/key.pem");
    cr_expect_eq(s.log_format, SP_LOG_FORMAT_JSON);
    cr_expect_not(s.access_log);
    cr_expect(s.log_prompts);
    cr_expect_eq(s.drain_timeout, 7);
    cr_expect_eq(s.ready_queue_fraction, 0.5);
    char where[64];
    cr_expect_str_eq(cfg_origin(&s, "port", where, sizeof where), "spindle.yaml:9");
    cr_expect_str_eq(cfg_origin(&s, "api_keys", where, sizeof where), "spindle.yaml:24");
    cfg_settings_free(&s);
}

Test(cfg_yaml, the_example_config_covers_every_key_with_the_defaults) {
    cfg_settings s, d;
    cfg_settings_init(&s);
    cfg_settings_init(&d);
    cr_assert_eq(cfg_load_file(&s, "config/spindle.yaml"), SP_OK, "%s", sp_last_error());
    for (int i = 0; i < CFG_KEY_COUNT; i++)
        cr_expect_gt(s._line[i], 0, "config/spindle.yaml lacks %s", cfg__keys[i].name);
    cr_expect(same_settings(&s, &d, false), "config/spindle.yaml should hold the defaults");
    cfg_settings_free(&s);
    cfg_settings_free(&d);
}

Test(cfg_yaml, null_unsets_optional_keys_and_empties_lists) {
    cfg_settings s;
    cfg_settings_init(&s);
    cr_assert_eq(load(&s, "served_model_names: [x]\nthreads: 4\napi_keys: [a]\ntemperature: 0.5\n"), SP_OK);
    cr_assert_eq(load(&s, "served_model_names: null\nthreads: ~\napi_keys:\ncors_origins: []\ntemperature: null\n"),
                 SP_OK, "%s", sp_last_error());
    cr_expect_eq(s.served_model_names.n, 0);
    cr_expect(isnan(s.temperature));
    cr_expect_eq(s.threads, CFG_INT_UNSET);
    cr_expect_eq(s.api_keys.n, 0);
    cfg_settings_free(&s);
}

Test(cfg_yaml, the_single_served_model_name_of_older_files_is_a_one_name_list) {
    cfg_settings s;
    cfg_settings_init(&s);
    cr_assert_eq(load(&s, "served_model_name: old-name\n"), SP_OK, "%s", sp_last_error());
    cr_assert_eq(s.served_model_names.n, 1);
    cr_expect_str_eq(s.served_model_names.items[0], "old-name");
    cr_assert_eq(load(&s, "served_model_name: [a, b]\n"), SP_OK, "%s", sp_last_error());
    cr_expect_eq(s.served_model_names.n, 2);
    cr_expect_neq(load(&s, "served_model_name: a\nserved_model_names: [b]\n"), SP_OK); /* the same key twice */
    cfg_settings_free(&s);
}

Test(cfg_yaml, bools_in_yaml_spellings) {
    const char *yes[] = {"true", "True", "yes", "on"}, *no[] = {"false", "FALSE", "no", "off"};
    for (int i = 0; i < 4; i++) {
        cfg_settings s;
        cfg_settings_init(&s);
        char text[64];
        snprintf(text, sizeof text, "log_prompts: %s\naccess_log: %s\n", yes[i], no[i]);
        cr_assert_eq(load(&s, text), SP_OK, "%s", sp_last_error());
        cr_expect(s.log_prompts);
        cr_expect_not(s.access_log);
        cfg_settings_free(&s);
    }
}

Test(cfg_yaml, an_empty_file_changes_nothing) {
    cfg_settings s, d;
    cfg_settings_init(&s);
    cfg_settings_init(&d);
    cr_expect_eq(load(&s, ""), SP_OK);
    cr_expect_eq(load(&s, "# only a comment\n"), SP_OK);
    cr_expect_eq(load(&s, "---\n"), SP_OK);
    cr_expect(same_settings(&s, &d, false));
    cfg_settings_free(&s);
    cfg_settings_free(&d);
}

/* ---- YAML errors: each names the file, the line and the key ---- */

Test(cfg_yaml_errors, out_of_range_and_not_a_number) {
    expect_error("port: 1\nmax_batch_size: lots\n",
                 "spindle.yaml:2: key 'max_batch_size': expected an integer between 1 and 4096, got 'lots'");
    expect_error("max_batch_size: 5000\n", "spindle.yaml:1: key 'max_batch_size': expected an integer between 1 and "
                                           "4096, got '5000'");
    expect_error("port: -1\n", "spindle.yaml:1: key 'port'");
    expect_error("\n\nkeepalive: 0\n", "spindle.yaml:3: key 'keepalive': expected a number between 0.05 and 3600");
    expect_error("ready_queue_fraction: 1.5\n", "spindle.yaml:1: key 'ready_queue_fraction'");
    expect_error("request_timeout: .inf\n", "spindle.yaml:1: key 'request_timeout'");
    expect_error("block_size: 1.5\n", "spindle.yaml:1: key 'block_size'");
    expect_error("queue_max_tokens: 99999999999999999999\n", "spindle.yaml:1: key 'queue_max_tokens'");
}

Test(cfg_yaml_errors, wrong_types) {
    expect_error("port: \"8080\"\n", "spindle.yaml:1: key 'port': expected an integer between 0 and 65535, got the "
                                     "string '8080'");
    expect_error("access_log: maybe\n", "spindle.yaml:1: key 'access_log': expected true or false, got 'maybe'");
    expect_error("access_log: 'true'\n", "spindle.yaml:1: key 'access_log'");
    expect_error("policy: lifo\n", "spindle.yaml:1: key 'policy': expected one of fcfs, priority, slo, got 'lifo'");
    expect_error("device: gpu\n", "spindle.yaml:1: key 'device': expected one of auto, cpu, cuda");
    expect_error("log_format: xml\n", "spindle.yaml:1: key 'log_format'");
    expect_error("host: null\n", "spindle.yaml:1: key 'host': expected a string, got nothing");
    expect_error("port:\n", "spindle.yaml:1: key 'port'");
}

Test(cfg_yaml_errors, a_list_where_a_scalar_is_expected_and_the_reverse) {
    expect_error("model: a\nport: [8080]\n", "spindle.yaml:2: key 'port': expected an integer between 0 and 65535, "
                                             "got a list");
    expect_error("host:\n  - a\n", "spindle.yaml:2: key 'host': expected a string, got a list");
    expect_error("api_keys: sk-1\n",
                 "spindle.yaml:1: key 'api_keys': expected a list of strings, got the single value");
    expect_error("cors_origins: {a: b}\n", "spindle.yaml:1: key 'cors_origins': expected a list of strings, got a "
                                           "mapping");
    expect_error("cors_origins: [[a]]\n", "spindle.yaml:1: key 'cors_origins'");
    expect_error("api_keys:\n  - a\n  -\n", "spindle.yaml:3: key 'api_keys'");
    expect_error("port: {x: 1}\n", "spindle.yaml:1: key 'port': expected an integer between 0 and 65535, got a "
                                   "mapping");
}

Test(cfg_yaml_errors, unknown_and_duplicate_keys) {
    expect_error("port: 1\nportt: 2\n", "spindle.yaml:2: unknown key 'portt'");
    expect_error("max-batch-size: 2\n", "spindle.yaml:1: unknown key 'max-batch-size' (the key is 'max_batch_size')");
    expect_error("api_key: sk\n", "unknown key 'api_key' (the key is 'api_keys')");
    expect_error("port: 1\nhost: a\nport: 2\n", "spindle.yaml:3: key 'port': given twice (first on line 1)");
    expect_error("[a]: 1\n", "spindle.yaml:1: a key must be a setting's name, got a list");
}

Test(cfg_yaml_errors, documents_that_are_not_one_mapping) {
    expect_error("- port: 1\n", "spindle.yaml:1: the file must be a mapping of settings (key: value), got a list");
    expect_error("just text\n", "spindle.yaml:1: the file must be a mapping of settings");
    expect_error("port: 1\n---\nport: 2\n", "spindle.yaml:2: a second YAML document");
    expect_error("port: &p 1\nhttp_threads: *p\n", "spindle.yaml:2: key 'http_threads'");
}

Test(cfg_yaml_errors, syntax_errors_name_the_line) {
    expect_error("port: 1\nhost: [a\n", "spindle.yaml:");
    expect_error("port: 1\nhost: a: b\n", "spindle.yaml:2:");
    expect_error("port: \"unterminated\n", "spindle.yaml:");
}

Test(cfg_yaml_errors, unreadable_file) {
    cfg_settings s;
    cfg_settings_init(&s);
    cr_expect_eq(cfg_load_file(&s, "/nonexistent/spindle.yaml"), SP_ERR_IO);
    cr_expect(strstr(sp_last_error(), "/nonexistent/spindle.yaml"));
    cfg_settings_free(&s);
}

/* ---- the command line ---- */

Test(cfg_args, flags_set_every_kind_of_setting) {
    cfg_settings s;
    cfg_settings_init(&s);
    cfg_action action;
    cr_assert_eq(parse(&s, NULL, &action, "-m", "x.gguf", "--port", "0", "--keepalive", "0.5", "--policy", "priority",
                       "--api-key", "k1", "--api-key", "k2", "--no-access-log", "--metrics-require-key", "--device",
                       "cpu", "--log-format", "json", NULL),
                 SP_OK, "%s", sp_last_error());
    cr_expect_eq(action, CFG_ACTION_RUN);
    cr_expect_str_eq(s.model, "x.gguf");
    cr_expect_eq(s.port, 0);
    cr_expect_eq(s.keepalive, 0.5);
    cr_expect_eq(s.policy, SP_POLICY_PRIORITY);
    cr_assert_eq(s.api_keys.n, 2);
    cr_expect_str_eq(s.api_keys.items[1], "k2");
    cr_expect_not(s.access_log);
    cr_expect(s.metrics_require_key);
    cr_expect_eq(s.device, SP_DEVICE_CPU);
    cr_expect_eq(s.log_format, SP_LOG_FORMAT_JSON);
    cfg_settings_free(&s);
}

Test(cfg_args, flags_override_the_file_wherever_they_stand, .fini = remove_yaml) {
    const char *path = write_yaml("port: 9000\nhost: 0.0.0.0\naccess_log: false\napi_keys: [f1, f2]\n"
                                  "cors_origins: [https://file.example]\nmax_batch_size: 8\n");
    cfg_settings s;
    cfg_settings_init(&s);
    cfg_action action;
    /* the flag before --config still wins */
    cr_assert_eq(parse(&s, NULL, &action, "--port", "7000", "--config", path, "--access-log", "--api-key", "c1", NULL),
                 SP_OK, "%s", sp_last_error());
    cr_expect_eq(s.port, 7000);
    cr_expect_str_eq(s.host, "0.0.0.0");
    cr_expect(s.access_log);
    cr_assert_eq(s.api_keys.n, 1); /* the command line's list replaces the file's */
    cr_expect_str_eq(s.api_keys.items[0], "c1");
    cr_assert_eq(s.cors_origins.n, 1); /* not given on the command line: the file's */
    cr_expect_eq(s.max_batch_size, 8);
    char where[128], want[128];
    cr_expect_str_eq(cfg_origin(&s, "port", where, sizeof where), "--port");
    snprintf(want, sizeof want, "%s:2", path);
    cr_expect_str_eq(cfg_origin(&s, "host", where, sizeof where), want);
    cr_expect_str_eq(cfg_origin(&s, "policy", where, sizeof where), "the default");
    cfg_settings_free(&s);
}

Test(cfg_args, the_default_file_is_read_only_when_it_exists, .fini = remove_yaml) {
    const char *path = write_yaml("port: 9123\n");
    cfg_settings s;
    cfg_settings_init(&s);
    cfg_action action;
    cr_assert_eq(parse(&s, path, &action, NULL), SP_OK, "%s", sp_last_error());
    cr_expect_eq(s.port, 9123);
    cfg_settings_free(&s);
    cfg_settings_init(&s);
    cr_assert_eq(parse(&s, "/nonexistent/spindle.yaml", &action, NULL), SP_OK);
    cr_expect_eq(s.port, 8080);
    cfg_settings_free(&s);
    /* --config beats the default file, and a missing --config file is an error */
    cfg_settings_init(&s);
    cr_expect_eq(parse(&s, path, &action, "--config", "/nonexistent/other.yaml", NULL), SP_ERR_IO);
    cr_expect(strstr(sp_last_error(), "/nonexistent/other.yaml"));
    cfg_settings_free(&s);
}

Test(cfg_args, bad_flags_name_the_flag) {
    struct {
        const char *flag, *value, *want;
    } cases[] = {
        {"--max-batch-size", "lots", "--max-batch-size: expected an integer between 1 and 4096, got 'lots'"},
        {"--port", "65536", "--port: expected an integer between 0 and 65535"},
        {"--threads", "0", "--threads: expected an integer between 1 and 256"},
        {"--ready-queue-fraction", "2", "--ready-queue-fraction: expected a number between 0 and 1"},
        {"--policy", "lifo", "--policy: expected one of fcfs, priority, slo, got 'lifo'"},
        {"--api-key", "", "--api-key: expected a list of strings"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        cfg_settings s;
        cfg_settings_init(&s);
        cfg_action action;
        cr_expect_eq(parse(&s, NULL, &action, cases[i].flag, cases[i].value, NULL), SP_ERR_INVALID_ARG);
        cr_expect(strstr(sp_last_error(), cases[i].want), "'%s' lacks '%s'", sp_last_error(), cases[i].want);
        cfg_settings_free(&s);
    }
    cfg_settings s;
    cfg_settings_init(&s);
    cfg_action action;
    cr_expect_eq(parse(&s, NULL, &action, "--bogus", NULL), SP_ERR_INVALID_ARG);
    cr_expect(strstr(sp_last_error(), "unknown option '--bogus'"), "%s", sp_last_error());
    cr_expect_eq(parse(&s, NULL, &action, "--port", NULL), SP_ERR_INVALID_ARG);
    cr_expect(strstr(sp_last_error(), "--port: missing value"), "%s", sp_last_error());
    cr_expect_eq(parse(&s, NULL, &action, "stray", NULL), SP_ERR_INVALID_ARG);
    cr_expect(strstr(sp_last_error(), "unexpected argument 'stray'"), "%s", sp_last_error());
    cfg_settings_free(&s);
}

Test(cfg_args, a_bad_config_file_fails_the_parse, .fini = remove_yaml) {
    const char *path = write_yaml("port: 1\n\nmax_batch_size: lots\n");
    cfg_settings s;
    cfg_settings_init(&s);
    cfg_action action;
    cr_expect_eq(parse(&s, NULL, &action, "--config", path, "--max-batch-size", "4", NULL), SP_ERR_INVALID_ARG);
    char want[128];
    snprintf(want, sizeof want, "%s:3: key 'max_batch_size'", path);
    cr_expect(strstr(sp_last_error(), want), "%s", sp_last_error());
    cfg_settings_free(&s);
}

Test(cfg_args, help_and_print_config_actions) {
    cfg_settings s;
    cfg_settings_init(&s);
    cfg_action action;
    cr_expect_eq(parse(&s, NULL, &action, "--port", "1", "--print-config", NULL), SP_OK);
    cr_expect_eq(action, CFG_ACTION_PRINT_CONFIG);
    cr_expect_eq(s.port, 1);
    cr_expect_eq(parse(&s, NULL, &action, "--config", "/nonexistent.yaml", "--help", NULL), SP_OK);
    cr_expect_eq(action, CFG_ACTION_HELP);
    cfg_settings_free(&s);
}

Test(cfg_args, usage_lists_every_flag) {
    char *text = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&text, &len);
    cfg_print_usage(out);
    fclose(out);
    for (int i = 0; i < CFG_KEY_COUNT; i++) {
        char flag[80];
        snprintf(flag, sizeof flag, "--%s ", cfg__keys[i].flag);
        cr_expect(strstr(text, flag), "--help lacks %s", flag);
    }
    free(text);
}

/* ---- --print-config ---- */

static char *print_to_string(const cfg_settings *s) {
    char *text = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&text, &len);
    cfg_print(s, out);
    fclose(out);
    return text;
}

Test(cfg_print, round_trips_every_key) {
    cfg_settings s, back;
    cfg_settings_init(&s);
    cr_assert_eq(load(&s, EVERY_KEY), SP_OK, "%s", sp_last_error());
    /* values that need quoting, and doubles that are not short */
    cr_assert_eq(cfg_set(&s, "served-model-name", "a \"quoted\" name: with \\ and # and\ttab"), SP_OK);
    cr_assert_eq(cfg_set(&s, "host", "::1"), SP_OK);
    cr_assert_eq(cfg_set(&s, "ready-queue-fraction", "0.1234567890123"), SP_OK);
    cr_assert_eq(cfg_set(&s, "request-timeout", "1e7"), SP_OK);
    cr_assert_eq(cfg_set(&s, "cors-origin", "null"), SP_OK);
    char *text = print_to_string(&s);
    cr_log_info("%s", text);
    cfg_settings_init(&back);
    cr_assert_eq(cfg_load_yaml(&back, "printed", text, strlen(text)), SP_OK, "%s\n%s", sp_last_error(), text);
    cr_expect(same_settings(&s, &back, true));
    for (int i = 0; i < CFG_KEY_COUNT; i++) cr_expect_gt(back._line[i], 0, "the output lacks %s", cfg__keys[i].name);
    free(text);
    cfg_settings_free(&s);
    cfg_settings_free(&back);
}

Test(cfg_print, round_trips_the_defaults) {
    cfg_settings s, back;
    cfg_settings_init(&s);
    cfg_settings_init(&back);
    char *text = print_to_string(&s);
    cr_assert_eq(cfg_load_yaml(&back, "printed", text, strlen(text)), SP_OK, "%s\n%s", sp_last_error(), text);
    cr_expect(same_settings(&s, &back, false));
    free(text);
    cfg_settings_free(&s);
    cfg_settings_free(&back);
}

Test(cfg_print, redacts_api_keys) {
    cfg_settings s;
    cfg_settings_init(&s);
    cr_assert_eq(cfg_set(&s, "api-key", "sk-secret-1"), SP_OK);
    cr_assert_eq(cfg_set(&s, "api-key", "sk-secret-2"), SP_OK);
    char *text = print_to_string(&s);
    cr_expect_null(strstr(text, "sk-secret"));
    cr_expect(strstr(text, "api_keys: [\"<redacted>\", \"<redacted>\"]"), "%s", text);
    free(text);
    cfg_settings_free(&s);
}
