/* test_grow.c: common/grow.c's sp_grow: a first allocation, doubling to the need, no
 * change when the room is already there, and refusal (array untouched) when the size
 * would overflow. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdlib.h>

#include "common/grow.h"

Test(grow, first_allocation_holds_the_need) {
    int *a = NULL;
    size_t cap = 0;
    cr_assert(sp_grow((void **)&a, &cap, 1, sizeof *a));
    cr_assert_not_null(a);
    cr_assert_geq(cap, 1);
    a[cap - 1] = 7;
    free(a);
}

Test(grow, doubles_until_enough) {
    char *a = NULL;
    size_t cap = 0;
    cr_assert(sp_grow((void **)&a, &cap, 8, 1));
    cr_assert_eq(cap, 8);
    cr_assert(sp_grow((void **)&a, &cap, 9, 1));
    cr_assert_eq(cap, 16);
    cr_assert(sp_grow((void **)&a, &cap, 100, 1));
    cr_assert_eq(cap, 128);
    free(a);
}

Test(grow, keeps_the_contents) {
    int *a = NULL;
    size_t cap = 0;
    for (int i = 0; i < 1000; i++) {
        cr_assert(sp_grow((void **)&a, &cap, (size_t)i + 1, sizeof *a));
        a[i] = i;
    }
    for (int i = 0; i < 1000; i++) cr_assert_eq(a[i], i);
    free(a);
}

Test(grow, enough_room_changes_nothing) {
    int *a = NULL;
    size_t cap = 0;
    cr_assert(sp_grow((void **)&a, &cap, 10, sizeof *a));
    int *before = a;
    size_t cap_before = cap;
    cr_assert(sp_grow((void **)&a, &cap, cap, sizeof *a));
    cr_assert_eq(a, before);
    cr_assert_eq(cap, cap_before);
    cr_assert(sp_grow((void **)&a, &cap, 0, sizeof *a));
    cr_assert_eq(cap, cap_before);
    free(a);
}

Test(grow, overflow_is_refused_and_leaves_the_array) {
    int *a = NULL;
    size_t cap = 0;
    cr_assert(sp_grow((void **)&a, &cap, 4, sizeof *a));
    int *before = a;
    size_t cap_before = cap;
    cr_assert_not(sp_grow((void **)&a, &cap, SIZE_MAX / 2, sizeof *a));
    cr_assert_not(sp_grow((void **)&a, &cap, SIZE_MAX, 1));
    cr_assert_eq(a, before);
    cr_assert_eq(cap, cap_before);
    free(a);
}
