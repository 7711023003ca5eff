/* cli.h: the command-line tools: the subcommands of the spindle binary (main.c
 * dispatches to them) and what they share (cli_session.c). Each subcommand takes its
 * own argv (argv[0] is the subcommand's name) and returns the process exit status:
 * 0 success, 1 a runtime failure, 2 bad usage or a bad model file. */
#ifndef SP_CLI_H
#define SP_CLI_H

#include <stdbool.h>
#include <stdint.h>

#include "common/status.h"
#include "config/cfg.h"
#include "gpu/device.h"
#include "model/model.h"

int cmd_serve(int argc, char **argv);
int cmd_generate(int argc, char **argv);
int cmd_inspect(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_template(int argc, char **argv);
int cmd_quantize(int argc, char **argv);

/* The model used when --model is not given: the one config/ defaults to. */
#define CMD_DEFAULT_MODEL CFG_DEFAULT_MODEL

/* ---- shared by the subcommands (cli_session.c) ---- */

/* Exit status for a failed status: 2 for problems with the input (usage, model file,
 * unsupported format), 1 for everything else. */
int cmd_exit_status(int status);

/* Parses --cpu-isa's value and checks that this CPU runs the set; on failure prints
 * "spindle: error: --cpu-isa ..." naming what is wrong and returns false. */
bool cli_parse_cpu_isa(const char *text, sp_cpu_isa *out);
/* Parses --kv-type's value (f16, q8_0, q4_0); on failure prints "spindle: error:
 * --kv-type ..." naming what is wrong and returns false. */
bool cli_parse_kv_type(const char *text, sp_kv_type *out);

/* Parses a whole decimal number for flag `name` within [min, max]; on failure prints
 * "spindle: error: --name: ..." and returns false. */
bool cli_parse_int(const char *name, const char *text, long min, long max, long *out);
bool cli_parse_float(const char *name, const char *text, double min, double max, double *out);

/* One model on the CPU with one sequence's KV cache: what generate and bench drive.
 * Owned by the main thread. */
typedef struct cli_session {
    dev_backend *dev;
    model *model;
    dev_kv *kv;
    int block_size;       /* tokens per KV block; set by cli_session_open */
    int max_batch;        /* largest forward step in tokens (the model's max_batch_tokens) */
    int n_ctx;            /* tokens the KV cache holds */
    sp_kv_type kv_type;   /* element format of the KV cache (F16 unless set before reserve) */
    int32_t *block_table; /* (n_ctx / block_size) */
    int32_t n_past;       /* tokens already in the cache */
    float *logits;        /* (V) logits after the last eval */
    int32_t *step_pos;    /* (max_batch) positions of one step */
    int32_t *step_seq;    /* (max_batch) sequence index of one step's tokens (all 0) */
} cli_session;

/* Loads model_path on a CPU backend with n_threads (<= 0: all cores), for forward
 * steps of up to 512 tokens. */
sp_status cli_session_open(cli_session *s, const char *model_path, sp_device kind, int n_threads, sp_cpu_isa cpu_isa);
/* The same, for forward steps of up to max_batch tokens (<= 512: 512). */
sp_status cli_session_open_sized(cli_session *s, const char *model_path, sp_device kind, int n_threads,
                                 sp_cpu_isa cpu_isa, int max_batch);
/* Creates the KV cache for n_ctx tokens (<= 0: the model's training context), in the
 * format s->kv_type. */
sp_status cli_session_reserve(cli_session *s, int n_ctx);
/* Appends n tokens at the end of the sequence, in chunks of at most max_batch_tokens,
 * and leaves the logits of the last token in s->logits. */
sp_status cli_session_eval(cli_session *s, const int32_t *tokens, int n);
/* Forgets the sequence (the cache is reused from position 0). */
void cli_session_reset(cli_session *s);
void cli_session_close(cli_session *s);

#endif
