/* url: see url.h. */
#include "url.h"

#include <string.h>

int url_next_param(const char **pos, const char *end, const char **name, size_t *name_len,
		   const char **value, size_t *value_len)
{
	const char *p = *pos;
	while (p < end) {
		const char *amp = memchr(p, '&', (size_t)(end - p));
		const char *stop = amp ? amp : end;
		const char *eq;
		if (stop == p) {
			p++;
			continue;
		}
		eq = memchr(p, '=', (size_t)(stop - p));
		*name = p;
		if (eq) {
			*name_len = (size_t)(eq - p);
			*value = eq + 1;
			*value_len = (size_t)(stop - eq - 1);
		} else {
			*name_len = (size_t)(stop - p);
			*value = stop;
			*value_len = 0;
		}
		*pos = amp ? amp + 1 : end;
		return 1;
	}
	*pos = end;
	return 0;
}

static int url_hex(unsigned char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* Decodes one character at src[*i]; returns it (0..255) or -1 for a bad escape. */
static int url_take(const char *src, size_t n, size_t *i)
{
	unsigned char c = (unsigned char)src[*i];
	if (c == '+') {
		(*i)++;
		return ' ';
	}
	if (c != '%') {
		(*i)++;
		return c;
	}
	if (n - *i < 3)
		return -1;
	{
		int hi = url_hex((unsigned char)src[*i + 1]),
		    lo = url_hex((unsigned char)src[*i + 2]);
		if (hi < 0 || lo < 0)
			return -1;
		*i += 3;
		return hi * 16 + lo;
	}
}

long url_decode(const char *src, size_t n, char *dst, size_t cap)
{
	size_t i = 0, o = 0;
	while (i < n) {
		int c = url_take(src, n, &i);
		if (c < 0)
			return -1;
		if (o >= cap)
			return -2;
		dst[o++] = (char)c;
	}
	return (long)o;
}

int url_parse_uint(const char *src, size_t n, uint64_t max, uint64_t *out)
{
	size_t i = 0;
	uint64_t v = 0;
	if (n == 0)
		return -1;
	while (i < n) {
		int c = url_take(src, n, &i);
		if (c < '0' || c > '9')
			return -1;
		if ((uint64_t)(c - '0') > max || v > (max - (uint64_t)(c - '0')) / 10)
			return -1;
		v = v * 10 + (uint64_t)(c - '0');
	}
	*out = v;
	return 0;
}
