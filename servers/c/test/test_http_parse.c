/* Table-driven tests of hp_parse_request and the url_ helpers. `make test` runs it. */
#include <stdio.h>
#include <string.h>

#include "http_parse.h"
#include "url.h"

struct hp_case {
	const char *name;
	const char *in;
	int want; /* >0: expect exactly strlen(in) - trailing; use -3 for "whole input" */
	const char *method, *target;
	int minor;
	int nheaders;
};

#define ALL -3 /* expect the whole input to be consumed */

static const struct hp_case cases[] = {
    {"simple", "GET / HTTP/1.1\r\n\r\n", ALL, "GET", "/", 1, 0},
    {"http10", "GET /health HTTP/1.0\r\n\r\n", ALL, "GET", "/health", 0, 0},
    {"headers", "GET /work?spin_us=5 HTTP/1.1\r\nHost: a\r\nX-Y:  v  \r\n\r\n", ALL, "GET",
     "/work?spin_us=5", 1, 2},
    {"bare LF", "GET / HTTP/1.1\nHost: a\n\n", ALL, "GET", "/", 1, 1},
    {"mixed eol", "GET / HTTP/1.1\r\nHost: a\n\r\n", ALL, "GET", "/", 1, 1},
    {"leading CRLF", "\r\n\r\nGET / HTTP/1.1\r\n\r\n", ALL, "GET", "/", 1, 0},
    {"empty value", "GET / HTTP/1.1\r\nX:\r\n\r\n", ALL, "GET", "/", 1, 1},
    {"tab in value", "GET / HTTP/1.1\r\nX: a\tb\r\n\r\n", ALL, "GET", "/", 1, 1},
    {"obs-text value", "GET / HTTP/1.1\r\nX: \xc3\xa9\r\n\r\n", ALL, "GET", "/", 1, 1},
    {"odd method", "M-SEARCH * HTTP/1.1\r\n\r\n", ALL, "M-SEARCH", "*", 1, 0},
    {"version 2.0 parses", "GET / HTTP/2.0\r\n\r\n", ALL, "GET", "/", 0, 0},
    /* partial */
    {"empty", "", -2, 0, 0, 0, 0},
    {"only CRLF", "\r\n", -2, 0, 0, 0, 0},
    {"method only", "GE", -2, 0, 0, 0, 0},
    {"no version", "GET / ", -2, 0, 0, 0, 0},
    {"half version", "GET / HTTP/1", -2, 0, 0, 0, 0},
    {"CR at end", "GET / HTTP/1.1\r", -2, 0, 0, 0, 0},
    {"no blank line", "GET / HTTP/1.1\r\nHost: a\r\n", -2, 0, 0, 0, 0},
    {"half header", "GET / HTTP/1.1\r\nHo", -2, 0, 0, 0, 0},
    {"final CR", "GET / HTTP/1.1\r\n\r", -2, 0, 0, 0, 0},
    /* malformed */
    {"bad method char", "G(T / HTTP/1.1\r\n\r\n", -1, 0, 0, 0, 0},
    {"leading space", " GET / HTTP/1.1\r\n\r\n", -1, 0, 0, 0, 0},
    {"no method", "/ HTTP/1.1\r\n\r\n", -1, 0, 0, 0, 0},
    {"double space", "GET  / HTTP/1.1\r\n\r\n", -1, 0, 0, 0, 0},
    {"no target", "GET HTTP/1.1\r\n\r\n", -1, 0, 0, 0, 0},
    {"control in target", "GET /a\x01 HTTP/1.1\r\n\r\n", -1, 0, 0, 0, 0},
    {"8bit in target", "GET /\xff HTTP/1.1\r\n\r\n", -1, 0, 0, 0, 0},
    {"lowercase http", "GET / http/1.1\r\n\r\n", -1, 0, 0, 0, 0},
    {"version letters", "GET / HTTP/x.1\r\n\r\n", -1, 0, 0, 0, 0},
    {"version 1.10", "GET / HTTP/1.10\r\n\r\n", -1, 0, 0, 0, 0},
    {"trailing space", "GET / HTTP/1.1 \r\n\r\n", -1, 0, 0, 0, 0},
    {"CR without LF", "GET / HTTP/1.1\rX\r\n\r\n", -1, 0, 0, 0, 0},
    {"space before colon", "GET / HTTP/1.1\r\nHost : a\r\n\r\n", -1, 0, 0, 0, 0},
    {"obs-fold", "GET / HTTP/1.1\r\nA: b\r\n c\r\n\r\n", -1, 0, 0, 0, 0},
    {"empty name", "GET / HTTP/1.1\r\n: b\r\n\r\n", -1, 0, 0, 0, 0},
    {"no colon", "GET / HTTP/1.1\r\nHost\r\n\r\n", -1, 0, 0, 0, 0},
    {"NUL in value", "GET / HTTP/1.1\r\nA: b\0c\r\n\r\n", -1, 0, 0, 0, 0},
    {"DEL in value", "GET / HTTP/1.1\r\nA: b\x7f\r\n\r\n", -1, 0, 0, 0, 0},
    {"binary junk", "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", -1, 0, 0, 0, 0},
    {"TLS hello", "\x16\x03\x01", -1, 0, 0, 0, 0},
};

static int failures;

static void check(int cond, const char *name, const char *what)
{
	if (!cond) {
		printf("FAIL %-22s %s\n", name, what);
		failures++;
	}
}

static size_t case_len(const struct hp_case *c)
{
	/* the NUL case holds an embedded NUL: measure up to the final blank line */
	if (strcmp(c->name, "NUL in value") == 0)
		return sizeof "GET / HTTP/1.1\r\nA: b\0c\r\n\r\n" - 1;
	if (strcmp(c->name, "binary junk") == 0)
		return 11;
	return strlen(c->in);
}

static void test_parser(void)
{
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		const struct hp_case *c = &cases[i];
		struct hp_header h[8];
		struct hp_request req;
		size_t len = case_len(c);
		int r, want = c->want == ALL ? (int)len : c->want;
		req.headers = h;
		req.num_headers = 8;
		r = hp_parse_request(c->in, len, &req);
		if (r != want) {
			printf("FAIL %-22s got %d, want %d\n", c->name, r, want);
			failures++;
			continue;
		}
		if (r >= 0) {
			check(req.method_len == strlen(c->method) &&
				  memcmp(req.method, c->method, req.method_len) == 0,
			      c->name, "method");
			check(req.target_len == strlen(c->target) &&
				  memcmp(req.target, c->target, req.target_len) == 0,
			      c->name, "target");
			if (strcmp(c->name, "version 2.0 parses") == 0)
				check(req.major == 2 && req.minor == 0, c->name, "version 2.0");
			else
				check(req.major == 1 && req.minor == c->minor, c->name, "version");
			check((int)req.num_headers == c->nheaders, c->name, "header count");
		}
		/* every proper prefix of a well-formed head is partial (or malformed, never
		 * complete) */
		if (c->want == ALL) {
			for (size_t k = 0; k < len; k++) {
				int pr;
				req.num_headers = 8;
				pr = hp_parse_request(c->in, k, &req);
				if (pr != -2) {
					printf("FAIL %-22s prefix %zu gave %d\n", c->name, k, pr);
					failures++;
					break;
				}
			}
		}
	}
	/* header values are trimmed; the next request's bytes are not consumed */
	{
		const char *in = "GET / HTTP/1.1\r\nX-Y:  v w \t\r\n\r\nGET /next HTTP/1.1\r\n\r\n";
		struct hp_header h[4];
		struct hp_request req = {.headers = h, .num_headers = 4};
		int r = hp_parse_request(in, strlen(in), &req);
		check(r == (int)(strstr(in, "GET /next") - in), "pipelined", "consumed");
		check(req.num_headers == 1 && h[0].value_len == 3 &&
			  memcmp(h[0].value, "v w", 3) == 0,
		      "pipelined", "trimmed value");
	}
	/* too many headers: -1 */
	{
		const char *in = "GET / HTTP/1.1\r\nA: 1\r\nB: 2\r\nC: 3\r\n\r\n";
		struct hp_header h[2];
		struct hp_request req = {.headers = h, .num_headers = 2};
		check(hp_parse_request(in, strlen(in), &req) == -1, "too many headers", "-1");
	}
	check(hp_token_eq("Content-Length", 14, "content-length"), "token_eq", "case");
	check(!hp_token_eq("Content-Lengthx", 15, "content-length"), "token_eq", "longer");
	check(!hp_token_eq("Content", 7, "content-length"), "token_eq", "shorter");
}

static void test_url(void)
{
	char out[16];
	uint64_t v;
	const char *q = "a=1&&b=%41+x&c&=z", *pos = q, *end = q + strlen(q), *n, *val;
	size_t nl, vl;
	int k = 0;
	const char *names[] = {"a", "b", "c", ""}, *vals[] = {"1", "%41+x", "", "z"};
	while (url_next_param(&pos, end, &n, &nl, &val, &vl)) {
		check(k < 4 && nl == strlen(names[k]) && memcmp(n, names[k], nl) == 0, "params",
		      "name");
		check(k < 4 && vl == strlen(vals[k]) && memcmp(val, vals[k], vl) == 0, "params",
		      "value");
		k++;
	}
	check(k == 4, "params", "count");
	check(url_decode("%41+x", 5, out, sizeof out) == 3 && memcmp(out, "A x", 3) == 0, "decode",
	      "escape and plus");
	check(url_decode("%4", 2, out, sizeof out) == -1, "decode", "short escape");
	check(url_decode("%zz", 3, out, sizeof out) == -1, "decode", "bad hex");
	check(url_decode("abcdef", 6, out, 4) == -2, "decode", "too long");
	check(url_parse_uint("123", 3, 1000, &v) == 0 && v == 123, "uint", "plain");
	check(url_parse_uint("%31%32", 6, 1000, &v) == 0 && v == 12, "uint", "encoded");
	check(url_parse_uint("1001", 4, 1000, &v) == -1, "uint", "over max");
	check(url_parse_uint("-1", 2, 1000, &v) == -1, "uint", "sign");
	check(url_parse_uint("", 0, 1000, &v) == -1, "uint", "empty");
	check(url_parse_uint("1.5", 3, 1000, &v) == -1, "uint", "fraction");
	check(url_parse_uint("18446744073709551615", 20, UINT64_MAX, &v) == 0 && v == UINT64_MAX,
	      "uint", "max u64");
	check(url_parse_uint("18446744073709551616", 20, UINT64_MAX, &v) == -1, "uint", "overflow");
	check(url_parse_uint("5", 1, 4, &v) == -1, "uint", "digit above small max");
}

int main(void)
{
	test_parser();
	test_url();
	if (failures) {
		printf("%d failure(s)\n", failures);
		return 1;
	}
	printf("http_parse: %zu parser cases + url cases passed\n", sizeof cases / sizeof cases[0]);
	return 0;
}
