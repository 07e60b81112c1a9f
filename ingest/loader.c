/* loader.c - one PostgreSQL transaction per batch (libpq): partitions, COPY
 * into a temp staging table, INSERT ... ON CONFLICT DO NOTHING RETURNING into
 * data-modifying CTEs that roll up only the rows inserted, rejects, offsets. */
#include "loader.h"

#include "errstr.h"
#include "log.h"

#include <libpq-fe.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define COPY_CHUNK (256 * 1024)

struct loader {
	char *dsn, *group, *topic;
	PGconn *conn;
	int hll;
	char *insert_sql;          /* owned, built at connect */
	int32_t *known_months;     /* months whose partition exists (this connection) */
	size_t nknown, known_cap;

	pthread_t thread;
	pthread_mutex_t mtx;
	pthread_cond_t cond;
	struct batch *job;         /* submitted, not yet finished */
	int busy, finished, quit;
	int job_rc;
	struct loader_result job_res;
	char job_err[512];
};

/* Rollup definitions follow the COMMENTs of 0004_rollups.sql exactly: one
 * value expression per dimension, each never NULL ('' when unknown). They
 * are grouped in one pass with GROUPING SETS (one hash table per dimension)
 * and unpivoted by which value is non-NULL in each set. */
#define DIM_VALUES \
	"coalesce(country_code::text, '') AS v1," \
	"CASE WHEN coalesce(province, '') = '' THEN '' " \
	"  ELSE coalesce(country_code::text, '') || '/' || province END AS v2," \
	"CASE WHEN coalesce(city, '') = '' THEN '' " \
	"  ELSE coalesce(country_code::text, '') || '/' || coalesce(province, '') || '/' || city END AS v3," \
	"coalesce(isp, '') AS v4," \
	"coalesce(browser_type, '') AS v5," \
	"CASE WHEN coalesce(browser_type, '') = '' THEN '' " \
	"  WHEN coalesce(browser_version, '') = '' THEN browser_type " \
	"  ELSE browser_type || ' ' || split_part(browser_version, '.', 1) END AS v6," \
	"coalesce(os_type, '') AS v7," \
	"coalesce(device_type, '') AS v8," \
	"coalesce(referer_host, '') AS v9," \
	"coalesce(language, '') AS v10"
#define DIM_NAME \
	"CASE WHEN v1 IS NOT NULL THEN 'country' WHEN v2 IS NOT NULL THEN 'province' " \
	"WHEN v3 IS NOT NULL THEN 'city' WHEN v4 IS NOT NULL THEN 'isp' " \
	"WHEN v5 IS NOT NULL THEN 'browser' WHEN v6 IS NOT NULL THEN 'browser_version' " \
	"WHEN v7 IS NOT NULL THEN 'os' WHEN v8 IS NOT NULL THEN 'device_type' " \
	"WHEN v9 IS NOT NULL THEN 'referer_host' ELSE 'language' END"

#define INSERT_SQL_FMT \
	    "WITH ins AS (" \
	    " INSERT INTO visit_record (" BATCH_COPY_COLUMNS ")" \
	    " SELECT " BATCH_COPY_COLUMNS " FROM ingest_stage" \
	    " ON CONFLICT DO NOTHING" \
	    " RETURNING url_link_id, unique_code, client_id, visit_time, is_bot, country_code," \
	    "  province, city, isp, browser_type, browser_version, os_type, device_type," \
	    "  referer_host, language)," \
	    "lh AS (" \
	    " INSERT INTO link_hour AS t (url_link_id, hour, visits, bot_visits, first_visit," \
	    "  last_visit%s)" \
	    " SELECT url_link_id, date_trunc('hour', visit_time), count(*) FILTER (WHERE NOT is_bot)," \
	    "  count(*) FILTER (WHERE is_bot), min(visit_time), max(visit_time)%s" \
	    " FROM ins WHERE url_link_id IS NOT NULL GROUP BY 1, 2 ORDER BY 1, 2" \
	    " ON CONFLICT (url_link_id, hour) DO UPDATE SET visits = t.visits + EXCLUDED.visits," \
	    "  bot_visits = t.bot_visits + EXCLUDED.bot_visits," \
	    "  first_visit = least(t.first_visit, EXCLUDED.first_visit)," \
	    "  last_visit = greatest(t.last_visit, EXCLUDED.last_visit)%s)," \
	    "%s" \
	    "lt AS (" \
	    " INSERT INTO link_total AS t (url_link_id, visits, bot_visits, first_visit, last_visit)" \
	    " SELECT url_link_id, count(*), count(*) FILTER (WHERE is_bot), min(visit_time)," \
	    "  max(visit_time) FROM ins WHERE url_link_id IS NOT NULL GROUP BY 1 ORDER BY 1" \
	    " ON CONFLICT (url_link_id) DO UPDATE SET visits = t.visits + EXCLUDED.visits," \
	    "  bot_visits = t.bot_visits + EXCLUDED.bot_visits," \
	    "  first_visit = least(t.first_visit, EXCLUDED.first_visit)," \
	    "  last_visit = greatest(t.last_visit, EXCLUDED.last_visit))," \
	    "ld AS (" \
	    " INSERT INTO link_day_dim AS t (url_link_id, day, dimension, value, is_bot, visits)" \
	    " SELECT url_link_id, day, " DIM_NAME ", coalesce(v1, v2, v3, v4, v5, v6, v7, v8, v9," \
	    "  v10), is_bot, n FROM (" \
	    "  SELECT url_link_id, day, is_bot, v1, v2, v3, v4, v5, v6, v7, v8, v9, v10," \
	    "   count(*) AS n FROM (" \
	    "   SELECT url_link_id, (visit_time AT TIME ZONE 'UTC')::date AS day, is_bot, " \
	    DIM_VALUES " FROM ins WHERE url_link_id IS NOT NULL) x" \
	    "  GROUP BY url_link_id, day, is_bot, GROUPING SETS ((v1), (v2), (v3), (v4), (v5)," \
	    "   (v6), (v7), (v8), (v9), (v10))) g" \
	    " ON CONFLICT (url_link_id, day, dimension, value, is_bot)" \
	    "  DO UPDATE SET visits = t.visits + EXCLUDED.visits)," \
	    "od AS (" \
	    " INSERT INTO orphan_day AS t (unique_code, day, visits, bot_visits)" \
	    " SELECT unique_code, (visit_time AT TIME ZONE 'UTC')::date," \
	    "  count(*) FILTER (WHERE NOT is_bot), count(*) FILTER (WHERE is_bot)" \
	    " FROM ins WHERE url_link_id IS NULL GROUP BY 1, 2 ORDER BY 1, 2" \
	    " ON CONFLICT (unique_code, day) DO UPDATE SET visits = t.visits + EXCLUDED.visits," \
	    "  bot_visits = t.bot_visits + EXCLUDED.bot_visits)" \
	    "SELECT count(*) FROM ins"

static char *
build_insert_sql(int hll)
{
	const char *exact =
	    "lhv AS ("
	    " INSERT INTO link_hour_visitor (url_link_id, hour, client_id)"
	    " SELECT DISTINCT url_link_id, date_trunc('hour', visit_time), client_id FROM ins"
	    " WHERE url_link_id IS NOT NULL AND NOT is_bot ORDER BY 1, 2, 3"
	    " ON CONFLICT DO NOTHING),";
	size_t n = sizeof(INSERT_SQL_FMT) + strlen(exact) + 512;
	char *sql = malloc(n);

	if (sql == NULL)
		return NULL;
	snprintf(sql, n, INSERT_SQL_FMT, hll ? ", visitors" : "",
	    hll ? ", coalesce(hll_add_agg(hll_hash_text(client_id::text)) FILTER (WHERE NOT is_bot),"
	          " hll_empty())" : "",
	    hll ? ", visitors = hll_union(t.visitors, EXCLUDED.visitors)" : "",
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
	r = PQexecParams(l->conn, "SELECT visit_record_ensure_partition($1::timestamptz)", 1, NULL,
	    params, NULL, NULL, 0);
	if (PQresultStatus(r) != PGRES_TUPLES_OK) {
		set_pg_error(l->conn, r, "ensure partition", errstr, errstr_size);
		PQclear(r);
		return -1;
	}
	PQclear(r);
	return 0;
}

int
loader_connect(struct loader *l, char *errstr, size_t errstr_size)
{
	const char *keys[] = { "connect_timeout", "application_name", "dbname", NULL };
	const char *vals[] = { "5", "linkpulse-ingest", l->dsn, NULL };
	PGresult *r;

	if (l->conn && PQstatus(l->conn) == CONNECTION_OK &&
	    PQtransactionStatus(l->conn) == PQTRANS_IDLE)
		return 0;
	drop_conn(l);
	l->conn = PQconnectdbParams(keys, vals, 1);
	if (PQstatus(l->conn) != CONNECTION_OK) {
		set_pg_error(l->conn, NULL, "connect", errstr, errstr_size);
		drop_conn(l);
		return -1;
	}
	if (exec_ok(l, "SET TimeZone = 'UTC'; SET client_encoding = 'UTF8'", errstr,
	    errstr_size) < 0)
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
	if (exec_ok(l, "CREATE TEMP TABLE ingest_stage (LIKE visit_record INCLUDING DEFAULTS)"
	    " ON COMMIT DELETE ROWS", errstr, errstr_size) < 0)
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

int
loader_uses_hll(struct loader *l)
{
	return l->hll;
}

static int
copy_rows(struct loader *l, const struct batch *b, char *errstr, size_t errstr_size)
{
	PGresult *r = PQexec(l->conn, "COPY ingest_stage (" BATCH_COPY_COLUMNS ") FROM STDIN");
	int rc = 0;

	if (PQresultStatus(r) != PGRES_COPY_IN) {
		set_pg_error(l->conn, r, "COPY", errstr, errstr_size);
		PQclear(r);
		return -1;
	}
	PQclear(r);
	for (size_t off = 0; off < b->copy_len; off += COPY_CHUNK) {
		size_t n = b->copy_len - off < COPY_CHUNK ? b->copy_len - off : COPY_CHUNK;
		if (PQputCopyData(l->conn, b->copy + off, (int)n) != 1) {
			set_pg_error(l->conn, NULL, "COPY data", errstr, errstr_size);
			rc = -1;
			break;
		}
	}
	if (PQputCopyEnd(l->conn, rc ? "client error" : NULL) != 1 && rc == 0) {
		set_pg_error(l->conn, NULL, "COPY end", errstr, errstr_size);
		rc = -1;
	}
	while ((r = PQgetResult(l->conn)) != NULL) {
		if (PQresultStatus(r) != PGRES_COMMAND_OK && rc == 0) {
			set_pg_error(l->conn, r, "COPY", errstr, errstr_size);
			rc = -1;
		}
		PQclear(r);
	}
	return rc;
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
		    " ON CONFLICT (topic, kafka_partition, kafka_offset) DO NOTHING",
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
	const char *params[4] = { l->group, l->topic, pa, oa };
	PGresult *r;
	int rc = 0;

	if (pa == NULL || oa == NULL) {
		errstr_set(errstr, errstr_size, "out of memory");
		free(pa);
		free(oa);
		return -1;
	}
	r = PQexecParams(l->conn, force ?
	    "INSERT INTO ingest_offset AS t (consumer_group, topic, kafka_partition, next_offset,"
	    " update_time) SELECT $1, $2, p, o, now() FROM unnest($3::int[], $4::bigint[]) AS u(p, o)"
	    " ON CONFLICT (consumer_group, topic, kafka_partition) DO UPDATE SET"
	    " next_offset = EXCLUDED.next_offset, update_time = now()" :
	    "INSERT INTO ingest_offset AS t (consumer_group, topic, kafka_partition, next_offset,"
	    " update_time) SELECT $1, $2, p, o, now() FROM unnest($3::int[], $4::bigint[]) AS u(p, o)"
	    " ON CONFLICT (consumer_group, topic, kafka_partition) DO UPDATE SET"
	    " next_offset = greatest(t.next_offset, EXCLUDED.next_offset), update_time = now()",
	    4, NULL, params, NULL, NULL, 0);
	if (PQresultStatus(r) != PGRES_COMMAND_OK) {
		set_pg_error(l->conn, r, "store offsets", errstr, errstr_size);
		rc = -1;
	}
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
}

static double
mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int
load(struct loader *l, struct batch *b, struct loader_result *res, char *errstr,
     size_t errstr_size)
{
	double t0 = mono_ms(), t1 = t0, t2 = t0;
	int32_t pending[64];
	size_t npending = 0;
	int64_t *next = NULL;

	memset(res, 0, sizeof(*res));
	if (loader_connect(l, errstr, errstr_size) < 0)
		return -1;
	if (exec_ok(l, "BEGIN", errstr, errstr_size) < 0)
		goto fail;
	for (size_t i = 0; i < b->nmonths; i++) {
		if (known_month(l, b->months[i]))
			continue;
		if (ensure_month(l, b->months[i], errstr, errstr_size) < 0)
			goto fail;
		if (npending < sizeof(pending) / sizeof(pending[0]))
			pending[npending++] = b->months[i];
	}
	if (b->rows > 0) {
		PGresult *r;

		if (copy_rows(l, b, errstr, errstr_size) < 0)
			goto fail;
		t1 = mono_ms();
		r = PQexec(l->conn, l->insert_sql);
		t2 = mono_ms();
		if (PQresultStatus(r) != PGRES_TUPLES_OK) {
			set_pg_error(l->conn, r, "insert visits and rollups", errstr, errstr_size);
			PQclear(r);
			goto fail;
		}
		res->inserted = strtoull(PQgetvalue(r, 0, 0), NULL, 10);
		res->duplicates = b->rows - res->inserted;
		PQclear(r);
	}
	if (insert_rejects(l, b, errstr, errstr_size) < 0)
		goto fail;
	res->rejects = b->nrejects;
	if (b->ntouched > 0) {
		if ((next = malloc((size_t)b->ntouched * sizeof(*next))) == NULL) {
			errstr_set(errstr, errstr_size, "out of memory");
			goto fail;
		}
		for (int32_t i = 0; i < b->ntouched; i++)
			next[i] = b->next_offset[b->touched[i]];
		if (store_offsets(l, b->touched, next, b->ntouched, 0, errstr, errstr_size) < 0)
			goto fail;
	}
	if (exec_ok(l, "COMMIT", errstr, errstr_size) < 0)
		goto fail;
	free(next);
	for (size_t i = 0; i < npending; i++)
		remember_month(l, pending[i]);
	log_debug("loaded %zu rows: COPY %.1f ms, insert and rollups %.1f ms, total %.1f ms",
	    b->rows, t1 - t0, t2 - t1, mono_ms() - t0);
	return 0;
fail:
	free(next);
	rollback(l);
	return -1;
}

int
loader_load(struct loader *l, struct batch *b, struct loader_result *res, char *errstr,
            size_t errstr_size)
{
	return load(l, b, res, errstr, errstr_size);
}

int
loader_read_offsets(struct loader *l, const int32_t *partitions, int n, int64_t *offsets,
                    char *errstr, size_t errstr_size)
{
	char *pa;
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
	r = PQexecParams(l->conn, "SELECT kafka_partition, next_offset FROM ingest_offset"
	    " WHERE consumer_group = $1 AND topic = $2 AND kafka_partition = ANY ($3::int[])",
	    3, NULL, params, NULL, NULL, 0);
	free(pa);
	if (PQresultStatus(r) != PGRES_TUPLES_OK) {
		set_pg_error(l->conn, r, "read offsets", errstr, errstr_size);
		PQclear(r);
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
	r = PQexecParams(l->conn, "INSERT INTO ingest_lost (consumer_group, topic, kafka_partition,"
	    " from_offset, to_offset, reason) VALUES ($1, $2, $3, $4, $5, $6)", 6, NULL, params,
	    NULL, NULL, 0);
	if (PQresultStatus(r) != PGRES_COMMAND_OK) {
		set_pg_error(l->conn, r, "insert ingest_lost", errstr, errstr_size);
		PQclear(r);
		goto fail;
	}
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

static void *
worker(void *arg)
{
	struct loader *l = arg;

	pthread_mutex_lock(&l->mtx);
	for (;;) {
		while (!l->quit && (l->job == NULL || l->finished))
			pthread_cond_wait(&l->cond, &l->mtx);
		if (l->quit)
			break;
		struct batch *b = l->job;
		pthread_mutex_unlock(&l->mtx);
		struct loader_result res;
		char err[512] = "";
		int rc = load(l, b, &res, err, sizeof(err));
		pthread_mutex_lock(&l->mtx);
		l->job_rc = rc;
		l->job_res = res;
		memcpy(l->job_err, err, sizeof(err));
		l->finished = 1;
		pthread_cond_broadcast(&l->cond);
	}
	pthread_mutex_unlock(&l->mtx);
	return NULL;
}

struct loader *
loader_new(const char *dsn, const char *group, const char *topic, char *errstr,
           size_t errstr_size)
{
	struct loader *l = calloc(1, sizeof(*l));

	if (l == NULL || (l->dsn = strdup(dsn)) == NULL || (l->group = strdup(group)) == NULL ||
	    (l->topic = strdup(topic)) == NULL) {
		if (l) {
			free(l->dsn);
			free(l->group);
		}
		free(l);
		errstr_set(errstr, errstr_size, "out of memory");
		return NULL;
	}
	pthread_mutex_init(&l->mtx, NULL);
	pthread_cond_init(&l->cond, NULL);
	if (pthread_create(&l->thread, NULL, worker, l) != 0) {
		errstr_set(errstr, errstr_size, "pthread_create failed");
		pthread_mutex_destroy(&l->mtx);
		pthread_cond_destroy(&l->cond);
		free(l->dsn);
		free(l->group);
		free(l->topic);
		free(l);
		return NULL;
	}
	return l;
}

void
loader_submit(struct loader *l, struct batch *b)
{
	pthread_mutex_lock(&l->mtx);
	l->job = b;
	l->finished = 0;
	l->busy = 1;
	pthread_cond_broadcast(&l->cond);
	pthread_mutex_unlock(&l->mtx);
}

int
loader_done(struct loader *l)
{
	int done;

	pthread_mutex_lock(&l->mtx);
	done = !l->busy || l->finished;
	pthread_mutex_unlock(&l->mtx);
	return done;
}

int
loader_wait(struct loader *l, struct loader_result *res, char *errstr, size_t errstr_size)
{
	int rc;

	pthread_mutex_lock(&l->mtx);
	if (!l->busy) {
		pthread_mutex_unlock(&l->mtx);
		return 1;
	}
	while (!l->finished)
		pthread_cond_wait(&l->cond, &l->mtx);
	rc = l->job_rc;
	*res = l->job_res;
	errstr_set(errstr, errstr_size, "%s", l->job_err);
	l->busy = 0;
	l->job = NULL;
	l->finished = 0;
	pthread_mutex_unlock(&l->mtx);
	return rc;
}

void
loader_free(struct loader *l)
{
	struct loader_result res;

	if (l == NULL)
		return;
	loader_wait(l, &res, NULL, 0);
	pthread_mutex_lock(&l->mtx);
	l->quit = 1;
	pthread_cond_broadcast(&l->cond);
	pthread_mutex_unlock(&l->mtx);
	pthread_join(l->thread, NULL);
	pthread_mutex_destroy(&l->mtx);
	pthread_cond_destroy(&l->cond);
	drop_conn(l);
	free(l->insert_sql);
	free(l->known_months);
	free(l->dsn);
	free(l->group);
	free(l->topic);
	free(l);
}
