/* search: see search.h. The file is read into one block; sentences are NUL-terminated in
 * place. flat: one array of (type, text); by-type: one array of texts per type.
 * Compiled regexes are not cached: glibc serialises regexec() calls on one regex_t with a
 * lock, so a shared cache would turn concurrent searches into a queue; each request compiles
 * its own (microseconds, against milliseconds of scanning). */
#include "search.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct sr_entry {
	int type;
	const char *text;
};

static char *sr_blob;
static enum sr_layout sr_layout_used;
static struct sr_entry *sr_flat;
static size_t sr_nflat;
static const char **sr_typed[5];
static size_t sr_ntyped[5];

int sr_load(const char *path, enum sr_layout layout, char *err, size_t errcap)
{
	FILE *f = fopen(path, "rb");
	long size;
	size_t nlines = 0, skipped = 0;
	char *p, *end;

	if (!f) {
		snprintf(err, errcap, "--corpus %s: %s", path, strerror(errno));
		return -1;
	}
	if (fseek(f, 0, SEEK_END) != 0 || (size = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0) {
		snprintf(err, errcap, "--corpus %s: cannot determine its size", path);
		fclose(f);
		return -1;
	}
	sr_blob = malloc((size_t)size + 1);
	if (!sr_blob || fread(sr_blob, 1, (size_t)size, f) != (size_t)size) {
		snprintf(err, errcap, "--corpus %s: cannot read it", path);
		fclose(f);
		free(sr_blob);
		sr_blob = NULL;
		return -1;
	}
	fclose(f);
	sr_blob[size] = '\0';
	end = sr_blob + size;
	for (p = sr_blob; p < end; p++)
		nlines += (*p == '\n');
	nlines++;
	sr_flat = calloc(nlines, sizeof *sr_flat);
	if (!sr_flat) {
		snprintf(err, errcap, "--corpus %s: out of memory", path);
		sr_free();
		return -1;
	}
	for (p = sr_blob; p < end;) {
		char *nl = memchr(p, '\n', (size_t)(end - p));
		char *line_end = nl ? nl : end;
		char *tab = memchr(p, '\t', (size_t)(line_end - p));
		*line_end = '\0';
		if (line_end > p && line_end[-1] == '\r')
			line_end[-1] = '\0';
		if (tab && tab - p == 1 && *p >= '1' && *p <= '4') {
			sr_flat[sr_nflat].type = *p - '0';
			sr_flat[sr_nflat].text = tab + 1;
			sr_nflat++;
		} else if (line_end > p) {
			skipped++;
		}
		p = line_end + 1;
	}
	if (skipped)
		fprintf(stderr, "perfctl-server: --corpus %s: skipped %zu malformed lines\n", path,
			skipped);
	sr_layout_used = layout;
	if (layout == SR_BY_TYPE) {
		size_t fill[5] = {0};
		for (size_t i = 0; i < sr_nflat; i++)
			sr_ntyped[sr_flat[i].type]++;
		for (int t = 1; t <= 4; t++) {
			sr_typed[t] = calloc(sr_ntyped[t] + 1, sizeof *sr_typed[t]);
			if (!sr_typed[t]) {
				snprintf(err, errcap, "--corpus %s: out of memory", path);
				sr_free();
				return -1;
			}
		}
		for (size_t i = 0; i < sr_nflat; i++) {
			int t = sr_flat[i].type;
			sr_typed[t][fill[t]++] = sr_flat[i].text;
		}
		free(sr_flat);
		sr_flat = NULL;
		sr_nflat = 0;
	}
	return 0;
}

void sr_free(void)
{
	free(sr_flat);
	sr_flat = NULL;
	sr_nflat = 0;
	for (int t = 1; t <= 4; t++) {
		free(sr_typed[t]);
		sr_typed[t] = NULL;
		sr_ntyped[t] = 0;
	}
	free(sr_blob);
	sr_blob = NULL;
}

long sr_count(int type, const regex_t *re)
{
	long matches = 0;
	if (type < 1 || type > 4)
		return 0;
	if (sr_layout_used == SR_FLAT) {
		for (size_t i = 0; i < sr_nflat; i++) {
			if (sr_flat[i].type == type &&
			    regexec(re, sr_flat[i].text, 0, NULL, 0) == 0)
				matches++;
		}
	} else {
		for (size_t i = 0; i < sr_ntyped[type]; i++) {
			if (regexec(re, sr_typed[type][i], 0, NULL, 0) == 0)
				matches++;
		}
	}
	return matches;
}
