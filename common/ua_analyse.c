/* ua_analyse.c - reads a PCRE2 pattern and works out literals every match
 * must contain ("one of these" sets, ASCII-lowercased), for the pre-filter
 * in ua_prefilter.c. Anything it does not understand yields no requirement. */
#include <stdlib.h>
#include <string.h>

#include "ua_int.h"

/* Analysis limits: an "exact" set lists every string a sub-pattern can match
 * (kept while small); a requirement alternative set is capped too. */
#define EX_MAX   16   /* strings in an exact set */
#define EX_LEN   32   /* bytes in one exact string */
#define OR_MAX   512  /* literals in one "one of" set */
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

/* ---- the pattern walker ----------------------------------------------------
 * A recursive descent over the PCRE2 syntax uap-core uses. Each sub-pattern
 * yields an info (see struct info); the rules keep "if the regex matches,
 * the requirement holds" true, so skipping a regex whose requirement fails
 * never changes a result:
 *  - a literal byte is exact {c}; a class of at most 4 bytes (after ASCII
 *    lowercasing) is exact {c1..c4}; ., \d, \w, big or negated classes and
 *    back references are "anything" (no requirement);
 *  - ^ $ \b \B \A \z \Z \G and negative look-arounds consume nothing:
 *    exact {""}; a positive look-around requires what its body requires but
 *    consumes nothing, so it ends the current run of exact strings;
 *  - concatenation multiplies exact sets while small (EX_MAX strings of at
 *    most EX_LEN bytes); otherwise the run so far becomes a requirement;
 *  - alternation unites exact sets while small; otherwise it requires "one
 *    of" the union of each branch's best set (nothing if a branch requires
 *    nothing);
 *  - x? adds "" to x's exact set; x*, x{0,n} require nothing; x+, x{n,m}
 *    with n >= 1 require what x requires;
 *  - anything not understood (inline options, \Q, \p, POSIX classes,
 *    verbs, conditionals, ...) gives up: the regex then always runs.
 * Matching is done on ASCII-lowercased text against lowercased literals,
 * which can only admit more strings, never fewer, for case-sensitive and
 * caseless regexes alike (PCRE2 without UTF folds ASCII only). */

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

/* 1 when r->p is at "{" followed by only digits, commas and spaces up to a
 * "}": text that is a quantifier or, depending on the PCRE2 version
 * ({,n}, { 1 }), may be one. */
static int
brace_ambiguous(const struct rp *r)
{
	const unsigned char *q = r->p + 1;

	while (q < r->end && (is_digit(*q) || *q == ',' || *q == ' '))
		q++;
	return q < r->end && *q == '}';
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
			int k;

			for (k = 0; k < 2 && r->p < r->end && (d = hexval(*r->p)) >= 0; k++) {
				v = v * 16 + d;
				r->p++;
			}
			if (k == 0) { /* bare \x */
				r->fail = 1;
				return info_any();
			}
		}
		b = (unsigned char)v;
		break;
	}
	default:
		if (c >= '1' && c <= '9') {
			/* a back reference, or with more digits than groups an
			 * octal byte (\10 with fewer than ten): either matches
			 * something, and all its digits are the escape's */
			while (r->p < r->end && is_digit(*r->p))
				r->p++;
			return info_any();
		}
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
				int v = 0, d, k;

				for (k = 0; k < 2 && r->p < r->end && (d = hexval(*r->p)) >= 0; k++) {
					v = v * 16 + d;
					r->p++;
				}
				if (k == 0) { /* \x{...} or a bare \x: not handled */
					r->fail = 1;
					return info_any();
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
	case '{':
		r->p--;
		if (brace_ambiguous(r)) {
			r->fail = 1;
			return info_any();
		}
		r->p++;
		return info_exact1(r, &c, 1);
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
		} else if (c == '{' && brace_ambiguous(r)) {
			r->fail = 1;
			break;
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

int
ua_analyse(const char *pat, size_t len, struct ua_an_result *res)
{
	struct arena *a = calloc(1, sizeof(*a));
	struct rp r;
	struct info top;
	const struct sset *rs;
	int n;

	memset(res, 0, sizeof(*res));
	if (a == NULL)
		return -1;
	res->arena = a;
	r.p = (const unsigned char *)pat;
	r.end = r.p + len;
	r.a = a;
	r.fail = 0;
	r.depth = 0;
	top = parse_alt(&r);
	if (r.p != r.end)
		r.fail = 1; /* unbalanced ')' */
	if (a->oom)
		return -1;
	if (r.fail)
		return 0;
	n = reqs_of(&top, &rs);
	/* keep the UA_AN_KEEP most selective sets, each of literals >= 2 bytes */
	for (int pass = 0; pass < UA_AN_KEEP; pass++) {
		int bi = -1, bs = 1;

		for (int i = 0; i < n; i++) {
			int sc = sset_score(&rs[i]), dup = 0;

			for (int k = 0; k < res->nsets; k++)
				if (res->set_src[k] == (const void *)rs[i].v)
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
		if (res->nsets > 0 && bs < 3 && res->score0 >= 3)
			break;
		{
			struct sset c;
			int k = res->nsets;

			c.n = rs[bi].n;
			c.v = aalloc(a, sizeof(*c.v) * (size_t)c.n);
			res->lit[k] = aalloc(a, sizeof(*res->lit[k]) * (size_t)c.n);
			res->len[k] = aalloc(a, sizeof(*res->len[k]) * (size_t)c.n);
			if (c.v == NULL || res->lit[k] == NULL || res->len[k] == NULL)
				return -1;
			memcpy(c.v, rs[bi].v, sizeof(*c.v) * (size_t)c.n);
			sset_minimise(&c);
			for (int i = 0; i < c.n; i++) {
				res->lit[k][i] = c.v[i].s;
				res->len[k][i] = c.v[i].n;
			}
			res->nlit[k] = c.n;
			res->set_src[k] = rs[bi].v;
			if (k == 0)
				res->score0 = bs;
			res->nsets++;
		}
	}
	return 0;
}

void
ua_analyse_free(struct ua_an_result *res)
{
	if (res->arena != NULL) {
		arena_free(res->arena);
		free(res->arena);
	}
	memset(res, 0, sizeof(*res));
}
