/* cfg.h: every setting of `spindle serve` in one validated struct, merged from three
 * layers: the defaults, a YAML file (--config PATH, or /etc/spindle/spindle.yaml when
 * present) and the command-line flags, each overriding the one before. YAML keys are
 * the long flag names with '_' for '-' (--max-batch-size is max_batch_size); the
 * repeatable flags are plural lists in YAML (--api-key: api_keys, --cors-origin:
 * cors_origins, --served-model-name: served_model_names). Every value is checked against the same type and range
 * wherever it comes from; a bad value is an error naming where it came from
 * ("spindle.yaml:12: key 'max_batch_size': expected an integer between 1 and 4096,
 * got 'lots'", "--port: expected ..."), never a warning.
 *
 * The module knows nothing of the server or the scheduler: cli/cmd_serve.c copies
 * the settings into srv_http_config and sched_config. Main thread only.
 */
#ifndef SP_CONFIG_CFG_H
#define SP_CONFIG_CFG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "common/kinds.h"
#include "common/status.h"

/* The model used when neither the file nor --model names one (every command's
 * default; `make run` serves it). */
#define CFG_DEFAULT_MODEL "models/SmolLM2-135M-Instruct.Q4_1.gguf"
/* The file read when --config is not given, if it exists. */
#define CFG_DEFAULT_PATH "/etc/spindle/spindle.yaml"
/* How many settings there are (the rows of cfg.c's key table). */
#define CFG_KEY_COUNT 83

/* The device, the CUDA GEMV mode, the CPU kernel set, the KV cache's element format,
 * the policy, the pooling and the log format: sp_device, sp_cuda_gemv, sp_cpu_isa,
 * sp_kv_type, sp_policy, sp_pooling and sp_log_format (common/kinds.h), the types the
 * device, the scheduler and the server take. */

typedef enum cfg_json_whitespace { CFG_JSON_COMPACT, CFG_JSON_FLEXIBLE } cfg_json_whitespace;
typedef enum cfg_metrics_names { CFG_METRICS_SPINDLE, CFG_METRICS_VLLM } cfg_metrics_names;
/* Who shares prefix cache blocks: every request (global), or only requests of one API key. */
typedef enum cfg_prefix_cache_scope { CFG_PREFIX_CACHE_GLOBAL, CFG_PREFIX_CACHE_KEY } cfg_prefix_cache_scope;

/* A list setting (api_keys, cors_origins): n strings, each owned by the list. */
typedef struct cfg_list {
    char **items; /* (n) */
    int n;
} cfg_list;

/* Every setting, with the flag and YAML key it comes from. Strings and lists are owned
 * by the struct (free with cfg_settings_free); NULL strings are unset. Owned by the
 * main thread. */
/* An optional integer setting left unset (null in YAML, the flag not given): a value no
 * key accepts, so that 0 stays a value (--top-k 0: off). */
#define CFG_INT_UNSET INT64_MIN

typedef struct cfg_settings {
    /* the model */
    char *model;                 /* --model, model */
    cfg_list served_model_names; /* --served-model-name (repeatable); none: the file name without .gguf */
    char *chat_template;         /* Jinja file; NULL: the model's own template */
    sp_device device;
    bool cuda_graphs;       /* on a GPU: decode steps replayed as captured graphs */
    sp_cuda_gemv cuda_gemv; /* on a GPU: when small matmuls read quantized blocks directly */
    sp_cpu_isa cpu_isa;     /* on the CPU: the kernel set (auto: the best this CPU runs) */
    int64_t threads;        /* CPU threads; CFG_INT_UNSET: all cores */
    int64_t ctx_size;       /* context limit per sequence; CFG_INT_UNSET: the model's training context */
    /* HTTP */
    char *host;
    int64_t port; /* 0: any free port */
    int64_t http_threads;
    int64_t prep_threads;
    int64_t max_body_bytes;
    int64_t max_connections;
    int64_t max_connections_per_client; /* open connections from one address; 0: no limit */
    int64_t idle_timeout;               /* seconds a connection may stay quiet (not while generating) */
    int64_t header_timeout;             /* seconds a request's headers may take in all */
    int64_t body_timeout;               /* seconds its body may take in all, from its headers */
    int64_t admin_port;                 /* a second port for /health, /ready, /metrics only; 0: none */
    double keepalive;                   /* seconds of quiet before an SSE comment */
    int64_t max_header_bytes;
    /* the scheduler */
    int64_t kv_cache_mb;
    double gpu_memory_fraction; /* on a GPU, instead of kv_cache_mb */
    int64_t block_size;
    sp_kv_type kv_type; /* the KV cache's element format */
    int64_t max_batch_size;
    int64_t max_batch_tokens;
    int64_t max_prefill_tokens;
    int64_t queue_max_requests;
    int64_t queue_max_tokens;
    sp_policy policy;
    double ttft_slo_ms; /* latency targets of requests that give none; 0: none */
    double tpot_slo_ms;
    double request_timeout; /* seconds; 0: none */
    bool prefix_cache;      /* share computed KV blocks of equal prefixes */
    int64_t kv_host_mb;     /* the prefix cache's host-memory tier; 0: none */
    char *kv_disk_dir;      /* its disk tier's directory; NULL: none */
    double kv_disk_gb;      /* the disk tier's budget */
    bool kv_disk_persist;   /* the disk tier survives restarts */
    /* who shares the prefix cache: every request, or the requests of one API key */
    cfg_prefix_cache_scope prefix_cache_scope;
    /* speculative decoding */
    char *speculative;         /* off, auto, or a comma list of proposers (cfg_speculative) */
    int64_t spec_k;            /* most draft tokens per sequence and step */
    int64_t spec_ngram_min;    /* n-gram lookup: shortest match */
    int64_t spec_ngram_max;    /* and longest */
    int64_t spec_suffix_mb;    /* the suffix cache's budget */
    char *draft_model;         /* a smaller model of the same vocabulary that drafts; NULL: none */
    int64_t draft_kv_cache_mb; /* its KV pool */
    int64_t self_spec_layers;  /* > 0: the model's first this many layers draft; 0: no self-speculation */
    bool spec_gate;            /* weigh each proposer's cost (the gate); false: draft whenever a proposer can */
    /* request limits */
    int64_t max_n;                     /* most choices a request may ask for (n) */
    int64_t max_sequences_per_request; /* prompts times n; 0: no bound */
    int64_t max_request_tokens;        /* prompt tokens summed, times n; 0: the context times n */
    int64_t max_tokens;                /* largest max_tokens a request may ask for; 0: the context */
    int64_t default_max_tokens;        /* max_tokens of a request without one; 0: what the context leaves */
    /* sampling defaults for requests that leave a field out; NAN (CFG_INT_UNSET for top_k): unset,
     * then the GGUF's general.sampling.* where present, else the API's defaults */
    double temperature;
    double top_p;
    int64_t top_k;
    double min_p;
    double repeat_penalty;
    /* the other APIs */
    int64_t responses_store_mb;  /* stored /v1/responses; 0: none stored */
    int64_t responses_store_max; /* and their count */
    int64_t responses_store_ttl; /* seconds each is kept */
    sp_pooling pooling;          /* /v1/embeddings; NONE: auto */
    bool ui;                     /* the chat page at / */
    /* each API key's share of the stored /v1/responses; 0: the whole store */
    int64_t responses_store_key_mb;
    cfg_metrics_names metrics_names;
    /* constrained output: bounds on what one constraint compiles to (grammar.h's gram_limits) */
    int64_t grammar_max_rules;
    int64_t grammar_max_states;                  /* automaton states (elements) of all rules together */
    int64_t grammar_max_depth;                   /* stack nesting while matching (JSON nesting and the like) */
    int64_t grammar_schema_max_depth;            /* nesting of JSON Schema subschemas and $refs */
    cfg_json_whitespace grammar_json_whitespace; /* JSON from a schema: none, or optional between tokens */
    /* security */
    cfg_list api_keys;  /* --api-key (repeatable), api_keys */
    char *api_key_file; /* one key per line; NULL: none */
    bool metrics_require_key;
    cfg_list cors_origins; /* --cors-origin (repeatable), cors_origins; none: CORS off */
    char *tls_cert;        /* PEM files; both set: HTTPS */
    char *tls_key;
    /* logging */
    sp_log_format log_format;
    bool access_log;
    bool log_prompts;
    /* readiness and drain */
    double drain_timeout;        /* seconds in-flight work gets after SIGTERM */
    double ready_queue_fraction; /* /ready is 503 above this fraction of the queue bounds */
    /* private: where each setting came from (cfg_origin) */
    char *_file;                  /* the config file read, or NULL */
    int _line[CFG_KEY_COUNT];     /* 0: default, -1: command line, else the file's line */
    bool _flagged[CFG_KEY_COUNT]; /* a list key given on the command line (it replaces the file's) */
} cfg_settings;

/* The proposers `speculative` names: "off" (none), "auto" (every one available: draft
 * only with draft_model, self only with self_spec_layers), or a comma list of ngram,
 * suffix, draft (which needs draft_model), self (which needs self_spec_layers). Checks
 * spec_ngram_min <= spec_ngram_max too. A bad value fails naming the flag. */
typedef struct cfg_proposers {
    bool ngram, suffix, draft, self;
} cfg_proposers;
sp_status cfg_speculative(const cfg_settings *s, cfg_proposers *out);

/* Fills s with the defaults (those of `spindle serve --help`). Free with
 * cfg_settings_free. */
void cfg_settings_init(cfg_settings *s);
void cfg_settings_free(cfg_settings *s);

/* Applies the YAML file at path over s. Errors (SP_ERR_IO for an unreadable file,
 * SP_ERR_INVALID_ARG for everything else) name the file, the line and the key:
 * syntax errors, a document that is not a mapping, unknown and duplicate keys, wrong
 * types (a list where a scalar is expected and the reverse, a quoted string where a
 * number or a bool is expected), values out of range. On error s holds the settings
 * applied before the bad one; still free it with cfg_settings_free. */
sp_status cfg_load_file(cfg_settings *s, const char *path);
/* The same from len bytes of text; name is what messages call the file. */
sp_status cfg_load_yaml(cfg_settings *s, const char *name, const char *text, size_t len);

/* Sets one setting from text as the command line gives it ("--port 8080" is
 * cfg_set(s, "port", "8080"); a list key appends one item). key is the YAML key or
 * the flag name without "--". SP_ERR_INVALID_ARG naming the flag when the key is
 * unknown or the value is bad. */
sp_status cfg_set(cfg_settings *s, const char *key, const char *text);

typedef enum cfg_action {
    CFG_ACTION_RUN,         /* serve with s */
    CFG_ACTION_HELP,        /* --help: print cfg_print_usage, exit 0 */
    CFG_ACTION_PRINT_CONFIG /* --print-config: print cfg_print, exit 0 */
} cfg_action;

/* The whole command line of `spindle serve` (argv[0] is the command's name): reads the
 * file of --config (else default_path when that file exists; NULL: none), then
 * applies the flags over it. A repeatable flag on the command line replaces the
 * file's list. s must come from cfg_settings_init. Errors: SP_ERR_IO (the file cannot
 * be read), SP_ERR_INVALID_ARG (a bad file, flag or value; the message names it). */
sp_status cfg_parse_args(cfg_settings *s, int argc, char **argv, const char *default_path, cfg_action *action);

/* Writes s as YAML that cfg_load_file reads back to the same settings: every key, in
 * the table's order, a comment saying where a value came from when it is not the
 * default. API keys are written as "<redacted>". */
void cfg_print(const cfg_settings *s, FILE *out);
/* Writes the option lines of `spindle serve --help`, one per flag, with defaults. */
void cfg_print_usage(FILE *out);

/* Where key's value came from: "spindle.yaml:12", "--port" or "the default". Returns
 * buf (cap bytes). */
const char *cfg_origin(const cfg_settings *s, const char *key, char *buf, size_t cap);

#endif
