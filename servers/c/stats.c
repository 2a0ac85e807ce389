/* stats: see stats.h. Everything is a relaxed atomic; buckets are one atomic each. */
#include "stats.h"

#include <stdio.h>
#include <stdlib.h>

static struct {
	int stop;
	uint64_t requests;
	uint64_t work_requests;
	int64_t connections;
	int64_t queue_length;
	int64_t threads;
	uint64_t *buckets;
	size_t nbuckets;
	const char *model;
} st;

int st_init(size_t buckets, const char *model)
{
	st.buckets = calloc(buckets, sizeof *st.buckets);
	if (!st.buckets)
		return -1;
	st.nbuckets = buckets;
	st.model = model;
	return 0;
}

void st_free(void)
{
	free(st.buckets);
	st.buckets = NULL;
}

void st_stop_set(void) { __atomic_store_n(&st.stop, 1, __ATOMIC_SEQ_CST); }
int st_stopping(void) { return __atomic_load_n(&st.stop, __ATOMIC_RELAXED); }
void st_request_done(void) { __atomic_fetch_add(&st.requests, 1, __ATOMIC_RELAXED); }

uint64_t st_work_begin(void) { return __atomic_fetch_add(&st.work_requests, 1, __ATOMIC_RELAXED); }

void st_bucket_add(uint64_t i)
{
	__atomic_fetch_add(&st.buckets[i % st.nbuckets], 1, __ATOMIC_RELAXED);
}

void st_conn_add(int delta) { __atomic_fetch_add(&st.connections, delta, __ATOMIC_RELAXED); }
void st_queue_add(int delta) { __atomic_fetch_add(&st.queue_length, delta, __ATOMIC_RELAXED); }
void st_threads_add(int delta) { __atomic_fetch_add(&st.threads, delta, __ATOMIC_RELAXED); }
void st_threads_set(int64_t n) { __atomic_store_n(&st.threads, n, __ATOMIC_RELAXED); }

size_t st_json(char *buf, size_t cap, uint64_t users)
{
	uint64_t sum = 0;
	int n;
	for (size_t i = 0; i < st.nbuckets; i++)
		sum += __atomic_load_n(&st.buckets[i], __ATOMIC_RELAXED);
	n = snprintf(buf, cap,
		     "{\"impl\": \"c\", \"model\": \"%s\", \"threads\": %lld, \"requests\": %llu, "
		     "\"work_requests\": %llu, \"bucket_sum\": %llu, \"buckets\": %zu, "
		     "\"queue_length\": %lld, \"users\": %llu, \"connections\": %lld}\n",
		     st.model, (long long)__atomic_load_n(&st.threads, __ATOMIC_RELAXED),
		     (unsigned long long)__atomic_load_n(&st.requests, __ATOMIC_RELAXED),
		     (unsigned long long)__atomic_load_n(&st.work_requests, __ATOMIC_RELAXED),
		     (unsigned long long)sum, st.nbuckets,
		     (long long)__atomic_load_n(&st.queue_length, __ATOMIC_RELAXED),
		     (unsigned long long)users,
		     (long long)__atomic_load_n(&st.connections, __ATOMIC_RELAXED));
	if (n < 0)
		return 0;
	return (size_t)n < cap ? (size_t)n : cap - 1;
}
