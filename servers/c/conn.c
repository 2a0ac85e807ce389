/* conn: see conn.h. */
#include "conn.h"

#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "http_parse.h"

const char cn_continue_msg[] = "HTTP/1.1 100 Continue\r\n\r\n";

void cn_init(struct cn_conn *c, int64_t first_queue_ns)
{
	c->in = c->inline_buf;
	c->cap = CN_INLINE;
	c->start = c->end = 0;
	c->t_read = 0;
	c->first_queue_ns = first_queue_ns;
	c->continue_sent = 0;
}

void cn_release(struct cn_conn *c)
{
	if (c->in != c->inline_buf)
		free(c->in);
	c->in = c->inline_buf;
	c->cap = CN_INLINE;
	c->start = c->end = 0;
}

/* Makes the buffer hold at least `want` bytes from the request start, with room to read. */
static int cn_room(struct cn_conn *c, size_t want)
{
	size_t len = c->end - c->start;
	char *nb;
	if (c->cap - c->start >= want && c->end < c->cap)
		return 0;
	if (c->start > 0) {
		memmove(c->in, c->in + c->start, len);
		c->start = 0;
		c->end = len;
	}
	if (c->cap >= want && c->end < c->cap)
		return 0;
	want = (want + 4095) & ~(size_t)4095;
	nb = malloc(want);
	if (!nb)
		return -1;
	memcpy(nb, c->in, len);
	if (c->in != c->inline_buf)
		free(c->in);
	c->in = nb;
	c->cap = want;
	return 0;
}

static int cn_fail(struct cn_conn *c, int status)
{
	int64_t now = ck_now_ns();
	hd_error(status, 0, now, &c->resp);
	return CN_RESPONSE;
}

/* Connection header tokens: sets *close / *keep. */
static void cn_connection_tokens(const char *v, size_t n, int *close, int *keep)
{
	size_t i = 0;
	while (i < n) {
		size_t s, e;
		while (i < n && (v[i] == ' ' || v[i] == '\t' || v[i] == ','))
			i++;
		s = i;
		while (i < n && v[i] != ',')
			i++;
		e = i;
		while (e > s && (v[e - 1] == ' ' || v[e - 1] == '\t'))
			e--;
		if (hp_token_eq(v + s, e - s, "close"))
			*close = 1;
		else if (hp_token_eq(v + s, e - s, "keep-alive"))
			*keep = 1;
	}
}

int cn_next(struct cn_conn *c)
{
	struct hp_header hdrs[CN_MAX_HEADERS];
	struct hp_request req;
	const char *buf = c->in + c->start;
	size_t len = c->end - c->start, need;
	long long cl = -1;
	int n, te = 0, conn_close = 0, conn_keep = 0, expect = 0;
	struct hd_req rq;
	int64_t t_start, queue;

	if (len == 0) {
		if (c->in != c->inline_buf)
			cn_release(c);
		c->start = c->end = 0;
		return CN_NEED_MORE;
	}
	req.headers = hdrs;
	req.num_headers = CN_MAX_HEADERS;
	n = hp_parse_request(buf, len, &req);
	if (n == -2) {
		if (len >= CN_HEAD_LIMIT)
			return cn_fail(c, 413);
		if (cn_room(c, len < CN_INLINE ? CN_INLINE : CN_HEAD_LIMIT) != 0)
			return cn_fail(c, 500);
		return CN_NEED_MORE;
	}
	if (n < 0)
		return cn_fail(c, 400);
	if (n > CN_HEAD_LIMIT)
		return cn_fail(c, 413);
	if (req.major != 1 || req.minor > 1)
		return cn_fail(c, 501);

	for (size_t i = 0; i < req.num_headers; i++) {
		const struct hp_header *h = &hdrs[i];
		if (hp_token_eq(h->name, h->name_len, "content-length")) {
			long long v = 0;
			if (h->value_len == 0)
				return cn_fail(c, 400);
			for (size_t k = 0; k < h->value_len; k++) {
				char d = h->value[k];
				if (d < '0' || d > '9')
					return cn_fail(c, 400);
				if (v <= CN_BODY_LIMIT)
					v = v * 10 + (d - '0');
			}
			if (cl >= 0 && cl != v)
				return cn_fail(c, 400);
			cl = v;
		} else if (hp_token_eq(h->name, h->name_len, "transfer-encoding")) {
			te = 1;
		} else if (hp_token_eq(h->name, h->name_len, "connection")) {
			cn_connection_tokens(h->value, h->value_len, &conn_close, &conn_keep);
		} else if (hp_token_eq(h->name, h->name_len, "expect")) {
			expect = hp_token_eq(h->value, h->value_len, "100-continue");
		}
	}
	if (te)
		return cn_fail(c, 501);
	if (cl > CN_BODY_LIMIT)
		return cn_fail(c, 413);
	if (cl < 0)
		cl = 0;
	need = (size_t)n + (size_t)cl;
	if (len < need) {
		if (cn_room(c, need) != 0)
			return cn_fail(c, 500);
		if (expect && !c->continue_sent) {
			c->continue_sent = 1;
			return CN_CONTINUE;
		}
		return CN_NEED_MORE;
	}

	buf = c->in + c->start; /* (unchanged: cn_room is not called on this path) */
	t_start = ck_now_ns();
	if (c->first_queue_ns >= 0) {
		queue = c->first_queue_ns;
		c->first_queue_ns = -1;
	} else {
		queue = t_start - c->t_read;
	}
	rq.method = req.method;
	rq.method_len = req.method_len;
	rq.target = req.target;
	rq.target_len = req.target_len;
	rq.body = buf + n;
	rq.body_len = (size_t)cl;
	rq.http10 = req.minor == 0;
	rq.keep_alive = rq.http10 ? (conn_keep && !conn_close) : !conn_close;
	if (req.target[0] != '/') {
		hd_error(400, queue, t_start, &c->resp);
	} else {
		hd_serve(&rq, queue, t_start, &c->resp);
	}
	c->start += need;
	c->continue_sent = 0;
	if (c->start == c->end)
		c->start = c->end = 0;
	return CN_RESPONSE;
}
