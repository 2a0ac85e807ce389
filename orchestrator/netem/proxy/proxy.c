/*
 * perfctl-proxy: a TCP proxy that injects latency, jitter, TCP-level loss (random or
 * Gilbert-Elliott bursts), reordering, resets, black holes and a bandwidth limit between a
 * client and a server, for hosts where sch_netem is not available; the path can change on a
 * schedule during a run.
 *
 *   perfctl-proxy --listen 127.0.0.1:P --to 127.0.0.1:Q [shaping flags] [--echo-listen H:E]
 *                 [--threads N] [--cpus 2,3] [--spin-max 300us] [--spin-budget 0.1]
 *                 [--poll 0us] [--poll-budget 0.5]
 *                 [--queue-limit 4194304] [--seed S]
 *                 [--at 10s shaping flags ...]... [--schedule-anchor listen|stdin]
 *   shaping flags: --delay D | --delay-up D --delay-down D, --jitter D
 *                  --distribution uniform|normal|pareto --jitter-correlation C,
 *                  --loss P | --gemodel p,r,loss_bad,loss_good, --rto D,
 *                  --reorder P --reorder-correlation C, --reset P, --blackhole P,
 *                  --bandwidth R | --bandwidth-up R --bandwidth-down R
 *
 * Threads: N worker threads (default: the CPUs of --cpus, else min(usable CPUs, 4)), each
 * with its own SO_REUSEPORT listener, epoll loop, timerfd and heap; a connection lives on one
 * thread, so byte order per connection needs no locks. Thread i is pinned to the i-th CPU of
 * --cpus. The bandwidth links are shared by all threads (one atomic "link free at" instant per
 * direction), so the limit is aggregate over all connections like one tc qdisc. The main
 * thread only handles signals (signalfd: SIGTERM/SIGINT exit 0 after a stats line, SIGUSR1
 * prints a stats line), the schedule and the stdin anchor.
 *
 * Per chunk (see shape.h for the models): release = arrival [+ serialisation] + delay +
 * jitter [+ rto if lost] (reordered chunks skip delay and jitter), clamped so a chunk never
 * leaves before the previous one of its direction: byte order is always kept.
 *
 * Arrival (where the delay starts): the kernel's receive timestamp of the chunk, not the
 * instant the proxy woke to read it, so the proxy's own wake-up (and the time the bytes sat in
 * its socket buffer) is inside the delay instead of on top of it. Every socket has
 * SO_TIMESTAMPNS (set on the listeners, inherited by accepted sockets, and on the upstream
 * socket before connect), read from recvmsg's control message. For TCP the kernel reports
 * the stamp of the last skb the read consumed (skbs coalesced in the receive queue keep the
 * newest stamp): a read of several segments gets the arrival of the newest, so the older ones
 * wait a little longer than the delay and none leaves early. The stamp is CLOCK_REALTIME; it is
 * mapped onto the proxy's CLOCK_MONOTONIC timeline with the offset realtime - monotonic
 * bracketed at each read by three clock reads (mono, real, mono): the offset lies in
 * [real - mono2, real - mono1], the brackets of successive reads are intersected (the offset
 * only changes when the realtime clock is stepped; NTP slewing moves both clocks alike), and
 * the low end is used, so the mapped arrival is never earlier than the true one and later by
 * at most the narrowest bracket seen (tens of ns with a vDSO clock). A bracket that does not
 * overlap the previous ones means the realtime clock was stepped: that read's chunk starts at
 * the read (counted as rx_ts_missing, as is a read without a stamp); a FIN (a read of 0 bytes,
 * no stamp) starts at the wake-up that read it, after the data before it. An arrival
 * is never later than the read, never earlier than the previous arrival of its direction,
 * and never earlier than the moment the proxy resumed reading a direction it had paused for
 * backpressure (bytes the proxy chose not to read yet have not entered the path). The stats
 * line reports rx_lag_* (wake-up that read the chunk minus its arrival: what the delay used
 * to add on top).
 *   - backpressure: a direction holding more than --queue-limit bytes stops reading its
 *     source until it drains to half; TCP flow control slows the sender.
 *   - FIN is forwarded in order after the data before it, with the same delay; a reset
 *     (RST / ECONNRESET / EPIPE) is forwarded as a reset of the other side after that
 *     direction's delay; data still queued toward the reset side is discarded.
 *   - --echo-listen: connections to this second listener go to a built-in echo at the far end
 *     of the same emulated path (up shaping, echo, down shaping); resets and black holes are
 *     not injected there, so the probe can measure the rest.
 * At delay 0 with no shaping a chunk is written straight through (no allocation, no timer).
 *
 * Release precision (sleep, then spin): a worker arms its timerfd `early` before the next due
 * instant, then busy-polls (epoll_wait with timeout 0, serving I/O meanwhile, sched_yield()
 * between empty polls so a runnable thread on the same CPU is not held up) until the instant
 * and releases the chunk then, never before. `early` follows the ~99th percentile of the
 * observed timer wake-up lateness (it starts at 100 us), between 20 us and --spin-max (default
 * 300 us): a vCPU woken from halt can be late by a few hundred microseconds, and a 95th
 * percentile left the slowest 5 % of releases late by that much. CPU cost, bounded: a spin
 * lasts at most --spin-max, and a thread spins at most --spin-budget (default 0.1 = 10 % of
 * one CPU) of every 100 ms; past the budget it only sleeps on the timer for the rest of that
 * window (counted as spin_denied). Timer slack is set to 1 ns.
 * Idle poll (--poll D, default 0 = off): after a burst of I/O a worker keeps polling (same
 * yielding busy-poll) for D before it sleeps, so the next segment of a ping-pong is picked up
 * without a wake-up (one less scheduler wake-up per hop at delay 0). Its CPU cost is bounded
 * by --poll-budget (default 0.5 of one CPU per thread, per 100 ms window), and an idle proxy
 * never polls (the window starts only at I/O). Counted in poll_ns.
 * Every released held chunk adds (send time - due time) to a histogram; the stats line
 * reports its p50/p99 since start (release_err_*) and since the previous stats line (win_*).
 * A second histogram takes (send() returned - due time) for the same chunks (sent_err_*,
 * win_sent_err_*): on loopback the kernel delivers the segment into the peer's socket and
 * wakes the peer inside send(), so this bounds from above when the peer had it. It is what
 * a client sees beyond release_err: after a long idle (a 50 ms hold on a VM whose core ran
 * other guests meanwhile) one send() took 48-64 us here against 22-25 us after 1 ms, the
 * host's cold caches and TLB, not the proxy's timing.
 *
 * Schedule: each `--at T` starts a step that copies the previous step's shaping and applies
 * the shaping flags after it; step k takes effect at anchor + T_k. The anchor is the moment
 * the proxy listens, or with --schedule-anchor stdin the CLOCK_MONOTONIC ns given on stdin as
 * "start NS\n". On each change one line on stderr:
 *   perfctl-proxy change step=K due_ns=D applied_ns=A
 *
 * Prints one line when listening:
 *   perfctl-proxy listening on 127.0.0.1:PORT to HOST:Q[ echo 127.0.0.1:E]
 * Bad flags: one line on stderr, exit 2. Runtime failure to bind: exit 1. On exit prints one
 * stats line on stderr (`perfctl-proxy stats: key=value ...`).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include "relhist.h"
#include "shape.h"

#define MAX_EVENTS 256
#define READ_MAX 65536
#define MAX_THREADS 64
#define MAX_STEPS 64
#define K_DATA 0
#define K_FIN 1
#define SPIN_WINDOW_NS 100000000ull
#define EARLY_MIN_NS 20000ull

enum { T_LISTEN = 1, T_TIMER, T_ENDPOINT };

/* ---------------------------------------------------------------- configuration (read-only after start) */
static struct {
    size_t queue_limit;
    u64 seed;
    int seeded;
    int threads;
    int cpus[MAX_THREADS], ncpus;
    u64 spin_max_ns;
    double spin_budget;
    u64 poll_ns;
    double poll_budget;
    int anchor_stdin;
    /* PERFCTL_PROXY_TEST_SENT_PAUSE_US (tests only): a worker stops this long between a timed
     * chunk's send() and its samples, as a descheduled one would (tests/netem/test_netem_timing.py) */
    u64 test_sent_pause_ns;
} cfg = {.queue_limit = 4u << 20, .spin_max_ns = 300000, .spin_budget = 0.1, .poll_budget = 0.5};

static struct shape steps[MAX_STEPS];
static u64 step_at_ns[MAX_STEPS];
static int nsteps = 1;
static const struct shape *cur_shape = &steps[0]; /* switched atomically by the main thread */
static u64 link_free[2];                          /* shared bandwidth links (atomics) */
static struct sockaddr_storage up_addr;
static socklen_t up_addrlen;

static const struct shape *shape_now(void) { return __atomic_load_n(&cur_shape, __ATOMIC_ACQUIRE); }

/* ---------------------------------------------------------------- per-thread state */
struct stats {
    u64 conns, conns_open, conns_peak, chunks[2], held[2], bytes[2], resets, refused, reordered[2],
        injected_resets, blackholed, spin_ns, spin_denied, poll_ns, rx_ts_missing;
};
#define STAT_ADD(field, v) __atomic_store_n(&st.field, st.field + (v), __ATOMIC_RELAXED)

struct chunk {
    struct chunk *next;
    u64 release;
    uint32_t len, off;
    uint8_t kind, timed, tried;
    char data[];
};

struct conn;

struct endpoint {
    int type; /* T_ENDPOINT */
    int fd;
    uint32_t mask;
    uint8_t registered;
    uint8_t side; /* 0 client, 1 server */
    struct conn *c;
};

struct dir {
    struct chunk *head, *tail;
    size_t queued;
    u64 last_release;
    u64 arrival_floor; /* no later chunk of this direction arrived before this instant */
    u64 rst_at;        /* 0: no reset pending */
    u64 heap_key;
    int heap_idx; /* -1: not in heap */
    uint8_t idx;  /* 0 up: ep[0]->ep[1]; 1 down: ep[1]->ep[0] */
    uint8_t eof_read, fin_sent, paused, write_blocked;
    struct conn *c;
};

struct conn {
    struct endpoint ep[2];
    struct dir d[2];
    struct path path[2];
    uint8_t connecting, echo, dead, blackholed;
    struct conn *next_dead;
};

struct listener {
    int type; /* T_LISTEN */
    int fd;
    int echo;
};

struct worker {
    pthread_t tid;
    int idx;
    struct listener main_l, echo_l;
    struct stats *st;     /* the thread's own, published for the stats line */
    struct relhist *rh, *rxh, *sh;
    u64 *early_ns;
    u64 *rel_seq; /* odd while a timed chunk's send and its two samples are under way */
};

static struct worker workers[MAX_THREADS];

static __thread int epfd, tfd;
static __thread u64 timer_armed; /* absolute ns the timerfd is armed for, 0 = disarmed */
static __thread u64 early_ns = 100000;
static __thread u64 spin_win_start, spin_win_ns;
static __thread u64 poll_until, poll_win_start, poll_win_ns;
static __thread struct conn *dead_list;
static __thread int reserve_fd = -1;
static __thread char rbuf[READ_MAX];
static __thread struct stats st;
static __thread struct relhist rh;  /* release error: send time - due time */
static __thread struct relhist rxh; /* rx lag: wake-up that read a chunk - its arrival */
static __thread struct relhist sh;  /* send completion: send() returned - due time */
/* A seqlock over rh and sh: odd from just before a timed chunk's send() until both of its
 * samples are in. The stats line waits for it to be even, so it never shows a chunk the peer
 * may already have read with its release sample and without its send one. */
static __thread u64 rel_seq;
static __thread int64_t rt_off_lo, rt_off_hi; /* CLOCK_REALTIME - CLOCK_MONOTONIC is in here */
static __thread int rt_off_known;
static __thread struct rng rng;

/* ---------------------------------------------------------------- helpers */
static u64 now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (u64)ts.tv_sec * 1000000000ull + (u64)ts.tv_nsec;
}

static int64_t ts_ns(const struct timespec *ts) { return (int64_t)ts->tv_sec * 1000000000ll + ts->tv_nsec; }

/* Ask the kernel to stamp every segment this socket receives (CLOCK_REALTIME, SO_TIMESTAMPNS).
 * Set on a listener it is inherited by the accepted sockets, and the first call also switches
 * the kernel's stamping on before any connection exists. */
static void enable_rx_stamps(int fd) {
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_TIMESTAMPNS, &one, sizeof one);
}

/* The CLOCK_MONOTONIC instant a chunk stamped `rx_real_ns` (CLOCK_REALTIME, < 0: no stamp)
 * arrived, never earlier than the true one (the mapping is in the header comment); *read_ns
 * gets the monotonic instant just after the read, the latest the arrival can be. Returns 0
 * when there is no usable stamp (none given, or the realtime clock was stepped). */
static u64 rx_arrival_ns(int64_t rx_real_ns, u64 *read_ns) {
    struct timespec m1, r, m2;
    clock_gettime(CLOCK_MONOTONIC, &m1);
    clock_gettime(CLOCK_REALTIME, &r);
    clock_gettime(CLOCK_MONOTONIC, &m2);
    int64_t lo = ts_ns(&r) - ts_ns(&m2), hi = ts_ns(&r) - ts_ns(&m1);
    *read_ns = (u64)ts_ns(&m2);
    int stepped = 0;
    if (rt_off_known && lo <= rt_off_hi && hi >= rt_off_lo) {
        if (lo > rt_off_lo) rt_off_lo = lo;
        if (hi < rt_off_hi) rt_off_hi = hi;
    } else {
        stepped = rt_off_known;
        rt_off_lo = lo;
        rt_off_hi = hi;
        rt_off_known = 1;
    }
    if (rx_real_ns < 0 || stepped) return 0;
    int64_t at = rx_real_ns - rt_off_lo;
    if (at > (int64_t)*read_ns) at = (int64_t)*read_ns;
    return at > 0 ? (u64)at : 0;
}

static void die_usage(const char *msg, const char *arg) {
    fprintf(stderr, "perfctl-proxy: %s%s%s\n", msg, arg ? ": " : "", arg ? arg : "");
    exit(2);
}

/* ---------------------------------------------------------------- parsing */
static int parse_double(const char *s, double *out, char **end) {
    errno = 0;
    double v = strtod(s, end);
    if (*end == s || errno || !isfinite(v) || v < 0) return -1;
    *out = v;
    return 0;
}

static u64 parse_duration(const char *flag, const char *s) {
    char *end;
    double v;
    if (parse_double(s, &v, &end)) die_usage("bad duration for", flag);
    double mul;
    if (!*end || !strcmp(end, "s")) mul = 1e9;
    else if (!strcmp(end, "ms")) mul = 1e6;
    else if (!strcmp(end, "us")) mul = 1e3;
    else if (!strcmp(end, "ns")) mul = 1;
    else { die_usage("bad duration unit (use ns, us, ms, s) for", flag); mul = 0; }
    return (u64)llround(v * mul);
}

/* a rate in bits/s; exactly "0" means unlimited (how a schedule step switches it off) */
static double parse_rate(const char *flag, const char *s) {
    char *end;
    double v;
    if (!strcmp(s, "0")) return 0;
    if (parse_double(s, &v, &end) || v <= 0) die_usage("bad rate for", flag);
    static const struct { const char *u; double m; } units[] = {
        {"", 1}, {"bit", 1}, {"kbit", 1e3}, {"mbit", 1e6}, {"gbit", 1e9},
        {"bps", 8}, {"kbps", 8e3}, {"mbps", 8e6}, {"gbps", 8e9}};
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
        if (!strcasecmp(end, units[i].u)) return v * units[i].m;
    die_usage("bad rate unit (bit, kbit, mbit, gbit, bps, kbps, mbps, gbps) for", flag);
    return 0;
}

/* a probability: 0.01 or 1%; `below_one` refuses 1 (correlations) */
static double parse_prob_end(const char *flag, const char *s, char **endp, int below_one) {
    char *end;
    double v;
    if (parse_double(s, &v, &end)) die_usage("bad probability for", flag);
    if (*end == '%') { v /= 100.0; end++; }
    if (v > 1.0 || (below_one && v >= 1.0))
        die_usage(below_one ? "must be in [0, 1) for" : "must be in [0, 1] for", flag);
    *endp = end;
    return v;
}

static double parse_prob(const char *flag, const char *s, int below_one) {
    char *end;
    double v = parse_prob_end(flag, s, &end, below_one);
    if (*end) die_usage("bad probability for", flag);
    return v;
}

static void parse_gemodel(const char *s, struct shape *sh) {
    double v[4];
    const char *p = s;
    for (int i = 0; i < 4; i++) {
        char *end;
        v[i] = parse_prob_end("--gemodel", p, &end, 0);
        if (i < 3 && *end != ',') die_usage("--gemodel takes p,r,loss_bad,loss_good", s);
        if (i == 3 && *end) die_usage("--gemodel takes p,r,loss_bad,loss_good", s);
        p = end + 1;
    }
    sh->ge_p = v[0];
    sh->ge_r = v[1];
    sh->ge_loss_bad = v[2];
    sh->ge_loss_good = v[3];
}

static void parse_cpus(const char *s) {
    const char *p = s;
    cfg.ncpus = 0;
    while (*p) {
        char *end;
        long c = strtol(p, &end, 10);
        if (end == p || c < 0 || c >= CPU_SETSIZE || cfg.ncpus == MAX_THREADS)
            die_usage("--cpus takes a comma-separated list of CPU numbers", s);
        cfg.cpus[cfg.ncpus++] = (int)c;
        if (*end == ',') end++;
        else if (*end) die_usage("--cpus takes a comma-separated list of CPU numbers", s);
        p = end;
    }
    if (!cfg.ncpus) die_usage("--cpus takes a comma-separated list of CPU numbers", s);
}

/* one shaping flag into sh; 0 if `a` is no shaping flag */
static int parse_shaping(const char *a, const char *v, struct shape *sh) {
    if (!strcmp(a, "--delay")) sh->delay_ns[0] = sh->delay_ns[1] = parse_duration(a, v);
    else if (!strcmp(a, "--delay-up")) sh->delay_ns[0] = parse_duration(a, v);
    else if (!strcmp(a, "--delay-down")) sh->delay_ns[1] = parse_duration(a, v);
    else if (!strcmp(a, "--jitter")) sh->jitter_ns = parse_duration(a, v);
    else if (!strcmp(a, "--jitter-correlation")) sh->jitter_corr = parse_prob(a, v, 1);
    else if (!strcmp(a, "--rto")) sh->rto_ns = parse_duration(a, v);
    else if (!strcmp(a, "--loss")) {
        sh->ge_loss_good = parse_prob(a, v, 0);
        sh->ge_p = sh->ge_r = sh->ge_loss_bad = 0;
    } else if (!strcmp(a, "--gemodel")) parse_gemodel(v, sh);
    else if (!strcmp(a, "--reorder")) sh->reorder = parse_prob(a, v, 0);
    else if (!strcmp(a, "--reorder-correlation")) sh->reorder_corr = parse_prob(a, v, 1);
    else if (!strcmp(a, "--reset")) sh->reset = parse_prob(a, v, 0);
    else if (!strcmp(a, "--blackhole")) sh->blackhole = parse_prob(a, v, 0);
    else if (!strcmp(a, "--bandwidth")) sh->rate_bps[0] = sh->rate_bps[1] = parse_rate(a, v);
    else if (!strcmp(a, "--bandwidth-up")) sh->rate_bps[0] = parse_rate(a, v);
    else if (!strcmp(a, "--bandwidth-down")) sh->rate_bps[1] = parse_rate(a, v);
    else if (!strcmp(a, "--distribution")) {
        if (!strcmp(v, "uniform")) sh->dist = D_UNIFORM;
        else if (!strcmp(v, "normal")) sh->dist = D_NORMAL;
        else if (!strcmp(v, "pareto")) sh->dist = D_PARETO;
        else die_usage("--distribution must be uniform, normal or pareto, not", v);
    } else return 0;
    return 1;
}

static void parse_hostport(const char *flag, const char *s, struct sockaddr_storage *ss,
                           socklen_t *len) {
    char host[256];
    const char *colon = strrchr(s, ':');
    if (!colon || colon == s || (size_t)(colon - s) >= sizeof host) die_usage("expected HOST:PORT for", flag);
    memcpy(host, s, (size_t)(colon - s));
    host[colon - s] = 0;
    char *end;
    long port = strtol(colon + 1, &end, 10);
    if (*end || end == colon + 1 || port < 0 || port > 65535) die_usage("bad port for", flag);
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *res;
    if (getaddrinfo(host, NULL, &hints, &res) || !res) die_usage("cannot resolve host (IPv4) for", flag);
    memcpy(ss, res->ai_addr, res->ai_addrlen);
    *len = res->ai_addrlen;
    ((struct sockaddr_in *)ss)->sin_port = htons((uint16_t)port);
    freeaddrinfo(res);
}

/* ---------------------------------------------------------------- heap of directions by due time */
static __thread struct dir **heap;
static __thread int heap_n, heap_cap;

static void heap_swap(int a, int b) {
    struct dir *t = heap[a];
    heap[a] = heap[b];
    heap[b] = t;
    heap[a]->heap_idx = a;
    heap[b]->heap_idx = b;
}
static void heap_up(int i) {
    while (i > 0) {
        int p = (i - 1) / 2;
        if (heap[p]->heap_key <= heap[i]->heap_key) break;
        heap_swap(p, i);
        i = p;
    }
}
static void heap_down(int i) {
    for (;;) {
        int l = 2 * i + 1, r = l + 1, m = i;
        if (l < heap_n && heap[l]->heap_key < heap[m]->heap_key) m = l;
        if (r < heap_n && heap[r]->heap_key < heap[m]->heap_key) m = r;
        if (m == i) return;
        heap_swap(m, i);
        i = m;
    }
}
static void heap_remove(struct dir *d) {
    int i = d->heap_idx;
    if (i < 0) return;
    d->heap_idx = -1;
    heap_n--;
    if (i != heap_n) {
        heap[i] = heap[heap_n];
        heap[i]->heap_idx = i;
        heap_up(i);
        heap_down(heap[i]->heap_idx);
    }
}
static void heap_set(struct dir *d, u64 key) {
    if (d->heap_idx >= 0) {
        u64 old = d->heap_key;
        d->heap_key = key;
        if (key < old) heap_up(d->heap_idx);
        else if (key > old) heap_down(d->heap_idx);
        return;
    }
    if (heap_n == heap_cap) {
        heap_cap = heap_cap ? heap_cap * 2 : 1024;
        heap = realloc(heap, (size_t)heap_cap * sizeof *heap);
        if (!heap) { perror("perfctl-proxy: realloc"); exit(1); }
    }
    d->heap_key = key;
    d->heap_idx = heap_n;
    heap[heap_n++] = d;
    heap_up(d->heap_idx);
}

/* arm the timerfd for absolute instant `want` (0 = disarm) */
static void arm_timer(u64 want) {
    if (want == timer_armed) return;
    struct itimerspec its = {0};
    if (want) {
        its.it_value.tv_sec = (time_t)(want / 1000000000ull);
        its.it_value.tv_nsec = (long)(want % 1000000000ull);
    }
    timerfd_settime(tfd, TFD_TIMER_ABSTIME, &its, NULL);
    timer_armed = want;
}

/* may this thread spin now? (the budget: spin_budget of every SPIN_WINDOW_NS) */
static int spin_allowed(u64 now) {
    if (now - spin_win_start >= SPIN_WINDOW_NS) {
        spin_win_start = now;
        spin_win_ns = 0;
    }
    return (double)spin_win_ns < cfg.spin_budget * (double)SPIN_WINDOW_NS;
}

/* may this thread poll for I/O now? (--poll after I/O, within --poll-budget) */
static int poll_allowed(u64 now) {
    if (now >= poll_until) return 0;
    if (now - poll_win_start >= SPIN_WINDOW_NS) {
        poll_win_start = now;
        poll_win_ns = 0;
    }
    return (double)poll_win_ns < cfg.poll_budget * (double)SPIN_WINDOW_NS;
}

/* ---------------------------------------------------------------- epoll interest */
static void ep_sync(struct endpoint *e) {
    struct conn *c = e->c;
    if (e->fd < 0 || c->dead) return;
    uint32_t m = 0;
    struct dir *src = &c->d[e->side], *dst = &c->d[1 - e->side];
    if (e->side == 1 && c->connecting) m = EPOLLOUT;
    else {
        if (!src->eof_read && !src->paused && !src->rst_at) m |= EPOLLIN;
        if (dst->write_blocked) m |= EPOLLOUT;
    }
    if (m == e->mask && (m != 0) == e->registered) return;
    struct epoll_event ev = {.events = m, .data.ptr = e};
    if (m == 0) {
        if (e->registered) epoll_ctl(epfd, EPOLL_CTL_DEL, e->fd, NULL);
        e->registered = 0;
    } else if (!e->registered) {
        if (epoll_ctl(epfd, EPOLL_CTL_ADD, e->fd, &ev) == 0) e->registered = 1;
    } else {
        epoll_ctl(epfd, EPOLL_CTL_MOD, e->fd, &ev);
    }
    e->mask = m;
}

/* ---------------------------------------------------------------- connection life */
static void close_ep(struct endpoint *e, int reset) {
    if (e->fd < 0) return;
    if (reset) {
        struct linger lg = {1, 0};
        setsockopt(e->fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
    }
    close(e->fd); /* also removes it from the epoll set */
    e->fd = -1;
    e->registered = 0;
    e->mask = 0;
}

static void free_queue(struct dir *d) {
    struct chunk *ch = d->head;
    while (ch) {
        struct chunk *n = ch->next;
        free(ch);
        ch = n;
    }
    d->head = d->tail = NULL;
    d->queued = 0;
}

static void kill_conn(struct conn *c, int reset_side0, int reset_side1) {
    if (c->dead) return;
    c->dead = 1;
    close_ep(&c->ep[0], reset_side0);
    close_ep(&c->ep[1], reset_side1);
    heap_remove(&c->d[0]);
    heap_remove(&c->d[1]);
    free_queue(&c->d[0]);
    free_queue(&c->d[1]);
    STAT_ADD(conns_open, -1);
    c->next_dead = dead_list;
    dead_list = c;
}

static void maybe_done(struct conn *c) {
    if (!c->dead && c->d[0].fin_sent && c->d[1].fin_sent) kill_conn(c, 0, 0);
}

/* the path swallows everything from now on, both ways, until an end closes */
static void blackhole(struct conn *c) {
    c->blackholed = 1;
    STAT_ADD(blackholed, 1);
    for (int i = 0; i < 2; i++) {
        heap_remove(&c->d[i]);
        free_queue(&c->d[i]);
        c->d[i].write_blocked = 0;
        c->d[i].paused = 0;
    }
    ep_sync(&c->ep[0]);
    ep_sync(&c->ep[1]);
}

/* side `side` was reset (or its connect failed): close it now, reset the other side after the
 * delay of the direction side -> other. */
static void handle_reset(struct conn *c, int side, u64 now) {
    if (c->dead) return;
    STAT_ADD(resets, 1);
    if (c->echo || c->blackholed) { kill_conn(c, 1, 1); return; }
    struct dir *toward_other = &c->d[side], *toward_me = &c->d[1 - side];
    close_ep(&c->ep[side], 1);
    free_queue(toward_me);
    toward_me->fin_sent = 1;
    toward_me->eof_read = 1;
    toward_me->write_blocked = 0;
    heap_remove(toward_me);
    if (c->ep[1 - side].fd < 0) { kill_conn(c, 1, 1); return; }
    u64 at = now + shape_now()->delay_ns[side];
    if (at < toward_other->last_release) at = toward_other->last_release;
    if (at == 0) at = 1;
    toward_other->rst_at = at;
    toward_other->eof_read = 1;
    u64 key = at;
    if (toward_other->head && !toward_other->write_blocked && toward_other->head->release < key)
        key = toward_other->head->release;
    heap_set(toward_other, key);
    ep_sync(&c->ep[1 - side]);
}

/* bytes queued that reading `side` adds to (for the echo, both directions of the loop) */
static size_t queued_for(struct conn *c, int side) {
    return c->echo ? c->d[0].queued + c->d[1].queued : c->d[side].queued;
}

static void pump(struct dir *d, u64 now);

/* queue a chunk whose delay starts at `arrival` (the header's "Arrival"; it may be after the
 * wake-up `now` when the bytes came in between) in direction d, or send it straight on */
static void enqueue(struct dir *d, const char *data, size_t n, u64 arrival, u64 now, int kind) {
    struct conn *c = d->c;
    struct endpoint *dst = &c->ep[1 - d->idx];
    const struct shape *sh = shape_now();
    if (kind == K_DATA) {
        STAT_ADD(chunks[d->idx], 1);
        STAT_ADD(bytes[d->idx], n);
        if (!c->echo && (sh->reset > 0 || sh->blackhole > 0)) {
            int ev = shape_event(sh, &rng);
            if (ev == EV_RESET) { STAT_ADD(injected_resets, 1); kill_conn(c, 1, 1); return; }
            if (ev == EV_BLACKHOLE) { blackhole(c); return; }
        }
    }
    size_t off = 0;
    if (kind == K_DATA && !sh->shaping[d->idx] && !d->head && !d->write_blocked && !c->connecting &&
        !c->echo && dst->fd >= 0) {
        /* fast path: straight through */
        ssize_t w = send(dst->fd, data, n, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w == (ssize_t)n) return;
        if (w < 0) {
            if (errno != EAGAIN && errno != EWOULDBLOCK) { handle_reset(c, 1 - d->idx, now); return; }
            w = 0;
        }
        off = (size_t)w;
    }
    struct chunk *ch = malloc(sizeof *ch + (n - off));
    if (!ch) { perror("perfctl-proxy: malloc"); exit(1); }
    ch->next = NULL;
    ch->len = (uint32_t)(n - off);
    ch->off = 0;
    ch->kind = (uint8_t)kind;
    ch->tried = 0;
    ch->timed = (uint8_t)(sh->shaping[d->idx] != 0);
    if (n - off) memcpy(ch->data, data + off, n - off);
    u64 rel = now;
    if (ch->timed) {
        struct release r = shape_release(sh, &c->path[d->idx], &rng, d->idx, n, arrival,
                                         kind == K_DATA, &link_free[d->idx]);
        rel = r.at;
        if (r.lost) STAT_ADD(held[d->idx], 1);
        if (r.early) STAT_ADD(reordered[d->idx], 1);
    }
    if (rel < d->last_release) rel = d->last_release;
    d->last_release = rel;
    ch->release = rel;
    if (d->tail) d->tail->next = ch;
    else d->head = ch;
    d->tail = ch;
    d->queued += ch->len;
    if (d->head == ch) {
        if (off) { /* partial fast-path write: wait for EPOLLOUT */
            d->write_blocked = 1;
            ep_sync(dst);
        } else if (!d->write_blocked) {
            if (rel <= now) pump(d, now);
            else heap_set(d, d->rst_at && d->rst_at < rel ? d->rst_at : rel);
        }
    }
}

static void rel_seq_enter(void) {
    __atomic_store_n(&rel_seq, rel_seq + 1, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_RELEASE);
}

static void rel_seq_leave(void) { __atomic_store_n(&rel_seq, rel_seq + 1, __ATOMIC_RELEASE); }

static void pump(struct dir *d, u64 now) {
    struct conn *c = d->c;
    if (c->dead) return;
    struct endpoint *dst = &c->ep[1 - d->idx];
    struct dir *srcdir = c->echo ? &c->d[0] : d; /* whose reading this queue throttles */
    if (d->rst_at && d->rst_at <= now) {
        /* deliver the reset to dst; the source side is already closed */
        kill_conn(c, 1, 1);
        return;
    }
    if (c->connecting && d->idx == 0) { heap_remove(d); return; }
    while (d->head) {
        struct chunk *ch = d->head;
        if (ch->release > now) {
            heap_set(d, d->rst_at && d->rst_at < ch->release ? d->rst_at : ch->release);
            goto out;
        }
        int first_try = 0; /* a timed chunk's first send: both histograms take it */
        int64_t rel_err = 0;
        if (ch->timed && !ch->tried) {
            ch->tried = 1;
            first_try = 1;
            rel_err = (int64_t)(now_ns() - ch->release);
            if (ch->kind == K_FIN || (c->echo && d->idx == 0) || dst->fd < 0) {
                rel_seq_enter();
                relhist_add(&rh, rel_err); /* no send() of its own: its release is its send */
                rel_seq_leave();
                first_try = 0;
            }
        }
        if (ch->kind == K_FIN) {
            if (c->echo && d->idx == 0) {
                struct dir *back = &c->d[1];
                back->eof_read = 1;
                enqueue(back, NULL, 0, now, now, K_FIN);
            } else if (dst->fd >= 0) {
                shutdown(dst->fd, SHUT_WR);
            }
            d->fin_sent = 1;
        } else if (c->echo && d->idx == 0) {
            d->queued -= ch->len - ch->off;
            enqueue(&c->d[1], ch->data + ch->off, ch->len - ch->off, now, now, K_DATA);
            if (c->dead) return;
        } else if (dst->fd >= 0) {
            if (first_try) rel_seq_enter();
            ssize_t w = send(dst->fd, ch->data + ch->off, ch->len - ch->off, MSG_NOSIGNAL | MSG_DONTWAIT);
            if (first_try) { /* both samples at once, after send() returned */
                if (cfg.test_sent_pause_ns) {
                    struct timespec ts = {0, (long)cfg.test_sent_pause_ns};
                    nanosleep(&ts, NULL);
                }
                u64 sent_at = now_ns();
                relhist_add(&rh, rel_err);
                if (w > 0) relhist_add(&sh, (int64_t)(sent_at - ch->release));
                rel_seq_leave();
            }
            if (w < 0) {
                if (errno == EAGAIN || errno == EWOULDBLOCK) w = 0;
                else { handle_reset(c, 1 - d->idx, now); return; }
            }
            ch->off += (uint32_t)w;
            d->queued -= (size_t)w;
            if (ch->off < ch->len) {
                if (d->rst_at) heap_set(d, d->rst_at);
                else heap_remove(d);
                if (!d->write_blocked) { d->write_blocked = 1; ep_sync(dst); }
                return;
            }
        } else {
            d->queued -= ch->len - ch->off;
        }
        d->head = ch->next;
        if (!d->head) d->tail = NULL;
        free(ch);
        if (srcdir->paused && queued_for(c, srcdir->idx) <= cfg.queue_limit / 2) {
            srcdir->paused = 0;
            if (srcdir->arrival_floor < now) srcdir->arrival_floor = now; /* see the header */
            ep_sync(&c->ep[srcdir->idx]);
        }
    }
    if (d->rst_at) heap_set(d, d->rst_at);
    else heap_remove(d);
out:
    if (d->write_blocked) { d->write_blocked = 0; ep_sync(dst); }
    maybe_done(c);
}

/* reads of about 1 ms of link time at the tightest bandwidth, so bursts stay small */
static size_t read_cap(const struct shape *sh) {
    double rate = 0;
    for (int i = 0; i < 2; i++)
        if (sh->rate_bps[i] > 0 && (rate == 0 || sh->rate_bps[i] < rate)) rate = sh->rate_bps[i];
    if (rate == 0) return READ_MAX;
    double cap = rate / 8.0 / 1000.0;
    if (cap < 1460) cap = 1460;
    if (cap > READ_MAX) cap = READ_MAX;
    return (size_t)cap;
}

/* one read of up to cap bytes into rbuf; *rx_real_ns gets the kernel's receive stamp
 * (CLOCK_REALTIME ns of the last segment read), or -1 without one */
static ssize_t read_stamped(int fd, size_t cap, int64_t *rx_real_ns) {
    union {
        char buf[CMSG_SPACE(sizeof(struct timespec))];
        struct cmsghdr align;
    } ctl;
    struct iovec iov = {.iov_base = rbuf, .iov_len = cap};
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf,
                        .msg_controllen = sizeof ctl.buf};
    ssize_t n = recvmsg(fd, &mh, MSG_DONTWAIT);
    *rx_real_ns = -1;
    if (n <= 0) return n;
    for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm)) {
        if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_TIMESTAMPNS) {
            struct timespec ts;
            memcpy(&ts, CMSG_DATA(cm), sizeof ts);
            *rx_real_ns = ts_ns(&ts);
        }
    }
    return n;
}

/* where the delay of a chunk just read starts (the header's "Arrival"); `now` is the wake-up */
static u64 chunk_arrival(struct dir *d, int64_t rx_real_ns, u64 now) {
    u64 read_ns, at = rx_arrival_ns(rx_real_ns, &read_ns);
    if (!at) {
        STAT_ADD(rx_ts_missing, 1);
        at = read_ns;
    } else {
        relhist_add(&rxh, (int64_t)(now - at));
    }
    if (at < d->arrival_floor) at = d->arrival_floor;
    d->arrival_floor = at;
    return at;
}

static void on_readable(struct conn *c, int side, u64 now) {
    struct dir *d = &c->d[side];
    struct endpoint *e = &c->ep[side];
    const struct shape *sh = shape_now();
    size_t cap = read_cap(sh);
    for (int iter = 0; iter < 4 && !c->dead && e->fd >= 0; iter++) {
        int64_t rx_real_ns;
        ssize_t n = read_stamped(e->fd, cap, &rx_real_ns);
        if (n > 0) {
            if (c->blackholed) continue; /* swallowed */
            /* only a held chunk needs its arrival (the straight-through path sends it now) */
            u64 arrival = sh->shaping[side] ? chunk_arrival(d, rx_real_ns, now) : now;
            enqueue(d, rbuf, (size_t)n, arrival, now, K_DATA);
            if (c->dead || c->blackholed) return;
            if (queued_for(c, side) > cfg.queue_limit && !d->paused) {
                d->paused = 1;
                ep_sync(e);
                return;
            }
            if ((size_t)n < cap) return;
        } else if (n == 0) {
            if (c->blackholed) { kill_conn(c, 0, 0); return; }
            d->eof_read = 1;
            ep_sync(e);
            enqueue(d, NULL, 0, now, now, K_FIN);
            return;
        } else {
            if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return;
            handle_reset(c, side, now);
            return;
        }
    }
}

static void on_endpoint(struct endpoint *e, uint32_t ev, u64 now) {
    struct conn *c = e->c;
    if (c->dead || e->fd < 0) return;
    int side = e->side;
    if (side == 1 && c->connecting) {
        int err = 0;
        socklen_t len = sizeof err;
        getsockopt(e->fd, SOL_SOCKET, SO_ERROR, &err, &len);
        if (err) { STAT_ADD(refused, 1); handle_reset(c, 1, now); return; }
        if (!(ev & (EPOLLOUT | EPOLLERR | EPOLLHUP))) return;
        c->connecting = 0;
        ep_sync(&c->ep[1]);
        ep_sync(&c->ep[0]);
        if (c->d[0].head) pump(&c->d[0], now);
        return;
    }
    if (ev & EPOLLERR) {
        int err = 0;
        socklen_t len = sizeof err;
        getsockopt(e->fd, SOL_SOCKET, SO_ERROR, &err, &len);
        if (err) { handle_reset(c, side, now); return; }
    }
    if (ev & EPOLLOUT) {
        struct dir *toward = &c->d[1 - side];
        if (toward->write_blocked) {
            toward->write_blocked = 0;
            pump(toward, now);
            if (c->dead || e->fd < 0) return;
            ep_sync(e);
        }
    }
    if (ev & (EPOLLIN | EPOLLHUP | EPOLLRDHUP)) {
        if (!c->d[side].eof_read && !c->d[side].paused) on_readable(c, side, now);
        else if ((ev & EPOLLHUP) && !c->d[1 - side].fin_sent) handle_reset(c, side, now);
    }
}

static void set_nodelay(int fd) {
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

static void on_accept(struct listener *l, u64 now) {
    for (int i = 0; i < 64; i++) {
        int fd = accept4(l->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EMFILE || errno == ENFILE) {
                /* out of descriptors: refuse one connection so the listener does not spin */
                if (reserve_fd >= 0) {
                    close(reserve_fd);
                    int x = accept(l->fd, NULL, NULL);
                    if (x >= 0) close(x);
                    reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
                }
                fprintf(stderr, "perfctl-proxy: out of file descriptors, refused a connection\n");
            }
            return;
        }
        struct conn *c = calloc(1, sizeof *c);
        if (!c) { perror("perfctl-proxy: calloc"); exit(1); }
        for (int s = 0; s < 2; s++) {
            c->ep[s].type = T_ENDPOINT;
            c->ep[s].side = (uint8_t)s;
            c->ep[s].c = c;
            c->ep[s].fd = -1;
            c->d[s].idx = (uint8_t)s;
            c->d[s].c = c;
            c->d[s].heap_idx = -1;
        }
        c->ep[0].fd = fd;
        set_nodelay(fd);
        STAT_ADD(conns, 1);
        STAT_ADD(conns_open, 1);
        if (st.conns_open > st.conns_peak) STAT_ADD(conns_peak, st.conns_open - st.conns_peak);
        if (l->echo) {
            c->echo = 1;
        } else {
            int ufd = socket(up_addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
            if (ufd < 0) { kill_conn(c, 1, 1); continue; }
            set_nodelay(ufd);
            enable_rx_stamps(ufd);
            c->ep[1].fd = ufd;
            if (connect(ufd, (struct sockaddr *)&up_addr, up_addrlen) < 0) {
                if (errno != EINPROGRESS) { STAT_ADD(refused, 1); handle_reset(c, 1, now); continue; }
                c->connecting = 1;
            }
            ep_sync(&c->ep[1]);
        }
        ep_sync(&c->ep[0]);
    }
}

/* ---------------------------------------------------------------- one worker thread */
static void release_due(void) {
    u64 now = now_ns();
    for (int guard = 0; heap_n && heap[0]->heap_key <= now && guard < 100000; guard++) {
        struct dir *d = heap[0];
        heap_remove(d);
        pump(d, now);
        if ((guard & 63) == 63) now = now_ns();
    }
}

static void *worker_main(void *arg) {
    struct worker *w = arg;
    if (cfg.ncpus) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(cfg.cpus[w->idx % cfg.ncpus], &set);
        pthread_setaffinity_np(pthread_self(), sizeof set, &set);
    }
    rng_seed(&rng, (cfg.seeded ? cfg.seed : (now_ns() ^ ((u64)getpid() << 32))) + 0x1000003ull * (u64)w->idx);
    w->rh = &rh;
    w->rxh = &rxh;
    w->sh = &sh;
    w->rel_seq = &rel_seq;
    w->early_ns = &early_ns;
    __atomic_store_n(&w->st, &st, __ATOMIC_RELEASE);
    spin_win_start = now_ns();
    if (early_ns > cfg.spin_max_ns) early_ns = cfg.spin_max_ns;
    reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    epfd = epoll_create1(EPOLL_CLOEXEC);
    tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    if (epfd < 0 || tfd < 0) { perror("perfctl-proxy: worker setup"); exit(1); }
    static int timer_tag = T_TIMER;
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &timer_tag};
    epoll_ctl(epfd, EPOLL_CTL_ADD, tfd, &ev);
    ev.data.ptr = &w->main_l;
    epoll_ctl(epfd, EPOLL_CTL_ADD, w->main_l.fd, &ev);
    if (w->echo_l.fd >= 0) {
        ev.data.ptr = &w->echo_l;
        epoll_ctl(epfd, EPOLL_CTL_ADD, w->echo_l.fd, &ev);
    }
    struct epoll_event evs[MAX_EVENTS];
    for (;;) {
        u64 now = now_ns();
        int timeout = -1, spinning = 0, polling = 0;
        if (heap_n) {
            u64 key = heap[0]->heap_key;
            if (key <= now) timeout = 0;
            else if (key - now <= early_ns) {
                if (spin_allowed(now)) { timeout = 0; spinning = 1; }
                else { STAT_ADD(spin_denied, 1); arm_timer(key); }
            } else arm_timer(key - early_ns);
        }
        if (timeout != 0 && cfg.poll_ns && poll_allowed(now)) { timeout = 0; polling = 1; }
        int n = epoll_wait(epfd, evs, MAX_EVENTS, timeout);
        if (n < 0) {
            if (errno == EINTR) continue;
            perror("perfctl-proxy: epoll_wait");
            exit(1);
        }
        u64 t = now_ns();
        if (spinning) {
            spin_win_ns += t - now;
            STAT_ADD(spin_ns, t - now);
        } else if (polling) {
            poll_win_ns += t - now;
            STAT_ADD(poll_ns, t - now);
        }
        if ((spinning || polling) && n == 0) sched_yield(); /* a runnable thread goes first */
        if (n > 0 && cfg.poll_ns) {
            int io = 0;
            for (int i = 0; i < n && !io; i++) io = *(int *)evs[i].data.ptr != T_TIMER;
            if (io) poll_until = t + cfg.poll_ns;
        }
        for (int i = 0; i < n; i++) {
            int type = *(int *)evs[i].data.ptr;
            if (type == T_ENDPOINT) on_endpoint(evs[i].data.ptr, evs[i].events, t);
            else if (type == T_LISTEN) on_accept(evs[i].data.ptr, t);
            else if (type == T_TIMER) {
                u64 exp;
                if (read(tfd, &exp, sizeof exp) > 0 && timer_armed) {
                    /* follow the ~99th percentile of wake-up lateness (up 99 steps, down 1) */
                    u64 late = t > timer_armed ? t - timer_armed : 0, e = early_ns;
                    if (late > e) e += 99 * 500;
                    else e -= 500;
                    if (e < EARLY_MIN_NS) e = EARLY_MIN_NS;
                    if (e > cfg.spin_max_ns) e = cfg.spin_max_ns;
                    __atomic_store_n(&early_ns, e, __ATOMIC_RELAXED); /* read by print_stats */
                }
                timer_armed = 0;
            }
        }
        release_due();
        while (dead_list) {
            struct conn *c = dead_list;
            dead_list = c->next_dead;
            free(c);
        }
    }
    return NULL;
}

/* ---------------------------------------------------------------- main thread */
static int make_listener(struct sockaddr_storage *ss, socklen_t len, char *out, size_t outlen) {
    int fd = socket(ss->ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) { perror("perfctl-proxy: socket"); exit(1); }
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one);
    enable_rx_stamps(fd);
    if (bind(fd, (struct sockaddr *)ss, len) < 0 || listen(fd, 65535) < 0) {
        char ip[64];
        inet_ntop(AF_INET, &((struct sockaddr_in *)ss)->sin_addr, ip, sizeof ip);
        fprintf(stderr, "perfctl-proxy: cannot listen on %s:%u: %s\n", ip,
                ntohs(((struct sockaddr_in *)ss)->sin_port), strerror(errno));
        exit(1);
    }
    struct sockaddr_in got;
    socklen_t gl = sizeof got;
    getsockname(fd, (struct sockaddr *)&got, &gl);
    char ip[64];
    inet_ntop(AF_INET, &got.sin_addr, ip, sizeof ip);
    snprintf(out, outlen, "%s:%u", ip, ntohs(got.sin_port));
    /* the next listeners of the group bind the port this one got (port 0 = any) */
    ((struct sockaddr_in *)ss)->sin_port = got.sin_port;
    return fd;
}

static struct relhist last_window, last_rx_window, last_sent_window; /* merged at the previous line */

/* all += w's release errors and sent += its send completions, as of one instant when no timed
 * chunk's send is under way on w (its seqlock even and unchanged across the copy). Waits up to
 * 50 ms for a send under way (a descheduled worker), then takes what it has. */
static void snapshot_rel(struct worker *w, struct relhist *all, struct relhist *sent) {
    static struct relhist r, s;
    u64 deadline = now_ns() + 50000000ull;
    for (;;) {
        u64 a = __atomic_load_n(w->rel_seq, __ATOMIC_ACQUIRE);
        if ((a & 1) && now_ns() < deadline) {
            sched_yield();
            continue;
        }
        memset(&r, 0, sizeof r);
        memset(&s, 0, sizeof s);
        relhist_accumulate(&r, w->rh);
        relhist_accumulate(&s, w->sh);
        __atomic_thread_fence(__ATOMIC_ACQUIRE);
        if (__atomic_load_n(w->rel_seq, __ATOMIC_RELAXED) == a || now_ns() >= deadline) break;
    }
    relhist_accumulate(all, &r);
    relhist_accumulate(sent, &s);
}

static void print_stats(void) {
    struct stats sum = {0};
    static struct relhist all, win, rx_all, rx_win, sent_all, sent_win;
    memset(&all, 0, sizeof all);
    memset(&rx_all, 0, sizeof rx_all);
    memset(&sent_all, 0, sizeof sent_all);
    u64 early_max = 0;
    for (int i = 0; i < cfg.threads; i++) {
        struct stats *s = __atomic_load_n(&workers[i].st, __ATOMIC_ACQUIRE);
        if (!s) continue;
        u64 *src = (u64 *)s, *dst = (u64 *)&sum;
        for (size_t k = 0; k < sizeof sum / sizeof(u64); k++) dst[k] += __atomic_load_n(&src[k], __ATOMIC_RELAXED);
        snapshot_rel(&workers[i], &all, &sent_all);
        relhist_accumulate(&rx_all, workers[i].rxh);
        u64 e = __atomic_load_n(workers[i].early_ns, __ATOMIC_RELAXED);
        if (e > early_max) early_max = e;
    }
    relhist_diff(&win, &all, &last_window);
    last_window = all;
    relhist_diff(&rx_win, &rx_all, &last_rx_window);
    last_rx_window = rx_all;
    relhist_diff(&sent_win, &sent_all, &last_sent_window);
    last_sent_window = sent_all;
    fprintf(stderr,
            "perfctl-proxy stats: threads=%d conns=%llu conns_open=%llu conns_peak=%llu chunks_up=%llu "
            "chunks_down=%llu held_up=%llu held_down=%llu bytes_up=%llu bytes_down=%llu "
            "resets=%llu refused=%llu reordered_up=%llu reordered_down=%llu injected_resets=%llu "
            "blackholed=%llu timer_early_ns=%llu spin_ns=%llu spin_denied=%llu poll_ns=%llu "
            "released=%llu release_err_p50_ns=%lld release_err_p99_ns=%lld "
            "win_released=%llu win_release_err_p50_ns=%lld win_release_err_p99_ns=%lld "
            "rx_ts_missing=%llu rx_lag_p50_ns=%lld rx_lag_p99_ns=%lld win_rx_lag_p50_ns=%lld "
            "win_rx_lag_p99_ns=%lld sent_err_p50_ns=%lld sent_err_p99_ns=%lld "
            "win_sent_err_p50_ns=%lld win_sent_err_p99_ns=%lld\n",
            cfg.threads, (unsigned long long)sum.conns, (unsigned long long)sum.conns_open,
            (unsigned long long)sum.conns_peak, (unsigned long long)sum.chunks[0],
            (unsigned long long)sum.chunks[1], (unsigned long long)sum.held[0],
            (unsigned long long)sum.held[1], (unsigned long long)sum.bytes[0],
            (unsigned long long)sum.bytes[1], (unsigned long long)sum.resets,
            (unsigned long long)sum.refused, (unsigned long long)sum.reordered[0],
            (unsigned long long)sum.reordered[1], (unsigned long long)sum.injected_resets,
            (unsigned long long)sum.blackholed, (unsigned long long)early_max,
            (unsigned long long)sum.spin_ns, (unsigned long long)sum.spin_denied,
            (unsigned long long)sum.poll_ns, (unsigned long long)all.total, (long long)relhist_quantile_ns(&all, 0.5),
            (long long)relhist_quantile_ns(&all, 0.99), (unsigned long long)win.total,
            (long long)relhist_quantile_ns(&win, 0.5), (long long)relhist_quantile_ns(&win, 0.99),
            (unsigned long long)sum.rx_ts_missing, (long long)relhist_quantile_ns(&rx_all, 0.5),
            (long long)relhist_quantile_ns(&rx_all, 0.99), (long long)relhist_quantile_ns(&rx_win, 0.5),
            (long long)relhist_quantile_ns(&rx_win, 0.99), (long long)relhist_quantile_ns(&sent_all, 0.5),
            (long long)relhist_quantile_ns(&sent_all, 0.99), (long long)relhist_quantile_ns(&sent_win, 0.5),
            (long long)relhist_quantile_ns(&sent_win, 0.99));
    fflush(stderr);
}

static void usage(void) {
    fputs("usage: perfctl-proxy --listen HOST:PORT --to HOST:PORT [--echo-listen HOST:PORT]\n"
          "   shaping: [--delay D | --delay-up D --delay-down D] [--jitter D] [--distribution\n"
          "            uniform|normal|pareto] [--jitter-correlation C] [--loss P | --gemodel\n"
          "            p,r,loss_bad,loss_good] [--rto D] [--reorder P] [--reorder-correlation C]\n"
          "            [--reset P] [--blackhole P] [--bandwidth R | --bandwidth-up R --bandwidth-down R]\n"
          "   schedule: [--at T shaping...]... [--schedule-anchor listen|stdin]\n"
          "   process: [--threads N] [--cpus LIST] [--spin-max D] [--spin-budget F] [--poll D]\n"
          "            [--poll-budget F]\n"
          "            [--queue-limit BYTES] [--seed S]\n",
          stdout);
}

/* schedule: step k (k >= 1) is due at anchor + step_at_ns[k] */
static int next_step = 1;
static u64 anchor_ns;

static void arm_schedule(int sched_fd) {
    struct itimerspec its = {0};
    if (anchor_ns && next_step < nsteps) {
        u64 due = anchor_ns + step_at_ns[next_step];
        its.it_value.tv_sec = (time_t)(due / 1000000000ull);
        its.it_value.tv_nsec = (long)(due % 1000000000ull);
        if (!due) its.it_value.tv_nsec = 1;
    }
    timerfd_settime(sched_fd, TFD_TIMER_ABSTIME, &its, NULL);
}

static void apply_due_steps(int sched_fd) {
    u64 now = now_ns();
    while (anchor_ns && next_step < nsteps && anchor_ns + step_at_ns[next_step] <= now) {
        __atomic_store_n(&cur_shape, &steps[next_step], __ATOMIC_RELEASE);
        u64 applied = now_ns();
        fprintf(stderr, "perfctl-proxy change step=%d due_ns=%llu applied_ns=%llu\n", next_step,
                (unsigned long long)(anchor_ns + step_at_ns[next_step]), (unsigned long long)applied);
        fflush(stderr);
        next_step++;
    }
    arm_schedule(sched_fd);
}

int main(int argc, char **argv) {
    const char *listen_s = NULL, *to_s = NULL, *echo_s = NULL;
    shape_init(&steps[0]);
    const char *pause_us = getenv("PERFCTL_PROXY_TEST_SENT_PAUSE_US");
    if (pause_us && *pause_us) {
        long us = strtol(pause_us, NULL, 10);
        if (us > 0 && us < 1000000) cfg.test_sent_pause_ns = (u64)us * 1000;
    }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(); return 0; }
        if (i + 1 >= argc) die_usage("missing value for", a);
        const char *v = argv[++i];
        if (parse_shaping(a, v, &steps[nsteps - 1])) continue;
        if (!strcmp(a, "--listen")) listen_s = v;
        else if (!strcmp(a, "--to")) to_s = v;
        else if (!strcmp(a, "--echo-listen")) echo_s = v;
        else if (!strcmp(a, "--at")) {
            if (nsteps == MAX_STEPS) die_usage("too many --at steps (max 63)", v);
            u64 at = parse_duration(a, v);
            if (nsteps > 1 && at <= step_at_ns[nsteps - 1]) die_usage("--at times must increase", v);
            steps[nsteps] = steps[nsteps - 1];
            step_at_ns[nsteps++] = at;
        } else if (!strcmp(a, "--schedule-anchor")) {
            if (!strcmp(v, "stdin")) cfg.anchor_stdin = 1;
            else if (!strcmp(v, "listen")) cfg.anchor_stdin = 0;
            else die_usage("--schedule-anchor must be listen or stdin, not", v);
        } else if (!strcmp(a, "--threads")) {
            char *end;
            long t = strtol(v, &end, 10);
            if (*end || t < 1 || t > MAX_THREADS) die_usage("--threads must be an integer in [1, 64]", v);
            cfg.threads = (int)t;
        } else if (!strcmp(a, "--cpus")) parse_cpus(v);
        else if (!strcmp(a, "--spin-max")) cfg.spin_max_ns = parse_duration(a, v);
        else if (!strcmp(a, "--spin-budget")) cfg.spin_budget = parse_prob(a, v, 0);
        else if (!strcmp(a, "--poll")) cfg.poll_ns = parse_duration(a, v);
        else if (!strcmp(a, "--poll-budget")) cfg.poll_budget = parse_prob(a, v, 0);
        else if (!strcmp(a, "--queue-limit")) {
            char *end;
            unsigned long long q = strtoull(v, &end, 10);
            if (*end || q < 4096) die_usage("--queue-limit must be an integer >= 4096 bytes", v);
            cfg.queue_limit = (size_t)q;
        } else if (!strcmp(a, "--seed")) {
            char *end;
            cfg.seed = strtoull(v, &end, 10);
            if (*end) die_usage("bad --seed", v);
            cfg.seeded = 1;
        } else die_usage("unknown flag", a);
    }
    if (!listen_s || !to_s) die_usage("--listen and --to are required", NULL);
    if (cfg.spin_max_ns < EARLY_MIN_NS) cfg.spin_max_ns = EARLY_MIN_NS;
    for (int k = 0; k < nsteps; k++) shape_finish(&steps[k]);
    if (!cfg.threads) {
        cpu_set_t set;
        int usable = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
        cfg.threads = cfg.ncpus ? cfg.ncpus : (usable < 4 ? usable : 4);
        if (cfg.threads < 1) cfg.threads = 1;
    }

    struct sockaddr_storage lss, ess;
    socklen_t llen, elen;
    parse_hostport("--listen", listen_s, &lss, &llen);
    parse_hostport("--to", to_s, &up_addr, &up_addrlen);
    if (echo_s) parse_hostport("--echo-listen", echo_s, &ess, &elen);

    struct rlimit rl; /* room for thousands of connections */
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0); /* inherited by the worker threads */
    if (cfg.ncpus) {
        cpu_set_t set;
        CPU_ZERO(&set);
        for (int i = 0; i < cfg.ncpus; i++) CPU_SET(cfg.cpus[i], &set);
        if (sched_setaffinity(0, sizeof set, &set) < 0) {
            fprintf(stderr, "perfctl-proxy: cannot pin to --cpus: %s\n", strerror(errno));
            return 2;
        }
    }
    signal(SIGPIPE, SIG_IGN);
    sigset_t mask;
    sigemptyset(&mask);
    sigaddset(&mask, SIGTERM);
    sigaddset(&mask, SIGINT);
    sigaddset(&mask, SIGUSR1);
    pthread_sigmask(SIG_BLOCK, &mask, NULL); /* inherited: only the main thread reads them */
    int sfd = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
    int mfd = epoll_create1(EPOLL_CLOEXEC);
    int sched_fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    if (sfd < 0 || mfd < 0 || sched_fd < 0) { perror("perfctl-proxy: setup"); return 1; }

    char lname[96], ename[96] = "";
    for (int i = 0; i < cfg.threads; i++) {
        workers[i].idx = i;
        workers[i].main_l = (struct listener){.type = T_LISTEN, .fd = make_listener(&lss, llen, lname, sizeof lname)};
        workers[i].echo_l = (struct listener){.type = T_LISTEN, .fd = -1, .echo = 1};
        if (echo_s) workers[i].echo_l.fd = make_listener(&ess, elen, ename, sizeof ename);
    }
    for (int i = 0; i < cfg.threads; i++) {
        if (pthread_create(&workers[i].tid, NULL, worker_main, &workers[i])) {
            perror("perfctl-proxy: pthread_create");
            return 1;
        }
    }
    for (int i = 0; i < cfg.threads; i++) /* every worker has published its counters */
        while (!__atomic_load_n(&workers[i].st, __ATOMIC_ACQUIRE)) sched_yield();
    printf("perfctl-proxy listening on %s to %s%s%s\n", lname, to_s, echo_s ? " echo " : "", ename);
    fflush(stdout);

    struct epoll_event ev = {.events = EPOLLIN, .data.u32 = 1};
    epoll_ctl(mfd, EPOLL_CTL_ADD, sfd, &ev);
    ev.data.u32 = 2;
    epoll_ctl(mfd, EPOLL_CTL_ADD, sched_fd, &ev);
    int stdin_open = 0;
    if (nsteps > 1) {
        if (cfg.anchor_stdin) {
            ev.data.u32 = 3;
            stdin_open = epoll_ctl(mfd, EPOLL_CTL_ADD, 0, &ev) == 0;
            if (!stdin_open) fprintf(stderr, "perfctl-proxy: cannot read stdin for the schedule anchor\n");
        } else {
            anchor_ns = now_ns();
            arm_schedule(sched_fd);
        }
    }
    char line[128];
    size_t line_len = 0;
    for (;;) {
        struct epoll_event evs[4];
        int n = epoll_wait(mfd, evs, 4, -1);
        if (n < 0) {
            if (errno == EINTR) continue;
            perror("perfctl-proxy: epoll_wait");
            return 1;
        }
        for (int i = 0; i < n; i++) {
            if (evs[i].data.u32 == 1) {
                struct signalfd_siginfo si;
                while (read(sfd, &si, sizeof si) == (ssize_t)sizeof si) {
                    print_stats();
                    if (si.ssi_signo != SIGUSR1) _exit(0);
                }
            } else if (evs[i].data.u32 == 2) {
                u64 exp;
                if (read(sched_fd, &exp, sizeof exp) > 0) apply_due_steps(sched_fd);
            } else if (evs[i].data.u32 == 3) {
                ssize_t r = read(0, line + line_len, sizeof line - 1 - line_len);
                if (r <= 0) {
                    epoll_ctl(mfd, EPOLL_CTL_DEL, 0, NULL);
                    continue;
                }
                line_len += (size_t)r;
                line[line_len] = 0;
                char *nl;
                while ((nl = strchr(line, '\n'))) {
                    *nl = 0;
                    unsigned long long at;
                    if (sscanf(line, "start %llu", &at) == 1 && !anchor_ns && at) {
                        anchor_ns = at;
                        apply_due_steps(sched_fd);
                    } else {
                        fprintf(stderr, "perfctl-proxy: ignored stdin line: %s\n", line);
                    }
                    line_len -= (size_t)(nl + 1 - line);
                    memmove(line, nl + 1, line_len + 1);
                }
                if (line_len == sizeof line - 1) line_len = 0; /* overlong garbage */
            }
        }
    }
}
