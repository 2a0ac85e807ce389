/* model_pool: N pre-created workers take accepted connections from a bounded queue that the
 * accept thread fills (prefix mp_). The queue holds at most --backlog connections; when it is
 * full the acceptor waits, and further connections wait in the kernel's listen backlog. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include "clock.h"
#include "join.h"
#include "model.h"
#include "serve.h"
#include "stats.h"

struct mp_item {
	int fd;
	int64_t t_accept;
};

static struct {
	pthread_mutex_t lock;
	pthread_cond_t not_empty, not_full;
	struct mp_item *items;
	size_t cap, head, count;
	pthread_t acceptor;
	pthread_t *workers;
	int nworkers, acceptor_started;
	int lfd;
} mp = {.lock = PTHREAD_MUTEX_INITIALIZER,
	.not_empty = PTHREAD_COND_INITIALIZER,
	.not_full = PTHREAD_COND_INITIALIZER};

static void *mp_accept_run(void *unused)
{
	(void)unused;
	while (!st_stopping()) {
		int fd = accept4(mp.lfd, NULL, NULL, SOCK_CLOEXEC);
		int64_t t;
		if (fd < 0) {
			if (sv_accept_error(errno))
				continue;
			break;
		}
		t = ck_now_ns();
		st_conn_add(1);
		pthread_mutex_lock(&mp.lock);
		while (mp.count == mp.cap && !st_stopping())
			pthread_cond_wait(&mp.not_full, &mp.lock);
		if (st_stopping()) {
			pthread_mutex_unlock(&mp.lock);
			close(fd);
			st_conn_add(-1);
			break;
		}
		mp.items[(mp.head + mp.count) % mp.cap] = (struct mp_item){fd, t};
		mp.count++;
		st_queue_add(1);
		pthread_cond_signal(&mp.not_empty);
		pthread_mutex_unlock(&mp.lock);
	}
	return NULL;
}

static void *mp_work_run(void *unused)
{
	(void)unused;
	for (;;) {
		struct mp_item it;
		pthread_mutex_lock(&mp.lock);
		while (mp.count == 0 && !st_stopping())
			pthread_cond_wait(&mp.not_empty, &mp.lock);
		if (st_stopping()) {
			pthread_mutex_unlock(&mp.lock);
			break;
		}
		it = mp.items[mp.head];
		mp.head = (mp.head + 1) % mp.cap;
		mp.count--;
		st_queue_add(-1);
		pthread_cond_signal(&mp.not_full);
		pthread_mutex_unlock(&mp.lock);
		sv_serve_blocking(it.fd, ck_now_ns() - it.t_accept);
	}
	return NULL;
}

int mp_start(int lfd, int threads, int queue_cap)
{
	mp.lfd = lfd;
	mp.cap = queue_cap > 0 ? (size_t)queue_cap : 1;
	mp.items = calloc(mp.cap, sizeof *mp.items);
	mp.workers = calloc((size_t)threads, sizeof *mp.workers);
	if (!mp.items || !mp.workers)
		return -1;
	for (int i = 0; i < threads; i++) {
		if (pthread_create(&mp.workers[i], NULL, mp_work_run, NULL) != 0)
			return -1;
		mp.nworkers++;
	}
	if (pthread_create(&mp.acceptor, NULL, mp_accept_run, NULL) != 0)
		return -1;
	mp.acceptor_started = 1;
	return 0;
}

void mp_stop(void)
{
	pthread_mutex_lock(&mp.lock);
	pthread_cond_broadcast(&mp.not_empty);
	pthread_cond_broadcast(&mp.not_full);
	pthread_mutex_unlock(&mp.lock);
}

int mp_join(int64_t deadline_ns)
{
	if (mp.acceptor_started && jn_join(mp.acceptor, deadline_ns) != 0)
		return -1;
	mp.acceptor_started = 0;
	while (mp.nworkers > 0) {
		if (jn_join(mp.workers[mp.nworkers - 1], deadline_ns) != 0)
			return -1;
		mp.nworkers--;
	}
	return 0;
}

void mp_cleanup(void)
{
	while (mp.count > 0) {
		close(mp.items[mp.head].fd);
		mp.head = (mp.head + 1) % mp.cap;
		mp.count--;
		st_queue_add(-1);
		st_conn_add(-1);
	}
	free(mp.items);
	free(mp.workers);
	mp.items = NULL;
	mp.workers = NULL;
}
