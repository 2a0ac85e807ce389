/* registry: see registry.h. Lock striping: RG_STRIPES chained hash tables, each behind its own
 * mutex; a table doubles when its load factor passes 1. */
#include "registry.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define RG_STRIPES 64

struct rg_node {
	struct rg_node *next;
	uint64_t hash;
	size_t len;
	char name[];
};

struct rg_stripe {
	pthread_mutex_t lock;
	struct rg_node **slots;
	size_t nslots, count;
};

static struct rg_stripe rg_stripes[RG_STRIPES];
static uint64_t rg_total;

static uint64_t rg_hash(const char *s, size_t n)
{
	uint64_t h = 0xcbf29ce484222325ULL; /* FNV-1a */
	for (size_t i = 0; i < n; i++) {
		h ^= (unsigned char)s[i];
		h *= 0x100000001b3ULL;
	}
	return h ^ (h >> 29);
}

void rg_init(void)
{
	for (int i = 0; i < RG_STRIPES; i++) {
		pthread_mutex_init(&rg_stripes[i].lock, NULL);
		rg_stripes[i].slots = NULL;
		rg_stripes[i].nslots = rg_stripes[i].count = 0;
	}
}

void rg_free(void)
{
	for (int i = 0; i < RG_STRIPES; i++) {
		struct rg_stripe *s = &rg_stripes[i];
		for (size_t j = 0; j < s->nslots; j++) {
			struct rg_node *n = s->slots[j], *next;
			for (; n; n = next) {
				next = n->next;
				free(n);
			}
		}
		free(s->slots);
		s->slots = NULL;
		s->nslots = s->count = 0;
		pthread_mutex_destroy(&s->lock);
	}
}

static int rg_grow(struct rg_stripe *s)
{
	size_t nslots = s->nslots ? s->nslots * 2 : 64;
	struct rg_node **slots = calloc(nslots, sizeof *slots);
	if (!slots)
		return -1;
	for (size_t j = 0; j < s->nslots; j++) {
		struct rg_node *n = s->slots[j], *next;
		for (; n; n = next) {
			size_t k = (size_t)(n->hash >> 6) & (nslots - 1);
			next = n->next;
			n->next = slots[k];
			slots[k] = n;
		}
	}
	free(s->slots);
	s->slots = slots;
	s->nslots = nslots;
	return 0;
}

int rg_add(const char *user, size_t len)
{
	uint64_t h = rg_hash(user, len);
	struct rg_stripe *s = &rg_stripes[h & (RG_STRIPES - 1)];
	struct rg_node *n;
	int result = -1;

	pthread_mutex_lock(&s->lock);
	if (s->count >= s->nslots && rg_grow(s) != 0)
		goto out;
	for (n = s->slots[(size_t)(h >> 6) & (s->nslots - 1)]; n; n = n->next) {
		if (n->hash == h && n->len == len && memcmp(n->name, user, len) == 0) {
			result = 0;
			goto out;
		}
	}
	n = malloc(sizeof *n + len);
	if (!n)
		goto out;
	n->hash = h;
	n->len = len;
	memcpy(n->name, user, len);
	{
		size_t k = (size_t)(h >> 6) & (s->nslots - 1);
		n->next = s->slots[k];
		s->slots[k] = n;
	}
	s->count++;
	__atomic_fetch_add(&rg_total, 1, __ATOMIC_RELAXED);
	result = 1;
out:
	pthread_mutex_unlock(&s->lock);
	return result;
}

uint64_t rg_count(void) { return __atomic_load_n(&rg_total, __ATOMIC_RELAXED); }
