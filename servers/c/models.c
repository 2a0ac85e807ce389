/* models: listener setup, dispatch to the model files, and the blocking connection loop
 * shared by single, thread and pool. */
#define _GNU_SOURCE
#include "models.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "conn.h"
#include "linger.h"
#include "stats.h"

struct md_track {
	int fd;
	struct md_track *prev, *next;
};

static pthread_mutex_t md_track_lock = PTHREAD_MUTEX_INITIALIZER;
static struct md_track md_tracked = {-1, &md_tracked, &md_tracked};
static enum md_model md_model_used;
static int md_lfds[64];
static int md_nlfds;

static void md_set_timeout(int fd, int opt, long ms)
{
	struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
	setsockopt(fd, SOL_SOCKET, opt, &tv, sizeof tv);
}

int md_listen(const char *host, int port, int backlog, int nonblock, int reuseport, int *bound,
	      char *err, size_t errcap)
{
	struct addrinfo hints, *res = NULL;
	char portstr[16];
	int fd, one = 1, rc;
	struct sockaddr_storage ss;
	socklen_t sl = sizeof ss;

	memset(&hints, 0, sizeof hints);
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
	snprintf(portstr, sizeof portstr, "%d", port);
	if ((rc = getaddrinfo(host, portstr, &hints, &res)) != 0) {
		snprintf(err, errcap, "--host %s: %s", host, gai_strerror(rc));
		return -1;
	}
	fd =
	    socket(res->ai_family, res->ai_socktype | SOCK_CLOEXEC | (nonblock ? SOCK_NONBLOCK : 0),
		   res->ai_protocol);
	if (fd < 0) {
		snprintf(err, errcap, "socket: %s", strerror(errno));
		freeaddrinfo(res);
		return -1;
	}
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	if (!nonblock) {
		/* Linux copies these to every accepted socket: set once here, not per connection
		 * (three system calls less on every request of a non-keep-alive load) */
		md_set_timeout(fd, SO_RCVTIMEO, (long)(MD_IDLE_NS / 1000000));
		md_set_timeout(fd, SO_SNDTIMEO, (long)(MD_IDLE_NS / 1000000));
		md_set_nodelay(fd);
	}
	if (reuseport)
		setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one);
	if (bind(fd, res->ai_addr, res->ai_addrlen) != 0 || listen(fd, backlog) != 0) {
		snprintf(err, errcap, "--port %d: cannot listen on %s:%d: %s", port, host, port,
			 strerror(errno));
		close(fd);
		freeaddrinfo(res);
		return -1;
	}
	freeaddrinfo(res);
	/* accept(2) returns a connection once its first bytes are in: a worker handed a new
	 * connection does not sit blocked in recv(2) while the client gets around to sending
	 * (that wait would be service time no request asked for). After MD_DEFER_S without data
	 * the connection is accepted anyway. */
	setsockopt(fd, IPPROTO_TCP, TCP_DEFER_ACCEPT, &(int){MD_DEFER_S}, sizeof(int));
	if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0) {
		if (ss.ss_family == AF_INET)
			*bound = ntohs(((struct sockaddr_in *)&ss)->sin_port);
		else
			*bound = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
	}
	return fd;
}

void md_set_nodelay(int fd)
{
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

int md_join_thread(pthread_t th, int64_t deadline_ns)
{
	struct timespec now;
	int64_t left = deadline_ns - ck_now_ns(), abs_ns;
	clock_gettime(CLOCK_REALTIME, &now);
	if (left < 0)
		left = 0;
	abs_ns = (int64_t)now.tv_sec * 1000000000 + now.tv_nsec + left;
	now.tv_sec = (time_t)(abs_ns / 1000000000);
	now.tv_nsec = (long)(abs_ns % 1000000000);
	return pthread_timedjoin_np(th, NULL, &now) == 0 ? 0 : -1;
}

int md_accept_error(int err)
{
	static int64_t last_log;
	if (st_stopping())
		return 0;
	switch (err) {
	case EINTR:
	case ECONNABORTED:
	case EPROTO:
	case EPERM:
	case ENETDOWN:
	case ENOPROTOOPT:
	case EHOSTDOWN:
	case ENONET:
	case EHOSTUNREACH:
	case EOPNOTSUPP:
	case ENETUNREACH:
	case ETIMEDOUT: return 1;
	case EMFILE:
	case ENFILE:
	case ENOBUFS:
	case ENOMEM: {
		int64_t now = ck_now_ns();
		struct timespec ts = {0, 10000000};
		if (now - last_log > 1000000000LL) {
			fprintf(stderr, "perfctl-server: accept: %s (backing off)\n",
				strerror(err));
			last_log = now;
		}
		nanosleep(&ts, NULL);
		return 1;
	}
	default: return 0; /* EINVAL after shutdown(2) on the listener, EBADF, ... */
	}
}

/* Registers a blocking connection so that md_wake_blocking can reach it; -1 if stopping. */
static int md_track_add(struct md_track *t, int fd)
{
	int stopping;
	pthread_mutex_lock(&md_track_lock);
	t->fd = fd;
	t->next = &md_tracked;
	t->prev = md_tracked.prev;
	md_tracked.prev->next = t;
	md_tracked.prev = t;
	stopping = st_stopping();
	pthread_mutex_unlock(&md_track_lock);
	return stopping ? -1 : 0;
}

static void md_track_del(struct md_track *t)
{
	pthread_mutex_lock(&md_track_lock);
	t->prev->next = t->next;
	t->next->prev = t->prev;
	pthread_mutex_unlock(&md_track_lock);
}

void md_wake_blocking(void)
{
	pthread_mutex_lock(&md_track_lock);
	for (struct md_track *t = md_tracked.next; t != &md_tracked; t = t->next)
		shutdown(t->fd, SHUT_RDWR);
	pthread_mutex_unlock(&md_track_lock);
}

/* Sends a + b completely (blocking socket with a send timeout): 0, or -1. */
static int md_send_all(int fd, const char *a, size_t an, const char *b, size_t bn)
{
	while (an + bn > 0) {
		struct iovec iov[2];
		struct msghdr msg;
		ssize_t w;
		int cnt = 0;
		if (an)
			iov[cnt++] = (struct iovec){(void *)a, an};
		if (bn)
			iov[cnt++] = (struct iovec){(void *)b, bn};
		memset(&msg, 0, sizeof msg);
		msg.msg_iov = iov;
		msg.msg_iovlen = (size_t)cnt;
		w = sendmsg(fd, &msg, MSG_NOSIGNAL);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		if ((size_t)w >= an) {
			w -= (ssize_t)an;
			an = 0;
			b += w;
			bn -= (size_t)w;
		} else {
			a += w;
			an -= (size_t)w;
		}
	}
	return 0;
}

/* 1 when nothing unread waits on fd (or the client has closed its side). After a closing
 * response with all input consumed a plain close(2) sends FIN behind the response; with
 * unread input (an error answered before the body, more requests sent) the kernel would reset
 * the connection instead, so that case gets a lingering close (linger.h). */
static int md_input_empty(int fd)
{
	char b;
	ssize_t n = recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
	return n == 0 || (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK));
}

void md_serve_blocking(int fd, int64_t first_queue_ns)
{
	struct cn_conn c;
	struct md_track t;
	int64_t idle_since = ck_now_ns();
	int linger = 0;

	/* receive/send timeouts and TCP_NODELAY come from the listener (md_listen) */
	cn_init(&c, first_queue_ns);
	if (md_track_add(&t, fd) != 0)
		goto out;
	for (;;) {
		int r;
		ssize_t n;
		while ((r = cn_next(&c)) != CN_NEED_MORE) {
			if (r == CN_CONTINUE) {
				if (md_send_all(fd, cn_continue_msg, CN_CONTINUE_LEN, NULL, 0) != 0)
					goto out;
				continue;
			}
			if (md_send_all(fd, c.resp.hdr, c.resp.hdr_len, c.resp.body,
					c.resp.body_len) != 0)
				goto out;
			if (c.resp.close) {
				linger = 1;
				goto out;
			}
			idle_since = ck_now_ns();
		}
		if (st_stopping())
			goto out;
		n = recv(fd, cn_rbuf(&c), cn_rroom(&c), 0);
		if (n > 0) {
			int64_t now = ck_now_ns();
			if (now - idle_since > MD_IDLE_NS && cn_pending(&c) > 0)
				goto out; /* a request trickling in for longer than the idle timeout
					   */
			cn_got(&c, (size_t)n, now);
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		goto out; /* EOF, idle timeout (EAGAIN), reset */
	}
out:
	md_track_del(&t);
	st_conn_add(-1); /* before close(2): once the descriptor is gone, so is the count */
	if (linger && !st_stopping() &&
	    (c.resp.status >= 400 || cn_pending(&c) > 0 || !md_input_empty(fd)))
		lg_hand_over(fd); /* the worker is free before the client's FIN is in */
	else
		close(fd);
	cn_release(&c);
}

int md_start(const struct md_config *cfg, int *port, char *err, size_t errcap)
{
	int lfd, n = 1, reuseport = 0;
	md_model_used = cfg->model;
	if (cfg->model == MD_EPOLL) {
		const char *mode = getenv("PERFCTL_EPOLL_ACCEPT");
		reuseport = mode && strcmp(mode, "reuseport") == 0;
		if (reuseport)
			n = cfg->threads < 64 ? cfg->threads : 64;
	}
	lfd = md_listen(cfg->host, cfg->port, cfg->backlog, cfg->model == MD_EPOLL, reuseport, port,
			err, errcap);
	if (lfd < 0)
		return -1;
	md_lfds[md_nlfds++] = lfd;
	while (md_nlfds < n) {
		int p2;
		lfd = md_listen(cfg->host, *port, cfg->backlog, 1, 1, &p2, err, errcap);
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
	md_wake_blocking();
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
