/* cfg.c: the settings of `spindle serve`: the key table (name, flag, type, range,
 * help) that the YAML reader, the flag parser, --help, --print-config and
 * docs/configuration.md all follow, the defaults, and the one setter every value
 * goes through, so a value is checked the same way wherever it comes from. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/grammar_defaults.h"
#include "common/sched_defaults.h"
#include "config/cfg_internal.h"

#define OFF(field) offsetof(cfg_settings, field)

static const char *const JSON_WHITESPACE[] = {"compact", "flexible", NULL};
static const char *const METRICS_NAMES[] = {"spindle", "vllm", NULL};
static const char *const PREFIX_CACHE_SCOPES[] = {"global", "key", NULL};

/* clang-format off */
#define STR(n, f, field, opt, a, h, u)     {n, f, CFG_T_STRING, OFF(field), 0, 0, opt, NULL, a, h, u}
#define INT(n, f, field, lo, hi, opt, h, u) {n, f, CFG_T_INT, OFF(field), lo, hi, opt, NULL, "N", h, u}
#define FLT(n, f, field, lo, hi, a, h)     {n, f, CFG_T_FLOAT, OFF(field), lo, hi, false, NULL, a, h, NULL}
#define FLT_OPT(n, f, field, lo, hi, a, h, u) {n, f, CFG_T_FLOAT, OFF(field), lo, hi, true, NULL, a, h, u}
#define BOOL(n, f, field, h)               {n, f, CFG_T_BOOL, OFF(field), 0, 0, false, NULL, NULL, h, NULL}
#define ENUM(n, f, field, c, h)            {n, f, CFG_T_ENUM, OFF(field), 0, 0, false, c, NULL, h, NULL}
#define LIST(n, f, field, a, h)            {n, f, CFG_T_LIST, OFF(field), 0, 0, false, NULL, a, h, NULL}
const cfg_key cfg__keys[] = {
    /* the model */
    STR("model", "model", model, false, "PATH", "GGUF model", NULL),
    LIST("served_model_names", "served-model-name", served_model_names, "NAME",
         "a model name clients may send (repeatable): the first is the id /v1/models lists, the rest aliases "
         "(default: the file name without .gguf)"),
    STR("chat_template", "chat-template", chat_template, true, "FILE", "Jinja chat template instead of the model's own",
        "(default: the model's)"),
    ENUM("device", "device", device, sp_device_names, "where the model runs (auto: the GPU when a usable one is present, else the CPU)"),
    INT("threads", "threads", threads, 1, 256, true, "CPU threads for the model", "(default: all cores)"),
    ENUM("cpu_isa", "cpu-isa", cpu_isa, sp_cpu_isa_names,
         "CPU kernel set (auto: the best this CPU runs; avx512 gives avx2's numbers, faster; amx: tiles)"),
    BOOL("cuda_graphs", "cuda-graphs", cuda_graphs, "on a GPU: replay decode steps as captured CUDA graphs"),
    ENUM("cuda_gemv", "cuda-gemv", cuda_gemv, sp_cuda_gemv_names,
         "on a GPU: small matmuls run spindle's GEMV, not cuBLAS (auto: where measured faster at load)"),
    INT("ctx_size", "ctx-size", ctx_size, 16, 1 << 24, true, "context limit per sequence",
        "(default: the model's training context)"),
    /* HTTP */
    STR("host", "host", host, false, "ADDR", "address to listen on", NULL),
    INT("port", "port", port, 0, 65535, false, "port (0 = any free port)", NULL),
    INT("http_threads", "http-threads", http_threads, 1, 64, false, "HTTP threads", NULL),
    INT("prep_threads", "prep-threads", prep_threads, 1, 64, false,
        "threads that parse, render and tokenize request bodies (smallest first), off the HTTP threads", NULL),
    INT("max_body_bytes", "max-body-bytes", max_body_bytes, 1024, 1L << 30, false, "largest request body", NULL),
    INT("max_connections", "max-connections", max_connections, 1, 1 << 20, false, "open connections at once", NULL),
    INT("max_connections_per_client", "max-connections-per-client", max_connections_per_client, 0, 1 << 20, false,
        "open connections from one address, 0 = no limit (behind a proxy all come from its address)", NULL),
    INT("idle_timeout", "idle-timeout", idle_timeout, 1, 86400, false,
        "seconds a connection may stay quiet before it is closed (a generation waiting is not quiet)", NULL),
    INT("header_timeout", "header-timeout", header_timeout, 1, 86400, false,
        "seconds a request's headers may take in all (a trickle does not extend it)", NULL),
    INT("body_timeout", "body-timeout", body_timeout, 1, 86400, false,
        "seconds a request's body may take in all once its headers are in", NULL),
    INT("admin_port", "admin-port", admin_port, 0, 65535, false,
        "a second port serving only /health, /ready and /metrics (probes), 0 = none", NULL),
    FLT("keepalive", "keepalive", keepalive, 0.05, 3600, "S", "SSE comment after S quiet seconds"),
    INT("max_header_bytes", "max-header-bytes", max_header_bytes, 4096, 1 << 24, false,
        "request line and headers per connection (larger: 431)", NULL),
    /* the scheduler */
    INT("kv_cache_mb", "kv-cache-mb", kv_cache_mb, 1, 1 << 24, false, "KV cache budget in MiB (CPU)", NULL),
    FLT("gpu_memory_fraction", "gpu-memory-fraction", gpu_memory_fraction, 0.01, 1, "F",
        "on a GPU: the KV cache takes this fraction of the memory free after loading"),
    INT("block_size", "block-size", block_size, 1, 1024, false, "tokens per KV block", NULL),
    ENUM("kv_type", "kv-type", kv_type, sp_kv_type_names,
         "the KV cache's element format: q8_0 holds 1.88x the tokens of f16 in the same memory, q4_0 3.56x, at a "
         "small cost in accuracy (needs a head width that is a multiple of 32)"),
    INT("max_batch_size", "max-batch-size", max_batch_size, 1, 4096, false, "sequences running at once", NULL),
    INT("max_batch_tokens", "max-batch-tokens", max_batch_tokens, 1, 1 << 16, false, "tokens in one step", NULL),
    INT("max_prefill_tokens", "max-prefill-tokens", max_prefill_tokens, 1, 1 << 16, false,
        "prompt tokens prefilled per step", NULL),
    INT("queue_max_requests", "queue-max-requests", queue_max_requests, 1, 1 << 24, false,
        "requests waiting to run before 429", NULL),
    INT("queue_max_tokens", "queue-max-tokens", queue_max_tokens, 1, INT64_MAX, false,
        "their prompt tokens before 429", NULL),
    ENUM("policy", "policy", policy, sp_policy_names,
         "admission and preemption order (slo: latency targets first: no prefill that makes a decode miss its "
         "TPOT target, the queue head then the shortest prompts, 429 at once for what cannot meet its TTFT target)"),
    FLT("ttft_slo_ms", "ttft-slo-ms", ttft_slo_ms, 0, 1e9, "MS",
        "time-to-first-token target of requests that give none (ttft_slo_ms), 0 = none; goodput counts it"),
    FLT("tpot_slo_ms", "tpot-slo-ms", tpot_slo_ms, 0, 1e9, "MS",
        "time-per-output-token target of requests that give none (tpot_slo_ms), 0 = none"),
    FLT("request_timeout", "request-timeout", request_timeout, 0, 1e7, "S", "seconds a request may take, 0 = none"),
    BOOL("prefix_cache", "prefix-cache", prefix_cache, "reuse the KV of prompt prefixes computed before"),
    ENUM("prefix_cache_scope", "prefix-cache-scope", prefix_cache_scope, PREFIX_CACHE_SCOPES,
         "who shares cached prefixes: every request (global), or only requests of the same API key (key: no key "
         "learns from cached_tokens or timing what another's prompts start with)"),
    INT("kv_host_mb", "kv-host-mb", kv_host_mb, 0, 1 << 24, false,
        "the prefix cache's host-memory tier in MiB: KV blocks the pool evicts wait there to be reloaded instead of "
        "recomputed, 0 = none", NULL),
    STR("kv_disk_dir", "kv-disk-dir", kv_disk_dir, true, "DIR",
        "the prefix cache's disk tier: evicted KV blocks are kept in a directory of this process's own under DIR "
        "(removed at exit, unless --kv-disk-persist)", "(default: none)"),
    FLT("kv_disk_gb", "kv-disk-gb", kv_disk_gb, 0, 1e6, "G", "the disk tier's budget in GB"),
    BOOL("kv_disk_persist", "kv-disk-persist", kv_disk_persist,
         "keep the disk tier across restarts in DIR/spindle-kv-<model sha256>: its files carry the model's sha256"),
    /* speculative decoding */
    STR("speculative", "speculative", speculative, false, "LIST",
        "draft proposers: off, auto (all; a measured gate switches each off where it loses), or a comma list of ngram "
        "(prompt lookup), suffix (earlier outputs of the same API key)", NULL),
    INT("spec_k", "spec-k", spec_k, 1, 16, false, "most draft tokens per sequence and step", NULL),
    INT("spec_ngram_min", "spec-ngram-min", spec_ngram_min, 1, 64, false, "prompt lookup: shortest n-gram matched",
        NULL),
    INT("spec_ngram_max", "spec-ngram-max", spec_ngram_max, 1, 64, false,
        "prompt lookup: longest n-gram matched (>= --spec-ngram-min)", NULL),
    INT("spec_suffix_mb", "spec-suffix-mb", spec_suffix_mb, 1, 1 << 20, false,
        "the suffix cache's budget in MiB (prompts and outputs of finished requests)", NULL),
    STR("draft_model", "draft-model", draft_model, true, "FILE",
        "a smaller GGUF model with the model's vocabulary that drafts for it (e.g. its own Q4_1 from spindle "
        "quantize)", "(default: none)"),
    INT("draft_kv_cache_mb", "draft-kv-cache-mb", draft_kv_cache_mb, 1, 1 << 24, false,
        "the draft model's KV cache budget in MiB", NULL),
    BOOL("spec_gate", "spec-gate", spec_gate,
         "speculation only where it pays: a gate measures each proposer at each batch width and drafter models "
         "weigh their own cost; --no-spec-gate drafts whenever a proposer can (to measure one alone)"),
    INT("self_spec_layers", "self-spec-layers", self_spec_layers, 0, 4096, false,
        "self-speculation: the model's first N layers and its output head draft (no extra weights), 0 = none; "
        "below the model's layer count", NULL),
    /* request limits */
    INT("max_n", "max-n", max_n, 1, 16, false, "most choices one request may ask for (n)", NULL),
    INT("max_sequences_per_request", "max-sequences-per-request", max_sequences_per_request, 0, 1 << 20, false,
        "most sequences (prompts times n) one request may ask for, 0 = no bound", NULL),
    INT("max_request_tokens", "max-request-tokens", max_request_tokens, 0, 1LL << 40, false,
        "most prompt tokens one request may hold (its prompts or inputs summed, times n), 0 = the context length "
        "times n",
        NULL),
    INT("max_tokens", "max-tokens", max_tokens, 0, 1 << 24, false,
        "largest max_tokens a request may ask for, 0 = the context", NULL),
    INT("default_max_tokens", "default-max-tokens", default_max_tokens, 0, 1 << 24, false,
        "max_tokens of a request that gives none (within --max-tokens and the context), 0 = what the context leaves",
        NULL),
    /* sampling defaults: for requests that leave a field out */
    FLT_OPT("temperature", "temperature", temperature, 0, 2, "T", "temperature of requests that give none",
            "(default: the model file's, else 1)"),
    FLT_OPT("top_p", "top-p", top_p, 0.001, 1, "P", "top_p of requests that give none", "(default: the model file's, else 1)"),
    INT("top_k", "top-k", top_k, 0, 1 << 20, true, "top_k of requests that give none",
        "(default: the model file's, else off)"),
    FLT_OPT("min_p", "min-p", min_p, 0, 1, "P", "min_p of requests that give none", "(default: the model file's, else 0)"),
    FLT_OPT("repeat_penalty", "repeat-penalty", repeat_penalty, 0.01, 2, "F",
            "repetition_penalty of requests that give none", "(default: the model file's, else 1)"),
    /* the other APIs */
    INT("responses_store_mb", "responses-store-mb", responses_store_mb, 0, 1 << 20, false,
        "memory for stored /v1/responses (previous_response_id), 0 = store none", NULL),
    INT("responses_store_key_mb", "responses-store-key-mb", responses_store_key_mb, 0, 1 << 20, false,
        "each API key's share of --responses-store-mb: past it a key drops its own oldest, 0 = the whole store", NULL),
    INT("responses_store_max", "responses-store-max", responses_store_max, 1, 1 << 24, false,
        "most stored responses", NULL),
    INT("responses_store_ttl", "responses-store-ttl", responses_store_ttl, 1, 1 << 30, false,
        "seconds a stored response is kept", NULL),
    ENUM("pooling", "pooling", pooling, sp_pooling_names,
         "/v1/embeddings: how token vectors become one (auto: the model file's pooling_type, else mean)"),
    BOOL("ui", "ui", ui, "serve the built-in chat page at /"),
    ENUM("metrics_names", "metrics-names", metrics_names, METRICS_NAMES,
         "/metrics: spindle's names only, or also the vLLM names gateways and dashboards read"),
    /* constrained output */
    INT("grammar_max_rules", "grammar-max-rules", grammar_max_rules, 1, 1 << 22, false,
        "most rules one constraint (grammar, schema, regex) may compile to; past it, a 400", NULL),
    INT("grammar_max_states", "grammar-max-states", grammar_max_states, 1, 1 << 26, false,
        "most automaton states one constraint may compile to; past it, a 400", NULL),
    INT("grammar_max_depth", "grammar-max-depth", grammar_max_depth, 8, 1 << 20, false,
        "deepest nesting a constrained output may reach while it is generated (its matcher's stack)", NULL),
    INT("grammar_schema_max_depth", "grammar-schema-max-depth", grammar_schema_max_depth, 1, 1024, false,
        "deepest nesting of subschemas and $refs a JSON Schema may have; past it, a 400", NULL),
    ENUM("grammar_json_whitespace", "grammar-json-whitespace", grammar_json_whitespace, JSON_WHITESPACE,
         "JSON a schema constrains: compact (no whitespace, as OpenAI's strict mode writes it) or flexible "
         "(optional whitespace between tokens, up to 20 characters)"),
    /* security */
    LIST("api_keys", "api-key", api_keys, "KEY", "API key clients send as `Authorization: Bearer KEY` (repeatable)"),
    STR("api_key_file", "api-key-file", api_key_file, true, "PATH", "file of API keys, one per line, reread on SIGHUP",
        "(default: none)"),
    BOOL("metrics_require_key", "metrics-require-key", metrics_require_key, "/metrics needs an API key too"),
    LIST("cors_origins", "cors-origin", cors_origins, "ORIGIN", "allowed CORS origin, * for any (repeatable)"),
    STR("tls_cert", "tls-cert", tls_cert, true, "PATH", "TLS certificate (PEM); with --tls-key: HTTPS",
        "(default: none)"),
    STR("tls_key", "tls-key", tls_key, true, "PATH", "TLS private key (PEM)", "(default: none)"),
    /* logging */
    ENUM("log_format", "log-format", log_format, sp_log_format_names, "access log lines as text or JSON"),
    BOOL("access_log", "access-log", access_log, "one log line per request"),
    BOOL("log_prompts", "log-prompts", log_prompts, "include the prompt text in the access log"),
    /* readiness and drain */
    FLT("drain_timeout", "drain-timeout", drain_timeout, 0, 86400, "S",
        "seconds in-flight requests get to finish after SIGTERM"),
    FLT("ready_queue_fraction", "ready-queue-fraction", ready_queue_fraction, 0, 1, "F",
        "/ready is 503 when the queue is above this fraction of its bounds (0 counts as 1)"),
};
/* clang-format on */

/* cfg.h's CFG_KEY_COUNT must match the rows (a mismatch is a conflicting declaration);
 * enum fields are written as int. */
_Static_assert(sizeof(sp_device) == sizeof(int) && sizeof(sp_cuda_gemv) == sizeof(int) &&
                   sizeof(sp_cpu_isa) == sizeof(int) && sizeof(sp_policy) == sizeof(int) &&
                   sizeof(sp_kv_type) == sizeof(int) && sizeof(sp_log_format) == sizeof(int) &&
                   sizeof(cfg_metrics_names) == sizeof(int) && sizeof(sp_pooling) == sizeof(int),
               "enum settings are set through an int");
_Static_assert(sizeof(cfg_prefix_cache_scope) == sizeof(int), "enum settings are set through an int");

void cfg_settings_init(cfg_settings *s) {
    *s = (cfg_settings){
        .device = SP_DEVICE_AUTO,
        .cuda_graphs = true,
        .cuda_gemv = SP_CUDA_GEMV_AUTO,
        .port = 8080,
        .http_threads = 2,
        .prep_threads = 1,
        .max_body_bytes = 1 << 20,
        .max_connections = 4096,
        .idle_timeout = 75, /* above nginx's 60 s upstream keepalive, so nginx closes first */
        .header_timeout = 30,
        .body_timeout = 60,
        .keepalive = 5,
        .max_header_bytes = 32768,
        /* the scheduler's knobs, from common/sched_defaults.h (sched_config_default()
         * reads the same) */
        SP_SCHED_DEFAULT_FIELDS,
        .request_timeout = SP_SCHED_DEFAULT_REQUEST_TIMEOUT_S,
        .spec_suffix_mb = SP_SCHED_DEFAULT_SPEC_SUFFIX_MB,
        .draft_kv_cache_mb = SP_SCHED_DEFAULT_DRAFT_KV_CACHE_MB,
        .max_n = 16,
        .max_sequences_per_request = 64,
        .max_request_tokens = 0,
        .max_tokens = 0,
        .default_max_tokens = 4096,
        /* grammar/'s defaults (gram_limits_default, gram_schema_options_default), from
           common/grammar_defaults.h */
        .grammar_max_rules = SP_GRAMMAR_DEFAULT_MAX_RULES,
        .grammar_max_states = SP_GRAMMAR_DEFAULT_MAX_ELEMENTS,
        .grammar_max_depth = SP_GRAMMAR_DEFAULT_MAX_DEPTH,
        .grammar_schema_max_depth = SP_GRAMMAR_DEFAULT_SCHEMA_MAX_DEPTH,
        .threads = CFG_INT_UNSET,  /* all cores */
        .ctx_size = CFG_INT_UNSET, /* the model's */
        .top_k = CFG_INT_UNSET,
        .temperature = NAN, /* unset: the model file's, else the API's default */
        .top_p = NAN,
        .min_p = NAN,
        .repeat_penalty = NAN,
        .responses_store_mb = 64,
        .responses_store_max = 10000,
        .responses_store_ttl = 3600,
        .ui = true,
        .log_format = SP_LOG_FORMAT_TEXT,
        .access_log = true,
        .log_prompts = false,
        .drain_timeout = 30,
        .ready_queue_fraction = 0.9,
    };
    /* the two strings with defaults; on out of memory they stay NULL and the start
     * fails on the missing model or binds the default address */
    s->model = strdup(CFG_DEFAULT_MODEL);
    s->host = strdup("127.0.0.1");
    s->speculative = strdup(SP_SCHED_DEFAULT_SPECULATIVE);
}

sp_status cfg_speculative(const cfg_settings *s, cfg_proposers *out) {
    *out = (cfg_proposers){0};
    if (s->spec_ngram_min > s->spec_ngram_max)
        return sp_fail(SP_ERR_INVALID_ARG, "--spec-ngram-min %lld is above --spec-ngram-max %lld",
                       (long long)s->spec_ngram_min, (long long)s->spec_ngram_max);
    const char *text = s->speculative ? s->speculative : SP_SCHED_DEFAULT_SPECULATIVE;
    if (strcmp(text, "off") == 0) return SP_OK;
    if (strcmp(text, "auto") == 0) {
        *out = (cfg_proposers){
            .ngram = true, .suffix = true, .draft = s->draft_model != NULL, .self = s->self_spec_layers > 0};
        return SP_OK;
    }
    char quoted[96];
    for (const char *p = text;;) {
        size_t n = strcspn(p, ",");
        if (n == 5 && strncmp(p, "ngram", n) == 0) {
            out->ngram = true;
        } else if (n == 6 && strncmp(p, "suffix", n) == 0) {
            out->suffix = true;
        } else if (n == 5 && strncmp(p, "draft", n) == 0) {
            if (!s->draft_model) return sp_fail(SP_ERR_INVALID_ARG, "--speculative: draft needs --draft-model FILE");
            out->draft = true;
        } else if (n == 4 && strncmp(p, "self", n) == 0) {
            if (s->self_spec_layers <= 0)
                return sp_fail(SP_ERR_INVALID_ARG, "--speculative: self needs --self-spec-layers N");
            out->self = true;
        } else {
            return sp_fail(SP_ERR_INVALID_ARG,
                           "--speculative: expected off, auto or a comma list of ngram, suffix, draft, self; got '%s'",
                           cfg__quote(text, quoted, sizeof quoted));
        }
        if (!p[n]) return SP_OK;
        p += n + 1;
    }
}

void cfg__list_clear(cfg_settings *s, const cfg_key *k) {
    cfg_list *l = (cfg_list *)((char *)s + k->offset);
    for (int i = 0; i < l->n; i++) free(l->items[i]);
    free(l->items);
    *l = (cfg_list){0};
}

void cfg_settings_free(cfg_settings *s) {
    for (int i = 0; i < CFG_KEY_COUNT; i++) {
        const cfg_key *k = &cfg__keys[i];
        if (k->type == CFG_T_STRING) {
            char **p = (char **)((char *)s + k->offset);
            free(*p);
            *p = NULL;
        } else if (k->type == CFG_T_LIST) {
            cfg__list_clear(s, k);
        }
    }
    free(s->_file);
    s->_file = NULL;
}

const cfg_key *cfg__key_find(const char *name) {
    for (int i = 0; i < CFG_KEY_COUNT; i++)
        if (strcmp(cfg__keys[i].name, name) == 0 || strcmp(cfg__keys[i].flag, name) == 0) return &cfg__keys[i];
    return NULL;
}

int cfg__key_index(const cfg_key *k) {
    return (int)(k - cfg__keys);
}

const char *cfg__quote(const char *text, char *buf, size_t cap) {
    enum { SHOWN = 60 };
    size_t o = 0, i = 0;
    for (; text[i] && i < SHOWN && o + 8 < cap; i++) {
        unsigned char c = (unsigned char)text[i];
        if (c < 0x20 || c == 0x7f)
            o += (size_t)snprintf(buf + o, cap - o, "\\x%02x", c);
        else
            buf[o++] = (char)c;
    }
    if (text[i] && o + 4 < cap) o += (size_t)snprintf(buf + o, cap - o, "...");
    buf[o < cap ? o : cap - 1] = '\0';
    return buf;
}

/* INT64_MAX as a double is 2^63: compare the parsed integer against the row's bounds
 * as integers. */
static int64_t bound(double b) {
    return b >= 9.2e18 ? INT64_MAX : (int64_t)b;
}

const char *cfg__expected(const cfg_key *k, char *buf, size_t cap) {
    switch (k->type) {
    case CFG_T_STRING: snprintf(buf, cap, "a string"); break;
    case CFG_T_INT:
        snprintf(buf, cap, "an integer between %lld and %lld", (long long)bound(k->min), (long long)bound(k->max));
        break;
    case CFG_T_FLOAT: snprintf(buf, cap, "a number between %g and %g", k->min, k->max); break;
    case CFG_T_BOOL: snprintf(buf, cap, "true or false"); break;
    case CFG_T_LIST: snprintf(buf, cap, "a list of strings"); break;
    case CFG_T_ENUM: {
        size_t o = (size_t)snprintf(buf, cap, "one of");
        for (int i = 0; k->choices[i] && o < cap; i++)
            o += (size_t)snprintf(buf + o, cap - o, "%s %s", i ? "," : "", k->choices[i]);
        break;
    }
    }
    if (k->optional && k->type != CFG_T_STRING && strlen(buf) + 10 < cap) strcat(buf, " (or null)");
    return buf;
}

static sp_status bad_value(const cfg_key *k, const char *text, bool null, bool quoted) {
    char want[128], got[256];
    if (null)
        return sp_fail(SP_ERR_INVALID_ARG, "expected %s, got nothing (null)", cfg__expected(k, want, sizeof want));
    return sp_fail(SP_ERR_INVALID_ARG, "expected %s, got %s'%s'", cfg__expected(k, want, sizeof want),
                   quoted ? "the string " : "", cfg__quote(text, got, sizeof got));
}

static bool parse_bool(const char *text, bool *out) {
    static const char *const yes[] = {"true", "yes", "on"}, *const no[] = {"false", "no", "off"};
    for (int i = 0; i < 3; i++) {
        if (strcasecmp(text, yes[i]) == 0) return *out = true, true;
        if (strcasecmp(text, no[i]) == 0) return *out = false, true;
    }
    return false;
}

sp_status cfg__set_scalar(cfg_settings *s, const cfg_key *k, const char *text, bool null, bool quoted) {
    void *field = (char *)s + k->offset;
    if (null && k->optional) {
        if (k->type == CFG_T_STRING) {
            free(*(char **)field);
            *(char **)field = NULL;
        } else if (k->type == CFG_T_FLOAT) {
            *(double *)field = NAN;
        } else {
            *(int64_t *)field = CFG_INT_UNSET;
        }
        return SP_OK;
    }
    if (null) return bad_value(k, text, null, quoted);
    switch (k->type) {
    case CFG_T_STRING:
    case CFG_T_LIST: {
        if (k->type == CFG_T_LIST && !text[0]) return bad_value(k, text, null, quoted);
        char *copy = strdup(text);
        if (!copy) return sp_fail(SP_ERR_NOMEM, "out of memory");
        if (k->type == CFG_T_STRING) {
            free(*(char **)field);
            *(char **)field = copy;
            return SP_OK;
        }
        cfg_list *l = field;
        char **items = realloc(l->items, sizeof *items * (size_t)(l->n + 1));
        if (!items) {
            free(copy);
            return sp_fail(SP_ERR_NOMEM, "out of memory");
        }
        l->items = items;
        l->items[l->n++] = copy;
        return SP_OK;
    }
    case CFG_T_INT: {
        char *end;
        errno = 0;
        long long v = strtoll(text, &end, 10);
        if (quoted || errno || end == text || *end || isspace((unsigned char)text[0]) || v < bound(k->min) ||
            v > bound(k->max))
            return bad_value(k, text, null, quoted);
        *(int64_t *)field = v;
        return SP_OK;
    }
    case CFG_T_FLOAT: {
        char *end;
        errno = 0;
        double v = strtod(text, &end);
        if (quoted || errno || end == text || *end || isspace((unsigned char)text[0]) || !isfinite(v) || v < k->min ||
            v > k->max)
            return bad_value(k, text, null, quoted);
        *(double *)field = v;
        return SP_OK;
    }
    case CFG_T_BOOL: {
        bool v;
        if (quoted || !parse_bool(text, &v)) return bad_value(k, text, null, quoted);
        *(bool *)field = v;
        return SP_OK;
    }
    case CFG_T_ENUM:
        for (int i = 0; k->choices[i]; i++) {
            if (strcmp(text, k->choices[i]) == 0) {
                *(int *)field = i; /* the enums' values are the choices' indexes */
                return SP_OK;
            }
        }
        return bad_value(k, text, null, quoted);
    }
    return SP_OK;
}

sp_status cfg_set(cfg_settings *s, const char *key, const char *text) {
    const cfg_key *k = cfg__key_find(key);
    if (!k) return sp_fail(SP_ERR_INVALID_ARG, "--%s: unknown setting", key);
    int i = cfg__key_index(k);
    if (k->type == CFG_T_LIST && !s->_flagged[i]) {
        cfg__list_clear(s, k); /* the command line's list replaces the file's */
        s->_flagged[i] = true;
    }
    sp_status st = cfg__set_scalar(s, k, text, false, false);
    if (st != SP_OK) return sp_fail_prefix(st, "--%s", k->flag);
    s->_line[i] = -1;
    return SP_OK;
}

const char *cfg_origin(const cfg_settings *s, const char *key, char *buf, size_t cap) {
    const cfg_key *k = cfg__key_find(key);
    int line = k ? s->_line[cfg__key_index(k)] : 0;
    if (line > 0)
        snprintf(buf, cap, "%s:%d", s->_file ? s->_file : "the config file", line);
    else if (line < 0)
        snprintf(buf, cap, "--%s", k->flag);
    else
        snprintf(buf, cap, "the default");
    return buf;
}

/* ---- printing: --print-config and --help ---- */

/* A YAML double-quoted scalar. */
static void print_quoted(FILE *out, const char *text) {
    fputc('"', out);
    for (const unsigned char *p = (const unsigned char *)text; *p; p++) {
        /* YAML folds the line breaks U+0085, U+2028 and U+2029 in a quoted scalar */
        if (p[0] == 0xc2 && p[1] == 0x85) {
            fputs("\\u0085", out);
            p++;
        } else if (p[0] == 0xe2 && p[1] == 0x80 && (p[2] == 0xa8 || p[2] == 0xa9)) {
            fprintf(out, "\\u%04x", p[2] == 0xa8 ? 0x2028 : 0x2029);
            p += 2;
        } else if (*p == '"' || *p == '\\')
            fprintf(out, "\\%c", *p);
        else if (*p < 0x20 || *p == 0x7f)
            fprintf(out, "\\x%02x", *p);
        else
            fputc(*p, out);
    }
    fputc('"', out);
}

/* The shortest text that reads back as the same double. */
static void print_double(FILE *out, double v) {
    char buf[40];
    if (v == floor(v) && fabs(v) < 1e15) {
        fprintf(out, "%.0f", v);
        return;
    }
    for (int digits = 1; digits <= 17; digits++) {
        snprintf(buf, sizeof buf, "%.*g", digits, v);
        if (strtod(buf, NULL) == v) break;
    }
    fputs(buf, out);
}

/* k's value: YAML (strings quoted, lists in flow style, unset as null) or plain. */
static void print_value(FILE *out, const cfg_settings *s, const cfg_key *k, bool yaml, bool redact) {
    const void *field = (const char *)s + k->offset;
    switch (k->type) {
    case CFG_T_STRING: {
        const char *v = *(char *const *)field;
        if (!v)
            fputs(yaml ? "null" : "none", out);
        else if (yaml)
            print_quoted(out, v);
        else
            fputs(v, out);
        break;
    }
    case CFG_T_INT:
        if (k->optional && *(const int64_t *)field == CFG_INT_UNSET)
            fputs(yaml ? "null" : "none", out);
        else
            fprintf(out, "%lld", (long long)*(const int64_t *)field);
        break;
    case CFG_T_FLOAT:
        if (isnan(*(const double *)field))
            fputs(yaml ? "null" : "none", out);
        else
            print_double(out, *(const double *)field);
        break;
    case CFG_T_BOOL: fputs(*(const bool *)field ? "true" : "false", out); break;
    case CFG_T_ENUM: fputs(k->choices[*(const int *)field], out); break;
    case CFG_T_LIST: {
        const cfg_list *l = field;
        fputc('[', out);
        for (int i = 0; i < l->n; i++) {
            if (i) fputs(", ", out);
            print_quoted(out, redact ? "<redacted>" : l->items[i]);
        }
        fputc(']', out);
        break;
    }
    }
}

void cfg_print(const cfg_settings *s, FILE *out) {
    fprintf(out, "# spindle serve settings (defaults, then %s, then the command line)\n",
            s->_file ? s->_file : "no config file");
    for (int i = 0; i < CFG_KEY_COUNT; i++) {
        const cfg_key *k = &cfg__keys[i];
        fprintf(out, "%s: ", k->name);
        print_value(out, s, k, true, strcmp(k->name, "api_keys") == 0);
        char where[300];
        if (s->_line[i] != 0) fprintf(out, "  # %s", cfg_origin(s, k->name, where, sizeof where));
        fputc('\n', out);
    }
}

void cfg_print_usage(FILE *out) {
    cfg_settings d;
    cfg_settings_init(&d);
    for (int i = 0; i < CFG_KEY_COUNT; i++) {
        const cfg_key *k = &cfg__keys[i];
        char lhs[80];
        if (k->type == CFG_T_BOOL)
            snprintf(lhs, sizeof lhs, "--%s", k->flag);
        else if (k->type == CFG_T_ENUM) {
            size_t o = (size_t)snprintf(lhs, sizeof lhs, "--%s ", k->flag);
            for (int c = 0; k->choices[c] && o < sizeof lhs; c++)
                o += (size_t)snprintf(lhs + o, sizeof lhs - o, "%s%s", c ? "|" : "", k->choices[c]);
        } else
            snprintf(lhs, sizeof lhs, "--%s %s", k->flag, k->arg);
        fprintf(out, "  %-32s %s ", lhs, k->help);
        if (k->optional)
            fputs(k->unset, out);
        else if (k->type == CFG_T_LIST)
            fputs("(default: none)", out);
        else {
            fputs("(default ", out);
            print_value(out, &d, k, false, false);
            fputc(')', out);
        }
        fputc('\n', out);
    }
    fputs("  (each on/off flag has a --no- form: --no-access-log)\n", out);
    cfg_settings_free(&d);
}
