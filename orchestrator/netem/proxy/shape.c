/* shape.c: the per-chunk models of perfctl-proxy (contracts in shape.h). */
#include "shape.h"

#include <math.h>

#define PARETO_SHAPE 3.0

static u64 rotl(u64 x, int k) { return (x << k) | (x >> (64 - k)); }

static u64 rng_u64(struct rng *r) {
    u64 *s = r->s, out = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return out;
}

double rng_01(struct rng *r) { return ((rng_u64(r) >> 11) + 0.5) * (1.0 / 9007199254740992.0); }

void rng_seed(struct rng *r, u64 seed) {
    for (int i = 0; i < 4; i++) { /* splitmix64 */
        u64 z = (seed += 0x9e3779b97f4a7c15ull);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        r->s[i] = z ^ (z >> 31);
    }
}

static double rng_normal(struct rng *r) {
    return sqrt(-2.0 * log(rng_01(r))) * cos(2.0 * M_PI * rng_01(r));
}

void shape_init(struct shape *sh) {
    *sh = (struct shape){.rto_ns = 200000000ull};
}

void shape_finish(struct shape *sh) {
    for (int i = 0; i < 2; i++)
        sh->shaping[i] = sh->delay_ns[i] || sh->jitter_ns || sh->ge_loss_good > 0 ||
                         (sh->ge_p > 0 && sh->ge_loss_bad > 0) || sh->rate_bps[i] > 0;
}

/* One jitter term in ns: the path's AR(1) normal score mapped onto the configured law. */
static double jitter_ns(const struct shape *sh, struct path *p, struct rng *r) {
    double j = (double)sh->jitter_ns, rho = sh->jitter_corr;
    double e = rng_normal(r);
    p->z = p->z_init ? rho * p->z + sqrt(1.0 - rho * rho) * e : e;
    p->z_init = 1;
    double z = p->z;
    switch (sh->dist) {
    case D_NORMAL:
        return j * z;
    case D_PARETO: { /* Lomax, shape a, scale (a-1) j: mean j; 1-u = Phi(-z) keeps the tail exact */
        double tail = 0.5 * erfc(z / M_SQRT2), a = PARETO_SHAPE;
        double x = (a - 1.0) * j * (pow(tail, -1.0 / a) - 1.0);
        return x > 1000.0 * j ? 1000.0 * j : x;
    }
    default:
        return j * (2.0 * (0.5 * erfc(-z / M_SQRT2)) - 1.0);
    }
}

/* Gilbert-Elliott: move the chain one step, then draw the loss in the new state. */
static int ge_lost(const struct shape *sh, struct path *p, struct rng *r) {
    if (sh->ge_p > 0 || p->ge_bad) {
        double u = rng_01(r);
        if (p->ge_bad) { if (u < sh->ge_r) p->ge_bad = 0; }
        else if (u < sh->ge_p) p->ge_bad = 1;
    }
    double l = p->ge_bad ? sh->ge_loss_bad : sh->ge_loss_good;
    return l > 0 && rng_01(r) < l;
}

static int reordered(const struct shape *sh, struct path *p, struct rng *r) {
    double u = rng_01(r);
    if (sh->reorder_corr > 0) u = (1.0 - sh->reorder_corr) * u + sh->reorder_corr * p->reo_last;
    p->reo_last = u;
    return u < sh->reorder;
}

struct release shape_release(const struct shape *sh, struct path *p, struct rng *r, int idx,
                             size_t len, u64 now, int is_data, u64 *link_free) {
    struct release out = {.at = now};
    if (is_data && sh->rate_bps[idx] > 0) {
        u64 ser = (u64)llround((double)len * 8e9 / sh->rate_bps[idx]);
        u64 cur = __atomic_load_n(link_free, __ATOMIC_RELAXED), start, end;
        do {
            start = cur > now ? cur : now;
            end = start + ser;
        } while (!__atomic_compare_exchange_n(link_free, &cur, end, 1, __ATOMIC_RELAXED,
                                              __ATOMIC_RELAXED));
        out.at = end;
    }
    if (is_data && sh->reorder > 0 && reordered(sh, p, r)) {
        out.early = 1;
    } else {
        double extra = (double)sh->delay_ns[idx];
        if (sh->jitter_ns) {
            extra += jitter_ns(sh, p, r);
            if (extra < 0) extra = 0;
        }
        out.at += (u64)llround(extra);
    }
    if (is_data && ge_lost(sh, p, r)) {
        out.at += sh->rto_ns;
        out.lost = 1;
    }
    return out;
}

int shape_event(const struct shape *sh, struct rng *r) {
    if (sh->reset > 0 && rng_01(r) < sh->reset) return EV_RESET;
    if (sh->blackhole > 0 && rng_01(r) < sh->blackhole) return EV_BLACKHOLE;
    return EV_NONE;
}
