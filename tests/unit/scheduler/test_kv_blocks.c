/* test_kv_blocks.c: the KV block manager's bookkeeping: allocation, release,
 * exhaustion (all or none) and the used/total accounting. */
#include <criterion/criterion.h>
#include <string.h>

#include "scheduler/sched_internal.h"

Test(kv_blocks, grows_a_sequence_and_accounts_for_it) {
    kv_blocks kb;
    kv_seq a;
    cr_assert_eq(kv__blocks_init(&kb, 10), SP_OK);
    cr_assert_eq(kv__seq_init(&a, 8), SP_OK);
    cr_assert(kv__blocks_grow(&kb, &a, 3));
    cr_assert_eq(a.n, 3);
    cr_assert_eq(kv__blocks_used(&kb), 3);
    cr_assert(kv__blocks_grow(&kb, &a, 2), "already has 2: nothing to do");
    cr_assert_eq(a.n, 3);
    cr_assert(kv__blocks_grow(&kb, &a, 5));
    cr_assert_eq(kv__blocks_used(&kb), 5);
    kv__blocks_release(&kb, &a);
    cr_assert_eq(a.n, 0);
    cr_assert_eq(kv__blocks_used(&kb), 0);
    kv__seq_free(&a);
    kv__blocks_free(&kb);
}

Test(kv_blocks, exhaustion_takes_nothing) {
    kv_blocks kb;
    kv_seq a, b;
    cr_assert_eq(kv__blocks_init(&kb, 6), SP_OK);
    cr_assert_eq(kv__seq_init(&a, 6), SP_OK);
    cr_assert_eq(kv__seq_init(&b, 6), SP_OK);
    cr_assert(kv__blocks_grow(&kb, &a, 4));
    cr_assert(!kv__blocks_grow(&kb, &b, 3), "only 2 are free");
    cr_assert_eq(b.n, 0);
    cr_assert_eq(kv__blocks_used(&kb), 4);
    cr_assert(kv__blocks_grow(&kb, &b, 2));
    cr_assert_eq(kb.n_free, 0);
    cr_assert(!kv__blocks_grow(&kb, &a, 5));
    kv__blocks_release(&kb, &a);
    cr_assert(kv__blocks_grow(&kb, &b, 6));
    cr_assert_eq(kv__blocks_used(&kb), 6);
    kv__blocks_release(&kb, &b);
    cr_assert_eq(kv__blocks_used(&kb), 0);
    kv__seq_free(&a);
    kv__seq_free(&b);
    kv__blocks_free(&kb);
}

Test(kv_blocks, every_block_is_owned_once) {
    enum { N = 32 };
    kv_blocks kb;
    kv_seq seqs[4];
    cr_assert_eq(kv__blocks_init(&kb, N), SP_OK);
    for (int i = 0; i < 4; i++) cr_assert_eq(kv__seq_init(&seqs[i], N), SP_OK);
    /* interleaved growth and a release in the middle */
    for (int round = 1; round <= 8; round++)
        for (int i = 0; i < 4; i++) cr_assert(kv__blocks_grow(&kb, &seqs[i], round));
    kv__blocks_release(&kb, &seqs[1]);
    cr_assert(kv__blocks_grow(&kb, &seqs[2], 16));
    int owner[N];
    memset(owner, -1, sizeof owner);
    int total = 0;
    for (int i = 0; i < 4; i++)
        for (int b = 0; b < seqs[i].n; b++) {
            int id = seqs[i].ids[b];
            cr_assert(id >= 0 && id < N);
            cr_assert_eq(owner[id], -1, "block %d owned twice", id);
            owner[id] = i;
            total++;
        }
    cr_assert_eq(total, kv__blocks_used(&kb));
    cr_assert_eq(total + kb.n_free, N);
    for (int i = 0; i < 4; i++) {
        kv__blocks_release(&kb, &seqs[i]);
        kv__seq_free(&seqs[i]);
    }
    cr_assert_eq(kv__blocks_used(&kb), 0);
    kv__blocks_free(&kb);
}

Test(kv_blocks, blocks_for_tokens_rounds_up) {
    cr_assert_eq(kv__blocks_for_tokens(0, 16), 0);
    cr_assert_eq(kv__blocks_for_tokens(1, 16), 1);
    cr_assert_eq(kv__blocks_for_tokens(16, 16), 1);
    cr_assert_eq(kv__blocks_for_tokens(17, 16), 2);
    cr_assert_eq(kv__blocks_for_tokens(8192, 16), 512);
}
