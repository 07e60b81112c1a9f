/* query.c - the report queries. Local days come from link_hour (UTC hours
 * summed by the hour's local date); hours cut by a local midnight (zones with
 * non-hour offsets) and the edges of link_day_dim's UTC days come from
 * visit_record. Unique visitors: hll_union_agg, or link_hour_visitor. */
#include "query.h"

#include "errstr.h"
#include "log.h"

#include <libpq-fe.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define OID_BOOL 16
#define OID_INT8 20
#define OID_TEXT 25
#define OID_DATE 1082
#define OID_INT8ARR 1016
#define OID_TSTZARR 1185

/* RFC 3339 in the session time zone (set to the report's zone). */
#define FMT_US "'YYYY-MM-DD\"T\"HH24:MI:SS.USTZH:TZM'"
#define FMT_S "'YYYY-MM-DD\"T\"HH24:MI:SSTZH:TZM'"

struct query {
	PGconn *conn;            /* one connection: a second backend for the top-N
	                          * cost more (fork, cold caches) than it saved */
	int hll;                 /* link_hour.visitors exists */
	char from[16], to[16];  /* room for a year past 9999 (--to 9999-12-31: d1 is 10000-01-01) */
	char d0[16], d1[16];     /* whole UTC days of the range: [d0, d1) */
	char m0[16], m1[16];     /* its whole UTC months [m0, m1) (m0 = m1 = d1: none) */
	char wa0[16], wa1[16];   /* whole ISO weeks in [d0, m0) (wa0 = wa1 = m0: none) */
	char wb0[16], wb1[16];   /* whole ISO weeks in [m1, d1) (wb0 = wb1 = d1: none) */
	char *top_sql;           /* owned: the top-N statement for these bounds */
	char *top_raw_sql;       /* owned: the same rows unsummed (TOP_RAW_TAIL), or NULL
	                          * when the range has visit_record edges */
	int split;               /* a local midnight of the range is not on a UTC hour */
	int day_rows;            /* the series reads link_day (PIECES_DAYS) */
	char *tz, *base_url;
	int exclude_bots;
	long long top_n;
	char top_n_s[24];
	struct model_range range;
	json_t *days, *hours;
	json_t *zero_days, *zero_hours;  /* model_zero_series of days, hours */
};

/* The local range [s, e) and the UTC hours a local midnight cuts (split). */
#define CTE_P "p AS (SELECT ($2::date)::timestamp AT TIME ZONE $4 AS s," \
	" ($3::date + 1)::timestamp AT TIME ZONE $4 AS e)"
#define CTE_SPLIT "split AS (SELECT DISTINCT date_trunc('hour', x.m, 'UTC') AS h" \
	" FROM generate_series($2::date::timestamp, ($3::date + 1)::timestamp, interval '1 day') AS d(d)," \
	" LATERAL (SELECT d.d AT TIME ZONE $4 AS m) AS x WHERE x.m <> date_trunc('hour', x.m, 'UTC'))"
#define GRP(t) "CASE WHEN $5 THEN 0 ELSE " t ".url_link_id END"
/* Visits of the split hours: LATERAL ... OFFSET 0 keeps the planner from
 * turning this into a scan of every visit of the links. */
#define SPLIT_FROM " FROM p CROSS JOIN split sp CROSS JOIN LATERAL (SELECT vr.* FROM visit_record vr" \
	" WHERE vr.url_link_id = ANY($1) AND vr.visit_time >= greatest(sp.h, p.s)" \
	" AND vr.visit_time < least(sp.h + interval '1 hour', p.e) OFFSET 0) AS v"
#define IDX_EXPR "CASE agg.gs WHEN 1 THEN agg.day - $2::date" \
	" WHEN 2 THEN (extract(epoch FROM agg.h - date_trunc('hour', p.s, 'UTC')) / 3600)::bigint ELSE 0 END"

/* The rows SERIES_SQL sums per local day: link_hour's hours of the range
 * but the split ones (sk: its sketch column, or nothing) ... */
#define PIECES_HOURS(sk) \
    " SELECT " GRP("lh") " AS g, lh.hour AS h, (lh.hour AT TIME ZONE $4)::date AS day," \
    "  lh.visits AS v, lh.bot_visits AS b, lh.first_visit AS f, lh.last_visit AS l," \
    "  CASE WHEN lh.visits > 0 THEN lh.hour END AS hh" sk \
    " FROM link_hour lh, p WHERE lh.url_link_id = ANY($1) AND lh.hour >= p.s AND lh.hour < p.e" \
    "  AND lh.hour NOT IN (SELECT h FROM split)"
/* ... or link_day's days (0009) when they are the range's days (query_open
 * sets day_rows): one row and sketch per day instead of 24. No first and
 * last human hours: --exclude-bots reads hours. */
#define PIECES_DAYS \
    " SELECT " GRP("ld") " AS g, NULL::timestamptz AS h, ld.day, ld.visits AS v," \
    "  ld.bot_visits AS b, ld.first_visit AS f, ld.last_visit AS l, NULL::timestamptz AS hh," \
    "  ld.visitors AS sk" \
    " FROM link_day ld WHERE ld.url_link_id = ANY($1) AND ld.day >= $2::date AND ld.day <= $3::date"

/* %s: the pieces (above), the split hours' rows, day sketch union, day
 * uniques, total uniques, the hourly part. Totals come from the day rows
 * (day sketches unioned again), not from every hour a second time. */
static const char SERIES_SQL[] =
    "WITH " CTE_P ", " CTE_SPLIT ", pieces AS ("
    "%s%s),"
    " d AS (SELECT g, day, sum(v)::bigint AS v, sum(b)::bigint AS b, min(f) AS f, max(l) AS l,"
    "  min(hh) AS fh, max(hh) AS lh, %s AS sk FROM pieces GROUP BY g, day)"
    " SELECT g, 1 AS gs, (day - $2::date)::bigint AS idx, v, b, %s AS u, NULL::text AS f,"
    "  NULL::text AS l, NULL::timestamptz AS fh, NULL::timestamptz AS lh FROM d"
    " UNION ALL SELECT g, 3, 0, sum(v)::bigint, sum(b)::bigint, %s, to_char(min(f), " FMT_US "),"
    "  to_char(max(l), " FMT_US "), min(fh), max(lh) FROM d GROUP BY g"
    "%s";

/* The split hours' part of SERIES_SQL, only in zones where a local midnight
 * of the range is not on a UTC hour (its planning is not free); %s: sketch. */
static const char SERIES_SPLIT_SQL[] =
    " UNION ALL"
    " SELECT " GRP("v") ", sp.h, (v.visit_time AT TIME ZONE $4)::date,"
    "  count(*) FILTER (WHERE NOT v.is_bot), count(*) FILTER (WHERE v.is_bot),"
    "  min(v.visit_time), max(v.visit_time), CASE WHEN bool_or(NOT v.is_bot) THEN sp.h END%s"
    SPLIT_FROM " GROUP BY 1, 2, 3";

/* The hourly part of SERIES_SQL (ranges of 7 days or less); %s: uniques. */
static const char SERIES_HOURLY_SQL[] =
    " UNION ALL SELECT pieces.g, 2, (extract(epoch FROM pieces.h - date_trunc('hour', p.s, 'UTC'))"
    "  / 3600)::bigint, sum(pieces.v)::bigint, sum(pieces.b)::bigint, %s, NULL, NULL, NULL, NULL"
    " FROM pieces, p GROUP BY pieces.g, pieces.h, p.s";

/* Exact unique visitors without hll. %s: grouping-set id, hourly set. */
static const char UNIQUES_SQL[] =
    "WITH " CTE_P ", " CTE_SPLIT ", ids AS ("
    " SELECT " GRP("lv") " AS g, lv.hour AS h, (lv.hour AT TIME ZONE $4)::date AS day, lv.client_id AS c"
    " FROM link_hour_visitor lv, p WHERE lv.url_link_id = ANY($1) AND lv.hour >= p.s AND lv.hour < p.e"
    "  AND lv.hour NOT IN (SELECT h FROM split)"
    " UNION ALL"
    " SELECT " GRP("v") ", sp.h, (v.visit_time AT TIME ZONE $4)::date, v.client_id"
    SPLIT_FROM " WHERE NOT v.is_bot),"
    " agg AS (SELECT g, %s, count(DISTINCT c) AS u"
    "  FROM ids GROUP BY GROUPING SETS ((g, day), %s(g)))"
    " SELECT agg.g, agg.gs, " IDX_EXPR ", agg.u FROM agg, p";

/* First and last human visit (--exclude-bots): inside the first and last
 * hours with human visits ($8 groups, $9 first hours, $10 last hours). */
static const char HUMAN_EDGES_SQL[] =
    "WITH " CTE_P " SELECT x.g,"
    " to_char((SELECT min(v.visit_time) FROM visit_record v"
    "  WHERE v.url_link_id = ANY(CASE WHEN $5 THEN $1 ELSE ARRAY[x.g] END) AND NOT v.is_bot"
    "  AND v.visit_time >= greatest(x.fh, p.s) AND v.visit_time < least(x.fh + interval '1 hour', p.e)), " FMT_US "),"
    " to_char((SELECT max(v.visit_time) FROM visit_record v"
    "  WHERE v.url_link_id = ANY(CASE WHEN $5 THEN $1 ELSE ARRAY[x.g] END) AND NOT v.is_bot"
    "  AND v.visit_time >= greatest(x.lh, p.s) AND v.visit_time < least(x.lh + interval '1 hour', p.e)), " FMT_US ")"
    " FROM p, unnest($8::bigint[], $9::timestamptz[], $10::timestamptz[]) AS x(g, fh, lh)";

/* Top-N per dimension over the UTC days wholly inside the range [d0, d1):
 * the compacted rows as link_month_dim for its whole months [m0, m1),
 * link_week_dim for the whole ISO weeks of the stretches before and after
 * them ([wa0, wa1) in [d0, m0), [wb0, wb1) in [m1, d1)) and link_day_dim_row
 * for the remaining days (0008: the three hold the same visits), plus
 * the not yet compacted link_day_dim_batch rows of every day; visit_record
 * for the rest (report_visit_dims, 0006). The bounds come as literal
 * parameters $8..$15 (computed once by query_open): with them the planner
 * knows how many rows to expect and reads the covering indexes (0006, 0008)
 * instead of bitmap heap scans. */
#define TOP_DAYS(lo, hi) \
    " SELECT " GRP("dd") ", dd.dimension, dd.value, dd.is_bot, dd.visits" \
    " FROM link_day_dim_row dd WHERE dd.url_link_id = ANY($1) AND dd.day >= " lo \
    "  AND dd.day < " hi " AND NOT ($6 AND dd.is_bot)"
#define TOP_WEEKS(lo, hi) \
    " SELECT " GRP("wd") ", wd.dimension, wd.value, wd.is_bot, wd.visits" \
    " FROM link_week_dim wd WHERE wd.url_link_id = ANY($1) AND wd.week >= " lo \
    "  AND wd.week < " hi " AND NOT ($6 AND wd.is_bot)"
/* edge: the parts of [s, e) outside the whole UTC days [$8, $9) */
#define TOP_HEAD \
    "WITH " CTE_P ", bt AS (SELECT s, e, $8::timestamp AT TIME ZONE 'UTC' AS t0," \
    "  $9::timestamp AT TIME ZONE 'UTC' AS t1 FROM p)," \
    " edge AS (SELECT lo, hi FROM (SELECT s AS lo, least(e, t0) AS hi FROM bt" \
    "  UNION ALL SELECT greatest(s, t1, t0), e FROM bt) AS x WHERE lo < hi)," \
    " r AS ("
/* The first branch, in every query: it names r's columns. */
#define TOP_BATCH \
    " SELECT " GRP("bb") " AS g, u.dimension, u.value, bb.is_bot, u.visits" \
    " FROM link_day_dim_batch bb CROSS JOIN LATERAL unnest(bb.dimension, bb.value, bb.visits)" \
    "  AS u (dimension, value, visits)" \
    " WHERE bb.url_link_id = ANY($1) AND bb.day >= $8 AND bb.day < $9 AND NOT ($6 AND bb.is_bot)"
#define TOP_MONTHS \
    " SELECT " GRP("md") ", md.dimension, md.value, md.is_bot, md.visits" \
    " FROM link_month_dim md WHERE md.url_link_id = ANY($1) AND md.month >= $10" \
    "  AND md.month < $11 AND NOT ($6 AND md.is_bot)"
#define TOP_EDGE \
    " SELECT " GRP("v") ", x.dimension, x.value, v.is_bot, 1" \
    " FROM edge CROSS JOIN LATERAL (SELECT vr.* FROM visit_record vr WHERE vr.url_link_id = ANY($1)" \
    "  AND vr.visit_time >= edge.lo AND vr.visit_time < edge.hi OFFSET 0) AS v" \
    " CROSS JOIN LATERAL report_visit_dims(v.country_code::text, v.province, v.city, v.isp," \
    "  v.browser_type, v.browser_version, v.os_type, v.device_type, v.referer_host, v.language) AS x" \
    " WHERE NOT ($6 AND v.is_bot)"
/* float8 sums: exact below 2^53, far faster than numeric. The rows come
 * back unordered: top_take ranks and cuts them, which costs the reports
 * process a fraction of what a sort and a window cost PostgreSQL. */
#define TOP_TAIL \
    ")" \
    " SELECT g, dimension, value," \
    "  sum(CASE WHEN is_bot THEN 0 ELSE visits END::float8)::bigint AS v," \
    "  sum(CASE WHEN is_bot THEN visits ELSE 0 END::float8)::bigint AS b FROM r GROUP BY g, dimension, value" \
    " HAVING sum(CASE WHEN is_bot THEN 0 ELSE visits END::float8) > 0"
/* The rows of r as they are, in TOP_TAIL's columns, for the reports of
 * several links: a round of --all reads ~59,000 rollup rows that make
 * ~52,000 groups, and PostgreSQL's hash aggregate of them took about half of
 * the statement (EXPLAIN ANALYZE: 60 of 95 ms); top_take sums them in a
 * fraction of that. Only without visit_record edges, whose rows are single
 * visits. */
#define TOP_RAW_TAIL \
    ")" \
    " SELECT g, dimension, value, CASE WHEN is_bot THEN 0 ELSE visits END AS v," \
    "  CASE WHEN is_bot THEN visits ELSE 0 END AS b FROM r"

/* DateStyle and client_encoding: dates are read as text (YYYY-MM-DD) and
 * values as UTF-8 whatever PGDATESTYLE, PGCLIENTENCODING or the role says.
 * work_mem: a round of --all sorts and hashes ~80,000 link_day_dim rows; at
 * the default 4 MB both spill to temporary files. No parallel workers: the
 * two readers of --all and the rendering thread already fill the cores, and
 * gathering a round's ~55,000 partial groups cost more than it saved. */
static const char SESSION_SQL[] =
    "SELECT set_config('TimeZone', $1, false), set_config('jit', 'off', false),"
    " set_config('DateStyle', 'ISO, YMD', false), set_config('client_encoding', 'UTF8', false),"
    " set_config('work_mem', '64MB', false), set_config('max_parallel_workers_per_gather', '0', false)";

static const char LINKS_SQL[] =
    "SELECT l.id, l.code, CASE WHEN $2 <> '' THEN rtrim($2, '/') || '/' || l.code ELSE l.short_url END,"
    " l.long_url, to_char(l.create_time, " FMT_S "), array_to_json(l.tags)::text,"
    " coalesce(t.visits, 0), coalesce(t.bot_visits, 0), l.deleted"
    " FROM url_link l LEFT JOIN link_total t ON t.url_link_id = l.id WHERE l.id = ANY($1::bigint[]) ORDER BY l.code";

/* Puts libpq's message msg into errstr as one line (the README: every error
 * is one line on stderr): its DETAIL, HINT and LINE lines and the tabs of a
 * failed connection's "\tIs the server running" joined by single spaces. */
static void
pq_error(char *errstr, size_t errstr_size, const char *msg)
{
	char *w, *p;

	errstr_set(errstr, errstr_size, "PostgreSQL: %s", msg);
	if (errstr == NULL || errstr_size == 0)
		return;
	for (p = w = errstr; *p != '\0'; p++) {
		char ch = *p == '\n' || *p == '\t' || *p == '\r' ? ' ' : *p;

		if (ch != ' ' || (w > errstr && w[-1] != ' '))
			*w++ = ch;
	}
	while (w > errstr && w[-1] == ' ')
		w--;
	*w = '\0';
}

static PGresult *
checked(PGconn *c, PGresult *r, char *errstr, size_t errstr_size)
{
	ExecStatusType st = PQresultStatus(r);

	if (st == PGRES_TUPLES_OK || st == PGRES_COMMAND_OK)
		return r;
	pq_error(errstr, errstr_size, r ? PQresultErrorMessage(r) : PQerrorMessage(c));
	PQclear(r);
	return NULL;
}

static PGresult *
exec(struct query *q, const char *sql, int n, const Oid *types, const char *const *vals,
     char *errstr, size_t errstr_size)
{
	struct timespec t0, t1;
	PGresult *r;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	r = PQexecParams(q->conn, sql, n, types, vals, NULL, NULL, 0);
	if (log_enabled(LOG_LVL_DEBUG)) {
		clock_gettime(CLOCK_MONOTONIC, &t1);
		log_debug("%.1f ms, %d rows: %.60s", (double)(t1.tv_sec - t0.tv_sec) * 1e3 +
		    (double)(t1.tv_nsec - t0.tv_nsec) / 1e6, PQntuples(r), sql);
	}
	return checked(q->conn, r, errstr, errstr_size);
}

/* "{1,2,3}"; caller frees. */
static char *
id_array(const long long *ids, size_t n)
{
	char *s = malloc(n * 21 + 3), *p = s;

	if (s == NULL)
		return NULL;
	*p++ = '{';
	for (size_t i = 0; i < n; i++)
		p += sprintf(p, i ? ",%lld" : "%lld", ids[i]);
	*p++ = '}';
	*p = '\0';
	return s;
}

static json_t *
labels(struct query *q, const char *sql, char *errstr, size_t errstr_size)
{
	static const Oid types[] = { OID_INT8ARR, OID_DATE, OID_DATE, OID_TEXT };
	const char *vals[] = { "{}", q->from, q->to, q->tz };
	PGresult *r = exec(q, sql, 4, types, vals, errstr, errstr_size);
	json_t *a;

	if (r == NULL)
		return NULL;
	a = json_array();
	for (int i = 0; i < PQntuples(r); i++)
		json_array_append_new(a, json_string(PQgetvalue(r, i, 0)));
	PQclear(r);
	return a;
}

/* The top-N statement for q's bounds: only the rollup branches whose range
 * is not empty (each one costs planning time), and the visit_record edges
 * only when the range does not start and end on UTC midnights (edges).
 * Returns a malloc'ed string (the caller frees it), NULL when out of memory. */
static char *
build_top_sql(const struct query *q, int edges, const char *tail)
{
	const struct { const char *lo, *hi, *sql; } br[] = {
		{ q->m0, q->m1, TOP_MONTHS },
		{ q->wa0, q->wa1, TOP_WEEKS("$12", "$13") },
		{ q->wb0, q->wb1, TOP_WEEKS("$14", "$15") },
		{ q->d0, q->wa0, TOP_DAYS("$8", "$12") },
		{ q->wa1, q->m0, TOP_DAYS("$13", "$10") },
		{ q->m1, q->wb0, TOP_DAYS("$11", "$14") },
		{ q->wb1, q->d1, TOP_DAYS("$15", "$9") },
		{ "0", edges ? "1" : "0", TOP_EDGE },
	};
	static const char sep[] = " UNION ALL";
	size_t n = sizeof(TOP_HEAD TOP_BATCH) + strlen(tail);
	char *sql;

	for (size_t i = 0; i < sizeof(br) / sizeof(br[0]); i++)
		n += strlen(br[i].sql) + sizeof(sep);
	if ((sql = malloc(n)) == NULL)
		return NULL;
	strcpy(sql, TOP_HEAD TOP_BATCH);
	for (size_t i = 0; i < sizeof(br) / sizeof(br[0]); i++) {
		if (strcmp(br[i].lo, br[i].hi) < 0) {
			strcat(sql, sep);
			strcat(sql, br[i].sql);
		}
	}
	strcat(sql, tail);
	return sql;
}

/* "a,b,c" as a JSON array of strings; NULL when out of memory. */
static json_t *
split_labels(const char *csv)
{
	json_t *a = json_array();

	while (a != NULL && *csv != '\0') {
		size_t n = strcspn(csv, ",");

		if (json_array_append_new(a, json_stringn(csv, n)) < 0) {
			json_decref(a);
			return NULL;
		}
		csv += n + (csv[n] == ',');
	}
	return a;
}

struct query *
query_open(const char *dsn, const char *tz, const char *from, const char *to, int exclude_bots,
           long long top_n, const char *base_url, int *bad_input, char *errstr, size_t errstr_size)
{
	struct query *q = calloc(1, sizeof(*q));
	PGresult *r;
	const char *vals[3], *state;
	int ndays, utc_days, edges;

	*bad_input = 0;
	if (q == NULL || (q->tz = strdup(tz)) == NULL || (q->base_url = strdup(base_url)) == NULL) {
		errstr_set(errstr, errstr_size, "out of memory");
		query_close(q);
		return NULL;
	}
	q->exclude_bots = exclude_bots;
	q->top_n = top_n;
	snprintf(q->top_n_s, sizeof(q->top_n_s), "%lld", top_n);
	q->conn = PQconnectdb(dsn);
	if (PQstatus(q->conn) != CONNECTION_OK) {
		pq_error(errstr, errstr_size, PQerrorMessage(q->conn));
		query_close(q);
		return NULL;
	}
	/* The zone: PostgreSQL's own tz database decides what exists. Report
	 * queries are short: LLVM JIT compilation (PostgreSQL's jit setting)
	 * would cost more than the queries themselves. */
	vals[0] = tz;
	r = PQexecParams(q->conn, SESSION_SQL, 1, NULL, vals, NULL, NULL, 0);
	state = PQresultStatus(r) == PGRES_FATAL_ERROR ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : NULL;
	/* 22023 invalid_parameter_value: the zone. Any other failure (the
	 * connection lost, a pooler's wait timeout) is not the user's input. */
	if (state != NULL && strcmp(state, "22023") == 0) {
		PQclear(r);
		errstr_set(errstr, errstr_size, "unknown time zone \"%s\" (use an IANA name such as "
		    "Europe/Paris or Asia/Shanghai)", tz);
		*bad_input = 1;
		query_close(q);
		return NULL;
	}
	if ((r = checked(q->conn, r, errstr, errstr_size)) == NULL) {
		query_close(q);
		return NULL;
	}
	PQclear(r);
	vals[0] = from;
	vals[1] = to;
	vals[2] = tz;
	/* One round trip (MATERIALIZED: inlined, the chained CTEs cost ~7 ms
	 * of planning): the range, whether link_hour has hll sketches, the
	 * whole UTC days [d0, d1), the whole months [m0, m1) inside the range
	 * (m0 = m1 = d1 when none), the whole ISO weeks of [d0, m0) and of
	 * [m1, d1) (lo = hi = the stretch's end when none), the day labels (at
	 * most 3701: a longer range is refused below), the day count, whether
	 * the range has edges inside UTC days, and, from one pass over its
	 * local midnights, whether one is off a UTC hour (split) and whether
	 * all are UTC midnights (its days are UTC days). */
	r = exec(q, "WITH r AS MATERIALIZED (SELECT coalesce($1::date, coalesce($2::date, (now() AT TIME ZONE $3)::date)"
	    "  - 29) AS f, coalesce($2::date, (now() AT TIME ZONE $3)::date) AS t),"
	    " p AS MATERIALIZED (SELECT f, t, f::timestamp AT TIME ZONE $3 AS s, (t + 1)::timestamp AT TIME ZONE $3 AS e"
	    "  FROM r),"
	    " dd AS MATERIALIZED (SELECT *, CASE WHEN s = date_trunc('day', s, 'UTC') THEN (s AT TIME ZONE 'UTC')::date"
	    "  ELSE (s AT TIME ZONE 'UTC')::date + 1 END AS d0, (e AT TIME ZONE 'UTC')::date AS d1 FROM p),"
	    " mm AS MATERIALIZED (SELECT *, CASE WHEN d0 = date_trunc('month', d0)::date THEN d0"
	    "  ELSE (date_trunc('month', d0) + interval '1 month')::date END AS m0,"
	    "  date_trunc('month', d1)::date AS m1 FROM dd),"
	    " m AS MATERIALIZED (SELECT *, CASE WHEN m0 < m1 THEN m0 ELSE d1 END AS mlo,"
	    "  CASE WHEN m0 < m1 THEN m1 ELSE d1 END AS mhi FROM mm),"
	    " w AS MATERIALIZED (SELECT *, CASE WHEN d0 = date_trunc('week', d0)::date THEN d0"
	    "  ELSE (date_trunc('week', d0) + interval '7 days')::date END AS a0,"
	    "  date_trunc('week', mlo)::date AS a1,"
	    "  CASE WHEN mhi = date_trunc('week', mhi)::date THEN mhi"
	    "  ELSE (date_trunc('week', mhi) + interval '7 days')::date END AS b0,"
	    "  date_trunc('week', d1)::date AS b1 FROM m)"
	    " SELECT f, t, (SELECT count(*) FROM pg_attribute WHERE attrelid = 'link_hour'::regclass"
	    "  AND attname = 'visitors' AND NOT attisdropped), d0, d1, mlo, mhi,"
	    " (SELECT string_agg(to_char(x, 'YYYY-MM-DD'), ',') FROM (SELECT x FROM generate_series("
	    "  f::timestamp, t::timestamp, interval '1 day') AS x ORDER BY x LIMIT 3701) AS l), t - f + 1,"
	    " CASE WHEN a0 < a1 THEN a0 ELSE mlo END, CASE WHEN a0 < a1 THEN a1 ELSE mlo END,"
	    " CASE WHEN b0 < b1 THEN b0 ELSE d1 END, CASE WHEN b0 < b1 THEN b1 ELSE d1 END,"
	    " s < d0::timestamp AT TIME ZONE 'UTC' OR e > d1::timestamp AT TIME ZONE 'UTC',"
	    " mid.off_hour, mid.utc,"
	    /* PostgreSQL reads a zone's text two ways: the TimeZone setting
	     * (labels, first and last visits) and AT TIME ZONE (day and hour
	     * bounds), which takes an abbreviation first (CET: +01:00 all
	     * year) and a number as POSIX (+8: 8 hours west). Both must say
	     * the same at the range's ends and mid-winter and mid-summer. */
	    " (SELECT bool_and(x AT TIME ZONE $3 = x::timestamptz) FROM (VALUES (f::timestamp),"
	    "  ((t + 1)::timestamp), (date_trunc('year', f) + interval '14 days 12 hours'),"
	    "  (date_trunc('year', f) + interval '6 months 14 days 12 hours')) AS c(x))"
	    " FROM w, LATERAL (SELECT coalesce(bool_or(x.m <> date_trunc('hour', x.m, 'UTC')), false) AS off_hour,"
	    "  coalesce(bool_and(x.m = g.d AT TIME ZONE 'UTC'), false) AS utc"
	    "  FROM generate_series(w.f::timestamp, (w.t + 1)::timestamp, interval '1 day') AS g(d),"
	    "  LATERAL (SELECT g.d AT TIME ZONE $3 AS m) AS x) AS mid", 3, NULL, vals, errstr, errstr_size);
	if (r == NULL) {
		query_close(q);
		return NULL;
	}
	snprintf(q->from, sizeof(q->from), "%s", PQgetvalue(r, 0, 0));
	snprintf(q->to, sizeof(q->to), "%s", PQgetvalue(r, 0, 1));
	q->hll = strcmp(PQgetvalue(r, 0, 2), "1") == 0;
	snprintf(q->d0, sizeof(q->d0), "%s", PQgetvalue(r, 0, 3));
	snprintf(q->d1, sizeof(q->d1), "%s", PQgetvalue(r, 0, 4));
	snprintf(q->m0, sizeof(q->m0), "%s", PQgetvalue(r, 0, 5));
	snprintf(q->m1, sizeof(q->m1), "%s", PQgetvalue(r, 0, 6));
	if (strcmp(q->from, q->to) > 0) {
		PQclear(r);
		errstr_set(errstr, errstr_size, "--from %s is after --to %s", q->from, q->to);
		*bad_input = 1;
		query_close(q);
		return NULL;
	}
	/* before any statement is built for a range it would misread */
	if (strcmp(PQgetvalue(r, 0, 16), "t") != 0) {
		PQclear(r);
		errstr_set(errstr, errstr_size, "time zone \"%s\" is ambiguous: PostgreSQL reads it "
		    "as one offset for labels and another for day bounds (an abbreviation such as "
		    "CET, or a bare offset such as +8); use an IANA name such as Europe/Paris or "
		    "Etc/GMT-8", tz);
		*bad_input = 1;
		query_close(q);
		return NULL;
	}
	q->days = split_labels(PQgetvalue(r, 0, 7));
	ndays = atoi(PQgetvalue(r, 0, 8));
	snprintf(q->wa0, sizeof(q->wa0), "%s", PQgetvalue(r, 0, 9));
	snprintf(q->wa1, sizeof(q->wa1), "%s", PQgetvalue(r, 0, 10));
	snprintf(q->wb0, sizeof(q->wb0), "%s", PQgetvalue(r, 0, 11));
	snprintf(q->wb1, sizeof(q->wb1), "%s", PQgetvalue(r, 0, 12));
	edges = strcmp(PQgetvalue(r, 0, 13), "t") == 0;
	q->top_sql = build_top_sql(q, edges, TOP_TAIL);
	q->top_raw_sql = edges ? NULL : build_top_sql(q, 0, TOP_RAW_TAIL);
	q->split = strcmp(PQgetvalue(r, 0, 14), "t") == 0;
	utc_days = strcmp(PQgetvalue(r, 0, 15), "t") == 0;
	PQclear(r);
	if (q->days == NULL || q->top_sql == NULL || (!edges && q->top_raw_sql == NULL)) {
		errstr_set(errstr, errstr_size, "out of memory");
		query_close(q);
		return NULL;
	}
	if (ndays > 3700) {
		errstr_set(errstr, errstr_size, "range of %d days is too long (at most 3700)", ndays);
		*bad_input = 1;
		query_close(q);
		return NULL;
	}
	if (ndays <= 7 && (q->hours = labels(q, "WITH " CTE_P " SELECT to_char(greatest(hh, p.s), " FMT_S ")"
	    " FROM p, generate_series(date_trunc('hour', p.s, 'UTC'), p.e - interval '1 microsecond',"
	    " interval '1 hour') AS hh ORDER BY hh", errstr, errstr_size)) == NULL) {
		query_close(q);
		return NULL;
	}
	q->day_rows = q->hll && utc_days && q->hours == NULL && !exclude_bots;
	q->range.from = q->from;
	q->range.to = q->to;
	q->range.tz = q->tz;
	q->range.exclude_bots = exclude_bots;
	q->range.top_n = top_n;
	q->zero_days = model_zero_series(q->days, "date", !exclude_bots);
	q->zero_hours = q->hours ? model_zero_series(q->hours, "hour", !exclude_bots) : NULL;
	q->range.days = q->days;
	q->range.hours = q->hours;
	q->range.zero_days = q->zero_days;
	q->range.zero_hours = q->zero_hours;
	log_debug("range %s..%s tz=%s days=%d hll=%d", q->from, q->to, tz, ndays, q->hll);
	return q;
}

void
query_close(struct query *q)
{
	if (q == NULL)
		return;
	if (q->conn != NULL)
		PQfinish(q->conn);
	free(q->top_sql);
	free(q->top_raw_sql);
	json_decref(q->days);
	json_decref(q->hours);
	json_decref(q->zero_days);
	json_decref(q->zero_hours);
	free(q->tz);
	free(q->base_url);
	free(q);
}

const struct model_range *
query_range(const struct query *q)
{
	return &q->range;
}

int
query_link_id(struct query *q, const char *code, long long *id, char *errstr, size_t errstr_size)
{
	const char *vals[1] = { code };
	PGresult *r = exec(q, "SELECT id FROM url_link WHERE code = $1", 1, NULL, vals, errstr,
	    errstr_size);
	int found;

	if (r == NULL)
		return -1;
	found = PQntuples(r) == 1;
	if (found)
		*id = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
	PQclear(r);
	return found;
}

int
query_link_ids(struct query *q, const char *tag, int include_empty, long long **ids, size_t *n,
               char *errstr, size_t errstr_size)
{
	static const Oid types[] = { OID_TEXT, OID_DATE, OID_DATE, OID_TEXT, OID_BOOL };
	const char *vals[] = { tag ? tag : "", q->from, q->to, q->tz, q->exclude_bots ? "t" : "f" };
	const char *sql;
	PGresult *r;

	if (tag != NULL)
		sql = "SELECT id FROM url_link WHERE tags @> ARRAY[$1] AND tags <> '{}' ORDER BY code";
	else if (include_empty)
		sql = "SELECT id FROM url_link ORDER BY code";
	else
		sql = "WITH " CTE_P " SELECT l.id FROM url_link l JOIN (SELECT DISTINCT lh.url_link_id"
		    " FROM link_hour lh, p WHERE lh.hour >= date_trunc('hour', p.s, 'UTC') AND lh.hour < p.e"
		    " AND (lh.visits > 0 OR (NOT $5 AND lh.bot_visits > 0))) a ON a.url_link_id = l.id"
		    " ORDER BY l.code";
	if ((r = exec(q, sql, 5, types, vals, errstr, errstr_size)) == NULL)
		return -1;
	*n = (size_t)PQntuples(r);
	*ids = malloc((*n ? *n : 1) * sizeof(**ids));
	if (*ids == NULL) {
		PQclear(r);
		errstr_set(errstr, errstr_size, "out of memory");
		return -1;
	}
	for (size_t i = 0; i < *n; i++)
		(*ids)[i] = strtoll(PQgetvalue(r, (int)i, 0), NULL, 10);
	PQclear(r);
	return 0;
}

/* One link of a round: its id and its index in the round's ids and reports. */
struct target_key {
	long long id;
	size_t i;
};

/* Where group g's figures go: reps[0] when combined, else the report of
 * link id g, found in order[] (the round's ids with their indexes, sorted by
 * id; each round thread sorts its own, so two rounds never share state). */
struct targets {
	json_t **reps;
	struct target_key *order;   /* owned by query_reports */
	size_t n;
	int combined;
};

static int
cmp_key(const void *a, const void *b)
{
	long long x = ((const struct target_key *)a)->id, y = ((const struct target_key *)b)->id;

	return x < y ? -1 : x > y;
}

/* The index of link id g in the round, or n when it is not one of them. */
static size_t
target_index(const struct targets *t, long long g)
{
	size_t lo = 0, hi = t->n;

	while (lo < hi) {
		size_t mid = (lo + hi) / 2;

		if (t->order[mid].id < g)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < t->n && t->order[lo].id == g ? t->order[lo].i : t->n;
}

static json_t *
target_of(const struct targets *t, long long g)
{
	size_t i;

	if (t->combined)
		return t->reps[0];
	return (i = target_index(t, g)) < t->n ? t->reps[i] : NULL;
}

static const char *
nul(PGresult *r, int i, int c)
{
	return PQgetisnull(r, i, c) ? NULL : PQgetvalue(r, i, c);
}

static int
kind_of(const char *gs)
{
	return gs[0] == '1' ? 'd' : gs[0] == '2' ? 'h' : 't';
}

static int
human_edges(struct query *q, const struct targets *t, const char *const *vals, PGresult *series,
            char *errstr, size_t errstr_size)
{
	static const Oid types[] = { OID_INT8ARR, OID_DATE, OID_DATE, OID_TEXT, OID_BOOL, OID_BOOL,
	    OID_INT8, OID_INT8ARR, OID_TSTZARR, OID_TSTZARR };
	size_t cap = 64, len[3] = { 0, 0, 0 };
	char *buf[3] = { NULL, NULL, NULL };
	const char *v[10];
	PGresult *r;
	int rc = -1;

	for (int k = 0; k < 3; k++) {
		buf[k] = malloc(cap);
		if (buf[k] == NULL)
			goto out;
		buf[k][len[k]++] = '{';
	}
	for (int i = 0; i < PQntuples(series); i++) {
		if (kind_of(PQgetvalue(series, i, 1)) != 't' || PQgetisnull(series, i, 8))
			continue;
		for (int k = 0; k < 3; k++) {
			const char *s = PQgetvalue(series, i, k == 0 ? 0 : 7 + k);
			/* ,"s" then, after the last, the closing } and the NUL */
			size_t need = len[k] + strlen(s) + 5;

			if (need > cap) {
				size_t ncap = need * 2;

				for (int j = 0; j < 3; j++) {
					char *nb = realloc(buf[j], ncap);

					if (nb == NULL)
						goto out;
					buf[j] = nb;
				}
				cap = ncap;
			}
			len[k] += (size_t)sprintf(buf[k] + len[k], len[k] > 1 ? ",\"%s\"" : "\"%s\"", s);
		}
	}
	for (int k = 0; k < 3; k++) {
		buf[k][len[k]++] = '}';
		buf[k][len[k]] = '\0';
	}
	memcpy(v, vals, 7 * sizeof(*v));
	v[7] = buf[0];
	v[8] = buf[1];
	v[9] = buf[2];
	if ((r = exec(q, HUMAN_EDGES_SQL, 10, types, v, errstr, errstr_size)) == NULL)
		goto out;
	for (int i = 0; i < PQntuples(r); i++) {
		json_t *rep = target_of(t, strtoll(PQgetvalue(r, i, 0), NULL, 10));

		if (rep != NULL)
			model_set_first_last(rep, nul(r, i, 1), nul(r, i, 2));
	}
	PQclear(r);
	rc = 0;
out:
	if (rc < 0 && errstr && !*errstr)
		errstr_set(errstr, errstr_size, "out of memory");
	for (int k = 0; k < 3; k++)
		free(buf[k]);
	return rc;
}

/* One (group, dimension, value) of the top-N statement; the strings point
 * into its PGresult. */
struct top_row {
	long long g, v, b;
	int dim;                 /* index in model_dims */
	const char *value;
};

/* Rank: group, dimension, then more human visits, more bot visits, and the
 * value in byte order (the C collation's order). */
static int
top_cmp(const void *a, const void *b)
{
	const struct top_row *x = a, *y = b;

	if (x->g != y->g)
		return x->g < y->g ? -1 : 1;
	if (x->dim != y->dim)
		return x->dim < y->dim ? -1 : 1;
	if (x->v != y->v)
		return x->v > y->v ? -1 : 1;
	if (x->b != y->b)
		return x->b > y->b ? -1 : 1;
	return strcmp(x->value, y->value);
}

/* Adds the first top_n of rows[0..n) of each (group, dimension), in rank
 * order, to the reports of t; sorts rows. */
static void
top_rank_take(struct query *q, const struct targets *t, struct top_row *rows, size_t n)
{
	json_t *rep = NULL;
	size_t run = 0;

	qsort(rows, n, sizeof(*rows), top_cmp);
	for (size_t i = 0; i < n; i++) {
		const struct top_row *x = &rows[i];

		if (i == 0 || x->g != rows[i - 1].g) {
			rep = target_of(t, x->g);
			run = 0;
		} else if (x->dim != rows[i - 1].dim)
			run = 0;
		if (rep != NULL && x->dim >= 0 && run++ < (size_t)q->top_n)
			model_top_add(rep, model_dims[x->dim], x->value, x->v, x->b);
	}
}

/* FNV-1a over a group, a dimension and a value. */
static uint64_t
top_hash(long long g, int dim, const char *value)
{
	uint64_t h = 14695981039346656037ULL;

	h = (h ^ (uint64_t)g) * 1099511628211ULL;
	h = (h ^ (uint64_t)(unsigned)dim) * 1099511628211ULL;
	for (const unsigned char *p = (const unsigned char *)value; *p; p++)
		h = (h ^ *p) * 1099511628211ULL;
	return h;
}

/* Adds the top-N of r (rows g, dimension, value, v, b: summed per group,
 * dimension and value by TOP_TAIL, or several per value by TOP_RAW_TAIL) to
 * the reports of t: sums the rows of each value in an open-addressing
 * table, keeps the values humans visited (TOP_TAIL's HAVING) and ranks them. */
static int
top_take(struct query *q, const struct targets *t, PGresult *r, char *errstr, size_t errstr_size)
{
	size_t n = (size_t)PQntuples(r), cap = 16, used = 0, kept = 0;
	struct top_row *rows = NULL;
	uint32_t *slot = NULL;  /* index + 1 into rows; 0 = empty */

	if (n == 0)
		return 0;
	while (cap < n * 2)
		cap <<= 1;
	if (n >= UINT32_MAX || (rows = malloc(n * sizeof(*rows))) == NULL ||
	    (slot = calloc(cap, sizeof(*slot))) == NULL) {
		free(rows);
		errstr_set(errstr, errstr_size, "out of memory");
		return -1;
	}
	for (size_t i = 0; i < n; i++) {
		long long g = strtoll(PQgetvalue(r, (int)i, 0), NULL, 10);
		int dim = model_dim_index(PQgetvalue(r, (int)i, 1));
		const char *value = PQgetvalue(r, (int)i, 2);
		size_t h = (size_t)top_hash(g, dim, value) & (cap - 1);
		struct top_row *x;

		for (; slot[h] != 0; h = (h + 1) & (cap - 1)) {
			x = &rows[slot[h] - 1];
			if (x->g == g && x->dim == dim && strcmp(x->value, value) == 0)
				break;
		}
		if (slot[h] == 0) {
			x = &rows[used];
			*x = (struct top_row){ .g = g, .dim = dim, .value = value };
			slot[h] = (uint32_t)++used;
		}
		x = &rows[slot[h] - 1];
		x->v += strtoll(PQgetvalue(r, (int)i, 3), NULL, 10);
		x->b += strtoll(PQgetvalue(r, (int)i, 4), NULL, 10);
	}
	free(slot);
	for (size_t i = 0; i < used; i++)
		if (rows[i].v > 0)
			rows[kept++] = rows[i];
	top_rank_take(q, t, rows, kept);
	free(rows);
	return 0;
}

/* Runs the series, uniques and top queries for ids into t. */
static int
fill(struct query *q, const long long *ids, size_t n, const struct targets *t,
     char *errstr, size_t errstr_size)
{
	static const Oid types[] = { OID_INT8ARR, OID_DATE, OID_DATE, OID_TEXT, OID_BOOL, OID_BOOL,
	    OID_INT8, OID_DATE, OID_DATE, OID_DATE, OID_DATE, OID_DATE, OID_DATE, OID_DATE, OID_DATE };
	const char *vals[15];
	char *arr = id_array(ids, n), sql[sizeof(SERIES_SQL) +
	    sizeof(PIECES_HOURS(", lh.visitors AS sk")) + sizeof(PIECES_DAYS) + sizeof(SERIES_SPLIT_SQL) +
	    sizeof(SERIES_HOURLY_SQL) + 1024];
	char hsql[sizeof(SERIES_HOURLY_SQL) + 128] = "";
	char ssql[sizeof(SERIES_SPLIT_SQL) + 256] = "";
	const char *hourly = q->hours ? "(g, h), " : "";
	const char *gs = q->hours ? "grouping(day, h) AS gs, day, h" :
	    "CASE grouping(day) WHEN 0 THEN 1 ELSE 3 END AS gs, day, NULL::timestamptz AS h";
	PGresult *r;
	int rc = -1, raw;

	errstr_set(errstr, errstr_size, "%s", "");
	if (arr == NULL) {
		errstr_set(errstr, errstr_size, "out of memory");
		return -1;
	}
	vals[0] = arr;
	vals[1] = q->from;
	vals[2] = q->to;
	vals[3] = q->tz;
	vals[4] = t->combined ? "t" : "f";
	vals[5] = q->exclude_bots ? "t" : "f";
	vals[6] = q->top_n_s;
	vals[7] = q->d0;
	vals[8] = q->d1;
	vals[9] = q->m0;
	vals[10] = q->m1;
	vals[11] = q->wa0;
	vals[12] = q->wa1;
	vals[13] = q->wb0;
	vals[14] = q->wb1;
	if (q->hours)
		snprintf(hsql, sizeof(hsql), SERIES_HOURLY_SQL, q->hll ?
		    "coalesce(round(hll_cardinality(hll_union_agg(pieces.sk))), 0)::bigint" : "0::bigint");
	if (q->split)
		snprintf(ssql, sizeof(ssql), SERIES_SPLIT_SQL, q->hll ?
		    ", coalesce(hll_add_agg(hll_hash_text(v.client_id::text)) FILTER (WHERE NOT v.is_bot),"
		    " hll_empty())" : "");
	if (q->hll)
		snprintf(sql, sizeof(sql), SERIES_SQL,
		    q->day_rows ? PIECES_DAYS : PIECES_HOURS(", lh.visitors AS sk"), ssql, "hll_union_agg(sk)",
		    "coalesce(round(hll_cardinality(sk)), 0)::bigint",
		    "coalesce(round(hll_cardinality(hll_union_agg(sk))), 0)::bigint", hsql);
	else
		snprintf(sql, sizeof(sql), SERIES_SQL, PIECES_HOURS(""), ssql, "NULL::int", "0::bigint",
		    "0::bigint", hsql);
	if ((r = exec(q, sql, 7, types, vals, errstr, errstr_size)) == NULL)
		goto out;
	for (int i = 0; i < PQntuples(r); i++) {
		json_t *rep = target_of(t, strtoll(PQgetvalue(r, i, 0), NULL, 10));
		int kind = kind_of(PQgetvalue(r, i, 1));
		long long idx = strtoll(PQgetvalue(r, i, 2), NULL, 10);

		const char *first = nul(r, i, 6), *last = nul(r, i, 7);

		if (rep == NULL)
			continue;
		/* --exclude-bots: link_hour's first and last visits count bots.
		 * human_edges replaces them where the group has a human hour
		 * (column 8); a group with none has no human first or last visit. */
		if (q->exclude_bots && kind == 't' && PQgetisnull(r, i, 8))
			first = last = NULL;
		model_set_counts(rep, kind, idx, strtoll(PQgetvalue(r, i, 3), NULL, 10),
		    strtoll(PQgetvalue(r, i, 4), NULL, 10), first, last);
		if (q->hll)
			model_set_uniques(rep, kind, idx, strtoll(PQgetvalue(r, i, 5), NULL, 10));
	}
	if (q->exclude_bots && human_edges(q, t, vals, r, errstr, errstr_size) < 0) {
		PQclear(r);
		goto out;
	}
	PQclear(r);
	if (!q->hll) {
		snprintf(sql, sizeof(sql), UNIQUES_SQL, gs, hourly);
		if ((r = exec(q, sql, 7, types, vals, errstr, errstr_size)) == NULL)
			goto out;
		for (int i = 0; i < PQntuples(r); i++) {
			json_t *rep = target_of(t, strtoll(PQgetvalue(r, i, 0), NULL, 10));

			if (rep != NULL)
				model_set_uniques(rep, kind_of(PQgetvalue(r, i, 1)),
				    strtoll(PQgetvalue(r, i, 2), NULL, 10), strtoll(PQgetvalue(r, i, 3), NULL, 10));
		}
		PQclear(r);
	}
	/* unsummed rows for several links of their own; a combined report
	 * sums every link's rows into one group, which PostgreSQL does better */
	raw = q->top_raw_sql != NULL && !t->combined && n > 1;
	if ((r = exec(q, raw ? q->top_raw_sql : q->top_sql, 15, types, vals, errstr,
	    errstr_size)) == NULL)
		goto out;
	log_debug("top-N: %d rows%s", PQntuples(r), raw ? " (unsummed)" : "");
	rc = top_take(q, t, r, errstr, errstr_size);
	PQclear(r);
out:
	free(arr);
	return rc;
}

/* One snapshot for a report's statements: its totals, series, uniques and
 * top lists agree with one another while ingest commits between them. */
static int
snapshot_begin(struct query *q, char *errstr, size_t errstr_size)
{
	PGresult *r = exec(q, "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY", 0, NULL, NULL, errstr,
	    errstr_size);

	PQclear(r);
	return r != NULL ? 0 : -1;
}

/* Ends the snapshot: rc as given, or -1 when COMMIT fails (errstr set). */
static int
snapshot_end(struct query *q, int rc, char *errstr, size_t errstr_size)
{
	PGresult *r;

	if (PQtransactionStatus(q->conn) == PQTRANS_IDLE)
		return rc;
	if (rc < 0) {
		PQclear(PQexec(q->conn, "ROLLBACK"));
		return rc;
	}
	r = exec(q, "COMMIT", 0, NULL, NULL, errstr, errstr_size);
	PQclear(r);
	return r != NULL ? rc : -1;
}

static PGresult *
links(struct query *q, const long long *ids, size_t n, char **arr, char *errstr, size_t errstr_size)
{
	const char *vals[2];

	if ((*arr = id_array(ids, n)) == NULL) {
		errstr_set(errstr, errstr_size, "out of memory");
		return NULL;
	}
	vals[0] = *arr;
	vals[1] = q->base_url;
	return exec(q, LINKS_SQL, 2, NULL, vals, errstr, errstr_size);
}

int
query_reports(struct query *q, const long long *ids, size_t n, json_t **out,
              char *errstr, size_t errstr_size)
{
	struct targets t = { out, NULL, n, 0 };
	char *arr = NULL;
	PGresult *r;
	int rc = -1;

	for (size_t i = 0; i < n; i++)
		out[i] = NULL;
	if (n == 0)
		return 0;
	if ((t.order = malloc(n * sizeof(*t.order))) == NULL) {
		errstr_set(errstr, errstr_size, "out of memory");
		return -1;
	}
	for (size_t i = 0; i < n; i++) {
		t.order[i].id = ids[i];
		t.order[i].i = i;
	}
	qsort(t.order, n, sizeof(*t.order), cmp_key);
	if (snapshot_begin(q, errstr, errstr_size) < 0)
		goto out;
	if ((r = links(q, ids, n, &arr, errstr, errstr_size)) == NULL)
		goto out;
	for (int i = 0; i < PQntuples(r); i++) {
		struct model_link l;
		json_t **slot;
		size_t k = target_index(&t, strtoll(PQgetvalue(r, i, 0), NULL, 10));

		if (k == n)
			continue;
		slot = &out[k];
		l.code = PQgetvalue(r, i, 1);
		l.short_url = PQgetvalue(r, i, 2);
		l.long_url = PQgetvalue(r, i, 3);
		l.created_at = PQgetvalue(r, i, 4);
		l.tags_json = PQgetvalue(r, i, 5);
		l.all_time = strtoll(PQgetvalue(r, i, 6), NULL, 10);
		l.all_time_bots = strtoll(PQgetvalue(r, i, 7), NULL, 10);
		l.deleted = strcmp(PQgetvalue(r, i, 8), "0") != 0;
		if ((*slot = model_new_link(&l, &q->range)) == NULL) {
			errstr_set(errstr, errstr_size, "link %s: cannot build report", l.code);
			PQclear(r);
			goto out;
		}
	}
	PQclear(r);
	rc = fill(q, ids, n, &t, errstr, errstr_size);
out:
	rc = snapshot_end(q, rc, errstr, errstr_size);
	if (rc < 0)
		for (size_t i = 0; i < n; i++) {
			json_decref(out[i]);
			out[i] = NULL;
		}
	free(arr);
	free(t.order);
	return rc;
}

json_t *
query_combined(struct query *q, const char *tag, const long long *ids, size_t n,
               char *errstr, size_t errstr_size)
{
	json_t *codes = json_array(), *rep = NULL;
	long long all = 0, bots = 0;
	struct targets t = { &rep, NULL, n, 1 };
	char *arr = NULL;
	PGresult *r = NULL;

	if (snapshot_begin(q, errstr, errstr_size) == 0)
		r = links(q, ids, n, &arr, errstr, errstr_size);
	free(arr);
	if (r == NULL) {
		snapshot_end(q, -1, errstr, errstr_size);
		json_decref(codes);
		return NULL;
	}
	for (int i = 0; i < PQntuples(r); i++) {
		json_array_append_new(codes, json_string(PQgetvalue(r, i, 1)));
		all += strtoll(PQgetvalue(r, i, 6), NULL, 10);
		bots += strtoll(PQgetvalue(r, i, 7), NULL, 10);
	}
	PQclear(r);
	if ((rep = model_new_tag(tag, codes, all, bots, &q->range)) == NULL) {
		errstr_set(errstr, errstr_size, "cannot build the combined report");
		snapshot_end(q, -1, errstr, errstr_size);
		return NULL;
	}
	if (snapshot_end(q, n > 0 ? fill(q, ids, n, &t, errstr, errstr_size) : 0, errstr,
	    errstr_size) < 0) {
		json_decref(rep);
		return NULL;
	}
	return rep;
}
