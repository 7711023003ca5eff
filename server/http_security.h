/* http_security.h (internal to server/): the libmicrohttpd daemon options that the
 * security settings add: TLS from two PEM files (libmicrohttpd with GnuTLS) and the
 * per-connection memory limit that bounds the request line and headers.
 * Used once, by srv_http_start on the main thread. */
#ifndef SP_SERVER_HTTP_SECURITY_H
#define SP_SERVER_HTTP_SECURITY_H

#include <microhttpd.h>

#include "common/status.h"
#include "server/http.h"

typedef struct srv_http_security {
    char *tls_cert, *tls_key;         /* the PEM texts (owned; the key wiped on free) */
    struct MHD_OptionItem options[4]; /* an MHD_OPTION_ARRAY, MHD_OPTION_END-terminated */
} srv_http_security;

/* Fills sec->options from cfg and adds to *flags: TLS when both PEM files are set
 * (one without the other, an unreadable file or a non-PEM file is an error naming
 * the flag and path), and libmicrohttpd's per-connection memory limit when
 * max_header_bytes is set (a request line or headers that do not fit get
 * libmicrohttpd's own answer: 414 for the request line, 431 for the headers).
 * Free with srv_http_security_free, also after a failure. */
sp_status srv_http_security_init(const srv_http_config *cfg, srv_http_security *sec, unsigned *flags);
void srv_http_security_free(srv_http_security *sec);

#endif
