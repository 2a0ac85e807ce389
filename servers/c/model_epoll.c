/* model_epoll: N threads, each its own edge-triggered epoll loop over non-blocking sockets
 * (prefix me_). Accepting: by default every loop watches the one listener with EPOLLEXCLUSIVE
 * (the kernel wakes one waiting loop per connection); with PERFCTL_EPOLL_ACCEPT=reuseport each
 * loop owns a SO_REUSEPORT listener and the kernel hashes connections onto them.
 * Request path: read into the connection's buffer, parse in place, build the response head in
 * the connection, one sendmsg per response; no allocation unless a request outgrows 4 KiB. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "clock.h"
#include "conn.h"
#include "join.h"
#include "linger.h" /* LG_LINGER_NS also bounds this loop's own draining */
#include "model.h"
#include "serve.h"
#include "stats.h"

#define ME_EVENTS   256
#define ME_FREE_MAX 256

struct me_link {
	struct me_link *prev, *next;
};

struct me_conn {
	struct me_link link; /* first: in the loop's active or draining list, oldest first */
	int fd;
	int out_pending;
	int draining;
	int rd_drained; /* the last recv() left the socket empty: wait for the next edge */
	int rd_hup;     /* the peer has shut down its side: always read on to EOF */
	size_t out_off;
	size_t drained;
	int64_t since; /* idle since (active) / draining since */
	struct cn_conn cn;
};

struct me_loop {
	pthread_t thread;
	int started;
	int epfd;
	int lfd;
	int spare_fd; /* kept open to shed connections when out of descriptors */
	struct me_link active, draining;
	struct me_conn *free_list; /* reused via link.next */
	int nfree;
};

static struct me_loop *me_loops;
static int me_nloops;
static int me_stopfd = -1;
static char me_tag_listen, me_tag_stop; /* epoll data.ptr markers */

static void me_list_init(struct me_link *h) { h->prev = h->next = h; }

static void me_unlink(struct me_link *l)
{
	l->prev->next = l->next;
	l->next->prev = l->prev;
}

static void me_append(struct me_link *h, struct me_link *l)
{
	l->next = h;
	l->prev = h->prev;
	h->prev->next = l;
	h->prev = l;
}

static void me_touch(struct me_loop *L, struct me_conn *c, int64_t now)
{
	c->since = now;
	me_unlink(&c->link);
	me_append(&L->active, &c->link);
}

static void me_close(struct me_loop *L, struct me_conn *c)
{
	me_unlink(&c->link);
	st_conn_add(-1);
	close(c->fd);
	cn_release(&c->cn);
	if (L->nfree < ME_FREE_MAX) {
		c->link.next = (struct me_link *)L->free_list;
		L->free_list = c;
		L->nfree++;
	} else {
		free(c);
	}
}

/* Sends what is left of the current response: 1 all sent, 0 would block, -1 error. */
static int me_flush(struct me_conn *c)
{
	const struct hd_resp *r = &c->cn.resp;
	size_t total = r->hdr_len + r->body_len;
	while (c->out_off < total) {
		struct iovec iov[2];
		struct msghdr msg;
		ssize_t w;
		memset(&msg, 0, sizeof msg);
		if (c->out_off < r->hdr_len) {
			iov[0].iov_base = (char *)r->hdr + c->out_off;
			iov[0].iov_len = r->hdr_len - c->out_off;
			iov[1].iov_base = (char *)r->body;
			iov[1].iov_len = r->body_len;
			msg.msg_iovlen = r->body_len ? 2 : 1;
		} else {
			iov[0].iov_base = (char *)r->body + (c->out_off - r->hdr_len);
			iov[0].iov_len = total - c->out_off;
			msg.msg_iovlen = 1;
		}
		msg.msg_iov = iov;
		w = sendmsg(c->fd, &msg, MSG_NOSIGNAL);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				return 0;
			return -1;
		}
		c->out_off += (size_t)w;
	}
	c->out_pending = 0;
	return 1;
}

/* Reads and discards until EAGAIN (stay), EOF/error/too much (close). */
static void me_drain(struct me_loop *L, struct me_conn *c)
{
	char *scratch = c->cn.inline_buf;
	for (;;) {
		ssize_t n = recv(c->fd, scratch, CN_INLINE, 0);
		if (n > 0) {
			c->drained += (size_t)n;
			if (c->drained > (1u << 20))
				break;
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return;
		break;
	}
	me_close(L, c);
}

static void me_start_drain(struct me_loop *L, struct me_conn *c)
{
	if (st_stopping()) {
		me_close(L, c);
		return;
	}
	shutdown(c->fd, SHUT_WR);
	cn_release(&c->cn);
	c->draining = 1;
	c->drained = 0;
	c->since = ck_now_ns();
	me_unlink(&c->link);
	me_append(&L->draining, &c->link);
	me_drain(L, c);
}

/* Runs a connection until it would block: flush, answer buffered requests, read. */
static void me_io(struct me_loop *L, struct me_conn *c)
{
	for (;;) {
		int r;
		ssize_t n;
		if (c->out_pending) {
			r = me_flush(c);
			if (r < 0) {
				me_close(L, c);
				return;
			}
			if (r == 0) {
				me_touch(L, c, ck_now_ns()); /* a slow reader is not idle */
				return;
			}
			if (c->cn.resp.close) {
				me_start_drain(L, c);
				return;
			}
		}
		r = cn_next(&c->cn);
		if (r == CN_RESPONSE) {
			c->out_pending = 1;
			c->out_off = 0;
			continue;
		}
		if (r == CN_CONTINUE) {
			(void)send(c->fd, cn_continue_msg, CN_CONTINUE_LEN,
				   MSG_NOSIGNAL | MSG_DONTWAIT);
			continue;
		}
		if (!c->rd_drained) {
			size_t room = cn_rroom(&c->cn);
			n = recv(c->fd, cn_rbuf(&c->cn), room, 0);
			if (n > 0) {
				/* A short read emptied the socket; any later byte (or FIN) raises a
				 * new edge, so the recv() that would only say EAGAIN can be
				 * skipped. */
				c->rd_drained = (size_t)n < room && !c->rd_hup;
				cn_got(&c->cn, (size_t)n, ck_now_ns());
				continue;
			}
			if (n < 0 && errno == EINTR)
				continue;
		} else {
			n = -1;
			errno = EAGAIN;
		}
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			/* idle from now, unless a request is only partly here (slowloris) */
			if (cn_pending(&c->cn) == 0)
				me_touch(L, c, ck_now_ns());
			return;
		}
		me_close(L, c); /* EOF or reset */
		return;
	}
}

static void me_accept(struct me_loop *L)
{
	for (int k = 0; k < 64; k++) {
		struct epoll_event ev;
		struct me_conn *c;
		int fd = accept4(L->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			if ((errno == EMFILE || errno == ENFILE) && L->spare_fd >= 0) {
				/* shed one pending connection so the level-triggered listener calms
				 * down */
				close(L->spare_fd);
				fd = accept(L->lfd, NULL, NULL);
				if (fd >= 0)
					close(fd);
				L->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
				fprintf(stderr, "perfctl-server: accept: out of descriptors\n");
			}
			return;
		}
		sv_set_nodelay(fd);
		if (L->free_list) {
			c = L->free_list;
			L->free_list = (struct me_conn *)c->link.next;
			L->nfree--;
		} else if (!(c = malloc(sizeof *c))) {
			close(fd);
			continue;
		}
		c->fd = fd;
		c->out_pending = 0;
		c->draining = 0;
		c->rd_drained = 0;
		c->rd_hup = 0;
		c->out_off = 0;
		c->since = ck_now_ns();
		cn_init(&c->cn, 0);
		me_append(&L->active, &c->link);
		st_conn_add(1);
		ev.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET;
		ev.data.ptr = c;
		if (epoll_ctl(L->epfd, EPOLL_CTL_ADD, fd, &ev) != 0)
			me_close(L, c);
	}
}

/* Closes connections idle (or draining) for too long; both lists are oldest first. */
static void me_sweep(struct me_loop *L, int64_t now)
{
	while (L->active.next != &L->active) {
		struct me_conn *c = (struct me_conn *)L->active.next;
		if (now - c->since <= sv_idle_ns)
			break;
		me_close(L, c);
	}
	while (L->draining.next != &L->draining) {
		struct me_conn *c = (struct me_conn *)L->draining.next;
		if (now - c->since <= LG_LINGER_NS)
			break;
		me_close(L, c);
	}
}

static void *me_run(void *arg)
{
	struct me_loop *L = arg;
	struct epoll_event ev[ME_EVENTS];
	int64_t last_sweep = ck_now_ns();

	while (!st_stopping()) {
		int n = epoll_wait(L->epfd, ev, ME_EVENTS, 1000);
		int64_t now;
		if (n < 0) {
			if (errno == EINTR)
				continue;
			fprintf(stderr, "perfctl-server: epoll_wait: %s\n", strerror(errno));
			break;
		}
		for (int i = 0; i < n; i++) {
			void *p = ev[i].data.ptr;
			if (p == &me_tag_stop)
				goto done;
			if (p == &me_tag_listen) {
				me_accept(L);
				continue;
			}
			{
				struct me_conn *c = p;
				if (c->draining)
					me_drain(L, c);
				else if (ev[i].events & EPOLLERR)
					me_close(L, c);
				else {
					c->rd_drained = 0;
					c->rd_hup |= (ev[i].events & (EPOLLRDHUP | EPOLLHUP)) != 0;
					me_io(L, c);
				}
			}
		}
		now = ck_now_ns();
		if (now - last_sweep >= 250000000) {
			me_sweep(L, now);
			last_sweep = now;
		}
	}
done:
	while (L->active.next != &L->active)
		me_close(L, (struct me_conn *)L->active.next);
	while (L->draining.next != &L->draining)
		me_close(L, (struct me_conn *)L->draining.next);
	while (L->free_list) {
		struct me_conn *c = L->free_list;
		L->free_list = (struct me_conn *)c->link.next;
		free(c);
	}
	L->nfree = 0;
	return NULL;
}

int me_start(const int *lfds, int nlfds, int threads, int reuseport)
{
	me_stopfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	me_loops = calloc((size_t)threads, sizeof *me_loops);
	if (me_stopfd < 0 || !me_loops)
		return -1;
	me_nloops = threads;
	for (int i = 0; i < threads; i++) {
		struct me_loop *L = &me_loops[i];
		L->epfd = -1;
		L->spare_fd = -1;
		me_list_init(&L->active);
		me_list_init(&L->draining);
	}
	for (int i = 0; i < threads; i++) {
		struct me_loop *L = &me_loops[i];
		struct epoll_event ev;
		L->lfd = reuseport ? lfds[i % nlfds] : lfds[0];
		L->epfd = epoll_create1(EPOLL_CLOEXEC);
		L->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
		if (L->epfd < 0)
			return -1;
		ev.events = EPOLLIN;
		ev.data.ptr = &me_tag_stop;
		if (epoll_ctl(L->epfd, EPOLL_CTL_ADD, me_stopfd, &ev) != 0)
			return -1;
		ev.events = EPOLLIN | (reuseport ? 0 : EPOLLEXCLUSIVE);
		ev.data.ptr = &me_tag_listen;
		if (epoll_ctl(L->epfd, EPOLL_CTL_ADD, L->lfd, &ev) != 0)
			return -1;
		if (pthread_create(&L->thread, NULL, me_run, L) != 0)
			return -1;
		L->started = 1;
	}
	return 0;
}

void me_stop(void)
{
	uint64_t one = 1;
	if (me_stopfd >= 0 && write(me_stopfd, &one, sizeof one) < 0)
		fprintf(stderr, "perfctl-server: eventfd write: %s\n", strerror(errno));
}

int me_join(int64_t deadline_ns)
{
	for (int i = 0; i < me_nloops; i++) {
		if (me_loops[i].started) {
			if (jn_join(me_loops[i].thread, deadline_ns) != 0)
				return -1;
			me_loops[i].started = 0;
		}
	}
	return 0;
}

void me_cleanup(void)
{
	for (int i = 0; i < me_nloops; i++) {
		if (me_loops[i].epfd >= 0)
			close(me_loops[i].epfd);
		if (me_loops[i].spare_fd >= 0)
			close(me_loops[i].spare_fd);
	}
	free(me_loops);
	me_loops = NULL;
	me_nloops = 0;
	if (me_stopfd >= 0)
		close(me_stopfd);
	me_stopfd = -1;
}
