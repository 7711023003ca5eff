/* cfg_yaml.c: reads a YAML config file (libyaml's event parser) into cfg_settings.
 * The file is one mapping of key: value; a value is a scalar, or a list of scalars for
 * the list keys. Everything else (nested mappings, aliases, several documents, keys
 * given twice) is an error naming the file, the line and the key, and the first error
 * ends the read. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "config/cfg_internal.h"

/* Largest config file read. */
#define CFG_FILE_MAX (1 << 20)

typedef struct yaml_reader {
    yaml_parser_t parser;
    yaml_event_t event; /* the current event (reader_next frees the one before) */
    bool have_event;
    const char *name; /* the file, for messages */
} yaml_reader;

static int event_line(const yaml_event_t *e) {
    return (int)e->start_mark.line + 1;
}

static sp_status reader_next(yaml_reader *r) {
    if (r->have_event) yaml_event_delete(&r->event);
    r->have_event = false;
    if (!yaml_parser_parse(&r->parser, &r->event)) {
        const char *problem = r->parser.problem ? r->parser.problem : "malformed YAML";
        if (r->parser.context)
            return sp_fail(SP_ERR_INVALID_ARG, "%s:%d: %s %s", r->name, (int)r->parser.problem_mark.line + 1, problem,
                           r->parser.context);
        return sp_fail(SP_ERR_INVALID_ARG, "%s:%d: %s", r->name, (int)r->parser.problem_mark.line + 1, problem);
    }
    r->have_event = true;
    return SP_OK;
}

/* What an event that is not a scalar is, for "got a list". */
static const char *event_kind(yaml_event_type_t t) {
    switch (t) {
    case YAML_SEQUENCE_START_EVENT: return "a list";
    case YAML_MAPPING_START_EVENT: return "a mapping";
    case YAML_ALIAS_EVENT: return "an alias (*name; anchors and aliases are not supported)";
    default: return "something else";
    }
}

static bool scalar_is_null(const yaml_event_t *e) {
    if (e->data.scalar.style != YAML_PLAIN_SCALAR_STYLE) return false;
    const char *v = (const char *)e->data.scalar.value;
    return !v[0] || strcmp(v, "~") == 0 || strcmp(v, "null") == 0 || strcmp(v, "Null") == 0 || strcmp(v, "NULL") == 0;
}

static bool scalar_is_quoted(const yaml_event_t *e) {
    return e->data.scalar.style == YAML_SINGLE_QUOTED_SCALAR_STYLE ||
           e->data.scalar.style == YAML_DOUBLE_QUOTED_SCALAR_STYLE;
}

/* Sets k from the current scalar event. */
static sp_status read_scalar(yaml_reader *r, cfg_settings *s, const cfg_key *k) {
    const yaml_event_t *e = &r->event;
    if (memchr(e->data.scalar.value, '\0', e->data.scalar.length))
        return sp_fail(SP_ERR_INVALID_ARG, "%s:%d: key '%s': a value may not contain a NUL character", r->name,
                       event_line(e), k->name);
    sp_status st = cfg__set_scalar(s, k, (const char *)e->data.scalar.value, scalar_is_null(e), scalar_is_quoted(e));
    if (st != SP_OK) return sp_fail_prefix(st, "%s:%d: key '%s'", r->name, event_line(e), k->name);
    return SP_OK;
}

/* The current event starts k's value. */
static sp_status read_value(yaml_reader *r, cfg_settings *s, const cfg_key *k) {
    char want[128];
    sp_status st;
    yaml_event_type_t t = r->event.type;
    if (t == YAML_SCALAR_EVENT) {
        if (k->type != CFG_T_LIST) return read_scalar(r, s, k);
        if (scalar_is_null(&r->event)) { /* `api_keys:` with nothing: an empty list */
            cfg__list_clear(s, k);
            return SP_OK;
        }
        char got[256];
        return sp_fail(SP_ERR_INVALID_ARG, "%s:%d: key '%s': expected %s, got the single value '%s' (write [\"%s\"])",
                       r->name, event_line(&r->event), k->name, cfg__expected(k, want, sizeof want),
                       cfg__quote((const char *)r->event.data.scalar.value, got, sizeof got),
                       cfg__quote((const char *)r->event.data.scalar.value, got, sizeof got));
    }
    if (t != YAML_SEQUENCE_START_EVENT || k->type != CFG_T_LIST)
        return sp_fail(SP_ERR_INVALID_ARG, "%s:%d: key '%s': expected %s, got %s", r->name, event_line(&r->event),
                       k->name, cfg__expected(k, want, sizeof want), event_kind(t));
    cfg__list_clear(s, k);
    for (;;) {
        if ((st = reader_next(r)) != SP_OK) return st;
        if (r->event.type == YAML_SEQUENCE_END_EVENT) return SP_OK;
        if (r->event.type != YAML_SCALAR_EVENT)
            return sp_fail(SP_ERR_INVALID_ARG, "%s:%d: key '%s': expected %s, got %s as an item", r->name,
                           event_line(&r->event), k->name, cfg__expected(k, want, sizeof want),
                           event_kind(r->event.type));
        if (scalar_is_null(&r->event))
            return sp_fail(SP_ERR_INVALID_ARG, "%s:%d: key '%s': an item of the list is empty", r->name,
                           event_line(&r->event), k->name);
        if ((st = read_scalar(r, s, k)) != SP_OK) return st;
    }
}

/* The key meant by a flag's spelling (max-batch-size, api-key, api_key); NULL if none. */
static const cfg_key *key_near(const char *text) {
    char want[64];
    for (int i = 0; i < CFG_KEY_COUNT; i++) {
        const cfg_key *k = &cfg__keys[i];
        snprintf(want, sizeof want, "%s", k->flag);
        for (char *p = want; *p; p++)
            if (*p == '-') *p = '_';
        size_t n = strlen(want);
        if (strlen(text) != n) continue;
        bool same = true;
        for (size_t j = 0; j < n && same; j++) same = (text[j] == '-' ? '_' : text[j]) == want[j];
        if (same) return k;
    }
    return NULL;
}

/* The current event is MAPPING_START: reads key: value pairs up to MAPPING_END. */
static sp_status read_mapping(yaml_reader *r, cfg_settings *s) {
    int first_line[CFG_KEY_COUNT] = {0};
    sp_status st;
    for (;;) {
        if ((st = reader_next(r)) != SP_OK) return st;
        if (r->event.type == YAML_MAPPING_END_EVENT) return SP_OK;
        int line = event_line(&r->event);
        if (r->event.type != YAML_SCALAR_EVENT)
            return sp_fail(SP_ERR_INVALID_ARG, "%s:%d: a key must be a setting's name, got %s", r->name, line,
                           event_kind(r->event.type));
        char shown[256];
        const char *text = (const char *)r->event.data.scalar.value;
        cfg__quote(text, shown, sizeof shown);
        const cfg_key *k = memchr(text, '\0', r->event.data.scalar.length) ? NULL : cfg__key_find(text);
        /* the name's spelling before it became a list: one name, still read as before */
        bool single = strcmp(text, "served_model_name") == 0;
        if (single) k = cfg__key_find("served_model_names");
        if (!k || (strcmp(k->name, text) != 0 && !single)) {
            const cfg_key *near = key_near(text);
            if (near)
                return sp_fail(SP_ERR_INVALID_ARG, "%s:%d: unknown key '%s' (the key is '%s')", r->name, line, shown,
                               near->name);
            return sp_fail(SP_ERR_INVALID_ARG, "%s:%d: unknown key '%s' (see docs/configuration.md)", r->name, line,
                           shown);
        }
        int i = cfg__key_index(k);
        if (first_line[i])
            return sp_fail(SP_ERR_INVALID_ARG, "%s:%d: key '%s': given twice (first on line %d)", r->name, line,
                           k->name, first_line[i]);
        first_line[i] = line;
        if ((st = reader_next(r)) != SP_OK) return st;
        if (single && r->event.type == YAML_SCALAR_EVENT && !scalar_is_null(&r->event)) {
            cfg__list_clear(s, k);
            st = read_scalar(r, s, k);
        } else {
            st = read_value(r, s, k);
        }
        if (st != SP_OK) return st;
        s->_line[i] = line;
    }
}

sp_status cfg_load_yaml(cfg_settings *s, const char *name, const char *text, size_t len) {
    yaml_reader r = {.name = name};
    if (!yaml_parser_initialize(&r.parser)) return sp_fail(SP_ERR_NOMEM, "%s: out of memory", name);
    yaml_parser_set_input_string(&r.parser, (const unsigned char *)text, len);
    char *file = strdup(name);
    free(s->_file);
    s->_file = file;
    int documents = 0;
    sp_status st = reader_next(&r); /* STREAM_START */
    while (st == SP_OK && (st = reader_next(&r)) == SP_OK && r.event.type != YAML_STREAM_END_EVENT) {
        int line = event_line(&r.event);
        if (r.event.type == YAML_DOCUMENT_END_EVENT) continue;
        if (r.event.type != YAML_DOCUMENT_START_EVENT) { /* libyaml gives nothing else here */
            st = sp_fail(SP_ERR_INVALID_ARG, "%s:%d: unexpected YAML", name, line);
            break;
        }
        if (++documents > 1) {
            st = sp_fail(SP_ERR_INVALID_ARG, "%s:%d: a second YAML document (the file holds one mapping)", name, line);
            break;
        }
        if ((st = reader_next(&r)) != SP_OK) break;
        line = event_line(&r.event);
        if (r.event.type == YAML_MAPPING_START_EVENT)
            st = read_mapping(&r, s);
        else if (r.event.type == YAML_SCALAR_EVENT && scalar_is_null(&r.event))
            ; /* an empty document: no settings */
        else if (r.event.type == YAML_SCALAR_EVENT)
            st = sp_fail(SP_ERR_INVALID_ARG, "%s:%d: the file must be a mapping of settings (key: value), got a value",
                         name, line);
        else
            st = sp_fail(SP_ERR_INVALID_ARG, "%s:%d: the file must be a mapping of settings (key: value), got %s", name,
                         line, event_kind(r.event.type));
    }
    if (r.have_event) yaml_event_delete(&r.event);
    yaml_parser_delete(&r.parser);
    if (st == SP_OK && !file) return sp_fail(SP_ERR_NOMEM, "%s: out of memory", name);
    return st;
}

sp_status cfg_load_file(cfg_settings *s, const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return sp_fail(SP_ERR_IO, "%s: cannot read the config file: %s", path, strerror(errno));
    char *text = malloc(CFG_FILE_MAX + 1);
    if (!text) {
        fclose(f);
        return sp_fail(SP_ERR_NOMEM, "%s: out of memory", path);
    }
    size_t len = fread(text, 1, CFG_FILE_MAX + 1, f);
    bool failed = ferror(f);
    fclose(f);
    sp_status st;
    if (failed)
        st = sp_fail(SP_ERR_IO, "%s: cannot read the config file", path);
    else if (len > CFG_FILE_MAX)
        st = sp_fail(SP_ERR_INVALID_ARG, "%s: larger than %d bytes: not a config file", path, CFG_FILE_MAX);
    else
        st = cfg_load_yaml(s, path, text, len);
    free(text);
    return st;
}
