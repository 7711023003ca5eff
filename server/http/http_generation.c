/* http_generation.c: a generation's connection, from submit to the last byte: the
 * scheduler requests of its choices, the suspend/resume handshake with the
 * scheduler's notify and the watcher, SSE chunks read out of a suspended stream, or
 * one JSON body once every choice is done. Cancels when the client leaves.
 *
 * DESIGN: see server/http/http_internal.h for srv_conn's threads and lifetime. Its `lock`
 * orders the suspend/resume handshake:
 *   handler/reader: lock; woken = false; unlock; look at the outputs; nothing new ->
 *                   lock; if woken: look again; else suspended = true, suspend; unlock
 *   notify:         lock; woken = true; if suspended: suspended = false, resume; unlock
 * so a token that lands between the look and the suspend is never missed.
 * Lock order: a request's lock (held by the scheduler during notify) before srv_conn's.
 */
#include <microhttpd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/assert.h"
#include "common/grow.h"
#include "server/http/http_internal.h"

enum { STREAM_BLOCK_BYTES = 16 * 1024 };

/* One choice of a generation: the HTTP side's cursor into its request's output. */
struct srv_choice {
    srv_conn *conn;
    int index;
    size_t text_sent;
    int32_t tokens_sent;
    bool role_sent;
    bool finish_sent;
    bool tools_decided;  /* a request with tools: the answer is known not to be tool calls (its text flows) */
    uint8_t think;       /* a thinking template's answer: THINK_* below */
    bool content_flowed; /* a request with tools: content other than blanks has been sent */
    srv_call_scan scan;  /* calls streamed as they come (stream_forced_calls) */
    bool scan_lost;      /* the scan gave up: the calls go out when the answer ends */
    bool auto_calls;     /* tool_choice auto: the held text began a call; streamed as forced ones */
};

/* ---- the suspend/resume handshake ---- */

static void conn_wake(srv_conn *conn) {
    pthread_mutex_lock(&conn->lock);
    conn->woken = true;
    if (conn->suspended) {
        conn->suspended = false;
        MHD_resume_connection(conn->connection);
    }
    pthread_mutex_unlock(&conn->lock);
}

static void conn_clear_woken(srv_conn *conn) {
    pthread_mutex_lock(&conn->lock);
    conn->woken = false;
    pthread_mutex_unlock(&conn->lock);
}

/* Suspends unless a wake arrived since conn_clear_woken; true when suspended. */
static bool conn_try_suspend(srv_conn *conn) {
    pthread_mutex_lock(&conn->lock);
    bool suspend = !conn->woken;
    if (suspend) {
        conn->suspended = true;
        MHD_suspend_connection(conn->connection);
    }
    pthread_mutex_unlock(&conn->lock);
    return suspend;
}

/* The scheduler's notify, under the request's lock. A non-streaming request only
 * needs waking once its choice is done. */
static void choice_notify(void *arg) {
    srv_choice *choice = arg;
    srv_conn *conn = choice->conn;
    if (!conn->request.stream && !sched_request_output(conn->reqs[choice->index])->done) return;
    conn_wake(conn);
}

static void conn_on_hangup(void *arg) {
    srv_conn *conn = arg;
    for (int i = 0; i < conn->n_reqs; i++) sched_request_cancel(conn->reqs[i]);
}

static void conn_on_quiet(void *arg) {
    srv_conn *conn = arg;
    atomic_store(&conn->keepalive_wanted, true);
    conn_wake(conn);
}

/* ---- streaming ---- */

static bool out_append(srv_conn *conn, const char *text, size_t len) {
    if (conn->out_len + len > conn->out_cap) {
        size_t cap = conn->out_cap ? conn->out_cap : 4096;
        while (cap < conn->out_len + len) cap *= 2;
        char *p = realloc(conn->out, cap);
        if (!p) return false;
        conn->out = p;
        conn->out_cap = cap;
    }
    memcpy(conn->out + conn->out_len, text, len);
    conn->out_len += len;
    return true;
}

/* Appends a chat event; a stream of an API over chat gets the events its translator
 * makes of it instead. */
static bool out_event(srv_conn *conn, const char *event) {
    if (!conn->api_stream) return out_append(conn, event, strlen(event));
    strbuf b = {0};
    srv_api_stream_event(conn->api_stream, event, &b);
    char *text = strbuf_take(&b);
    bool ok = text && out_append(conn, text, strlen(text));
    free(text);
    return ok;
}

/* Appends an event the API layer built (takes ownership of it). */
static bool out_append_owned(srv_conn *conn, char *event) {
    if (!event) return false;
    bool ok = out_event(conn, event);
    free(event);
    return ok;
}

/* What one choice produced since the last look, copied out under its lock. */
typedef struct choice_news {
    size_t text_len;
    int32_t n_tokens;
    int top_logprobs;
    bool done;
    sched_finish finish;
    sp_status error;
    char error_message[256];
} choice_news;

static bool choice_take_news(srv_conn *conn, srv_choice *choice, choice_news *news) {
    sched_request *r = conn->reqs[choice->index];
    bool ok = true;
    sched_request_lock(r);
    const sched_output *out = sched_request_output(r);
    *news = (choice_news){.done = out->done, .finish = out->finish, .top_logprobs = out->top_logprobs};
    news->text_len = out->text_len - choice->text_sent;
    news->n_tokens = conn->request.logprobs ? out->n_tokens - choice->tokens_sent : 0;
    size_t n_top = (size_t)news->n_tokens * (size_t)out->top_logprobs;
    if (!sp_grow((void **)&conn->copy_text, &conn->copy_text_cap, news->text_len + 1, 1) ||
        !sp_grow((void **)&conn->copy_tokens, &conn->copy_tokens_cap, (size_t)news->n_tokens + 1,
                 sizeof(sched_token)) ||
        !sp_grow((void **)&conn->copy_top, &conn->copy_top_cap, n_top + 1, sizeof(sched_token))) {
        ok = false;
    } else {
        /* (the output's arrays may be NULL when empty: copy only what there is) */
        if (news->text_len) memcpy(conn->copy_text, out->text + choice->text_sent, news->text_len);
        if (news->n_tokens)
            memcpy(conn->copy_tokens, out->tokens + choice->tokens_sent, sizeof(sched_token) * (size_t)news->n_tokens);
        if (n_top)
            memcpy(conn->copy_top, out->top + (size_t)choice->tokens_sent * (size_t)out->top_logprobs,
                   sizeof(sched_token) * n_top);
        if (out->done && out->finish == SCHED_FINISH_ERROR) {
            news->error = out->error;
            snprintf(news->error_message, sizeof news->error_message, "%s", out->error_message);
        }
        choice->text_sent = out->text_len;
        if (conn->request.logprobs) choice->tokens_sent = out->n_tokens;
    }
    sched_request_unlock(r);
    return ok;
}

/* A thinking template's answer, as a stream: the states of srv_choice.think. */
enum { THINK_UNKNOWN, THINK_IN, THINK_ANSWER, THINK_CLOSED, THINK_OPENED };

static bool blank(char c) {
    return c == '\n' || c == ' ' || c == '\r';
}

/* The reasoning part of news goes out as delta.reasoning_content (with news' logprobs),
 * and news is left holding only the answer after </think>, moved to the start of
 * conn->copy_text. Blanks after either tag are dropped, across looks; bytes that may
 * still become a tag are given back (choice->text_sent rewound) until the next look. */
static bool stream_reasoning(srv_conn *conn, srv_choice *choice, choice_news *news) {
    const srv_request *rq = &conn->request;
    const srv_model_info *mi = &conn->app->model;
    char *text = conn->copy_text;
    size_t len = news->text_len, skip = 0;
    if (choice->think == THINK_UNKNOWN) {
        bool maybe = false;
        size_t open = rq->reasoning_open_at_start ? 0 : srv_reasoning_open_len(text, len, &maybe);
        if (rq->reasoning_open_at_start || open > 0) {
            choice->think = THINK_OPENED;
            skip = open;
        } else if (maybe && !news->done) {
            choice->text_sent -= len; /* "<thi": look again when more has come */
            news->text_len = 0;
            return true;
        } else {
            choice->think = THINK_ANSWER;
            return true;
        }
    }
    if (choice->think == THINK_CLOSED || choice->think == THINK_OPENED) {
        while (skip < len && blank(text[skip])) skip++;
        if (skip < len) choice->think = choice->think == THINK_CLOSED ? THINK_ANSWER : THINK_IN;
        if (choice->think == THINK_CLOSED || choice->think == THINK_ANSWER) {
            memmove(text, text + skip, len - skip);
            news->text_len = len - skip;
            return true;
        }
    }
    size_t close = srv_reasoning_close_at(text + skip, len - skip) + skip;
    size_t held = close == len && !news->done ? srv_reasoning_partial_close(text + skip, len - skip) : 0;
    size_t end = close < len ? close : len - held;
    if (end > skip || news->n_tokens > 0) {
        bool ok = out_append_owned(conn, srv_sse_reasoning_chunk(rq, mi, conn->id, conn->created, choice->index,
                                                                 text + skip, end - skip, conn->copy_tokens,
                                                                 news->n_tokens, conn->copy_top, news->top_logprobs));
        if (!ok) return false;
    }
    news->n_tokens = 0;
    if (close < len) { /* past </think>: the rest is the answer, its leading blanks dropped */
        size_t at = close + srv_reasoning_close_len();
        while (at < len && blank(text[at])) at++;
        memmove(text, text + at, len - at);
        news->text_len = len - at;
        choice->think = news->text_len > 0 ? THINK_ANSWER : THINK_CLOSED;
    } else {
        choice->text_sent -= held;
        news->text_len = 0;
    }
    return true;
}

/* Bytes of arguments per chunk: small pieces, as a model's tokens would come. */
enum { TOOL_ARGUMENT_PIECE = 16 };

/* Call k of choice index: its index, id, type and name with empty arguments, then the
 * arguments in pieces cut at UTF-8 character boundaries. */
static bool tool_call_chunks(srv_conn *conn, int index, int k, const json_t *call) {
    const srv_request *rq = &conn->request;
    const srv_model_info *mi = &conn->app->model;
    const json_t *fn = json_object_get(call, "function");
    const char *args = json_string_value(json_object_get(fn, "arguments"));
    json_t *head = json_pack("{s:i,s:O,s:s,s:{s:O,s:s}}", "index", k, "id", json_object_get(call, "id"), "type",
                             "function", "function", "name", json_object_get(fn, "name"), "arguments", "");
    bool ok = out_append_owned(conn, srv_sse_tool_call_delta(rq, mi, conn->id, conn->created, index, head));
    size_t n = args ? strlen(args) : 0;
    for (size_t at = 0; ok && at < n;) {
        size_t end = at + TOOL_ARGUMENT_PIECE < n ? at + TOOL_ARGUMENT_PIECE : n;
        while (end < n && ((unsigned char)args[end] & 0xC0) == 0x80) end++;
        json_t *piece = json_pack("{s:i,s:{s:s%}}", "index", k, "function", "arguments", args + at, end - at);
        ok = out_append_owned(conn, srv_sse_tool_call_delta(rq, mi, conn->id, conn->created, index, piece));
        at = end;
    }
    return ok;
}

/* Forced calls (tool_choice required or named), streamed as they are generated: the held
 * text is scanned from its start (choice->scan) and each call's head, then each new piece
 * of its arguments, goes out at once. False on out of memory. */
static bool stream_forced_calls(srv_conn *conn, srv_choice *choice, const char *text, size_t len) {
    const srv_request *rq = &conn->request;
    const srv_model_info *mi = &conn->app->model;
    for (;;) {
        size_t from = 0, n = 0;
        const srv_call_scan before = choice->scan;
        srv_call_event ev = srv_tools_scan(&choice->scan, text, len, &from, &n);
        if (ev == SRV_CALL_WAIT) return true;
        if (ev == SRV_CALL_HEAD && choice->auto_calls && !srv_tools_known(rq, text + from, n)) {
            choice->scan = before; /* auto: not a call of the tools; the answer's end decides the rest */
            return true;
        }
        if (ev == SRV_CALL_LOST) {
            choice->scan_lost = choice->scan.index == 0; /* nothing sent yet: the end-of-answer path */
            return true;
        }
        json_t *delta;
        if (ev == SRV_CALL_HEAD) {
            char id[32];
            snprintf(id, sizeof id, "call_%016llx", (unsigned long long)srv_random_u64());
            delta = json_pack("{s:i,s:s,s:s,s:{s:s%,s:s}}", "index", choice->scan.index++, "id", id, "type", "function",
                              "function", "name", text + from, n, "arguments", "");
        } else {
            delta =
                json_pack("{s:i,s:{s:s%}}", "index", choice->scan.index - 1, "function", "arguments", text + from, n);
        }
        if (!out_append_owned(conn, srv_sse_tool_call_delta(rq, mi, conn->id, conn->created, choice->index, delta)))
            return false;
    }
}

/* A request with tools, on the answer's new text in news (after any reasoning): the
 * text that may still become tool calls is held back (choice->text_sent rewound to it:
 * srv_tools_hold_from), the rest flows as content. When the answer ends, the held text
 * is parsed: calls are sent as OpenAI streams them (per call a chunk with its index, id
 * and name, then its arguments in pieces, then the finish_reason "tool_calls"), with the
 * text around them as content first; anything else flows as content. *sent: the calls
 * and the finish went out. */
static bool stream_tools(srv_conn *conn, srv_choice *choice, choice_news *news, bool *sent) {
    const srv_request *rq = &conn->request;
    const srv_model_info *mi = &conn->app->model;
    *sent = false;
    const char *text = conn->copy_text;
    size_t len = news->text_len;
    const bool forced = rq->tool_choice == SRV_TOOL_CHOICE_REQUIRED || rq->tool_choice == SRV_TOOL_CHOICE_NAMED;
    /* auto: once the held text (everything before it has flowed) begins a call of one of
     * the tools, it is streamed as it comes, like a forced one */
    if (!forced && !choice->auto_calls && !choice->scan_lost && !news->done && len > 0 &&
        srv_tools_hold_from(mi, text, len, choice->content_flowed) == 0) {
        srv_auto_calls start = srv_tools_auto_start(mi, rq, text, len);
        choice->auto_calls = start == SRV_AUTO_START;
        choice->scan_lost = start == SRV_AUTO_NO;
    }
    if ((forced || choice->auto_calls) && !choice->scan_lost) { /* calls: stream them as they come */
        if (!stream_forced_calls(conn, choice, text, len)) return false;
        if (!choice->scan_lost) {
            choice->text_sent -= len; /* the held text, scanned again from its start next time */
            news->text_len = 0;
            if (!news->done) return true;
            if (choice->scan.index == 0) { /* no call came: the end-of-answer path decides */
                choice->text_sent += len;
                news->text_len = len;
                goto at_the_end;
            }
            choice->tools_decided = true;
            if (news->finish != SCHED_FINISH_STOP && news->finish != SCHED_FINISH_LENGTH) {
                /* an error or a cancel after calls went out: the failure path reports it */
                choice->text_sent += len;
                news->text_len = 0;
                return true;
            }
            /* auto (hermes): calls the scan gave up on and the text after the calls go out
             * as the whole answer parses (the calls already sent are its first ones) */
            char *content = NULL;
            json_t *parsed = choice->auto_calls && news->finish == SCHED_FINISH_STOP
                                 ? srv_tools_parse(mi, rq, text, len, &content)
                                 : NULL;
            bool ok = true;
            for (size_t k = (size_t)choice->scan.index; ok && k < json_array_size(parsed); k++)
                ok = tool_call_chunks(conn, choice->index, (int)k, json_array_get(parsed, k));
            json_decref(parsed);
            ok = ok && (!content ||
                        out_append_owned(conn, srv_sse_delta_chunk(rq, mi, conn->id, conn->created, choice->index,
                                                                   content, strlen(content), NULL, 0, NULL, 0, NULL)));
            free(content);
            ok = ok && (news->n_tokens == 0 ||
                        out_append_owned(conn, srv_sse_delta_chunk(rq, mi, conn->id, conn->created, choice->index, NULL,
                                                                   0, conn->copy_tokens, news->n_tokens, conn->copy_top,
                                                                   news->top_logprobs, NULL)));
            /* the calls' finish, or what cut them (max_tokens: "length") */
            const char *finish = news->finish == SCHED_FINISH_STOP ? "tool_calls" : srv_finish_reason(news->finish);
            ok = ok && out_append_owned(conn, srv_sse_delta_chunk(rq, mi, conn->id, conn->created, choice->index, NULL,
                                                                  0, NULL, 0, NULL, 0, finish));
            choice->text_sent += len;
            choice->finish_sent = true;
            *sent = true;
            return ok;
        }
    }
    if (!news->done) {
        size_t hold = srv_tools_hold_from(mi, text, len, choice->content_flowed);
        choice->text_sent -= len - hold;
        news->text_len = hold;
        for (size_t k = 0; k < hold && !choice->content_flowed; k++)
            choice->content_flowed = text[k] != ' ' && text[k] != '\n' && text[k] != '\r' && text[k] != '\t';
        return true;
    }
at_the_end:
    choice->tools_decided = true;
    char *content = NULL;
    json_t *calls = news->finish == SCHED_FINISH_STOP ? srv_tools_parse(mi, rq, text, len, &content) : NULL;
    if (!calls) return true; /* content after all: it flows with the finish */
    bool ok = true;
    if (content || news->n_tokens > 0)
        ok = out_append_owned(conn, srv_sse_delta_chunk(rq, mi, conn->id, conn->created, choice->index, content,
                                                        content ? strlen(content) : 0, conn->copy_tokens,
                                                        news->n_tokens, conn->copy_top, news->top_logprobs, NULL));
    free(content);
    for (size_t k = 0; ok && k < json_array_size(calls); k++)
        ok = tool_call_chunks(conn, choice->index, (int)k, json_array_get(calls, k));
    json_decref(calls);
    if (ok)
        ok = out_append_owned(conn, srv_sse_delta_chunk(rq, mi, conn->id, conn->created, choice->index, NULL, 0, NULL,
                                                        0, NULL, 0, "tool_calls"));
    choice->finish_sent = true;
    *sent = true;
    return ok;
}

/* Turns whatever the choices produced into SSE events in conn->out. */
static bool stream_collect(srv_conn *conn) {
    const srv_request *rq = &conn->request;
    const srv_model_info *mi = &conn->app->model;
    bool all_finished = true;
    for (int i = 0; i < conn->n_reqs; i++) {
        srv_choice *choice = &conn->choices[i];
        if (choice->finish_sent) continue;
        if (rq->endpoint == SRV_ENDPOINT_CHAT && !choice->role_sent) {
            if (!out_append_owned(conn, srv_sse_role_chunk(rq, mi, conn->id, conn->created, i))) return false;
            choice->role_sent = true;
        }
        choice_news news;
        if (!choice_take_news(conn, choice, &news)) return false;
        if (mi->reasoning_tags && rq->endpoint == SRV_ENDPOINT_CHAT && choice->think != THINK_ANSWER &&
            !stream_reasoning(conn, choice, &news))
            return false;
        /* tool calls are looked for in the answer after the reasoning (news holds only that) */
        bool answering = !mi->reasoning_tags || choice->think == THINK_ANSWER || news.done;
        if (rq->tools && !choice->tools_decided && answering) {
            bool sent;
            if (!stream_tools(conn, choice, &news, &sent)) return false;
            if (sent) continue;
        }
        bool failed = news.done && (news.finish == SCHED_FINISH_ERROR || news.finish == SCHED_FINISH_CANCELLED);
        const char *finish = news.done && !failed ? srv_finish_reason(news.finish) : NULL;
        /* the text goes in ordinary chunks and the finish in one of its own with an empty
         * delta, as OpenAI sends it: clients that read text only while finish_reason is
         * null lose nothing */
        if (news.text_len > 0 || news.n_tokens > 0) {
            char *chunk =
                srv_sse_delta_chunk(rq, mi, conn->id, conn->created, i, conn->copy_text, news.text_len,
                                    conn->copy_tokens, news.n_tokens, conn->copy_top, news.top_logprobs, NULL);
            if (!out_append_owned(conn, chunk)) return false;
        }
        if (finish && !out_append_owned(conn, srv_sse_delta_chunk(rq, mi, conn->id, conn->created, i, NULL, 0, NULL, 0,
                                                                  NULL, 0, finish)))
            return false;
        if (failed) {
            srv_error err;
            if (news.finish == SCHED_FINISH_CANCELLED)
                srv_error_from_status(&err, SP_ERR_CANCELLED, "the request was cancelled");
            else
                srv_error_from_status(&err, news.error, news.error_message);
            if (!out_append_owned(conn, srv_sse_error_event(&err))) return false;
            conn->stream_errored = true;
        }
        if (news.done)
            choice->finish_sent = true;
        else
            all_finished = false;
    }
    if (!all_finished) return true;
    if (rq->include_usage && !conn->stream_errored) {
        const sched_output *outs[SRV_MAX_N * SRV_MAX_PROMPTS];
        for (int i = 0; i < conn->n_reqs; i++) outs[i] = sched_request_output(conn->reqs[i]); /* done: immutable */
        if (!out_append_owned(conn, srv_sse_usage_chunk(rq, mi, conn->id, conn->created, outs, conn->n_reqs)))
            return false;
    }
    if (!out_event(conn, SRV_SSE_DONE)) return false;
    conn->stream_done = true;
    return true;
}

static ssize_t stream_reader(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    srv_conn *conn = cls;
    for (;;) {
        if (conn->out_off < conn->out_len) {
            size_t n = conn->out_len - conn->out_off;
            if (n > max) n = max;
            memcpy(buf, conn->out + conn->out_off, n);
            conn->out_off += n;
            atomic_store(&conn->watched.last_write, sched_now());
            return (ssize_t)n;
        }
        conn->out_len = conn->out_off = 0;
        if (conn->stream_done) return MHD_CONTENT_READER_END_OF_STREAM;
        conn_clear_woken(conn);
        if (!stream_collect(conn)) return MHD_CONTENT_READER_END_WITH_ERROR; /* out of memory */
        if (conn->out_len > 0) continue;
        if (atomic_exchange(&conn->keepalive_wanted, false)) {
            /* an SSE comment: clients ignore it, proxies see a live connection */
            static const char comment[] = ": keep-alive\n\n";
            if (!out_append(conn, comment, sizeof comment - 1)) return MHD_CONTENT_READER_END_WITH_ERROR;
            continue;
        }
        if (conn_try_suspend(conn)) return 0;
    }
}

/* ---- non-streaming ---- */

static bool all_done(srv_conn *conn) {
    for (int i = 0; i < conn->n_reqs; i++) {
        sched_request_lock(conn->reqs[i]);
        bool done = sched_request_output(conn->reqs[i])->done;
        sched_request_unlock(conn->reqs[i]);
        if (!done) return false;
    }
    return true;
}

static enum MHD_Result send_completion(srv_conn *conn) {
    const sched_output *outs[SRV_MAX_N * SRV_MAX_PROMPTS];
    for (int i = 0; i < conn->n_reqs; i++) {
        outs[i] = sched_request_output(conn->reqs[i]); /* done: immutable from now on */
        if (outs[i]->finish == SCHED_FINISH_ERROR)
            return srv__send_status_error(conn, outs[i]->error, outs[i]->error_message);
        if (outs[i]->finish == SCHED_FINISH_CANCELLED)
            return srv__send_status_error(conn, SP_ERR_CANCELLED, "the request was cancelled");
    }
    const srv_model_info *mi = &conn->app->model;
    if (conn->request.endpoint == SRV_ENDPOINT_EMBEDDINGS) /* vectors, not text (embeddings.c) */
        return srv__send_json(conn, 200, srv_render_embeddings(&conn->request, mi, outs, conn->n_reqs));
    srv_api_answer answer = {.id = conn->id, .created = conn->created, .tenant = conn->tenant};
    return srv__send_json(
        conn, 200,
        srv_api_render(&conn->request, mi, &answer,
                       srv_render_response(&conn->request, mi, conn->id, conn->created, outs, conn->n_reqs)));
}

/* Called again after every resume until the answer is queued. */
enum MHD_Result srv__generation_continue(srv_conn *conn) {
    for (;;) {
        conn_clear_woken(conn);
        if (all_done(conn)) return send_completion(conn);
        if (conn_try_suspend(conn)) return MHD_YES;
    }
}

/* ---- generation requests ---- */

enum MHD_Result srv__generation_start(srv_conn *conn) {
    srv_app *app = conn->app;
    SP_ASSERT(conn->have_request); /* parsed by a preparation worker (prep.c) */
    const srv_request *rq = &conn->request;
    int n = rq->n_prompts * rq->n;
    conn->reqs = calloc((size_t)n, sizeof *conn->reqs);
    conn->choices = calloc((size_t)n, sizeof *conn->choices);
    if (!conn->reqs || !conn->choices) return srv__send_status_error(conn, SP_ERR_NOMEM, "out of memory");
    uint64_t tenant = conn->tenant;
    for (int p = 0; p < rq->n_prompts; p++) {
        for (int c = 0; c < rq->n; c++) {
            int i = p * rq->n + c;
            sched_request_params params = srv_request_choice_params(rq, p, c);
            params.tenant = tenant;
            sp_status st = sched_request_create(&params, &conn->reqs[i]);
            if (st != SP_OK) return srv__send_status_error(conn, st, sp_last_error());
            conn->n_reqs = i + 1;
            conn->choices[i] = (srv_choice){.conn = conn, .index = i};
            sched_request_set_notify(conn->reqs[i], choice_notify, &conn->choices[i]);
        }
    }
    srv_response_id(rq->api, conn->id, sizeof conn->id);
    conn->created = (int64_t)time(NULL);
    if (rq->stream) {
        bool failed;
        srv_api_answer answer = {.id = conn->id, .created = conn->created, .tenant = tenant};
        conn->api_stream = srv_api_stream_create(rq, &app->model, &answer, &failed);
        if (failed) return srv__send_status_error(conn, SP_ERR_NOMEM, "out of memory");
    }

    pthread_rwlock_rdlock(&app->lifecycle);
    sp_status st =
        atomic_load(&app->phase) == SRV_PHASE_READY
            ? sched_submit(app->sched, conn->reqs, n)
            : sp_fail(SP_ERR_UNAVAILABLE, "%s", srv__phase_refusal((srv_phase)atomic_load(&app->phase), app));
    if (st == SP_ERR_FULL) conn->retry_after_s = srv__retry_after_s(app->sched); /* under the lifecycle lock */
    pthread_rwlock_unlock(&app->lifecycle);
    if (st != SP_OK) return srv__send_status_error(conn, st, sp_last_error());
    conn->dispatched = true;
    atomic_fetch_add(&app->live_generations, 1);

    const union MHD_ConnectionInfo *info = MHD_get_connection_info(conn->connection, MHD_CONNECTION_INFO_CONNECTION_FD);
    conn->watched = (srv_watched){.fd = info ? info->connect_fd : -1,
                                  .on_hangup = conn_on_hangup,
                                  .on_quiet = conn_on_quiet,
                                  .arg = conn,
                                  .streaming = rq->stream,
                                  ._slot = -1};
    if (conn->watched.fd >= 0 && srv_watch_add(app->watch, &conn->watched) == SP_OK) conn->watching = true;

    if (!rq->stream) return srv__generation_continue(conn);
    struct MHD_Response *resp =
        MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, STREAM_BLOCK_BYTES, stream_reader, conn, NULL);
    if (!resp) return MHD_NO;
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    MHD_add_response_header(resp, "X-Accel-Buffering", "no"); /* nginx: do not buffer the stream */
    return srv__queue_response(conn, MHD_HTTP_OK, resp);
}
