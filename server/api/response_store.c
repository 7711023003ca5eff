/* response_store.c: the responses /v1/responses keeps (store: true) so that a later
 * request can continue one with previous_response_id, and GET or DELETE it by id.
 *
 * DESIGN: entries live in memory as text: the response and its conversation as compact
 * JSON in one allocation with the entry itself, parsed again on each read. An entry
 * charges what that allocation holds in malloc (the text, the struct, the allocator's
 * header and rounding), so --responses-store-mb bounds what the store really holds; the
 * jansson trees a request builds (tens of bytes of nodes per byte of a message-heavy
 * conversation) are freed when it has been put. Bounded three ways (bytes, entries
 * --responses-store-max, age --responses-store-ttl); past a bound the oldest go first.
 * Since every entry lives the same time, insertion order is also expiry order: one FIFO
 * list of all the entries serves expiry, and a hash of the ids finds an entry.
 *
 * Tenants: each entry belongs to the API key that made it; another key's lookup misses,
 * as if the id did not exist. Each key also has its own FIFO and share: a key past its
 * share (--responses-store-key-mb; 0: the whole budget) drops its own oldest first, and
 * when the whole store is full the key holding the most (bytes, or entries for the count
 * bound) gives up its oldest, so one key's flood never evicts a key that holds less than
 * it. Thread-safe (one mutex; prep workers read, HTTP threads write); a read copies the
 * text under the lock and parses it after, so the JSON handed out is the reader's own.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "server/api/api_internal.h"

enum { STORE_BUCKETS = 4096, TENANT_BUCKETS = 256 };

struct store_tenant;

/* One stored response: this struct and, after it, the response's compact JSON and the
 * conversation's, each NUL-terminated. */
typedef struct store_entry {
    char id[48];
    struct store_tenant *tenant;
    size_t bytes;                              /* what it counts against the budgets (entry_charge) */
    size_t response_len;                       /* text[0..]: the response; text[response_len + 1..]: the chat */
    uint64_t seq;                              /* the order of the puts */
    double expires;                            /* seconds on the caller's clock (sched_now()) */
    struct store_entry *older, *newer;         /* every entry's FIFO */
    struct store_entry *key_older, *key_newer; /* its key's FIFO */
    struct store_entry *next_in_bucket;
    char text[];
} store_entry;

/* An API key that holds entries (freed with its last one). */
typedef struct store_tenant {
    uint64_t key;
    size_t bytes;
    int count;
    bool pinned; /* a put for it is making room: kept even with no entries */
    store_entry *oldest, *newest;
    struct store_tenant *next_in_bucket;
} store_tenant;

struct srv_response_store {
    pthread_mutex_t lock;
    size_t max_bytes, key_max_bytes, bytes; /* key_max_bytes: each key's share (max_bytes: none) */
    int max_count, count, tenants;
    uint64_t puts; /* the next entry's seq */
    double ttl_s;
    srv_store_stats counters; /* the totals of srv_response_store_stats */
    store_entry *oldest, *newest;
    store_entry *buckets[STORE_BUCKETS];
    store_tenant *tenant_buckets[TENANT_BUCKETS];
};

/* What malloc holds for a block of n bytes: glibc's chunk (an 8-byte header, 16-byte
 * granules, 32 bytes at least), which is at least what any allocator hands out. */
static size_t malloc_held(size_t n) {
    size_t chunk = (n + 8 + 15) & ~(size_t)15;
    return chunk < 32 ? 32 : chunk;
}

size_t srv__store_entry_charge(size_t response_len, size_t conversation_len) {
    return malloc_held(sizeof(store_entry) + response_len + 1 + conversation_len + 1);
}

static size_t bucket_of(const char *id) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (const char *p = id; *p; p++) h = (h ^ (unsigned char)*p) * 0x100000001b3ull;
    return (size_t)(h % STORE_BUCKETS);
}

static size_t tenant_bucket_of(uint64_t key) {
    return (size_t)((key * 0x9e3779b97f4a7c15ull) >> 56) % TENANT_BUCKETS;
}

sp_status srv_response_store_create(size_t max_bytes, int max_count, double ttl_s, srv_response_store **out) {
    srv_response_store *s = calloc(1, sizeof *s);
    if (!s) return sp_fail(SP_ERR_NOMEM, "out of memory for the response store");
    pthread_mutex_init(&s->lock, NULL);
    s->max_bytes = s->key_max_bytes = max_bytes;
    s->max_count = max_count > 0 ? max_count : 1;
    s->ttl_s = ttl_s;
    *out = s;
    return SP_OK;
}

void srv_response_store_set_key_bytes(srv_response_store *s, size_t key_max_bytes) {
    if (!s) return;
    pthread_mutex_lock(&s->lock);
    s->key_max_bytes = key_max_bytes > 0 && key_max_bytes < s->max_bytes ? key_max_bytes : s->max_bytes;
    pthread_mutex_unlock(&s->lock);
}

void srv_response_store_stats(srv_response_store *s, srv_store_stats *out) {
    memset(out, 0, sizeof *out);
    if (!s) return;
    pthread_mutex_lock(&s->lock);
    *out = s->counters;
    out->bytes = s->bytes;
    out->entries = s->count;
    out->keys = s->tenants;
    pthread_mutex_unlock(&s->lock);
}

static store_tenant **tenant_slot(srv_response_store *s, uint64_t key) {
    store_tenant **p = &s->tenant_buckets[tenant_bucket_of(key)];
    while (*p && (*p)->key != key) p = &(*p)->next_in_bucket;
    return p;
}

/* Unlinks e from the FIFOs and its bucket and frees it, its key too when it was the
 * key's last (under the lock). */
static void entry_remove(srv_response_store *s, store_entry *e) {
    store_entry **p = &s->buckets[bucket_of(e->id)];
    while (*p != e) p = &(*p)->next_in_bucket;
    *p = e->next_in_bucket;
    if (e->older)
        e->older->newer = e->newer;
    else
        s->oldest = e->newer;
    if (e->newer)
        e->newer->older = e->older;
    else
        s->newest = e->older;
    store_tenant *t = e->tenant;
    if (e->key_older)
        e->key_older->key_newer = e->key_newer;
    else
        t->oldest = e->key_newer;
    if (e->key_newer)
        e->key_newer->key_older = e->key_older;
    else
        t->newest = e->key_older;
    t->bytes -= e->bytes;
    s->bytes -= e->bytes;
    s->count--;
    if (--t->count == 0 && !t->pinned) {
        store_tenant **slot = tenant_slot(s, t->key);
        *slot = t->next_in_bucket;
        free(t);
        s->tenants--;
    }
    free(e);
}

/* What t holds, in bytes or (by_count) entries. */
static size_t held_by(const store_tenant *t, bool by_count) {
    return by_count ? (size_t)t->count : t->bytes;
}

/* The key holding the most bytes (by_count: entries), of equals the one with the oldest
 * entry; NULL when none holds any. */
static store_tenant *largest_tenant(srv_response_store *s, bool by_count) {
    store_tenant *best = NULL;
    for (size_t b = 0; b < TENANT_BUCKETS; b++)
        for (store_tenant *t = s->tenant_buckets[b]; t; t = t->next_in_bucket) {
            if (!t->oldest) continue;
            size_t mine = held_by(t, by_count), most = best ? held_by(best, by_count) : 0;
            if (!best || mine > most || (mine == most && t->oldest->seq < best->oldest->seq)) best = t;
        }
    return best;
}

/* Makes room for one more entry of `bytes` for key t: the expired go, then t's own oldest
 * while t is past its share, then the oldest of the key holding the most while the store
 * is past its bounds (under the lock). */
static void make_room(srv_response_store *s, store_tenant *t, size_t bytes, double now) {
    while (s->oldest && s->oldest->expires <= now) {
        entry_remove(s, s->oldest);
        s->counters.expired++;
    }
    while (t->oldest && t->bytes + bytes > s->key_max_bytes) {
        entry_remove(s, t->oldest);
        s->counters.evicted_own++;
    }
    while (s->oldest && (s->count + 1 > s->max_count || s->bytes + bytes > s->max_bytes)) {
        store_tenant *victim = largest_tenant(s, s->count + 1 > s->max_count);
        if (victim == t)
            s->counters.evicted_own++;
        else
            s->counters.evicted_other++;
        entry_remove(s, victim->oldest);
    }
}

static store_entry *find(srv_response_store *s, const char *id, uint64_t tenant, double now) {
    for (store_entry *e = s->buckets[bucket_of(id)]; e; e = e->next_in_bucket)
        if (strcmp(e->id, id) == 0) return e->tenant->key == tenant && e->expires > now ? e : NULL;
    return NULL;
}

/* The entry for id holding both texts (copied), its charge in *bytes; NULL when the JSON
 * does not serialize or memory runs out. */
static store_entry *entry_new(const char *id, const json_t *response, const json_t *conversation, size_t *bytes) {
    char *a = json_dumps(response, JSON_COMPACT), *b = json_dumps(conversation, JSON_COMPACT);
    store_entry *e = NULL;
    if (a && b) {
        size_t la = strlen(a), lb = strlen(b);
        *bytes = srv__store_entry_charge(la, lb);
        if ((e = calloc(1, sizeof *e + la + 1 + lb + 1))) {
            snprintf(e->id, sizeof e->id, "%s", id);
            e->response_len = la;
            memcpy(e->text, a, la + 1);
            memcpy(e->text + la + 1, b, lb + 1);
            e->bytes = *bytes;
        }
    }
    free(a);
    free(b);
    return e;
}

bool srv__store_put(srv_response_store *s, const char *id, uint64_t tenant, json_t *response, json_t *conversation,
                    double now) {
    size_t bytes = 0;
    store_entry *e =
        s && s->max_bytes > 0 && strlen(id) < sizeof e->id ? entry_new(id, response, conversation, &bytes) : NULL;
    json_decref(response);
    json_decref(conversation);
    if (!e) return false;
    pthread_mutex_lock(&s->lock);
    store_tenant **slot = tenant_slot(s, tenant), *t = *slot;
    if (!t && bytes <= s->key_max_bytes && (t = *slot = calloc(1, sizeof *t))) {
        t->key = tenant;
        s->tenants++;
    }
    if (!t || bytes > s->key_max_bytes) { /* larger than a key's share (or out of memory) */
        s->counters.refused++;
        pthread_mutex_unlock(&s->lock);
        free(e);
        return false;
    }
    e->expires = now + s->ttl_s;
    e->seq = s->puts++;
    e->tenant = t;
    t->pinned = true; /* make_room may take its last entry */
    make_room(s, t, bytes, now);
    t->pinned = false;
    size_t k = bucket_of(e->id);
    e->next_in_bucket = s->buckets[k];
    s->buckets[k] = e;
    e->older = s->newest;
    if (s->newest)
        s->newest->newer = e;
    else
        s->oldest = e;
    s->newest = e;
    e->key_older = t->newest;
    if (t->newest)
        t->newest->key_newer = e;
    else
        t->oldest = e;
    t->newest = e;
    t->count++;
    t->bytes += bytes;
    s->bytes += bytes;
    s->count++;
    s->counters.stored++;
    pthread_mutex_unlock(&s->lock);
    return true;
}

/* The JSON in text (a copy of a stored one), or NULL. */
static json_t *parse_stored(char *text) {
    json_t *j = text ? json_loads(text, JSON_ALLOW_NUL, NULL) : NULL;
    free(text);
    return j;
}

bool srv__store_get(srv_response_store *s, const char *id, uint64_t tenant, json_t **response, json_t **conversation,
                    double now) {
    if (!s) return false;
    char *response_text = NULL, *conversation_text = NULL;
    pthread_mutex_lock(&s->lock);
    store_entry *e = find(s, id, tenant, now);
    bool found = e != NULL;
    if (e && response) response_text = strdup(e->text);
    if (e && conversation) conversation_text = strdup(e->text + e->response_len + 1);
    pthread_mutex_unlock(&s->lock);
    if (!found) return false;
    /* parsed after the lock: each reader gets its own tree */
    json_t *r = response ? parse_stored(response_text) : NULL,
           *c = conversation ? parse_stored(conversation_text) : NULL;
    if ((response && !r) || (conversation && !c)) { /* out of memory: a miss */
        json_decref(r);
        json_decref(c);
        return false;
    }
    if (response) *response = r;
    if (conversation) *conversation = c;
    return true;
}

bool srv__store_delete(srv_response_store *s, const char *id, uint64_t tenant, double now) {
    if (!s) return false;
    pthread_mutex_lock(&s->lock);
    store_entry *e = find(s, id, tenant, now);
    if (e) entry_remove(s, e);
    pthread_mutex_unlock(&s->lock);
    return e != NULL;
}

void srv_response_store_destroy(srv_response_store *s) {
    if (!s) return;
    while (s->oldest) entry_remove(s, s->oldest);
    pthread_mutex_destroy(&s->lock);
    free(s);
}
