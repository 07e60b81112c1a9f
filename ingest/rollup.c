/* rollup.c - a batch's rollups aggregated in C: the rows are sorted by link
 * and hour, so each link-day's breakdown counts and each link-hour's distinct
 * clients are gathered in small tables reused run after run, and emitted in
 * COPY's binary format (arrays too: no array_in parsing in PostgreSQL) so
 * PostgreSQL receives few, aggregated rows. */
#include "rollup.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define NVALUES 10
#define NFIELDS BATCH_ROLL_FIELDS
#define TS_LEN 29 /* "YYYY-MM-DD HH:MM:SS.uuuuuu+00" */
#define CLIENT_LEN (DIGEST_SHA1_HEX_SIZE - 1)

static const char *const dim_names[NVALUES] = {
	"country", "province", "city", "isp", "browser", "browser_version", "os",
	"device_type", "referer_host", "language"
};

/* One kept row with a link, as sorted: by link, then hour, then position. */
struct rref {
	int64_t link;
	int64_t hour;             /* YYYYMMDDHH of visit_time */
	size_t row;
};

/* A distinct key of a run table: a breakdown value (dim, bytes of the roll
 * row) or a client id (dim 0, 40 bytes). */
struct rent {
	uint64_t h;
	const char *v;            /* in the batch's roll buffer */
	size_t vlen;
	int dim;
	long long n;
};

/* An open-addressing table emptied in O(1) per run: a slot belongs to the
 * current run when its gen equals the table's. Entries are in insertion order. */
struct rtab {
	struct rent *e;
	size_t n, ecap;
	struct { uint32_t gen, idx; } *slot;
	size_t cap;
	uint32_t gen;
};

/* Orphan visits per code and day: few, kept in one table over the batch
 * (key = "YYYY-MM-DD" and the code's bytes, in orph_keys). */
struct orphan {
	uint64_t h;
	size_t koff, klen;
	long long n, nbot;
};

struct rollup {
	struct rref *ref;
	size_t nref, ref_cap;
	struct rtab dims[2];      /* this link-day's values, human [0] and bot [1] */
	struct rtab seen;         /* this link-hour's distinct human clients */
	struct orphan *orph;
	size_t norph, orph_cap;
	uint32_t *orph_slot;      /* index + 1, 0 free */
	size_t orph_cap_slots;
	struct batch_buf orph_keys;
	struct batch_buf out_dims, out_hours, out_orphans;
};

/* A key's hash, 8 bytes at a time (a multiply and a shift per word). */
static uint64_t
hash_bytes(const char *s, size_t n, uint64_t seed)
{
	uint64_t h = 0x9e3779b97f4a7c15ULL ^ n ^ seed, w;
	size_t i = 0;

	for (; i + 8 <= n; i += 8) {
		memcpy(&w, s + i, 8);
		h = (h ^ w) * 0xff51afd7ed558ccdULL;
		h ^= h >> 32;
	}
	if (i < n) {
		w = 0;
		memcpy(&w, s + i, n - i);
		h = (h ^ w) * 0xff51afd7ed558ccdULL;
		h ^= h >> 32;
	}
	h ^= h >> 33; /* spread the high bits into the low ones used as the slot */
	h *= 0xc4ceb9fe1a85ec53ULL;
	h ^= h >> 33;
	return h;
}

static int
buf_put(struct batch_buf *b, const char *s, size_t n)
{
	if (n == 0)
		return 0;
	if (b->len + n > b->cap) {
		size_t cap = b->cap ? b->cap : 4096;
		char *p;

		while (cap < b->len + n)
			cap *= 2;
		if ((p = realloc(b->data, cap)) == NULL)
			return -1;
		b->data = p;
		b->cap = cap;
	}
	memcpy(b->data + b->len, s, n);
	b->len += n;
	return 0;
}

static int
buf_str(struct batch_buf *b, const char *s)
{
	return buf_put(b, s, strlen(s));
}

/* Big-endian integer of 'bytes' bytes. */
static int
put_be(struct batch_buf *b, uint64_t v, int bytes)
{
	char be[8];

	for (int i = 0; i < bytes; i++)
		be[i] = (char)(v >> (8 * (bytes - 1 - i)));
	return buf_put(b, be, (size_t)bytes);
}

/* One binary COPY field: its length, then an integer of that many bytes. */
static int
bin_int(struct batch_buf *b, int64_t v, int bytes)
{
	return put_be(b, (uint64_t)bytes, 4) | put_be(b, (uint64_t)v, bytes);
}

/* One text value as a binary field or array element: length, then bytes. */
static int
put_text(struct batch_buf *b, const char *v, size_t n)
{
	return put_be(b, n, 4) | buf_put(b, v, n);
}

/* Days from 1970-01-01 to the civil date y-m-d (proleptic Gregorian). */
static int64_t
days_from_civil(int64_t y, int64_t m, int64_t d)
{
	int64_t era, yoe, doy, doe;

	y -= m <= 2;
	era = (y >= 0 ? y : y - 399) / 400;
	yoe = y - era * 400;
	doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
	doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
	return era * 146097 + doe - 719468;
}

#define PG_EPOCH_DAYS 10957 /* 2000-01-01, PostgreSQL's epoch, in Unix days */
#define US_PER_DAY INT64_C(86400000000)

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

/* The entry of (dim, v) in this run of t, created with n = 0 when new
 * (*created = 1); NULL when out of memory. v stays owned by the caller. */
static struct rent *
rtab_get(struct rtab *t, int dim, const char *v, size_t vlen, int *created)
{
	uint64_t h = hash_bytes(v, vlen, (uint64_t)dim);
	struct rent *x;
	size_t i;

	if (2 * (t->n + 1) > t->cap && rtab_grow(t) < 0)
		return NULL;
	for (i = h & (t->cap - 1); t->slot[i].gen == t->gen; i = (i + 1) & (t->cap - 1)) {
		x = &t->e[t->slot[i].idx];
		if (x->h == h && x->vlen == vlen && x->dim == dim && memcmp(x->v, v, vlen) == 0) {
			*created = 0;
			return x;
		}
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
	x->dim = dim;
	x->n = 0;
	t->slot[i].gen = t->gen;
	t->slot[i].idx = (uint32_t)t->n++;
	*created = 1;
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
	return calloc(1, sizeof(struct rollup));
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
	free(r->orph);
	free(r->orph_slot);
	free(r->orph_keys.data);
	free(r->out_dims.data);
	free(r->out_hours.data);
	free(r->out_orphans.data);
	free(r);
}

/* Splits one roll row (batch.h: BATCH_ROLL_FIELDS length-prefixed fields)
 * into its fields; a NULL field gets f[k] NULL and length 0. */
static int
split_row(const char *p, const char *end, const char **f, size_t *flen)
{
	for (int k = 0; k < NFIELDS; k++) {
		size_t n;

		if (end - p < 2)
			return -1;
		n = (size_t)(unsigned char)p[0] | (size_t)(unsigned char)p[1] << 8;
		p += 2;
		if (n == BATCH_ROLL_NULL) {
			f[k] = NULL;
			flen[k] = 0;
			continue;
		}
		if ((size_t)(end - p) < n)
			return -1;
		f[k] = p;
		flen[k] = n;
		p += n;
	}
	return p == end ? 0 : -1;
}

/* Where row i's rollup input fields are in b's roll buffer. */
static void
row_text(const struct batch *b, size_t i, const char **p, const char **end)
{
	*p = b->roll.data + b->row[i].roll_off;
	*end = i + 1 < b->rows ? b->roll.data + b->row[i + 1].roll_off : b->roll.data + b->roll.len;
}

/* Decimal digits s[0..n) as a number (n <= 19); -1 when not all digits. */
static int64_t
digits(const char *s, size_t n)
{
	uint64_t v = 0;

	if (n == 0 || n > 19)
		return -1;
	for (size_t i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -1;
		v = v * 10 + (uint64_t)(s[i] - '0');
	}
	return (int64_t)v;
}

/* A link id as batch.c writes it (ll_text of an int64: optional '-', then
 * up to 19 digits), exactly, so that rows sort by link. */
static int64_t
link_id(const char *s, size_t n)
{
	return n > 1 && s[0] == '-' ? (int64_t)(0 - (uint64_t)digits(s + 1, n - 1)) : digits(s, n);
}

/* YYYYMMDDHH of "YYYY-MM-DD HH..." */
static int64_t
hour_key(const char *ts)
{
	int64_t y = digits(ts, 4), m = digits(ts + 5, 2), d = digits(ts + 8, 2), h = digits(ts + 11, 2);

	return ((y * 100 + m) * 100 + d) * 100 + h;
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

/* The UTC day of visit_time text ("YYYY-MM-DD ...") in days since 2000-01-01. */
static int64_t
pg_day(const char *ts)
{
	return days_from_civil(digits(ts, 4), digits(ts + 5, 2), digits(ts + 8, 2)) -
	    PG_EPOCH_DAYS;
}

/* visit_time text ("YYYY-MM-DD HH:MM:SS.uuuuuu+00") in microseconds since
 * 2000-01-01 00:00 UTC (binary timestamptz); hour_only: its hour's start. */
static int64_t
pg_ts(const char *ts, int hour_only)
{
	int64_t us = pg_day(ts) * US_PER_DAY + digits(ts + 11, 2) * INT64_C(3600000000);

	if (!hour_only)
		us += digits(ts + 14, 2) * 60000000 + digits(ts + 17, 2) * 1000000 +
		    digits(ts + 20, 6);
	return us;
}

/* Starts a binary field of unknown length: returns where its length goes. */
static size_t
field_begin(struct batch_buf *o, int *rc)
{
	size_t at = o->len;

	*rc |= put_be(o, 0, 4);
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
		return put_be(o, 0, 4) | put_be(o, 0, 4) | put_be(o, oid, 4);
	return put_be(o, 1, 4) | put_be(o, 0, 4) | put_be(o, oid, 4) | put_be(o, n, 4) |
	    put_be(o, 1, 4);
}

#define TEXTOID 25
#define INT8OID 20

/* One link_day_dim_batch row (ROLLUP_DAY_DIM_COLUMNS, binary). */
static int
emit_group(struct batch_buf *o, const struct rtab *t, int64_t link, int64_t day, int bot)
{
	int rc = put_be(o, 6, 2) | bin_int(o, link, 8) | bin_int(o, day, 4) | bin_int(o, bot, 1);

	for (int pass = 0; pass < 3; pass++) {
		size_t at = field_begin(o, &rc);

		rc |= array_head(o, pass == 2 ? INT8OID : TEXTOID, t->n);
		for (size_t k = 0; k < t->n; k++) {
			const struct rent *e = &t->e[k];
			if (pass == 0)
				rc |= put_be(o, strlen(dim_names[e->dim]), 4) |
				    buf_str(o, dim_names[e->dim]);
			else if (pass == 1)
				rc |= put_text(o, e->v, e->vlen);
			else
				rc |= bin_int(o, e->n, 8);
		}
		field_end(o, at, rc);
	}
	return rc;
}

/* One link-hour's counters and distinct human clients (one run of rows). */
struct hour_acc {
	int64_t link;
	const char *ts;           /* of its first row */
	long long n, nbot;
	const char *first, *last;
};

/* One ingest_hour row (ROLLUP_HOUR_COLUMNS, binary). */
static int
emit_hour(struct batch_buf *o, const struct hour_acc *a, const struct rtab *seen)
{
	int rc = put_be(o, 7, 2) | bin_int(o, a->link, 8) | bin_int(o, pg_ts(a->ts, 1), 8) |
	    bin_int(o, a->n, 8) | bin_int(o, a->nbot, 8) | bin_int(o, pg_ts(a->first, 0), 8) |
	    bin_int(o, pg_ts(a->last, 0), 8);
	size_t at = field_begin(o, &rc);

	rc |= array_head(o, TEXTOID, seen->n);
	for (size_t k = 0; k < seen->n; k++)
		rc |= put_be(o, CLIENT_LEN, 4) | buf_put(o, seen->e[k].v, CLIENT_LEN);
	field_end(o, at, rc);
	return rc;
}

static int
orphan_grow(struct rollup *r)
{
	size_t cap = r->orph_cap_slots ? 2 * r->orph_cap_slots : 64;
	uint32_t *slot = calloc(cap, sizeof(*slot));

	if (slot == NULL)
		return -1;
	for (size_t k = 0; k < r->norph; k++) {
		size_t j;
		for (j = r->orph[k].h & (cap - 1); slot[j] != 0; j = (j + 1) & (cap - 1))
			;
		slot[j] = (uint32_t)(k + 1);
	}
	free(r->orph_slot);
	r->orph_slot = slot;
	r->orph_cap_slots = cap;
	return 0;
}

/* Counts an orphan visit of code on the day of ts (key: "YYYY-MM-DD" and
 * the code's bytes, in orph_keys). */
static int
add_orphan(struct rollup *r, const char *code, size_t code_len, const char *ts, int bot)
{
	size_t klen = 10 + code_len, i, at = r->orph_keys.len;
	const char *key;
	uint64_t h;
	struct orphan *x;

	/* the key goes at the end of orph_keys, kept only when it is new */
	if (buf_put(&r->orph_keys, ts, 10) < 0 || buf_put(&r->orph_keys, code, code_len) < 0)
		return -1;
	key = r->orph_keys.data + at;
	h = hash_bytes(key, klen, 0);
	if (2 * (r->norph + 1) > r->orph_cap_slots && orphan_grow(r) < 0)
		return -1;
	for (i = h & (r->orph_cap_slots - 1); r->orph_slot[i] != 0;
	    i = (i + 1) & (r->orph_cap_slots - 1)) {
		x = &r->orph[r->orph_slot[i] - 1];
		if (x->h == h && x->klen == klen &&
		    memcmp(r->orph_keys.data + x->koff, key, klen) == 0) {
			r->orph_keys.len = at;
			goto count;
		}
	}
	if (r->norph == r->orph_cap) {
		size_t cap = r->orph_cap ? 2 * r->orph_cap : 64;
		struct orphan *n = realloc(r->orph, cap * sizeof(*n));
		if (n == NULL)
			return -1;
		r->orph = n;
		r->orph_cap = cap;
	}
	x = &r->orph[r->norph];
	x->h = h;
	x->koff = at;
	x->klen = klen;
	x->n = x->nbot = 0;
	r->orph_slot[i] = (uint32_t)(++r->norph);
count:
	if (bot)
		x->nbot++;
	else
		x->n++;
	return 0;
}

/* Sorts the kept rows with a link into r->ref and counts the orphans. */
static int
collect(struct rollup *r, const struct batch *b, const unsigned char *keep)
{
	r->nref = 0;
	for (size_t i = 0; i < b->rows; i++) {
		const char *p, *end, *f[NFIELDS];
		size_t fl[NFIELDS];

		if (keep && !keep[i])
			continue;
		row_text(b, i, &p, &end);
		if (split_row(p, end, f, fl) < 0 || fl[3] != TS_LEN || fl[2] != CLIENT_LEN)
			continue; /* cannot happen: batch.c writes these rows */
		if (f[0] == NULL) { /* an orphan visit */
			if (add_orphan(r, f[1], fl[1], f[3], fl[4] == 1 && f[4][0] == 't') < 0)
				return -1;
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
		r->ref[r->nref].link = link_id(f[0], fl[0]);
		r->ref[r->nref].hour = hour_key(f[3]);
		r->ref[r->nref].row = i;
		r->nref++;
	}
	if (r->nref > 1)
		qsort(r->ref, r->nref, sizeof(*r->ref), cmp_ref);
	return 0;
}

/* Aggregates the sorted rows run by run: each link-day's breakdowns (human
 * and bot apart), each link-hour's counters and distinct human clients. */
static int
aggregate(struct rollup *r, const struct batch *b)
{
	struct hour_acc acc;
	int64_t gday = 0;
	int created;

	memset(&acc, 0, sizeof(acc));
	for (size_t k = 0; k < r->nref; k++) {
		const struct rref *x = &r->ref[k];
		const char *p, *end, *f[NFIELDS];
		size_t fl[NFIELDS];
		int bot;

		row_text(b, x->row, &p, &end);
		if (split_row(p, end, f, fl) < 0)
			return -1; /* collect() split it before */
		bot = fl[4] == 1 && f[4][0] == 't';
		if (k == 0 || x->link != x[-1].link || x->hour != x[-1].hour) {
			if (k > 0 && emit_hour(&r->out_hours, &acc, &r->seen) < 0)
				return -1;
			if (k == 0 || x->link != x[-1].link || x->hour / 100 != x[-1].hour / 100) {
				for (int g = 0; g < 2 && k > 0; g++)
					if (r->dims[g].n > 0 && emit_group(&r->out_dims, &r->dims[g],
					    x[-1].link, gday, g) < 0)
						return -1;
				rtab_clear(&r->dims[0]);
				rtab_clear(&r->dims[1]);
				gday = pg_day(f[3]);
			}
			rtab_clear(&r->seen);
			acc.link = x->link;
			acc.ts = acc.first = acc.last = f[3];
			acc.n = acc.nbot = 0;
		}
		for (int d = 0; d < NVALUES; d++) {
			struct rent *e = rtab_get(&r->dims[bot], d, f[5 + d], fl[5 + d], &created);
			if (e == NULL)
				return -1;
			e->n++;
		}
		if (bot) {
			acc.nbot++;
		} else {
			acc.n++;
			if (rtab_get(&r->seen, 0, f[2], CLIENT_LEN, &created) == NULL)
				return -1;
		}
		if (memcmp(f[3], acc.first, TS_LEN) < 0)
			acc.first = f[3];
		if (memcmp(f[3], acc.last, TS_LEN) > 0)
			acc.last = f[3];
	}
	if (r->nref == 0)
		return 0;
	for (int g = 0; g < 2; g++)
		if (r->dims[g].n > 0 && emit_group(&r->out_dims, &r->dims[g], acc.link, gday, g) < 0)
			return -1;
	return emit_hour(&r->out_hours, &acc, &r->seen);
}

/* The ingest_orphan rows (ROLLUP_ORPHAN_COLUMNS, binary). */
static int
emit_orphans(struct rollup *r)
{
	struct batch_buf *o = &r->out_orphans;
	int rc = 0;

	for (size_t i = 0; i < r->norph && rc == 0; i++) {
		const struct orphan *e = &r->orph[i];
		const char *key = r->orph_keys.data + e->koff;

		rc = put_be(o, 4, 2) | put_text(o, key + 10, e->klen - 10) |
		    bin_int(o, pg_day(key), 4) | bin_int(o, e->n, 8) | bin_int(o, e->nbot, 8);
	}
	return rc;
}

int
rollup_build(struct rollup *r, const struct batch *b, const unsigned char *keep)
{
	r->norph = 0;
	r->orph_keys.len = 0;
	if (r->orph_slot)
		memset(r->orph_slot, 0, r->orph_cap_slots * sizeof(*r->orph_slot));
	r->out_dims.len = r->out_hours.len = r->out_orphans.len = 0;
	if (buf_put(&r->out_dims, batch_copy_header, sizeof(batch_copy_header)) < 0 ||
	    buf_put(&r->out_hours, batch_copy_header, sizeof(batch_copy_header)) < 0 ||
	    buf_put(&r->out_orphans, batch_copy_header, sizeof(batch_copy_header)) < 0 ||
	    collect(r, b, keep) < 0 || aggregate(r, b) < 0 || emit_orphans(r) < 0 ||
	    buf_put(&r->out_dims, batch_copy_trailer, sizeof(batch_copy_trailer)) < 0 ||
	    buf_put(&r->out_hours, batch_copy_trailer, sizeof(batch_copy_trailer)) < 0 ||
	    buf_put(&r->out_orphans, batch_copy_trailer, sizeof(batch_copy_trailer)) < 0)
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
