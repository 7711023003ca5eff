/* cli_session.c: what the subcommands share: the exit status of a failure, and for the
 * one-shot commands (generate, bench) flag parsing and a single sequence driven
 * straight through the forward pass (the server's scheduler replaces this with
 * batched steps). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "common/assert.h"
#include "common/log.h"
#include "cli/cli.h"

enum { CLI_BLOCK_SIZE = 16, CLI_MAX_BATCH = 512 };

int cmd_exit_status(int status) {
    switch ((sp_status)status) {
    case SP_OK: return 0;
    case SP_ERR_FORMAT:
    case SP_ERR_UNSUPPORTED:
    case SP_ERR_INVALID_ARG:
    case SP_ERR_NOT_FOUND:
    case SP_ERR_IO:
    case SP_ERR_RANGE: return 2;
    default: return 1;
    }
}

bool cli_parse_cpu_isa(const char *text, sp_cpu_isa *out) {
    if (sp_cpu_isa_parse(text, out) != SP_OK || dev_cpu_isa_check(*out) != SP_OK) {
        fprintf(stderr, "spindle: error: --cpu-isa: %s\n", sp_last_error());
        return false;
    }
    return true;
}

bool cli_parse_kv_type(const char *text, sp_kv_type *out) {
    if (sp_kv_type_parse(text, out) != SP_OK) {
        fprintf(stderr, "spindle: error: --kv-type: %s\n", sp_last_error());
        return false;
    }
    return true;
}

bool cli_parse_int(const char *name, const char *text, long min, long max, long *out) {
    char *end;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (errno || end == text || *end != '\0' || v < min || v > max) {
        fprintf(stderr, "spindle: error: --%s: '%s' is not a whole number between %ld and %ld\n", name, text, min, max);
        return false;
    }
    *out = v;
    return true;
}

bool cli_parse_float(const char *name, const char *text, double min, double max, double *out) {
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    if (errno || end == text || *end != '\0' || !isfinite(v) || v < min || v > max) {
        fprintf(stderr, "spindle: error: --%s: '%s' is not a number between %g and %g\n", name, text, min, max);
        return false;
    }
    *out = v;
    return true;
}

sp_status cli_session_open(cli_session *s, const char *model_path, sp_device kind, int n_threads, sp_cpu_isa cpu_isa) {
    return cli_session_open_sized(s, model_path, kind, n_threads, cpu_isa, CLI_MAX_BATCH);
}

sp_status cli_session_open_sized(cli_session *s, const char *model_path, sp_device kind, int n_threads,
                                 sp_cpu_isa cpu_isa, int max_batch) {
    *s = (cli_session){0};
    s->block_size = CLI_BLOCK_SIZE;
    s->max_batch = max_batch > CLI_MAX_BATCH ? max_batch : CLI_MAX_BATCH;
    dev_options opts = {.kind = kind, .n_threads = n_threads, .cpu_isa = cpu_isa};
    sp_status st = dev_create(&opts, &s->dev);
    if (st != SP_OK) return st;
    model_options mopts = {.max_batch_tokens = s->max_batch};
    if ((st = model_load(model_path, s->dev, &mopts, &s->model)) != SP_OK) goto fail;
    const model_hparams *hp = model_get_hparams(s->model);
    s->logits = malloc(sizeof *s->logits * (size_t)hp->n_vocab);
    s->step_pos = malloc(sizeof *s->step_pos * (size_t)s->max_batch);
    s->step_seq = malloc(sizeof *s->step_seq * (size_t)s->max_batch);
    if (!s->logits || !s->step_pos || !s->step_seq) {
        st = sp_fail(SP_ERR_NOMEM, "out of memory");
        goto fail;
    }
    sp_log_info("model %s: %s, %d layers, width %d, vocab %d; device %s", model_path, hp->arch_name, hp->n_layers,
                hp->n_embd, hp->n_vocab, dev_name(s->dev));
    return SP_OK;
fail:
    cli_session_close(s);
    return st;
}

sp_status cli_session_reserve(cli_session *s, int n_ctx) {
    const model_hparams *hp = model_get_hparams(s->model);
    if (n_ctx <= 0) n_ctx = hp->n_ctx_train;
    if (s->kv) {
        dev_kv_destroy(s->dev, s->kv);
        s->kv = NULL;
    }
    free(s->block_table);
    s->block_size = CLI_BLOCK_SIZE;
    int n_blocks = (n_ctx + CLI_BLOCK_SIZE - 1) / CLI_BLOCK_SIZE;
    s->n_ctx = n_blocks * CLI_BLOCK_SIZE;
    s->block_table = malloc(sizeof *s->block_table * (size_t)n_blocks);
    if (!s->block_table) return sp_fail(SP_ERR_NOMEM, "out of memory");
    /* one sequence owns every block, in order */
    for (int b = 0; b < n_blocks; b++) s->block_table[b] = b;
    s->n_past = 0;
    return model_kv_create_typed(s->model, n_blocks, CLI_BLOCK_SIZE, s->kv_type, &s->kv);
}

sp_status cli_session_eval(cli_session *s, const int32_t *tokens, int n) {
    SP_ASSERT(s->kv != NULL); /* cli_session_reserve first */
    if (s->n_past + n > s->n_ctx)
        return sp_fail(SP_ERR_RANGE, "sequence of %d tokens exceeds the context of %d tokens", s->n_past + n, s->n_ctx);
    int32_t *pos = s->step_pos, *seq = s->step_seq;
    for (int done = 0; done < n;) {
        int chunk = n - done < s->max_batch ? n - done : s->max_batch;
        for (int i = 0; i < chunk; i++) {
            pos[i] = s->n_past + i;
            seq[i] = 0;
        }
        int32_t seq_len = s->n_past + chunk;
        int32_t last = chunk - 1;
        dev_step step = {
            .n_tokens = chunk,
            .tokens = tokens + done,
            .pos = pos,
            .seq = seq,
            .n_seqs = 1,
            .seq_len = &seq_len,
            .block_table = s->block_table,
            .max_blocks = s->n_ctx / s->block_size,
            .n_logits = done + chunk == n ? 1 : 0,
            .logit_rows = &last,
        };
        sp_status st = model_forward(s->model, s->kv, &step, s->logits);
        if (st != SP_OK) return st;
        s->n_past += chunk;
        done += chunk;
    }
    return SP_OK;
}

void cli_session_reset(cli_session *s) {
    s->n_past = 0;
}

void cli_session_close(cli_session *s) {
    if (s->kv) dev_kv_destroy(s->dev, s->kv);
    model_destroy(s->model);
    dev_destroy(s->dev);
    free(s->block_table);
    free(s->logits);
    free(s->step_pos);
    free(s->step_seq);
    *s = (cli_session){0};
}
