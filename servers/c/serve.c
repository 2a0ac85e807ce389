/* serve: listeners, the accept error policy and the blocking connection loop (see serve.h). */
#define _GNU_SOURCE
#include "serve.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "conn.h"
#include "linger.h"
#include "stats.h"
#include "tls.h"

#define SV_DEFER_S 1 /* TCP_DEFER_ACCEPT: wait this long for a request's bytes */

/* A connection inside sv_serve_blocking, in the list sv_wake_blocking walks. */
struct sv_track {
	int fd;
	struct sv_track *prev, *next;
};

int64_t sv_idle_ns = SV_IDLE_NS_DEFAULT;

static pthread_mutex_t sv_track_lock = PTHREAD_MUTEX_INITIALIZER;
static struct sv_track sv_tracked = {-1, &sv_tracked, &sv_tracked};

static void sv_set_timeout(int fd, int opt, long ms)
{
	struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
	setsockopt(fd, SOL_SOCKET, opt, &tv, sizeof tv);
}

int sv_listen(const char *host, int port, int backlog, int nonblock, int reuseport, int *bound,
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
		sv_set_timeout(fd, SO_RCVTIMEO, (long)(sv_idle_ns / 1000000));
		sv_set_timeout(fd, SO_SNDTIMEO, (long)(sv_idle_ns / 1000000));
		sv_set_nodelay(fd);
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
	 * (that wait would be service time no request asked for). After SV_DEFER_S without data
	 * the connection is accepted anyway. */
	setsockopt(fd, IPPROTO_TCP, TCP_DEFER_ACCEPT, &(int){SV_DEFER_S}, sizeof(int));
	if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0) {
		if (ss.ss_family == AF_INET)
			*bound = ntohs(((struct sockaddr_in *)&ss)->sin_port);
		else
			*bound = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
	}
	return fd;
}

void sv_set_nodelay(int fd)
{
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

int sv_accept_error(int err)
{
	static int64_t last_log;
	if (st_stopping())
		return 0;
	switch (err) {
	case EAGAIN: /* the listener's SO_RCVTIMEO (sv_idle_ns) bounds accept(2) too: no
		      * connection came within it, which is no reason to stop accepting */
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

/* Registers a blocking connection so that sv_wake_blocking can reach it; -1 if stopping. */
static int sv_track_add(struct sv_track *t, int fd)
{
	int stopping;
	pthread_mutex_lock(&sv_track_lock);
	t->fd = fd;
	t->next = &sv_tracked;
	t->prev = sv_tracked.prev;
	sv_tracked.prev->next = t;
	sv_tracked.prev = t;
	stopping = st_stopping();
	pthread_mutex_unlock(&sv_track_lock);
	return stopping ? -1 : 0;
}

static void sv_track_del(struct sv_track *t)
{
	pthread_mutex_lock(&sv_track_lock);
	t->prev->next = t->next;
	t->next->prev = t->prev;
	pthread_mutex_unlock(&sv_track_lock);
}

void sv_wake_blocking(void)
{
	pthread_mutex_lock(&sv_track_lock);
	for (struct sv_track *t = sv_tracked.next; t != &sv_tracked; t = t->next)
		shutdown(t->fd, SHUT_RDWR);
	pthread_mutex_unlock(&sv_track_lock);
}

/* Sends a + b completely (blocking socket with a send timeout): 0, or -1. */
static int sv_send_all(int fd, const char *a, size_t an, const char *b, size_t bn)
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
static int sv_input_empty(int fd)
{
	char b;
	ssize_t n = recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
	return n == 0 || (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK));
}

void sv_serve_blocking(int fd, int64_t first_queue_ns)
{
	struct cn_conn c;
	struct sv_track t;
	struct tl_conn *tls = NULL;
	int64_t idle_since = ck_now_ns();
	int linger = 0;

	/* receive/send timeouts and TCP_NODELAY come from the listener (sv_listen) */
	cn_init(&c, first_queue_ns);
	if (sv_track_add(&t, fd) != 0)
		goto out;
	if (tl_enabled() && !(tls = tl_accept(fd)))
		goto out;
	for (;;) {
		int r;
		ssize_t n;
		while ((r = cn_next(&c)) != CN_NEED_MORE) {
			if (r == CN_CONTINUE) {
				if ((tls ? tl_write_all(tls, cn_continue_msg, CN_CONTINUE_LEN, NULL,
							0)
					 : sv_send_all(fd, cn_continue_msg, CN_CONTINUE_LEN, NULL,
						       0)) != 0)
					goto out;
				continue;
			}
			if ((tls ? tl_write_all(tls, c.resp.hdr, c.resp.hdr_len, c.resp.body,
						c.resp.body_len)
				 : sv_send_all(fd, c.resp.hdr, c.resp.hdr_len, c.resp.body,
					       c.resp.body_len)) != 0)
				goto out;
			if (c.resp.close) {
				linger = 1;
				goto out;
			}
			idle_since = ck_now_ns();
		}
		if (st_stopping())
			goto out;
		n = tls ? tl_read(tls, cn_rbuf(&c), cn_rroom(&c))
			: recv(fd, cn_rbuf(&c), cn_rroom(&c), 0);
		if (n > 0) {
			int64_t now = ck_now_ns();
			if (now - idle_since > sv_idle_ns && cn_pending(&c) > 0)
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
	sv_track_del(&t);
	st_conn_add(-1); /* before close(2): once the descriptor is gone, so is the count */
	tl_free(tls);
	if (linger && !tls && !st_stopping() &&
	    (c.resp.status >= 400 || cn_pending(&c) > 0 || !sv_input_empty(fd)))
		lg_hand_over(fd); /* the worker is free before the client's FIN is in */
	else
		close(fd);
	cn_release(&c);
}
