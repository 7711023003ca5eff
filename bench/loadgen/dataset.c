/* dataset.c: the prompts of a run and the JSON bodies sent for them.
 *
 * random: words drawn with the seeded RNG from a list of common English words, so the
 *   prompts are real vocabulary text (random token ids, vLLM's choice, make text that no
 *   two tokenizers count alike). The text is then fitted to exactly --input-len tokens as
 *   the server's own /tokenize counts them: add or remove words, a few at a time when far
 *   off and one short word at a time when close, until the count is exact (or, where the
 *   tokenizer makes that impossible, one token off; the report says so).
 * shared-prefix: one prefix fitted to --prefix-len tokens, the same for every prompt, then
 *   a per-prompt suffix of random words fitted so the whole prompt is --input-len tokens.
 * chat: a JSON file of conversations ({"messages": [...]} or ShareGPT's {"conversations":
 *   [{"from": "human", "value": ...}]}), sent as they are to /v1/chat/completions; their
 *   input length is what the server's usage reports.
 * Runs on the main thread before the timed run.
 */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "bench/loadgen/loadgen.h"

static const char *const dataset_words[] = {
    "time",      "year",       "people",      "way",       "day",       "man",        "thing",  "woman",   "life",
    "child",     "world",      "school",      "state",     "family",    "student",    "group",  "country", "problem",
    "hand",      "part",       "place",       "case",      "week",      "company",    "system", "program", "question",
    "work",      "government", "number",      "night",     "point",     "home",       "water",  "room",    "mother",
    "area",      "money",      "story",       "fact",      "month",     "lot",        "right",  "study",   "book",
    "eye",       "job",        "word",        "business",  "issue",     "side",       "kind",   "head",    "house",
    "service",   "friend",     "father",      "power",     "hour",      "game",       "line",   "end",     "member",
    "law",       "car",        "city",        "community", "name",      "president",  "team",   "minute",  "idea",
    "kid",       "body",       "information", "back",      "parent",    "face",       "others", "level",   "office",
    "door",      "health",     "person",      "art",       "war",       "history",    "party",  "result",  "change",
    "morning",   "reason",     "research",    "girl",      "guy",       "moment",     "air",    "teacher", "force",
    "education", "garden",     "river",       "mountain",  "village",   "harbour",    "bread",  "music",   "letter",
    "window",    "be",         "have",        "do",        "say",       "go",         "can",    "get",     "would",
    "make",      "know",       "will",        "think",     "take",      "see",        "come",   "could",   "want",
    "look",      "use",        "find",        "give",      "tell",      "ask",        "seem",   "feel",    "try",
    "leave",     "call",       "keep",        "let",       "begin",     "help",       "talk",   "turn",    "start",
    "show",      "hear",       "play",        "run",       "move",      "like",       "live",   "believe", "hold",
    "bring",     "happen",     "write",       "provide",   "sit",       "stand",      "lose",   "pay",     "meet",
    "include",   "continue",   "set",         "learn",     "lead",      "understand", "watch",  "follow",  "stop",
    "create",    "speak",      "read",        "allow",     "add",       "spend",      "grow",   "open",    "walk",
    "win",       "offer",      "remember",    "love",      "consider",  "appear",     "buy",    "wait",    "serve",
    "die",       "send",       "expect",      "build",     "stay",      "fall",       "cut",    "reach",   "kill",
    "remain",    "good",       "new",         "first",     "last",      "long",       "great",  "little",  "own",
    "other",     "old",        "big",         "high",      "different", "small",      "large",  "next",    "early",
    "young",     "important",  "few",         "public",    "bad",       "same",       "able",   "quiet",   "bright",
    "warm",      "cold",       "slow",        "quick",     "the",       "of",         "and",    "to",      "in",
    "a",         "that",       "it",          "with",      "as",        "for",        "on",     "at",      "by",
    "from",      "they",       "we",          "she",       "or",        "an",         "there",  "their",   "what",
    "so",        "up",         "out",         "if",        "about",     "who",        "which",  "when",    "one",
    "all",       "most",       "then",        "into",      "than",      "over",       "after",  "before",
};

/* Words most tokenizers make one token of, for the last steps of a fit. */
static const char *const dataset_short_words[] = {"a", "the", "and", "to", "of", "in", "is", "it", "on", "I", "at"};

#define DATASET_COUNT(a) (sizeof(a) / sizeof((a)[0]))
#define FIT_MAX_STEPS    48

typedef struct dataset_words_buf {
    const char **w;
    size_t n, cap;
} dataset_words_buf;

static int words_push(dataset_words_buf *b, const char *word) {
    if (b->n == b->cap) {
        size_t cap = b->cap ? 2 * b->cap : 256;
        const char **grown = realloc(b->w, cap * sizeof *grown);
        if (!grown) return -1;
        b->w = grown;
        b->cap = cap;
    }
    b->w[b->n++] = word;
    return 0;
}

static int words_add_random(dataset_words_buf *b, lg_rng *rng, size_t k, bool short_only) {
    for (size_t i = 0; i < k; i++) {
        const char *w = short_only ? dataset_short_words[lg_rng_below(rng, DATASET_COUNT(dataset_short_words))]
                                   : dataset_words[lg_rng_below(rng, DATASET_COUNT(dataset_words))];
        if (words_push(b, w) != 0) return -1;
    }
    return 0;
}

enum { FIT_TAIL_MAX = 8 };

/* prefix followed by the words, separated by single spaces, then `tail` letters glued
 * to the last word (the fine adjustment: a letter is one token where whole words cost
 * several, as in byte-fallback vocabularies). Caller owns (free). */
static char *words_render(const char *prefix, const dataset_words_buf *b, int tail) {
    size_t len = strlen(prefix) + (size_t)tail;
    for (size_t i = 0; i < b->n; i++) len += strlen(b->w[i]) + 1;
    char *s = malloc(len + 1), *p = s;
    if (!s) return NULL;
    p = stpcpy(p, prefix);
    for (size_t i = 0; i < b->n; i++) {
        if (p != s) *p++ = ' ';
        p = stpcpy(p, b->w[i]);
    }
    for (int i = 0; i < tail; i++) *p++ = 'e';
    *p = '\0';
    return s;
}

/* Random words after prefix (whose count is prefix_tokens), fitted to target tokens as
 * the server counts the whole text. *text: caller owns (free); *count: its tokens. */
static int dataset_fit(lg_api *api, lg_rng *rng, const char *prefix, int prefix_tokens, int target, char **text,
                       int *count, lg_err *e) {
    dataset_words_buf words = {0};
    char *best = NULL;
    int best_count = -1, rc = -1, tail = 0;
    /* English runs about 1.3 tokens a word: start a little short and grow */
    int missing = target - prefix_tokens;
    if (words_add_random(&words, rng, (size_t)(missing > 1 ? missing * 3 / 4 : 1), false) != 0) goto oom;
    for (int step = 0; step < FIT_MAX_STEPS; step++) {
        char *t = words_render(prefix, &words, tail);
        int c;
        if (!t) goto oom;
        if (lg_api_count_tokens(api, t, &c, e) != 0) {
            free(t);
            goto done;
        }
        if (best_count < 0 || abs(c - target) < abs(best_count - target)) {
            free(best);
            best = t;
            best_count = c;
        } else {
            free(t);
        }
        int d = target - c;
        if (d == 0) break;
        /* tokens per word as this tokenizer counts these words (English: about 1.3; a
         * byte-level vocabulary: several), so the steps fit any tokenizer */
        double per_word = words.n > 0 ? (double)(c - prefix_tokens) / (double)words.n : 1.3;
        if (per_word < 0.5) per_word = 0.5;
        if (d > 0 && d <= 3 && per_word > 2.5 && tail + d <= FIT_TAIL_MAX) {
            tail += d; /* words are too coarse here: letters */
        } else if (d < 0 && tail > 0) {
            tail = tail + d > 0 ? tail + d : 0;
        } else if (d > 0) { /* most of the missing tokens' worth of words, then single short ones */
            size_t k = d > 3 ? (size_t)(0.8 * d / per_word) : 1;
            if (words_add_random(&words, rng, k > 0 ? k : 1, d <= 2) != 0) goto oom;
        } else { /* at most the excess */
            size_t k = (size_t)(-d / per_word);
            if (k < 1) k = 1;
            if (words.n <= 1) break; /* the prefix alone is too long */
            words.n -= k < words.n ? k : words.n - 1;
        }
    }
    if (best_count < 0 || abs(best_count - target) > 1) {
        lg_fail(e, "could not fit a prompt to %d tokens with the server's tokenizer (closest: %d)", target, best_count);
        goto done;
    }
    *text = best;
    *count = best_count;
    best = NULL;
    rc = 0;
    goto done;
oom:
    lg_fail(e, "out of memory");
done:
    free(best);
    free(words.w);
    return rc;
}

/* The fields every request shares; the caller adds prompt or messages. */
static json_t *dataset_body(const lg_options *o, const char *model) {
    return json_pack("{s:s, s:i, s:i, s:b, s:{s:b}, s:b}", "model", model, "max_tokens", o->output_len, "temperature",
                     0, "stream", 1, "stream_options", "include_usage", 1, "ignore_eos", 1);
}

/* Takes ownership of body; sets p->body. */
static int dataset_finish(json_t *body, lg_prompt *p, lg_err *e) {
    p->body = body ? json_dumps(body, JSON_COMPACT) : NULL;
    json_decref(body);
    return p->body ? 0 : lg_fail(e, "out of memory");
}

static int dataset_text_prompt(const lg_options *o, const char *model, const char *text, lg_prompt *p, lg_err *e) {
    json_t *body = dataset_body(o, model);
    if (!body) return lg_fail(e, "out of memory");
    int bad;
    if (o->chat_endpoint) {
        bad = json_object_set_new(body, "messages", json_pack("[{s:s, s:s}]", "role", "user", "content", text));
    } else {
        bad = json_object_set_new(body, "prompt", json_string(text));
    }
    if (bad) {
        json_decref(body);
        return lg_fail(e, "out of memory");
    }
    return dataset_finish(body, p, e);
}

static int dataset_words_prompts(const lg_options *o, lg_api *api, const char *model, lg_prompt *out, size_t n,
                                 lg_notes *notes, lg_err *e) {
    lg_rng rng = {o->seed};
    char *prefix = NULL;
    int prefix_tokens = 0, off = 0, rc = -1;
    if (o->dataset == LG_DATASET_SHARED_PREFIX) {
        if (dataset_fit(api, &rng, "", 0, o->prefix_len, &prefix, &prefix_tokens, e) != 0) {
            return lg_fail(e, "--prefix-len %d: %.900s", o->prefix_len, e->msg);
        }
        if (prefix_tokens != o->prefix_len) {
            lg_notes_add(notes, "the shared prefix is %d tokens, not --prefix-len %d", prefix_tokens, o->prefix_len);
        }
    }
    fprintf(stderr, "loadgen: fitting %zu prompts to %d tokens with %s/tokenize\n", n, o->input_len, o->base_url);
    for (size_t i = 0; i < n; i++) {
        char *text;
        int count;
        if (dataset_fit(api, &rng, prefix ? prefix : "", prefix_tokens, o->input_len, &text, &count, e) != 0) {
            lg_fail(e, "--input-len %d: %.900s", o->input_len, e->msg);
            goto done;
        }
        out[i].input_tokens = count;
        off += count != o->input_len;
        int bad = dataset_text_prompt(o, model, text, &out[i], e);
        free(text);
        if (bad) goto done;
    }
    if (off > 0) {
        lg_notes_add(notes, "%d of %zu prompts are one token off --input-len %d (the tokenizer allows no exact fit)",
                     off, n, o->input_len);
    }
    rc = 0;
done:
    free(prefix);
    return rc;
}

/* One conversation of the file as chat messages (caller owns), or NULL when it has none
 * to send. ShareGPT: an optional system turn and the first human turn, as vLLM sends. */
static json_t *dataset_chat_messages(json_t *entry) {
    json_t *messages = json_object_get(entry, "messages");
    if (json_is_array(messages)) {
        /* the conversation up to its last non-assistant message (a final answer is the reference) */
        size_t n = json_array_size(messages);
        while (n > 0) {
            const char *role = json_string_value(json_object_get(json_array_get(messages, n - 1), "role"));
            if (!role || strcmp(role, "assistant") != 0) break;
            n--;
        }
        bool has_user = false; /* a conversation to answer needs a user turn */
        for (size_t i = 0; i < n; i++) {
            const char *role = json_string_value(json_object_get(json_array_get(messages, i), "role"));
            has_user |= role && strcmp(role, "user") == 0;
        }
        if (n == 0 || !has_user) return NULL;
        json_t *out = json_array();
        for (size_t i = 0; out && i < n; i++) json_array_append(out, json_array_get(messages, i));
        return out;
    }
    json_t *turns = json_object_get(entry, "conversations");
    if (!json_is_array(turns)) return NULL;
    json_t *out = json_array();
    size_t i;
    json_t *turn;
    json_array_foreach(turns, i, turn) {
        const char *from = json_string_value(json_object_get(turn, "from"));
        const char *value = json_string_value(json_object_get(turn, "value"));
        if (!from || !value) break;
        bool system = strcmp(from, "system") == 0, human = strcmp(from, "human") == 0 || strcmp(from, "user") == 0;
        if (!system && !human) break;
        json_array_append_new(out, json_pack("{s:s, s:s}", "role", system ? "system" : "user", "content", value));
        if (human) return out;
    }
    json_decref(out);
    return NULL;
}

static int dataset_chat_prompts(const lg_options *o, const char *model, lg_prompt *out, size_t n, lg_notes *notes,
                                lg_err *e) {
    json_error_t jerr;
    json_t *root = json_load_file(o->dataset_path, 0, &jerr);
    if (!root) return lg_fail(e, "--dataset-path %s: line %d: %s", o->dataset_path, jerr.line, jerr.text);
    if (!json_is_array(root)) {
        json_decref(root);
        return lg_fail(e, "--dataset-path %s: expected a JSON list of conversations", o->dataset_path);
    }
    size_t n_conv = 0, skipped = 0, i;
    json_t **convs = calloc(json_array_size(root) + 1, sizeof *convs), *entry;
    if (!convs) {
        json_decref(root);
        return lg_fail(e, "out of memory");
    }
    json_array_foreach(root, i, entry) {
        json_t *m = dataset_chat_messages(entry);
        if (m)
            convs[n_conv++] = m;
        else
            skipped++;
    }
    json_decref(root);
    int rc = 0;
    if (n_conv == 0) {
        rc = lg_fail(e,
                     "--dataset-path %s: no conversation with a user message (want {\"messages\": [...]} or "
                     "{\"conversations\": [{\"from\": \"human\", \"value\": ...}]})",
                     o->dataset_path);
    }
    if (skipped) lg_notes_add(notes, "%s: %zu entries without a user message skipped", o->dataset_path, skipped);
    /* a seeded shuffle, then in order (wrapping around when asked for more than the file has) */
    lg_rng rng = {o->seed};
    for (size_t k = n_conv; k > 1; k--) {
        size_t j = lg_rng_below(&rng, k);
        json_t *t = convs[k - 1];
        convs[k - 1] = convs[j];
        convs[j] = t;
    }
    if (rc == 0 && n > n_conv)
        lg_notes_add(notes, "%s has %zu conversations for %zu requests: some repeat", o->dataset_path, n_conv, n);
    for (size_t k = 0; rc == 0 && k < n; k++) {
        json_t *body = dataset_body(o, model);
        if (!body || json_object_set(body, "messages", convs[k % n_conv]) != 0) {
            json_decref(body);
            rc = lg_fail(e, "out of memory");
            break;
        }
        out[k].input_tokens = -1;
        rc = dataset_finish(body, &out[k], e);
    }
    for (size_t k = 0; k < n_conv; k++) json_decref(convs[k]);
    free(convs);
    return rc;
}

int lg_dataset_build(const lg_options *o, lg_api *api, const char *model, lg_prompt *out, size_t n, lg_notes *notes,
                     lg_err *e) {
    memset(out, 0, n * sizeof *out);
    if (o->dataset == LG_DATASET_CHAT) return dataset_chat_prompts(o, model, out, n, notes, e);
    return dataset_words_prompts(o, api, model, out, n, notes, e);
}

void lg_prompts_free(lg_prompt *p, size_t n) {
    for (size_t i = 0; p && i < n; i++) free(p[i].body);
    free(p);
}
