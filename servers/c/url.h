/* url: query-string / form-body iteration and percent-decoding (prefix url_). */
#ifndef PERFCTL_URL_H
#define PERFCTL_URL_H

#include <stddef.h>
#include <stdint.h>

/*
 * Takes the next "name=value" pair from the '&'-separated string [*pos, end): returns 1 and
 * advances *pos, or 0 when no pair is left. Raw (still encoded) slices; a pair without '='
 * has an empty value. Empty pairs ("a=1&&b=2") are skipped.
 */
int url_next_param(const char **pos, const char *end, const char **name, size_t *name_len,
		   const char **value, size_t *value_len);

/*
 * Percent-decodes src[0..n) into dst (capacity cap), '+' becoming a space. Returns the decoded
 * length, -1 for a bad escape, -2 if it does not fit.
 */
long url_decode(const char *src, size_t n, char *dst, size_t cap);

/*
 * Parses a percent-encoded decimal integer (digits only, no sign, not empty) into *out.
 * Returns 0, or -1 if it is not such an integer or exceeds max.
 */
int url_parse_uint(const char *src, size_t n, uint64_t max, uint64_t *out);

#endif
