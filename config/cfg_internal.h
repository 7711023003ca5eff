/* cfg_internal.h (internal to config/): the key table every layer goes through, and
 * the setters the YAML reader (cfg_yaml.c) and the flag parser (cfg_args.c) share. */
#ifndef SP_CONFIG_CFG_INTERNAL_H
#define SP_CONFIG_CFG_INTERNAL_H

#include "config/cfg.h"

typedef enum cfg_type {
    CFG_T_STRING, /* char * */
    CFG_T_INT,    /* int64_t in [min, max] */
    CFG_T_FLOAT,  /* double in [min, max] */
    CFG_T_BOOL,   /* bool; a flag without a value, and --no-<flag> */
    CFG_T_ENUM,   /* an enum, the index of one of choices */
    CFG_T_LIST    /* cfg_list of strings; the flag repeats */
} cfg_type;

/* One setting. */
typedef struct cfg_key {
    const char *name; /* YAML key: "max_batch_size" */
    const char *flag; /* flag without "--": "max-batch-size" ("api-key" for api_keys) */
    cfg_type type;
    size_t offset;              /* of the field in cfg_settings */
    double min, max;            /* CFG_T_INT, CFG_T_FLOAT */
    bool optional;              /* may be unset (null in YAML): strings NULL, numbers 0 */
    const char *const *choices; /* CFG_T_ENUM, NULL-terminated */
    const char *arg;            /* the flag's argument in --help: "N", "PATH" */
    const char *help;           /* one line for --help and the docs */
    const char *unset;          /* optional keys: what unset means, "(default: ...)" */
} cfg_key;

extern const cfg_key cfg__keys[CFG_KEY_COUNT];

/* The row for a YAML key or a flag name (either spelling); NULL when none. */
const cfg_key *cfg__key_find(const char *name);
int cfg__key_index(const cfg_key *k);

/* Sets k from a scalar: text as written, null when it is YAML's null (a plain ~,
 * null or nothing), quoted when it was a quoted YAML scalar (a string, so not a
 * number or a bool). A list key appends one item. SP_ERR_INVALID_ARG with "expected
 * ..., got '...'" (the caller adds where). */
sp_status cfg__set_scalar(cfg_settings *s, const cfg_key *k, const char *text, bool null, bool quoted);
/* Empties a list key (a YAML list or the command line replaces what was there). */
void cfg__list_clear(cfg_settings *s, const cfg_key *k);
/* What k expects, for messages: "an integer between 1 and 4096". */
const char *cfg__expected(const cfg_key *k, char *buf, size_t cap);
/* text quoted for a message, shortened and with control characters escaped. */
const char *cfg__quote(const char *text, char *buf, size_t cap);

#endif
