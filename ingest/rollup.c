/* rollup.c - a batch's rollups aggregated in C: the rows are sorted by link
 * and hour, so each link-day's breakdown counts and each link-hour's distinct
 * clients are gathered in small tables reused run after run, and emitted in
 * COPY's binary format (arrays too: no array_in parsing in PostgreSQL) so
 * PostgreSQL receives few, aggregated rows. */
#include "rollup.h"
#include "hash.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define NVALUES 10
#define F_CODE 0   /* roll row fields (batch.h) */
#define F_CLIENT 1
#define F_VALUE 2  /* the first of the NVALUES link_day_dim values */
#define CLIENT_LEN (DIGEST_SHA1_HEX_SIZE - 1)
#define US_PER_HOUR INT64_C(3600000000)
#define US_PER_DAY (24 * US_PER_HOUR)
#define TEXTOID 25
#define INT8OID 20

/* The link_day_dim dimension of each value, with its length (written once
 * per distinct value of every link-day). */
#define DIM(s) { s, sizeof(s) - 1 }
static const struct { const char *s; size_t n; } dim_names[NVALUES] = {
	DIM("country"), DIM("province"), DIM("city"), DIM("isp"), DIM("browser"),
	DIM("browser_version"), DIM("os"), DIM("device_type"), DIM("referer_host"),
	DIM("language")
};
#undef DIM

/* One kept row with a link, as sorted: by link, then hour, then position. */
struct rref {
	int64_t link;
	int64_t hour;             /* hours since the epoch of visit_time */
	size_t row;
};

/* A distinct key of a run table: bytes of a roll row under a tag (a
 * dimension's index, 0 for client ids, a day for orphan codes), and its
 * counts. */
struct rent {
	uint64_t h;
	const char *v;            /* in the batch's roll buffer */
	size_t vlen;
	int64_t tag;
	long long n, nbot;
};

/* An open-addressing table emptied in O(1) per run: a slot belongs to the
 * current run when its gen equals the table's. Entries are in insertion order. */
struct rtab {
	struct rent *e;
	size_t n, ecap;
	struct { uint32_t gen, idx; } *slot;
	size_t cap;
	uint32_t gen;
	uint64_t seed;            /* hash_process_seed() */
};

struct rollup {
	struct rref *ref;
	size_t nref, ref_cap;
	struct rtab dims[2];      /* this link-day's values, human [0] and bot [1] */
	struct rtab seen;         /* this link-hour's distinct human clients */
	struct rtab orphans;      /* the batch's orphan visits by code and day */
	struct batch_buf out_dims, out_hours, out_orphans;
};

/* Starts a new run: every slot of t becomes free. */
static void
rtab_clear(struct rtab *t)
{
	t->n = 0;
	if (++t->gen == 0) { /* wrapped: really clear */
		if (t->slot)
			memset(t->slot, 0, t->cap * sizeof(*t->slot));
		t->gen = 1;
	}
}

static int
rtab_grow(struct rtab *t)
{
	size_t cap = t->cap ? 2 * t->cap : 256;
	void *slot = calloc(cap, sizeof(*t->slot));

	if (slot == NULL)
		return -1;
	free(t->slot);
	t->slot = slot;
	t->cap = cap;
	t->gen = 1;
	for (size_t k = 0; k < t->n; k++) {
		size_t j;
		for (j = t->e[k].h & (cap - 1); t->slot[j].gen == t->gen; j = (j + 1) & (cap - 1))
			;
		t->slot[j].gen = t->gen;
		t->slot[j].idx = (uint32_t)k;
	}
	return 0;
}

/* The entry of (tag, v) in this run of t, created with zero counts when
 * new; NULL when out of memory. v must outlive the run (the roll buffer). */
static struct rent *
rtab_get(struct rtab *t, int64_t tag, const char *v, size_t vlen)
{
	/* seeded per process: Referer hosts come from outside, and a fixed
	 * seed let colliding ones, worked out once, make a batch quadratic */
	uint64_t h = hash_bytes(v, vlen, (uint64_t)tag ^ t->seed);
	struct rent *x;
	size_t i;

	if (2 * (t->n + 1) > t->cap && rtab_grow(t) < 0)
		return NULL;
	for (i = h & (t->cap - 1); t->slot[i].gen == t->gen; i = (i + 1) & (t->cap - 1)) {
		x = &t->e[t->slot[i].idx];
		if (x->h == h && x->vlen == vlen && x->tag == tag && memcmp(x->v, v, vlen) == 0)
			return x;
	}
	if (t->n == t->ecap) {
		size_t ecap = t->ecap ? 2 * t->ecap : 256;
		struct rent *e = realloc(t->e, ecap * sizeof(*e));
		if (e == NULL)
			return NULL;
		t->e = e;
		t->ecap = ecap;
	}
	x = &t->e[t->n];
	x->h = h;
	x->v = v;
	x->vlen = vlen;
	x->tag = tag;
	x->n = x->nbot = 0;
	t->slot[i].gen = t->gen;
	t->slot[i].idx = (uint32_t)t->n++;
	return x;
}

static void
rtab_free(struct rtab *t)
{
	free(t->e);
	free(t->slot);
}

struct rollup *
rollup_new(void)
{
	struct rollup *r = calloc(1, sizeof(struct rollup));

	if (r != NULL)
		r->dims[0].seed = r->dims[1].seed = r->seen.seed = r->orphans.seed =
		    hash_process_seed();
	return r;
}

void
rollup_free(struct rollup *r)
{
	if (r == NULL)
		return;
	free(r->ref);
	rtab_free(&r->dims[0]);
	rtab_free(&r->dims[1]);
	rtab_free(&r->seen);
	rtab_free(&r->orphans);
	free(r->out_dims.data);
	free(r->out_hours.data);
	free(r->out_orphans.data);
	free(r);
}

/* Splits row i's rollup input (batch.h: BATCH_ROLL_FIELDS length-prefixed
 * fields in b's roll buffer) into its fields. */
static int
split_row(const struct batch *b, size_t i, const char **f, size_t *flen)
{
	const char *p = b->roll.data + b->row[i].roll_off;
	const char *end = i + 1 < b->rows ? b->roll.data + b->row[i + 1].roll_off :
	    b->roll.data + b->roll.len;

	for (int k = 0; k < BATCH_ROLL_FIELDS; k++) {
		size_t n;

		if (end - p < 2)
			return -1;
		n = (size_t)(unsigned char)p[0] | (size_t)(unsigned char)p[1] << 8;
		p += 2;
		if ((size_t)(end - p) < n)
			return -1;
		f[k] = p;
		flen[k] = n;
		p += n;
	}
	return p == end ? 0 : -1;
}

static int
cmp_ref(const void *x, const void *y)
{
	const struct rref *a = x, *b = y;

	if (a->link != b->link)
		return a->link < b->link ? -1 : 1;
	if (a->hour != b->hour)
		return a->hour < b->hour ? -1 : 1;
	return a->row < b->row ? -1 : a->row > b->row;
}

/* Starts a binary field of unknown length: returns where its length goes. */
static size_t
field_begin(struct batch_buf *o, int *rc)
{
	size_t at = o->len;

	*rc |= batch_put_be(o, 0, 4);
	return at;
}

/* Writes the length of the field begun at 'at'. */
static void
field_end(struct batch_buf *o, size_t at, int rc)
{
	uint64_t n = o->len - at - 4;

	if (rc == 0)
		for (int i = 0; i < 4; i++)
			o->data[at + (size_t)i] = (char)(n >> (8 * (3 - i)));
}

/* A one-dimensional array's header (array_recv): n elements of type oid. */
static int
array_head(struct batch_buf *o, uint32_t oid, size_t n)
{
	if (n == 0) /* empty: no dimensions */
		return batch_put_be(o, 0, 4) | batch_put_be(o, 0, 4) | batch_put_be(o, oid, 4);
	return batch_put_be(o, 1, 4) | batch_put_be(o, 0, 4) | batch_put_be(o, oid, 4) |
	    batch_put_be(o, n, 4) | batch_put_be(o, 1, 4);
}

/* A date field: days since 2000-01-01 of a day count since the epoch. */
static int
bin_day(struct batch_buf *o, int64_t unix_day)
{
	return batch_bin_int(o, unix_day - BATCH_PG_EPOCH_US / US_PER_DAY, 4);
}

/* One link_day_dim_batch row (ROLLUP_DAY_DIM_COLUMNS, binary). */
static int
emit_group(struct batch_buf *o, const struct rtab *t, int64_t link, int64_t day, int bot)
{
	int rc = batch_put_be(o, 6, 2) | batch_bin_int(o, link, 8) | bin_day(o, day) |
	    batch_bin_int(o, bot, 1);

	for (int pass = 0; pass < 3; pass++) {
		size_t at = field_begin(o, &rc);

		rc |= array_head(o, pass == 2 ? INT8OID : TEXTOID, t->n);
		for (size_t k = 0; k < t->n; k++) {
			const struct rent *e = &t->e[k];
			if (pass == 0)
				rc |= batch_bin_bytes(o, dim_names[e->tag].s, dim_names[e->tag].n);
			else if (pass == 1)
				rc |= batch_bin_bytes(o, e->v, e->vlen);
			else
				rc |= batch_bin_int(o, e->n, 8);
		}
		field_end(o, at, rc);
	}
	return rc;
}

/* One link-hour's counters (one run of rows); its distinct human clients
 * are the seen table. */
struct hour_acc {
	int64_t link, hour;
	long long n, nbot;
	int64_t first, last;      /* microseconds since the epoch */
};

/* One ingest_hour row (ROLLUP_HOUR_COLUMNS, binary). */
static int
emit_hour(struct batch_buf *o, const struct hour_acc *a, const struct rtab *seen)
{
	int rc = batch_put_be(o, 7, 2) | batch_bin_int(o, a->link, 8) |
	    batch_bin_ts(o, a->hour * US_PER_HOUR) | batch_bin_int(o, a->n, 8) |
	    batch_bin_int(o, a->nbot, 8) | batch_bin_ts(o, a->first) | batch_bin_ts(o, a->last);
	size_t at = field_begin(o, &rc);

	rc |= array_head(o, TEXTOID, seen->n);
	for (size_t k = 0; k < seen->n; k++)
		rc |= batch_bin_bytes(o, seen->e[k].v, CLIENT_LEN);
	field_end(o, at, rc);
	return rc;
}

/* Sorts the kept rows with a link into r->ref and counts the orphans (by
 * code and day). */
static int
collect(struct rollup *r, const struct batch *b, const unsigned char *keep)
{
	r->nref = 0;
	for (size_t i = 0; i < b->rows; i++) {
		const struct batch_row *row = &b->row[i];

		if (keep && !keep[i])
			continue;
		if (!row->has_link) {
			const char *f[BATCH_ROLL_FIELDS];
			size_t fl[BATCH_ROLL_FIELDS];
			struct rent *e;

			if (split_row(b, i, f, fl) < 0)
				continue; /* cannot happen: batch.c writes these rows */
			e = rtab_get(&r->orphans, row->ts_us / US_PER_DAY, f[F_CODE],
			    fl[F_CODE]);
			if (e == NULL)
				return -1;
			if (row->is_bot)
				e->nbot++;
			else
				e->n++;
			continue;
		}
		if (r->nref == r->ref_cap) {
			size_t cap = r->ref_cap ? 2 * r->ref_cap : 1024;
			struct rref *n = realloc(r->ref, cap * sizeof(*n));
			if (n == NULL)
				return -1;
			r->ref = n;
			r->ref_cap = cap;
		}
		r->ref[r->nref].link = row->link_id;
		r->ref[r->nref].hour = row->ts_us / US_PER_HOUR;
		r->ref[r->nref].row = i;
		r->nref++;
	}
	if (r->nref > 1)
		qsort(r->ref, r->nref, sizeof(*r->ref), cmp_ref);
	return 0;
}

/* Emits the link-day groups gathered so far (human, then bot). */
static int
emit_groups(struct rollup *r, int64_t link, int64_t day)
{
	for (int g = 0; g < 2; g++)
		if (r->dims[g].n > 0 && emit_group(&r->out_dims, &r->dims[g], link, day, g) < 0)
			return -1;
	return 0;
}

/* Aggregates the sorted rows run by run: each link-day's breakdowns (human
 * and bot apart), each link-hour's counters and distinct human clients. */
static int
aggregate(struct rollup *r, const struct batch *b)
{
	struct hour_acc acc;

	memset(&acc, 0, sizeof(acc));
	for (size_t k = 0; k < r->nref; k++) {
		const struct rref *x = &r->ref[k];
		const struct batch_row *row = &b->row[x->row];
		const char *f[BATCH_ROLL_FIELDS];
		size_t fl[BATCH_ROLL_FIELDS];
		int bot = row->is_bot;

		if (split_row(b, x->row, f, fl) < 0)
			return -1; /* cannot happen: batch.c writes these rows */
		if (k == 0 || x->link != acc.link || x->hour != acc.hour) {
			if (k > 0 && emit_hour(&r->out_hours, &acc, &r->seen) < 0)
				return -1;
			if (k == 0 || x->link != acc.link || x->hour / 24 != acc.hour / 24) {
				if (k > 0 && emit_groups(r, acc.link, acc.hour / 24) < 0)
					return -1;
				rtab_clear(&r->dims[0]);
				rtab_clear(&r->dims[1]);
			}
			rtab_clear(&r->seen);
			acc.link = x->link;
			acc.hour = x->hour;
			acc.first = acc.last = row->ts_us;
			acc.n = acc.nbot = 0;
		}
		for (int d = 0; d < NVALUES; d++) {
			struct rent *e = rtab_get(&r->dims[bot], d, f[F_VALUE + d], fl[F_VALUE + d]);
			if (e == NULL)
				return -1;
			e->n++;
		}
		if (bot) {
			acc.nbot++;
		} else {
			acc.n++;
			if (rtab_get(&r->seen, 0, f[F_CLIENT], CLIENT_LEN) == NULL)
				return -1;
		}
		if (row->ts_us < acc.first)
			acc.first = row->ts_us;
		if (row->ts_us > acc.last)
			acc.last = row->ts_us;
	}
	if (r->nref == 0)
		return 0;
	if (emit_groups(r, acc.link, acc.hour / 24) < 0)
		return -1;
	return emit_hour(&r->out_hours, &acc, &r->seen);
}

/* The ingest_orphan rows (ROLLUP_ORPHAN_COLUMNS, binary). */
static int
emit_orphans(struct rollup *r)
{
	struct batch_buf *o = &r->out_orphans;
	int rc = 0;

	for (size_t i = 0; i < r->orphans.n && rc == 0; i++) {
		const struct rent *e = &r->orphans.e[i];

		rc = batch_put_be(o, 4, 2) | batch_bin_bytes(o, e->v, e->vlen) | bin_day(o, e->tag) |
		    batch_bin_int(o, e->n, 8) | batch_bin_int(o, e->nbot, 8);
	}
	return rc;
}

int
rollup_build(struct rollup *r, const struct batch *b, const unsigned char *keep)
{
	struct batch_buf *out[3] = { &r->out_dims, &r->out_hours, &r->out_orphans };

	rtab_clear(&r->orphans);
	for (int i = 0; i < 3; i++) {
		out[i]->len = 0;
		if (batch_put(out[i], batch_copy_header, sizeof(batch_copy_header)) < 0)
			return -1;
	}
	if (collect(r, b, keep) < 0 || aggregate(r, b) < 0 || emit_orphans(r) < 0)
		return -1;
	for (int i = 0; i < 3; i++)
		if (batch_put(out[i], batch_copy_trailer, sizeof(batch_copy_trailer)) < 0)
			return -1;
	return 0;
}

const struct batch_buf *
rollup_day_dim(const struct rollup *r)
{
	return &r->out_dims;
}

const struct batch_buf *
rollup_hour(const struct rollup *r)
{
	return &r->out_hours;
}

const struct batch_buf *
rollup_orphan(const struct rollup *r)
{
	return &r->out_orphans;
}
