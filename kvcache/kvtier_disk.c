/* kvtier_disk.c: the disk tier's directory and files (kvcache.h has the design).
 *
 * A file is <hash>-<parent>.kv (16 hex digits each): a header (below), the block's
 * tokens, then its payload. The header carries what makes the bytes meaningful (the
 * model's sha256 with persist, the KV layout, the block's size) and a checksum of the
 * tokens and payload, so a file from another model or layout, a truncated one or a
 * changed one is never loaded. Files are written under a temporary name and renamed,
 * so a crash leaves no half-written file under a block's name.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <nettle/sha2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/log.h"
#include "kvcache/kvcache_internal.h"

#define KVT_MAGIC "SPKVBLK"
enum { KVT_FILE_VERSION = 1 };

typedef struct kvt_file_header {
    char magic[8]; /* KVT_MAGIC and a NUL */
    uint32_t version;
    uint32_t block_size;
    uint64_t block_bytes;
    uint64_t layout;
    uint8_t model_sha[32];
    uint64_t hash, parent;
    uint64_t checksum; /* of the tokens and payload (kvt_checksum) */
} kvt_file_header;

size_t kvt__file_bytes(const kvt_store *t) {
    return sizeof(kvt_file_header) + sizeof(int32_t) * (size_t)t->block_size + t->block_bytes;
}

/* A 64-bit checksum, 8 bytes at a time (tail bytes one at a time): it finds corruption,
 * it is not meant to resist an attacker (the directory is the server's own). */
static uint64_t kvt_checksum(const uint8_t *p, size_t n) {
    uint64_t h = 0x243f6a8885a308d3ULL ^ n;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        h = (h ^ w) * 0x9e3779b97f4a7c15ULL;
        h ^= h >> 29;
    }
    for (; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ULL;
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    return h;
}

static void file_path(const kvt_store *t, uint64_t hash, uint64_t parent, char *out, size_t cap) {
    snprintf(out, cap, "%s/%016llx-%016llx.kv", t->dir, (unsigned long long)hash, (unsigned long long)parent);
}

static bool write_all(int fd, const uint8_t *p, size_t n) {
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return false;
        p += w;
        n -= (size_t)w;
    }
    return true;
}

static bool read_all(int fd, uint8_t *p, size_t n) {
    while (n > 0) {
        ssize_t r = read(fd, p, n);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return false;
        p += r;
        n -= (size_t)r;
    }
    return true;
}

/* The header a file of entry i must have, checksum left 0. */
static kvt_file_header expected_header(const kvt_store *t, uint64_t hash, uint64_t parent) {
    kvt_file_header h;
    memset(&h, 0, sizeof h);
    memcpy(h.magic, KVT_MAGIC, sizeof KVT_MAGIC);
    h.version = KVT_FILE_VERSION;
    h.block_size = (uint32_t)t->block_size;
    h.block_bytes = t->block_bytes;
    h.layout = t->layout;
    memcpy(h.model_sha, t->model_sha, sizeof h.model_sha);
    h.hash = hash;
    h.parent = parent;
    return h;
}

bool kvt__disk_write(kvt_store *t, int32_t i, const void *data) {
    size_t token_bytes = sizeof(int32_t) * (size_t)t->block_size;
    kvt_file_header h = expected_header(t, t->e[i].hash, t->e[i].parent);
    uint8_t *body = t->io + sizeof h;
    memcpy(body, kvt__entry_tokens(t, i), token_bytes);
    memcpy(body + token_bytes, data, t->block_bytes);
    h.checksum = kvt_checksum(body, token_bytes + t->block_bytes);
    memcpy(t->io, &h, sizeof h);
    char path[PATH_MAX + 64], tmp[PATH_MAX + 80];
    file_path(t, h.hash, h.parent, path, sizeof path);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    unlink(tmp); /* a leftover of an interrupted write */
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    bool ok = fd >= 0 && write_all(fd, t->io, kvt__file_bytes(t));
    if (fd >= 0) close(fd);
    if (ok) ok = rename(tmp, path) == 0;
    if (!ok) {
        /* once per run: a full disk would say it for every block (the metric counts them) */
        if (!t->write_error_logged)
            sp_log_warn("kv disk tier: cannot write %s (%s); the block is dropped (said once; "
                        "spindle_kv_tier_disk_write_errors_total counts them)",
                        path, strerror(errno));
        t->write_error_logged = true;
        unlink(tmp);
    }
    return ok;
}

/* Checks a file (size n; its bytes in t->io, or only its header and tokens when not
 * whole) against what entry (hash, parent) needs; the checksum only when whole. */
static const char *file_problem(const kvt_store *t, size_t n, uint64_t hash, uint64_t parent, bool whole) {
    if (n != kvt__file_bytes(t)) return "its size is wrong (truncated or another layout)";
    kvt_file_header h, want = expected_header(t, hash, parent);
    memcpy(&h, t->io, sizeof h);
    if (memcmp(h.magic, want.magic, sizeof h.magic) != 0 || h.version != want.version) return "it is not a block file";
    if (h.block_size != want.block_size || h.block_bytes != want.block_bytes || h.layout != want.layout)
        return "it holds another KV layout";
    if (memcmp(h.model_sha, want.model_sha, sizeof h.model_sha) != 0) return "it belongs to another model";
    if (h.hash != hash || h.parent != parent) return "its name does not match its block";
    size_t body = n - sizeof h;
    if (whole && kvt_checksum(t->io + sizeof h, body) != h.checksum) return "its checksum does not match";
    return NULL;
}

/* Reads the file at path into t->io (whole, or its header and tokens); its size in *n,
 * or false. */
static bool read_file(kvt_store *t, const char *path, size_t *n, bool whole) {
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return false;
    struct stat st;
    bool ok = fstat(fd, &st) == 0 && st.st_size >= 0;
    size_t size = ok ? (size_t)st.st_size : 0;
    *n = size;
    /* a file of another size is wrong; read nothing of it */
    size_t want = whole ? size : sizeof(kvt_file_header) + sizeof(int32_t) * (size_t)t->block_size;
    if (ok && size == kvt__file_bytes(t)) ok = read_all(fd, t->io, want);
    close(fd);
    return ok;
}

bool kvt__disk_read(kvt_store *t, int32_t i, void *data) {
    char path[PATH_MAX + 64];
    file_path(t, t->e[i].hash, t->e[i].parent, path, sizeof path);
    size_t n = 0;
    const char *problem =
        read_file(t, path, &n, true) ? file_problem(t, n, t->e[i].hash, t->e[i].parent, true) : "it cannot be read";
    if (!problem &&
        memcmp(t->io + sizeof(kvt_file_header), kvt__entry_tokens(t, i), sizeof(int32_t) * (size_t)t->block_size) != 0)
        problem = "its tokens are not the block's";
    if (problem) {
        sp_log_warn("kv disk tier: dropped %s: %s", path, problem);
        return false;
    }
    memcpy(data, t->io + sizeof(kvt_file_header) + sizeof(int32_t) * (size_t)t->block_size, t->block_bytes);
    return true;
}

void kvt__disk_remove(kvt_store *t, int32_t i) {
    char path[PATH_MAX + 64];
    file_path(t, t->e[i].hash, t->e[i].parent, path, sizeof path);
    unlink(path);
}

/* ---- the directory ---- */

static sp_status model_sha256(const char *path, uint8_t out[32]) {
    FILE *f = fopen(path, "rb");
    if (!f) return sp_fail(SP_ERR_IO, "kv disk tier: cannot read the model %s to hash it: %s", path, strerror(errno));
    struct sha256_ctx ctx;
    sha256_init(&ctx);
    uint8_t buf[1 << 14];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) sha256_update(&ctx, n, buf);
    bool bad = ferror(f);
    fclose(f);
    if (bad) return sp_fail(SP_ERR_IO, "kv disk tier: error reading the model %s", path);
    sha256_digest(&ctx, 32, out);
    return SP_OK;
}

/* Takes the directory's lock file, so no other process uses it while this one does. */
static sp_status lock_dir(kvt_store *t) {
    char path[PATH_MAX + 16];
    snprintf(path, sizeof path, "%s/lock", t->dir);
    t->lock_fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (t->lock_fd < 0) return sp_fail(SP_ERR_IO, "kv disk tier: cannot open %s: %s", path, strerror(errno));
    if (flock(t->lock_fd, LOCK_EX | LOCK_NB) != 0) {
        close(t->lock_fd);
        t->lock_fd = -1;
        return sp_fail(SP_ERR_IO, "kv disk tier: %s is in use by another spindle process (its lock is held)", t->dir);
    }
    char pid[32];
    int len = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
    if (ftruncate(t->lock_fd, 0) == 0) (void)!write(t->lock_fd, pid, (size_t)len);
    return SP_OK;
}

static bool parse_name(const char *name, uint64_t *hash, uint64_t *parent) {
    unsigned long long h, p;
    char tail[8];
    if (strlen(name) != 16 + 1 + 16 + 3) return false;
    if (sscanf(name, "%16llx-%16llx%4s", &h, &p, tail) != 3 || strcmp(tail, ".kv") != 0) return false;
    *hash = h;
    *parent = p;
    return true;
}

/* Persist: indexes the files an earlier run left, deleting those that fail a check and
 * leftovers of interrupted writes. */
static void index_dir(kvt_store *t) {
    DIR *d = opendir(t->dir);
    if (!d) return;
    struct dirent *de;
    char path[PATH_MAX + 300];
    while ((de = readdir(d)) != NULL) {
        const char *name = de->d_name;
        size_t len = strlen(name);
        if (name[0] == '.' || strcmp(name, "lock") == 0) continue;
        snprintf(path, sizeof path, "%s/%s", t->dir, name);
        if (len > 4 && strcmp(name + len - 4, ".tmp") == 0) {
            unlink(path);
            continue;
        }
        uint64_t hash, parent;
        if (!parse_name(name, &hash, &parent)) continue; /* not ours: left alone */
        size_t n = 0;
        /* header, size and tokens now; the checksum when the block is loaded (a restart
         * does not read every payload) */
        const char *problem =
            read_file(t, path, &n, false) ? file_problem(t, n, hash, parent, false) : "it cannot be read";
        if (problem) {
            sp_log_warn("kv disk tier: dropped %s: %s", path, problem);
            atomic_fetch_add_explicit(&t->disk_rejected, 1, memory_order_relaxed);
            unlink(path);
            continue;
        }
        if (t->disk_lru.n >= t->disk_slots) { /* over the budget: the rest go */
            unlink(path);
            continue;
        }
        int32_t i = kvt__entry_new(t, hash, parent, (const int32_t *)(t->io + sizeof(kvt_file_header)));
        if (i < 0) {
            unlink(path);
            continue;
        }
        kvt__entry_place(t, i, KVT_DISK);
        atomic_fetch_add_explicit(&t->disk_restored, 1, memory_order_relaxed);
    }
    closedir(d);
}

/* Removes the files this store's kind makes in dir (blocks, leftovers, the lock), then dir. */
static void remove_dir(const char *dir) {
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *de;
        char path[PATH_MAX + 300];
        while ((de = readdir(d)) != NULL) {
            size_t len = strlen(de->d_name);
            bool ours = strcmp(de->d_name, "lock") == 0 || (len > 3 && strcmp(de->d_name + len - 3, ".kv") == 0) ||
                        (len > 4 && strcmp(de->d_name + len - 4, ".tmp") == 0);
            if (!ours) continue;
            snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
            unlink(path);
        }
        closedir(d);
    }
    rmdir(dir);
}

/* The directories of processes that died without removing theirs (a crash, SIGKILL):
 * spindle-kv-XXXXXX (mkdtemp's six characters, not a persistent one's 16 hex digits)
 * whose lock nobody holds. A directory without a lock file may be starting: left. */
static void remove_stale_dirs(const char *parent) {
    DIR *d = opendir(parent);
    if (!d) return;
    struct dirent *de;
    char dir[PATH_MAX + 300], lock[PATH_MAX + 320];
    while ((de = readdir(d)) != NULL) {
        if (strncmp(de->d_name, "spindle-kv-", 11) != 0 || strlen(de->d_name) != 11 + 6) continue;
        snprintf(dir, sizeof dir, "%s/%s", parent, de->d_name);
        snprintf(lock, sizeof lock, "%s/lock", dir);
        int fd = open(lock, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0) continue;
        if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
            sp_log_info("kv disk tier: removing %s, left by a process that ended without removing it", dir);
            remove_dir(dir);
        }
        close(fd);
    }
    closedir(d);
}

sp_status kvt__disk_open(kvt_store *t, const kvt_config *c) {
    t->persist = c->persist;
    if (mkdir(c->disk_dir, 0700) != 0 && errno != EEXIST)
        return sp_fail(SP_ERR_IO, "kv_disk_dir %s: cannot create it: %s", c->disk_dir, strerror(errno));
    sp_status st;
    if (c->persist) {
        if ((st = model_sha256(c->model_path, t->model_sha)) != SP_OK) return st;
        int n = snprintf(t->dir, sizeof t->dir, "%s/spindle-kv-", c->disk_dir);
        for (int b = 0; b < 8 && n + 2 < (int)sizeof t->dir; b++)
            n += snprintf(t->dir + n, sizeof t->dir - (size_t)n, "%02x", t->model_sha[b]);
        if (mkdir(t->dir, 0700) != 0 && errno != EEXIST)
            return sp_fail(SP_ERR_IO, "kv_disk_dir: cannot create %s: %s", t->dir, strerror(errno));
        /* its files are loaded into the KV cache: only a directory of our own, no link */
        struct stat st;
        if (lstat(t->dir, &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & 022))
            return sp_fail(SP_ERR_IO, "kv_disk_dir: %s is not a directory of this user's that only it can write",
                           t->dir);
    } else {
        remove_stale_dirs(c->disk_dir);
        snprintf(t->dir, sizeof t->dir, "%s/spindle-kv-XXXXXX", c->disk_dir);
        if (!mkdtemp(t->dir))
            return sp_fail(SP_ERR_IO, "kv_disk_dir %s: cannot make a directory in it: %s", c->disk_dir,
                           strerror(errno));
    }
    if ((st = lock_dir(t)) != SP_OK) {
        if (!c->persist) rmdir(t->dir);
        return st;
    }
    if (c->persist) index_dir(t);
    return SP_OK;
}

void kvt__disk_close(kvt_store *t) {
    if (!t->persist) remove_dir(t->dir); /* our own directory: every file we wrote, the lock, then it */
    close(t->lock_fd);                   /* releases the lock */
    t->lock_fd = -1;
}
