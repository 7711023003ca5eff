/* auth.c: API keys. The key set comes from --api-key (app->http.api_keys) and
 * --api-key-file (one key per line; blank lines and lines starting with `#` are
 * ignored; surrounding whitespace is trimmed). A request proves itself with
 * `Authorization: Bearer <key>`; the key is compared with every key of the set in
 * constant time. SIGHUP re-reads the file.
 *
 * Constant time: every stored key sits zero-padded in a SRV_AUTH_KEY_MAX-byte slot
 * next to its length. The presented key is padded the same way and compared with
 * every slot over all SRV_AUTH_KEY_MAX bytes, lengths included, with no early exit,
 * so the time depends only on the number of keys: neither on where the first wrong
 * byte is, nor on which key matched, nor on the stored keys' lengths.
 *
 * DESIGN (threads): a key set (auth_keys) is immutable once built and reference
 * counted. srv_auth holds the current one under `lock`, a small mutex held only to
 * take a reference or to swap the pointer. HTTP threads take a reference, compare
 * outside the lock, and drop it. The main thread (SIGHUP) builds a whole new set
 * first, then swaps it in under the lock and drops the old set's reference; the last
 * request still using the old set frees it. So a request sees either the old set or
 * the new one, never a half-built one, and a reload that fails changes nothing.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/log.h"
#include "server/http/http.h"

/* One key in its fixed-size slot (bytes past len are zero). */
typedef struct auth_key {
    unsigned char bytes[SRV_AUTH_KEY_MAX];
    size_t len;
} auth_key;

/* An immutable key set; freed by whoever drops the last reference. */
typedef struct auth_keys {
    _Atomic int refs;
    int n, cap;
    auth_key *keys; /* (n, cap) */
} auth_keys;

struct srv_auth {
    const srv_http_config *config; /* borrowed: api_keys, api_key_file */
    pthread_mutex_t lock;          /* guards `current` (the swap and taking a reference) */
    auth_keys *current;            /* one reference held by srv_auth */
};

static void auth_keys_free(auth_keys *set) {
    if (!set) return;
    if (set->keys) explicit_bzero(set->keys, sizeof *set->keys * (size_t)set->cap);
    free(set->keys);
    free(set);
}

static void auth_keys_release(auth_keys *set) {
    if (set && atomic_fetch_sub(&set->refs, 1) == 1) auth_keys_free(set);
}

static auth_keys *auth_acquire(srv_auth *a) {
    pthread_mutex_lock(&a->lock);
    auth_keys *set = a->current;
    atomic_fetch_add(&set->refs, 1);
    pthread_mutex_unlock(&a->lock);
    return set;
}

/* Adds one key; `where` names it in errors ("--api-key", "keys.txt:3"). */
static sp_status auth_keys_add(auth_keys *set, const char *key, size_t len, const char *where) {
    if (len == 0) return sp_fail(SP_ERR_INVALID_ARG, "%s: empty API key", where);
    if (len > SRV_AUTH_KEY_MAX)
        return sp_fail(SP_ERR_INVALID_ARG, "%s: API key of %zu bytes is longer than the limit of %d bytes", where, len,
                       SRV_AUTH_KEY_MAX);
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)key[i];
        if (c <= ' ' || c == 0x7f)
            return sp_fail(SP_ERR_INVALID_ARG,
                           "%s: API key contains a space or control character at byte %zu (a Bearer token cannot)",
                           where, i + 1);
    }
    if (set->n == set->cap) {
        int cap = set->cap ? set->cap * 2 : 8;
        auth_key *keys = calloc((size_t)cap, sizeof *keys);
        if (!keys) return sp_fail(SP_ERR_NOMEM, "out of memory");
        if (set->keys) {
            memcpy(keys, set->keys, sizeof *keys * (size_t)set->n);
            explicit_bzero(set->keys, sizeof *set->keys * (size_t)set->cap);
            free(set->keys);
        }
        set->keys = keys;
        set->cap = cap;
    }
    auth_key *k = &set->keys[set->n++];
    memset(k->bytes, 0, sizeof k->bytes);
    memcpy(k->bytes, key, len);
    k->len = len;
    return SP_OK;
}

static bool auth_is_space(char c) {
    return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\v' || c == '\f';
}

/* Adds every key of the file at path. */
static sp_status auth_keys_read_file(auth_keys *set, const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return sp_fail(SP_ERR_IO, "%s: cannot read the API key file: %s", path, strerror(errno));
    char *line = NULL;
    size_t line_cap = 0;
    ssize_t got;
    long lineno = 0;
    int before = set->n;
    sp_status st = SP_OK;
    while (st == SP_OK && (got = getline(&line, &line_cap, f)) >= 0) {
        lineno++;
        const char *s = line, *e = line + got;
        while (s < e && auth_is_space(*s)) s++;
        while (e > s && auth_is_space(e[-1])) e--;
        if (s == e || *s == '#') continue;
        char where[512];
        snprintf(where, sizeof where, "%s:%ld", path, lineno);
        st = auth_keys_add(set, s, (size_t)(e - s), where);
    }
    if (st == SP_OK && ferror(f))
        st = sp_fail(SP_ERR_IO, "%s: cannot read the API key file: %s", path, strerror(errno));
    /* a key file without keys would turn authentication off: refuse it */
    if (st == SP_OK && set->n == before)
        st = sp_fail(SP_ERR_INVALID_ARG, "%s: the API key file has no keys (one per line; `#` starts a comment)", path);
    if (line) explicit_bzero(line, line_cap);
    free(line);
    fclose(f);
    return st;
}

/* A new set from the config's keys and key file; caller owns (one reference). */
static sp_status auth_keys_build(const srv_http_config *config, auth_keys **out) {
    auth_keys *set = calloc(1, sizeof *set);
    if (!set) return sp_fail(SP_ERR_NOMEM, "out of memory");
    atomic_init(&set->refs, 1);
    sp_status st = SP_OK;
    for (int i = 0; st == SP_OK && i < config->n_api_keys; i++) {
        const char *key = config->api_keys[i] ? config->api_keys[i] : "";
        st = auth_keys_add(set, key, strlen(key), "--api-key");
    }
    if (st == SP_OK && config->api_key_file) st = auth_keys_read_file(set, config->api_key_file);
    if (st != SP_OK) {
        auth_keys_free(set);
        return st;
    }
    *out = set;
    return SP_OK;
}

/* Whether key (len bytes) equals one of the set, in time that depends only on
 * set->n (see the top of the file). */
static bool auth_keys_match(const auth_keys *set, const char *key, size_t len) {
    unsigned char padded[SRV_AUTH_KEY_MAX] = {0};
    memcpy(padded, key, len < SRV_AUTH_KEY_MAX ? len : SRV_AUTH_KEY_MAX);
    /* a longer key matches no slot: its length differs from every stored one */
    unsigned matched = 0;
    for (int k = 0; k < set->n; k++) {
        const auth_key *stored = &set->keys[k];
        size_t diff = stored->len ^ len;
        unsigned char bytes = 0;
        for (size_t i = 0; i < SRV_AUTH_KEY_MAX; i++) bytes |= (unsigned char)(stored->bytes[i] ^ padded[i]);
        diff |= bytes;
        /* 1 when diff == 0, without a branch: (diff | -diff) has the top bit set iff diff != 0 */
        matched |= (unsigned)(1 ^ ((diff | (0 - diff)) >> (sizeof diff * 8 - 1)));
    }
    explicit_bzero(padded, sizeof padded);
    return matched != 0;
}

sp_status srv_auth_create(const srv_http_config *config, srv_auth **out) {
    srv_auth *a = calloc(1, sizeof *a);
    if (!a) return sp_fail(SP_ERR_NOMEM, "out of memory");
    sp_status st = auth_keys_build(config, &a->current);
    if (st != SP_OK) {
        free(a);
        return st;
    }
    a->config = config;
    pthread_mutex_init(&a->lock, NULL);
    *out = a;
    return SP_OK;
}

void srv_auth_destroy(srv_auth *a) {
    if (!a) return;
    auth_keys_release(a->current);
    pthread_mutex_destroy(&a->lock);
    free(a);
}

int srv_auth_key_count(srv_auth *a) {
    auth_keys *set = auth_acquire(a);
    int n = set->n;
    auth_keys_release(set);
    return n;
}

sp_status srv_auth_reload(srv_auth *a) {
    if (!a->config->api_key_file) {
        sp_log_info("SIGHUP: no --api-key-file to reload");
        return SP_OK;
    }
    auth_keys *fresh;
    sp_status st = auth_keys_build(a->config, &fresh);
    if (st != SP_OK) {
        sp_log_warn("SIGHUP: keeping the %d API keys in use: %s", srv_auth_key_count(a), sp_last_error());
        return st;
    }
    pthread_mutex_lock(&a->lock);
    auth_keys *old = a->current;
    a->current = fresh;
    pthread_mutex_unlock(&a->lock);
    auth_keys_release(old); /* freed here, or by the last request still comparing with it */
    sp_log_info("SIGHUP: %d API keys loaded from %s", fresh->n, a->config->api_key_file);
    return SP_OK;
}

/* The token of `Bearer <token>` (RFC 6750: "Bearer" in any case, whitespace, the
 * token), its length in *len; NULL (and 0) when the header is not that. */
static const char *bearer_token(const char *authorization, size_t *len) {
    const char *s = authorization ? authorization : "";
    while (*s == ' ' || *s == '\t') s++;
    *len = 0;
    if (strncasecmp(s, "Bearer", 6) != 0 || (s[6] != ' ' && s[6] != '\t')) return NULL;
    const char *key = s + 6;
    while (*key == ' ' || *key == '\t') key++;
    size_t n = strlen(key);
    while (n > 0 && (key[n - 1] == ' ' || key[n - 1] == '\t')) n--;
    *len = n;
    return n > 0 ? key : NULL;
}

uint64_t srv_auth_tenant(srv_auth *a, const char *authorization) {
    if (!a || srv_auth_key_count(a) == 0) return 0;
    size_t len;
    const char *key = bearer_token(authorization, &len);
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a: only equality matters, never the key itself */
    for (size_t i = 0; key && i < len; i++) h = (h ^ (unsigned char)key[i]) * 0x100000001b3ull;
    return h == 0 ? 1 : h;
}

bool srv_auth_check(srv_auth *a, const char *authorization, srv_error *err) {
    auth_keys *set = auth_acquire(a);
    bool ok = set->n == 0; /* no keys configured: authentication is off */
    if (!ok) {
        size_t len;
        const char *key = bearer_token(authorization, &len);
        if (len == 0)
            srv_error_make(err, SRV_ERROR_UNAUTHORIZED, NULL,
                           "You didn't provide an API key. You need to provide your API key in an Authorization "
                           "header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).");
        else if (!(ok = auth_keys_match(set, key, len)))
            srv_error_make(err, SRV_ERROR_UNAUTHORIZED, NULL, "Incorrect API key provided.");
    }
    auth_keys_release(set);
    return ok;
}
