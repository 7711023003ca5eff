/* http_security.c: TLS and the header limit as libmicrohttpd daemon options
 * (declared in http_internal.h). */
#include "server/http/http_internal.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { TLS_PEM_MAX_BYTES = 1 << 20 };

/* Reads the PEM file of flag `what` at path; caller owns *out (NUL-terminated). */
static sp_status tls_read_pem(const char *what, const char *path, char **out) {
    FILE *f = fopen(path, "rb");
    if (!f) return sp_fail(SP_ERR_IO, "%s %s: cannot read: %s", what, path, strerror(errno));
    char *text = malloc(TLS_PEM_MAX_BYTES + 1);
    size_t n = text ? fread(text, 1, TLS_PEM_MAX_BYTES + 1, f) : 0;
    bool failed = !text || ferror(f);
    fclose(f);
    sp_status st = SP_OK;
    if (!text)
        st = sp_fail(SP_ERR_NOMEM, "out of memory");
    else if (failed)
        st = sp_fail(SP_ERR_IO, "%s %s: cannot read: %s", what, path, strerror(errno));
    else if (n > TLS_PEM_MAX_BYTES)
        st = sp_fail(SP_ERR_FORMAT, "%s %s: larger than %d bytes: not a PEM file", what, path, TLS_PEM_MAX_BYTES);
    if (st == SP_OK) {
        text[n] = '\0';
        if (!strstr(text, "-----BEGIN ")) st = sp_fail(SP_ERR_FORMAT, "%s %s: not a PEM file", what, path);
    }
    if (st != SP_OK) {
        if (text) explicit_bzero(text, TLS_PEM_MAX_BYTES + 1);
        free(text);
        return st;
    }
    *out = text;
    return SP_OK;
}

/* Fills sec->options (an MHD_OPTION_ARRAY) and adds to *flags: TLS when both
 * PEM files are set, libmicrohttpd's per-connection memory limit when
 * max_header_bytes is set (about twice it: http.c refuses past max_header_bytes
 * itself; a request line or headers that do not fit even that get libmicrohttpd's
 * own answer: 414 for the request line, 431 for the headers). */
sp_status srv_http_security_init(const srv_http_config *cfg, srv_http_security *sec, unsigned *flags) {
    int n = 0;
    if (cfg->tls_cert_file || cfg->tls_key_file) {
        if (!cfg->tls_cert_file || !cfg->tls_key_file)
            return sp_fail(SP_ERR_INVALID_ARG, "TLS needs both --tls-cert and --tls-key (only %s is set)",
                           cfg->tls_cert_file ? "--tls-cert" : "--tls-key");
        if (MHD_is_feature_supported(MHD_FEATURE_TLS) != MHD_YES)
            return sp_fail(SP_ERR_UNSUPPORTED,
                           "--tls-cert: the installed libmicrohttpd was built without TLS (install the GnuTLS build)");
        sp_status st = tls_read_pem("--tls-cert", cfg->tls_cert_file, &sec->tls_cert);
        if (st == SP_OK) st = tls_read_pem("--tls-key", cfg->tls_key_file, &sec->tls_key);
        if (st != SP_OK) return st;
        *flags |= MHD_USE_TLS;
        sec->options[n++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_CERT, 0, sec->tls_cert};
        sec->options[n++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_KEY, 0, sec->tls_key};
    }
    if (cfg->max_header_bytes > 0) /* http.c refuses past max_header_bytes itself: room for that */
        sec->options[n++] = (struct MHD_OptionItem){
            MHD_OPTION_CONNECTION_MEMORY_LIMIT, (intptr_t)(2 * cfg->max_header_bytes + SRV_HEADER_POOL_SLACK), NULL};
    sec->options[n] = (struct MHD_OptionItem){MHD_OPTION_END, 0, NULL};
    return SP_OK;
}

void srv_http_security_free(srv_http_security *sec) {
    if (sec->tls_key) explicit_bzero(sec->tls_key, strlen(sec->tls_key));
    free(sec->tls_key);
    free(sec->tls_cert);
}
