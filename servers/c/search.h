/* search: the /search sentence corpus and its regex scan (prefix sr_). */
#ifndef PERFCTL_SEARCH_H
#define PERFCTL_SEARCH_H

#include <regex.h>
#include <stddef.h>

enum sr_layout { SR_FLAT, SR_BY_TYPE };

/* Loads TYPE<TAB>SENTENCE lines (TYPE 1..4). 0, or -1 with a message in err. */
int sr_load(const char *path, enum sr_layout layout, char *err, size_t errcap);
void sr_free(void);

/* Counts the sentences of type (1..4) in which re (compiled by the caller) finds a match. */
long sr_count(int type, const regex_t *re);

#endif
