/* fuzz_kvtier.c: libFuzzer harness for the disk tier's block files (kvcache/), the one
 * input of the KV cache that comes from outside the process: files a persistent disk
 * tier finds at start. Each input is one file's bytes. When its first byte is odd the
 * harness writes a valid header's identity fields (magic, version, sizes, layout, the
 * model's sha256) over it, so the fuzzer reaches the checks past them. The contract,
 * trapped when broken:
 *   - the store always opens (a bad file is dropped, never fatal);
 *   - a file it indexes and then loads comes back as the file's own payload bytes, or
 *     is refused (checksum, tokens) and deleted;
 *   - a file it does not index is deleted.
 * Built and run by tools/fuzz.sh.
 */
#include <dirent.h>
#include <nettle/sha2.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kvcache/kvcache.h"

#define FUZZ_CHECK(cond)               \
    do {                               \
        if (!(cond)) __builtin_trap(); \
    } while (0)

enum { B = 4, BYTES = 64, HEADER = 88 };
static const char MODEL_TEXT[] = "fuzz model weights";

static char root[64];

static void setup(void) {
    if (root[0]) return;
    snprintf(root, sizeof root, "/tmp/fuzz_kvtier_XXXXXX");
    FUZZ_CHECK(mkdtemp(root));
    char model[128];
    snprintf(model, sizeof model, "%s/model", root);
    FILE *f = fopen(model, "wb");
    FUZZ_CHECK(f);
    fputs(MODEL_TEXT, f);
    fclose(f);
}

/* The header fields a valid file has (kvtier_disk.c's kvt_file_header). */
static void valid_identity(uint8_t *h) {
    memcpy(h, "SPKVBLK", 8);
    uint32_t version = 1, block_size = B;
    uint64_t block_bytes = BYTES, layout = 42;
    memcpy(h + 8, &version, 4);
    memcpy(h + 12, &block_size, 4);
    memcpy(h + 16, &block_bytes, 8);
    memcpy(h + 24, &layout, 8);
    struct sha256_ctx ctx;
    sha256_init(&ctx);
    sha256_update(&ctx, sizeof MODEL_TEXT - 1, (const uint8_t *)MODEL_TEXT);
    sha256_digest(&ctx, 32, h + 32);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    setup();
    char model[128], dir[128];
    snprintf(model, sizeof model, "%s/model", root);
    kvt_config c = {.block_size = B,
                    .block_bytes = BYTES,
                    .disk_dir = root,
                    .disk_bytes = 1 << 20,
                    .persist = true,
                    .model_path = model,
                    .layout = 42};
    kvt_store *t;
    FUZZ_CHECK(kvt_create(&c, &t) == SP_OK); /* makes the directory */
    snprintf(dir, sizeof dir, "%s", kvt_disk_path(t));
    kvt_destroy(t);

    uint8_t *bytes = malloc(size + 1);
    FUZZ_CHECK(bytes);
    memcpy(bytes, data, size);
    if (size >= HEADER && (data[0] & 1)) valid_identity(bytes);
    uint64_t hash = 1, parent = 2;
    if (size >= HEADER) {
        memcpy(&hash, bytes + 64, 8);
        memcpy(&parent, bytes + 72, 8);
    }
    char path[256];
    snprintf(path, sizeof path, "%s/%016llx-%016llx.kv", dir, (unsigned long long)hash, (unsigned long long)parent);
    FILE *f = fopen(path, "wb");
    FUZZ_CHECK(f);
    if (size) fwrite(bytes, 1, size, f);
    fclose(f);

    FUZZ_CHECK(kvt_create(&c, &t) == SP_OK);
    kvt_stats st;
    kvt_stats_get(t, &st);
    FUZZ_CHECK(st.disk_restored + st.disk_rejected == 1);
    if (st.disk_restored == 1) {
        int32_t tokens[B];
        memcpy(tokens, bytes + HEADER, sizeof tokens);
        uint8_t out[BYTES];
        kvt_tier tier = kvt_get(t, hash, parent, tokens, out);
        if (tier == KVT_DISK)
            FUZZ_CHECK(memcmp(out, bytes + HEADER + sizeof tokens, BYTES) == 0);
        else
            FUZZ_CHECK(access(path, F_OK) != 0); /* refused: deleted */
    } else {
        FUZZ_CHECK(access(path, F_OK) != 0);
    }
    kvt_destroy(t);
    unlink(path);
    free(bytes);
    return 0;
}
