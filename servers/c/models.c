/* models: runs the chosen concurrency model (see models.h). */
#include "models.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "linger.h"
#include "model.h"
#include "serve.h"
#include "stats.h"

static enum md_model md_model_used;
static int md_lfds[64];
static int md_nlfds;

int md_start(const struct md_config *cfg, int *port, char *err, size_t errcap)
{
	int lfd, n = 1, reuseport = 0;
	md_model_used = cfg->model;
	sv_idle_ns = cfg->idle_ns;
	if (cfg->model == MD_EPOLL) {
		const char *mode = getenv("PERFCTL_EPOLL_ACCEPT");
		reuseport = mode && strcmp(mode, "reuseport") == 0;
		if (reuseport)
			n = cfg->threads < 64 ? cfg->threads : 64;
	}
	lfd = sv_listen(cfg->host, cfg->port, cfg->backlog, cfg->model == MD_EPOLL, reuseport, port,
			err, errcap);
	if (lfd < 0)
		return -1;
	md_lfds[md_nlfds++] = lfd;
	while (md_nlfds < n) {
		int p2;
		lfd = sv_listen(cfg->host, *port, cfg->backlog, 1, 1, &p2, err, errcap);
		if (lfd < 0)
			return -1;
		md_lfds[md_nlfds++] = lfd;
	}
	if (cfg->model != MD_EPOLL && lg_start() != 0) {
		snprintf(err, errcap, "cannot start the lingering-close thread");
		return -1;
	}
	switch (cfg->model) {
	case MD_SINGLE: st_threads_set(1); return ms_start(md_lfds[0]);
	case MD_THREAD: st_threads_set(0); return mt_start(md_lfds[0]);
	case MD_POOL:
		st_threads_set(cfg->threads);
		return mp_start(md_lfds[0], cfg->threads, cfg->backlog);
	default:
		st_threads_set(cfg->threads);
		return me_start(md_lfds, md_nlfds, cfg->threads, reuseport);
	}
}

void md_stop(void)
{
	/* listeners first: blocked accept(2) calls return EINVAL */
	for (int i = 0; i < md_nlfds; i++)
		shutdown(md_lfds[i], SHUT_RDWR);
	sv_wake_blocking();
	lg_stop();
	if (md_model_used == MD_POOL)
		mp_stop();
	if (md_model_used == MD_EPOLL)
		me_stop();
}

int md_join(int64_t deadline_ns)
{
	if (lg_join(deadline_ns) != 0)
		return -1;
	switch (md_model_used) {
	case MD_SINGLE: return ms_join(deadline_ns);
	case MD_THREAD: return mt_join(deadline_ns);
	case MD_POOL: return mp_join(deadline_ns);
	default: return me_join(deadline_ns);
	}
}

void md_cleanup(void)
{
	if (md_model_used == MD_POOL)
		mp_cleanup();
	if (md_model_used == MD_EPOLL)
		me_cleanup();
	for (int i = 0; i < md_nlfds; i++)
		close(md_lfds[i]);
	md_nlfds = 0;
}
