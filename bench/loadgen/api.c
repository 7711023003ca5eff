/* api.c: the blocking requests made before the timed run: the model id (GET /v1/models)
 * and token counts (POST /tokenize, used to fit the random prompts to an exact length).
 *
 * One curl easy handle, reused so the hundreds of /tokenize calls share one keep-alive
 * connection. Only the main thread uses it, and never during the timed run.
 */
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>
#include <jansson.h>

#include "bench/loadgen/loadgen.h"

struct lg_api {
    CURL *easy;
    struct curl_slist *headers;
    const lg_options *o;
    char *buf; /* the response body */
    size_t len, cap;
    char curl_err[CURL_ERROR_SIZE];
};

static size_t api_write(char *p, size_t size, size_t nmemb, void *ud) {
    lg_api *api = ud;
    size_t n = size * nmemb;
    if (api->len + n + 1 > api->cap) {
        size_t cap = api->cap ? api->cap : 4096;
        while (cap < api->len + n + 1) cap *= 2;
        char *grown = realloc(api->buf, cap);
        if (!grown) return 0; /* curl reports a write error */
        api->buf = grown;
        api->cap = cap;
    }
    memcpy(api->buf + api->len, p, n);
    api->len += n;
    api->buf[api->len] = '\0';
    return n;
}

lg_api *lg_api_create(const lg_options *o, lg_err *e) {
    lg_api *api = calloc(1, sizeof *api);
    if (!api || !(api->easy = curl_easy_init())) {
        free(api);
        lg_fail(e, "out of memory creating a curl handle");
        return NULL;
    }
    api->o = o;
    api->headers = curl_slist_append(NULL, "Content-Type: application/json");
    api->headers = curl_slist_append(api->headers, "Expect:"); /* no 100-continue round trip */
    if (o->api_key) {
        char auth[512];
        snprintf(auth, sizeof auth, "Authorization: Bearer %s", o->api_key);
        api->headers = curl_slist_append(api->headers, auth);
    }
    curl_easy_setopt(api->easy, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(api->easy, CURLOPT_WRITEFUNCTION, api_write);
    curl_easy_setopt(api->easy, CURLOPT_WRITEDATA, api);
    curl_easy_setopt(api->easy, CURLOPT_ERRORBUFFER, api->curl_err);
    curl_easy_setopt(api->easy, CURLOPT_TIMEOUT_MS, (long)(o->timeout_s * 1000));
    return api;
}

void lg_api_destroy(lg_api *api) {
    if (!api) return;
    curl_easy_cleanup(api->easy);
    curl_slist_free_all(api->headers);
    free(api->buf);
    free(api);
}

/* GET (body NULL) or POST path; *out is the parsed 200 answer (caller owns; json_decref). */
static int api_request(lg_api *api, const char *path, const char *body, json_t **out, lg_err *e) {
    char url[2048];
    snprintf(url, sizeof url, "%s%s", api->o->base_url, path);
    const char *method = body ? "POST" : "GET";
    api->len = 0;
    api->curl_err[0] = '\0';
    curl_easy_setopt(api->easy, CURLOPT_URL, url);
    curl_easy_setopt(api->easy, CURLOPT_HTTPHEADER, api->headers);
    if (body) {
        curl_easy_setopt(api->easy, CURLOPT_POSTFIELDS, body);
    } else {
        curl_easy_setopt(api->easy, CURLOPT_HTTPGET, 1L);
    }
    CURLcode rc = curl_easy_perform(api->easy);
    if (rc != CURLE_OK) {
        return lg_fail(e, "%s %s: %s", method, url, api->curl_err[0] ? api->curl_err : curl_easy_strerror(rc));
    }
    long status = 0;
    curl_easy_getinfo(api->easy, CURLINFO_RESPONSE_CODE, &status);
    if (status != 200) {
        return lg_fail(e, "%s %s: HTTP %ld: %.300s", method, url, status, api->len ? api->buf : "(no body)");
    }
    json_error_t jerr;
    *out = json_loadb(api->buf ? api->buf : "", api->len, 0, &jerr);
    if (!*out) return lg_fail(e, "%s %s: the answer is not JSON (%s)", method, url, jerr.text);
    return 0;
}

int lg_api_first_model(lg_api *api, char **id, lg_err *e) {
    json_t *root;
    if (api_request(api, "/v1/models", NULL, &root, e) != 0) return -1;
    const char *name = json_string_value(json_object_get(json_array_get(json_object_get(root, "data"), 0), "id"));
    int rc = 0;
    if (!name) {
        rc = lg_fail(e, "GET %s/v1/models: no data[0].id in the answer; pass --model", api->o->base_url);
    } else if (!(*id = strdup(name))) {
        rc = lg_fail(e, "out of memory");
    }
    json_decref(root);
    return rc;
}

int lg_api_count_tokens(lg_api *api, const char *text, int *count, lg_err *e) {
    /* "content"/"add_special" for llama-server and spindle, "prompt"/"add_special_tokens"
     * for vLLM; each server reads its own pair and ignores the other. */
    json_t *req =
        json_pack("{s:s, s:s, s:b, s:b}", "content", text, "prompt", text, "add_special", 0, "add_special_tokens", 0);
    char *body = req ? json_dumps(req, JSON_COMPACT) : NULL;
    json_decref(req);
    if (!body) return lg_fail(e, "out of memory");
    json_t *root;
    int rc = api_request(api, "/tokenize", body, &root, e);
    free(body);
    if (rc != 0) return -1;
    json_t *tokens = json_object_get(root, "tokens");
    if (!json_is_array(tokens)) {
        json_decref(root);
        return lg_fail(e, "POST %s/tokenize: no tokens array in the answer", api->o->base_url);
    }
    *count = (int)json_array_size(tokens);
    json_decref(root);
    return 0;
}
