/* test_kvtier.c: the prefix cache's host and disk tiers: exact round trips, LRU order
 * from host to disk to gone, budgets, persistence across a restart, corrupt and foreign
 * files rejected, the directory lock, and a random churn checked against a model. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kvcache/kvcache.h"

enum { B = 4, BYTES = 256 };

/* Block k: its hash, parent and tokens and payload are functions of k. */
static uint64_t hash_of(int k) {
    return 0x1000u + (uint64_t)k * 0x9e3779b97f4a7c15ULL;
}
static uint64_t parent_of(int k) {
    return k == 0 ? 1 : hash_of(k - 1);
}
static void tokens_of(int k, int32_t *t) {
    for (int i = 0; i < B; i++) t[i] = k * 10 + i;
}
static void payload_of(int k, uint8_t *p) {
    for (int i = 0; i < BYTES; i++) p[i] = (uint8_t)(k * 31 + i * 7);
}

static void put(kvt_store *t, int k) {
    int32_t tok[B];
    uint8_t data[BYTES];
    tokens_of(k, tok);
    payload_of(k, data);
    kvt_put(t, hash_of(k), parent_of(k), tok, data);
}

/* Gets block k; checks its bytes when found. */
static kvt_tier get(kvt_store *t, int k) {
    int32_t tok[B];
    uint8_t data[BYTES], want[BYTES];
    tokens_of(k, tok);
    payload_of(k, want);
    kvt_tier tier = kvt_get(t, hash_of(k), parent_of(k), tok, data);
    if (tier != KVT_NONE) cr_assert(memcmp(data, want, BYTES) == 0, "block %d comes back bit for bit", k);
    return tier;
}

static kvt_tier find(kvt_store *t, int k) {
    int32_t tok[B];
    tokens_of(k, tok);
    return kvt_find(t, hash_of(k), parent_of(k), tok);
}

static char *make_dir(void) {
    char *d = strdup("/tmp/test_kvtier_XXXXXX");
    cr_assert_not_null(mkdtemp(d));
    return d;
}

/* Files (not lock) in dir, recursively one level down. */
static int count_files(const char *dir) {
    int n = 0;
    DIR *d = opendir(dir);
    if (!d) return 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char p[512];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        struct stat st;
        if (stat(p, &st) == 0 && S_ISDIR(st.st_mode))
            n += count_files(p);
        else if (strcmp(e->d_name, "lock") != 0)
            n++;
    }
    closedir(d);
    return n;
}

static void rm_tree(const char *dir) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    cr_assert_eq(system(cmd), 0);
}

Test(kvtier, no_tier_holds_nothing) {
    kvt_store *t;
    kvt_config c = {.block_size = B, .block_bytes = BYTES};
    cr_assert_eq(kvt_create(&c, &t), SP_OK);
    cr_assert_not(kvt_enabled(t));
    put(t, 1);
    cr_assert_eq(find(t, 1), KVT_NONE);
    kvt_destroy(t);
}

Test(kvtier, host_tier_round_trip_and_exact_match) {
    kvt_store *t;
    kvt_config c = {.block_size = B, .block_bytes = BYTES, .host_bytes = 4 * BYTES};
    cr_assert_eq(kvt_create(&c, &t), SP_OK);
    put(t, 1);
    cr_assert_eq(get(t, 1), KVT_HOST);
    /* the same hash with other tokens or another parent is another block */
    int32_t tok[B];
    uint8_t data[BYTES];
    tokens_of(1, tok);
    tok[2]++;
    cr_assert_eq(kvt_get(t, hash_of(1), parent_of(1), tok, data), KVT_NONE);
    tokens_of(1, tok);
    cr_assert_eq(kvt_get(t, hash_of(1), parent_of(1) + 1, tok, data), KVT_NONE);
    put(t, 1); /* held already: nothing new */
    kvt_stats st;
    kvt_stats_get(t, &st);
    cr_assert_eq(st.stored, 1);
    cr_assert_eq(st.host_blocks, 1);
    cr_assert_eq(st.host_hits, 1);
    kvt_destroy(t);
}

Test(kvtier, host_lru_spills_to_disk_and_disk_lru_drops) {
    char *dir = make_dir();
    kvt_store *t;
    kvt_config c = {.block_size = B, .block_bytes = BYTES, .host_bytes = 2 * BYTES, .disk_dir = dir};
    cr_assert_eq(kvt_create(&c, &t), SP_OK);
    kvt_destroy(t);
    /* a disk budget of exactly 3 files: the file size is the header + tokens + payload */
    c.disk_bytes = 1; /* below one file: no disk tier */
    cr_assert_eq(kvt_create(&c, &t), SP_OK);
    kvt_stats st;
    kvt_stats_get(t, &st);
    cr_assert_eq(st.disk_capacity, 0);
    kvt_destroy(t);
    for (int64_t bytes = BYTES;; bytes++) { /* the smallest budget that holds 3 files */
        c.disk_bytes = bytes;
        cr_assert_eq(kvt_create(&c, &t), SP_OK);
        kvt_stats_get(t, &st);
        if (st.disk_capacity == 3) break;
        kvt_destroy(t);
    }
    for (int k = 0; k < 4; k++) put(t, k);
    /* host holds 2 (2, 3), disk the 2 older (0, 1) */
    cr_assert_eq(find(t, 0), KVT_DISK);
    cr_assert_eq(find(t, 1), KVT_DISK);
    cr_assert_eq(find(t, 2), KVT_HOST);
    cr_assert_eq(find(t, 3), KVT_HOST);
    cr_assert_eq(get(t, 0), KVT_DISK); /* 0 is now the most recently used file */
    put(t, 4);                         /* 2 -> disk */
    put(t, 5);                         /* 3 -> disk: 4 files for 3 places, 1 (the oldest) goes */
    cr_assert_eq(find(t, 1), KVT_NONE);
    cr_assert_eq(find(t, 0), KVT_DISK);
    cr_assert_eq(get(t, 2), KVT_DISK);
    cr_assert_eq(get(t, 3), KVT_DISK);
    cr_assert_eq(get(t, 5), KVT_HOST);
    kvt_stats_get(t, &st);
    cr_assert_eq(st.host_blocks, 2);
    cr_assert_eq(st.disk_blocks, 3);
    cr_assert_eq(st.disk_evictions, 1);
    cr_assert_eq(st.host_evictions, 4);
    cr_assert_eq(count_files(dir), 3);
    kvt_destroy(t);
    cr_assert_eq(count_files(dir), 0, "a directory of its own is removed with its files");
    rm_tree(dir);
    free(dir);
}

/* The path of the one block file under dir (persist: in its spindle-kv-* directory). */
static void first_block_file(const char *dir, char *out, size_t cap) {
    DIR *d = opendir(dir);
    cr_assert_not_null(d);
    struct dirent *e;
    out[0] = 0;
    while ((e = readdir(d))) {
        size_t n = strlen(e->d_name);
        if (n > 3 && strcmp(e->d_name + n - 3, ".kv") == 0) {
            snprintf(out, cap, "%s/%s", dir, e->d_name);
            break;
        }
    }
    closedir(d);
    cr_assert(out[0], "a block file in %s", dir);
}

static void write_model(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f);
    fputs(text, f);
    fclose(f);
}

Test(kvtier, persist_survives_a_restart_and_rejects_what_it_should) {
    char *dir = make_dir();
    char model[600], other[600];
    snprintf(model, sizeof model, "%s.model", dir);
    snprintf(other, sizeof other, "%s.other", dir);
    write_model(model, "weights of model one");
    write_model(other, "weights of model two");
    kvt_config c = {.block_size = B,
                    .block_bytes = BYTES,
                    .disk_dir = dir,
                    .disk_bytes = 1 << 20,
                    .persist = true,
                    .model_path = model,
                    .layout = 42};
    kvt_store *t;
    cr_assert_eq(kvt_create(&c, &t), SP_OK);
    for (int k = 0; k < 3; k++) put(t, k);
    char sub[600];
    snprintf(sub, sizeof sub, "%s", kvt_disk_path(t));
    cr_assert(strstr(sub, "/spindle-kv-"));
    /* a second process on the same directory and model is refused */
    kvt_store *second;
    cr_assert_eq(kvt_create(&c, &second), SP_ERR_IO);
    cr_assert(strstr(sp_last_error(), "in use"), "%s", sp_last_error());
    kvt_destroy(t);
    cr_assert_eq(count_files(sub), 3, "persist keeps the files");

    /* restart: the blocks are there, bit for bit */
    cr_assert_eq(kvt_create(&c, &t), SP_OK);
    kvt_stats st;
    kvt_stats_get(t, &st);
    cr_assert_eq(st.disk_restored, 3);
    for (int k = 0; k < 3; k++) cr_assert_eq(get(t, k), KVT_DISK);
    kvt_destroy(t);

    /* one file's payload changed, one truncated: neither is ever loaded. The restart
     * reads headers only, so it drops the truncated one; the changed one fails its
     * checksum when loaded. Both are deleted. */
    char changed[900], cut[900];
    first_block_file(sub, changed, sizeof changed);
    int fd = open(changed, O_RDWR);
    cr_assert_geq(fd, 0);
    cr_assert_eq(pwrite(fd, "X", 1, 200), 1);
    close(fd);
    cr_assert_eq(rename(changed, "/tmp/test_kvtier_hold"), 0); /* so the next one found is another */
    first_block_file(sub, cut, sizeof cut);
    cr_assert_eq(rename("/tmp/test_kvtier_hold", changed), 0);
    cr_assert_eq(truncate(cut, 100), 0);
    cr_assert_eq(kvt_create(&c, &t), SP_OK);
    kvt_stats_get(t, &st);
    cr_assert_eq(st.disk_restored, 2);
    cr_assert_eq(st.disk_rejected, 1);
    cr_assert_eq(access(cut, F_OK), -1, "the truncated file is deleted");
    int ok = 0, gone = 0;
    for (int k = 0; k < 3; k++) {
        kvt_tier tier = get(t, k);
        ok += tier == KVT_DISK;
        gone += tier == KVT_NONE;
    }
    cr_assert_eq(ok, 1);
    cr_assert_eq(gone, 2, "the changed block and the truncated one");
    kvt_stats_get(t, &st);
    cr_assert_eq(st.disk_rejected, 2);
    cr_assert_eq(access(changed, F_OK), -1, "the changed file is deleted");
    kvt_destroy(t);

    /* another model (or layout) on the same directory: its own subdirectory, nothing shared */
    c.model_path = other;
    cr_assert_eq(kvt_create(&c, &t), SP_OK);
    cr_assert_str_neq(kvt_disk_path(t), sub);
    cr_assert_eq(find(t, 0), KVT_NONE);
    kvt_destroy(t);
    c.model_path = model;
    c.layout = 43;
    cr_assert_eq(kvt_create(&c, &t), SP_OK);
    kvt_stats_get(t, &st);
    cr_assert_eq(st.disk_restored, 0, "files of another KV layout are not indexed");
    cr_assert_eq(st.disk_rejected, 1);
    kvt_destroy(t);

    rm_tree(dir);
    unlink(model);
    unlink(other);
    free(dir);
}

Test(kvtier, bad_settings_are_named) {
    kvt_store *t;
    kvt_config c = {.block_size = B, .block_bytes = BYTES, .persist = true};
    cr_assert_eq(kvt_create(&c, &t), SP_ERR_INVALID_ARG);
    cr_assert(strstr(sp_last_error(), "kv_disk_dir"), "%s", sp_last_error());
    c = (kvt_config){.block_size = B, .block_bytes = BYTES, .disk_dir = "/proc/not-a-place", .disk_bytes = 1 << 20};
    cr_assert_eq(kvt_create(&c, &t), SP_ERR_IO);
    cr_assert(strstr(sp_last_error(), "/proc/not-a-place"), "%s", sp_last_error());
}

/* Random puts and gets against a model of what each tier must hold: every block the
 * store claims comes back bit for bit, the counts match the tiers' contents, and the
 * budgets hold. */
Test(kvtier, churn_keeps_its_accounting) {
    char *dir = make_dir();
    kvt_store *t;
    kvt_config c = {
        .block_size = B, .block_bytes = BYTES, .host_bytes = 8 * BYTES, .disk_dir = dir, .disk_bytes = 20 * 600};
    cr_assert_eq(kvt_create(&c, &t), SP_OK);
    kvt_stats st;
    kvt_stats_get(t, &st);
    unsigned seed = 7;
    for (int i = 0; i < 3000; i++) {
        int k = rand_r(&seed) % 60;
        if (rand_r(&seed) % 2)
            put(t, k);
        else
            (void)get(t, k);
        if (i % 100 == 0) {
            kvt_stats_get(t, &st);
            cr_assert_leq(st.host_blocks, st.host_capacity);
            cr_assert_leq(st.disk_blocks, st.disk_capacity);
            int held = 0;
            for (int j = 0; j < 60; j++) held += find(t, j) != KVT_NONE;
            cr_assert_eq(held, st.host_blocks + st.disk_blocks);
            cr_assert_eq(count_files(dir), st.disk_blocks);
        }
    }
    kvt_destroy(t);
    cr_assert_eq(count_files(dir), 0);
    rm_tree(dir);
    free(dir);
}

/* A block found (an admission's match) is marked recently used: the blocks the same
 * admission pushes down from the pool evict older ones, not it. */
Test(kvtier, a_found_block_outlives_the_next_puts) {
    kvt_store *t;
    kvt_config c = {.block_size = B, .block_bytes = BYTES, .host_bytes = 2 * BYTES};
    cr_assert_eq(kvt_create(&c, &t), SP_OK);
    put(t, 0);
    put(t, 1);
    cr_assert_eq(find(t, 0), KVT_HOST);
    put(t, 2); /* the host tier is full: the least recently used goes, 1 */
    cr_assert_eq(find(t, 1), KVT_NONE);
    cr_assert_eq(get(t, 0), KVT_HOST);
    kvt_destroy(t);
}

/* A directory left by a process that died (its lock free) is removed at the next start;
 * one whose lock is held is left alone. */
Test(kvtier, directories_of_dead_processes_are_removed) {
    char *dir = make_dir();
    char dead[600], alive[600], path[700];
    snprintf(dead, sizeof dead, "%s/spindle-kv-AAAAAA", dir);
    snprintf(alive, sizeof alive, "%s/spindle-kv-BBBBBB", dir);
    cr_assert_eq(mkdir(dead, 0700), 0);
    cr_assert_eq(mkdir(alive, 0700), 0);
    snprintf(path, sizeof path, "%s/lock", dead);
    close(open(path, O_RDWR | O_CREAT, 0600));
    snprintf(path, sizeof path, "%s/0000000000000001-0000000000000002.kv", dead);
    close(open(path, O_RDWR | O_CREAT, 0600));
    snprintf(path, sizeof path, "%s/lock", alive);
    int held = open(path, O_RDWR | O_CREAT, 0600);
    cr_assert_eq(flock(held, LOCK_EX | LOCK_NB), 0);
    kvt_store *t;
    kvt_config c = {.block_size = B, .block_bytes = BYTES, .disk_dir = dir, .disk_bytes = 1 << 20};
    cr_assert_eq(kvt_create(&c, &t), SP_OK);
    cr_assert_eq(access(dead, F_OK), -1, "the dead process's directory is gone");
    cr_assert_eq(access(alive, F_OK), 0, "the live one's stays");
    kvt_destroy(t);
    close(held);
    rm_tree(dir);
    free(dir);
}
