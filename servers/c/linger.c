/* linger: lingering close off the serving thread (see linger.h). */
#define _GNU_SOURCE
#include "linger.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "clock.h"
#include "join.h"

#define LG_MAX_BYTES (1u << 20)
#define LG_TICK_MS   20

/* Connections in hand-over order, which is deadline order (every deadline is now +
 * LG_LINGER_NS), so expiry looks at the head only. */
struct lg_entry {
	int fd;
	int64_t deadline;
	size_t total;
	struct lg_entry *prev, *next;
};

static struct {
	pthread_mutex_t lock;
	struct lg_entry list; /* sentinel */
	int ep, started, stop;
	pthread_t thread;
} lg = {.lock = PTHREAD_MUTEX_INITIALIZER, .ep = -1};

/* Unlinks, closes and frees e; lg.lock held. */
static void lg_finish(struct lg_entry *e)
{
	e->prev->next = e->next;
	e->next->prev = e->prev;
	close(e->fd); /* also leaves the epoll set */
	free(e);
}

/* Reads and discards what is readable: 1 when the connection is done with (FIN, error,
 * too much input), 0 when it should wait for more. */
static int lg_drain(struct lg_entry *e)
{
	char scratch[4096];
	for (;;) {
		ssize_t n = recv(e->fd, scratch, sizeof scratch, MSG_DONTWAIT);
		if (n > 0) {
			e->total += (size_t)n;
			if (e->total >= LG_MAX_BYTES)
				return 1;
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		return !(n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK));
	}
}

static void *lg_run(void *unused)
{
	struct epoll_event evs[64];
	(void)unused;
	for (;;) {
		int n = epoll_wait(lg.ep, evs, 64, LG_TICK_MS);
		int64_t now;
		pthread_mutex_lock(&lg.lock);
		if (lg.stop) {
			while (lg.list.next != &lg.list)
				lg_finish(lg.list.next);
			pthread_mutex_unlock(&lg.lock);
			return NULL;
		}
		for (int i = 0; i < n; i++) {
			struct lg_entry *e = evs[i].data.ptr;
			if (lg_drain(e))
				lg_finish(e);
		}
		now = ck_now_ns();
		while (lg.list.next != &lg.list && lg.list.next->deadline <= now)
			lg_finish(lg.list.next);
		pthread_mutex_unlock(&lg.lock);
	}
}

int lg_start(void)
{
	lg.list.prev = lg.list.next = &lg.list;
	lg.ep = epoll_create1(EPOLL_CLOEXEC);
	if (lg.ep < 0)
		return -1;
	if (pthread_create(&lg.thread, NULL, lg_run, NULL) != 0)
		return -1;
	lg.started = 1;
	return 0;
}

void lg_hand_over(int fd)
{
	struct lg_entry *e = calloc(1, sizeof *e);
	struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP};
	shutdown(fd, SHUT_WR);
	pthread_mutex_lock(&lg.lock);
	if (!e || !lg.started || lg.stop) {
		pthread_mutex_unlock(&lg.lock);
		free(e);
		close(fd);
		return;
	}
	e->fd = fd;
	e->deadline = ck_now_ns() + LG_LINGER_NS;
	e->next = &lg.list;
	e->prev = lg.list.prev;
	lg.list.prev->next = e;
	lg.list.prev = e;
	ev.data.ptr = e;
	if (epoll_ctl(lg.ep, EPOLL_CTL_ADD, fd, &ev) != 0)
		lg_finish(e);
	pthread_mutex_unlock(&lg.lock);
}

void lg_stop(void)
{
	pthread_mutex_lock(&lg.lock);
	lg.stop = 1;
	pthread_mutex_unlock(&lg.lock);
}

int lg_join(int64_t deadline_ns)
{
	if (!lg.started)
		return 0;
	if (jn_join(lg.thread, deadline_ns) != 0)
		return -1;
	lg.started = 0;
	close(lg.ep);
	lg.ep = -1;
	return 0;
}
