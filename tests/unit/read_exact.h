/* read_exact.h: for the fuzz-regression replays (test_*_regressions.c), which include
 * it after <criterion/criterion.h>: each input is read into a buffer of exactly its size,
 * so a read past its end shows under ASan. */
#ifndef SP_TESTS_READ_EXACT_H
#define SP_TESTS_READ_EXACT_H

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

#endif
