/* rollup.c - a batch's rollups aggregated in C (open-addressing hash tables
 * over the COPY-escaped fields of the rollup input rows, emitted again as
 * they are), so PostgreSQL receives few, aggregated rows. */
#include "rollup.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NVALUES 10
#define TS_LEN 29 /* "YYYY-MM-DD HH:MM:SS.uuuuuu+00" */

static const char *const dim_names[NVALUES] = {
	"country", "province", "city", "isp", "browser", "browser_version", "os",
	"device_type", "referer_host", "language"
};

struct ent {
	uint64_t h;             /* 0: free slot */
	size_t koff;            /* key bytes in the table's arena */
	size_t klen;
	long long n, nbot;
	const char *first, *last; /* TS_LEN bytes in the batch (hours) */
	long long head;         /* hours: first client node; groups: first dims
	                         * entry (slot index); -1 none */
	long long next;         /* dims: next entry of the same group, -1 none */
	size_t dim;             /* dims: index into dim_names */
	size_t voff, vlen;      /* dims: the value inside the key */
};

/* Entries in insertion order (indexes stay valid as it grows); slot[] maps
 * hash slots to entry index + 1 (0: free). */
struct htab {
	struct ent *e;
	size_t n, ecap;
	uint32_t *slot;
	size_t cap;
	struct batch_buf keys;
};

struct client_node {
	const char *id;         /* 40 hex digits in the batch */
	long long next;
};

struct rollup {
	struct htab dims, groups, hours, orphans, seen;
	struct client_node *cl;
	size_t ncl, cl_cap;
	struct batch_buf key;   /* scratch */
	struct batch_buf out_dims, out_hours, out_orphans;
};

/* A key's hash, 8 bytes at a time (a multiply and a shift per word; the
 * keys are tens of bytes and each row looks up about a dozen). */
static uint64_t
hash_bytes(const char *s, size_t n)
{
	uint64_t h = 0x9e3779b97f4a7c15ULL ^ n, w;
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
	return h ? h : 1;
}

static int
buf_put(struct batch_buf *b, const char *s, size_t n)
{
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

static void
htab_clear(struct htab *t)
{
	if (t->slot)
		memset(t->slot, 0, t->cap * sizeof(*t->slot));
	t->n = 0;
	t->keys.len = 0;
}

static int
htab_grow(struct htab *t)
{
	size_t cap = t->cap ? 2 * t->cap : 1024;
	uint32_t *slot = calloc(cap, sizeof(*slot));

	if (slot == NULL)
		return -1;
	for (size_t k = 0; k < t->n; k++) {
		size_t j;
		for (j = t->e[k].h & (cap - 1); slot[j] != 0; j = (j + 1) & (cap - 1))
			;
		slot[j] = (uint32_t)(k + 1);
	}
	free(t->slot);
	t->slot = slot;
	t->cap = cap;
	return 0;
}

/* The index of key's entry (created zeroed, *created = 1, when new); -1: no
 * memory. */
static long long
htab_get(struct htab *t, const char *key, size_t klen, int *created)
{
	uint64_t h = hash_bytes(key, klen);
	struct ent *x;
	size_t i;

	if (2 * (t->n + 1) > t->cap && htab_grow(t) < 0)
		return -1;
	for (i = h & (t->cap - 1); t->slot[i] != 0; i = (i + 1) & (t->cap - 1)) {
		x = &t->e[t->slot[i] - 1];
		if (x->h == h && x->klen == klen && memcmp(t->keys.data + x->koff, key, klen) == 0) {
			*created = 0;
			return (long long)t->slot[i] - 1;
		}
	}
	if (t->n == t->ecap) {
		size_t ecap = t->ecap ? 2 * t->ecap : 512;
		struct ent *e = realloc(t->e, ecap * sizeof(*e));
		if (e == NULL)
			return -1;
		t->e = e;
		t->ecap = ecap;
	}
	if (buf_put(&t->keys, key, klen) < 0)
		return -1;
	x = &t->e[t->n];
	memset(x, 0, sizeof(*x));
	x->h = h;
	x->koff = t->keys.len - klen;
	x->klen = klen;
	x->head = x->next = -1;
	t->slot[i] = (uint32_t)(++t->n);
	*created = 1;
	return (long long)t->n - 1;
}

struct rollup *
rollup_new(void)
{
	return calloc(1, sizeof(struct rollup));
}

static void
htab_free(struct htab *t)
{
	free(t->e);
	free(t->slot);
	free(t->keys.data);
}

void
rollup_free(struct rollup *r)
{
	if (r == NULL)
		return;
	htab_free(&r->dims);
	htab_free(&r->groups);
	htab_free(&r->hours);
	htab_free(&r->orphans);
	htab_free(&r->seen);
	free(r->cl);
	free(r->key.data);
	free(r->out_dims.data);
	free(r->out_hours.data);
	free(r->out_orphans.data);
	free(r);
}

/* Splits one roll row (ending in '\n') into its 15 fields. */
static int
split_row(const char *p, const char *end, const char **f, size_t *flen)
{
	int k = 0;

	while (k < 15) {
		const char *q = p;
		while (q < end && *q != '\t' && *q != '\n')
			q++;
		f[k] = p;
		flen[k] = (size_t)(q - p);
		k++;
		if (q >= end || *q == '\n')
			break;
		p = q + 1;
	}
	return k == 15 ? 0 : -1;
}

/* key = parts joined by tabs, into r->key. */
static int
make_key(struct rollup *r, const char *const *part, const size_t *plen, int n)
{
	r->key.len = 0;
	for (int i = 0; i < n; i++)
		if ((i && buf_put(&r->key, "\t", 1) < 0) || buf_put(&r->key, part[i], plen[i]) < 0)
			return -1;
	return 0;
}

/* The entry of the key made of parts (joined by tabs) in t; NULL: no memory. */
static struct ent *
get(struct rollup *r, struct htab *t, const char *const *part, const size_t *plen, int n,
    int *created)
{
	long long k;

	if (make_key(r, part, plen, n) < 0 ||
	    (k = htab_get(t, r->key.data, r->key.len, created)) < 0)
		return NULL;
	return &t->e[k];
}

static int
add_row(struct rollup *r, const char *p, const char *end)
{
	const char *f[15], *part[5];
	size_t fl[15], pl[5];
	int bot, created;
	long long gi;
	struct ent *e;

	if (split_row(p, end, f, fl) < 0 || fl[3] != TS_LEN || fl[2] != DIGEST_SHA1_HEX_SIZE - 1)
		return 0; /* cannot happen: batch.c writes these rows */
	bot = fl[4] == 1 && f[4][0] == 't';
	if (fl[0] == 2 && f[0][0] == '\\') { /* \N: an orphan visit */
		part[0] = f[1], pl[0] = fl[1];          /* code */
		part[1] = f[3], pl[1] = 10;             /* day */
		if ((e = get(r, &r->orphans, part, pl, 2, &created)) == NULL)
			return -1;
		if (bot)
			e->nbot++;
		else
			e->n++;
		return 0;
	}
	/* link_day_dim_batch: one group per link, day, is_bot; in it one entry
	 * per dimension and value */
	part[0] = f[0], pl[0] = fl[0];
	part[1] = f[3], pl[1] = 10;
	part[2] = bot ? "t" : "f", pl[2] = 1;
	if ((e = get(r, &r->groups, part, pl, 3, &created)) == NULL)
		return -1;
	gi = e - r->groups.e;
	for (int d = 0; d < NVALUES; d++) {
		char dn = (char)('0' + d);
		part[3] = &dn, pl[3] = 1;
		part[4] = f[5 + d], pl[4] = fl[5 + d];
		if ((e = get(r, &r->dims, part, pl, 5, &created)) == NULL)
			return -1;
		if (created) {
			struct ent *g = &r->groups.e[gi];
			e->dim = (size_t)d;
			e->voff = e->koff + e->klen - fl[5 + d];
			e->vlen = fl[5 + d];
			e->next = g->head;
			g->head = e - r->dims.e;
		}
		e->n++;
	}
	/* link_hour: link, "YYYY-MM-DD HH" */
	part[1] = f[3], pl[1] = 13;
	if ((e = get(r, &r->hours, part, pl, 2, &created)) == NULL)
		return -1;
	if (bot)
		e->nbot++;
	else
		e->n++;
	if (created || memcmp(f[3], e->first, TS_LEN) < 0)
		e->first = f[3];
	if (created || memcmp(f[3], e->last, TS_LEN) > 0)
		e->last = f[3];
	if (!bot) {
		long long hi = e - r->hours.e;
		part[2] = f[2], pl[2] = fl[2];
		if (get(r, &r->seen, part, pl, 3, &created) == NULL)
			return -1;
		if (created) {
			if (r->ncl == r->cl_cap) {
				size_t cap = r->cl_cap ? 2 * r->cl_cap : 1024;
				struct client_node *n = realloc(r->cl, cap * sizeof(*n));
				if (n == NULL)
					return -1;
				r->cl = n;
				r->cl_cap = cap;
			}
			r->cl[r->ncl].id = f[2];
			r->cl[r->ncl].next = r->hours.e[hi].head;
			r->hours.e[hi].head = (long long)r->ncl++;
		}
	}
	return 0;
}

static int
put_num(struct batch_buf *o, long long v)
{
	char num[32];
	int n = snprintf(num, sizeof(num), "%lld", v);

	return buf_put(o, num, (size_t)n);
}

/* Appends "\t<v>". */
static int
put_count(struct batch_buf *o, long long v)
{
	return buf_str(o, "\t") | put_num(o, v);
}

/* Appends a COPY-escaped text value as a quoted array element, in COPY text:
 * the array syntax escapes '"' and '\' with '\', which COPY doubles again. */
static int
put_elem(struct batch_buf *o, const char *v, size_t n)
{
	int rc = buf_str(o, "\"");

	for (size_t i = 0; i < n && rc == 0; i++) {
		if (v[i] == '"')
			rc = buf_str(o, "\\\\\"");
		else if (v[i] == '\\' && i + 1 < n && v[i + 1] == '\\')
			rc = buf_str(o, "\\\\\\\\"), i++;
		else if (v[i] == '\\' && i + 1 < n)
			rc = buf_put(o, v + i, 2), i++;
		else
			rc = buf_put(o, v + i, 1);
	}
	return rc | buf_str(o, "\"");
}

static int
emit(struct rollup *r)
{
	struct batch_buf *o = &r->out_dims;

	for (size_t i = 0; i < r->groups.n; i++) {
		const struct ent *g = &r->groups.e[i];
		int rc = buf_put(o, r->groups.keys.data + g->koff, g->klen);

		for (int pass = 0; pass < 3; pass++) {
			rc |= buf_str(o, "\t{");
			for (long long k = g->head; k >= 0; k = r->dims.e[k].next) {
				const struct ent *e = &r->dims.e[k];
				if (pass == 0)
					rc |= buf_str(o, dim_names[e->dim]);
				else if (pass == 1)
					rc |= put_elem(o, r->dims.keys.data + e->voff, e->vlen);
				else
					rc |= put_num(o, e->n);
				if (e->next >= 0)
					rc |= buf_str(o, ",");
			}
			rc |= buf_str(o, "}");
		}
		if (rc || buf_str(o, "\n") < 0)
			return -1;
	}
	for (size_t i = 0; i < r->orphans.n; i++) {
		const struct ent *e = &r->orphans.e[i];
		if (buf_put(&r->out_orphans, r->orphans.keys.data + e->koff, e->klen) < 0 ||
		    put_count(&r->out_orphans, e->n) < 0 || put_count(&r->out_orphans, e->nbot) < 0 ||
		    buf_str(&r->out_orphans, "\n") < 0)
			return -1;
	}
	for (size_t i = 0; i < r->hours.n; i++) {
		const struct ent *e = &r->hours.e[i];
		int rc = 0;

		o = &r->out_hours;
		rc |= buf_put(o, r->hours.keys.data + e->koff, e->klen);
		rc |= buf_str(o, ":00:00+00");
		rc |= put_count(o, e->n);
		rc |= put_count(o, e->nbot);
		rc |= buf_str(o, "\t");
		rc |= buf_put(o, e->first, TS_LEN);
		rc |= buf_str(o, "\t");
		rc |= buf_put(o, e->last, TS_LEN);
		rc |= buf_str(o, "\t{");
		for (long long c = e->head; c >= 0; c = r->cl[c].next) {
			rc |= buf_put(o, r->cl[c].id, DIGEST_SHA1_HEX_SIZE - 1);
			if (r->cl[c].next >= 0)
				rc |= buf_str(o, ",");
		}
		rc |= buf_str(o, "}\n");
		if (rc)
			return -1;
	}
	return 0;
}

int
rollup_build(struct rollup *r, const struct batch *b, const unsigned char *keep)
{
	htab_clear(&r->dims);
	htab_clear(&r->groups);
	htab_clear(&r->hours);
	htab_clear(&r->orphans);
	htab_clear(&r->seen);
	r->ncl = 0;
	r->out_dims.len = r->out_hours.len = r->out_orphans.len = 0;
	for (size_t i = 0; i < b->rows; i++) {
		size_t from = b->row[i].roll_off;
		size_t to = i + 1 < b->rows ? b->row[i + 1].roll_off : b->roll.len;
		if (keep && !keep[i])
			continue;
		if (add_row(r, b->roll.data + from, b->roll.data + to) < 0)
			return -1;
	}
	return emit(r);
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
