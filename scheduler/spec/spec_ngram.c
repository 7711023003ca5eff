/* spec_ngram.c: prompt lookup. A model that quotes its prompt (an edit of a file, a
 * summary with quotes, reformatted JSON) or repeats its own output writes, at some
 * point, the last few tokens of something it has seen; what followed them there is a
 * good guess for what follows now. The scan runs over the sequence's own tokens, newest
 * occurrence first, so the guess follows the most recent copy. */
#include <string.h>

#include "scheduler/spec/spec.h"

const char *spec_proposer_name(sched_spec_proposer p) {
    switch (p) {
    case SCHED_SPEC_NGRAM: return "ngram";
    case SCHED_SPEC_SUFFIX: return "suffix";
    case SCHED_SPEC_DRAFT: return "draft";
    case SCHED_SPEC_SELF: return "self";
    case SCHED_SPEC_PROPOSERS: break;
    }
    return "?";
}

int spec_ngram_propose(const int32_t *tokens, int32_t n_tokens, int ngram_min, int ngram_max, int32_t *draft,
                       int max_draft, int *match_len) {
    *match_len = 0;
    if (ngram_min < 1 || ngram_max < ngram_min || max_draft <= 0 || n_tokens <= ngram_min) return 0;
    const int32_t *tail = tokens + n_tokens - ngram_min; /* the shortest suffix we match */
    int32_t best_at = -1, best_len = 0;
    /* an occurrence ending at `end` (exclusive) must leave a token after it */
    for (int32_t end = n_tokens - 1; end >= ngram_min; end--) {
        if (tokens[end - 1] != tail[ngram_min - 1]) continue; /* cheap first test */
        if (memcmp(tokens + end - ngram_min, tail, sizeof *tokens * (size_t)ngram_min) != 0) continue;
        int32_t len = ngram_min; /* extend backwards up to ngram_max */
        while (len < ngram_max && end - len - 1 >= 0 && n_tokens - len - 1 >= 0 &&
               tokens[end - len - 1] == tokens[n_tokens - len - 1] && end - len - 1 < n_tokens - len - 1)
            len++;
        if (len > best_len) {
            best_len = len;
            best_at = end;
            if (len == ngram_max) break; /* the newest longest match */
        }
    }
    if (best_at < 0) return 0;
    int n = 0;
    while (n < max_draft && best_at + n < n_tokens) {
        draft[n] = tokens[best_at + n];
        n++;
    }
    *match_len = best_len;
    return n;
}
