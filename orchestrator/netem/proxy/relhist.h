/*
 * relhist.h: histogram of signed durations in ns, for the proxy's release-time errors (when a
 * held chunk was handed to send() minus its due time) and receive lags (the wake-up that read
 * a chunk minus its kernel arrival). One writer per histogram (its worker thread); readers on
 * other threads see possibly slightly stale counts (relaxed atomics), never torn ones.
 *
 * Buckets: 1 us wide over [-1 ms, +1 ms), 100 us wide over [+1 ms, +100 ms), and one
 * underflow and one overflow bucket. A quantile is the bucket's midpoint (so +/-0.5 us
 * within +/-1 ms).
 */
#ifndef PERFCTL_RELHIST_H
#define PERFCTL_RELHIST_H

#include <stdint.h>

#define RH_FINE 2000   /* [-1000, +1000) us, 1 us each */
#define RH_COARSE 990  /* [1, 100) ms, 100 us each */
#define RH_N (1 + RH_FINE + RH_COARSE + 1)

struct relhist {
    uint64_t n[RH_N];
    uint64_t total;
};

void relhist_add(struct relhist *h, int64_t err_ns);
/* out += a relaxed snapshot of h */
void relhist_accumulate(struct relhist *out, const struct relhist *h);
/* out = a - b (a taken after b from the same source) */
void relhist_diff(struct relhist *out, const struct relhist *a, const struct relhist *b);
/* quantile q in [0, 1] in ns; 0 when empty */
int64_t relhist_quantile_ns(const struct relhist *h, double q);

#endif
