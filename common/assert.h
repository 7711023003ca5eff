/* assert.h: SP_ASSERT for programmer errors (never for bad input: that is a status). */
#ifndef SP_ASSERT_H
#define SP_ASSERT_H

#include <stdio.h>
#include <stdlib.h>

#define SP_ASSERT(cond)                                                                  \
    do {                                                                                 \
        if (!(cond)) {                                                                   \
            fprintf(stderr, "%s:%d: assertion failed: %s\n", __FILE__, __LINE__, #cond); \
            abort();                                                                     \
        }                                                                                \
    } while (0)

#endif
