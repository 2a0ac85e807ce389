/* model: the entry points of the four concurrency models, one file and prefix each:
 * model_single.c (ms_), model_thread.c (mt_), model_pool.c (mp_), model_epoll.c (me_).
 * Only the dispatcher (models.c) calls them: start once; at shutdown, after st_stop_set(),
 * shutdown(2) on the listeners and sv_wake_blocking(): stop (pool, epoll), join, and once join
 * returned 0, cleanup (pool, epoll). Every join waits until deadline_ns (ck_now_ns() time) and
 * returns 0 when all the model's threads have finished, -1 when the deadline passed first. */
#ifndef PERFCTL_MODEL_H
#define PERFCTL_MODEL_H

#include <stdint.h>

/* single: one thread accepts on the blocking listener lfd and serves each connection itself,
 * one at a time. 0, or -1. */
int ms_start(int lfd);
int ms_join(int64_t deadline_ns);

/* thread: an acceptor on the blocking listener lfd starts a detached thread per connection.
 * 0, or -1. mt_join waits for the acceptor, then for the last connection thread. */
int mt_start(int lfd);
int mt_join(int64_t deadline_ns);

/* pool: threads workers serve connections that an acceptor on the blocking listener lfd puts
 * in a queue of at most queue_cap (minimum 1); with the queue full the acceptor waits. 0, or
 * -1. mp_stop wakes the threads waiting on the queue; mp_cleanup closes the connections still
 * queued (counting them out) and frees the queue. */
int mp_start(int lfd, int threads, int queue_cap);
void mp_stop(void);
int mp_join(int64_t deadline_ns);
void mp_cleanup(void);

/* epoll: threads edge-triggered event loops over non-blocking sockets. reuseport: loop i
 * accepts on lfds[i % nlfds] (SO_REUSEPORT listeners); otherwise every loop watches lfds[0]
 * with EPOLLEXCLUSIVE. 0, or -1. me_stop wakes every loop through an eventfd (each closes its
 * connections as it finishes); me_cleanup closes the epoll sets and the eventfd. */
int me_start(const int *lfds, int nlfds, int threads, int reuseport);
void me_stop(void);
int me_join(int64_t deadline_ns);
void me_cleanup(void);

#endif
