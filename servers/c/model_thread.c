/* model_thread: a detached thread per accepted connection (prefix mt_). */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "join.h"
#include "model.h"
#include "serve.h"
#include "stats.h"

#define MT_STACK (256 * 1024)

struct mt_arg {
	int fd;
	int64_t t_accept;
};

static pthread_t mt_acceptor;
static int mt_started;
static pthread_mutex_t mt_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t mt_none_left = PTHREAD_COND_INITIALIZER;
static int mt_live;

static void *mt_conn(void *p)
{
	struct mt_arg a = *(struct mt_arg *)p;
	free(p);
	sv_serve_blocking(a.fd, ck_now_ns() - a.t_accept);
	st_threads_add(-1);
	pthread_mutex_lock(&mt_lock);
	if (--mt_live == 0)
		pthread_cond_broadcast(&mt_none_left);
	pthread_mutex_unlock(&mt_lock);
	return NULL;
}

static void *mt_run(void *arg)
{
	int lfd = *(int *)arg;
	pthread_attr_t attr;
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	pthread_attr_setstacksize(&attr, MT_STACK);
	while (!st_stopping()) {
		struct mt_arg *a;
		pthread_t th;
		int rc, fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
		if (fd < 0) {
			if (sv_accept_error(errno))
				continue;
			break;
		}
		st_conn_add(1);
		a = malloc(sizeof *a);
		if (!a) {
			close(fd);
			st_conn_add(-1);
			continue;
		}
		a->fd = fd;
		a->t_accept = ck_now_ns();
		pthread_mutex_lock(&mt_lock);
		mt_live++;
		pthread_mutex_unlock(&mt_lock);
		st_threads_add(1);
		rc = pthread_create(&th, &attr, mt_conn, a);
		if (rc != 0) {
			fprintf(stderr, "perfctl-server: pthread_create: %s\n", strerror(rc));
			free(a);
			close(fd);
			st_conn_add(-1);
			st_threads_add(-1);
			pthread_mutex_lock(&mt_lock);
			mt_live--;
			pthread_mutex_unlock(&mt_lock);
		}
	}
	pthread_attr_destroy(&attr);
	return NULL;
}

int mt_start(int lfd)
{
	static int fd;
	fd = lfd;
	if (pthread_create(&mt_acceptor, NULL, mt_run, &fd) != 0)
		return -1;
	mt_started = 1;
	return 0;
}

int mt_join(int64_t deadline_ns)
{
	int rc = 0;
	if (!mt_started)
		return 0;
	if (jn_join(mt_acceptor, deadline_ns) != 0)
		return -1;
	/* connection threads are detached: wait for the last one to say goodbye */
	pthread_mutex_lock(&mt_lock);
	while (mt_live > 0 && rc == 0) {
		struct timespec ts;
		int64_t left = deadline_ns - ck_now_ns();
		if (left <= 0) {
			rc = -1;
			break;
		}
		if (left > 50000000)
			left = 50000000;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += left;
		if (ts.tv_nsec >= 1000000000) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000;
		}
		pthread_cond_timedwait(&mt_none_left, &mt_lock, &ts);
	}
	pthread_mutex_unlock(&mt_lock);
	return rc;
}
