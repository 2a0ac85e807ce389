/* clock: the monotonic clock in nanoseconds (prefix ck_). Header-only. */
#ifndef PERFCTL_CLOCK_H
#define PERFCTL_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline int64_t ck_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

#endif
