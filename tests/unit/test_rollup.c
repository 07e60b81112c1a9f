/* test_rollup.c - ingest/rollup.c against tests/data/rollup_cases.txt: each
 * case's rollup input rows (as batch.c writes them) aggregate to exactly the
 * listed link_day_dim_batch elements, link_hour rows (with their distinct
 * human clients) and orphan_day rows; the keep mask leaves rows out. Output
 * order is free, so both sides are compared as sorted, decoded tuples (the
 * outputs decoded from COPY's binary format, as PostgreSQL's array_recv and
 * the int8/date/timestamptz/text receive functions read them). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../../ingest/batch.h"
#include "../../ingest/rollup.h"
#include "unit.h"

#define CASES "tests/data/rollup_cases.txt"
#define MAXT 512      /* tuples per side of a case */
#define SEP "\x1f"    /* joins a tuple's decoded fields */

struct tuples {
	char *t[MAXT];
	int n;
};

static void
add(struct tuples *ts, const char *s)
{
	if (ts->n < MAXT)
		ts->t[ts->n++] = strdup(s);
}

static int
cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static void
clear(struct tuples *ts)
{
	for (int i = 0; i < ts->n; i++)
		free(ts->t[i]);
	ts->n = 0;
}

/* A reader over one binary COPY stream; bad is set on any overrun. */
struct rd {
	const unsigned char *p, *end;
	int bad;
};

static uint64_t
rd_be(struct rd *r, int n)
{
	uint64_t v = 0;

	if (r->end - r->p < n) {
		r->bad = 1;
		return 0;
	}
	for (int i = 0; i < n; i++)
		v = v << 8 | *r->p++;
	return v;
}

/* A fixed-size integer field of n bytes (its length word checked). */
static int64_t
rd_int(struct rd *r, int n)
{
	uint64_t v;

	if (rd_be(r, 4) != (uint64_t)n)
		r->bad = 1;
	v = rd_be(r, n);
	if (n == 4)
		return (int32_t)v;
	if (n == 1)
		return (int64_t)v;
	return (int64_t)v;
}

/* "YYYY-MM-DD" of days since 2000-01-01, or with the time of day of us
 * (microseconds since 2000-01-01 UTC): "YYYY-MM-DD HH:MM:SS.uuuuuu+00". */
static void
fmt_pg(char *out, size_t size, int64_t days, int64_t us, int with_time)
{
	time_t t = (time_t)(with_time ? us / 1000000 : days * 86400) + 946684800;
	struct tm tm;

	gmtime_r(&t, &tm);
	if (with_time)
		snprintf(out, size, "%04d-%02d-%02d %02d:%02d:%02d.%06d+00", tm.tm_year + 1900,
		    tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (int)(us % 1000000));
	else
		snprintf(out, size, "%04d-%02d-%02d", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday);
}

/* A one-dimensional array field of element type oid (empty allowed): its
 * elements, each decoded as text (int8 in decimal) in a buffer of its own
 * (caller frees). Returns the count, or -1. */
static int
rd_array(struct rd *r, uint32_t oid, char **el, int max)
{
	uint64_t len = rd_be(r, 4), ndim, n;
	const unsigned char *stop;
	int k = 0;

	if (r->bad || (uint64_t)(r->end - r->p) < len)
		return -1;
	stop = r->p + len;
	ndim = rd_be(r, 4);
	if (rd_be(r, 4) != 0 || rd_be(r, 4) != oid || ndim > 1)
		return -1;
	n = ndim ? rd_be(r, 4) : 0;
	if (ndim && rd_be(r, 4) != 1)
		return -1;
	for (uint64_t i = 0; i < n && !r->bad && k < max; i++) {
		uint64_t elen = rd_be(r, 4);
		char buf[1024];

		if (elen >= sizeof(buf) || (uint64_t)(r->end - r->p) < elen) {
			r->bad = 1;
			break;
		}
		if (oid == 20) {
			snprintf(buf, sizeof(buf), "%lld", (long long)(int64_t)rd_be(r, 8));
		} else {
			memcpy(buf, r->p, elen);
			buf[elen] = '\0';
			r->p += elen;
		}
		el[k++] = strdup(buf);
	}
	if (r->bad || r->p != stop || (uint64_t)k != n)
		return -1;
	return k;
}

/* Tuples of one output of rollup_build, a binary COPY stream: "dim" rows
 * of link_day_dim_batch, "hour" rows of ingest_hour, "orphan" rows of
 * ingest_orphan. */
static void
decode_output(const char *kind, const struct batch_buf *o, struct tuples *ts, const char *where)
{
	struct rd r = { (const unsigned char *)o->data, (const unsigned char *)o->data + o->len, 0 };
	int dim = strcmp(kind, "dim") == 0, orphan = strcmp(kind, "orphan") == 0;
	uint64_t want_nf = dim ? 6 : orphan ? 4 : 7;
	char tuple[4096];

	CHECK(o->len >= BATCH_COPY_HEADER_SIZE + 2 &&
	    memcmp(o->data, batch_copy_header, BATCH_COPY_HEADER_SIZE) == 0,
	    "%s: %s: no binary COPY header", where, kind);
	if (o->len < BATCH_COPY_HEADER_SIZE + 2)
		return;
	r.p += BATCH_COPY_HEADER_SIZE;
	for (;;) {
		uint64_t nf = rd_be(&r, 2);
		char *d[64], *v[64], *c[64], *cl[64], day[64], a[64], b[64], joined[2048] = "";
		int nd, nv, nc, ncl;
		int64_t link;

		if (r.bad || nf == 0xffff)
			break;
		CHECK(nf == want_nf, "%s: %s row with %d fields", where, kind, (int)nf);
		if (nf != want_nf)
			return;
		if (orphan) {
			uint64_t len = rd_be(&r, 4);
			char code[512];
			int64_t days, n, nbot;

			if (len >= sizeof(code) || (uint64_t)(r.end - r.p) < len) {
				r.bad = 1;
				break;
			}
			memcpy(code, r.p, len);
			code[len] = '\0';
			r.p += len;
			days = rd_int(&r, 4);
			n = rd_int(&r, 8);
			nbot = rd_int(&r, 8);
			fmt_pg(day, sizeof(day), days, 0, 0);
			snprintf(tuple, sizeof(tuple), "orphan" SEP "%s" SEP "%s" SEP "%lld" SEP "%lld",
			    code, day, (long long)n, (long long)nbot);
			add(ts, tuple);
			continue;
		}
		link = rd_int(&r, 8);
		if (dim) {
			int64_t days = rd_int(&r, 4), bot = rd_int(&r, 1);

			fmt_pg(day, sizeof(day), days, 0, 0);
			nd = rd_array(&r, 25, d, 64);
			nv = rd_array(&r, 25, v, 64);
			nc = rd_array(&r, 20, c, 64);
			CHECK(nd > 0 && nd == nv && nv == nc, "%s: arrays %d/%d/%d", where, nd, nv, nc);
			for (int i = 0; i < nd && nd == nv && nv == nc; i++) {
				snprintf(tuple, sizeof(tuple), "dim" SEP "%lld" SEP "%s" SEP "%s" SEP "%s"
				    SEP "%s" SEP "%s", (long long)link, day, bot ? "t" : "f", d[i], v[i],
				    c[i]);
				add(ts, tuple);
			}
			for (int i = 0; i < nd; i++)
				free(d[i]);
			for (int i = 0; i < nv; i++)
				free(v[i]);
			for (int i = 0; i < nc; i++)
				free(c[i]);
			continue;
		}
		{
			int64_t hour = rd_int(&r, 8), n = rd_int(&r, 8), nbot = rd_int(&r, 8);
			int64_t first = rd_int(&r, 8), last = rd_int(&r, 8);
			char h[64];

			fmt_pg(h, sizeof(h), 0, hour, 1);
			memcpy(h + 14, "00:00+00", 9); /* the hour's start, as link_hour.hour */
			fmt_pg(a, sizeof(a), 0, first, 1);
			fmt_pg(b, sizeof(b), 0, last, 1);
			ncl = rd_array(&r, 25, cl, 64);
			CHECK(ncl >= 0, "%s: bad clients array", where);
			if (ncl < 0)
				return;
			qsort(cl, (size_t)ncl, sizeof(cl[0]), cmp);
			for (int i = 0; i < ncl; i++) {
				if (i)
					strcat(joined, ",");
				strncat(joined, cl[i], sizeof(joined) - strlen(joined) - 1);
				free(cl[i]);
			}
			snprintf(tuple, sizeof(tuple), "hour" SEP "%lld" SEP "%s" SEP "%lld" SEP "%lld"
			    SEP "%s" SEP "%s" SEP "%s", (long long)link, h, (long long)n,
			    (long long)nbot, a, b, joined);
			add(ts, tuple);
		}
	}
	CHECK(!r.bad && r.p == r.end, "%s: %s: bad binary COPY stream (%s)", where, kind,
	    r.bad ? "overrun" : "bytes after the trailer");
}

/* Microseconds since the epoch of "YYYY-MM-DD HH:MM:SS.uuuuuu+00" (UTC), or
 * -1 when it is not that. */
static int64_t
parse_ts(const char *s)
{
	struct tm tm;
	int us = 0, n = 0;

	memset(&tm, 0, sizeof(tm));
	if (sscanf(s, "%4d-%2d-%2d %2d:%2d:%2d.%6d+00%n", &tm.tm_year, &tm.tm_mon, &tm.tm_mday,
	    &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &us, &n) != 7 || s[n] != '\0')
		return -1;
	tm.tm_year -= 1900;
	tm.tm_mon -= 1;
	return (int64_t)timegm(&tm) * 1000000 + us;
}

/* Appends one visit as batch.c does: the link ("\N": an orphan), time and
 * bot flag of a case's roll line into its struct batch_row, the other 12
 * fields (escapes decoded) as its rollup input row. */
static void
add_roll(struct batch *b, char **f, int n, const char *where)
{
	struct batch_row *row;

	CHECK(n == 15, "%s: a roll row needs 15 fields, has %d", where, n);
	if (n != 15)
		return;
	if (b->rows == b->row_cap) {
		b->row_cap = b->row_cap ? 2 * b->row_cap : 16;
		b->row = realloc(b->row, b->row_cap * sizeof(*b->row));
	}
	row = &b->row[b->rows++];
	memset(row, 0, sizeof(*row));
	row->roll_off = b->roll.len;
	row->has_link = strcmp(f[0], "\\N") != 0;
	row->link_id = row->has_link ? strtoll(f[0], NULL, 10) : 0;
	row->ts_us = parse_ts(f[3]);
	CHECK(row->ts_us >= 0, "%s: bad visit_time %s", where, f[3]);
	row->is_bot = strcmp(f[4], "t") == 0;
	for (int i = 1; i < 15; i++) {
		long len;

		if (i == 3 || i == 4) /* time and bot flag: in the row */
			continue;
		len = unit_unescape(f[i]);
		CHECK(len >= 0, "%s: bad escape in field %d", where, i + 1);
		batch_put_roll_field(&b->roll, f[i], len < 0 ? 0 : (size_t)len);
	}
}

static void
run_case(struct rollup *r, struct batch *b, const unsigned char *keep, struct tuples *want,
         const char *where)
{
	struct tuples got = { .n = 0 };

	CHECK(rollup_build(r, b, keep) == 0, "%s: rollup_build failed", where);
	decode_output("dim", rollup_day_dim(r), &got, where);
	decode_output("hour", rollup_hour(r), &got, where);
	decode_output("orphan", rollup_orphan(r), &got, where);
	qsort(got.t, (size_t)got.n, sizeof(got.t[0]), cmp);
	qsort(want->t, (size_t)want->n, sizeof(want->t[0]), cmp);
	CHECK(got.n == want->n, "%s: %d tuples, expected %d", where, got.n, want->n);
	for (int i = 0; i < got.n && i < want->n; i++)
		CHECK_STR(got.t[i], want->t[i], where);
	if (got.n != want->n)
		for (int i = 0; i < got.n; i++)
			fprintf(stderr, "  got %s\n", got.t[i]);
	clear(&got);
}

int
main(void)
{
	FILE *fp = fopen(CASES, "r");
	struct rollup *r = rollup_new();
	struct batch b;
	struct tuples want = { .n = 0 };
	unsigned char keep[256];
	int have_keep = 0, ncases = 0, lineno = 0;
	char *line = NULL, where[160], name[96] = "";
	size_t cap = 0;

	CHECK(fp != NULL, "cannot open %s (run from the repository root)", CASES);
	CHECK(r != NULL, "rollup_new");
	if (fp == NULL || r == NULL)
		return 1;
	batch_init(&b);
	while (getline(&line, &cap, fp) != -1) {
		char *f[16];
		int n;

		lineno++;
		line[strcspn(line, "\n")] = '\0';
		if (line[0] == '#' || line[0] == '\0')
			continue;
		n = unit_split_tabs(line, f, 16);
		snprintf(where, sizeof(where), "%s:%d (%s)", CASES, lineno, name);
		if (strcmp(f[0], "case") == 0 && n == 2) {
			snprintf(name, sizeof(name), "%s", f[1]);
			batch_reset(&b);
			clear(&want);
			have_keep = 0;
		} else if (strcmp(f[0], "roll") == 0) {
			add_roll(&b, f + 1, n - 1, where);
		} else if (strcmp(f[0], "keep") == 0 && n == 2) {
			for (size_t i = 0; i < b.rows && i < sizeof(keep); i++)
				keep[i] = f[1][i] == '1';
			CHECK(strlen(f[1]) == b.rows, "%s: keep needs one digit per row", where);
			have_keep = 1;
		} else if ((strcmp(f[0], "dim") == 0 && n == 7) || (strcmp(f[0], "hour") == 0 && n == 8) ||
		    (strcmp(f[0], "orphan") == 0 && n == 5)) {
			char tuple[4096] = "";

			for (int i = 0; i < n; i++) {
				CHECK(unit_unescape(f[i]) >= 0, "%s: bad escape", where);
				if (i)
					strcat(tuple, SEP);
				strncat(tuple, f[i], sizeof(tuple) - strlen(tuple) - 1);
			}
			add(&want, tuple);
		} else if (strcmp(f[0], "end") == 0) {
			run_case(r, &b, have_keep ? keep : NULL, &want, where);
			ncases++;
		} else {
			CHECK(0, "%s: unknown line", where);
		}
	}
	CHECK(ncases >= 4, "only %d cases in %s", ncases, CASES);
	clear(&want);
	free(line);
	fclose(fp);
	batch_free(&b);
	rollup_free(r);
	return unit_done("test_rollup");
}
