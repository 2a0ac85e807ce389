/* join: waiting for a thread until a monotonic deadline (prefix jn_). Used by every module
 * that owns threads (the models, linger) so that shutdown is bounded. */
#ifndef PERFCTL_JOIN_H
#define PERFCTL_JOIN_H

#include <pthread.h>
#include <stdint.h>

/* pthread_join(th) that gives up at deadline_ns (ck_now_ns() time): 0 joined, -1 timed out
 * (th is then still joinable). */
int jn_join(pthread_t th, int64_t deadline_ns);

#endif
