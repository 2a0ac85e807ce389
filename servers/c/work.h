/* work: the /work service-time model: spin, sleep and random draws (prefix wk_). */
#ifndef PERFCTL_WORK_H
#define PERFCTL_WORK_H

#include <stddef.h>
#include <stdint.h>

enum wk_kind { WK_FIXED, WK_EXP, WK_UNIFORM };

struct wk_dist {
	enum wk_kind kind;
	double a, b; /* WK_UNIFORM bounds */
};

void wk_seed(uint64_t seed); /* before any thread starts */

/* Parses "fixed", "exp" or "uniform:A:B" (0 <= A <= B, finite): 0, or -1. */
int wk_parse_dist(const char *s, size_t n, struct wk_dist *d);

/* One draw of the multiplier (1 for fixed) from this thread's generator. */
double wk_factor(const struct wk_dist *d);

/* Busy-spins on CLOCK_MONOTONIC for us microseconds (returns early if the server stops). */
void wk_spin_us(double us);

/* Sleeps us microseconds with nanosleep (returns early if the server stops). */
void wk_sleep_us(double us);

#endif
