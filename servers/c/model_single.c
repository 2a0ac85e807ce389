/* model_single: one thread accepts and serves, one connection at a time (prefix ms_). */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sys/socket.h>

#include "join.h"
#include "model.h"
#include "serve.h"
#include "stats.h"

static pthread_t ms_thread;
static int ms_started;

static void *ms_run(void *arg)
{
	int lfd = *(int *)arg;
	while (!st_stopping()) {
		int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
		if (fd < 0) {
			if (sv_accept_error(errno))
				continue;
			break;
		}
		st_conn_add(1);
		sv_serve_blocking(fd, 0); /* no queue: the acceptor serves */
	}
	return NULL;
}

int ms_start(int lfd)
{
	static int fd;
	fd = lfd;
	if (pthread_create(&ms_thread, NULL, ms_run, &fd) != 0)
		return -1;
	ms_started = 1;
	return 0;
}

int ms_join(int64_t deadline_ns)
{
	if (!ms_started)
		return 0;
	return jn_join(ms_thread, deadline_ns);
}
