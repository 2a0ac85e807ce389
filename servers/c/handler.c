/* handler: see handler.h. No allocation on the request path: bodies live in hd_resp.small,
 * in string literals, or in one shared read-only buffer of 16 MiB of 'x'. */
#include "handler.h"

#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "db.h"
#include "registry.h"
#include "search.h"
#include "stats.h"
#include "url.h"
#include "work.h"

#define HD_MAX_SIZE (16u * 1024 * 1024)
#define HD_MAX_US   10000000u
#define HD_MAX_USER 256

static char *hd_xbuf; /* HD_MAX_SIZE bytes of 'x' */

int hd_init(void)
{
	hd_xbuf = malloc(HD_MAX_SIZE);
	if (!hd_xbuf)
		return -1;
	memset(hd_xbuf, 'x', HD_MAX_SIZE);
	return 0;
}

void hd_free(void)
{
	free(hd_xbuf);
	hd_xbuf = NULL;
}

static const char *hd_reason(int status)
{
	switch (status) {
	case 200: return "OK";
	case 201: return "Created";
	case 400: return "Bad Request";
	case 404: return "Not Found";
	case 405: return "Method Not Allowed";
	case 409: return "Conflict";
	case 413: return "Content Too Large";
	case 501: return "Not Implemented";
	case 503: return "Service Unavailable";
	default: return "Internal Server Error";
	}
}

static char *hd_put(char *p, const char *s)
{
	size_t n = strlen(s);
	memcpy(p, s, n);
	return p + n;
}

static char *hd_put_u64(char *p, uint64_t v)
{
	char tmp[24];
	int i = 0;
	do {
		tmp[i++] = (char)('0' + v % 10);
		v /= 10;
	} while (v);
	while (i)
		*p++ = tmp[--i];
	return p;
}

/* Milliseconds with three decimals from nanoseconds (rounded to the microsecond). */
static char *hd_put_ms(char *p, int64_t ns)
{
	uint64_t us = ns > 0 ? (uint64_t)(ns + 500) / 1000 : 0;
	p = hd_put_u64(p, us / 1000);
	*p++ = '.';
	*p++ = (char)('0' + (us / 100) % 10);
	*p++ = (char)('0' + (us / 10) % 10);
	*p++ = (char)('0' + us % 10);
	return p;
}

/* Writes the response head; the body must already be set. db_ns < 0: no `db` entry in
 * Server-Timing (only /db responses that reached the database handling carry one). */
static void hd_finish(struct hd_resp *r, const char *ctype, const char *allow, int http10,
		      int64_t queue_ns, int64_t t_start, int64_t db_ns)
{
	char *p = r->hdr;
	int64_t svc = ck_now_ns() - t_start;
	p = hd_put(p, "HTTP/1.1 ");
	p = hd_put_u64(p, (uint64_t)r->status);
	*p++ = ' ';
	p = hd_put(p, hd_reason(r->status));
	p = hd_put(p, "\r\nContent-Type: ");
	p = hd_put(p, ctype);
	p = hd_put(p, "\r\nContent-Length: ");
	p = hd_put_u64(p, r->body_len);
	p = hd_put(p, "\r\nServer-Timing: queue;dur=");
	p = hd_put_ms(p, queue_ns);
	p = hd_put(p, ", svc;dur=");
	p = hd_put_ms(p, svc);
	if (db_ns >= 0) {
		p = hd_put(p, ", db;dur=");
		p = hd_put_ms(p, db_ns);
	}
	p = hd_put(p, "\r\n");
	if (allow) {
		p = hd_put(p, "Allow: ");
		p = hd_put(p, allow);
		p = hd_put(p, "\r\n");
	}
	if (r->close)
		p = hd_put(p, "Connection: close\r\n");
	else if (http10)
		p = hd_put(p, "Connection: keep-alive\r\n");
	p = hd_put(p, "\r\n");
	r->hdr_len = (size_t)(p - r->hdr);
	st_request_done();
}

static void hd_text(struct hd_resp *r, int status, const char *body)
{
	r->status = status;
	r->body = body;
	r->body_len = strlen(body);
}

static const char *hd_error_body(int status)
{
	switch (status) {
	case 400: return "bad request\n";
	case 404: return "not found\n";
	case 405: return "method not allowed\n";
	case 413: return "content too large\n";
	case 501: return "not implemented\n";
	default: return "internal server error\n";
	}
}

void hd_error(int status, int64_t queue_ns, int64_t t_start, struct hd_resp *r)
{
	hd_text(r, status, hd_error_body(status));
	r->close = 1;
	hd_finish(r, "text/plain", NULL, 0, queue_ns, t_start, -1);
}

/* A status that ends the connection per PROTOCOL.md (a 503 from /db does not: the database
 * is down, the connection is fine). */
static int hd_closing_status(int status)
{
	return status == 400 || status == 413 || (status >= 500 && status != 503);
}

static void hd_work(const char *q, size_t qn, struct hd_resp *r)
{
	const char *pos = q, *end = q + qn, *name, *val;
	size_t nlen, vlen;
	const char *raw[5] = {0};
	size_t rawlen[5] = {0};
	static const char *const names[5] = {"spin_us", "sleep_us", "dist", "bucket", "size"};
	uint64_t spin = 0, sleep = 0, bucket = 0, size = 0;
	struct wk_dist dist = {WK_FIXED, 0, 0};
	double f;

	while (url_next_param(&pos, end, &name, &nlen, &val, &vlen)) {
		for (int i = 0; i < 5; i++) {
			if (!raw[i] && strlen(names[i]) == nlen &&
			    memcmp(names[i], name, nlen) == 0) {
				raw[i] = val;
				rawlen[i] = vlen;
			}
		}
	}
	if ((raw[0] && url_parse_uint(raw[0], rawlen[0], HD_MAX_US, &spin) != 0) ||
	    (raw[1] && url_parse_uint(raw[1], rawlen[1], HD_MAX_US, &sleep) != 0) ||
	    (raw[3] && url_parse_uint(raw[3], rawlen[3], UINT64_MAX, &bucket) != 0) ||
	    (raw[4] && url_parse_uint(raw[4], rawlen[4], HD_MAX_SIZE, &size) != 0)) {
		hd_text(r, 400, "bad parameter\n");
		return;
	}
	if (raw[2]) {
		char buf[128];
		long n = url_decode(raw[2], rawlen[2], buf, sizeof buf);
		if (n < 0 || wk_parse_dist(buf, (size_t)n, &dist) != 0) {
			hd_text(r, 400, "bad parameter\n");
			return;
		}
	}
	{
		uint64_t running = st_work_begin();
		st_bucket_add(raw[3] ? bucket : running);
	}
	f = wk_factor(&dist);
	wk_spin_us((double)spin * f);
	wk_sleep_us((double)sleep * f);
	r->status = 200;
	if (raw[4]) {
		r->body = hd_xbuf;
		r->body_len = (size_t)size;
	} else {
		r->body = "ok";
		r->body_len = 2;
	}
}

static void hd_search(const char *q, size_t qn, struct hd_resp *r)
{
	const char *pos = q, *end = q + qn, *name, *val;
	const char *type_raw = NULL, *re_raw = NULL;
	size_t nlen, vlen, type_len = 0, re_len = 0;
	uint64_t type;
	char pattern[8200];
	long plen;
	regex_t re;
	long matches;
	int n;

	while (url_next_param(&pos, end, &name, &nlen, &val, &vlen)) {
		if (!type_raw && nlen == 4 && memcmp(name, "type", 4) == 0) {
			type_raw = val;
			type_len = vlen;
		} else if (!re_raw && nlen == 2 && memcmp(name, "re", 2) == 0) {
			re_raw = val;
			re_len = vlen;
		}
	}
	if (!type_raw || url_parse_uint(type_raw, type_len, 4, &type) != 0 || type < 1 || !re_raw) {
		hd_text(r, 400, "bad parameter\n");
		return;
	}
	plen = url_decode(re_raw, re_len, pattern, sizeof pattern - 1);
	if (plen < 0 || memchr(pattern, '\0', (size_t)plen)) {
		hd_text(r, 400, "bad parameter\n");
		return;
	}
	pattern[plen] = '\0';
	if (regcomp(&re, pattern, REG_EXTENDED | REG_NOSUB) != 0) {
		hd_text(r, 400, "bad regex\n");
		return;
	}
	matches = sr_count((int)type, &re);
	regfree(&re);
	n = snprintf(r->small, sizeof r->small, "{\"type\": %d, \"matches\": %ld}\n", (int)type,
		     matches);
	r->status = 200;
	r->body = r->small;
	r->body_len = (size_t)n;
}

static void hd_register(const char *body, size_t bn, struct hd_resp *r)
{
	const char *pos = body, *end = body + bn, *name, *val;
	size_t nlen, vlen;
	char user[HD_MAX_USER];
	long ulen;

	int found = 0;

	while (!found && url_next_param(&pos, end, &name, &nlen, &val, &vlen))
		found = nlen == 4 && memcmp(name, "user", 4) == 0;
	if (!found) {
		hd_text(r, 400, "missing user\n");
		return;
	}
	ulen = url_decode(val, vlen, user, sizeof user);
	if (ulen <= 0) {
		hd_text(r, 400, ulen == 0 ? "missing user\n" : "bad user\n");
		return;
	}
	switch (rg_add(user, (size_t)ulen)) {
	case 1: hd_text(r, 201, "created\n"); break;
	case 0: hd_text(r, 409, "exists\n"); break;
	default: hd_text(r, 500, "out of memory\n"); break;
	}
}

static int hd_is(const char *s, size_t n, const char *lit)
{
	return strlen(lit) == n && memcmp(s, lit, n) == 0;
}

void hd_serve(const struct hd_req *rq, int64_t queue_ns, int64_t t_start, struct hd_resp *r)
{
	const char *path = rq->target, *qmark, *query;
	size_t plen, qlen;
	int get = hd_is(rq->method, rq->method_len, "GET");
	const char *allow = NULL, *ctype = "text/plain";
	int64_t db_ns = -1;

	qmark = memchr(rq->target, '?', rq->target_len);
	plen = qmark ? (size_t)(qmark - path) : rq->target_len;
	query = qmark ? qmark + 1 : rq->target + rq->target_len;
	qlen = (size_t)(rq->target + rq->target_len - query);
	r->close = !rq->keep_alive;

	if (hd_is(path, plen, "/work")) {
		if (get)
			hd_work(query, qlen, r);
		else
			allow = "GET";
	} else if (hd_is(path, plen, "/health")) {
		if (get)
			hd_text(r, 200, "ok\n");
		else
			allow = "GET";
	} else if (hd_is(path, plen, "/search")) {
		if (get) {
			hd_search(query, qlen, r);
			if (r->status == 200)
				ctype = "application/json";
		} else {
			allow = "GET";
		}
	} else if (hd_is(path, plen, "/stats")) {
		if (get) {
			r->status = 200;
			r->body = r->small;
			r->body_len = st_json(r->small, sizeof r->small, rg_count());
			ctype = "application/json";
		} else {
			allow = "GET";
		}
	} else if (hd_is(path, plen, "/db")) {
		if (get) {
			r->status =
			    db_serve(query, qlen, r->small, sizeof r->small, &r->body_len, &db_ns);
			r->body = r->small;
			if (r->status == 200)
				ctype = "application/json";
		} else {
			allow = "GET";
		}
	} else if (hd_is(path, plen, "/register")) {
		if (hd_is(rq->method, rq->method_len, "POST"))
			hd_register(rq->body, rq->body_len, r);
		else
			allow = "POST";
	} else {
		hd_text(r, 404, hd_error_body(404));
	}
	if (allow)
		hd_text(r, 405, hd_error_body(405));
	if (hd_closing_status(r->status))
		r->close = 1;
	hd_finish(r, ctype, allow, rq->http10, queue_ns, t_start, db_ns);
	if (hd_is(rq->method, rq->method_len, "HEAD"))
		r->body_len = 0; /* a HEAD response has a head only (RFC 9110 9.3.2) */
}
