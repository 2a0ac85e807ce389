/*
 * perfctl-proxy: a TCP proxy that injects latency, jitter, TCP-level loss and a bandwidth
 * limit between a client and a server, for hosts where sch_netem is not available.
 *
 *   perfctl-proxy --listen 127.0.0.1:P --to 127.0.0.1:Q [--delay-up 10ms] [--delay-down 10ms]
 *                 [--jitter 2ms --distribution uniform|normal|pareto] [--loss 0.01 --rto 200ms]
 *                 [--bandwidth 10mbit] [--queue-limit 4194304] [--echo-listen 127.0.0.1:E]
 *                 [--seed S]
 *
 * One thread, one epoll loop, one timerfd (absolute CLOCK_MONOTONIC) armed at the earliest
 * release time of all queues, one signalfd (SIGTERM/SIGINT: exit 0; SIGUSR1: print stats).
 *
 * Model (per connection, per direction; "up" = client->server, "down" = server->client):
 *   - every chunk read from one side gets a release time
 *       release = arrival [+ serialisation] + delay + jitter draw [+ rto if "lost"]
 *     and is written to the other side at that time. Byte order is always kept: a chunk's
 *     release is max(its own time, the previous chunk's release) in the same direction.
 *   - jitter: uniform  -> U(-j, +j);  normal -> N(0, sigma=j);
 *             pareto   -> Lomax(shape 3, scale 2j): one-sided, mean j, heavy tail.
 *     delay + jitter is clamped at >= 0.
 *   - loss is a TCP-level model (a TCP stream never loses bytes): with probability p a chunk's
 *     delivery is held back an extra RTO, and because order is kept it holds back later chunks
 *     too (head-of-line blocking), as a retransmission would.
 *   - bandwidth: an AGGREGATE serialisation link per direction shared by all connections
 *     (like one tc tbf qdisc on an interface): a chunk starts serialising when the link is
 *     free, takes len*8/rate seconds, then travels `delay`. Reads are capped at ~1 ms of link
 *     time so bursts stay small.
 *   - backpressure: a direction whose queue holds more than --queue-limit bytes (4 MiB) stops
 *     reading its source until the queue drains to half; TCP flow control then slows the sender.
 *   - half-close (FIN) is forwarded in order, after the data before it, with the same delay.
 *     A reset (RST / ECONNRESET / EPIPE) is forwarded as a reset (SO_LINGER 0 close) of the
 *     other side after that direction's delay; data still queued toward the reset side is
 *     discarded.
 *   - --echo-listen adds a second listener whose connections go to a built-in echo at the far
 *     end of the same emulated path (up delay, then echoed, then down delay; same aggregate
 *     bandwidth links): round trips through it measure the path without touching the server.
 * At delay 0 with no shaping a chunk is written straight through (no allocation, no timer).
 *
 * Prints one line when listening:
 *   perfctl-proxy listening on 127.0.0.1:PORT to HOST:Q[ echo 127.0.0.1:E]
 * Bad flags: one line on stderr, exit 2. Runtime failure to bind: exit 1. On exit prints one
 * stats line on stderr.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
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

typedef uint64_t u64;

#define MAX_EVENTS 256
#define READ_MAX 65536
#define K_DATA 0
#define K_FIN 1

enum { T_LISTEN = 1, T_TIMER, T_SIGNAL, T_ENDPOINT };
enum { D_UNIFORM = 0, D_NORMAL, D_PARETO };

/* ---------------------------------------------------------------- configuration */
static struct {
    u64 delay_ns[2];
    u64 jitter_ns;
    int dist;
    double loss;
    u64 rto_ns;
    double rate_bps; /* bits per second, 0 = unlimited */
    size_t queue_limit;
    u64 seed;
    int seeded;
    int shaping[2]; /* direction needs the queue/timer path */
    size_t read_cap;
} cfg = {.rto_ns = 200000000ull, .queue_limit = 4u << 20, .read_cap = READ_MAX};

static struct {
    u64 conns, conns_open, conns_peak, chunks[2], held[2], bytes[2], resets, refused;
} st;

/* ---------------------------------------------------------------- data structures */
struct chunk {
    struct chunk *next;
    u64 release;
    uint32_t len, off;
    uint8_t kind;
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
    u64 rst_at; /* 0: no reset pending */
    u64 heap_key;
    int heap_idx; /* -1: not in heap */
    uint8_t idx;  /* 0 up: ep[0]->ep[1]; 1 down: ep[1]->ep[0] */
    uint8_t eof_read, fin_sent, paused, write_blocked;
    struct conn *c;
};

struct conn {
    struct endpoint ep[2];
    struct dir d[2];
    uint8_t connecting, echo, dead;
    struct conn *next_dead;
};

struct listener {
    int type; /* T_LISTEN */
    int fd;
    int echo;
    int paused;
};

static int epfd, tfd;
static u64 timer_armed; /* absolute ns the timerfd is armed for, 0 = disarmed */
/* Timer wake-ups arrive late by tens of microseconds on a busy host; we arm the timer and treat
 * chunks as due `early_ns` before their release time, where early_ns tracks the median observed
 * wake-up lateness (capped at 200 us), so that the median delivery lands on the release time. */
static u64 early_ns = 20000;
#define EARLY_MAX_NS 200000ull
static struct sockaddr_storage up_addr;
static socklen_t up_addrlen;
static struct conn *dead_list;
static u64 link_free[2];
static int reserve_fd = -1;
static char rbuf[READ_MAX];

/* ---------------------------------------------------------------- helpers */
static u64 now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (u64)ts.tv_sec * 1000000000ull + (u64)ts.tv_nsec;
}

static void die_usage(const char *msg, const char *arg) {
    fprintf(stderr, "perfctl-proxy: %s%s%s\n", msg, arg ? ": " : "", arg ? arg : "");
    exit(2);
}

/* xoshiro256** */
static u64 rs[4];
static u64 rotl(u64 x, int k) { return (x << k) | (x >> (64 - k)); }
static u64 rnd_u64(void) {
    u64 r = rotl(rs[1] * 5, 7) * 9, t = rs[1] << 17;
    rs[2] ^= rs[0]; rs[3] ^= rs[1]; rs[1] ^= rs[2]; rs[0] ^= rs[3];
    rs[2] ^= t; rs[3] = rotl(rs[3], 45);
    return r;
}
static double rnd01(void) { return ((rnd_u64() >> 11) + 0.5) * (1.0 / 9007199254740992.0); } /* (0,1) */
static void rnd_seed(u64 s) {
    for (int i = 0; i < 4; i++) { /* splitmix64 */
        u64 z = (s += 0x9e3779b97f4a7c15ull);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        rs[i] = z ^ (z >> 31);
    }
}

static double jitter_draw_ns(void) {
    double j = (double)cfg.jitter_ns;
    if (j <= 0) return 0;
    switch (cfg.dist) {
    case D_NORMAL: {
        double u1 = rnd01(), u2 = rnd01();
        return j * sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
    }
    case D_PARETO: { /* Lomax shape a=3, scale (a-1)*j -> mean j */
        double a = 3.0, x = (a - 1.0) * j * (pow(rnd01(), -1.0 / a) - 1.0);
        return x > 1000.0 * j ? 1000.0 * j : x;
    }
    default:
        return j * (2.0 * rnd01() - 1.0);
    }
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

static double parse_rate(const char *s) {
    char *end;
    double v;
    if (parse_double(s, &v, &end) || v <= 0) die_usage("bad --bandwidth", s);
    static const struct { const char *u; double m; } units[] = {
        {"", 1}, {"bit", 1}, {"kbit", 1e3}, {"mbit", 1e6}, {"gbit", 1e9},
        {"bps", 8}, {"kbps", 8e3}, {"mbps", 8e6}, {"gbps", 8e9}};
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
        if (!strcasecmp(end, units[i].u)) return v * units[i].m;
    die_usage("bad --bandwidth unit (bit, kbit, mbit, gbit, bps, kbps, mbps, gbps)", s);
    return 0;
}

static double parse_prob(const char *s) {
    char *end;
    double v;
    if (parse_double(s, &v, &end)) die_usage("bad --loss", s);
    if (!strcmp(end, "%")) v /= 100.0;
    else if (*end) die_usage("bad --loss", s);
    if (v > 1.0) die_usage("--loss must be in [0, 1]", s);
    return v;
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
static struct dir **heap;
static int heap_n, heap_cap;

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

static void arm_timer(void) {
    u64 want = 0;
    if (heap_n) {
        want = heap[0]->heap_key > early_ns ? heap[0]->heap_key - early_ns : 1;
        if (want == 0) want = 1;
    }
    if (want == timer_armed) return;
    struct itimerspec its = {0};
    if (want) {
        its.it_value.tv_sec = (time_t)(want / 1000000000ull);
        its.it_value.tv_nsec = (long)(want % 1000000000ull);
        if (!its.it_value.tv_sec && !its.it_value.tv_nsec) its.it_value.tv_nsec = 1;
    }
    timerfd_settime(tfd, TFD_TIMER_ABSTIME, &its, NULL);
    timer_armed = want;
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
    st.conns_open--;
    c->next_dead = dead_list;
    dead_list = c;
}

static void maybe_done(struct conn *c) {
    if (!c->dead && c->d[0].fin_sent && c->d[1].fin_sent) kill_conn(c, 0, 0);
}

/* side `side` was reset (or its connect failed): close it now, reset the other side after the
 * delay of the direction side -> other. */
static void handle_reset(struct conn *c, int side, u64 now) {
    if (c->dead) return;
    st.resets++;
    if (c->echo) { kill_conn(c, 1, 1); return; }
    struct dir *toward_other = &c->d[side], *toward_me = &c->d[1 - side];
    close_ep(&c->ep[side], 1);
    free_queue(toward_me);
    toward_me->fin_sent = 1;
    toward_me->eof_read = 1;
    toward_me->write_blocked = 0;
    heap_remove(toward_me);
    if (c->ep[1 - side].fd < 0) { kill_conn(c, 1, 1); return; }
    u64 at = now + cfg.delay_ns[side];
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

static u64 release_time(int idx, size_t len, u64 now, int kind) {
    u64 t = now;
    if (kind == K_DATA && cfg.rate_bps > 0) {
        u64 start = link_free[idx] > now ? link_free[idx] : now;
        t = start + (u64)llround((double)len * 8e9 / cfg.rate_bps);
        link_free[idx] = t;
    }
    double extra = (double)cfg.delay_ns[idx];
    if (cfg.jitter_ns) {
        extra += jitter_draw_ns();
        if (extra < 0) extra = 0;
    }
    t += (u64)llround(extra);
    if (kind == K_DATA && cfg.loss > 0 && rnd01() < cfg.loss) {
        t += cfg.rto_ns;
        st.held[idx]++;
    }
    return t;
}

static void pump(struct dir *d, u64 now);

static void enqueue(struct dir *d, const char *data, size_t n, u64 now, int kind) {
    struct conn *c = d->c;
    struct endpoint *dst = &c->ep[1 - d->idx];
    if (kind == K_DATA) {
        st.chunks[d->idx]++;
        st.bytes[d->idx] += n;
    }
    size_t off = 0;
    if (kind == K_DATA && !cfg.shaping[d->idx] && !d->head && !d->write_blocked && !c->connecting &&
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
    if (n - off) memcpy(ch->data, data + off, n - off);
    u64 rel = cfg.shaping[d->idx] ? release_time(d->idx, n, now, kind) : now;
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

static void pump(struct dir *d, u64 now) {
    struct conn *c = d->c;
    u64 due = now + early_ns; /* due = released within the expected timer lateness */
    if (c->dead) return;
    struct endpoint *dst = &c->ep[1 - d->idx];
    struct dir *srcdir = c->echo ? &c->d[0] : d; /* whose reading this queue throttles */
    if (d->rst_at && d->rst_at <= due) {
        /* deliver the reset to dst; the source side is already closed */
        kill_conn(c, 1, 1);
        return;
    }
    if (c->connecting && d->idx == 0) { heap_remove(d); return; }
    while (d->head) {
        struct chunk *ch = d->head;
        if (ch->release > due) {
            heap_set(d, d->rst_at && d->rst_at < ch->release ? d->rst_at : ch->release);
            goto out;
        }
        if (ch->kind == K_FIN) {
            if (c->echo && d->idx == 0) {
                struct dir *back = &c->d[1];
                back->eof_read = 1;
                enqueue(back, NULL, 0, now, K_FIN);
            } else if (dst->fd >= 0) {
                shutdown(dst->fd, SHUT_WR);
            }
            d->fin_sent = 1;
        } else if (c->echo && d->idx == 0) {
            d->queued -= ch->len - ch->off;
            enqueue(&c->d[1], ch->data + ch->off, ch->len - ch->off, now, K_DATA);
            if (c->dead) return;
        } else if (dst->fd >= 0) {
            ssize_t w = send(dst->fd, ch->data + ch->off, ch->len - ch->off, MSG_NOSIGNAL | MSG_DONTWAIT);
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
            ep_sync(&c->ep[srcdir->idx]);
        }
    }
    if (d->rst_at) heap_set(d, d->rst_at);
    else heap_remove(d);
out:
    if (d->write_blocked) { d->write_blocked = 0; ep_sync(dst); }
    maybe_done(c);
}

static void on_readable(struct conn *c, int side, u64 now) {
    struct dir *d = &c->d[side];
    struct endpoint *e = &c->ep[side];
    for (int iter = 0; iter < 4 && !c->dead && e->fd >= 0; iter++) {
        ssize_t n = recv(e->fd, rbuf, cfg.read_cap, MSG_DONTWAIT);
        if (n > 0) {
            enqueue(d, rbuf, (size_t)n, now, K_DATA);
            if (c->dead) return;
            if (queued_for(c, side) > cfg.queue_limit && !d->paused) {
                d->paused = 1;
                ep_sync(e);
                return;
            }
            if ((size_t)n < cfg.read_cap) return;
        } else if (n == 0) {
            d->eof_read = 1;
            ep_sync(e);
            enqueue(d, NULL, 0, now, K_FIN);
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
        if (err) { st.refused++; handle_reset(c, 1, now); return; }
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
        st.conns++;
        st.conns_open++;
        if (st.conns_open > st.conns_peak) st.conns_peak = st.conns_open;
        if (l->echo) {
            c->echo = 1;
        } else {
            int ufd = socket(up_addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
            if (ufd < 0) { kill_conn(c, 1, 1); continue; }
            set_nodelay(ufd);
            c->ep[1].fd = ufd;
            if (connect(ufd, (struct sockaddr *)&up_addr, up_addrlen) < 0) {
                if (errno != EINPROGRESS) { st.refused++; handle_reset(c, 1, now); continue; }
                c->connecting = 1;
            }
            ep_sync(&c->ep[1]);
        }
        ep_sync(&c->ep[0]);
    }
}

static int make_listener(struct sockaddr_storage *ss, socklen_t len, char *out, size_t outlen) {
    int fd = socket(ss->ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) { perror("perfctl-proxy: socket"); exit(1); }
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
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
    return fd;
}

static void print_stats(void) {
    fprintf(stderr,
            "perfctl-proxy stats: conns=%llu conns_open=%llu conns_peak=%llu chunks_up=%llu "
            "chunks_down=%llu held_up=%llu held_down=%llu bytes_up=%llu bytes_down=%llu "
            "resets=%llu refused=%llu timer_early_ns=%llu\n",
            (unsigned long long)st.conns, (unsigned long long)st.conns_open,
            (unsigned long long)st.conns_peak, (unsigned long long)st.chunks[0],
            (unsigned long long)st.chunks[1], (unsigned long long)st.held[0],
            (unsigned long long)st.held[1], (unsigned long long)st.bytes[0],
            (unsigned long long)st.bytes[1], (unsigned long long)st.resets,
            (unsigned long long)st.refused, (unsigned long long)early_ns);
    fflush(stderr);
}

static void usage(void) {
    fputs("usage: perfctl-proxy --listen HOST:PORT --to HOST:PORT [--delay-up D] [--delay-down D]\n"
          "         [--delay D] [--jitter D --distribution uniform|normal|pareto] [--loss P --rto D]\n"
          "         [--bandwidth R] [--queue-limit BYTES] [--echo-listen HOST:PORT] [--seed S]\n",
          stdout);
}

int main(int argc, char **argv) {
    const char *listen_s = NULL, *to_s = NULL, *echo_s = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(); return 0; }
        if (i + 1 >= argc) die_usage("missing value for", a);
        const char *v = argv[++i];
        if (!strcmp(a, "--listen")) listen_s = v;
        else if (!strcmp(a, "--to")) to_s = v;
        else if (!strcmp(a, "--echo-listen")) echo_s = v;
        else if (!strcmp(a, "--delay")) cfg.delay_ns[0] = cfg.delay_ns[1] = parse_duration(a, v);
        else if (!strcmp(a, "--delay-up")) cfg.delay_ns[0] = parse_duration(a, v);
        else if (!strcmp(a, "--delay-down")) cfg.delay_ns[1] = parse_duration(a, v);
        else if (!strcmp(a, "--jitter")) cfg.jitter_ns = parse_duration(a, v);
        else if (!strcmp(a, "--rto")) cfg.rto_ns = parse_duration(a, v);
        else if (!strcmp(a, "--loss")) cfg.loss = parse_prob(v);
        else if (!strcmp(a, "--bandwidth")) cfg.rate_bps = parse_rate(v);
        else if (!strcmp(a, "--distribution")) {
            if (!strcmp(v, "uniform")) cfg.dist = D_UNIFORM;
            else if (!strcmp(v, "normal")) cfg.dist = D_NORMAL;
            else if (!strcmp(v, "pareto")) cfg.dist = D_PARETO;
            else die_usage("--distribution must be uniform, normal or pareto, not", v);
        } else if (!strcmp(a, "--queue-limit")) {
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
    for (int i = 0; i < 2; i++)
        cfg.shaping[i] = cfg.delay_ns[i] || cfg.jitter_ns || cfg.loss > 0 || cfg.rate_bps > 0;
    if (cfg.rate_bps > 0) {
        double cap = cfg.rate_bps / 8.0 / 1000.0; /* ~1 ms of link time */
        if (cap < 1460) cap = 1460;
        if (cap > READ_MAX) cap = READ_MAX;
        cfg.read_cap = (size_t)cap;
    }
    rnd_seed(cfg.seeded ? cfg.seed : (now_ns() ^ ((u64)getpid() << 32)));

    struct sockaddr_storage lss, ess;
    socklen_t llen, elen;
    parse_hostport("--listen", listen_s, &lss, &llen);
    parse_hostport("--to", to_s, &up_addr, &up_addrlen);
    if (echo_s) parse_hostport("--echo-listen", echo_s, &ess, &elen);

    /* room for thousands of connections */
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
    signal(SIGPIPE, SIG_IGN);
    sigset_t mask;
    sigemptyset(&mask);
    sigaddset(&mask, SIGTERM);
    sigaddset(&mask, SIGINT);
    sigaddset(&mask, SIGUSR1);
    sigprocmask(SIG_BLOCK, &mask, NULL);
    int sfd = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
    epfd = epoll_create1(EPOLL_CLOEXEC);
    tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    if (sfd < 0 || epfd < 0 || tfd < 0) { perror("perfctl-proxy: setup"); return 1; }
    reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);

    static int timer_tag = T_TIMER, signal_tag = T_SIGNAL;
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &timer_tag};
    epoll_ctl(epfd, EPOLL_CTL_ADD, tfd, &ev);
    ev.data.ptr = &signal_tag;
    epoll_ctl(epfd, EPOLL_CTL_ADD, sfd, &ev);

    static struct listener L, E;
    char lname[96], ename[96] = "";
    L.type = T_LISTEN;
    L.fd = make_listener(&lss, llen, lname, sizeof lname);
    ev.data.ptr = &L;
    epoll_ctl(epfd, EPOLL_CTL_ADD, L.fd, &ev);
    if (echo_s) {
        E.type = T_LISTEN;
        E.echo = 1;
        E.fd = make_listener(&ess, elen, ename, sizeof ename);
        ev.data.ptr = &E;
        epoll_ctl(epfd, EPOLL_CTL_ADD, E.fd, &ev);
    }
    printf("perfctl-proxy listening on %s to %s%s%s\n", lname, to_s, echo_s ? " echo " : "", ename);
    fflush(stdout);

    struct epoll_event evs[MAX_EVENTS];
    for (;;) {
        arm_timer();
        int n = epoll_wait(epfd, evs, MAX_EVENTS, -1);
        if (n < 0) {
            if (errno == EINTR) continue;
            perror("perfctl-proxy: epoll_wait");
            return 1;
        }
        u64 now = now_ns();
        for (int i = 0; i < n; i++) {
            int type = *(int *)evs[i].data.ptr;
            if (type == T_ENDPOINT) on_endpoint(evs[i].data.ptr, evs[i].events, now);
            else if (type == T_LISTEN) on_accept(evs[i].data.ptr, now);
            else if (type == T_TIMER) {
                u64 exp;
                if (read(tfd, &exp, sizeof exp) > 0 && timer_armed) {
                    /* track the median lateness (stochastic approximation, 2 us steps) */
                    u64 late = now > timer_armed ? now - timer_armed : 0;
                    u64 target = early_ns; /* lateness measured against key - early_ns */
                    if (late > target && early_ns + 2000 <= EARLY_MAX_NS) early_ns += 2000;
                    else if (late < target && early_ns >= 2000) early_ns -= 2000;
                }
                timer_armed = 0;
            } else if (type == T_SIGNAL) {
                struct signalfd_siginfo si;
                while (read(sfd, &si, sizeof si) == (ssize_t)sizeof si) {
                    if (si.ssi_signo == SIGUSR1) print_stats();
                    else { print_stats(); return 0; }
                }
            }
        }
        if (heap_n) {
            now = now_ns();
            for (int guard = 0; heap_n && heap[0]->heap_key <= now + early_ns && guard < 100000; guard++) {
                struct dir *d = heap[0];
                heap_remove(d);
                pump(d, now);
            }
        }
        while (dead_list) {
            struct conn *c = dead_list;
            dead_list = c->next_dead;
            free(c);
        }
    }
}
