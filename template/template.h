/* template.h: renders a model's chat template (the Jinja program in the GGUF key
 * tokenizer.chat_template) the way Hugging Face's apply_chat_template does.
 *
 * The engine covers the part of Jinja that chat templates use, with Hugging Face's
 * environment: trim_blocks and lstrip_blocks on, one trailing newline of the source
 * dropped, loop controls (break/continue), a tojson filter that is Python's
 * json.dumps(ensure_ascii=False, sort_keys=False), and the globals raise_exception and
 * strftime_now. Values follow Python's rules (truthiness, str(), comparisons).
 *
 * Memory: a render allocates every value from one arena that is freed when it returns,
 * so a render never leaks whatever the template does; the arena, the evaluation steps
 * and the output size are bounded (tmpl_limits).
 *
 * Thread rules: a tmpl is immutable after tmpl_parse; any number of threads may render
 * it at once (each render has its own arena).
 */
#ifndef SP_TEMPLATE_H
#define SP_TEMPLATE_H

#include <jansson.h>
#include <stddef.h>

#include "common/status.h"
#include "gguf/gguf.h"

typedef struct tmpl tmpl;

/* Bounds on one render; a zero field takes its default. Exceeding one stops the render
 * with SP_ERR_RANGE naming the limit. */
typedef struct tmpl_limits {
    size_t max_steps;        /* expression and statement evaluations (default 10 million) */
    size_t max_output_bytes; /* rendered text (default 16 MiB) */
    size_t max_memory_bytes; /* the render's arena (default 256 MiB) */
} tmpl_limits;

/* Parses len bytes of Jinja source. A syntax error is SP_ERR_FORMAT with a message
 * "line L, column C: what is wrong". Caller owns *out; free with tmpl_destroy. */
sp_status tmpl_parse(const char *source, size_t len, tmpl **out);
void tmpl_destroy(tmpl *t);

/* Renders t with the variables of the JSON object context (messages, tools,
 * add_generation_prompt, bos_token, ...; borrowed). limits may be NULL.
 * Errors: raise_exception(msg) is SP_ERR_INVALID_ARG with msg itself as the message
 * (the template rejected the conversation: an HTTP 400); any other runtime error
 * (undefined variable used where Jinja errors, type errors, unknown filter) is
 * SP_ERR_FORMAT "line L: what is wrong"; a limit is SP_ERR_RANGE.
 * On success *out (caller owns; free with free(); NUL-terminated) holds *out_len bytes. */
sp_status tmpl_render(const tmpl *t, const json_t *context, const tmpl_limits *limits, char **out, size_t *out_len);

/* ---- the model's template and special tokens (template_gguf.c) ---- */

/* Copies the GGUF's tokenizer.chat_template into *source (caller owns; free with free();
 * NUL-terminated, *len bytes). SP_ERR_NOT_FOUND when the file has none. */
sp_status tmpl_source_from_gguf(const gguf_file *f, char **source, size_t *len);

/* Sets the special-token variables Hugging Face passes to a template (bos_token,
 * eos_token, unk_token, pad_token, sep_token, cls_token, mask_token) from the GGUF's
 * tokenizer.ggml.*_token_id and tokenizer.ggml.tokens, on context (borrowed). Keys the
 * context already holds are kept: the caller's values win. Tokens the file does not
 * name are left unset. */
sp_status tmpl_context_add_special_tokens(const gguf_file *f, json_t *context);

#endif
