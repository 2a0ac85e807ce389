/* work: see work.h. */
#include "work.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "stats.h"

static uint64_t wk_seed_value = 1;
static uint64_t wk_thread_counter;
static __thread uint64_t wk_state; /* xorshift64* state; 0 = not seeded yet */

static uint64_t wk_splitmix(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ULL;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
	return x ^ (x >> 31);
}

void wk_seed(uint64_t seed) { wk_seed_value = seed; }

/* A uniform double in [0, 1). */
static double wk_uniform01(void)
{
	uint64_t x = wk_state;
	if (x == 0) {
		uint64_t k = __atomic_fetch_add(&wk_thread_counter, 1, __ATOMIC_RELAXED);
		x = wk_splitmix(wk_seed_value ^ wk_splitmix(k + 1));
		if (x == 0)
			x = 0x2545f4914f6cdd1dULL;
	}
	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	wk_state = x;
	return (double)((x * 0x2545f4914f6cdd1dULL) >> 11) * 0x1.0p-53;
}

static int wk_real(const char *s, size_t n, double *out)
{
	char buf[64], *end;
	if (n == 0 || n >= sizeof buf)
		return -1;
	memcpy(buf, s, n);
	buf[n] = '\0';
	for (size_t i = 0; i < n; i++) {
		char c = buf[i];
		if (!((c >= '0' && c <= '9') || c == '.' || c == 'e' || c == 'E' || c == '+' ||
		      c == '-'))
			return -1; /* no hex, inf, nan or spaces */
	}
	errno = 0;
	*out = strtod(buf, &end);
	if (*end != '\0' || errno != 0 || !isfinite(*out))
		return -1;
	return 0;
}

int wk_parse_dist(const char *s, size_t n, struct wk_dist *d)
{
	const char *colon;
	if (n == 5 && memcmp(s, "fixed", 5) == 0) {
		d->kind = WK_FIXED;
		return 0;
	}
	if (n == 3 && memcmp(s, "exp", 3) == 0) {
		d->kind = WK_EXP;
		return 0;
	}
	if (n < 8 || memcmp(s, "uniform:", 8) != 0)
		return -1;
	s += 8;
	n -= 8;
	colon = memchr(s, ':', n);
	if (!colon)
		return -1;
	if (wk_real(s, (size_t)(colon - s), &d->a) != 0 ||
	    wk_real(colon + 1, n - (size_t)(colon - s) - 1, &d->b) != 0)
		return -1;
	if (!(d->a >= 0 && d->a <= d->b))
		return -1;
	d->kind = WK_UNIFORM;
	return 0;
}

double wk_factor(const struct wk_dist *d)
{
	switch (d->kind) {
	case WK_EXP: return -log1p(-wk_uniform01());
	case WK_UNIFORM: return d->a + (d->b - d->a) * wk_uniform01();
	default: return 1.0;
	}
}

void wk_spin_us(double us)
{
	int64_t start, deadline;
	if (!(us > 0))
		return;
	start = ck_now_ns();
	deadline = start + (int64_t)(us * 1000.0);
	while (ck_now_ns() < deadline && !st_stopping())
		;
}

void wk_sleep_us(double us)
{
	int64_t deadline, now;
	if (!(us > 0))
		return;
	now = ck_now_ns();
	deadline = now + (int64_t)(us * 1000.0);
	/* nanosleep in slices of at most 100 ms so that a stopping server is not held up */
	while (now < deadline && !st_stopping()) {
		int64_t left = deadline - now;
		struct timespec ts;
		if (left > 100000000)
			left = 100000000;
		ts.tv_sec = (time_t)(left / 1000000000);
		ts.tv_nsec = (long)(left % 1000000000);
		nanosleep(&ts, NULL);
		now = ck_now_ns();
	}
}
