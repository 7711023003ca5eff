/* cmd_serve.c: `spindle serve` (and plain `spindle`): the daemon's main thread.
 * Parses the flags, starts listening (so /health answers 503 while loading), loads
 * the model, starts the scheduler, then waits for SIGINT/SIGTERM and shuts down in
 * order: drain (refuse new work, let accepted work finish for drain_timeout), end
 * what is left with an error event, let the answers go out, stop listening, free. A
 * second SIGINT/SIGTERM during the drain ends everything at once.
 *
 * DESIGN (threads): SIGINT, SIGTERM and SIGHUP are blocked before any thread starts,
 * so every thread inherits the mask and only this thread takes them (sigwait).
 */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "config/cfg.h"
#include "cli/cli.h"
#include "server/http/http.h"

typedef struct serve_args {
    cfg_settings cfg; /* every setting (config/cfg.h); owns the strings below */
    const char *model;
    const char *chat_template;
    const char *served_name;
    long threads;
    long ctx_size;
    srv_http_config http;
    sched_config sched;
} serve_args;

static void serve_usage(FILE *out) {
    fprintf(out,
            "usage: spindle [serve] [options]\n"
            "\n"
            "Serves one GGUF model over the OpenAI API (/v1/chat/completions, /v1/completions,\n"
            "/v1/responses, /v1/embeddings, /v1/models), Anthropic's (/v1/messages), /tokenize,\n"
            "/detokenize, /health, /ready, /metrics and a chat page at /.\n"
            "\n"
            "  %-32s YAML settings (default %s when it exists); flags override it\n"
            "  %-32s print the merged settings as YAML and exit\n",
            "--config PATH", CFG_DEFAULT_PATH, "--print-config");
    cfg_print_usage(out);
    fprintf(out, "\nEvery flag is also a key of the config file, with '_' for '-' (--max-batch-size:\n"
                 "max_batch_size; --api-key and --cors-origin: the lists api_keys and cors_origins).\n"
                 "See docs/configuration.md and config/spindle.yaml.\n");
}

static void serve_args_free(serve_args *a) {
    cfg_settings_free(&a->cfg);
}

/* Copies the settings into the transport's and the scheduler's configs (a->cfg keeps
 * owning the strings and lists they point to). */
static void serve_args_fill(serve_args *a) {
    const cfg_settings *c = &a->cfg;
    a->model = c->model;
    a->chat_template = c->chat_template;
    a->served_name = c->served_model_names.n > 0 ? c->served_model_names.items[0] : NULL;
    a->threads = c->threads == CFG_INT_UNSET ? 0 : (long)c->threads;
    a->ctx_size = c->ctx_size == CFG_INT_UNSET ? 0 : (long)c->ctx_size;
    a->http = (srv_http_config){
        .host = c->host,
        .port = (int)c->port,
        .http_threads = (int)c->http_threads,
        .prep_threads = (int)c->prep_threads,
        .max_body_bytes = (size_t)c->max_body_bytes,
        .max_connections = (int)c->max_connections,
        .keepalive_s = c->keepalive,
        .connection_timeout = (int)c->idle_timeout,
        .header_timeout = (int)c->header_timeout,
        .body_timeout = (int)c->body_timeout,
        .max_connections_per_client = (int)c->max_connections_per_client,
        .admin_port = (int)c->admin_port,
        .max_header_bytes = (size_t)c->max_header_bytes,
        .api_keys = (const char *const *)c->api_keys.items,
        .n_api_keys = c->api_keys.n,
        .api_key_file = c->api_key_file,
        .metrics_require_key = c->metrics_require_key,
        .cors_origins = (const char *const *)c->cors_origins.items,
        .n_cors_origins = c->cors_origins.n,
        .tls_cert_file = c->tls_cert,
        .tls_key_file = c->tls_key,
        .log_format = c->log_format,
        .access_log = c->access_log,
        .log_prompts = c->log_prompts,
        .drain_timeout_s = c->drain_timeout,
        .ready_queue_fraction = c->ready_queue_fraction,
        .metrics_vllm = c->metrics_names == CFG_METRICS_VLLM,
        .ui = c->ui,
        .responses_store_bytes = (size_t)c->responses_store_mb << 20,
        .responses_store_key_bytes = (size_t)c->responses_store_key_mb << 20,
        .responses_store_max = (int)c->responses_store_max,
        .responses_store_ttl_s = (double)c->responses_store_ttl,
    };
    a->sched = sched_config_default();
    a->sched.kv_cache_mb = c->kv_cache_mb;
    a->sched.gpu_memory_fraction = c->gpu_memory_fraction;
    a->sched.prefix_cache = c->prefix_cache;
    a->sched.prefix_cache_keyed = c->prefix_cache_scope == CFG_PREFIX_CACHE_KEY;
    a->sched.kv_host_mb = c->kv_host_mb;
    a->sched.kv_disk_dir = c->kv_disk_dir;
    a->sched.kv_disk_gb = c->kv_disk_gb;
    a->sched.kv_disk_persist = c->kv_disk_persist;
    a->sched.model_path = c->model;
    a->sched.block_size = (int)c->block_size;
    a->sched.kv_type = c->kv_type;
    a->sched.max_batch_size = (int)c->max_batch_size;
    a->sched.max_batch_tokens = (int)c->max_batch_tokens;
    a->sched.max_prefill_tokens = (int)c->max_prefill_tokens;
    a->sched.queue_max_requests = (int)c->queue_max_requests;
    a->sched.queue_max_tokens = c->queue_max_tokens;
    a->sched.policy = c->policy;
    a->sched.ttft_slo_ms = c->ttft_slo_ms;
    a->sched.tpot_slo_ms = c->tpot_slo_ms;
    a->sched.request_timeout_s = c->request_timeout;
    a->sched.spec_k = (int)c->spec_k;
    a->sched.spec_ngram_min = (int)c->spec_ngram_min;
    a->sched.spec_ngram_max = (int)c->spec_ngram_max;
    a->sched.spec_suffix_bytes = c->spec_suffix_mb << 20;
    /* serve_parse checked the proposer list; serve_load loads the draft model */
    cfg_proposers use;
    (void)cfg_speculative(c, &use);
    a->sched.spec_ngram = use.ngram;
    a->sched.spec_suffix = use.suffix;
    a->sched.spec_draft = use.draft;
    a->sched.draft_kv_cache_mb = c->draft_kv_cache_mb;
    a->sched.self_spec_layers = use.self ? (int)c->self_spec_layers : 0;
    a->sched.spec_gate = c->spec_gate;
}

/* Defaults, then the config file, then the flags (config/cfg.h). Returns -1 when the
 * server should start (free a with serve_args_free), else the exit status (a holds
 * nothing). */
static int serve_parse(int argc, char **argv, serve_args *a) {
    *a = (serve_args){0};
    cfg_settings *c = &a->cfg;
    cfg_settings_init(c);
    cfg_action action;
    int rc = -1;
    sp_status st = cfg_parse_args(c, argc, argv, CFG_DEFAULT_PATH, &action);
    if (st == SP_OK && (!c->model || !c->host)) st = sp_fail(SP_ERR_NOMEM, "out of memory");
    cfg_proposers use;
    if (st == SP_OK && action == CFG_ACTION_RUN) st = cfg_speculative(c, &use);
    if (st != SP_OK) {
        fprintf(stderr, "spindle: error: %s\n", sp_last_error());
        rc = cmd_exit_status(st);
    } else if (action == CFG_ACTION_HELP) {
        serve_usage(stdout);
        rc = 0;
    } else if (action == CFG_ACTION_PRINT_CONFIG) {
        cfg_print(c, stdout);
        rc = 0;
    }
    if (rc >= 0) {
        serve_args_free(a);
        return rc;
    }
    serve_args_fill(a);
    return -1;
}

/* Thousands of open streams need as many descriptors: take the hard limit. */
static void raise_fd_limit(int wanted) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return;
    if (rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
        getrlimit(RLIMIT_NOFILE, &rl);
    }
    if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < (rlim_t)wanted + 64)
        sp_log_warn("open file limit %llu is below --max-connections %d: raise it (ulimit -n) for that many clients",
                    (unsigned long long)rl.rlim_cur, wanted);
}

/* "dir/SmolLM2.Q4_1.gguf" -> file name "SmolLM2.Q4_1.gguf", served name "SmolLM2.Q4_1". */
static void model_names(const char *path, const char *override, char *file, size_t file_cap, char *served,
                        size_t served_cap) {
    const char *slash = strrchr(path, '/');
    snprintf(file, file_cap, "%s", slash ? slash + 1 : path);
    if (override) {
        snprintf(served, served_cap, "%s", override);
        return;
    }
    snprintf(served, served_cap, "%s", file);
    size_t n = strlen(served);
    if (n > 5 && strcmp(served + n - 5, ".gguf") == 0) served[n - 5] = '\0';
}

/* /v1/embeddings' pooling: --pooling, or for auto the GGUF's <arch>.pooling_type in
 * llama.cpp's numbering (1 mean, 2 cls, 3 last) when it names one of those, else mean. */
static sp_pooling serve_pooling(sp_pooling p, const gguf_file *f, const char *arch) {
    if (p != SP_POOLING_NONE) return p;
    char key[64];
    uint32_t type = 0;
    snprintf(key, sizeof key, "%s.pooling_type", arch);
    if (gguf_get_u32(f, key, &type) == SP_OK && (type == 2 || type == 3))
        return type == 2 ? SP_POOLING_CLS : SP_POOLING_LAST;
    return SP_POOLING_MEAN;
}

/* The sampling a request gets for the fields it leaves out: a flag or config key when
 * set, else the GGUF's general.sampling.* (the model's recommended values) when
 * present, else the API's defaults. The start line says which. */
static void sampling_defaults(const cfg_settings *c, const gguf_file *f, sample_params *out, char *said, size_t cap) {
    *out = sample_params_default();
    struct {
        const char *name, *key;
        double flag;
        float *dst;
    } floats[] = {
        {"temperature", "general.sampling.temp", c->temperature, &out->temperature},
        {"top_p", "general.sampling.top_p", c->top_p, &out->top_p},
        {"min_p", "general.sampling.min_p", c->min_p, &out->min_p},
        {"repetition_penalty", "general.sampling.penalty_repeat", c->repeat_penalty, &out->repetition_penalty}};
    size_t o = 0;
    said[0] = '\0';
    for (size_t i = 0; i < sizeof floats / sizeof floats[0]; i++) {
        float v;
        const char *from = "default";
        if (!isnan(floats[i].flag)) {
            *floats[i].dst = (float)floats[i].flag;
            from = "setting";
        } else if (gguf_get_f32(f, floats[i].key, &v) == SP_OK && isfinite(v)) {
            *floats[i].dst = v;
            from = "model file";
        }
        o += (size_t)snprintf(said + o, o < cap ? cap - o : 0, "%s%s %g (%s)", i ? ", " : "", floats[i].name,
                              (double)*floats[i].dst, from);
    }
    uint32_t k = 0;
    const char *from = "default";
    if (c->top_k != CFG_INT_UNSET) { /* 0 too: --top-k 0 turns the file's off */
        out->top_k = (int)c->top_k;
        from = "setting";
    } else if (gguf_get_u32(f, "general.sampling.top_k", &k) == SP_OK && k <= INT32_MAX) {
        out->top_k = (int)k;
        from = "model file";
    }
    snprintf(said + o, o < cap ? cap - o : 0, ", top_k %d (%s)", out->top_k, from);
}

typedef struct serve_state {
    dev_backend *dev;
    model *model;
    model *draft; /* --draft-model, or NULL */
    srv_http *http;
    char file_name[256];
    char served_name[256];
    sample_params sampling; /* app->model.sampling_defaults points here */
    srv_notify *notify;     /* systemd (notify.c): the watchdog and STATUS= thread */
} serve_state;

/* Loads the model and starts the scheduler; the app becomes READY. */
static sp_status serve_load(const serve_args *a, srv_app *app, serve_state *s) {
    dev_options dopts = {
        .kind = a->cfg.device,
        .n_threads = (int)a->threads,
        .cpu_isa = a->cfg.cpu_isa,
        .no_graphs = !a->cfg.cuda_graphs,
        .quant_gemv = a->cfg.cuda_gemv,
    };
    sp_status st = dev_create(&dopts, &s->dev);
    if (st != SP_OK) return st;
    model_options mopts = {.max_batch_tokens = a->sched.max_batch_tokens};
    if ((st = model_load(a->model, s->dev, &mopts, &s->model)) != SP_OK) return st;
    const model_hparams *hp = model_get_hparams(s->model);
    sched_config cfg = a->sched;
    if (a->cfg.draft_model && cfg.spec_draft) {
        if ((st = model_load(a->cfg.draft_model, s->dev, &mopts, &s->draft)) != SP_OK)
            return sp_fail_prefix(st, "--draft-model");
        cfg.draft_model = s->draft;
    }
    if (a->ctx_size > hp->n_ctx_train) {
        return sp_fail(SP_ERR_RANGE, "--ctx-size %ld exceeds the model's training context of %d tokens", a->ctx_size,
                       hp->n_ctx_train);
    }
    cfg.max_seq_len = a->ctx_size > 0 ? (int32_t)a->ctx_size : hp->n_ctx_train;
    if ((st = sched_config_validate(&cfg)) != SP_OK) return st;
    if ((st = sched_create(&cfg, s->model, &app->sched)) != SP_OK) return st;
    const sched_config *live = sched_get_config(app->sched); /* the context may shrink to the KV pool */
    model_names(a->model, a->served_name, s->file_name, sizeof s->file_name, s->served_name, sizeof s->served_name);
    app->model = (srv_model_info){
        .served_name = s->served_name,
        .aliases = (const char *const *)a->cfg.served_model_names.items + (a->cfg.served_model_names.n > 0),
        .n_aliases = a->cfg.served_model_names.n > 0 ? a->cfg.served_model_names.n - 1 : 0,
        .file_name = s->file_name,
        .vocab = model_vocab(s->model),
        .max_seq_len = live->max_seq_len,
        .max_n = (int)a->cfg.max_n,
        .max_sequences = (int)a->cfg.max_sequences_per_request,
        .max_request_tokens = a->cfg.max_request_tokens,
        .max_tokens = (int32_t)a->cfg.max_tokens,
        .default_max_tokens = (int32_t)a->cfg.default_max_tokens,
        .grammar_limits = {.max_rules = (int32_t)a->cfg.grammar_max_rules,
                           .max_elements = (int32_t)a->cfg.grammar_max_states,
                           .max_depth = (int32_t)a->cfg.grammar_max_depth,
                           .max_stacks = gram_limits_default().max_stacks},
        .schema_max_depth = (int32_t)a->cfg.grammar_schema_max_depth,
        .json_flexible = a->cfg.grammar_json_whitespace == CFG_JSON_FLEXIBLE,
        .created = (int64_t)time(NULL),
        .cpu_kernels = dev_cpu_kernels(s->dev) != SP_CPU_ISA_AUTO ? sp_cpu_isa_name(dev_cpu_kernels(s->dev)) : NULL};
    char sampling_said[400];
    sampling_defaults(&a->cfg, model_gguf(s->model), &s->sampling, sampling_said, sizeof sampling_said);
    if (sample_params_validate(&s->sampling, hp->n_vocab) != SP_OK)
        return sp_fail(SP_ERR_INVALID_ARG, "the default sampling is invalid: %s", sp_last_error());
    app->model.sampling_defaults = &s->sampling;
    app->model.pooling = serve_pooling(a->cfg.pooling, model_gguf(s->model), hp->arch_name);
    if ((st = srv_model_info_init_template(&app->model, model_gguf(s->model), a->chat_template)) != SP_OK) return st;
    if ((st = srv_grammar_cache_create(&app->model.grammars)) != SP_OK) return st;
    app->model.grammar_vocab = sched_grammar_vocab(app->sched);
    if (a->http.responses_store_bytes > 0 &&
        (st = srv_response_store_create(a->http.responses_store_bytes, a->http.responses_store_max,
                                        a->http.responses_store_ttl_s, &app->model.responses)) != SP_OK)
        return st;
    srv_response_store_set_key_bytes(app->model.responses, a->http.responses_store_key_bytes);
    if ((st = sched_start(app->sched)) != SP_OK) return st;
    sp_log_info("model %s (%s, %d layers, vocab %d) on %s; context %d; KV cache %lld MiB in blocks of %d; batch %d "
                "sequences / %d tokens, prefill %d tokens per step; queue %d requests / %lld tokens; policy %s",
                s->served_name, hp->arch_name, hp->n_layers, hp->n_vocab, dev_name(s->dev), live->max_seq_len,
                (long long)live->kv_cache_mb, live->block_size, live->max_batch_size, live->max_batch_tokens,
                live->max_prefill_tokens, live->queue_max_requests, (long long)live->queue_max_tokens,
                sp_policy_name(live->policy));
    sched_stats kv_st;
    sched_get_stats(app->sched, &kv_st);
    sp_log_info("KV memory: %lld bytes per token (%s K and V over %d layers), %lld KiB per full-context sequence; "
                "the pool holds %d blocks (%lld tokens)",
                (long long)kv_st.kv_bytes_per_token, sp_kv_type_name(live->kv_type), hp->n_layers,
                (long long)kv_st.kv_bytes_per_token * live->max_seq_len >> 10, kv_st.kv_blocks_total,
                (long long)kv_st.kv_blocks_total * live->block_size);
    sp_log_info("sampling of requests that leave it out: %s", sampling_said);
    return SP_OK;
}

/* Refuses new work, ends the accepted work, lets the answers go out (up to
 * grace_s), stops listening. */
static void serve_shutdown(srv_app *app, serve_state *s, double grace_s) {
    srv_notify_stop(s->notify); /* systemd (notify.c): its thread ends before the scheduler */
    s->notify = NULL;
    srv_notify_stopping(); /* systemd: STOPPING=1 */
    pthread_rwlock_wrlock(&app->lifecycle);
    int phase = atomic_load(&app->phase);
    if (phase == SRV_PHASE_READY || phase == SRV_PHASE_DRAINING) atomic_store(&app->phase, SRV_PHASE_SHUTTING_DOWN);
    sched *sc = app->sched;
    app->sched = NULL;
    pthread_rwlock_unlock(&app->lifecycle);
    if (sc) {
        sched_begin_shutdown(sc);
        sched_destroy(sc); /* every unfinished request ends with an error event */
    }
    double until = sched_now() + grace_s;
    while (atomic_load(&app->live_generations) > 0 && sched_now() < until) usleep(10 * 1000);
    srv_http_stop(s->http);
    s->http = NULL;
    srv_watch_destroy(app->watch);
    app->watch = NULL;
}

/* SIGTERM/SIGINT: stop admitting (new requests 503 with Retry-After, /ready 503) and
 * give the accepted requests up to timeout_s to finish. Returns false when a second
 * SIGINT/SIGTERM asked to exit at once. */
static bool serve_drain(srv_app *app, const sigset_t *signals, double timeout_s) {
    pthread_rwlock_wrlock(&app->lifecycle); /* no handler is between its phase check and its submit */
    atomic_store(&app->phase, SRV_PHASE_DRAINING);
    pthread_rwlock_unlock(&app->lifecycle);
    double t0 = sched_now();
    long in_flight = atomic_load(&app->live_generations);
    sp_log_info("draining: %ld requests in flight, up to %.0f s", in_flight, timeout_s);
    while ((in_flight = atomic_load(&app->live_generations)) > 0 && sched_now() - t0 < timeout_s) {
        struct timespec wait = {.tv_sec = 0, .tv_nsec = 20 * 1000 * 1000};
        int sig = sigtimedwait(signals, NULL, &wait);
        if (sig == SIGINT || sig == SIGTERM) {
            sp_log_info("%s again: ending %ld requests now", sig == SIGINT ? "SIGINT" : "SIGTERM", in_flight);
            return false;
        }
        if (sig == SIGHUP) sp_log_info("SIGHUP while draining: ignored");
    }
    if (in_flight > 0)
        sp_log_warn("drain timeout (%.0f s): ending %ld requests with an error", timeout_s, in_flight);
    else
        sp_log_info("drained in %.2f s", sched_now() - t0);
    return true;
}

int cmd_serve(int argc, char **argv) {
    serve_args a;
    int rc = serve_parse(argc, argv, &a);
    if (rc >= 0) return rc;
    if (access(a.model, R_OK) != 0) {
        fprintf(stderr, "spindle: error: %s: cannot read the model file (run `make setup` for the default model)\n",
                a.model);
        serve_args_free(&a);
        return 2;
    }
    /* on the CPU a kernel set the machine lacks is refused before anything starts (with
     * --device auto the backend refuses it, should the CPU be chosen) */
    if (a.cfg.device == SP_DEVICE_CPU && dev_cpu_isa_check(a.cfg.cpu_isa) != SP_OK) {
        fprintf(stderr, "spindle: error: --cpu-isa (cpu_isa): %s\n", sp_last_error());
        serve_args_free(&a);
        return 2;
    }

    sigset_t signals;
    sigemptyset(&signals);
    sigaddset(&signals, SIGINT);
    sigaddset(&signals, SIGTERM);
    sigaddset(&signals, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &signals, NULL);
    signal(SIGPIPE, SIG_IGN);
    raise_fd_limit(a.http.max_connections);
    if (a.sched.prefix_cache_keyed && a.http.n_api_keys == 0 && !a.http.api_key_file)
        sp_log_warn("--prefix-cache-scope key without API keys: every request is one tenant, so the prefix cache "
                    "is shared as with global (a request's cache_salt still scopes it)");

    srv_app app = {.http = a.http};
    /* writers first: a steady flow of submits must not hold off the shutdown */
    pthread_rwlockattr_t rwattr;
    pthread_rwlockattr_init(&rwattr);
    pthread_rwlockattr_setkind_np(&rwattr, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    pthread_rwlock_init(&app.lifecycle, &rwattr);
    pthread_rwlockattr_destroy(&rwattr);
    atomic_store(&app.phase, SRV_PHASE_LOADING);
    serve_state s = {0};
    sp_status st = srv_watch_create(a.http.keepalive_s, &app.watch);
    if (st == SP_OK) st = srv_http_start(&app, &s.http);
    if (st != SP_OK) {
        fprintf(stderr, "spindle: error: %s\n", sp_last_error());
        srv_watch_destroy(app.watch);
        serve_args_free(&a);
        return cmd_exit_status(st);
    }
    const char *scheme = a.http.tls_cert_file ? "https" : "http";
    sp_log_info("listening on %s://%s:%d (loading %s)", scheme, a.http.host, srv_http_port(s.http), a.model);
    if (srv_http_admin_port(s.http))
        sp_log_info("admin port (/health, /ready, /metrics): http://%s:%d", a.http.host, srv_http_admin_port(s.http));

    double t0 = sched_now();
    bool graceful = true;
    st = serve_load(&a, &app, &s);
    /* security (auth.c): the API keys, before READY; a bad key file fails the start */
    srv_auth *auth = NULL;
    if (st == SP_OK && (st = srv_auth_create(&app.http, &auth)) == SP_OK) app.auth = auth;
    if (st == SP_OK) {
        atomic_store(&app.phase, SRV_PHASE_READY);
        /* systemd (notify.c): READY=1 (listening, model loaded), then the watchdog/STATUS= thread */
        srv_notify_ready(&app);
        if (srv_notify_start(&app, &s.notify) != SP_OK) sp_log_warn("%s", sp_last_error());
        sp_log_info("ready in %.2f s: %s://%s:%d/v1", sched_now() - t0, scheme, a.http.host, srv_http_port(s.http));
        int sig = 0;
        /* SIGHUP: reload the API key file (auth.c; a failed reload keeps the old keys) */
        while (sigwait(&signals, &sig) == 0 && sig == SIGHUP) srv_auth_reload(app.auth);
        sp_log_info("%s: shutting down", sig == SIGINT ? "SIGINT" : "SIGTERM");
        graceful = serve_drain(&app, &signals, app.http.drain_timeout_s);
    } else {
        snprintf(app.load_error, sizeof app.load_error, "%s", sp_last_error());
        atomic_store(&app.phase, SRV_PHASE_FAILED);
        fprintf(stderr, "spindle: error: %s\n", app.load_error);
    }
    /* the answers of what was left (error events) get a moment to go out: up to 5 s
     * after a drain, half a second after a second signal */
    serve_shutdown(&app, &s, graceful ? 5.0 : 0.5);
    srv_auth_destroy(app.auth); /* security: after the HTTP threads are gone */
    srv_model_info_free(&app.model);
    model_destroy(s.draft); /* after the scheduler that borrowed it */
    model_destroy(s.model);
    dev_destroy(s.dev);
    pthread_rwlock_destroy(&app.lifecycle);
    serve_args_free(&a); /* the settings app.http pointed into */
    return st == SP_OK ? 0 : cmd_exit_status(st);
}
