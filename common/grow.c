/* grow.c: see grow.h. */
#include "common/grow.h"

#include <stdint.h>
#include <stdlib.h>

bool sp_grow(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return true;
    if (elem == 0) return false;
    size_t n = *cap ? *cap : 8;
    while (n < need) {
        if (n > SIZE_MAX / 2) return false;
        n *= 2;
    }
    if (n > SIZE_MAX / elem) return false;
    void *q = realloc(*p, n * elem);
    if (!q) return false;
    *p = q;
    *cap = n;
    return true;
}
