/* reasoning.c: thinking split out of the answer. For a chat template that uses thinking
 * tags (Qwen 3, DeepSeek-R1 and the like: "</think>" in its source), the text between
 * <think> and </think> goes to message.reasoning_content (delta.reasoning_content when
 * streaming) and the rest to content. When the template's generation prompt itself opens
 * the thinking (DeepSeek-R1 ends it with "<think>\n"), the answer starts inside it.
 * Thinking that never closes (max_tokens cut it) is all reasoning.
 */
#include <stdlib.h>
#include <string.h>

#include "server/api/api_internal.h"

static const char THINK_OPEN[] = "<think>", THINK_CLOSE[] = "</think>";

bool srv__reasoning_detect(const char *source, size_t len) {
    return memmem(source, len, THINK_CLOSE, strlen(THINK_CLOSE)) != NULL;
}

bool srv__reasoning_open_at_start(const srv_model_info *mi, const char *prompt, size_t len) {
    if (!mi->reasoning_tags || !prompt) return false;
    while (len && (prompt[len - 1] == '\n' || prompt[len - 1] == ' ')) len--;
    size_t n = strlen(THINK_OPEN);
    return len >= n && memcmp(prompt + len - n, THINK_OPEN, n) == 0;
}

static size_t skip_space(const char *s, size_t n, size_t at) {
    while (at < n && (s[at] == ' ' || s[at] == '\n' || s[at] == '\r' || s[at] == '\t')) at++;
    return at;
}

bool srv__reasoning_split(const srv_model_info *mi, const srv_request *r, const char *text, size_t len,
                          srv_reasoning_split *out) {
    *out = (srv_reasoning_split){.content = 0, .content_len = len};
    if (!mi->reasoning_tags || r->endpoint != SRV_ENDPOINT_CHAT) return false;
    size_t at = 0;
    if (!r->reasoning_open_at_start) {
        at = skip_space(text, len, 0);
        size_t n = strlen(THINK_OPEN);
        if (len - at < n || memcmp(text + at, THINK_OPEN, n) != 0) return false;
        at += n;
    }
    const char *close = memmem(text + at, len - at, THINK_CLOSE, strlen(THINK_CLOSE));
    size_t end = close ? (size_t)(close - text) : len;
    /* as a stream sends it: the blank after <think> dropped, the text before </think> whole */
    size_t r0 = skip_space(text, end, at);
    out->reasoning = r0;
    out->reasoning_len = end - r0;
    out->reasoning_end = close ? end + strlen(THINK_CLOSE) : len;
    out->content = close ? skip_space(text, len, out->reasoning_end) : len;
    out->content_len = len - out->content;
    return true;
}

size_t srv_reasoning_partial_close(const char *text, size_t len) {
    size_t n = strlen(THINK_CLOSE);
    for (size_t k = n - 1; k > 0; k--)
        if (len >= k && memcmp(text + len - k, THINK_CLOSE, k) == 0) return k;
    return 0;
}

size_t srv_reasoning_close_at(const char *text, size_t len) {
    const char *close = memmem(text, len, THINK_CLOSE, strlen(THINK_CLOSE));
    return close ? (size_t)(close - text) : len;
}

size_t srv_reasoning_close_len(void) {
    return strlen(THINK_CLOSE);
}

size_t srv_reasoning_open_len(const char *text, size_t len, bool *maybe) {
    size_t at = skip_space(text, len, 0), n = strlen(THINK_OPEN);
    *maybe = false;
    if (len - at >= n) return memcmp(text + at, THINK_OPEN, n) == 0 ? at + n : 0;
    *maybe = memcmp(text + at, THINK_OPEN, len - at) == 0; /* a prefix of the tag so far */
    return 0;
}

sp_status srv__reasoning_budget(const json_t *root, const srv_model_info *mi, srv_request *r, srv_error *err) {
    const json_t *v = srv__field(root, "max_reasoning_tokens");
    if (!v) return SP_OK;
    int64_t budget;
    sp_status st = srv__want_int(v, "max_reasoning_tokens", 1, INT32_MAX, &budget, err);
    if (st != SP_OK) return st;
    if (!mi->reasoning_tags)
        return srv__fail(err, SRV_ERROR_BAD_REQUEST, "max_reasoning_tokens",
                         "'max_reasoning_tokens': the model's chat template has no thinking (<think> ... </think>).");
    if (r->params.grammar)
        return srv__fail(err, SRV_ERROR_BAD_REQUEST, "max_reasoning_tokens",
                         "'max_reasoning_tokens' cannot be combined with an output constraint (response_format, "
                         "grammar, tool_choice required): the constraint covers the thinking too.");
    int32_t *ids = NULL;
    size_t n = 0;
    if (tok_encode(mi->vocab, THINK_CLOSE, strlen(THINK_CLOSE), false, true, &ids, &n) != SP_OK || n == 0) {
        free(ids);
        return srv__fail(err, SRV_ERROR_INTERNAL, "max_reasoning_tokens", "cannot tokenize </think>: %s",
                         sp_last_error());
    }
    r->think_close = ids;
    r->params.max_reasoning_tokens = (int32_t)budget;
    r->params.think_close = ids;
    r->params.n_think_close = (int32_t)n;
    r->params.thinking_at_start = r->reasoning_open_at_start;
    return SP_OK;
}
