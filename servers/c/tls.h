/* tls: HTTPS for the blocking models (prefix tl_). One server-wide context made from
 * --tls-cert and --tls-key (TLS 1.3 only, session tickets on); sv_serve_blocking runs each
 * accepted connection's handshake, reads and writes through it when it is set. */
#ifndef PERFCTL_TLS_H
#define PERFCTL_TLS_H

#include <stddef.h>
#include <sys/types.h>

struct tl_conn; /* one connection's TLS state (an OpenSSL SSL) */

/* Loads the certificate chain and key (PEM). 0, or -1 with a message in err. Call once,
 * before any connection is served. */
int tl_init(const char *cert, const char *key, char *err, size_t errcap);
/* 1 when tl_init succeeded: connections are served over TLS. */
int tl_enabled(void);
/* The server side of the handshake on the connected blocking socket fd (its receive and send
 * timeouts bound it); NULL when it fails (not TLS, a bad client, a timeout). */
struct tl_conn *tl_accept(int fd);
/* Like recv(2): bytes read, 0 at the peer's close, -1 on an error or a timeout. */
ssize_t tl_read(struct tl_conn *t, char *buf, size_t cap);
/* Sends a + b completely: 0, or -1. */
int tl_write_all(struct tl_conn *t, const char *a, size_t an, const char *b, size_t bn);
/* Frees the connection's TLS state (the caller closes fd). NULL is allowed. */
void tl_free(struct tl_conn *t);

#endif
