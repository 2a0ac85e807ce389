/* conn: per-connection input buffering and request framing, shared by every model (prefix cn_).
 * The caller reads into cn_rbuf()/cn_rroom(), records the read with cn_got(), then calls
 * cn_next() until it returns CN_NEED_MORE, sending each response it produces. */
#ifndef PERFCTL_CONN_H
#define PERFCTL_CONN_H

#include <stddef.h>
#include <stdint.h>

#include "handler.h"

#define CN_INLINE      4096  /* inline input buffer; larger requests use a heap buffer */
#define CN_HEAD_LIMIT  8192  /* request line + headers; more is 413 */
#define CN_BODY_LIMIT  65536 /* request body; more is 413 */
#define CN_MAX_HEADERS 100   /* more header fields is 400 */

enum cn_result {
	CN_NEED_MORE, /* read more into cn_rbuf() (there is room) */
	CN_RESPONSE,  /* c->resp is ready to send; if c->resp.close, close after sending */
	CN_CONTINUE,  /* send "HTTP/1.1 100 Continue\r\n\r\n", then call cn_next again */
};

struct cn_conn {
	char *in;
	size_t cap, start, end;
	int64_t t_read;         /* when the latest bytes arrived */
	int64_t first_queue_ns; /* >= 0: the queue time of the first request (hand-off models) */
	int continue_sent;
	struct hd_resp resp;
	char inline_buf[CN_INLINE];
};

extern const char cn_continue_msg[];
#define CN_CONTINUE_LEN 25

void cn_init(struct cn_conn *c, int64_t first_queue_ns);
void cn_release(struct cn_conn *c); /* frees a heap input buffer */
int cn_next(struct cn_conn *c);

static inline char *cn_rbuf(struct cn_conn *c) { return c->in + c->end; }
static inline size_t cn_rroom(const struct cn_conn *c) { return c->cap - c->end; }
static inline void cn_got(struct cn_conn *c, size_t n, int64_t now)
{
	c->end += n;
	c->t_read = now;
}
/* Bytes of a request received but not yet answered (a partial request). */
static inline size_t cn_pending(const struct cn_conn *c) { return c->end - c->start; }

#endif
