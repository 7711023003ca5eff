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
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "server/commands.h"
#include "server/http.h"

typedef struct serve_args {
    const char *model;
    const char *chat_template;
    const char *served_name;
    long threads;
    long ctx_size;
    srv_http_config http;
    sched_config sched;
} serve_args;

static void serve_usage(FILE *out) {
    sched_config d = sched_config_default();
    fprintf(out,
            "usage: spindle [serve] [options]\n"
            "\n"
            "Serves the OpenAI API (/v1/chat/completions, /v1/completions, /v1/models, /tokenize,\n"
            "/detokenize, /health) for one GGUF model.\n"
            "\n"
            "  --model PATH              GGUF model (default %s)\n"
            "  --served-model-name NAME  the model id clients use (default: the file name without .gguf)\n"
            "  --chat-template FILE      Jinja chat template instead of the model's own\n"
            "  --host ADDR               address to listen on (default 127.0.0.1)\n"
            "  --port N                  port (default 8080; 0 = any free port)\n"
            "  --threads N               CPU threads for the model (default: all cores)\n"
            "  --http-threads N          HTTP threads (default 2)\n"
            "  --ctx-size N              context limit per sequence (default: the model's training context)\n"
            "  --kv-cache-mb N           KV cache budget in MiB (default %lld)\n"
            "  --block-size N            tokens per KV block (default %d)\n"
            "  --max-batch-size N        sequences running at once (default %d)\n"
            "  --max-batch-tokens N      tokens in one step (default %d)\n"
            "  --max-prefill-tokens N    prompt tokens prefilled per step (default %d)\n"
            "  --queue-max-requests N    requests waiting to run before 429 (default %d)\n"
            "  --queue-max-tokens N      their prompt tokens before 429 (default %lld)\n"
            "  --policy fcfs|priority    admission and preemption order (default fcfs)\n"
            "  --request-timeout S       seconds a request may take, 0 = none (default %g)\n"
            "  --max-body-bytes N        largest request body (default 1048576)\n"
            "  --max-connections N       open connections at once (default 4096)\n"
            "  --keepalive S             SSE comment after S quiet seconds (default 5)\n",
            CMD_DEFAULT_MODEL, (long long)d.kv_cache_mb, d.block_size, d.max_batch_size, d.max_batch_tokens,
            d.max_prefill_tokens, d.queue_max_requests, (long long)d.queue_max_tokens, d.request_timeout_s);
}

/* Returns -1 when parsing succeeded, else the exit status. */
static int serve_parse(int argc, char **argv, serve_args *a) {
    enum {
        OPT_SERVED_NAME = 256,
        OPT_TEMPLATE,
        OPT_HOST,
        OPT_PORT,
        OPT_THREADS,
        OPT_HTTP_THREADS,
        OPT_CTX,
        OPT_KV_MB,
        OPT_BLOCK,
        OPT_BATCH_SIZE,
        OPT_BATCH_TOKENS,
        OPT_PREFILL,
        OPT_QUEUE_REQ,
        OPT_QUEUE_TOK,
        OPT_POLICY,
        OPT_TIMEOUT,
        OPT_BODY,
        OPT_CONNS,
        OPT_KEEPALIVE,
    };
    static const struct option options[] = {
        {"model", required_argument, NULL, 'm'},
        {"served-model-name", required_argument, NULL, OPT_SERVED_NAME},
        {"chat-template", required_argument, NULL, OPT_TEMPLATE},
        {"host", required_argument, NULL, OPT_HOST},
        {"port", required_argument, NULL, OPT_PORT},
        {"threads", required_argument, NULL, OPT_THREADS},
        {"http-threads", required_argument, NULL, OPT_HTTP_THREADS},
        {"ctx-size", required_argument, NULL, OPT_CTX},
        {"kv-cache-mb", required_argument, NULL, OPT_KV_MB},
        {"block-size", required_argument, NULL, OPT_BLOCK},
        {"max-batch-size", required_argument, NULL, OPT_BATCH_SIZE},
        {"max-batch-tokens", required_argument, NULL, OPT_BATCH_TOKENS},
        {"max-prefill-tokens", required_argument, NULL, OPT_PREFILL},
        {"queue-max-requests", required_argument, NULL, OPT_QUEUE_REQ},
        {"queue-max-tokens", required_argument, NULL, OPT_QUEUE_TOK},
        {"policy", required_argument, NULL, OPT_POLICY},
        {"request-timeout", required_argument, NULL, OPT_TIMEOUT},
        {"max-body-bytes", required_argument, NULL, OPT_BODY},
        {"max-connections", required_argument, NULL, OPT_CONNS},
        {"keepalive", required_argument, NULL, OPT_KEEPALIVE},
        {"help", no_argument, NULL, 'h'},
        {0, 0, 0, 0},
    };
    *a = (serve_args){
        .model = CMD_DEFAULT_MODEL,
        .http = {.host = "127.0.0.1",
                 .port = 8080,
                 .http_threads = 2,
                 .max_body_bytes = 1u << 20,
                 .max_connections = 4096,
                 .keepalive_s = 5,
                 .connection_timeout = 600},
        .sched = sched_config_default(),
    };
    long v;
    double f;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "m:h", options, NULL)) != -1) {
        switch (c) {
        case 'm': a->model = optarg; break;
        case OPT_SERVED_NAME: a->served_name = optarg; break;
        case OPT_TEMPLATE: a->chat_template = optarg; break;
        case OPT_HOST: a->http.host = optarg; break;
        case OPT_PORT:
            if (!cli_parse_int("port", optarg, 0, 65535, &v)) return 2;
            a->http.port = (int)v;
            break;
        case OPT_THREADS:
            if (!cli_parse_int("threads", optarg, 1, 256, &a->threads)) return 2;
            break;
        case OPT_HTTP_THREADS:
            if (!cli_parse_int("http-threads", optarg, 1, 64, &v)) return 2;
            a->http.http_threads = (int)v;
            break;
        case OPT_CTX:
            if (!cli_parse_int("ctx-size", optarg, 16, 1 << 24, &a->ctx_size)) return 2;
            break;
        case OPT_KV_MB:
            if (!cli_parse_int("kv-cache-mb", optarg, 1, 1 << 24, &v)) return 2;
            a->sched.kv_cache_mb = v;
            break;
        case OPT_BLOCK:
            if (!cli_parse_int("block-size", optarg, 1, 1024, &v)) return 2;
            a->sched.block_size = (int)v;
            break;
        case OPT_BATCH_SIZE:
            if (!cli_parse_int("max-batch-size", optarg, 1, 4096, &v)) return 2;
            a->sched.max_batch_size = (int)v;
            break;
        case OPT_BATCH_TOKENS:
            if (!cli_parse_int("max-batch-tokens", optarg, 1, 1 << 16, &v)) return 2;
            a->sched.max_batch_tokens = (int)v;
            break;
        case OPT_PREFILL:
            if (!cli_parse_int("max-prefill-tokens", optarg, 1, 1 << 16, &v)) return 2;
            a->sched.max_prefill_tokens = (int)v;
            break;
        case OPT_QUEUE_REQ:
            if (!cli_parse_int("queue-max-requests", optarg, 1, 1 << 24, &v)) return 2;
            a->sched.queue_max_requests = (int)v;
            break;
        case OPT_QUEUE_TOK:
            if (!cli_parse_int("queue-max-tokens", optarg, 1, __LONG_MAX__, &v)) return 2;
            a->sched.queue_max_tokens = v;
            break;
        case OPT_POLICY:
            if (strcmp(optarg, "fcfs") == 0)
                a->sched.policy = SCHED_POLICY_FCFS;
            else if (strcmp(optarg, "priority") == 0)
                a->sched.policy = SCHED_POLICY_PRIORITY;
            else {
                fprintf(stderr, "spindle: error: --policy: '%s' is not one of fcfs, priority\n", optarg);
                return 2;
            }
            break;
        case OPT_TIMEOUT:
            if (!cli_parse_float("request-timeout", optarg, 0, 1e7, &f)) return 2;
            a->sched.request_timeout_s = f;
            break;
        case OPT_BODY:
            if (!cli_parse_int("max-body-bytes", optarg, 1024, 1L << 30, &v)) return 2;
            a->http.max_body_bytes = (size_t)v;
            break;
        case OPT_CONNS:
            if (!cli_parse_int("max-connections", optarg, 1, 1 << 20, &v)) return 2;
            a->http.max_connections = (int)v;
            break;
        case OPT_KEEPALIVE:
            if (!cli_parse_float("keepalive", optarg, 0.05, 3600, &f)) return 2;
            a->http.keepalive_s = f;
            break;
        case 'h': serve_usage(stdout); return 0;
        default: serve_usage(stderr); return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "spindle: error: serve: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
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

typedef struct serve_state {
    dev_backend *dev;
    model *model;
    srv_http *http;
    char file_name[256];
    char served_name[256];
} serve_state;

/* Loads the model and starts the scheduler; the app becomes READY. */
static sp_status serve_load(const serve_args *a, srv_app *app, serve_state *s) {
    dev_options dopts = {.kind = DEV_KIND_CPU, .n_threads = (int)a->threads};
    sp_status st = dev_create(&dopts, &s->dev);
    if (st != SP_OK) return st;
    model_options mopts = {.max_batch_tokens = a->sched.max_batch_tokens};
    if ((st = model_load(a->model, s->dev, &mopts, &s->model)) != SP_OK) return st;
    const model_hparams *hp = model_get_hparams(s->model);
    sched_config cfg = a->sched;
    if (a->ctx_size > hp->n_ctx_train) {
        return sp_fail(SP_ERR_RANGE, "--ctx-size %ld exceeds the model's training context of %d tokens", a->ctx_size,
                       hp->n_ctx_train);
    }
    cfg.max_seq_len = a->ctx_size > 0 ? (int32_t)a->ctx_size : hp->n_ctx_train;
    if ((st = sched_config_validate(&cfg)) != SP_OK) return st;
    if ((st = sched_create(&cfg, s->model, &app->sched)) != SP_OK) return st;
    const sched_config *live = sched_get_config(app->sched); /* the context may shrink to the KV pool */
    model_names(a->model, a->served_name, s->file_name, sizeof s->file_name, s->served_name, sizeof s->served_name);
    app->model = (srv_model_info){.served_name = s->served_name,
                                  .file_name = s->file_name,
                                  .vocab = model_vocab(s->model),
                                  .max_seq_len = live->max_seq_len,
                                  .created = (int64_t)time(NULL)};
    if ((st = srv_model_info_init_template(&app->model, model_gguf(s->model), a->chat_template)) != SP_OK) return st;
    if ((st = sched_start(app->sched)) != SP_OK) return st;
    sp_log_info("model %s (%s, %d layers, vocab %d) on %s; context %d; KV cache %lld MiB in blocks of %d; batch %d "
                "sequences / %d tokens, prefill %d tokens per step; queue %d requests / %lld tokens; policy %s",
                s->served_name, hp->arch_name, hp->n_layers, hp->n_vocab, dev_name(s->dev), live->max_seq_len,
                (long long)live->kv_cache_mb, live->block_size, live->max_batch_size, live->max_batch_tokens,
                live->max_prefill_tokens, live->queue_max_requests, (long long)live->queue_max_tokens,
                live->policy == SCHED_POLICY_FCFS ? "fcfs" : "priority");
    return SP_OK;
}

/* Refuses new work, ends the accepted work, lets the answers go out (up to
 * grace_s), stops listening. */
static void serve_shutdown(srv_app *app, serve_state *s, double grace_s) {
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
        return cmd_exit_status(st);
    }
    sp_log_info("listening on http://%s:%d (loading %s)", a.http.host, srv_http_port(s.http), a.model);

    double t0 = sched_now();
    bool graceful = true;
    st = serve_load(&a, &app, &s);
    /* security (auth.c): the API keys, before READY; a bad key file fails the start */
    srv_auth *auth = NULL;
    if (st == SP_OK && (st = srv_auth_create(&app.http, &auth)) == SP_OK) app.auth = auth;
    if (st == SP_OK) {
        atomic_store(&app.phase, SRV_PHASE_READY);
        sp_log_info("ready in %.2f s: http://%s:%d/v1", sched_now() - t0, a.http.host, srv_http_port(s.http));
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
    /* after a drain the answers of what was left get a moment to go out; a second
     * signal means now */
    serve_shutdown(&app, &s, graceful ? 5.0 : 0.0);
    srv_auth_destroy(app.auth); /* security: after the HTTP threads are gone */
    srv_model_info_free(&app.model);
    model_destroy(s.model);
    dev_destroy(s.dev);
    pthread_rwlock_destroy(&app.lifecycle);
    return st == SP_OK ? 0 : cmd_exit_status(st);
}
