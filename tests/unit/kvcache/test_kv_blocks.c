/* test_kv_blocks.c: the KV block manager's bookkeeping: allocation, release,
 * exhaustion (all or none) and the used/total accounting; the prefix cache, its chain
 * hashes and their salted roots. */
#include <criterion/criterion.h>
#include <string.h>

#include "kvcache/kvcache.h"

Test(kv_blocks, grows_a_sequence_and_accounts_for_it) {
    kv_blocks kb;
    kv_seq a;
    cr_assert_eq(kv_blocks_init(&kb, 10, 4, false), SP_OK);
    cr_assert_eq(kv_seq_init(&a, 8), SP_OK);
    cr_assert(kv_blocks_grow(&kb, &a, 3));
    cr_assert_eq(a.n, 3);
    cr_assert_eq(kv_blocks_used(&kb), 3);
    cr_assert(kv_blocks_grow(&kb, &a, 2), "already has 2: nothing to do");
    cr_assert_eq(a.n, 3);
    cr_assert(kv_blocks_grow(&kb, &a, 5));
    cr_assert_eq(kv_blocks_used(&kb), 5);
    kv_blocks_release(&kb, &a);
    cr_assert_eq(a.n, 0);
    cr_assert_eq(kv_blocks_used(&kb), 0);
    kv_seq_free(&a);
    kv_blocks_free(&kb);
}

Test(kv_blocks, exhaustion_takes_nothing) {
    kv_blocks kb;
    kv_seq a, b;
    cr_assert_eq(kv_blocks_init(&kb, 6, 4, false), SP_OK);
    cr_assert_eq(kv_seq_init(&a, 6), SP_OK);
    cr_assert_eq(kv_seq_init(&b, 6), SP_OK);
    cr_assert(kv_blocks_grow(&kb, &a, 4));
    cr_assert(!kv_blocks_grow(&kb, &b, 3), "only 2 are free");
    cr_assert_eq(b.n, 0);
    cr_assert_eq(kv_blocks_used(&kb), 4);
    cr_assert(kv_blocks_grow(&kb, &b, 2));
    cr_assert_eq(kb.n_free, 0);
    cr_assert(!kv_blocks_grow(&kb, &a, 5));
    kv_blocks_release(&kb, &a);
    cr_assert(kv_blocks_grow(&kb, &b, 6));
    cr_assert_eq(kv_blocks_used(&kb), 6);
    kv_blocks_release(&kb, &b);
    cr_assert_eq(kv_blocks_used(&kb), 0);
    kv_seq_free(&a);
    kv_seq_free(&b);
    kv_blocks_free(&kb);
}

Test(kv_blocks, every_block_is_owned_once) {
    enum { N = 32 };
    kv_blocks kb;
    kv_seq seqs[4];
    cr_assert_eq(kv_blocks_init(&kb, N, 4, false), SP_OK);
    for (int i = 0; i < 4; i++) cr_assert_eq(kv_seq_init(&seqs[i], N), SP_OK);
    /* interleaved growth and a release in the middle */
    for (int round = 1; round <= 8; round++)
        for (int i = 0; i < 4; i++) cr_assert(kv_blocks_grow(&kb, &seqs[i], round));
    kv_blocks_release(&kb, &seqs[1]);
    cr_assert(kv_blocks_grow(&kb, &seqs[2], 16));
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
    cr_assert_eq(total, kv_blocks_used(&kb));
    cr_assert_eq(total + kb.n_free, N);
    for (int i = 0; i < 4; i++) {
        kv_blocks_release(&kb, &seqs[i]);
        kv_seq_free(&seqs[i]);
    }
    cr_assert_eq(kv_blocks_used(&kb), 0);
    kv_blocks_free(&kb);
}

Test(kv_blocks, blocks_for_tokens_rounds_up) {
    cr_assert_eq(kv_blocks_for_tokens(0, 16), 0);
    cr_assert_eq(kv_blocks_for_tokens(1, 16), 1);
    cr_assert_eq(kv_blocks_for_tokens(16, 16), 1);
    cr_assert_eq(kv_blocks_for_tokens(17, 16), 2);
    cr_assert_eq(kv_blocks_for_tokens(8192, 16), 512);
}

/* ---- the prefix cache (block size 4) ---- */

enum { PB = 4 };

/* seq computes all of tokens (n of them): blocks, then registration. */
static void compute(kv_blocks *kb, kv_seq *seq, const int32_t *tokens, int32_t n) {
    cr_assert(kv_blocks_grow(kb, seq, kv_blocks_for_tokens(n, PB)));
    kv_prefix_register(kb, seq, tokens, n);
}

static int32_t match(const kv_blocks *kb, const int32_t *tokens, int32_t n_tokens, int32_t *ids, int32_t *unheld) {
    return kv_prefix_match(kb, KV_CHAIN_ROOT, tokens, (n_tokens - 1) / PB, ids, unheld);
}

/* match, from a chain root of its own */
static int32_t match_from(const kv_blocks *kb, uint64_t root, const int32_t *tokens, int32_t n_tokens, int32_t *ids,
                          int32_t *unheld) {
    return kv_prefix_match(kb, root, tokens, (n_tokens - 1) / PB, ids, unheld);
}

/* ---- salted chains ---- */

Test(kv_chain, no_salt_is_the_plain_root_and_a_salt_is_another) {
    cr_assert_eq(kv_chain_root(NULL, 0), KV_CHAIN_ROOT);
    cr_assert_eq(kv_chain_root("x", 0), KV_CHAIN_ROOT, "an empty salt is no salt");
    cr_assert_neq(kv_chain_root("a", 1), KV_CHAIN_ROOT);
    cr_assert_eq(kv_chain_root("tenant-a", 8), kv_chain_root("tenant-a", 8), "the same salt, the same root");
    cr_assert_neq(kv_chain_root("tenant-a", 8), kv_chain_root("tenant-b", 8));
    cr_assert_neq(kv_chain_root("ab", 2), kv_chain_root("ab\0", 3), "the length counts");
    cr_assert_neq(kv_chain_root("\0", 1), kv_chain_root("\0\0", 2));
}

Test(kv_chain, a_salt_changes_every_hash_from_the_first_block_on) {
    int32_t tokens[3 * PB];
    for (int i = 0; i < 3 * PB; i++) tokens[i] = 100 + i;
    uint64_t roots[3] = {KV_CHAIN_ROOT, kv_chain_root("a", 1), kv_chain_root("b", 1)};
    uint64_t h[3][3];
    for (int r = 0; r < 3; r++) {
        uint64_t parent = roots[r];
        for (int b = 0; b < 3; b++) h[r][b] = parent = kv_chain_hash(parent, tokens + b * PB, PB);
    }
    for (int b = 0; b < 3; b++) {
        cr_assert_neq(h[0][b], h[1][b], "block %d: unsalted and salted", b);
        cr_assert_neq(h[0][b], h[2][b], "block %d", b);
        cr_assert_neq(h[1][b], h[2][b], "block %d: two salts", b);
    }
    /* the same salt again: the same chain */
    uint64_t parent = kv_chain_root("a", 1);
    for (int b = 0; b < 3; b++) cr_assert_eq(parent = kv_chain_hash(parent, tokens + b * PB, PB), h[1][b]);
}

Test(kv_prefix, a_salted_chain_is_found_only_with_its_salt) {
    kv_blocks kb;
    kv_seq a, b;
    cr_assert_eq(kv_blocks_init(&kb, 16, PB, true), SP_OK);
    cr_assert_eq(kv_seq_init(&a, 8), SP_OK);
    cr_assert_eq(kv_seq_init(&b, 8), SP_OK);
    cr_assert_eq(a.root, KV_CHAIN_ROOT, "a sequence starts unsalted");
    int32_t prompt[13] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13};
    uint64_t salt_a = kv_chain_root("a", 1), salt_b = kv_chain_root("b", 1);
    a.root = salt_a;
    compute(&kb, &a, prompt, 13);
    cr_assert_eq(kv_blocks_cached(&kb), 3);
    cr_assert_eq(kb.parent_hash[a.ids[0]], salt_a, "a first block's parent hash is its chain's root");
    cr_assert_eq(kb.parent_hash[a.ids[1]], kb.hash[a.ids[0]]);
    for (int i = 0; i < 3; i++) cr_assert_eq(kb.root[a.ids[i]], salt_a, "block %d knows its chain's root", i);
    kv_blocks_release(&kb, &a);

    int32_t ids[8], unheld;
    cr_assert_eq(match(&kb, prompt, 13, ids, &unheld), 0, "an unsalted lookup finds none of a salted chain");
    cr_assert_eq(match_from(&kb, salt_b, prompt, 13, ids, &unheld), 0, "nor does another salt's");
    int32_t hits = match_from(&kb, salt_a, prompt, 13, ids, &unheld);
    cr_assert_eq(hits, 3, "the same salt finds it all");
    b.root = salt_a;
    kv_prefix_take(&kb, &b, ids, hits, prompt);
    cr_assert(kv_blocks_grow(&kb, &b, 4));
    kv_prefix_register(&kb, &b, prompt, 13); /* hashed on from the salted root: nothing new */
    cr_assert_eq(kv_blocks_cached(&kb), 3);
    kv_blocks_release(&kb, &b);

    /* the same tokens unsalted: a chain of their own beside the salted one */
    kv_seq c;
    cr_assert_eq(kv_seq_init(&c, 8), SP_OK);
    compute(&kb, &c, prompt, 13);
    cr_assert_eq(kv_blocks_cached(&kb), 6);
    kv_blocks_release(&kb, &c);
    cr_assert_eq(match(&kb, prompt, 13, ids, &unheld), 3);
    cr_assert_eq(match_from(&kb, salt_a, prompt, 13, ids, &unheld), 3);
    kv_seq_free(&a);
    kv_seq_free(&b);
    kv_seq_free(&c);
    kv_blocks_free(&kb);
}

Test(kv_prefix, an_ended_sequences_full_blocks_are_found_and_shared) {
    kv_blocks kb;
    kv_seq a, b;
    cr_assert_eq(kv_blocks_init(&kb, 16, PB, true), SP_OK);
    cr_assert_eq(kv_seq_init(&a, 8), SP_OK);
    cr_assert_eq(kv_seq_init(&b, 8), SP_OK);
    int32_t prompt[14] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14};
    compute(&kb, &a, prompt, 14); /* 3 full blocks and a partial one */
    cr_assert_eq(kv_blocks_cached(&kb), 3);
    int32_t a_ids[4];
    memcpy(a_ids, a.ids, sizeof a_ids);
    kv_blocks_release(&kb, &a);
    cr_assert_eq(kv_blocks_used(&kb), 0, "cached blocks nobody holds are not in use");
    cr_assert_eq(kv_blocks_available(&kb), 16);

    int32_t ids[8], unheld = -1;
    int32_t hits = match(&kb, prompt, 14, ids, &unheld);
    cr_assert_eq(hits, 3);
    cr_assert_eq(unheld, 3);
    for (int i = 0; i < 3; i++) cr_assert_eq(ids[i], a_ids[i], "block %d", i);
    kv_prefix_take(&kb, &b, ids, hits, prompt);
    cr_assert(kv_blocks_grow(&kb, &b, 4));
    cr_assert_eq(kv_blocks_used(&kb), 4);
    cr_assert_neq(b.ids[3], a_ids[0]);
    /* a prompt of exactly 12 tokens still computes its last one: 2 blocks, not 3 */
    cr_assert_eq(match(&kb, prompt, 12, ids, &unheld), 2);
    kv_blocks_release(&kb, &b);
    kv_seq_free(&a);
    kv_seq_free(&b);
    kv_blocks_free(&kb);
}

Test(kv_prefix, a_match_stops_at_the_first_different_block) {
    kv_blocks kb;
    kv_seq a;
    cr_assert_eq(kv_blocks_init(&kb, 16, PB, true), SP_OK);
    cr_assert_eq(kv_seq_init(&a, 8), SP_OK);
    int32_t prompt[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
    compute(&kb, &a, prompt, 16);
    kv_blocks_release(&kb, &a);
    int32_t other[16];
    memcpy(other, prompt, sizeof other);
    other[6] = 99; /* in block 1 */
    int32_t ids[8], unheld;
    cr_assert_eq(match(&kb, other, 16, ids, &unheld), 1);
    other[6] = 7;
    other[0] = 42; /* block 0 differs: later equal blocks do not count (their prefix differs) */
    cr_assert_eq(match(&kb, other, 16, ids, &unheld), 0);
    kv_seq_free(&a);
    kv_blocks_free(&kb);
}

Test(kv_prefix, held_blocks_are_shared_and_kept_until_both_release) {
    kv_blocks kb;
    kv_seq a, b;
    cr_assert_eq(kv_blocks_init(&kb, 8, PB, true), SP_OK);
    cr_assert_eq(kv_seq_init(&a, 8), SP_OK);
    cr_assert_eq(kv_seq_init(&b, 8), SP_OK);
    int32_t prompt[9] = {5, 5, 5, 5, 6, 6, 6, 6, 7};
    compute(&kb, &a, prompt, 9);
    int32_t ids[8], unheld;
    cr_assert_eq(match(&kb, prompt, 9, ids, &unheld), 2);
    cr_assert_eq(unheld, 0, "a still holds them");
    kv_prefix_take(&kb, &b, ids, 2, prompt);
    cr_assert(kv_blocks_grow(&kb, &b, 3));
    cr_assert_eq(kv_blocks_used(&kb), 4, "3 of a's and b's own last block");
    kv_blocks_release(&kb, &a);
    cr_assert_eq(kv_blocks_used(&kb), 3, "b still holds the shared two");
    cr_assert_eq(kv_blocks_available(&kb), 5);
    kv_blocks_release(&kb, &b);
    cr_assert_eq(kv_blocks_used(&kb), 0);
    cr_assert_eq(kv_blocks_available(&kb), 8);
    kv_seq_free(&a);
    kv_seq_free(&b);
    kv_blocks_free(&kb);
}

Test(kv_prefix, a_full_pool_evicts_the_least_recent_tail_first) {
    kv_blocks kb;
    kv_seq a, b;
    cr_assert_eq(kv_blocks_init(&kb, 4, PB, true), SP_OK);
    cr_assert_eq(kv_seq_init(&a, 4), SP_OK);
    cr_assert_eq(kv_seq_init(&b, 4), SP_OK);
    int32_t prompt[13] = {1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4};
    compute(&kb, &a, prompt, 13); /* all 4 blocks, 3 of them cached */
    kv_blocks_release(&kb, &a);
    cr_assert(kv_blocks_grow(&kb, &b, 2), "the free block, then the oldest cached: a's last full block");
    int32_t ids[4], unheld;
    cr_assert_eq(match(&kb, prompt, 13, ids, &unheld), 2, "the chain's head survives");
    cr_assert_eq(kv_blocks_cached(&kb), 2);
    cr_assert(kv_blocks_grow(&kb, &b, 4));
    cr_assert_eq(match(&kb, prompt, 13, ids, &unheld), 0);
    cr_assert_eq(kv_blocks_cached(&kb), 0);
    cr_assert(!kv_blocks_grow(&kb, &a, 1), "nothing left");
    kv_blocks_release(&kb, &b);
    kv_seq_free(&a);
    kv_seq_free(&b);
    kv_blocks_free(&kb);
}

Test(kv_prefix, off_finds_nothing) {
    kv_blocks kb;
    kv_seq a;
    cr_assert_eq(kv_blocks_init(&kb, 8, PB, false), SP_OK);
    cr_assert_eq(kv_seq_init(&a, 8), SP_OK);
    int32_t prompt[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    compute(&kb, &a, prompt, 9);
    kv_blocks_release(&kb, &a);
    int32_t ids[8], unheld;
    cr_assert_eq(match(&kb, prompt, 9, ids, &unheld), 0);
    cr_assert_eq(kv_blocks_cached(&kb), 0);
    cr_assert_eq(kv_blocks_available(&kb), 8);
    kv_seq_free(&a);
    kv_blocks_free(&kb);
}

/* Many sequences over a small alphabet through a small pool: every match returns
 * blocks that hold exactly the query's tokens, and the accounting always adds up. */
Test(kv_prefix, random_churn_keeps_matches_exact) {
    enum { N = 24, SEQS = 6, MAXT = 40 };
    kv_blocks kb;
    kv_seq seqs[SEQS];
    int32_t tokens[SEQS][MAXT];
    cr_assert_eq(kv_blocks_init(&kb, N, PB, true), SP_OK);
    for (int i = 0; i < SEQS; i++) cr_assert_eq(kv_seq_init(&seqs[i], MAXT / PB + 1), SP_OK);
    uint32_t rng = 7;
    for (int round = 0; round < 2000; round++) {
        int i = (int)((rng = rng * 1103515245u + 12345u) >> 16) % SEQS;
        if (seqs[i].n > 0) {
            kv_blocks_release(&kb, &seqs[i]);
            continue;
        }
        int32_t n = 5 + (int32_t)((rng = rng * 1103515245u + 12345u) >> 16) % (MAXT - 5);
        for (int32_t t = 0; t < n; t++) tokens[i][t] = (int32_t)(((rng = rng * 1103515245u + 12345u) >> 16) % 2);
        int32_t ids[MAXT / PB + 1], unheld;
        int32_t hits = match(&kb, tokens[i], n, ids, &unheld);
        for (int32_t h = 0; h < hits; h++)
            cr_assert(memcmp(kb.tokens + (size_t)ids[h] * PB, tokens[i] + h * PB, sizeof(int32_t) * PB) == 0,
                      "round %d: matched block %d holds other tokens", round, h);
        int32_t need = kv_blocks_for_tokens(n, PB) - hits;
        if (kv_blocks_available(&kb) - unheld < need) continue;
        kv_prefix_take(&kb, &seqs[i], ids, hits, tokens[i]);
        cr_assert(kv_blocks_grow(&kb, &seqs[i], kv_blocks_for_tokens(n, PB)));
        kv_prefix_register(&kb, &seqs[i], tokens[i], n);
        int32_t held = 0;
        for (int32_t id = 0; id < N; id++) held += kb.ref[id] > 0;
        cr_assert_eq(held, kv_blocks_used(&kb), "round %d", round);
        cr_assert_eq(held + kv_blocks_available(&kb), N, "round %d", round);
    }
    for (int i = 0; i < SEQS; i++) {
        kv_blocks_release(&kb, &seqs[i]);
        kv_seq_free(&seqs[i]);
    }
    cr_assert_eq(kv_blocks_used(&kb), 0);
    kv_blocks_free(&kb);
}

/* Two sequences compute the same prefix in one step: the second shares the first's
 * cached blocks from then on, and its own later blocks are found through them. */
Test(kv_prefix, a_prefix_computed_twice_at_once_stays_one_chain) {
    kv_blocks kb;
    kv_seq a, b;
    cr_assert_eq(kv_blocks_init(&kb, 16, PB, true), SP_OK);
    cr_assert_eq(kv_seq_init(&a, 8), SP_OK);
    cr_assert_eq(kv_seq_init(&b, 8), SP_OK);
    int32_t ta[13] = {1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 9};
    int32_t tb[13] = {1, 1, 1, 1, 2, 2, 2, 2, 4, 4, 4, 4, 9};
    cr_assert(kv_blocks_grow(&kb, &a, 4));
    cr_assert(kv_blocks_grow(&kb, &b, 4));
    kv_prefix_register(&kb, &a, ta, 13);
    kv_prefix_register(&kb, &b, tb, 13);
    cr_assert_eq(b.ids[0], a.ids[0]);
    cr_assert_eq(b.ids[1], a.ids[1]);
    cr_assert_eq(kv_blocks_cached(&kb), 4, "a's three and b's third");
    cr_assert_eq(kv_blocks_used(&kb), 6, "two shared, two each of their own");
    kv_blocks_release(&kb, &a);
    kv_blocks_release(&kb, &b);
    int32_t ids[8], unheld;
    cr_assert_eq(match(&kb, tb, 13, ids, &unheld), 3, "b's third block is reachable");
    cr_assert_eq(match(&kb, ta, 13, ids, &unheld), 3);
    cr_assert_eq(kv_blocks_available(&kb), 16);
    kv_seq_free(&a);
    kv_seq_free(&b);
    kv_blocks_free(&kb);
}

/* Speculation's rollback: random growth, truncation to a random length (the accepted
 * part), registration of what was computed, and release, over several sequences with
 * the prefix cache on. The pool's accounting holds at every step and every block is
 * free or evictable at the end. */
Test(kv_blocks, truncate_churn_keeps_the_accounting_and_frees_everything) {
    enum { SEQS = 6, CAP = 12, B = 4 };
    kv_blocks kb;
    cr_assert_eq(kv_blocks_init(&kb, 40, B, true), SP_OK);
    kv_seq seq[SEQS];
    int32_t tokens[SEQS][CAP * B];
    int32_t computed[SEQS] = {0};
    for (int i = 0; i < SEQS; i++) {
        cr_assert_eq(kv_seq_init(&seq[i], CAP), SP_OK);
        for (int t = 0; t < CAP * B; t++) tokens[i][t] = (i % 2) * 1000 + t; /* pairs share prefixes */
    }
    uint64_t rng = 42;
    for (int round = 0; round < 5000; round++) {
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        int i = (int)((rng >> 33) % SEQS), op = (int)((rng >> 20) % 8);
        kv_seq *s = &seq[i];
        if (op < 4) { /* drafts: grow by a few blocks when the pool allows */
            int32_t want = s->n + 1 + (int32_t)((rng >> 10) % 3);
            if (want > CAP) want = CAP;
            int32_t before = s->n;
            bool ok = kv_blocks_grow(&kb, s, want);
            cr_assert(ok ? s->n == want : s->n == before, "grow is all or none");
        } else if (op < 7) { /* verify: what was accepted is computed, the rest goes back */
            int32_t keep = s->n == 0 ? 0 : (int32_t)((rng >> 8) % (uint64_t)(s->n + 1));
            int32_t n_computed = keep * B - (int32_t)((rng >> 4) % B);
            if (n_computed < 0) n_computed = 0;
            if (n_computed < computed[i]) n_computed = computed[i] <= keep * B ? computed[i] : keep * B;
            computed[i] = n_computed;
            kv_prefix_register(&kb, s, tokens[i], n_computed);
            kv_blocks_truncate(&kb, s, keep);
            cr_assert_eq(s->n, keep);
        } else {
            kv_blocks_release(&kb, s);
            computed[i] = 0;
        }
        int32_t held = 0;
        for (int k = 0; k < kb.n_total; k++) held += kb.ref[k] > 0;
        cr_assert_eq(kv_blocks_used(&kb), held, "round %d: used %d, held %d", round, kv_blocks_used(&kb), held);
        cr_assert_eq(kb.n_free + kb.n_evictable + held, kb.n_total, "round %d: every block is somewhere", round);
    }
    for (int i = 0; i < SEQS; i++) {
        kv_blocks_release(&kb, &seq[i]);
        kv_seq_free(&seq[i]);
    }
    cr_assert_eq(kv_blocks_used(&kb), 0);
    cr_assert_eq(kv_blocks_available(&kb), kb.n_total);
    kv_blocks_free(&kb);
}
