/* grow.h: the one way a growable array grows: doubling, checked for overflow, with the
 * array unchanged when it cannot grow. Every module's "n, cap, realloc" array calls
 * it. Not thread-safe; the array's owner calls it. */
#ifndef SP_COMMON_GROW_H
#define SP_COMMON_GROW_H

#include <stdbool.h>
#include <stddef.h>

/* Grows *p (room for *cap elements of elem bytes) to hold at least need elements:
 * the capacity doubles from 8 until it is enough. True when *p holds need elements
 * (at once when it already did); false when out of memory or when the size would
 * overflow, with *p and *cap unchanged. */
bool sp_grow(void **p, size_t *cap, size_t need, size_t elem);

#endif
