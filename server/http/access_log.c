/* access_log.c: one line per HTTP request at its end (on_completed), on stderr next
 * to the diagnostics: text in log.h's style (`spindle: access: key=value ...`) or one
 * JSON object per line (--log-format json), on when --access-log is set. The prompt
 * is only written when --log-prompts asks for it.
 *
 * DESIGN (threads). Called on libmicrohttpd's pool threads; each line is formatted
 * into its own buffer and handed to stdio in one call, so lines of concurrent
 * requests never interleave.
 */
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/strbuf.h"
#include "server/http/http.h"

/* ` key=value`, the value with spaces, quotes, backslashes, '%' and control or
 * non-ASCII bytes percent-encoded so every field stays one word; NULL: `-`. */
static void text_field(strbuf *b, const char *key, const char *value) {
    strbuf_printf(b, " %s=", key);
    if (!value || !*value) {
        strbuf_append(b, "-", 1);
        return;
    }
    for (const unsigned char *c = (const unsigned char *)value; *c; c++) {
        if (*c <= ' ' || *c >= 0x7f || *c == '"' || *c == '\\' || *c == '%')
            strbuf_printf(b, "%%%02X", *c);
        else
            strbuf_append(b, (const char *)c, 1);
    }
}

static char *format_text(const srv_access_entry *e) {
    strbuf b = {0};
    strbuf_append(&b, "spindle: access:", 16);
    text_field(&b, "id", e->id);
    text_field(&b, "method", e->method);
    text_field(&b, "path", e->path);
    strbuf_printf(&b, " status=%d prompt_tokens=%lld completion_tokens=%lld", e->status, (long long)e->prompt_tokens,
                  (long long)e->completion_tokens);
    if (e->ttft_s >= 0)
        strbuf_printf(&b, " ttft_ms=%.1f", e->ttft_s * 1e3);
    else
        strbuf_append(&b, " ttft_ms=-", 10);
    strbuf_printf(&b, " duration_ms=%.1f", e->duration_s * 1e3);
    text_field(&b, "finish", e->finish);
    text_field(&b, "cancel", e->cancel);
    if (e->prompt) { /* JSON text: a quoted string or an array, never a newline */
        strbuf_append(&b, " prompt=", 8);
        strbuf_append(&b, e->prompt, strlen(e->prompt));
    }
    return strbuf_take(&b);
}

static json_t *json_str_or_null(const char *s) {
    return s && *s ? json_string(s) : json_null();
}

/* A millisecond value rounded to 0.1 ms. */
static json_t *json_ms(double seconds) {
    return json_real((double)(long long)(seconds * 1e4 + 0.5) / 10.0);
}

static char *format_json(const srv_access_entry *e) {
    char when[40] = "";
    struct timespec now;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &now);
    if (gmtime_r(&now.tv_sec, &tm)) {
        size_t n = strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%S", &tm);
        snprintf(when + n, sizeof when - n, ".%03ldZ", now.tv_nsec / 1000000);
    }
    json_t *o = json_object();
    if (!o) return NULL;
    json_object_set_new(o, "time", json_string(when));
    json_object_set_new(o, "type", json_string("access"));
    json_object_set_new(o, "id", json_str_or_null(e->id));
    json_object_set_new(o, "method", json_str_or_null(e->method));
    json_object_set_new(o, "path", json_str_or_null(e->path));
    json_object_set_new(o, "status", json_integer(e->status));
    json_object_set_new(o, "prompt_tokens", json_integer((json_int_t)e->prompt_tokens));
    json_object_set_new(o, "completion_tokens", json_integer((json_int_t)e->completion_tokens));
    json_object_set_new(o, "ttft_ms", e->ttft_s >= 0 ? json_ms(e->ttft_s) : json_null());
    json_object_set_new(o, "duration_ms", json_ms(e->duration_s));
    json_object_set_new(o, "finish", json_str_or_null(e->finish));
    json_object_set_new(o, "cancel", json_str_or_null(e->cancel));
    if (e->prompt) {
        json_t *prompt = json_loads(e->prompt, JSON_DECODE_ANY, NULL);
        json_object_set_new(o, "prompt", prompt ? prompt : json_string(e->prompt));
    }
    /* (a path that is not UTF-8 makes json_string NULL: set_new drops the key) */
    char *text = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(o);
    return text;
}

char *srv_access_log_format(sp_log_format format, const srv_access_entry *e) {
    return format == SP_LOG_FORMAT_JSON ? format_json(e) : format_text(e);
}

void srv_access_log_write(const srv_http_config *config, const srv_access_entry *e) {
    if (!config->access_log) return;
    char *line = srv_access_log_format(config->log_format, e);
    if (!line) return; /* out of memory: the request is over either way */
    fprintf(stderr, "%s\n", line);
    free(line);
}
