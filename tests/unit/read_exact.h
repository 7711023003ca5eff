/* read_exact.h: for the fuzz-regression replays (test_*_regressions.c), which include
 * it after <criterion/criterion.h>: each input is read into a buffer of exactly its size,
 * so a read past its end shows under ASan, and handed to the test's check. */
#ifndef SP_TESTS_READ_EXACT_H
#define SP_TESTS_READ_EXACT_H

#include <dirent.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* Reads path into a malloc'd buffer of exactly its size (caller frees). */
static uint8_t *read_exact(const char *path, size_t *size) {
    FILE *fp = fopen(path, "rb");
    cr_assert_not_null(fp, "cannot open %s", path);
    fseek(fp, 0, SEEK_END);
    long n = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    cr_assert_geq(n, 0);
    uint8_t *buf = malloc(n ? (size_t)n : 1);
    cr_assert_not_null(buf);
    cr_assert_eq(fread(buf, 1, (size_t)n, fp), (size_t)n, "short read of %s", path);
    fclose(fp);
    *size = (size_t)n;
    return buf;
}

/* Calls check(path, name, buf, size, flag) for every regular file of dir, each read with
 * read_exact; returns how many there were, or -1 when dir is absent. */
typedef void (*replay_check)(const char *path, const char *name, const uint8_t *buf, size_t size, bool flag);

static int replay_dir(const char *dir, replay_check check, bool flag) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    int count = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        size_t size;
        uint8_t *buf = read_exact(path, &size);
        check(path, e->d_name, buf, size, flag);
        free(buf);
        count++;
    }
    closedir(d);
    return count;
}

#endif
