/* models: runs the concurrency model chosen with --model (prefix md_). Opens the listeners,
 * starts the lingering-close thread for the blocking models, and passes start, stop, join and
 * cleanup on to that model (model.h). */
#ifndef PERFCTL_MODELS_H
#define PERFCTL_MODELS_H

#include <stddef.h>
#include <stdint.h>

enum md_model { MD_SINGLE, MD_THREAD, MD_POOL, MD_EPOLL };

struct md_config {
	enum md_model model;
	const char *host;
	int port;
	int threads;
	int backlog;
	int64_t idle_ns; /* idle / slowloris timeout (sv_idle_ns) */
};

/* Binds and listens; starts the model's threads. Returns 0 and the bound port, or -1 + err. */
int md_start(const struct md_config *cfg, int *port, char *err, size_t errcap);
/* Tells every thread to finish (st_stop_set() must have been called). */
void md_stop(void);
/* Waits for the threads until deadline_ns (monotonic); 0 if all finished, -1 otherwise. */
int md_join(int64_t deadline_ns);
/* Closes listeners and frees what md_start allocated (only after md_join returned 0). */
void md_cleanup(void);

#endif
