/* loader.c - one PostgreSQL transaction per batch (libpq): partitions, COPY
 * of the new rows straight into visit_record (a probe for stored ids first
 * only after a batch met one) and of their rollups (binary), the rollup
 * upserts, rejects, offsets. */
#include "loader.h"
#include "rollup.h"

#include "errstr.h"
#include "log.h"
#include "pgpool.h"

#include <libpq-fe.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define COPY_CHUNK (256 * 1024)
/* Batches loaded with a probe for stored ids after one whose COPY met an id
 * already stored (a replay from a redirector's spool, a partition loaded
 * again after a rebalance), counted again from every probe that finds one. */
#define PROBE_BATCHES 16
/* Connections loading at once, lane k for the partitions the consumer gives
 * it (consumer_lane; the builder splits the messages so). */
#define LANES LOADER_LANES
_Static_assert(LANES >= 2, "lane 0 loads on the loader's own connection, the others on peers");

struct loader {
	char *dsn, *group, *topic;
	int statement_timeout_ms;  /* SET at connect; 0: none */
	PGconn *conn;
	int hll;
	char *insert_sql;          /* owned, built at connect */
	struct rollup *roll;       /* owned: the current batch's rollups */
	struct loader *peer[LANES - 1]; /* owned: lanes 1.. (a connection each), or
	                            * NULL in a peer itself */
	int32_t *known_months;     /* months whose partition exists (this connection) */
	int probe_batches;         /* batches still to probe for stored ids first
	                            * (after a primary-key conflict); 0: optimistic */
	char copy_state[6];        /* SQLSTATE of the last failed COPY, "" none */
	size_t nknown, known_cap;
};

/* An upsert's SET adding the batch's counts to the row's (alias t). */
#define ADD_COUNTS \
	"visits = t.visits + EXCLUDED.visits, bot_visits = t.bot_visits + EXCLUDED.bot_visits," \
	" first_visit = least(t.first_visit, EXCLUDED.first_visit)," \
	" last_visit = greatest(t.last_visit, EXCLUDED.last_visit)"

/* The rollup statement: from the batch's rows per link and hour (temporary
 * ingest_hour, COPYed from rollup.c's aggregation; link_day_dim_batch rows
 * are COPYed straight) and its orphan counts (ingest_orphan), the upserts
 * of link_hour, link_day, link_total and orphan_day, each in key order so
 * that the lanes' transactions never deadlock. */
#define ROLLUP_SQL_FMT \
	    "WITH hs AS MATERIALIZED (" \
	    " SELECT url_link_id, hour, visits, bot_visits, first_visit, last_visit%1$s" \
	    " FROM ingest_hour)," \
	    "lh AS (" \
	    " INSERT INTO link_hour AS t (url_link_id, hour, visits, bot_visits, first_visit," \
	    "  last_visit%2$s)" \
	    " SELECT url_link_id, hour, visits, bot_visits, first_visit, last_visit%2$s" \
	    " FROM hs ORDER BY 1, 2" \
	    " ON CONFLICT (url_link_id, hour) DO UPDATE SET " ADD_COUNTS "%3$s)," \
	    "ld AS (" \
	    " INSERT INTO link_day AS t (url_link_id, day, visits, bot_visits, first_visit," \
	    "  last_visit%2$s)" \
	    " SELECT url_link_id, (hour AT TIME ZONE 'UTC')::date, sum(visits), sum(bot_visits)," \
	    "  min(first_visit), max(last_visit)%4$s FROM hs GROUP BY 1, 2 ORDER BY 1, 2" \
	    " ON CONFLICT (url_link_id, day) DO UPDATE SET " ADD_COUNTS "%3$s)," \
	    "%5$s" \
	    "lt AS (" \
	    " INSERT INTO link_total AS t (url_link_id, visits, bot_visits, first_visit, last_visit)" \
	    " SELECT url_link_id, sum(visits + bot_visits), sum(bot_visits), min(first_visit)," \
	    "  max(last_visit) FROM hs GROUP BY 1 ORDER BY 1" \
	    " ON CONFLICT (url_link_id) DO UPDATE SET " ADD_COUNTS ")," \
	    "od AS (" \
	    " INSERT INTO orphan_day AS t (unique_code, day, visits, bot_visits)" \
	    " SELECT unique_code, day, visits, bot_visits FROM ingest_orphan ORDER BY 1, 2" \
	    " ON CONFLICT (unique_code, day) DO UPDATE SET visits = t.visits + EXCLUDED.visits," \
	    "  bot_visits = t.bot_visits + EXCLUDED.bot_visits)" \
	    "SELECT 1"

/* The rollup statement (caller frees). hll: link_hour and link_day carry
 * sketches (the hour's from the batch's client ids, the day's the union of
 * its hours'); else the exact visitor sets go to link_hour_visitor. */
static char *
build_insert_sql(int hll)
{
	const char *exact =
	    "lhv AS ("
	    " INSERT INTO link_hour_visitor (url_link_id, hour, client_id)"
	    " SELECT url_link_id, hour, c FROM ingest_hour, unnest(clients) AS c ORDER BY 1, 2, 3"
	    " ON CONFLICT DO NOTHING),";
	size_t n = sizeof(ROLLUP_SQL_FMT) + strlen(exact) + 1024;
	char *sql = malloc(n);

	if (sql == NULL)
		return NULL;
	snprintf(sql, n, ROLLUP_SQL_FMT,
	    hll ? ", coalesce((SELECT hll_add_agg(hll_hash_text(c)) FROM unnest(clients) AS c),"
	          " hll_empty()) AS visitors" : "",
	    hll ? ", visitors" : "",
	    hll ? ", visitors = hll_union(t.visitors, EXCLUDED.visitors)" : "",
	    hll ? ", hll_union_agg(visitors)" : "",
	    hll ? "" : exact);
	return sql;
}

static void
set_pg_error(PGconn *c, PGresult *r, const char *what, char *errstr, size_t errstr_size)
{
	const char *msg = r ? PQresultErrorMessage(r) : PQerrorMessage(c);
	const char *state = r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : NULL;
	size_t n = strlen(msg);

	while (n > 0 && (msg[n - 1] == '\n' || msg[n - 1] == ' '))
		n--;
	errstr_set(errstr, errstr_size, "%s: %.*s%s%s%s", what, (int)n, msg,
	    state ? " (SQLSTATE " : "", state ? state : "", state ? ")" : "");
}

/* Runs sql with text parameters; the result (caller PQclear()s it), or
 * NULL with errstr saying what failed (set_pg_error, with the SQLSTATE). */
static PGresult *
exec_params(struct loader *l, const char *what, const char *sql, int n,
            const char *const *params, char *errstr, size_t errstr_size)
{
	PGresult *r = PQexecParams(l->conn, sql, n, NULL, params, NULL, NULL, 0);
	ExecStatusType st = PQresultStatus(r);

	if (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK)
		return r;
	set_pg_error(l->conn, r, what, errstr, errstr_size);
	PQclear(r);
	return NULL;
}

/* Runs sql (no parameters); 0 when it gives COMMAND_OK or TUPLES_OK. */
static int
exec_ok(struct loader *l, const char *sql, char *errstr, size_t errstr_size)
{
	PGresult *r = PQexec(l->conn, sql);
	ExecStatusType st = PQresultStatus(r);

	if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
		set_pg_error(l->conn, r, sql, errstr, errstr_size);
		PQclear(r);
		return -1;
	}
	PQclear(r);
	return 0;
}

static void
drop_conn(struct loader *l)
{
	if (l->conn)
		PQfinish(l->conn);
	l->conn = NULL;
	l->nknown = 0;
}

static int
known_month(struct loader *l, int32_t m)
{
	for (size_t i = 0; i < l->nknown; i++)
		if (l->known_months[i] == m)
			return 1;
	return 0;
}

static void
remember_month(struct loader *l, int32_t m)
{
	if (known_month(l, m))
		return;
	if (l->nknown == l->known_cap) {
		size_t cap = l->known_cap ? 2 * l->known_cap : 16;
		int32_t *n = realloc(l->known_months, cap * sizeof(*n));
		if (n == NULL)
			return; /* only a cache: asked again next time */
		l->known_months = n;
		l->known_cap = cap;
	}
	l->known_months[l->nknown++] = m;
}

/* SELECT visit_record_ensure_partition() for a month (year * 12 + month - 1). */
static int
ensure_month(struct loader *l, int32_t m, char *errstr, size_t errstr_size)
{
	char ts[40];
	const char *params[1] = { ts };
	PGresult *r;

	snprintf(ts, sizeof(ts), "%04d-%02d-01 00:00:00+00", m / 12, m % 12 + 1);
	r = exec_params(l, "ensure partition", "SELECT visit_record_ensure_partition($1::timestamptz)",
	    1, params, errstr, errstr_size);
	if (r == NULL)
		return -1;
	PQclear(r);
	return 0;
}

/* (Re)connects one lane's connection when needed. Returns 0 or -1. */
static int
connect_lane(struct loader *l, char *errstr, size_t errstr_size)
{
	char set[160], tmo[24] = "DEFAULT"; /* DEFAULT: the server's or pg_dsn's */
	PGresult *r;

	if (l->conn && PQstatus(l->conn) == CONNECTION_OK &&
	    PQtransactionStatus(l->conn) == PQTRANS_IDLE)
		return 0;
	if (l->statement_timeout_ms > 0)
		snprintf(tmo, sizeof(tmo), "%d", l->statement_timeout_ms);
	drop_conn(l);
	/* keepalives: a black-holed server fails the lane's statement within
	 * ~30 s instead of the kernel's two hours */
	l->conn = pgpool_connectdb(l->dsn, "linkpulse-ingest", "5");
	if (PQstatus(l->conn) != CONNECTION_OK) {
		set_pg_error(l->conn, NULL, "connect", errstr, errstr_size);
		drop_conn(l);
		return -1;
	}
	/* enable_hashagg off: link_day's upsert groups a batch's hour rows by
	 * link and day with hll_union_agg, whose state is a whole 128 KB
	 * multiset; a hash aggregate holds one per group at once (~1,000 per
	 * batch: spilled to disk at the default work_mem, 131 MB at 64MB, 22-51
	 * ms per batch by auto_explain), a sorted one holds one at a time */
	/* statement_timeout: a statement waiting on a lock (a report's long
	 * query ahead of a partition's creation, an operator's LOCK TABLE)
	 * fails and its batch is retried with backoff, /healthz saying so,
	 * instead of stalling every partition of the lane without a word */
	snprintf(set, sizeof(set), "SET TimeZone = 'UTC'; SET client_encoding = 'UTF8'; "
	    "SET enable_hashagg = off; SET statement_timeout = %s", tmo);
	if (exec_ok(l, set, errstr, errstr_size) < 0)
		goto fail;
	r = PQexec(l->conn, "SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass('link_hour')"
	    " AND attname = 'visitors' AND NOT attisdropped");
	if (PQresultStatus(r) != PGRES_TUPLES_OK) {
		set_pg_error(l->conn, r, "schema check", errstr, errstr_size);
		PQclear(r);
		goto fail;
	}
	l->hll = PQntuples(r) > 0;
	PQclear(r);
	free(l->insert_sql);
	if ((l->insert_sql = build_insert_sql(l->hll)) == NULL) {
		errstr_set(errstr, errstr_size, "out of memory");
		goto fail;
	}
	if (exec_ok(l, "CREATE TEMP TABLE ingest_hour (url_link_id bigint, hour timestamptz,"
	    " visits bigint, bot_visits bigint, first_visit timestamptz, last_visit timestamptz,"
	    " clients text[]) ON COMMIT DELETE ROWS; ALTER TABLE ingest_hour ALTER COLUMN clients"
	    " SET STORAGE EXTERNAL; CREATE TEMP TABLE ingest_orphan (unique_code"
	    " text, day date, visits bigint, bot_visits bigint) ON COMMIT DELETE ROWS",
	    errstr, errstr_size) < 0)
		goto fail;
	/* Partitions ahead of time: this month and the next two. */
	if (exec_ok(l, "SELECT visit_record_ensure_partition(now() + make_interval(months => i))"
	    " FROM generate_series(0, 2) AS i", errstr, errstr_size) < 0)
		goto fail;
	log_info("connected to PostgreSQL; unique visitors via %s",
	    l->hll ? "hll sketches (link_hour.visitors)" : "exact sets (link_hour_visitor)");
	return 0;
fail:
	drop_conn(l);
	return -1;
}

/* Lane k's loader (borrowed): l itself for lane 0, its peers after it. */
static struct loader *
lane(struct loader *l, int k)
{
	return k == 0 ? l : l->peer[k - 1];
}

int
loader_connect(struct loader *l, char *errstr, size_t errstr_size)
{
	/* every lane at once: a lane connecting at its first batch would pay
	 * the backend's start and its temporary tables there, with that batch
	 * waiting (~80 ms on the 2026-11-27 machine) */
	for (int k = 0; k < LANES; k++)
		if (connect_lane(lane(l, k), errstr, errstr_size) < 0)
			return -1;
	return 0;
}

int
loader_uses_hll(struct loader *l)
{
	return l->hll;
}

static int
copy_begin(struct loader *l, const char *sql, char *errstr, size_t errstr_size)
{
	PGresult *r = PQexec(l->conn, sql);

	if (PQresultStatus(r) != PGRES_COPY_IN) {
		set_pg_error(l->conn, r, "COPY", errstr, errstr_size);
		PQclear(r);
		return -1;
	}
	PQclear(r);
	return 0;
}

static int
copy_put(struct loader *l, const char *data, size_t len, char *errstr, size_t errstr_size)
{
	for (size_t off = 0; off < len; off += COPY_CHUNK) {
		size_t n = len - off < COPY_CHUNK ? len - off : COPY_CHUNK;
		if (PQputCopyData(l->conn, data + off, (int)n) != 1) {
			set_pg_error(l->conn, NULL, "COPY data", errstr, errstr_size);
			return -1;
		}
	}
	return 0;
}

/* Ends the COPY (aborting it when rc is -1); returns 0 or -1. */
static int
copy_end(struct loader *l, int rc, char *errstr, size_t errstr_size)
{
	PGresult *r;

	if (PQputCopyEnd(l->conn, rc ? "client error" : NULL) != 1 && rc == 0) {
		set_pg_error(l->conn, NULL, "COPY end", errstr, errstr_size);
		rc = -1;
	}
	while ((r = PQgetResult(l->conn)) != NULL) {
		if (PQresultStatus(r) != PGRES_COMMAND_OK && rc == 0) {
			const char *st = PQresultErrorField(r, PG_DIAG_SQLSTATE);

			set_pg_error(l->conn, r, "COPY", errstr, errstr_size);
			snprintf(l->copy_state, sizeof(l->copy_state), "%s", st ? st : "");
			rc = -1;
		}
		PQclear(r);
	}
	return rc;
}

/* COPY of a whole buffer. */
static int
copy_buf(struct loader *l, const char *sql, const struct batch_buf *buf, char *errstr,
         size_t errstr_size)
{
	if (copy_begin(l, sql, errstr, errstr_size) < 0)
		return -1;
	return copy_end(l, copy_put(l, buf->data, buf->len, errstr, errstr_size), errstr,
	    errstr_size);
}

/* COPY of the visit_record rows i of b with keep[i] set (keep NULL: all). */
static int
copy_rows(struct loader *l, const struct batch *b, const unsigned char *keep, char *errstr,
          size_t errstr_size)
{
	int rc = 0;
	size_t i = 0;

	if (copy_begin(l, "COPY visit_record (" BATCH_COPY_COLUMNS ") FROM STDIN (FORMAT binary)",
	    errstr, errstr_size) < 0)
		return -1;
	rc = copy_put(l, batch_copy_header, sizeof(batch_copy_header), errstr, errstr_size);
	while (rc == 0 && i < b->rows) {
		size_t j, from, to;

		if (keep && !keep[i]) {
			i++;
			continue;
		}
		for (j = i + 1; j < b->rows && (keep == NULL || keep[j]); j++)
			;
		from = b->row[i].copy_off;
		to = j == b->rows ? b->copy.len : b->row[j].copy_off;
		rc = copy_put(l, b->copy.data + from, to - from, errstr, errstr_size);
		i = j;
	}
	if (rc == 0)
		rc = copy_put(l, batch_copy_trailer, sizeof(batch_copy_trailer), errstr,
		    errstr_size);
	return copy_end(l, rc, errstr, errstr_size);
}

/* A row's key and index, sorted to find repeated and stored keys. */
struct row_key {
	int64_t id, ts_us;
	size_t i;
};

static int
cmp_key(const struct row_key *a, const struct row_key *b)
{
	if (a->id != b->id)
		return a->id < b->id ? -1 : 1;
	if (a->ts_us != b->ts_us)
		return a->ts_us < b->ts_us ? -1 : 1;
	return 0;
}

static int
cmp_row_key(const void *x, const void *y)
{
	const struct row_key *a = x, *b = y;
	int c = cmp_key(a, b);

	return c ? c : (a->i < b->i ? -1 : a->i > b->i);
}

/* Decides which rows to insert: keep[i] = 0 for a key (id, visit_time)
 * earlier in the same batch and, when probe is set, already in visit_record
 * (one index probe per id, as one statement). Returns the number kept, or
 * -1. A row stored before the COPY and not seen here makes the COPY fail on
 * the primary key: load() rolls the batch back and loads it again, probing. */
static long long
find_new_rows(struct loader *l, const struct batch *b, unsigned char *keep, int probe,
              char *errstr, size_t errstr_size)
{
	struct row_key *k = malloc((b->rows ? b->rows : 1) * sizeof(*k));
	char *ids = NULL, lo[40], hi[40];
	size_t cap = b->rows * 21 + 3, len = 1, n = 0;
	const char *params[3];
	PGresult *r;
	long long kept = 0;

	if (k == NULL) {
		errstr_set(errstr, errstr_size, "out of memory");
		return -1;
	}
	for (size_t i = 0; i < b->rows; i++) {
		keep[i] = 0;
		k[n].id = b->row[i].id;
		k[n].ts_us = b->row[i].ts_us;
		k[n++].i = i;
	}
	if (n == 0) {
		free(k);
		return 0;
	}
	qsort(k, n, sizeof(*k), cmp_row_key);
	for (size_t j = 0; j < n; j++)
		kept += keep[k[j].i] = j == 0 || cmp_key(&k[j - 1], &k[j]) != 0;
	if (!probe) {
		free(k);
		return kept;
	}
	if ((ids = malloc(cap)) == NULL) {
		free(k);
		errstr_set(errstr, errstr_size, "out of memory");
		return -1;
	}
	ids[0] = '{';
	for (size_t j = 0; j < n; j++)
		if (j == 0 || k[j - 1].id != k[j].id)
			len += (size_t)snprintf(ids + len, cap - len, "%s%lld", len > 1 ? "," : "",
			    (long long)k[j].id);
	snprintf(ids + len, cap - len, "}");
	batch_format_ts(b->min_ts_us, lo, sizeof(lo), NULL);
	batch_format_ts(b->max_ts_us, hi, sizeof(hi), NULL);
	params[0] = ids;
	params[1] = lo;
	params[2] = hi;
	r = exec_params(l, "probe stored ids", "SELECT id, (extract(epoch FROM visit_time) * 1000000)"
	    "::bigint FROM visit_record WHERE id = ANY ($1::bigint[]) AND visit_time BETWEEN $2 AND $3",
	    3, params, errstr, errstr_size);
	free(ids);
	if (r == NULL) {
		free(k);
		return -1;
	}
	for (int t = 0; t < PQntuples(r); t++) {
		struct row_key key;
		size_t lo_i = 0, hi_i = n;

		key.id = strtoll(PQgetvalue(r, t, 0), NULL, 10);
		key.ts_us = strtoll(PQgetvalue(r, t, 1), NULL, 10);
		while (lo_i < hi_i) { /* first row with a key >= the stored one */
			size_t mid = lo_i + (hi_i - lo_i) / 2;
			if (cmp_key(&k[mid], &key) < 0)
				lo_i = mid + 1;
			else
				hi_i = mid;
		}
		for (; lo_i < n && cmp_key(&k[lo_i], &key) == 0; lo_i++) {
			kept -= keep[k[lo_i].i];
			keep[k[lo_i].i] = 0;
		}
	}
	PQclear(r);
	free(k);
	return kept;
}

static int
insert_rejects(struct loader *l, const struct batch *b, char *errstr, size_t errstr_size)
{
	for (size_t i = 0; i < b->nrejects; i++) {
		const struct batch_reject *rj = &b->rejects[i];
		char part[16], off[24];
		const char *params[5] = { l->topic, part, off, (const char *)rj->raw, rj->reason };
		int lens[5] = { 0, 0, 0, (int)rj->raw_len, 0 };
		int fmts[5] = { 0, 0, 0, 1, 0 };
		PGresult *r;

		snprintf(part, sizeof(part), "%d", rj->partition);
		snprintf(off, sizeof(off), "%lld", (long long)rj->offset);
		r = PQexecParams(l->conn, "INSERT INTO visit_reject (topic, kafka_partition,"
		    " kafka_offset, raw, reason) VALUES ($1, $2, $3, $4, $5)"
		    " ON CONFLICT DO NOTHING",  /* no target: either key (0018 or before) */
		    5, NULL, params, lens, fmts, 0);
		if (PQresultStatus(r) != PGRES_COMMAND_OK) {
			set_pg_error(l->conn, r, "insert reject", errstr, errstr_size);
			PQclear(r);
			return -1;
		}
		PQclear(r);
	}
	return 0;
}

/* Appends "{a,b,c}" of n values to a heap buffer; NULL when out of memory. */
static char *
int_array(const int64_t *v64, const int32_t *v32, int n)
{
	size_t cap = 3 + (size_t)n * 21, len = 1;
	char *s = malloc(cap);

	if (s == NULL)
		return NULL;
	s[0] = '{';
	for (int i = 0; i < n; i++)
		len += (size_t)snprintf(s + len, cap - len, "%s%lld", i ? "," : "",
		    v64 ? (long long)v64[i] : (long long)v32[i]);
	snprintf(s + len, cap - len, "}");
	return s;
}

/* Upserts next offsets; never moves one back unless force (lost-range reset). */
static int
store_offsets(struct loader *l, const int32_t *parts, const int64_t *next, int n, int force,
              char *errstr, size_t errstr_size)
{
	char *pa = int_array(NULL, parts, n), *oa = int_array(next, NULL, n);
	const char *params[5] = { l->group, l->topic, pa, oa, force ? "t" : "f" };
	PGresult *r;
	int rc;

	if (pa == NULL || oa == NULL) {
		errstr_set(errstr, errstr_size, "out of memory");
		free(pa);
		free(oa);
		return -1;
	}
	/* in partition order, so that two writers of the same partitions (a
	 * member the group replaced, still loading) lock the rows alike */
	r = exec_params(l, "store offsets",
	    "INSERT INTO ingest_offset AS t (consumer_group, topic, kafka_partition, next_offset,"
	    " update_time) SELECT $1, $2, p, o, now() FROM unnest($3::int[], $4::bigint[]) AS u(p, o)"
	    " ORDER BY p ON CONFLICT (consumer_group, topic, kafka_partition) DO UPDATE SET next_offset ="
	    " CASE WHEN $5::bool THEN EXCLUDED.next_offset"
	    " ELSE greatest(t.next_offset, EXCLUDED.next_offset) END, update_time = now()",
	    5, params, errstr, errstr_size);
	rc = r == NULL ? -1 : 0;
	PQclear(r);
	free(pa);
	free(oa);
	return rc;
}

static void
rollback(struct loader *l)
{
	PGresult *r;

	if (l->conn == NULL)
		return;
	if (PQstatus(l->conn) != CONNECTION_OK) {
		drop_conn(l);
		return;
	}
	r = PQexec(l->conn, "ROLLBACK");
	if (PQresultStatus(r) != PGRES_COMMAND_OK)
		drop_conn(l);
	PQclear(r);
	/* a month partition may have gone (retention drops old ones) and made
	 * this batch fail: check every month again next time */
	l->nknown = 0;
}

static double
mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

struct rollup_job {
	struct rollup *roll;
	const struct batch *b;
	const unsigned char *keep;
	int rc;
};

static void *
rollup_thread(void *arg)
{
	struct rollup_job *j = arg;

	j->rc = rollup_build(j->roll, j->b, j->keep);
	return NULL;
}

static int
load(struct loader *l, const struct batch *b, struct loader_result *res, char *errstr,
     size_t errstr_size)
{
	double t0 = mono_ms(), t1 = t0, t2 = t0, t3 = t0, t4 = t0, t5 = t0, tc = t0;
	int crc, probe = l->probe_batches > 0;
	unsigned char *keep = NULL;
	int64_t *next = NULL;
	int32_t ntouched = b->ntouched;
	size_t nrows = b->rows, nrejects = b->nrejects;

	memset(res, 0, sizeof(*res));
	if (ntouched == 0)
		return 0; /* no message of this lane's partitions in the batch */
again:
	if (connect_lane(l, errstr, errstr_size) < 0)
		return -1;
	/* Month partitions first, each in a short transaction of its own:
	 * CREATE TABLE ... PARTITION OF locks visit_record (ACCESS EXCLUSIVE)
	 * until its transaction ends. Inside the batch's it was held through
	 * the COPY and the rollups, every other lane waiting, and a lane that
	 * needed two new months could deadlock with one that needed the
	 * second. Here the lane holds no lock while it waits, and a month
	 * is known as soon as its partition is committed. */
	for (size_t i = 0; i < b->nmonths; i++) {
		if (known_month(l, b->months[i]))
			continue;
		if (ensure_month(l, b->months[i], errstr, errstr_size) < 0) {
			l->nknown = 0;
			return -1;
		}
		remember_month(l, b->months[i]);
	}
	if (exec_ok(l, "BEGIN", errstr, errstr_size) < 0)
		goto fail;
	if (nrows > 0) {
		long long kept;
		PGresult *r;

		if ((keep = malloc(b->rows)) == NULL) {
			errstr_set(errstr, errstr_size, "out of memory");
			goto fail;
		}
		if ((kept = find_new_rows(l, b, keep, probe, errstr, errstr_size)) < 0)
			goto fail;
		t1 = mono_ms();
		res->inserted = (uint64_t)kept;
		res->duplicates = nrows - res->inserted;
		if (probe && res->duplicates > 0)
			l->probe_batches = PROBE_BATCHES; /* replays go on: keep probing */
		if (kept > 0) {
			const unsigned char *k = (size_t)kept == b->rows ? NULL : keep;
			/* the rollups are computed on another thread while the server
			 * stores the visits */
			struct rollup_job job = { l->roll, b, k, 0 };
			pthread_t th;
			int threaded = pthread_create(&th, NULL, rollup_thread, &job) == 0;

			if (!threaded)
				rollup_thread(&job);
			l->copy_state[0] = '\0';
			crc = copy_rows(l, b, k, errstr, errstr_size);
			t2 = mono_ms();
			if (threaded)
				pthread_join(th, NULL);
			tc = mono_ms();
			if (crc < 0 && !probe && strcmp(l->copy_state, "23505") == 0) {
				/* an id already stored (a replay): load the batch
				 * again, leaving out the stored ids */
				log_info("a batch holds visits already stored (%s); loading it again "
				    "without them, and probing for stored ids in the next %d batches",
				    errstr, PROBE_BATCHES);
				rollback(l);
				free(keep);
				keep = NULL;
				probe = 1;
				l->probe_batches = PROBE_BATCHES;
				memset(res, 0, sizeof(*res));
				goto again;
			}
			if (crc < 0)
				goto fail;
			if (job.rc < 0) {
				errstr_set(errstr, errstr_size, "out of memory");
				goto fail;
			}
			t3 = mono_ms();
			if (copy_buf(l, "COPY link_day_dim_batch (" ROLLUP_DAY_DIM_COLUMNS ") FROM STDIN"
			    " (FORMAT binary)",
			    rollup_day_dim(l->roll), errstr, errstr_size) < 0 ||
			    copy_buf(l, "COPY ingest_hour (" ROLLUP_HOUR_COLUMNS ") FROM STDIN"
			    " (FORMAT binary)",
			    rollup_hour(l->roll), errstr, errstr_size) < 0 ||
			    copy_buf(l, "COPY ingest_orphan (" ROLLUP_ORPHAN_COLUMNS ") FROM STDIN"
			    " (FORMAT binary)",
			    rollup_orphan(l->roll), errstr, errstr_size) < 0)
				goto fail;
			t4 = mono_ms();
			r = PQexec(l->conn, l->insert_sql);
			if (PQresultStatus(r) != PGRES_TUPLES_OK) {
				set_pg_error(l->conn, r, "rollups", errstr, errstr_size);
				PQclear(r);
				goto fail;
			}
			PQclear(r);
			t5 = mono_ms();
		}
	}
	if (insert_rejects(l, b, errstr, errstr_size) < 0)
		goto fail;
	res->rejects = nrejects;
	if ((next = malloc((size_t)ntouched * sizeof(*next))) == NULL) {
		errstr_set(errstr, errstr_size, "out of memory");
		goto fail;
	}
	for (int32_t i = 0; i < ntouched; i++)
		next[i] = b->next_offset[b->touched[i]];
	if (store_offsets(l, b->touched, next, ntouched, 0, errstr, errstr_size) < 0)
		goto fail;
	if (exec_ok(l, "COMMIT", errstr, errstr_size) < 0) {
		/* A connection lost during COMMIT may have committed: the
		 * offsets read back at recovery decide, not this message. */
		if (PQstatus(l->conn) == CONNECTION_BAD) {
			size_t n = strlen(errstr);

			snprintf(errstr + n, errstr_size - n, " (unless the COMMIT arrived: the "
			    "connection broke during it; the offsets read back decide)");
		}
		goto fail;
	}
	free(next);
	free(keep);
	if (probe && l->probe_batches > 0)
		l->probe_batches--;
	res->seconds = (mono_ms() - t0) / 1e3;
	log_debug("loaded %zu rows (%llu new): probe %.1f ms, COPY visit_record %.1f ms (rollups"
	    " in C on a thread meanwhile, then waited %.1f ms), COPY rollups %.1f ms,"
	    " link_hour/total/orphan upserts %.1f ms, total %.1f ms", b->rows,
	    (unsigned long long)res->inserted, t1 - t0, t2 - t1, tc - t2, t4 - t3, t5 - t4,
	    res->seconds * 1e3);
	return 0;
fail:
	free(keep);
	free(next);
	rollback(l);
	return -1;
}

int
loader_lane_load(struct loader *l, int k, const struct batch *b, struct loader_result *res,
                 char *errstr, size_t errstr_size)
{
	return load(lane(l, k), b, res, errstr, errstr_size);
}

#define OFFSETS_READ_TIMEOUT_MS 10000

int
loader_read_offsets(struct loader *l, const int32_t *partitions, int n, int64_t *offsets,
                    char *errstr, size_t errstr_size)
{
	char *pa, tmo[64];
	const char *params[3];
	PGresult *r;
	int rc = 0;

	if (loader_connect(l, errstr, errstr_size) < 0)
		return -1;
	if ((pa = int_array(NULL, partitions, n)) == NULL) {
		errstr_set(errstr, errstr_size, "out of memory");
		return -1;
	}
	params[0] = l->group;
	params[1] = l->topic;
	params[2] = pa;
	/* Read in librdkafka's rebalance callback, which must return well
	 * within max.poll.interval.ms: at most OFFSETS_READ_TIMEOUT_MS, however
	 * long pg_statement_timeout_ms lets the loads run. */
	snprintf(tmo, sizeof(tmo), "SET LOCAL statement_timeout = %d",
	    l->statement_timeout_ms > 0 && l->statement_timeout_ms < OFFSETS_READ_TIMEOUT_MS ?
	    l->statement_timeout_ms : OFFSETS_READ_TIMEOUT_MS);
	r = NULL;
	if (exec_ok(l, "BEGIN", errstr, errstr_size) == 0 && exec_ok(l, tmo, errstr, errstr_size) == 0)
		r = exec_params(l, "read offsets", "SELECT kafka_partition, next_offset FROM "
		    "ingest_offset WHERE consumer_group = $1 AND topic = $2 AND "
		    "kafka_partition = ANY ($3::int[])", 3, params, errstr, errstr_size);
	free(pa);
	if (r != NULL && exec_ok(l, "COMMIT", errstr, errstr_size) < 0) {
		PQclear(r);
		r = NULL;
	}
	if (r == NULL) { /* the transaction goes with the connection */
		drop_conn(l);
		return -1;
	}
	for (int i = 0; i < n; i++)
		offsets[i] = -1;
	for (int t = 0; t < PQntuples(r); t++) {
		int32_t p = (int32_t)atol(PQgetvalue(r, t, 0));
		for (int i = 0; i < n; i++)
			if (partitions[i] == p)
				offsets[i] = strtoll(PQgetvalue(r, t, 1), NULL, 10);
	}
	PQclear(r);
	return rc;
}

int
loader_record_lost(struct loader *l, int32_t partition, int64_t from, int64_t to,
                   int64_t resume_at, const char *reason, char *errstr, size_t errstr_size)
{
	char part[16], sfrom[24], sto[24];
	const char *params[6] = { l->group, l->topic, part, sfrom, to >= 0 ? sto : NULL, reason };
	PGresult *r;

	if (loader_connect(l, errstr, errstr_size) < 0)
		return -1;
	snprintf(part, sizeof(part), "%d", partition);
	snprintf(sfrom, sizeof(sfrom), "%lld", (long long)from);
	snprintf(sto, sizeof(sto), "%lld", (long long)to);
	if (exec_ok(l, "BEGIN", errstr, errstr_size) < 0)
		goto fail;
	/* Only while the stored offset is still where this member read it: a
	 * member that was replaced meanwhile (a stall past
	 * max.poll.interval.ms) would record the range a second time and force
	 * the new owner's offset back. */
	r = exec_params(l, "lock the stored offset", "SELECT next_offset FROM ingest_offset WHERE "
	    "consumer_group = $1 AND topic = $2 AND kafka_partition = $3 FOR UPDATE", 3, params,
	    errstr, errstr_size);
	if (r == NULL)
		goto fail;
	if (PQntuples(r) == 1 ? strtoll(PQgetvalue(r, 0, 0), NULL, 10) != from : from != 0) {
		errstr_set(errstr, errstr_size, "partition %d's stored offset is %s, not %lld: "
		    "another member moved it", partition, PQntuples(r) == 1 ? PQgetvalue(r, 0, 0) :
		    "absent", (long long)from);
		PQclear(r);
		rollback(l);
		return 1;
	}
	PQclear(r);
	r = exec_params(l, "insert ingest_lost", "INSERT INTO ingest_lost (consumer_group, topic,"
	    " kafka_partition, from_offset, to_offset, reason) VALUES ($1, $2, $3, $4, $5, $6)", 6,
	    params, errstr, errstr_size);
	if (r == NULL)
		goto fail;
	PQclear(r);
	if (resume_at >= 0 && store_offsets(l, &partition, &resume_at, 1, 1, errstr, errstr_size) < 0)
		goto fail;
	if (exec_ok(l, "COMMIT", errstr, errstr_size) < 0)
		goto fail;
	return 0;
fail:
	rollback(l);
	return -1;
}

/* Closes the connections and frees what l (and its peers) own. */
static void
loader_release(struct loader *l)
{
	if (l == NULL)
		return;
	for (int k = 0; k < LANES - 1; k++)
		loader_release(l->peer[k]);
	drop_conn(l);
	free(l->insert_sql);
	rollup_free(l->roll);
	free(l->known_months);
	free(l->dsn);
	free(l->group);
	free(l->topic);
	free(l);
}

/* One lane's loader (a peer, or the base of loader_new). */
static struct loader *
loader_alloc(const char *dsn, const char *group, const char *topic, int statement_timeout_ms)
{
	struct loader *l = calloc(1, sizeof(*l));

	if (l == NULL)
		return NULL;
	l->statement_timeout_ms = statement_timeout_ms;
	l->dsn = strdup(dsn);
	l->group = strdup(group);
	l->topic = strdup(topic);
	l->roll = rollup_new();
	if (l->dsn == NULL || l->group == NULL || l->topic == NULL || l->roll == NULL) {
		loader_release(l);
		return NULL;
	}
	return l;
}

struct loader *
loader_new(const char *dsn, const char *group, const char *topic, int statement_timeout_ms,
           char *errstr, size_t errstr_size)
{
	struct loader *l = loader_alloc(dsn, group, topic, statement_timeout_ms);
	int ok = l != NULL;

	for (int k = 0; ok && k < LANES - 1; k++)
		ok = (l->peer[k] = loader_alloc(dsn, group, topic, statement_timeout_ms)) != NULL;
	if (!ok) {
		loader_release(l);
		errstr_set(errstr, errstr_size, "out of memory");
		return NULL;
	}
	return l;
}

void
loader_free(struct loader *l)
{
	loader_release(l);
}
