/*
 * shape.h: what perfctl-proxy does to one chunk of a TCP stream. Pure computation, no I/O.
 *
 * A `struct shape` is one set of path parameters (the proxy holds one per schedule step and
 * switches between them atomically). A `struct path` is the per-connection, per-direction
 * state of the stochastic models (Gilbert-Elliott state, jitter AR(1) score, reorder memory).
 * A `struct rng` is a per-thread xoshiro256** generator. Nothing here is shared between
 * threads except the bandwidth links (shape_release's `link_free`, updated with atomics).
 *
 * Models, per chunk of one direction (idx 0 = up, client->server; 1 = down):
 *   release = max(arrival, link free) + len*8/rate           (bandwidth; shared link)
 *             + delay + jitter                                 (unless "reordered": + 0)
 *             + rto                                            (if "lost")
 *   jitter:  uniform U(-j,+j), normal N(0,j), pareto Lomax(shape 3, scale 2j) (mean j); with a
 *            correlation rho the draws come from a Gaussian AR(1) score z (corr(z_n, z_n-1) =
 *            rho) mapped through the normal CDF onto the same marginal law (a Gaussian copula),
 *            so the marginal distribution is exactly the uncorrelated one.
 *   loss:    Gilbert-Elliott: a two-state chain per path, good->bad with p, bad->good with r;
 *            a chunk is lost with loss_good in good, loss_bad in bad (tc netem's
 *            `loss gemodel p r 1-h 1-k`). Plain `--loss P` is the chain with p = 0, loss_good
 *            = P. A lost chunk is held back one rto (TCP never loses bytes; see proxy.c).
 *   reorder: like tc netem `reorder P C`: a chunk is chosen with a correlated uniform draw
 *            (netem's: u' = (1-C) u + C u_prev) < P and then skips delay and jitter. Byte order
 *            is kept by the caller (release >= previous release), so a chosen chunk only
 *            arrives early when nothing is ahead of it, as a TCP receiver would deliver it.
 *   events:  per data chunk, with probability `reset` the connection is reset (RST both
 *            ways) and with probability `blackhole` it is black-holed (everything after is
 *            swallowed both ways until an end closes). Not applied to echo (probe) paths.
 */
#ifndef PERFCTL_SHAPE_H
#define PERFCTL_SHAPE_H

#include <stddef.h>
#include <stdint.h>

typedef uint64_t u64;

enum { D_UNIFORM = 0, D_NORMAL, D_PARETO };
enum { EV_NONE = 0, EV_RESET, EV_BLACKHOLE };

struct shape {
    u64 delay_ns[2];
    u64 jitter_ns;
    double jitter_corr; /* [0, 1) */
    int dist;
    double ge_p, ge_r, ge_loss_bad, ge_loss_good;
    u64 rto_ns;
    double rate_bps[2]; /* 0 = unlimited */
    double reorder, reorder_corr;
    double reset, blackhole;
    int shaping[2]; /* derived by shape_finish: the direction needs the queue/timer path */
};

struct path {
    uint8_t ge_bad;
    uint8_t z_init;
    double z;        /* jitter AR(1) normal score */
    double reo_last; /* last correlated uniform of the reorder draw */
};

struct rng {
    u64 s[4];
};

struct release {
    u64 at;        /* absolute CLOCK_MONOTONIC ns, before the caller's order clamp */
    uint8_t lost;  /* held back one rto */
    uint8_t early; /* chosen by the reorder draw */
};

void rng_seed(struct rng *r, u64 seed);
double rng_01(struct rng *r); /* uniform on the open interval (0, 1) */

/* Defaults for a new shape: everything off, rto 200 ms. */
void shape_init(struct shape *sh);
/* Compute sh->shaping[] after the fields are set. */
void shape_finish(struct shape *sh);

/* Release time of one chunk of `len` bytes arriving at `now` in direction idx; data chunks
 * (is_data) consume bandwidth and may be lost or reordered, FIN markers only get the delay.
 * link_free[idx] is the shared link's next free instant (atomically updated). */
struct release shape_release(const struct shape *sh, struct path *p, struct rng *r, int idx,
                             size_t len, u64 now, int is_data, u64 *link_free);

/* EV_NONE, EV_RESET or EV_BLACKHOLE for one data chunk. */
int shape_event(const struct shape *sh, struct rng *r);

#endif
