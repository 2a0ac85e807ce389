/* models: the four concurrency models and what they share (prefix md_; per model ms_, mt_,
 * mp_, me_ for single, thread, pool, epoll). */
#ifndef PERFCTL_MODELS_H
#define PERFCTL_MODELS_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

enum md_model { MD_SINGLE, MD_THREAD, MD_POOL, MD_EPOLL };

struct md_config {
	enum md_model model;
	const char *host;
	int port;
	int threads;
	int backlog;
};

#define MD_IDLE_NS   10000000000LL /* idle / slowloris timeout: 10 s */
#define MD_LINGER_NS 1000000000LL  /* drain-before-close after a closing response */
#define MD_DEFER_S   1             /* TCP_DEFER_ACCEPT: wait this long for a request's bytes */

/* Binds and listens; starts the model's threads. Returns 0 and the bound port, or -1 + err. */
int md_start(const struct md_config *cfg, int *port, char *err, size_t errcap);
/* Tells every thread to finish (st_stop_set() must have been called). */
void md_stop(void);
/* Waits for the threads until deadline_ns (monotonic); 0 if all finished, -1 otherwise. */
int md_join(int64_t deadline_ns);
/* Closes listeners and frees what md_start allocated (only after md_join returned 0). */
void md_cleanup(void);

/* --- shared by the model files --- */

/* A listening socket on host:port (port 0: any); *bound gets the port. -1 + err on failure. */
int md_listen(const char *host, int port, int backlog, int nonblock, int reuseport, int *bound,
	      char *err, size_t errcap);
/* Serves one blocking connection until it closes (single/thread/pool); closes fd. */
void md_serve_blocking(int fd, int64_t first_queue_ns);
/* Wakes every connection served by md_serve_blocking (shutdown(2) on each socket). */
void md_wake_blocking(void);
/* accept4 error handling shared by the blocking acceptors: 1 retry, 0 stop accepting. */
int md_accept_error(int err);
void md_set_nodelay(int fd);
/* pthread_join with a monotonic deadline: 0 joined, -1 timed out. */
int md_join_thread(pthread_t th, int64_t deadline_ns);

int ms_start(int lfd);
int ms_join(int64_t deadline_ns);

int mt_start(int lfd);
int mt_join(int64_t deadline_ns);

int mp_start(int lfd, int threads, int queue_cap);
void mp_stop(void);
int mp_join(int64_t deadline_ns);
void mp_cleanup(void);

int me_start(const int *lfds, int nlfds, int threads, int reuseport);
void me_stop(void);
int me_join(int64_t deadline_ns);
void me_cleanup(void);

#endif
