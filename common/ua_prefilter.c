/* ua_prefilter.c - literal pre-filter for the uap-core regexes: extracts from
 * each pattern the literals any match must contain, and finds all literals of
 * a string in one Aho-Corasick pass, so most regexes are never run. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ua_int.h"

/* Analysis limits: an "exact" set lists every string a sub-pattern can match
 * (kept while small); a requirement alternative set is capped too. */
#define EX_MAX   16   /* strings in an exact set */
#define EX_LEN   32   /* bytes in one exact string */
#define OR_MAX   512  /* literals in one "one of" set */
#define KEEP_MAX 3    /* "one of" sets kept per regex */
#define DEPTH_MAX 64  /* group nesting */

/* ---- per-analysis arena ---------------------------------------------------- */

struct ablk {
	struct ablk *next;
	size_t used, cap;
	_Alignas(16) unsigned char data[];
};

struct arena {
	struct ablk *head;
	int oom;
};

static void *
aalloc(struct arena *a, size_t n)
{
	struct ablk *b = a->head;
	void *p;

	n = (n + 15) & ~(size_t)15;
	if (n == 0)
		n = 16;
	if (b == NULL || b->cap - b->used < n) {
		size_t cap = n > 16384 ? n : 16384;

		b = malloc(sizeof(*b) + cap);
		if (b == NULL) {
			a->oom = 1;
			return NULL;
		}
		b->next = a->head;
		b->used = 0;
		b->cap = cap;
		a->head = b;
	}
	p = b->data + b->used;
	b->used += n;
	return p;
}

static void
arena_free(struct arena *a)
{
	while (a->head != NULL) {
		struct ablk *n = a->head->next;

		free(a->head);
		a->head = n;
	}
}

/* ---- sets of strings ------------------------------------------------------- */

struct lit {
	const unsigned char *s;
	size_t n;
};

struct sset {
	int n;
	struct lit *v;
};

/* What a sub-pattern tells us. exact: it matches only strings of ex (all
 * lowercase). Otherwise every match of it makes each set of req have a member
 * occurring in the subject (nreq == 0: nothing known). */
struct info {
	int exact;
	struct sset ex;
	struct sset *req;
	int nreq;
};

struct rp {
	const unsigned char *p, *end;
	struct arena *a;
	int fail;
	int depth;
};

static unsigned char
lc(unsigned char c)
{
	return (c >= 'A' && c <= 'Z') ? (unsigned char)(c + 32) : c;
}

static int
lit_eq(const struct lit *x, const struct lit *y)
{
	return x->n == y->n && (x->n == 0 || memcmp(x->s, y->s, x->n) == 0);
}

static int
sset_has(const struct sset *s, const struct lit *l)
{
	for (int i = 0; i < s->n; i++)
		if (lit_eq(&s->v[i], l))
			return 1;
	return 0;
}

static int
sset_has_empty(const struct sset *s)
{
	for (int i = 0; i < s->n; i++)
		if (s->v[i].n == 0)
			return 1;
	return 0;
}

static size_t
sset_maxlen(const struct sset *s)
{
	size_t m = 0;

	for (int i = 0; i < s->n; i++)
		if (s->v[i].n > m)
			m = s->v[i].n;
	return m;
}

static struct info
info_any(void)
{
	struct info i;

	memset(&i, 0, sizeof(i));
	return i;
}

static struct info
info_exact1(struct rp *r, const unsigned char *s, size_t n)
{
	struct info i = info_any();
	struct lit *l = aalloc(r->a, sizeof(*l));
	unsigned char *d = aalloc(r->a, n + 1);

	if (l == NULL || d == NULL) {
		r->fail = 1;
		return i;
	}
	for (size_t k = 0; k < n; k++)
		d[k] = lc(s[k]);
	l->s = d;
	l->n = n;
	i.exact = 1;
	i.ex.n = 1;
	i.ex.v = l;
	return i;
}

static struct info
info_empty(struct rp *r)
{
	return info_exact1(r, (const unsigned char *)"", 0);
}

/* Exact set of single bytes (already lowercased, distinct). */
static struct info
info_chars(struct rp *r, const unsigned char *cs, int n)
{
	struct info i = info_any();
	struct lit *v = aalloc(r->a, sizeof(*v) * (size_t)n);
	unsigned char *d = aalloc(r->a, (size_t)n);

	if (v == NULL || d == NULL) {
		r->fail = 1;
		return i;
	}
	for (int k = 0; k < n; k++) {
		d[k] = cs[k];
		v[k].s = d + k;
		v[k].n = 1;
	}
	i.exact = 1;
	i.ex.n = n;
	i.ex.v = v;
	return i;
}

/* The requirement sets of x: its exact set (unless it holds "") or its req. */
static int
reqs_of(const struct info *x, const struct sset **out)
{
	if (x->exact) {
		if (sset_has_empty(&x->ex))
			return 0;
		*out = &x->ex;
		return 1;
	}
	*out = x->req;
	return x->nreq;
}

/* Rates a "one of" set: higher is more selective. Literals that occur in
 * everyday browser strings are poor filters. */
static const char *const common_text =
    "mozilla/5.0 (windows nt 10.0; win64; x64) applewebkit/537.36 (khtml, like gecko) "
    "chrome/120.0.0.0 safari/537.36\n"
    "mozilla/5.0 (linux; android 10; k) applewebkit/537.36 (khtml, like gecko) "
    "chrome/120.0.0.0 mobile safari/537.36\n"
    "mozilla/5.0 (iphone; cpu iphone os 17_1 like mac os x) applewebkit/605.1.15 "
    "(khtml, like gecko) version/17.1 mobile/15e148 safari/604.1\n"
    "mozilla/5.0 (macintosh; intel mac os x 10_15_7) applewebkit/605.1.15 "
    "(khtml, like gecko) version/17.1 safari/605.1.15\n"
    "mozilla/5.0 (windows nt 10.0; win64; x64; rv:121.0) gecko/20100101 firefox/121.0\n"
    "mozilla/5.0 (linux; u; android 4.4.2; en-us; sm-g900f build/kot49h) "
    "applewebkit/534.30 (khtml, like gecko) version/4.0 mobile safari/534.30\n";

static int
lit_weight(const struct lit *l)
{
	int w = l->n > 8 ? 8 : (int)l->n;

	if (l->n > 0 && memmem(common_text, strlen(common_text), l->s, l->n) != NULL)
		w = w > 2 ? 2 : w;
	return w;
}

static int
sset_score(const struct sset *s)
{
	int m = 1000;

	if (s->n == 0)
		return 0;
	for (int i = 0; i < s->n; i++) {
		int w = lit_weight(&s->v[i]);

		if (w < m)
			m = w;
	}
	return m;
}

static const struct sset *
best_of(const struct info *x)
{
	const struct sset *rs, *best = NULL;
	int n = reqs_of(x, &rs), bs = 0;

	for (int i = 0; i < n; i++) {
		int sc = sset_score(&rs[i]);

		if (sc > bs || (sc == bs && best != NULL && rs[i].n < best->n)) {
			bs = sc;
			best = &rs[i];
		}
	}
	return best;
}

/* Appends the requirement sets of x to dst (arena array of *cap). */
static void
req_append(struct rp *r, struct sset **dst, int *n, int *cap, const struct sset *add, int nadd)
{
	if (nadd == 0)
		return;
	if (*n + nadd > *cap) {
		int nc = (*n + nadd) * 2;
		struct sset *v = aalloc(r->a, sizeof(*v) * (size_t)nc);

		if (v == NULL) {
			r->fail = 1;
			return;
		}
		if (*n)
			memcpy(v, *dst, sizeof(*v) * (size_t)*n);
		*dst = v;
		*cap = nc;
	}
	memcpy(*dst + *n, add, sizeof(*add) * (size_t)nadd);
	*n += nadd;
}

/* Cross product a x b as a new exact set (caller checked the limits). */
static struct sset
sset_cross(struct rp *r, const struct sset *a, const struct sset *b)
{
	struct sset o = { 0, NULL };

	o.v = aalloc(r->a, sizeof(*o.v) * (size_t)(a->n * b->n));
	if (o.v == NULL) {
		r->fail = 1;
		return o;
	}
	for (int i = 0; i < a->n; i++)
		for (int j = 0; j < b->n; j++) {
			struct lit l;
			unsigned char *d = aalloc(r->a, a->v[i].n + b->v[j].n + 1);

			if (d == NULL) {
				r->fail = 1;
				return o;
			}
			if (a->v[i].n)
				memcpy(d, a->v[i].s, a->v[i].n);
			if (b->v[j].n)
				memcpy(d + a->v[i].n, b->v[j].s, b->v[j].n);
			l.s = d;
			l.n = a->v[i].n + b->v[j].n;
			if (!sset_has(&o, &l))
				o.v[o.n++] = l;
		}
	return o;
}

/* ---- the pattern walker ---------------------------------------------------- */

static struct info parse_alt(struct rp *r);

static int
is_digit(unsigned char c)
{
	return c >= '0' && c <= '9';
}

static int
hexval(unsigned char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	c = lc(c);
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	return -1;
}

/* Reads {n}, {n,}, {n,m} at r->p when it is a quantifier; 1 if so. */
static int
read_braces(struct rp *r, long *mn, long *mx, int consume)
{
	const unsigned char *q = r->p;
	long a = 0, b;

	if (q >= r->end || *q != '{')
		return 0;
	q++;
	if (q >= r->end || !is_digit(*q))
		return 0;
	while (q < r->end && is_digit(*q)) {
		a = a * 10 + (*q - '0');
		if (a > 100000)
			return 0;
		q++;
	}
	b = a;
	if (q < r->end && *q == ',') {
		q++;
		if (q < r->end && is_digit(*q)) {
			b = 0;
			while (q < r->end && is_digit(*q)) {
				b = b * 10 + (*q - '0');
				if (b > 100000)
					return 0;
				q++;
			}
		} else {
			b = -1;
		}
	}
	if (q >= r->end || *q != '}')
		return 0;
	if (consume) {
		r->p = q + 1;
		*mn = a;
		*mx = b;
	}
	return 1;
}

/* Escape outside a class. Returns an info; sets r->fail when unsure. */
static struct info
parse_escape(struct rp *r)
{
	unsigned char c, b;

	if (r->p >= r->end) {
		r->fail = 1;
		return info_any();
	}
	c = *r->p++;
	switch (c) {
	case 'd': case 'D': case 'w': case 'W': case 's': case 'S':
	case 'h': case 'H': case 'v': case 'V': case 'N': case 'R': case 'X':
		return info_any();
	case 'b': case 'B': case 'A': case 'z': case 'Z': case 'G':
		return info_empty(r);
	case 'n': b = '\n'; break;
	case 't': b = '\t'; break;
	case 'r': b = '\r'; break;
	case 'f': b = '\f'; break;
	case 'e': b = 0x1b; break;
	case 'a': b = 0x07; break;
	case 'x': {
		int v = 0, d;

		if (r->p < r->end && *r->p == '{') {
			r->p++;
			while (r->p < r->end && *r->p != '}') {
				if ((d = hexval(*r->p++)) < 0 || (v = v * 16 + d) > 0xff) {
					r->fail = 1;
					return info_any();
				}
			}
			if (r->p >= r->end) {
				r->fail = 1;
				return info_any();
			}
			r->p++;
		} else {
			for (int k = 0; k < 2 && r->p < r->end && (d = hexval(*r->p)) >= 0; k++) {
				v = v * 16 + d;
				r->p++;
			}
		}
		b = (unsigned char)v;
		break;
	}
	default:
		if (c >= '1' && c <= '9') /* back reference: matches something */
			return info_any();
		if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '0' || c >= 0x80) {
			r->fail = 1; /* \Q, \p, \c, \g, \k, octal, ...: not handled */
			return info_any();
		}
		b = c;
		break;
	}
	return info_exact1(r, &b, 1);
}

/* Character class; r->p is just past '['. */
static struct info
parse_class(struct rp *r)
{
	unsigned char set[256];
	int neg = 0, big = 0, first = 1, n = 0;
	unsigned char cs[8];

	memset(set, 0, sizeof(set));
	if (r->p < r->end && *r->p == '^') {
		neg = 1;
		r->p++;
	}
	for (;;) {
		int lo, hi;

		if (r->p >= r->end) {
			r->fail = 1;
			return info_any();
		}
		if (*r->p == ']' && !first) {
			r->p++;
			break;
		}
		first = 0;
		if (*r->p == '[' && r->p + 1 < r->end && (r->p[1] == ':' || r->p[1] == '.' || r->p[1] == '=')) {
			r->fail = 1; /* POSIX classes: not handled */
			return info_any();
		}
		if (*r->p == '\\') {
			unsigned char c;

			r->p++;
			if (r->p >= r->end) {
				r->fail = 1;
				return info_any();
			}
			c = *r->p++;
			if (strchr("dDwWsShHvV", c) != NULL) {
				big = 1;
				continue;
			}
			if (c == 'n')
				lo = '\n';
			else if (c == 't')
				lo = '\t';
			else if (c == 'r')
				lo = '\r';
			else if (c == 'f')
				lo = '\f';
			else if (c == 'x') {
				int v = 0, d;

				for (int k = 0; k < 2 && r->p < r->end && (d = hexval(*r->p)) >= 0; k++) {
					v = v * 16 + d;
					r->p++;
				}
				lo = v;
			} else if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
			    (c >= '0' && c <= '9') || c >= 0x80) {
				r->fail = 1;
				return info_any();
			} else
				lo = c;
		} else {
			lo = *r->p++;
		}
		hi = lo;
		if (r->p + 1 < r->end && *r->p == '-' && r->p[1] != ']') {
			unsigned char c = r->p[1];

			if (c == '\\' || c == '[') {
				r->fail = 1;
				return info_any();
			}
			r->p += 2;
			hi = c;
			if (hi < lo) {
				r->fail = 1;
				return info_any();
			}
		}
		for (int k = lo; k <= hi; k++)
			set[lc((unsigned char)k)] = 1;
	}
	if (neg || big)
		return info_any();
	for (int k = 0; k < 256; k++)
		if (set[k]) {
			if (n == 4)
				return info_any();
			cs[n++] = (unsigned char)k;
		}
	if (n == 0) {
		r->fail = 1;
		return info_any();
	}
	return info_chars(r, cs, n);
}

static struct info
parse_group(struct rp *r)
{
	struct info in;
	int kind = 0; /* 0 group, 1 positive assertion, 2 negative assertion */

	if (r->p < r->end && *r->p == '*') {
		r->fail = 1; /* (*VERB) */
		return info_any();
	}
	if (r->p < r->end && *r->p == '?') {
		const unsigned char *q = r->p + 1;

		if (q >= r->end) {
			r->fail = 1;
			return info_any();
		}
		if (*q == ':' || *q == '>' || *q == '|') {
			r->p = q + 1;
		} else if (*q == '=') {
			r->p = q + 1;
			kind = 1;
		} else if (*q == '!') {
			r->p = q + 1;
			kind = 2;
		} else if (*q == '<' && q + 1 < r->end && (q[1] == '=' || q[1] == '!')) {
			kind = q[1] == '=' ? 1 : 2;
			r->p = q + 2;
		} else if (*q == '<' || *q == '\'' || (*q == 'P' && q + 1 < r->end && q[1] == '<')) {
			unsigned char close = *q == '\'' ? '\'' : '>';

			q += *q == 'P' ? 2 : 1;
			while (q < r->end && *q != close)
				q++;
			if (q >= r->end) {
				r->fail = 1;
				return info_any();
			}
			r->p = q + 1;
		} else {
			r->fail = 1; /* inline options, comments, conditionals... */
			return info_any();
		}
	}
	if (++r->depth > DEPTH_MAX) {
		r->fail = 1;
		return info_any();
	}
	in = parse_alt(r);
	r->depth--;
	if (r->p >= r->end || *r->p != ')') {
		r->fail = 1;
		return info_any();
	}
	r->p++;
	if (kind == 2)
		return info_empty(r); /* consumes nothing, requires nothing */
	if (kind == 1) {
		/* consumes nothing, but what it looks at must be there */
		struct info o = info_any();
		const struct sset *rs;
		int n = reqs_of(&in, &rs), cap = 0;

		req_append(r, &o.req, &o.nreq, &cap, rs, n);
		return o;
	}
	return in;
}

static struct info
parse_atom(struct rp *r)
{
	unsigned char c = *r->p++;

	switch (c) {
	case '(':
		return parse_group(r);
	case '[':
		return parse_class(r);
	case '.':
		return info_any();
	case '^':
	case '$':
		return info_empty(r);
	case '\\':
		return parse_escape(r);
	case '*':
	case '+':
	case '?':
	case ')':
		r->fail = 1;
		return info_any();
	case '{': {
		long a, b;

		r->p--;
		if (read_braces(r, &a, &b, 0)) {
			r->fail = 1;
			return info_any();
		}
		r->p++;
		return info_exact1(r, &c, 1);
	}
	default:
		return info_exact1(r, &c, 1);
	}
}

static struct info
apply_repeat(struct rp *r, struct info x, long mn, long mx)
{
	if (mn == 1 && mx == 1)
		return x;
	if (mn == 0) {
		struct info o = info_any();

		if (mx == 1 && x.exact && x.ex.n < EX_MAX) {
			struct lit *v = aalloc(r->a, sizeof(*v) * (size_t)(x.ex.n + 1));

			if (v == NULL) {
				r->fail = 1;
				return o;
			}
			memcpy(v, x.ex.v, sizeof(*v) * (size_t)x.ex.n);
			o.exact = 1;
			o.ex.v = v;
			o.ex.n = x.ex.n;
			if (!sset_has_empty(&x.ex)) {
				v[o.ex.n].s = (const unsigned char *)"";
				v[o.ex.n].n = 0;
				o.ex.n++;
			}
		}
		return o;
	}
	/* at least once: whatever x requires is required */
	{
		struct info o = info_any();
		const struct sset *rs;
		int n = reqs_of(&x, &rs), cap = 0;

		req_append(r, &o.req, &o.nreq, &cap, rs, n);
		return o;
	}
}

static struct info
parse_repeat(struct rp *r)
{
	struct info x = parse_atom(r);

	while (!r->fail && r->p < r->end) {
		long mn, mx;
		unsigned char c = *r->p;

		if (c == '*') {
			mn = 0;
			mx = -1;
			r->p++;
		} else if (c == '+') {
			mn = 1;
			mx = -1;
			r->p++;
		} else if (c == '?') {
			mn = 0;
			mx = 1;
			r->p++;
		} else if (c == '{' && read_braces(r, &mn, &mx, 1)) {
			if (mx >= 0 && mx < mn) {
				r->fail = 1;
				break;
			}
		} else {
			break;
		}
		if (r->p < r->end && (*r->p == '?' || *r->p == '+'))
			r->p++; /* lazy / possessive: same strings */
		x = apply_repeat(r, x, mn, mx);
	}
	return x;
}

static struct info
parse_concat(struct rp *r)
{
	struct sset cur = { 0, NULL };
	int have_cur = 0, exact = 1, cap = 0;
	struct info o = info_any();

	while (!r->fail && r->p < r->end && *r->p != '|' && *r->p != ')') {
		struct info x = parse_repeat(r);

		if (r->fail)
			break;
		if (x.exact) {
			if (!have_cur) {
				cur = x.ex;
				have_cur = 1;
			} else if (cur.n * x.ex.n <= EX_MAX &&
			    sset_maxlen(&cur) + sset_maxlen(&x.ex) <= EX_LEN) {
				cur = sset_cross(r, &cur, &x.ex);
			} else {
				/* too big to extend: what we have so far is required */
				if (!sset_has_empty(&cur))
					req_append(r, &o.req, &o.nreq, &cap, &cur, 1);
				exact = 0;
				cur = x.ex;
			}
		} else {
			if (have_cur && !sset_has_empty(&cur))
				req_append(r, &o.req, &o.nreq, &cap, &cur, 1);
			have_cur = 0;
			exact = 0;
			req_append(r, &o.req, &o.nreq, &cap, x.req, x.nreq);
		}
	}
	if (exact) {
		if (!have_cur)
			return info_empty(r);
		o.exact = 1;
		o.ex = cur;
		return o;
	}
	if (have_cur && !sset_has_empty(&cur))
		req_append(r, &o.req, &o.nreq, &cap, &cur, 1);
	return o;
}

static struct info
parse_alt(struct rp *r)
{
	struct info br[64];
	struct info *v = br;
	int n = 0, cap = 64, all_exact = 1, total = 0;
	struct info o = info_any();

	for (;;) {
		struct info x = parse_concat(r);

		if (r->fail)
			return info_any();
		if (n == cap) {
			struct info *nv = aalloc(r->a, sizeof(*nv) * (size_t)cap * 2);

			if (nv == NULL) {
				r->fail = 1;
				return info_any();
			}
			memcpy(nv, v, sizeof(*nv) * (size_t)n);
			v = nv;
			cap *= 2;
		}
		v[n++] = x;
		if (!x.exact)
			all_exact = 0;
		else
			total += x.ex.n;
		if (r->p < r->end && *r->p == '|') {
			r->p++;
			continue;
		}
		break;
	}
	if (n == 1)
		return v[0];
	if (all_exact && total <= EX_MAX) {
		o.exact = 1;
		o.ex.v = aalloc(r->a, sizeof(struct lit) * (size_t)total);
		if (o.ex.v == NULL) {
			r->fail = 1;
			return info_any();
		}
		for (int i = 0; i < n; i++)
			for (int k = 0; k < v[i].ex.n; k++)
				if (!sset_has(&o.ex, &v[i].ex.v[k]))
					o.ex.v[o.ex.n++] = v[i].ex.v[k];
		return o;
	}
	/* one of the branches matched: one of their best sets is there */
	{
		const struct sset **b = aalloc(r->a, sizeof(*b) * (size_t)n);
		int sum = 0;
		struct sset u;

		if (b == NULL) {
			r->fail = 1;
			return o;
		}
		for (int i = 0; i < n; i++) {
			b[i] = best_of(&v[i]);
			if (b[i] == NULL)
				return o; /* a branch requiring nothing: nothing known */
			sum += b[i]->n;
		}
		if (sum > OR_MAX)
			return o;
		u.n = 0;
		u.v = aalloc(r->a, sizeof(*u.v) * (size_t)sum);
		if (u.v == NULL) {
			r->fail = 1;
			return o;
		}
		for (int i = 0; i < n; i++)
			for (int k = 0; k < b[i]->n; k++)
				if (!sset_has(&u, &b[i]->v[k]))
					u.v[u.n++] = b[i]->v[k];
		cap = 0;
		req_append(r, &o.req, &o.nreq, &cap, &u, 1);
		return o;
	}
}

/* ---- literal table, requirement pool, automaton ---------------------------- */

struct ua_pf {
	/* literals */
	char **lit;          /* owned, NUL-terminated, lowercase */
	uint32_t *litlen;
	size_t nlit, litcap;
	uint32_t *idx;       /* open addressing: id + 1, 0 empty */
	size_t idxcap;
	/* requirement pool: [nsets, (n, id...)...] per handle */
	uint32_t *pool;
	size_t npool, poolcap;
	/* automaton */
	unsigned char cls[256];
	uint32_t ncls;
	uint32_t nstates;
	uint32_t *delta;     /* nstates * ncls */
	uint32_t *outid;     /* per state: literal ending here, or UINT32_MAX */
	uint32_t *dict;      /* per state: next state with output on the fail chain, 0 none */
	uint32_t *firstout;  /* per state: itself if it has output, else dict */
	int built;
	/* regex index (ua_pf_index): literal -> requirement sets it satisfies */
	uint32_t nrx;        /* regexes indexed */
	uint32_t nsets;      /* requirement sets over all regexes */
	uint32_t *post_start; /* nlit + 1 offsets into post */
	uint32_t *post;      /* set ids */
	uint32_t *set_rx;    /* set id -> regex */
	uint8_t *need;       /* regex -> number of sets (0: always a candidate) */
	uint64_t *always;    /* regexes without a requirement, as bits */
};

static uint64_t
fnv(const unsigned char *s, size_t n)
{
	uint64_t h = 1469598103934665603ULL;

	for (size_t i = 0; i < n; i++) {
		h ^= s[i];
		h *= 1099511628211ULL;
	}
	return h;
}

struct ua_pf *
ua_pf_new(void)
{
	return calloc(1, sizeof(struct ua_pf));
}

void
ua_pf_free(struct ua_pf *pf)
{
	if (pf == NULL)
		return;
	for (size_t i = 0; i < pf->nlit; i++)
		free(pf->lit[i]);
	free(pf->lit);
	free(pf->litlen);
	free(pf->idx);
	free(pf->pool);
	free(pf->delta);
	free(pf->outid);
	free(pf->dict);
	free(pf->firstout);
	free(pf->post_start);
	free(pf->post);
	free(pf->set_rx);
	free(pf->need);
	free(pf->always);
	free(pf);
}

static int
idx_grow(struct ua_pf *pf)
{
	size_t nc = pf->idxcap ? pf->idxcap * 2 : 1024;
	uint32_t *ni = calloc(nc, sizeof(*ni));

	if (ni == NULL)
		return -1;
	for (size_t i = 0; i < pf->nlit; i++) {
		size_t k = fnv((unsigned char *)pf->lit[i], pf->litlen[i]) & (nc - 1);

		while (ni[k])
			k = (k + 1) & (nc - 1);
		ni[k] = (uint32_t)i + 1;
	}
	free(pf->idx);
	pf->idx = ni;
	pf->idxcap = nc;
	return 0;
}

/* Id of the literal (already lowercase), adding it if new; -1 on failure. */
static int
intern(struct ua_pf *pf, const unsigned char *s, size_t n)
{
	size_t k;
	char *copy;

	if (pf->built || n == 0)
		return -1;
	if ((pf->nlit + 1) * 2 > pf->idxcap && idx_grow(pf) < 0)
		return -1;
	k = fnv(s, n) & (pf->idxcap - 1);
	while (pf->idx[k]) {
		uint32_t id = pf->idx[k] - 1;

		if (pf->litlen[id] == n && memcmp(pf->lit[id], s, n) == 0)
			return (int)id;
		k = (k + 1) & (pf->idxcap - 1);
	}
	if (pf->nlit >= UA_PF_MAX_LITERALS)
		return -1;
	if (pf->nlit == pf->litcap) {
		size_t nc = pf->litcap ? pf->litcap * 2 : 256;
		char **nl = realloc(pf->lit, nc * sizeof(*nl));

		if (nl == NULL)
			return -1;
		pf->lit = nl;
		uint32_t *nn = realloc(pf->litlen, nc * sizeof(*nn));
		if (nn == NULL)
			return -1;
		pf->litlen = nn;
		pf->litcap = nc;
	}
	if ((copy = malloc(n + 1)) == NULL)
		return -1;
	memcpy(copy, s, n);
	copy[n] = '\0';
	pf->lit[pf->nlit] = copy;
	pf->litlen[pf->nlit] = (uint32_t)n;
	pf->idx[k] = (uint32_t)pf->nlit + 1;
	return (int)pf->nlit++;
}

static int
pool_push(struct ua_pf *pf, uint32_t v)
{
	if (pf->npool == pf->poolcap) {
		size_t nc = pf->poolcap ? pf->poolcap * 2 : 4096;
		uint32_t *np = realloc(pf->pool, nc * sizeof(*np));

		if (np == NULL)
			return -1;
		pf->pool = np;
		pf->poolcap = nc;
	}
	pf->pool[pf->npool++] = v;
	return 0;
}

/* Drops members that contain another member (they add nothing to "one of"). */
static void
sset_minimise(struct sset *s)
{
	int w = 0;

	for (int i = 0; i < s->n; i++) {
		int redundant = 0;

		for (int j = 0; j < s->n && !redundant; j++) {
			if (i == j || s->v[j].n > s->v[i].n)
				continue;
			if (s->v[j].n == s->v[i].n && j > i)
				continue; /* equal strings: keep the first */
			if (memmem(s->v[i].s, s->v[i].n, s->v[j].s, s->v[j].n) != NULL)
				redundant = 1;
		}
		if (!redundant)
			s->v[w++] = s->v[i];
	}
	s->n = w;
}

uint32_t
ua_pf_analyse(struct ua_pf *pf, const char *pat, size_t len, int *err)
{
	struct arena a = { NULL, 0 };
	struct rp r;
	struct info top;
	const struct sset *rs;
	struct sset keep[KEEP_MAX];
	int nkeep = 0, n;
	uint32_t handle = UA_PF_NONE;

	*err = 0;
	r.p = (const unsigned char *)pat;
	r.end = r.p + len;
	r.a = &a;
	r.fail = 0;
	r.depth = 0;
	top = parse_alt(&r);
	if (r.p != r.end)
		r.fail = 1; /* unbalanced ')' */
	if (a.oom) {
		*err = -1;
		goto out;
	}
	if (r.fail)
		goto out;
	n = reqs_of(&top, &rs);
	/* keep the KEEP_MAX most selective sets, each of literals >= 2 bytes */
	for (int pass = 0; pass < KEEP_MAX; pass++) {
		int bi = -1, bs = 1;

		for (int i = 0; i < n; i++) {
			int sc = sset_score(&rs[i]), dup = 0;

			for (int k = 0; k < nkeep; k++)
				if (keep[k].v == rs[i].v)
					dup = 1;
			if (dup)
				continue;
			if (sc > bs || (sc == bs && bi >= 0 && sc > 1 && rs[i].n < rs[bi].n)) {
				bs = sc;
				bi = i;
			}
		}
		if (bi < 0 || bs < 2)
			break;
		/* a set of common literals filters little and costs index work:
		 * only worth it when nothing better exists */
		if (nkeep > 0 && bs < 3 && sset_score(&keep[0]) >= 3)
			break;
		keep[nkeep++] = rs[bi];
	}
	if (nkeep == 0)
		goto out;
	handle = (uint32_t)pf->npool;
	if (pool_push(pf, (uint32_t)nkeep) < 0)
		goto oom;
	for (int k = 0; k < nkeep; k++) {
		struct sset s = keep[k];
		struct lit *copy = aalloc(&a, sizeof(*copy) * (size_t)s.n);

		if (copy == NULL)
			goto oom;
		memcpy(copy, s.v, sizeof(*copy) * (size_t)s.n);
		s.v = copy;
		sset_minimise(&s);
		if (pool_push(pf, (uint32_t)s.n) < 0)
			goto oom;
		for (int i = 0; i < s.n; i++) {
			int id = intern(pf, s.v[i].s, s.v[i].n);

			if (id < 0 || pool_push(pf, (uint32_t)id) < 0)
				goto oom;
		}
	}
	goto out;
oom:
	*err = -1;
	handle = UA_PF_NONE;
out:
	arena_free(&a);
	return handle;
}

int
ua_pf_token(struct ua_pf *pf, const char *lit)
{
	unsigned char buf[256];
	size_t n = strlen(lit);

	if (n == 0 || n > sizeof(buf))
		return -1;
	for (size_t i = 0; i < n; i++)
		buf[i] = lc((unsigned char)lit[i]);
	return intern(pf, buf, n);
}

size_t
ua_pf_literals(const struct ua_pf *pf)
{
	return pf->nlit;
}

const char *
ua_pf_literal(const struct ua_pf *pf, size_t id)
{
	return id < pf->nlit ? pf->lit[id] : NULL;
}

size_t
ua_pf_words(const struct ua_pf *pf)
{
	return (pf->nlit + 63) / 64;
}

/* Renumbers the states in breadth-first order (queue holds every state but
 * the root), so the shallow states a scan spends most time in share a few
 * cache lines. */
static int
renumber(struct ua_pf *pf, const uint32_t *queue, size_t qt)
{
	uint32_t n = pf->nstates, *to = malloc(n * sizeof(*to));
	uint32_t *nd = malloc((size_t)n * pf->ncls * sizeof(*nd));
	uint32_t *no = malloc(n * sizeof(*no)), *ndict = malloc(n * sizeof(*ndict));
	uint32_t *nfirst = malloc(n * sizeof(*nfirst));

	if (to == NULL || nd == NULL || no == NULL || ndict == NULL || nfirst == NULL) {
		free(to);
		free(nd);
		free(no);
		free(ndict);
		free(nfirst);
		return -1;
	}
	to[0] = 0;
	for (size_t q = 0; q < qt; q++)
		to[queue[q]] = (uint32_t)q + 1;
	for (uint32_t s = 0; s < n; s++) {
		for (uint32_t c = 0; c < pf->ncls; c++)
			nd[(size_t)to[s] * pf->ncls + c] = to[pf->delta[(size_t)s * pf->ncls + c]];
		no[to[s]] = pf->outid[s];
		ndict[to[s]] = to[pf->dict[s]];
		nfirst[to[s]] = to[pf->firstout[s]];
	}
	free(pf->delta);
	free(pf->outid);
	free(pf->dict);
	free(pf->firstout);
	free(to);
	pf->delta = nd;
	pf->outid = no;
	pf->dict = ndict;
	pf->firstout = nfirst;
	return 0;
}

int
ua_pf_build(struct ua_pf *pf, char *errstr, size_t errstr_size)
{
	size_t maxstates = 1, qh = 0, qt = 0;
	uint32_t *queue = NULL, *fail = NULL;
	uint32_t *nown = NULL; /* per state: literal id + 1 ending here, 0 none */

	for (size_t i = 0; i < pf->nlit; i++)
		maxstates += pf->litlen[i];
	/* alphabet: every byte used by a literal gets a class, the rest 0 */
	memset(pf->cls, 0, sizeof(pf->cls));
	pf->ncls = 1;
	for (size_t i = 0; i < pf->nlit; i++)
		for (size_t k = 0; k < pf->litlen[i]; k++) {
			unsigned char c = (unsigned char)pf->lit[i][k];

			if (pf->cls[c] == 0)
				pf->cls[c] = (unsigned char)pf->ncls++;
		}
	if (pf->ncls > 255) {
		snprintf(errstr, errstr_size, "pre-filter: alphabet too large");
		return -1;
	}
	pf->delta = calloc(maxstates * pf->ncls, sizeof(*pf->delta));
	pf->outid = malloc(maxstates * sizeof(*pf->outid));
	pf->dict = calloc(maxstates, sizeof(*pf->dict));
	pf->firstout = calloc(maxstates, sizeof(*pf->firstout));
	fail = calloc(maxstates, sizeof(*fail));
	queue = malloc(maxstates * sizeof(*queue));
	nown = calloc(maxstates, sizeof(*nown));
	if (pf->delta == NULL || pf->outid == NULL || pf->dict == NULL ||
	    pf->firstout == NULL || fail == NULL || queue == NULL || nown == NULL)
		goto oom;
	/* trie; 0 in delta means "no edge" until completed (root is state 0,
	 * and no edge leads back to the root in the trie) */
	pf->nstates = 1;
	for (size_t i = 0; i < pf->nlit; i++) {
		uint32_t s = 0;

		for (size_t k = 0; k < pf->litlen[i]; k++) {
			uint32_t c = pf->cls[(unsigned char)pf->lit[i][k]];
			uint32_t *e = &pf->delta[(size_t)s * pf->ncls + c];

			if (*e == 0)
				*e = pf->nstates++;
			s = *e;
		}
		/* each literal is distinct, so a state ends at most one */
		nown[s] = (uint32_t)i + 1;
	}
	/* breadth-first: failure links, completed transitions, dictionary links */
	for (uint32_t c = 0; c < pf->ncls; c++) {
		uint32_t t = pf->delta[c];

		if (t != 0) {
			fail[t] = 0;
			queue[qt++] = t;
		}
	}
	while (qh < qt) {
		uint32_t s = queue[qh++];

		for (uint32_t c = 0; c < pf->ncls; c++) {
			uint32_t *e = &pf->delta[(size_t)s * pf->ncls + c];
			uint32_t f = pf->delta[(size_t)fail[s] * pf->ncls + c];

			if (*e != 0) {
				fail[*e] = f;
				queue[qt++] = *e;
			} else {
				*e = f;
			}
		}
	}
	/* outputs: one id per state; dict = nearest proper suffix state with one */
	for (uint32_t s = 0; s < pf->nstates; s++)
		pf->outid[s] = nown[s] ? nown[s] - 1 : UINT32_MAX;
	/* BFS order guarantees fail[s] is finished before s */
	pf->dict[0] = 0;
	for (size_t q = 0; q < qt; q++) {
		uint32_t s = queue[q], f = fail[s];

		pf->dict[s] = (f != 0 && nown[f]) ? f : pf->dict[f];
		pf->firstout[s] = nown[s] ? s : pf->dict[s];
	}
	if (renumber(pf, queue, qt) < 0)
		goto oom;
	free(fail);
	free(queue);
	free(nown);
	pf->built = 1;
	return 0;
oom:
	free(fail);
	free(queue);
	free(nown);
	snprintf(errstr, errstr_size, "pre-filter: %s", strerror(ENOMEM));
	return -1;
}

void
ua_pf_scan(const struct ua_pf *pf, const unsigned char *lower, size_t n, uint64_t *bits)
{
	const uint32_t *delta = pf->delta;
	const unsigned char *cls = pf->cls;
	uint32_t ncls = pf->ncls, s = 0;

	memset(bits, 0, ua_pf_words(pf) * sizeof(*bits));
	for (size_t i = 0; i < n; i++) {
		s = delta[(size_t)s * ncls + cls[lower[i]]];
		for (uint32_t t = pf->firstout[s]; t != 0; t = pf->dict[t]) {
			uint32_t id = pf->outid[t];

			bits[id >> 6] |= (uint64_t)1 << (id & 63);
		}
	}
}

int
ua_pf_pass(const struct ua_pf *pf, uint32_t req, const uint64_t *bits)
{
	const uint32_t *p;
	uint32_t nsets;

	if (req == UA_PF_NONE)
		return 1;
	p = pf->pool + req;
	nsets = *p++;
	for (uint32_t k = 0; k < nsets; k++) {
		uint32_t n = *p++;
		int ok = 0;

		for (uint32_t i = 0; i < n; i++)
			if ((bits[p[i] >> 6] >> (p[i] & 63)) & 1) {
				ok = 1;
				break;
			}
		if (!ok)
			return 0;
		p += n;
	}
	return 1;
}

void
ua_pf_describe(const struct ua_pf *pf, uint32_t req, char *buf, size_t size)
{
	const uint32_t *p;
	uint32_t nsets;
	size_t o = 0;

	if (size == 0)
		return;
	buf[0] = '\0';
	if (req == UA_PF_NONE) {
		snprintf(buf, size, "(none)");
		return;
	}
	p = pf->pool + req;
	nsets = *p++;
	for (uint32_t k = 0; k < nsets && o < size; k++) {
		uint32_t n = *p++;

		o += (size_t)snprintf(buf + o, size - o, "%s(", k ? " & " : "");
		for (uint32_t i = 0; i < n && o < size; i++)
			o += (size_t)snprintf(buf + o, size - o, "%s%s", i ? "|" : "", pf->lit[p[i]]);
		if (o < size)
			o += (size_t)snprintf(buf + o, size - o, ")");
		p += n;
	}
}

int
ua_pf_index(struct ua_pf *pf, const uint32_t *req, size_t nrx, char *errstr, size_t errstr_size)
{
	uint32_t nsets = 0, npost = 0;
	size_t words = (nrx + 63) / 64;

	if (nrx > UA_PF_MAX_REGEXES) {
		snprintf(errstr, errstr_size, "pre-filter: %zu regexes, at most %d", nrx,
		    UA_PF_MAX_REGEXES);
		return -1;
	}
	/* sizes */
	for (size_t r = 0; r < nrx; r++) {
		const uint32_t *p;
		uint32_t ns;

		if (req[r] == UA_PF_NONE)
			continue;
		p = pf->pool + req[r];
		ns = *p++;
		for (uint32_t k = 0; k < ns; k++) {
			npost += *p;
			p += 1 + *p;
		}
		nsets += ns;
	}
	pf->post_start = calloc(pf->nlit + 1, sizeof(*pf->post_start));
	pf->post = malloc((npost ? npost : 1) * sizeof(*pf->post));
	pf->set_rx = malloc((nsets ? nsets : 1) * sizeof(*pf->set_rx));
	pf->need = calloc(nrx ? nrx : 1, 1);
	pf->always = calloc(words ? words : 1, sizeof(*pf->always));
	if (pf->post_start == NULL || pf->post == NULL || pf->set_rx == NULL ||
	    pf->need == NULL || pf->always == NULL) {
		snprintf(errstr, errstr_size, "pre-filter: %s", strerror(ENOMEM));
		return -1;
	}
	/* count postings per literal, then prefix sums, then fill */
	for (int pass = 0; pass < 2; pass++) {
		uint32_t set = 0;

		for (size_t r = 0; r < nrx; r++) {
			const uint32_t *p;
			uint32_t ns;

			if (req[r] == UA_PF_NONE) {
				pf->always[r >> 6] |= (uint64_t)1 << (r & 63);
				continue;
			}
			p = pf->pool + req[r];
			ns = *p++;
			pf->need[r] = (uint8_t)ns;
			for (uint32_t k = 0; k < ns; k++, set++) {
				uint32_t n = *p++;

				pf->set_rx[set] = (uint32_t)r;
				for (uint32_t i = 0; i < n; i++) {
					if (pass == 0)
						pf->post_start[p[i] + 1]++;
					else
						pf->post[pf->post_start[p[i]]++] = set;
				}
				p += n;
			}
		}
		if (pass == 0) {
			for (size_t l = 0; l < pf->nlit; l++)
				pf->post_start[l + 1] += pf->post_start[l];
		} else {
			/* the fill advanced each start to the next one's: shift back */
			for (size_t l = pf->nlit; l > 0; l--)
				pf->post_start[l] = pf->post_start[l - 1];
			pf->post_start[0] = 0;
		}
	}
	pf->nrx = (uint32_t)nrx;
	pf->nsets = nsets;
	return 0;
}

void
ua_pf_match(const struct ua_pf *pf, const unsigned char *lower, size_t n, uint64_t *bits,
            uint64_t *rxbits)
{
	const uint32_t *delta = pf->delta;
	const unsigned char *cls = pf->cls;
	uint32_t ncls = pf->ncls, s = 0;
	uint8_t cnt[UA_PF_MAX_REGEXES];
	uint64_t sat[UA_PF_MAX_REGEXES * 4 / 64];

	memset(bits, 0, ua_pf_words(pf) * sizeof(*bits));
	memcpy(rxbits, pf->always, ((pf->nrx + 63) / 64) * sizeof(*rxbits));
	memset(cnt, 0, pf->nrx);
	memset(sat, 0, ((pf->nsets + 63) / 64) * sizeof(*sat));
	for (size_t i = 0; i < n; i++) {
		s = delta[(size_t)s * ncls + cls[lower[i]]];
		for (uint32_t t = pf->firstout[s]; t != 0; t = pf->dict[t]) {
			uint32_t id = pf->outid[t];
			uint64_t m = (uint64_t)1 << (id & 63);

			if (bits[id >> 6] & m)
				break; /* seen before: so were the rest of its chain */
			bits[id >> 6] |= m;
			for (uint32_t k = pf->post_start[id]; k < pf->post_start[id + 1]; k++) {
				uint32_t set = pf->post[k], rx;
				uint64_t sm = (uint64_t)1 << (set & 63);

				if (sat[set >> 6] & sm)
					continue;
				sat[set >> 6] |= sm;
				rx = pf->set_rx[set];
				if (++cnt[rx] == pf->need[rx])
					rxbits[rx >> 6] |= (uint64_t)1 << (rx & 63);
			}
		}
	}
}

void
ua_pf_info(const struct ua_pf *pf, FILE *f)
{
	fprintf(f, "pre-filter: %zu literals, %u states x %u classes (%zu KiB), %u sets, "
	    "%u postings\n", pf->nlit, pf->nstates, pf->ncls,
	    (size_t)pf->nstates * pf->ncls * sizeof(*pf->delta) / 1024, pf->nsets,
	    pf->post_start ? pf->post_start[pf->nlit] : 0);
}
