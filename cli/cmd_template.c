/* cmd_template.c: `spindle template`: renders a chat template (a model's own, or a
 * .jinja file) with the variables of a JSON file, as Hugging Face's
 * apply_chat_template would, and prints exactly the rendered text on stdout: no
 * added newline, nothing else. Errors go to stderr: a template that fails to parse,
 * raises or fails at run time exits 1; bad usage or an unreadable input exits 2.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"
#include "template/template.h"
#include "cli/cli.h"

#define TEMPLATE_MAX_SOURCE_BYTES  (1u << 20)  /* a --template file */
#define TEMPLATE_MAX_CONTEXT_BYTES (64u << 20) /* the --context file */

static void template_usage(FILE *out) {
    fprintf(out, "usage: spindle template (--model PATH | --template FILE.jinja) --context FILE.json [options]\n"
                 "Renders a chat template with the variables of FILE.json (messages, tools,\n"
                 "add_generation_prompt, ...) and prints exactly the rendered text.\n"
                 "\n"
                 "  --model PATH        use the template and special tokens (bos_token, eos_token, ...) of\n"
                 "                      this GGUF model; values in FILE.json win over the model's\n"
                 "  --template FILE     use this Jinja file instead (at most 1 MiB)\n"
                 "  --context FILE      a JSON object with the template's variables\n"
                 "  --max-steps N       stop a render after N evaluation steps (default 10 million)\n");
}

typedef struct template_args {
    const char *model;
    const char *template_path;
    const char *context_path;
    long max_steps; /* 0: the engine's default */
} template_args;

/* Returns -1 when parsing succeeded, else the exit status. */
static int template_parse_args(int argc, char **argv, template_args *a) {
    enum { OPT_MAX_STEPS = 256 };
    static const struct option options[] = {
        {"model", required_argument, NULL, 'm'},   {"template", required_argument, NULL, 't'},
        {"context", required_argument, NULL, 'c'}, {"max-steps", required_argument, NULL, OPT_MAX_STEPS},
        {"help", no_argument, NULL, 'h'},          {0, 0, 0, 0},
    };
    *a = (template_args){0};
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "m:t:c:h", options, NULL)) != -1) {
        switch (c) {
        case 'm': a->model = optarg; break;
        case 't': a->template_path = optarg; break;
        case 'c': a->context_path = optarg; break;
        case OPT_MAX_STEPS:
            if (!cli_parse_int("max-steps", optarg, 1, __LONG_MAX__, &a->max_steps)) return 2;
            break;
        case 'h': template_usage(stdout); return 0;
        default: template_usage(stderr); return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "spindle: error: template: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    const char *problem = NULL;
    if (a->model && a->template_path)
        problem = "give --model or --template, not both";
    else if (!a->model && !a->template_path)
        problem = "--model or --template is required";
    else if (!a->context_path)
        problem = "--context is required";
    if (problem) {
        fprintf(stderr, "spindle: error: template: %s\n", problem);
        template_usage(stderr);
        return 2;
    }
    return -1;
}

/* Reads all of path (at most max bytes) into *out (caller owns; free with free();
 * NUL-terminated, *len bytes). */
static sp_status template_read_file(const char *path, size_t max, char **out, size_t *len) {
    FILE *fp = fopen(path, "rb");
    if (!fp) return sp_fail(SP_ERR_IO, "%s: %s", path, strerror(errno));
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap + 1);
    sp_status st = SP_OK;
    if (!buf) {
        st = sp_fail(SP_ERR_NOMEM, "%s: out of memory", path);
        goto fail;
    }
    for (;;) {
        if (n == cap) {
            if (cap > max) {
                st = sp_fail(SP_ERR_RANGE, "%s: larger than the limit of %zu bytes", path, max);
                goto fail;
            }
            char *grown = realloc(buf, 2 * cap + 1);
            if (!grown) {
                st = sp_fail(SP_ERR_NOMEM, "%s: out of memory", path);
                goto fail;
            }
            buf = grown;
            cap *= 2;
        }
        size_t got = fread(buf + n, 1, cap - n, fp);
        n += got;
        if (got == 0) break;
    }
    if (ferror(fp)) {
        st = sp_fail(SP_ERR_IO, "%s: read error: %s", path, strerror(errno));
        goto fail;
    }
    if (n > max) {
        st = sp_fail(SP_ERR_RANGE, "%s: %zu bytes is over the limit of %zu bytes", path, n, max);
        goto fail;
    }
    fclose(fp);
    buf[n] = '\0';
    *out = buf;
    *len = n;
    return SP_OK;
fail:
    free(buf);
    fclose(fp);
    return st;
}

/* Loads the --context file, which must hold one JSON object. Caller owns *out
 * (json_decref). */
static sp_status template_load_context(const char *path, json_t **out) {
    char *text;
    size_t len;
    sp_status st = template_read_file(path, TEMPLATE_MAX_CONTEXT_BYTES, &text, &len);
    if (st != SP_OK) return st;
    json_error_t err;
    json_t *context = json_loadb(text, len, JSON_DECODE_ANY, &err);
    free(text);
    if (!context) {
        return sp_fail(SP_ERR_FORMAT, "%s: not valid JSON: line %d, column %d: %s", path, err.line, err.column,
                       err.text);
    }
    if (!json_is_object(context)) {
        static const char *const type_names[] = {"an object", "an array", "a string", "an integer",
                                                 "a real",    "true",     "false",    "null"};
        int type = json_typeof(context);
        json_decref(context);
        return sp_fail(SP_ERR_FORMAT, "%s: the context must be a JSON object, not %s", path,
                       type >= 0 && type < 8 ? type_names[type] : "something else");
    }
    *out = context;
    return SP_OK;
}

/* A failed parse or render: the template's fault (or its limits), a runtime failure. */
static void template_fail(const char *name, const char *message) {
    fprintf(stderr, "spindle: error: %s: %s\n", name, message);
}

int cmd_template(int argc, char **argv) {
    template_args a;
    int rc = template_parse_args(argc, argv, &a);
    if (rc >= 0) return rc;

    json_t *context = NULL;
    gguf_file *model = NULL;
    char *source = NULL, *rendered = NULL;
    size_t source_len = 0, rendered_len = 0;
    tmpl *t = NULL;
    char name[1024]; /* the template's origin, for messages */
    sp_status st;
    rc = 2;

    if ((st = template_load_context(a.context_path, &context)) != SP_OK) goto fail_usage;
    if (a.model) {
        snprintf(name, sizeof name, "%s: tokenizer.chat_template", a.model);
        if ((st = gguf_open(a.model, &model)) != SP_OK ||
            (st = tmpl_source_from_gguf(model, &source, &source_len)) != SP_OK ||
            (st = tmpl_context_add_special_tokens(model, context)) != SP_OK)
            goto fail_usage;
    } else {
        snprintf(name, sizeof name, "%s", a.template_path);
        st = template_read_file(a.template_path, TEMPLATE_MAX_SOURCE_BYTES, &source, &source_len);
        if (st != SP_OK) goto fail_usage;
    }

    rc = 1;
    if ((st = tmpl_parse(source, source_len, &t)) != SP_OK) {
        template_fail(name, sp_last_error());
        goto done;
    }
    tmpl_limits limits = {.max_steps = (size_t)a.max_steps};
    if ((st = tmpl_render(t, context, &limits, &rendered, &rendered_len)) != SP_OK) {
        template_fail(name, sp_last_error());
        goto done;
    }
    if (fwrite(rendered, 1, rendered_len, stdout) != rendered_len || fflush(stdout) != 0) {
        fprintf(stderr, "spindle: error: writing the rendered text: %s\n", strerror(errno));
        goto done;
    }
    rc = 0;
    goto done;

fail_usage:
    fprintf(stderr, "spindle: error: %s\n", sp_last_error());
done:
    free(rendered);
    if (t) tmpl_destroy(t);
    free(source);
    if (model) gguf_close(model);
    json_decref(context);
    return rc;
}
