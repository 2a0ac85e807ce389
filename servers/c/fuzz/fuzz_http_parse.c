/* libFuzzer harness for hp_parse_request (and the url_ helpers on what it finds).
 * Checks the return contract: -2, -1, or a length within the input, and that the
 * method/target/headers it reports lie inside the input. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "http_parse.h"
#include "url.h"

static void inside(const char *buf, size_t len, const char *p, size_t n)
{
	if (n && (p < buf || p + n > buf + len))
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct hp_header h[32];
	struct hp_request req = {.headers = h, .num_headers = 32};
	const char *buf;
	char *copy = malloc(size ? size : 1); /* exact-size copy: ASan catches over-reads */
	int r;
	if (!copy)
		return 0;
	memcpy(copy, data, size);
	buf = copy;
	r = hp_parse_request(buf, size, &req);
	if (r < -2 || r == 0 || (r > 0 && (size_t)r > size))
		abort();
	if (r > 0) {
		const char *pos, *end, *n, *v;
		size_t nl, vl;
		char out[256];
		uint64_t x;
		inside(buf, (size_t)r, req.method, req.method_len);
		inside(buf, (size_t)r, req.target, req.target_len);
		if (req.num_headers > 32)
			abort();
		for (size_t i = 0; i < req.num_headers; i++) {
			inside(buf, (size_t)r, h[i].name, h[i].name_len);
			inside(buf, (size_t)r, h[i].value, h[i].value_len);
		}
		/* the query string of the target goes through the url_ helpers */
		pos = memchr(req.target, '?', req.target_len);
		if (pos) {
			pos++;
			end = req.target + req.target_len;
			while (url_next_param(&pos, end, &n, &nl, &v, &vl)) {
				inside(buf, size, n, nl);
				inside(buf, size, v, vl);
				(void)url_decode(v, vl, out, sizeof out);
				(void)url_parse_uint(v, vl, UINT64_MAX, &x);
			}
		}
	}
	/* the prefix one byte short of a complete head is partial */
	if (r > 0) {
		struct hp_request r2 = {.headers = h, .num_headers = 32};
		int pr = hp_parse_request(buf, (size_t)r - 1, &r2);
		if (pr != -2)
			abort();
	}
	free(copy);
	return 0;
}
