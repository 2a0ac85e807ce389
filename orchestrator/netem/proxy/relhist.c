/* relhist.c: release-time error histogram (contract in relhist.h). */
#include "relhist.h"

static int bucket_of(int64_t err_ns) {
    if (err_ns < -1000000) return 0;
    if (err_ns < 1000000) {
        int64_t us = err_ns >= 0 ? err_ns / 1000 : -((-err_ns + 999) / 1000);
        return 1 + (int)(us + 1000);
    }
    if (err_ns < 100000000) return 1 + RH_FINE + (int)((err_ns - 1000000) / 100000);
    return RH_N - 1;
}

static int64_t midpoint_ns(int b) {
    if (b == 0) return -1000000;
    if (b <= RH_FINE) return (int64_t)(b - 1 - 1000) * 1000 + 500;
    if (b < RH_N - 1) return 1000000 + (int64_t)(b - 1 - RH_FINE) * 100000 + 50000;
    return 100000000;
}

static void bump(uint64_t *x, uint64_t by) {
    __atomic_store_n(x, __atomic_load_n(x, __ATOMIC_RELAXED) + by, __ATOMIC_RELAXED);
}

void relhist_add(struct relhist *h, int64_t err_ns) {
    bump(&h->n[bucket_of(err_ns)], 1);
    bump(&h->total, 1);
}

void relhist_accumulate(struct relhist *out, const struct relhist *h) {
    for (int i = 0; i < RH_N; i++) out->n[i] += __atomic_load_n(&h->n[i], __ATOMIC_RELAXED);
    out->total += __atomic_load_n(&h->total, __ATOMIC_RELAXED);
}

void relhist_diff(struct relhist *out, const struct relhist *a, const struct relhist *b) {
    out->total = 0;
    for (int i = 0; i < RH_N; i++) {
        out->n[i] = a->n[i] >= b->n[i] ? a->n[i] - b->n[i] : 0;
        out->total += out->n[i];
    }
}

int64_t relhist_quantile_ns(const struct relhist *h, double q) {
    uint64_t total = 0;
    for (int i = 0; i < RH_N; i++) total += h->n[i];
    if (!total) return 0;
    uint64_t rank = (uint64_t)(q * (double)(total - 1)), seen = 0;
    for (int i = 0; i < RH_N; i++) {
        seen += h->n[i];
        if (seen > rank) return midpoint_ns(i);
    }
    return midpoint_ns(RH_N - 1);
}
