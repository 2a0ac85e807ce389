/* tls: HTTPS for the blocking models, with OpenSSL (see tls.h). */
#include "tls.h"

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <stdio.h>
#include <string.h>

#define TL_COALESCE 16384 /* head and body up to this size go out in one TLS record */

static SSL_CTX *tl_ctx;

int tl_init(const char *cert, const char *key, char *err, size_t errcap)
{
	SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
	if (!ctx) {
		snprintf(err, errcap, "--tls-cert: cannot make a TLS context");
		return -1;
	}
	SSL_CTX_set_min_proto_version(ctx, TLS1_3_VERSION);
	SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_SERVER);
	if (SSL_CTX_use_certificate_chain_file(ctx, cert) != 1 ||
	    SSL_CTX_use_PrivateKey_file(ctx, key, SSL_FILETYPE_PEM) != 1 ||
	    SSL_CTX_check_private_key(ctx) != 1) {
		char msg[256];
		ERR_error_string_n(ERR_get_error(), msg, sizeof msg);
		snprintf(err, errcap, "--tls-cert/--tls-key: %s", msg);
		SSL_CTX_free(ctx);
		return -1;
	}
	tl_ctx = ctx;
	return 0;
}

int tl_enabled(void) { return tl_ctx != NULL; }

struct tl_conn *tl_accept(int fd)
{
	SSL *s = SSL_new(tl_ctx);
	if (!s)
		return NULL;
	if (SSL_set_fd(s, fd) != 1 || SSL_accept(s) != 1) {
		ERR_clear_error();
		SSL_free(s);
		return NULL;
	}
	return (struct tl_conn *)s;
}

ssize_t tl_read(struct tl_conn *t, char *buf, size_t cap)
{
	size_t n = 0;
	int rc = SSL_read_ex((SSL *)t, buf, cap, &n);
	if (rc == 1)
		return (ssize_t)n;
	rc = SSL_get_error((SSL *)t, rc);
	ERR_clear_error();
	return rc == SSL_ERROR_ZERO_RETURN ? 0 : -1;
}

static int tl_write(SSL *s, const char *p, size_t n)
{
	size_t w;
	while (n > 0) {
		if (SSL_write_ex(s, p, n, &w) != 1) {
			ERR_clear_error();
			return -1;
		}
		p += w;
		n -= w;
	}
	return 0;
}

int tl_write_all(struct tl_conn *t, const char *a, size_t an, const char *b, size_t bn)
{
	char buf[TL_COALESCE];
	if (an + bn <= sizeof buf) { /* one record, one segment: as the plain path's sendmsg */
		memcpy(buf, a, an);
		if (bn)
			memcpy(buf + an, b, bn);
		return tl_write((SSL *)t, buf, an + bn);
	}
	if (tl_write((SSL *)t, a, an) != 0)
		return -1;
	return tl_write((SSL *)t, b, bn);
}

void tl_free(struct tl_conn *t)
{
	if (t)
		SSL_free((SSL *)t);
}
