/* main: flags, start-up, the listening line, and shutdown on SIGTERM/SIGINT. */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "clock.h"
#include "db.h"
#include "handler.h"
#include "models.h"
#include "registry.h"
#include "search.h"
#include "stats.h"
#include "tls.h"
#include "work.h"

#define MAIN_DEFAULT_CORPUS "servers/corpus/sentences.tsv"

static const char *const main_models[] = {"single", "thread", "pool", "epoll"};

static void main_usage(FILE *f)
{
	fprintf(f, "usage: perfctl-server --port P [--host 127.0.0.1] [--model single|thread|pool|"
		   "epoll] [--threads N] [--backlog K] [--buckets B] [--layout flat|by-type] "
		   "[--corpus PATH] [--seed S] [--idle-timeout-ms MS] [--db URI] "
		   "[--tls-cert PEM --tls-key PEM]\n");
}

static void main_bad(const char *flag, const char *value, const char *why)
{
	if (value)
		fprintf(stderr, "perfctl-server: bad value for %s: '%s' (%s)\n", flag, value, why);
	else
		fprintf(stderr, "perfctl-server: %s: %s\n", flag, why);
	exit(2);
}

/* A decimal integer in [lo, hi], or exit 2 naming the flag. */
static unsigned long long main_uint(const char *flag, const char *v, unsigned long long lo,
				    unsigned long long hi)
{
	char *end;
	unsigned long long x;
	char why[96];
	if (!*v || *v < '0' || *v > '9')
		main_bad(flag, v, "not a non-negative integer");
	errno = 0;
	x = strtoull(v, &end, 10);
	if (*end || errno) {
		main_bad(flag, v, "not a non-negative integer");
	}
	if (x < lo || x > hi) {
		snprintf(why, sizeof why, "must be between %llu and %llu", lo, hi);
		main_bad(flag, v, why);
	}
	return x;
}

/* The default corpus: relative to the working directory, else next to the executable
 * (servers/c/build/perfctl-server -> servers/corpus/sentences.tsv). */
static const char *main_default_corpus(char *buf, size_t cap)
{
	ssize_t n;
	char *slash;
	if (access(MAIN_DEFAULT_CORPUS, R_OK) == 0)
		return MAIN_DEFAULT_CORPUS;
	n = readlink("/proc/self/exe", buf, cap - 1);
	if (n <= 0)
		return MAIN_DEFAULT_CORPUS;
	buf[n] = '\0';
	for (int up = 0; up < 3 && (slash = strrchr(buf, '/')); up++)
		*slash = '\0';
	if (strlen(buf) + sizeof "/corpus/sentences.tsv" > cap)
		return MAIN_DEFAULT_CORPUS;
	strcat(buf, "/corpus/sentences.tsv");
	return buf;
}

int main(int argc, char **argv)
{
	struct md_config cfg = {MD_SINGLE, "127.0.0.1", -1, 4, 128, 10000000000LL};
	const char *model_name = main_models[0], *corpus = NULL, *db_uri = NULL;
	const char *tls_cert = NULL, *tls_key = NULL;
	char corpus_buf[4096], err[512];
	enum sr_layout layout = SR_FLAT;
	unsigned long long buckets = 1024, seed = 1;
	int port = 0, sig, printed_threads;
	sigset_t set;
	int64_t deadline;

	for (int i = 1; i < argc; i++) {
		const char *flag = argv[i], *v, *eq;
		char name[32];
		if (strcmp(flag, "-h") == 0 || strcmp(flag, "--help") == 0) {
			main_usage(stdout);
			return 0;
		}
		eq = strchr(flag, '=');
		if (strncmp(flag, "--", 2) == 0 && eq && (size_t)(eq - flag) < sizeof name) {
			memcpy(name, flag, (size_t)(eq - flag));
			name[eq - flag] = '\0';
			flag = name;
			v = eq + 1;
		} else if (i + 1 < argc) {
			v = argv[++i];
		} else {
			v = NULL;
		}
		if (strcmp(flag, "--port") && strcmp(flag, "--host") && strcmp(flag, "--model") &&
		    strcmp(flag, "--threads") && strcmp(flag, "--backlog") &&
		    strcmp(flag, "--buckets") && strcmp(flag, "--layout") &&
		    strcmp(flag, "--corpus") && strcmp(flag, "--seed") &&
		    strcmp(flag, "--idle-timeout-ms") && strcmp(flag, "--db") &&
		    strcmp(flag, "--tls-cert") && strcmp(flag, "--tls-key"))
			main_bad(flag, NULL, "unknown flag");
		if (!v)
			main_bad(flag, NULL, "missing value");
		if (!strcmp(flag, "--port")) {
			cfg.port = (int)main_uint(flag, v, 0, 65535);
		} else if (!strcmp(flag, "--host")) {
			if (!*v)
				main_bad(flag, v, "empty");
			cfg.host = v;
		} else if (!strcmp(flag, "--model")) {
			int found = 0;
			for (int m = 0; m < 4; m++) {
				if (!strcmp(v, main_models[m])) {
					cfg.model = (enum md_model)m;
					model_name = main_models[m];
					found = 1;
				}
			}
			if (!found)
				main_bad(flag, v, "choose single, thread, pool or epoll");
		} else if (!strcmp(flag, "--threads")) {
			cfg.threads = (int)main_uint(flag, v, 1, 4096);
		} else if (!strcmp(flag, "--backlog")) {
			cfg.backlog = (int)main_uint(flag, v, 1, 1000000);
		} else if (!strcmp(flag, "--buckets")) {
			buckets = main_uint(flag, v, 1, 1ull << 26);
		} else if (!strcmp(flag, "--layout")) {
			if (!strcmp(v, "flat"))
				layout = SR_FLAT;
			else if (!strcmp(v, "by-type"))
				layout = SR_BY_TYPE;
			else
				main_bad(flag, v, "choose flat or by-type");
		} else if (!strcmp(flag, "--corpus")) {
			corpus = v;
		} else if (!strcmp(flag, "--idle-timeout-ms")) {
			cfg.idle_ns = (int64_t)main_uint(flag, v, 1, 3600000) * 1000000;
		} else if (!strcmp(flag, "--db")) {
			if (!*v)
				main_bad(flag, v, "empty");
			db_uri = v;
		} else if (!strcmp(flag, "--tls-cert")) {
			tls_cert = v;
		} else if (!strcmp(flag, "--tls-key")) {
			tls_key = v;
		} else {
			seed = main_uint(flag, v, 0, ~0ull);
		}
	}
	if (cfg.port < 0)
		main_bad("--port", NULL, "required");
	if (!tls_cert != !tls_key)
		main_bad("--tls-cert", NULL, "--tls-cert and --tls-key go together");
	if (tls_cert && cfg.model == MD_EPOLL)
		main_bad("--tls-cert", NULL,
			 "the epoll model has no TLS; use single, thread or pool");
	if (tls_cert && tl_init(tls_cert, tls_key, err, sizeof err) != 0)
		main_bad("--tls-cert", NULL, err);

	/* Every thread inherits this mask: SIGTERM/SIGINT are taken by sigwait() below. */
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	signal(SIGPIPE, SIG_IGN);

	if (!corpus)
		corpus = main_default_corpus(corpus_buf, sizeof corpus_buf);
	if (sr_load(corpus, layout, err, sizeof err) != 0)
		main_bad("--corpus", NULL, err);
	if (st_init((size_t)buckets, model_name) != 0 || hd_init() != 0) {
		fprintf(stderr, "perfctl-server: out of memory\n");
		return 1;
	}
	rg_init();
	wk_seed(seed);
	db_init(db_uri, seed);

	if (md_start(&cfg, &port, err, sizeof err) != 0) {
		fprintf(stderr, "perfctl-server: %s\n", err[0] ? err : "cannot start the model");
		return 1;
	}
	printed_threads = cfg.model == MD_SINGLE ? 1 : cfg.threads;
	printf("perfctl-server listening on %s:%d impl=c model=%s threads=%d backlog=%d%s\n",
	       cfg.host, port, model_name, printed_threads, cfg.backlog,
	       tls_cert ? " tls=1.3" : "");
	fflush(stdout);

	do {
		if (sigwait(&set, &sig) != 0)
			sig = 0;
	} while (sig != SIGTERM && sig != SIGINT);

	st_stop_set();
	md_stop();
	deadline = ck_now_ns() + 1500000000LL;
	if (md_join(deadline) != 0) {
		fprintf(stderr, "perfctl-server: workers still busy at shutdown; exiting anyway\n");
		fflush(stdout);
		_exit(0);
	}
	md_cleanup();
	hd_free();
	rg_free();
	sr_free();
	st_free();
	return 0;
}
