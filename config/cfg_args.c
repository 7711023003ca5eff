/* cfg_args.c: the command line of `spindle serve`. Every setting of the key table is a
 * long flag (--max-batch-size N; bools --access-log and --no-access-log; list keys
 * repeat), plus --config PATH, --print-config and --help. The file named by --config is
 * read first whatever its place on the line, so the flags always win. */
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config/cfg_internal.h"

enum {
    OPT_KEY = 256,                     /* + key index: the flag */
    OPT_NO_KEY = OPT_KEY + 128,        /* + key index: --no-<flag> of a bool */
    OPT_CONFIG = OPT_NO_KEY + 128,     /* --config PATH */
    OPT_PRINT_CONFIG = OPT_CONFIG + 1, /* --print-config */
};
_Static_assert(CFG_KEY_COUNT <= 128, "the option codes hold 128 keys");

/* Room for every flag, a --no- form of each, the three others and the terminator. */
typedef struct arg_table {
    struct option options[2 * CFG_KEY_COUNT + 4];
    char no_names[CFG_KEY_COUNT][64];
} arg_table;

static void arg_table_fill(arg_table *t) {
    int n = 0;
    for (int i = 0; i < CFG_KEY_COUNT; i++) {
        const cfg_key *k = &cfg__keys[i];
        bool is_bool = k->type == CFG_T_BOOL;
        t->options[n++] = (struct option){k->flag, is_bool ? no_argument : required_argument, NULL, OPT_KEY + i};
        if (is_bool) {
            snprintf(t->no_names[i], sizeof t->no_names[i], "no-%s", k->flag);
            t->options[n++] = (struct option){t->no_names[i], no_argument, NULL, OPT_NO_KEY + i};
        }
    }
    t->options[n++] = (struct option){"config", required_argument, NULL, OPT_CONFIG};
    t->options[n++] = (struct option){"print-config", no_argument, NULL, OPT_PRINT_CONFIG};
    t->options[n++] = (struct option){"help", no_argument, NULL, 'h'};
    t->options[n] = (struct option){0, 0, 0, 0};
}

/* -m is --model. */
static int short_to_code(int c) {
    return c == 'm' ? OPT_KEY + cfg__key_index(cfg__key_find("model")) : c;
}

sp_status cfg_parse_args(cfg_settings *s, int argc, char **argv, const char *default_path, cfg_action *action) {
    arg_table t;
    arg_table_fill(&t);
    *action = CFG_ACTION_RUN;
    /* pass 1: --config, --help and --print-config only */
    const char *path = NULL;
    int c;
    opterr = 0;
    optind = 0; /* 0: glibc starts over (argv may differ from the last call) */
    while ((c = getopt_long(argc, argv, ":m:h", t.options, NULL)) != -1) {
        if (c == OPT_CONFIG) path = optarg;
        if (c == 'h') {
            *action = CFG_ACTION_HELP;
            return SP_OK;
        }
        if (c == OPT_PRINT_CONFIG) *action = CFG_ACTION_PRINT_CONFIG;
    }
    if (!path && default_path && access(default_path, F_OK) == 0) path = default_path;
    sp_status st;
    if (path && (st = cfg_load_file(s, path)) != SP_OK) return st;
    /* pass 2: every flag over the file */
    optind = 0;
    while ((c = getopt_long(argc, argv, ":m:h", t.options, NULL)) != -1) {
        c = short_to_code(c);
        if (c == '?') {
            if (optopt) return sp_fail(SP_ERR_INVALID_ARG, "unknown option '-%c'", optopt);
            return sp_fail(SP_ERR_INVALID_ARG, "unknown option '%s'", argv[optind - 1]);
        }
        if (c == ':') return sp_fail(SP_ERR_INVALID_ARG, "%s: missing value", argv[optind - 1]);
        if (c >= OPT_KEY && c < OPT_KEY + CFG_KEY_COUNT) {
            const cfg_key *k = &cfg__keys[c - OPT_KEY];
            if ((st = cfg_set(s, k->flag, k->type == CFG_T_BOOL ? "true" : optarg)) != SP_OK) return st;
        } else if (c >= OPT_NO_KEY && c < OPT_NO_KEY + CFG_KEY_COUNT) {
            if ((st = cfg_set(s, cfg__keys[c - OPT_NO_KEY].flag, "false")) != SP_OK) return st;
        }
    }
    if (optind < argc) return sp_fail(SP_ERR_INVALID_ARG, "serve: unexpected argument '%s'", argv[optind]);
    return SP_OK;
}
