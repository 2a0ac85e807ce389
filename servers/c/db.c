/* db: see db.h. */
#include "db.h"

#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "url.h"

static const char *db_uri;
static uint64_t db_seed;
static __thread PGconn *db_conn;
static __thread long db_participants;
static __thread uint64_t db_rng;

#define DB_KINDS 4
static const char *const db_sql[DB_KINDS] = {
    "SELECT id, name, email, city, score FROM participants WHERE id = $1",
    "SELECT id, name, email, city, score FROM participants WHERE id >= $1 ORDER BY id LIMIT $2",
    "INSERT INTO registrations (participant_id, note) VALUES ($1, 'perfctl /db insert') "
    "RETURNING id",
    /* the oldest registration; concurrent deletes each take another (SKIP LOCKED) */
    "DELETE FROM registrations WHERE id = (SELECT id FROM registrations ORDER BY id LIMIT 1 "
    "FOR UPDATE SKIP LOCKED) RETURNING id",
};
static const char *const db_names[DB_KINDS] = {"point", "range", "insert", "delete"};
static const int db_nparams[DB_KINDS] = {1, 2, 1, 0};
static const char *const db_stmts[DB_KINDS] = {"q0", "q1", "q2", "q3"}; /* prepared names */

void db_init(const char *uri, uint64_t seed)
{
	db_uri = uri;
	db_seed = seed;
}

static uint64_t db_next(void)
{
	uint64_t x = db_rng; /* xorshift64* */
	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	db_rng = x;
	return x * 0x2545F4914F6CDD1DULL;
}

/* The first line of libpq's message, for a 503 body. */
static void db_reason(const char *msg, char *out, size_t outcap, size_t *out_len)
{
	int n;
	size_t len = strcspn(msg, "\n");
	if (len > 200)
		len = 200;
	n = snprintf(out, outcap, "database unavailable: %.*s\n", (int)len, msg);
	*out_len = n < 0 ? 0 : ((size_t)n < outcap ? (size_t)n : outcap - 1);
}

static void db_drop(void)
{
	if (db_conn)
		PQfinish(db_conn);
	db_conn = NULL;
}

/* Opens this thread's connection and prepares the statements. 0, or -1 with the reason. */
static int db_open(char *out, size_t outcap, size_t *out_len)
{
	static const char *const keys[] = {"dbname", "connect_timeout", NULL};
	const char *vals[] = {db_uri, "2", NULL};
	PGresult *res;

	db_conn = PQconnectdbParams(keys, vals, 1);
	if (!db_conn || PQstatus(db_conn) != CONNECTION_OK)
		goto fail;
	res = PQexec(db_conn, "SELECT participants FROM perfctl_meta");
	if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1) {
		PQclear(res);
		goto fail;
	}
	db_participants = atol(PQgetvalue(res, 0, 0));
	PQclear(res);
	if (db_participants < 1)
		db_participants = 1;
	for (int i = 0; i < DB_KINDS; i++) {
		res = PQprepare(db_conn, db_stmts[i], db_sql[i], 0, NULL);
		if (PQresultStatus(res) != PGRES_COMMAND_OK) {
			PQclear(res);
			goto fail;
		}
		PQclear(res);
	}
	db_rng = (db_seed * 0x9E3779B97F4A7C15ULL) ^ (uint64_t)(uintptr_t)&db_rng;
	if (!db_rng)
		db_rng = 1;
	return 0;
fail:
	db_reason(db_conn ? PQerrorMessage(db_conn) : "out of memory", out, outcap, out_len);
	db_drop();
	return -1;
}

int db_serve(const char *q, size_t qn, char *out, size_t outcap, size_t *out_len, int64_t *db_ns)
{
	const char *pos = q, *end = q + qn, *name, *val, *kind_raw = NULL, *rows_raw = NULL;
	size_t nlen, vlen, kind_len = 0, rows_len = 0;
	uint64_t rows = 1;
	int kind = -1, n;
	char kbuf[16], p1[24], p2[24];
	const char *params[2] = {p1, p2};
	long klen;
	PGresult *res;
	int64_t t0;

	*db_ns = -1;
	while (url_next_param(&pos, end, &name, &nlen, &val, &vlen)) {
		if (!kind_raw && nlen == 5 && memcmp(name, "query", 5) == 0) {
			kind_raw = val;
			kind_len = vlen;
		} else if (!rows_raw && nlen == 4 && memcmp(name, "rows", 4) == 0) {
			rows_raw = val;
			rows_len = vlen;
		}
	}
	klen = kind_raw ? url_decode(kind_raw, kind_len, kbuf, sizeof kbuf - 1) : -1;
	for (int i = 0; klen >= 0 && i < DB_KINDS; i++)
		if (strlen(db_names[i]) == (size_t)klen &&
		    memcmp(kbuf, db_names[i], (size_t)klen) == 0)
			kind = i;
	if (kind < 0) {
		*out_len = (size_t)snprintf(out, outcap, "bad parameter: query\n");
		return 400;
	}
	if (kind == 1 && !rows_raw)
		rows = 10;
	if (rows_raw && (url_parse_uint(rows_raw, rows_len, DB_MAX_ROWS, &rows) != 0 || rows < 1)) {
		*out_len = (size_t)snprintf(out, outcap, "bad parameter: rows\n");
		return 400;
	}
	if (!db_uri) {
		db_reason("no database configured (start the server with --db URI)", out, outcap,
			  out_len);
		return 503;
	}
	if (!db_conn && db_open(out, outcap, out_len) != 0)
		return 503;
	if (kind == 1) {
		long span = db_participants - (long)rows + 1;
		snprintf(p1, sizeof p1, "%ld",
			 1 + (long)(db_next() % (uint64_t)(span > 1 ? span : 1)));
	} else {
		snprintf(p1, sizeof p1, "%ld", 1 + (long)(db_next() % (uint64_t)db_participants));
	}
	snprintf(p2, sizeof p2, "%lu", (unsigned long)rows);
	t0 = ck_now_ns();
	res = PQexecPrepared(db_conn, db_stmts[kind], db_nparams[kind], params, NULL, NULL, 0);
	*db_ns = ck_now_ns() - t0;
	if (PQresultStatus(res) != PGRES_TUPLES_OK) {
		db_reason(PQresultErrorMessage(res)[0] ? PQresultErrorMessage(res)
						       : PQerrorMessage(db_conn),
			  out, outcap, out_len);
		PQclear(res);
		db_drop();
		return 503;
	}
	n = snprintf(out, outcap, "{\"query\": \"%s\", \"rows\": %d}\n", db_names[kind],
		     PQntuples(res));
	PQclear(res);
	*out_len = n < 0 ? 0 : (size_t)n;
	return 200;
}
