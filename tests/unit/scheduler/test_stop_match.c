/* test_stop_match.c: stop strings matched across token boundaries: what is committed,
 * what is held back, and where the text ends at a match. */
#include <criterion/criterion.h>
#include <string.h>

#include "scheduler/sched_internal.h"

typedef struct stop_fixture {
    const char *stops[SCHED_MAX_STOP];
    size_t lens[SCHED_MAX_STOP];
    int n;
    sched_stop st;
    char committed[1024];
    size_t n_committed;
    bool matched;
} stop_fixture;

static void fixture_init(stop_fixture *f, int n, const char *const *stops) {
    memset(f, 0, sizeof *f);
    f->n = n;
    for (int i = 0; i < n; i++) {
        f->stops[i] = stops[i];
        f->lens[i] = strlen(stops[i]);
    }
}

/* Feeds one piece; returns the bytes it committed (NUL-terminated in out). */
static size_t feed(stop_fixture *f, const char *piece, char *out) {
    char work[SCHED_MAX_STOP_BYTES + 256];
    size_t n_commit = 0;
    cr_assert(!f->matched, "fed after a match");
    f->matched = sched__stop_feed(&f->st, f->stops, f->lens, f->n, piece, strlen(piece), work, &n_commit);
    memcpy(out, work, n_commit);
    out[n_commit] = '\0';
    memcpy(f->committed + f->n_committed, work, n_commit);
    f->n_committed += n_commit;
    f->committed[f->n_committed] = '\0';
    return n_commit;
}

Test(stop_match, commits_text_that_cannot_start_a_stop) {
    stop_fixture f;
    fixture_init(&f, 1, (const char *[]){"END"});
    char out[256];
    feed(&f, "hello world", out);
    cr_assert_str_eq(out, "hello world");
    cr_assert_eq(f.st.n_held, 0);
}

Test(stop_match, holds_a_partial_match_then_matches_across_tokens) {
    stop_fixture f;
    fixture_init(&f, 1, (const char *[]){"END"});
    char out[256];
    feed(&f, "the E", out);
    cr_assert_str_eq(out, "the ");
    cr_assert_eq(f.st.n_held, 1);
    feed(&f, "N", out);
    cr_assert_str_eq(out, "");
    cr_assert_eq(f.st.n_held, 2);
    feed(&f, "D of it", out);
    cr_assert(f.matched);
    cr_assert_str_eq(f.committed, "the ");
}

Test(stop_match, releases_held_text_when_the_match_breaks) {
    stop_fixture f;
    fixture_init(&f, 1, (const char *[]){"END"});
    char out[256];
    feed(&f, "EN", out);
    cr_assert_str_eq(out, "");
    feed(&f, "X", out);
    cr_assert_str_eq(out, "ENX");
    cr_assert(!f.matched);
    cr_assert_eq(f.st.n_held, 0);
}

Test(stop_match, overlapping_prefix_keeps_the_longest_candidate) {
    /* "aab" after "aa...": the held suffix must restart correctly at each a */
    stop_fixture f;
    fixture_init(&f, 1, (const char *[]){"aab"});
    char out[256];
    feed(&f, "xaa", out);
    cr_assert_str_eq(out, "x");
    feed(&f, "a", out); /* "aaa": the last two can still start "aab" */
    cr_assert_str_eq(out, "a");
    cr_assert_eq(f.st.n_held, 2);
    feed(&f, "b!", out);
    cr_assert(f.matched);
    cr_assert_str_eq(f.committed, "xa");
}

Test(stop_match, earliest_of_several_stops_wins) {
    stop_fixture f;
    fixture_init(&f, 3, (const char *[]){"world", "lo w", "zzz"});
    char out[256];
    feed(&f, "hel", out);
    feed(&f, "lo wor", out);
    cr_assert(f.matched, "\"lo w\" is complete");
    cr_assert_str_eq(f.committed, "hel");
}

Test(stop_match, match_spanning_held_and_new_text_with_multibyte_text) {
    stop_fixture f;
    fixture_init(&f, 2, (const char *[]){"\xc3\xa9t\xc3\xa9", "\n\n"});
    char out[256];
    feed(&f, "un \xc3\xa9", out); /* "un é": é may start "été" */
    cr_assert_str_eq(out, "un ");
    feed(&f, "t", out);
    cr_assert_str_eq(out, "");
    feed(&f, "\xc3\xa9 chaud", out);
    cr_assert(f.matched);
    cr_assert_str_eq(f.committed, "un ");
}

Test(stop_match, no_false_holdback_for_a_character_inside_a_stop) {
    /* "t" is in "stop" but not its start: nothing is held */
    stop_fixture f;
    fixture_init(&f, 1, (const char *[]){"stop"});
    char out[256];
    feed(&f, "cat", out);
    cr_assert_str_eq(out, "cat");
    feed(&f, "s", out);
    cr_assert_str_eq(out, "");
    feed(&f, "t", out);
    cr_assert_str_eq(out, "");
    feed(&f, "ep", out); /* "step" is not "stop" */
    cr_assert_str_eq(out, "step");
}

Test(stop_match, match_inside_one_piece_drops_the_rest) {
    stop_fixture f;
    fixture_init(&f, 1, (const char *[]){"."});
    char out[256];
    feed(&f, "Hi. There.", out);
    cr_assert(f.matched);
    cr_assert_str_eq(out, "Hi");
}

Test(stop_match, flush_returns_held_text) {
    stop_fixture f;
    fixture_init(&f, 1, (const char *[]){"<|end|>"});
    char out[256];
    feed(&f, "answer <|e", out);
    cr_assert_str_eq(out, "answer ");
    char rest[SCHED_MAX_STOP_BYTES];
    size_t n = sched__stop_flush(&f.st, rest);
    cr_assert_eq(n, 3);
    cr_assert_eq(memcmp(rest, "<|e", 3), 0);
    cr_assert_eq(f.st.n_held, 0);
}

Test(stop_match, longest_stop_holds_at_most_its_length_minus_one) {
    char stop[SCHED_MAX_STOP_BYTES + 1];
    memset(stop, 'q', SCHED_MAX_STOP_BYTES);
    stop[SCHED_MAX_STOP_BYTES] = '\0';
    stop_fixture f;
    fixture_init(&f, 1, (const char *[]){stop});
    char out[512], piece[SCHED_MAX_STOP_BYTES];
    memset(piece, 'q', sizeof piece);
    piece[0] = 'z';
    piece[201] = '\0'; /* "z" and 200 q */
    feed(&f, piece, out);
    cr_assert_str_eq(out, "z");
    cr_assert_eq(f.st.n_held, 200);
    piece[0] = 'q';
    piece[55] = '\0';
    feed(&f, piece, out); /* 255 q: one short of the stop */
    cr_assert_eq(f.st.n_held, SCHED_MAX_STOP_BYTES - 1);
    cr_assert(!f.matched);
    feed(&f, "q", out);
    cr_assert(f.matched);
    cr_assert_str_eq(f.committed, "z");
}
