/* openai_refused.c: the chat and completions fields spindle knows but does not
 * implement. Each would change the answer if it were honoured, so a request that sets
 * one to anything but its neutral value is a 400 naming it, never silently ignored
 * (docs/api.md, "Refused fields"). Fields that do not change the output (store,
 * metadata, service_tier, prediction, cache_prompt, ...) stay ignored as unknown.
 *
 * DESIGN: one table, so the list in docs/api.md can be checked against it line by line;
 * each row says which values are neutral (accepted) and why the rest are refused.
 */
#include <math.h>
#include <string.h>

#include "server/api/api_internal.h"

typedef enum {
    REFUSE_ANY,       /* any value but null */
    REFUSE_TRUE,      /* true (false is the neutral value) */
    REFUSE_FALSE,     /* false (true is the neutral value) */
    REFUSE_NUMBER,    /* a number other than the row's neutral value */
    REFUSE_NOT_TEXT,  /* anything but ["text"] (modalities) */
    REFUSE_NONEMPTY,  /* anything but [] (the list's default: nothing) */
    REFUSE_NOT_MEDIUM /* anything but "medium" (verbosity's default) */
} refuse_when;

typedef struct refused_field {
    const char *name;
    refuse_when when;
    double neutral; /* REFUSE_NUMBER: the value that changes nothing */
    bool chat_only;
    const char *why; /* the message's second half */
} refused_field;

static const refused_field REFUSED[] = {
    /* OpenAI */
    {"audio", REFUSE_ANY, 0, true, "audio output is not supported (the models write text)"},
    {"modalities", REFUSE_NOT_TEXT, 0, true, "only [\"text\"] is supported"},
    {"web_search_options", REFUSE_ANY, 0, true, "web search is not supported"},
    {"functions", REFUSE_ANY, 0, true, "the legacy function fields are not supported: use 'tools'"},
    {"function_call", REFUSE_ANY, 0, true, "the legacy function fields are not supported: use 'tool_choice'"},
    {"verbosity", REFUSE_NOT_MEDIUM, 0, true, "output verbosity other than medium is not supported"},
    /* vLLM */
    {"guided_whitespace_pattern", REFUSE_ANY, 0, false,
     "JSON is written as --grammar-json-whitespace says, not by a pattern"},
    {"structured_outputs", REFUSE_ANY, 0, false,
     "use 'response_format', 'guided_json', 'guided_regex', 'guided_choice' or 'guided_grammar'"},
    {"truncate_prompt_tokens", REFUSE_ANY, 0, false, "prompts are never truncated"},
    {"use_beam_search", REFUSE_TRUE, 0, false, "beam search is not supported"},
    {"length_penalty", REFUSE_NUMBER, 1, false, "beam search is not supported"},
    {"include_stop_str_in_output", REFUSE_TRUE, 0, false, "the stop string is never returned"},
    {"skip_special_tokens", REFUSE_FALSE, 0, false, "special tokens are always left out of the text"},
    {"spaces_between_special_tokens", REFUSE_FALSE, 0, false, "special tokens are always left out of the text"},
    {"bad_words", REFUSE_NONEMPTY, 0, false, "use 'logit_bias' with -100"},
    {"allowed_token_ids", REFUSE_ANY, 0, false, "use 'logit_bias' or a grammar"},
    {"stop_token_ids", REFUSE_NONEMPTY, 0, false, "use 'stop' strings"},
    {"prompt_logprobs", REFUSE_ANY, 0, false, "prompt log-probabilities are not computed"},
    /* llama-server */
    {"n_predict", REFUSE_NUMBER, -1, false, "use 'max_tokens'"}, /* -1: no limit */
    {"n_probs", REFUSE_NUMBER, 0, false, "use 'logprobs' and 'top_logprobs'"},
    {"mirostat", REFUSE_NUMBER, 0, false, "mirostat sampling is not supported"},
    {"typical_p", REFUSE_NUMBER, 1, false, "typical sampling is not supported"},
    {"tfs_z", REFUSE_NUMBER, 1, false, "tail-free sampling is not supported"},
    {"top_n_sigma", REFUSE_NUMBER, -1, false, "top-n-sigma sampling is not supported"},
    {"dynatemp_range", REFUSE_NUMBER, 0, false, "dynamic temperature is not supported"},
    {"dry_multiplier", REFUSE_NUMBER, 0, false, "DRY repetition penalty is not supported"},
    {"xtc_probability", REFUSE_NUMBER, 0, false, "XTC sampling is not supported"},
};

static bool is_text_only(const json_t *v) {
    return json_is_array(v) && json_array_size(v) == 1 && json_is_string(json_array_get(v, 0)) &&
           strcmp(json_string_value(json_array_get(v, 0)), "text") == 0;
}

static bool refused(const refused_field *f, const json_t *v) {
    if (!v || json_is_null(v)) return false;
    switch (f->when) {
    case REFUSE_ANY: return true;
    case REFUSE_TRUE: return !json_is_false(v);
    case REFUSE_FALSE: return !json_is_true(v);
    case REFUSE_NUMBER: return !json_is_number(v) || fabs(json_number_value(v) - f->neutral) > 0;
    case REFUSE_NOT_TEXT: return !is_text_only(v);
    case REFUSE_NONEMPTY: return !(json_is_array(v) && json_array_size(v) == 0);
    case REFUSE_NOT_MEDIUM: return !(json_is_string(v) && strcmp(json_string_value(v), "medium") == 0);
    }
    return true;
}

sp_status srv__request_refused(const json_t *root, srv_endpoint endpoint, int n, srv_error *err) {
    const json_t *v;
    for (size_t i = 0; i < sizeof REFUSED / sizeof REFUSED[0]; i++) {
        const refused_field *f = &REFUSED[i];
        if (f->chat_only && endpoint != SRV_ENDPOINT_CHAT) continue;
        if (refused(f, json_object_get(root, f->name)))
            return srv__fail(err, SRV_ERROR_BAD_REQUEST, f->name, "'%s' is not supported: %s.", f->name, f->why);
    }
    if ((v = json_object_get(root, "echo")) && !json_is_null(v) && !json_is_false(v))
        return srv__fail(err, SRV_ERROR_BAD_REQUEST, "echo", "'echo' is not supported: leave it out or set it false.");
    if ((v = json_object_get(root, "best_of")) && !json_is_null(v) &&
        !(json_is_integer(v) && (json_integer_value(v) == 1 || json_integer_value(v) == n)))
        return srv__fail(err, SRV_ERROR_BAD_REQUEST, "best_of",
                         "'best_of' is not supported: leave it out or set it to n (%d).", n);
    if ((v = json_object_get(root, "suffix")) && !json_is_null(v) && !(json_is_string(v) && json_string_length(v) == 0))
        return srv__fail(err, SRV_ERROR_BAD_REQUEST, "suffix", "'suffix' (insertion) is not supported.");
    return SP_OK;
}
