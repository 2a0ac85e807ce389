/* http_parse: a small, allocation-free HTTP/1.x request-head parser (prefix hp_). */
#ifndef PERFCTL_HTTP_PARSE_H
#define PERFCTL_HTTP_PARSE_H

#include <stddef.h>

struct hp_header {
	const char *name;
	size_t name_len;
	const char *value; /* leading and trailing SP/HTAB removed */
	size_t value_len;
};

struct hp_request {
	const char *method;
	size_t method_len;
	const char *target;
	size_t target_len;
	int major; /* "HTTP/<major>.<minor>", one digit each */
	int minor;
	struct hp_header *headers; /* caller's array */
	size_t num_headers;        /* in: capacity of headers, out: headers found */
};

/*
 * hp_parse_request parses the request line and header fields at buf[0..len) and returns the
 * number of bytes consumed through the blank line that ends them, -2 if the bytes are an
 * incomplete prefix of a well-formed head, or -1 if they are malformed (or there are more
 * header fields than req->num_headers).
 *
 * Lines may end in CRLF or a bare LF; empty lines before the request line are skipped.
 * Pointers in *req point into buf; *req is only meaningful when the result is >= 0.
 */
int hp_parse_request(const char *buf, size_t len, struct hp_request *req);

/* Case-insensitive comparison of a counted string with a NUL-terminated lower-case literal. */
int hp_token_eq(const char *s, size_t n, const char *lower);

#endif
