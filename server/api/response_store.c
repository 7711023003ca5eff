/* response_store.c: the responses /v1/responses keeps (store: true) so that a later
 * request can continue one with previous_response_id, and GET or DELETE it by id.
 *
 * DESIGN: entries live in memory, bounded three ways (--responses-store-mb bytes of
 * their JSON, --responses-store-max entries, --responses-store-ttl seconds); past a bound
 * the oldest go first. Since every entry lives the same time, insertion order is also
 * expiry order: one FIFO list serves both, and a hash of the ids finds an entry. Each
 * entry belongs to the API key that made it (its tenant): another key's lookup misses,
 * as if the id did not exist. Thread-safe (one mutex; prep workers read, HTTP threads
 * write); the JSON handed out is a copy.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "server/api/api_internal.h"

enum { STORE_BUCKETS = 4096 };

typedef struct store_entry {
    char id[48];
    uint64_t tenant;
    json_t *response;                  /* the response object as GET returns it */
    json_t *conversation;              /* chat messages up to and including its output */
    size_t bytes;                      /* what it counts against the budget */
    double expires;                    /* seconds on the caller's clock (sched_now()) */
    struct store_entry *older, *newer; /* the FIFO */
    struct store_entry *next_in_bucket;
} store_entry;

struct srv_response_store {
    pthread_mutex_t lock;
    size_t max_bytes, bytes;
    int max_count, count;
    double ttl_s;
    store_entry *oldest, *newest;
    store_entry *buckets[STORE_BUCKETS];
};

static size_t bucket_of(const char *id) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (const char *p = id; *p; p++) h = (h ^ (unsigned char)*p) * 0x100000001b3ull;
    return (size_t)(h % STORE_BUCKETS);
}

sp_status srv_response_store_create(size_t max_bytes, int max_count, double ttl_s, srv_response_store **out) {
    srv_response_store *s = calloc(1, sizeof *s);
    if (!s) return sp_fail(SP_ERR_NOMEM, "out of memory for the response store");
    pthread_mutex_init(&s->lock, NULL);
    s->max_bytes = max_bytes;
    s->max_count = max_count > 0 ? max_count : 1;
    s->ttl_s = ttl_s;
    *out = s;
    return SP_OK;
}

static void entry_free(store_entry *e) {
    json_decref(e->response);
    json_decref(e->conversation);
    free(e);
}

/* Unlinks e from the FIFO and its bucket (under the lock). */
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
    s->bytes -= e->bytes;
    s->count--;
    entry_free(e);
}

/* Drops the expired, then the oldest until `bytes` more and one more entry fit. */
static void make_room(srv_response_store *s, size_t bytes, double now) {
    while (s->oldest && (s->oldest->expires <= now || s->count + 1 > s->max_count || s->bytes + bytes > s->max_bytes))
        entry_remove(s, s->oldest);
}

static store_entry *find(srv_response_store *s, const char *id, uint64_t tenant, double now) {
    for (store_entry *e = s->buckets[bucket_of(id)]; e; e = e->next_in_bucket)
        if (strcmp(e->id, id) == 0) return e->tenant == tenant && e->expires > now ? e : NULL;
    return NULL;
}

bool srv__store_put(srv_response_store *s, const char *id, uint64_t tenant, json_t *response, json_t *conversation,
                    double now) {
    char *a = json_dumps(response, JSON_COMPACT), *b = json_dumps(conversation, JSON_COMPACT);
    size_t bytes = (a ? strlen(a) : 0) + (b ? strlen(b) : 0) + sizeof(store_entry);
    free(a);
    free(b);
    store_entry *e = NULL;
    bool fits = s && s->max_bytes > 0 && bytes <= s->max_bytes && strlen(id) < sizeof e->id;
    if (fits) e = calloc(1, sizeof *e);
    if (!e) {
        json_decref(response);
        json_decref(conversation);
        return false;
    }
    snprintf(e->id, sizeof e->id, "%s", id);
    e->tenant = tenant;
    e->response = response;
    e->conversation = conversation;
    e->bytes = bytes;
    e->expires = now + s->ttl_s;
    pthread_mutex_lock(&s->lock);
    make_room(s, bytes, now);
    size_t k = bucket_of(e->id);
    e->next_in_bucket = s->buckets[k];
    s->buckets[k] = e;
    e->older = s->newest;
    if (s->newest)
        s->newest->newer = e;
    else
        s->oldest = e;
    s->newest = e;
    s->bytes += bytes;
    s->count++;
    pthread_mutex_unlock(&s->lock);
    return true;
}

bool srv__store_get(srv_response_store *s, const char *id, uint64_t tenant, json_t **response, json_t **conversation,
                    double now) {
    if (!s) return false;
    pthread_mutex_lock(&s->lock);
    store_entry *e = find(s, id, tenant, now);
    if (e) {
        /* copies: a reader may change its own, and jansson's dump is not safe on a value
         * two threads share */
        if (response) *response = json_deep_copy(e->response);
        if (conversation) *conversation = json_deep_copy(e->conversation);
    }
    pthread_mutex_unlock(&s->lock);
    return e != NULL;
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
