/* openai_fields.c: reading a request body's fields by type, the way OpenAI's API
 * checks them: a known field of the wrong type or out of range is a 400 whose param
 * names the field and whose message says what was expected and what came
 * ("Invalid type for 'n': expected an integer, but got a string instead."), and null
 * means "not given" because SDKs send null for unset fields. The JSON text helpers
 * every encoder here uses (strings that may hold any bytes) are json_text.c's.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/api/api_internal.h"

const char *srv__json_kind(const json_t *v) {
    if (!v) return "nothing (it is missing)";
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a number";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    default: return "null";
    }
}

/* ---- typed fields ---- */

json_t *srv__field(const json_t *obj, const char *key) {
    json_t *v = json_object_get(obj, key);
    return json_is_null(v) ? NULL : v;
}

sp_status srv__type_error(srv_error *err, const char *param, const char *expected, const json_t *got) {
    return srv__fail(err, SRV_ERROR_BAD_REQUEST, param, "Invalid type for '%s': expected %s, but got %s instead.",
                     param, expected, srv__json_kind(got));
}

/* Writes v the short way that reads back as the same double ("0.7", not "0.69999999999999996"). */
static void srv_format_number(double v, char *buf, size_t cap) {
    snprintf(buf, cap, "%.15g", v);
    if (strtod(buf, NULL) != v) snprintf(buf, cap, "%.17g", v);
}

static sp_status srv_range_error(srv_error *err, const char *param, bool below, bool open, double bound, double got) {
    char b[32], g[32];
    srv_format_number(bound, b, sizeof b);
    srv_format_number(got, g, sizeof g);
    return srv__fail(err, SRV_ERROR_BAD_REQUEST, param,
                     "Invalid '%s': number %s %s value. Expected a value %s %s, but got %s instead.", param,
                     below ? "below" : "above", below ? "minimum" : "maximum",
                     below ? (open ? ">" : ">=") : (open ? "<" : "<="), b, g);
}

static sp_status srv_int_range_error(srv_error *err, const char *param, bool below, int64_t lo, int64_t hi,
                                     const json_t *got) {
    char g[32];
    if (json_is_integer(got)) {
        snprintf(g, sizeof g, "%lld", (long long)json_integer_value(got));
    } else {
        srv_format_number(json_number_value(got), g, sizeof g);
    }
    return srv__fail(err, SRV_ERROR_BAD_REQUEST, param,
                     "Invalid '%s': integer %s value. Expected a value %s %lld, but got %s instead.", param,
                     below ? "below minimum" : "above maximum", below ? ">=" : "<=", (long long)(below ? lo : hi), g);
}

sp_status srv__want_int(const json_t *v, const char *param, int64_t lo, int64_t hi, int64_t *out, srv_error *err) {
    int64_t x;
    if (json_is_integer(v)) {
        x = json_integer_value(v);
    } else if (json_is_real(v)) {
        /* 3.0 is an integer to Python's JSON-schema checks (pydantic's lax mode) too */
        double d = json_real_value(v);
        if (!isfinite(d) || d != floor(d)) return srv__type_error(err, param, "an integer", v);
        if (d < -0x1p63 || d >= 0x1p63) return srv_int_range_error(err, param, d < 0, lo, hi, v);
        x = (int64_t)d;
    } else {
        return srv__type_error(err, param, "an integer", v);
    }
    if (x < lo || x > hi) return srv_int_range_error(err, param, x < lo, lo, hi, v);
    *out = x;
    return SP_OK;
}

sp_status srv__read_bool(const json_t *obj, const char *key, bool *out, bool *given, srv_error *err) {
    json_t *v = srv__field(obj, key);
    if (given) *given = v != NULL;
    if (!v) return SP_OK;
    if (!json_is_boolean(v)) return srv__type_error(err, key, "a boolean", v);
    *out = json_is_true(v);
    return SP_OK;
}

sp_status srv__read_int(const json_t *obj, const char *key, int64_t lo, int64_t hi, int64_t *out, bool *given,
                        srv_error *err) {
    json_t *v = srv__field(obj, key);
    if (given) *given = v != NULL;
    if (!v) return SP_OK;
    return srv__want_int(v, key, lo, hi, out, err);
}

sp_status srv__read_number(const json_t *obj, const char *key, srv__range range, double *out, bool *given,
                           srv_error *err) {
    json_t *v = srv__field(obj, key);
    if (given) *given = v != NULL;
    if (!v) return SP_OK;
    if (!json_is_number(v)) return srv__type_error(err, key, "a number", v);
    double d = json_number_value(v);
    if (!isfinite(d)) return srv__type_error(err, key, "a finite number", v);
    if (d < range.lo || (range.lo_open && d == range.lo))
        return srv_range_error(err, key, true, range.lo_open, range.lo, d);
    if (d > range.hi || (range.hi_open && d == range.hi))
        return srv_range_error(err, key, false, range.hi_open, range.hi, d);
    *out = d;
    return SP_OK;
}

sp_status srv__read_string(const json_t *obj, const char *key, const char **out, size_t *len, bool *given,
                           srv_error *err) {
    json_t *v = srv__field(obj, key);
    if (given) *given = v != NULL;
    if (!v) return SP_OK;
    if (!json_is_string(v)) return srv__type_error(err, key, "a string", v);
    *out = json_string_value(v);
    *len = json_string_length(v);
    return SP_OK;
}

/* ---- the body and the model ---- */

sp_status srv__parse_body(const char *body, size_t len, json_t **out, srv_error *err) {
    json_error_t jerr;
    /* JSON_ALLOW_NUL: "\u0000" is valid JSON, and prompts may hold it; every reader
     * here uses json_string_length. */
    json_t *root = json_loadb(body ? body : "", body ? len : 0, JSON_DECODE_ANY | JSON_ALLOW_NUL, &jerr);
    if (!root) {
        return srv__fail(err, SRV_ERROR_BAD_REQUEST, NULL,
                         "We could not parse the JSON body of your request: line %d, column %d: %s", jerr.line,
                         jerr.column, jerr.text);
    }
    if (!json_is_object(root)) {
        sp_status st = srv__fail(err, SRV_ERROR_BAD_REQUEST, NULL,
                                 "The request body must be a JSON object, but got %s instead.", srv__json_kind(root));
        json_decref(root);
        return st;
    }
    *out = root;
    return SP_OK;
}

static bool srv_name_is(const char *name, size_t len, const char *want) {
    return want && strlen(want) == len && memcmp(name, want, len) == 0;
}

bool srv_model_name_known(const srv_model_info *mi, const char *name, size_t len) {
    if (srv_name_is(name, len, mi->served_name) || srv_name_is(name, len, mi->file_name)) return true;
    for (int i = 0; i < mi->n_aliases; i++)
        if (srv_name_is(name, len, mi->aliases[i])) return true;
    return false;
}

sp_status srv__model_not_found(const srv_model_info *mi, const char *name, size_t len, const char *param,
                               srv_error *err) {
    char names[512];
    size_t o = (size_t)snprintf(names, sizeof names, "`%s`", mi->served_name ? mi->served_name : "");
    for (int i = 0; i < mi->n_aliases && o < sizeof names; i++)
        o += (size_t)snprintf(names + o, sizeof names - o, ", `%s`", mi->aliases[i]);
    return srv__fail(err, SRV_ERROR_MODEL_NOT_FOUND, param, "The model `%.*s` does not exist; this server serves %s.",
                     len > 200 ? 200 : (int)len, name, names);
}

sp_status srv__check_model(const json_t *body, const srv_model_info *mi, srv_error *err) {
    const char *name = NULL;
    size_t len = 0;
    bool given = false;
    sp_status st = srv__read_string(body, "model", &name, &len, &given, err);
    if (st != SP_OK || !given) return st;
    if (srv_model_name_known(mi, name, len)) return SP_OK;
    return srv__model_not_found(mi, name, len, "model", err);
}
