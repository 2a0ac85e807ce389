/* http_parse: see http_parse.h. Own code, in the spirit of picohttpparser. */
#include "http_parse.h"

#include <limits.h>

/* RFC 9110 tchar: "!#$%&'*+-.^_`|~" DIGIT ALPHA */
static const unsigned char hp_tchar[256] = {
    ['!'] = 1, ['#'] = 1, ['$'] = 1, ['%'] = 1, ['&'] = 1, ['\''] = 1, ['*'] = 1, ['+'] = 1,
    ['-'] = 1, ['.'] = 1, ['^'] = 1, ['_'] = 1, ['`'] = 1, ['|'] = 1,  ['~'] = 1, ['0'] = 1,
    ['1'] = 1, ['2'] = 1, ['3'] = 1, ['4'] = 1, ['5'] = 1, ['6'] = 1,  ['7'] = 1, ['8'] = 1,
    ['9'] = 1, ['A'] = 1, ['B'] = 1, ['C'] = 1, ['D'] = 1, ['E'] = 1,  ['F'] = 1, ['G'] = 1,
    ['H'] = 1, ['I'] = 1, ['J'] = 1, ['K'] = 1, ['L'] = 1, ['M'] = 1,  ['N'] = 1, ['O'] = 1,
    ['P'] = 1, ['Q'] = 1, ['R'] = 1, ['S'] = 1, ['T'] = 1, ['U'] = 1,  ['V'] = 1, ['W'] = 1,
    ['X'] = 1, ['Y'] = 1, ['Z'] = 1, ['a'] = 1, ['b'] = 1, ['c'] = 1,  ['d'] = 1, ['e'] = 1,
    ['f'] = 1, ['g'] = 1, ['h'] = 1, ['i'] = 1, ['j'] = 1, ['k'] = 1,  ['l'] = 1, ['m'] = 1,
    ['n'] = 1, ['o'] = 1, ['p'] = 1, ['q'] = 1, ['r'] = 1, ['s'] = 1,  ['t'] = 1, ['u'] = 1,
    ['v'] = 1, ['w'] = 1, ['x'] = 1, ['y'] = 1, ['z'] = 1,
};

/* Consumes a line end (CRLF or LF) at *pp: 1 done, -2 need more, -1 malformed. */
static int hp_eol(const char **pp, const char *end)
{
	const char *p = *pp;
	if (p >= end)
		return -2;
	if (*p == '\n') {
		*pp = p + 1;
		return 1;
	}
	if (*p != '\r')
		return -1;
	if (++p >= end)
		return -2;
	if (*p != '\n')
		return -1;
	*pp = p + 1;
	return 1;
}

int hp_parse_request(const char *buf, size_t len, struct hp_request *req)
{
	const char *p = buf, *end = buf + len, *start;
	size_t cap = req->num_headers, n = 0;
	int r;

	if (len > INT_MAX)
		return -1;
	req->num_headers = 0;

	/* empty lines before the request line */
	while (p < end && (*p == '\r' || *p == '\n')) {
		if ((r = hp_eol(&p, end)) != 1)
			return r;
	}

	/* method SP */
	start = p;
	for (;; p++) {
		if (p >= end)
			return -2;
		if (*p == ' ')
			break;
		if (!hp_tchar[(unsigned char)*p])
			return -1;
	}
	if (p == start)
		return -1;
	req->method = start;
	req->method_len = (size_t)(p - start);
	p++;

	/* request-target SP: visible ASCII only */
	start = p;
	for (;; p++) {
		unsigned char c;
		if (p >= end)
			return -2;
		c = (unsigned char)*p;
		if (c == ' ')
			break;
		if (c < 0x21 || c > 0x7e)
			return -1;
	}
	if (p == start)
		return -1;
	req->target = start;
	req->target_len = (size_t)(p - start);
	p++;

	/* HTTP-version: "HTTP/" DIGIT "." DIGIT */
	{
		static const char pat[] = "HTTP/0.0";
		for (int i = 0; i < 8; i++, p++) {
			if (p >= end)
				return -2;
			if (pat[i] == '0') {
				if (*p < '0' || *p > '9')
					return -1;
			} else if (*p != pat[i]) {
				return -1;
			}
		}
		req->major = p[-3] - '0';
		req->minor = p[-1] - '0';
	}
	if ((r = hp_eol(&p, end)) != 1)
		return r;

	/* header fields */
	for (;;) {
		const char *name, *value, *vend;
		if (p >= end)
			return -2;
		if (*p == '\r' || *p == '\n') {
			if ((r = hp_eol(&p, end)) != 1)
				return r;
			req->num_headers = n;
			return (int)(p - buf);
		}
		name = p;
		for (;; p++) {
			if (p >= end)
				return -2;
			if (*p == ':')
				break;
			if (!hp_tchar[(unsigned char)*p])
				return -1; /* includes obs-fold and whitespace before ':' */
		}
		if (p == name)
			return -1;
		if (n >= cap)
			return -1;
		req->headers[n].name = name;
		req->headers[n].name_len = (size_t)(p - name);
		p++;
		while (p < end && (*p == ' ' || *p == '\t'))
			p++;
		value = p;
		for (;; p++) {
			unsigned char c;
			if (p >= end)
				return -2;
			c = (unsigned char)*p;
			if (c == '\r' || c == '\n')
				break;
			if ((c < 0x20 && c != '\t') || c == 0x7f)
				return -1;
		}
		vend = p;
		while (vend > value && (vend[-1] == ' ' || vend[-1] == '\t'))
			vend--;
		req->headers[n].value = value;
		req->headers[n].value_len = (size_t)(vend - value);
		n++;
		if ((r = hp_eol(&p, end)) != 1)
			return r;
	}
}

int hp_token_eq(const char *s, size_t n, const char *lower)
{
	size_t i;
	for (i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		if (lower[i] == '\0')
			return 0;
		if (c >= 'A' && c <= 'Z')
			c = (unsigned char)(c + ('a' - 'A'));
		if (c != (unsigned char)lower[i])
			return 0;
	}
	return lower[i] == '\0';
}
