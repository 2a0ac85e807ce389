/* join: waiting for a thread until a monotonic deadline (see join.h). */
#define _GNU_SOURCE
#include "join.h"

#include <time.h>

#include "clock.h"

int jn_join(pthread_t th, int64_t deadline_ns)
{
	/* pthread_timedjoin_np takes a CLOCK_REALTIME time: carry the time left over */
	struct timespec now;
	int64_t left = deadline_ns - ck_now_ns(), abs_ns;
	clock_gettime(CLOCK_REALTIME, &now);
	if (left < 0)
		left = 0;
	abs_ns = (int64_t)now.tv_sec * 1000000000 + now.tv_nsec + left;
	now.tv_sec = (time_t)(abs_ns / 1000000000);
	now.tv_nsec = (long)(abs_ns % 1000000000);
	return pthread_timedjoin_np(th, NULL, &now) == 0 ? 0 : -1;
}
