/* handler: routing, the endpoints, and response heads (prefix hd_). */
#ifndef PERFCTL_HANDLER_H
#define PERFCTL_HANDLER_H

#include <stddef.h>
#include <stdint.h>

#define HD_HDR_CAP   384
#define HD_SMALL_CAP 320

/* One response: the head in hdr, the body either in small or in static/shared memory. */
struct hd_resp {
	char hdr[HD_HDR_CAP];
	size_t hdr_len;
	const char *body;
	size_t body_len;
	int status;
	int close; /* the connection closes after this response */
	char small[HD_SMALL_CAP];
};

struct hd_req {
	const char *method;
	size_t method_len;
	const char *target;
	size_t target_len;
	const char *body;
	size_t body_len;
	int http10;     /* request was HTTP/1.0 */
	int keep_alive; /* the client allows the connection to stay open */
};

int hd_init(void); /* 0, or -1 out of memory */
void hd_free(void);

/* Serves one request (t_start: when serving began; queue_ns: time spent waiting before it). */
void hd_serve(const struct hd_req *rq, int64_t queue_ns, int64_t t_start, struct hd_resp *r);

/* An error response that closes the connection (400, 413, 500, 501). */
void hd_error(int status, int64_t queue_ns, int64_t t_start, struct hd_resp *r);

#endif
