/* ua.c - user-agent parser: loads uap-core's regexes.yaml with libyaml,
 * compiles it with PCRE2 (JIT), and applies it as uap-core specifies, behind
 * the literal pre-filter (ua_prefilter.c) and the result cache (ua_cache.c). */
#define PCRE2_CODE_UNIT_WIDTH 8

#include <errno.h>
#include <pcre2.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "errstr.h"
#include "ua_int.h"

enum { L_UA = 0, L_OS, L_DEV, L_COUNT };
#define NSLOT 5 /* output fields per list */
#define NGROUP 10 /* ovector pairs: whole match and $1..$9 */

static const char *const list_name[L_COUNT] = {
	"user_agent_parsers", "os_parsers", "device_parsers",
};

/* YAML keys of the replacement for each output slot. */
static const char *const repl_key[L_COUNT][NSLOT] = {
	{ "family_replacement", "v1_replacement", "v2_replacement", "v3_replacement",
	  "v4_replacement" },
	{ "os_replacement", "os_v1_replacement", "os_v2_replacement", "os_v3_replacement",
	  "os_v4_replacement" },
	{ "device_replacement", "brand_replacement", "model_replacement", NULL, NULL },
};

/* Capture group a slot falls back to without a replacement (0: none). */
static const int default_group[L_COUNT][NSLOT] = {
	{ 1, 2, 3, 4, 5 },
	{ 1, 2, 3, 4, 5 },
	{ 1, 0, 1, 0, 0 },
};

struct ua_rx {
	pcre2_code *code;      /* owned */
	int jit;               /* JIT-compiled */
	uint32_t req;          /* pre-filter requirement */
	char *repl[NSLOT];     /* owned, or NULL */
	int line;              /* in regexes.yaml, 1-based */
};

struct ua_list {
	struct ua_rx *v;       /* owned */
	size_t n, cap;
	size_t base;           /* index of v[0] among all regexes (pre-filter bits) */
};

struct ua_parser {
	struct ua_list list[L_COUNT];
	struct ua_pf *pf;      /* owned */
	struct ua_typer typer;
	struct ua_cache *cache; /* owned, NULL when disabled */
	size_t nprefiltered;
	pcre2_match_context *mctx; /* owned: the match limits */
	_Atomic uint64_t limited;  /* ua_parse calls where a regex hit a limit */
};

/* Bounds of one regex's match on one string: far above what the shipped
 * regexes need for a real user agent (a few thousand steps), far below
 * PCRE2's defaults (10,000,000 steps, 20 GB of heap), which let one
 * crafted string cost seconds of CPU per regex. */
#define UA_MATCH_LIMIT 1000000
#define UA_DEPTH_LIMIT 100000
#define UA_HEAP_LIMIT_KB 65536
#define LIM_HIT 1   /* a regex hit a limit */
#define LIM_NOMEM 2 /* out of memory: the result is not the spec's */

/* ---- loading --------------------------------------------------------------- */

static const char *
scalar(yaml_document_t *doc, yaml_node_t *n)
{
	if (n == NULL || n->type != YAML_SCALAR_NODE)
		return NULL;
	(void)doc;
	return (const char *)n->data.scalar.value;
}

static void
rx_free(struct ua_rx *rx)
{
	pcre2_code_free(rx->code);
	for (int i = 0; i < NSLOT; i++)
		free(rx->repl[i]);
}

static int
add_regex(struct ua_parser *p, int li, const char *path, yaml_document_t *doc,
          yaml_node_t *item, char *errstr, size_t errstr_size)
{
	struct ua_list *l = &p->list[li];
	struct ua_rx rx;
	const char *pat = NULL, *flag = NULL;
	int line = (int)item->start_mark.line + 1, errcode, perr;
	PCRE2_SIZE erroff;
	uint32_t opts = 0;

	memset(&rx, 0, sizeof(rx));
	rx.line = line;
	if (item->type != YAML_MAPPING_NODE) {
		snprintf(errstr, errstr_size, "%s:%d: %s entry is not a mapping", path, line,
		    list_name[li]);
		return -1;
	}
	for (yaml_node_pair_t *pr = item->data.mapping.pairs.start;
	    pr < item->data.mapping.pairs.top; pr++) {
		const char *k = scalar(doc, yaml_document_get_node(doc, pr->key));
		yaml_node_t *vn = yaml_document_get_node(doc, pr->value);
		const char *v = scalar(doc, vn);
		int known = 0;

		if (k == NULL || v == NULL) {
			snprintf(errstr, errstr_size, "%s:%d: expected \"key: text\" pairs", path,
			    vn ? (int)vn->start_mark.line + 1 : line);
			goto fail;
		}
		if (strcmp(k, "regex") == 0) {
			pat = v;
			known = 1;
		} else if (strcmp(k, "regex_flag") == 0) {
			flag = v;
			known = 1;
		}
		for (int s = 0; s < NSLOT && !known; s++) {
			if (repl_key[li][s] == NULL || strcmp(k, repl_key[li][s]) != 0)
				continue;
			known = 1;
			/* an empty replacement counts as none, as in the reference parsers */
			if (*v != '\0' && rx.repl[s] == NULL && (rx.repl[s] = strdup(v)) == NULL) {
				snprintf(errstr, errstr_size, "%s: %s", path, strerror(ENOMEM));
				goto fail;
			}
		}
		/* unknown keys are ignored: newer files may add some */
	}
	if (pat == NULL) {
		snprintf(errstr, errstr_size, "%s:%d: %s entry without regex", path, line,
		    list_name[li]);
		goto fail;
	}
	if (flag != NULL) {
		if (strcmp(flag, "i") != 0) {
			snprintf(errstr, errstr_size, "%s:%d: unknown regex_flag '%s'", path, line,
			    flag);
			goto fail;
		}
		opts |= PCRE2_CASELESS;
	}
	rx.code = pcre2_compile((PCRE2_SPTR)pat, PCRE2_ZERO_TERMINATED, opts, &errcode, &erroff,
	    NULL);
	if (rx.code == NULL) {
		PCRE2_UCHAR msg[256];

		pcre2_get_error_message(errcode, msg, sizeof(msg));
		snprintf(errstr, errstr_size, "%s:%d: regex error at offset %zu: %s", path, line,
		    (size_t)erroff, (char *)msg);
		goto fail;
	}
	rx.jit = pcre2_jit_compile(rx.code, PCRE2_JIT_COMPLETE) == 0;
	rx.req = ua_pf_analyse(p->pf, pat, strlen(pat), &perr);
	if (perr < 0) {
		snprintf(errstr, errstr_size, "%s: %s", path, strerror(ENOMEM));
		goto fail;
	}
	if (rx.req != UA_PF_NONE)
		p->nprefiltered++;
	if (l->n == l->cap) {
		size_t nc = l->cap ? l->cap * 2 : 256;
		struct ua_rx *nv = realloc(l->v, nc * sizeof(*nv));

		if (nv == NULL) {
			snprintf(errstr, errstr_size, "%s: %s", path, strerror(ENOMEM));
			goto fail;
		}
		l->v = nv;
		l->cap = nc;
	}
	l->v[l->n++] = rx;
	return 0;
fail:
	rx_free(&rx);
	return -1;
}

static int
load(struct ua_parser *p, const char *path, char *errstr, size_t errstr_size)
{
	FILE *f;
	yaml_parser_t yp;
	yaml_document_t doc;
	yaml_node_t *root;
	int rc = -1, seen = 0;

	if ((f = fopen(path, "rb")) == NULL) {
		snprintf(errstr, errstr_size, "%s: %s", path, strerror(errno));
		return -1;
	}
	if (!yaml_parser_initialize(&yp)) {
		fclose(f);
		snprintf(errstr, errstr_size, "%s: cannot initialise libyaml", path);
		return -1;
	}
	yaml_parser_set_input_file(&yp, f);
	if (!yaml_parser_load(&yp, &doc)) {
		snprintf(errstr, errstr_size, "%s:%zu: %s", path, yp.problem_mark.line + 1,
		    yp.problem ? yp.problem : "YAML error");
		yaml_parser_delete(&yp);
		fclose(f);
		return -1;
	}
	root = yaml_document_get_root_node(&doc);
	if (root == NULL || root->type != YAML_MAPPING_NODE) {
		snprintf(errstr, errstr_size, "%s: expected a mapping at the top", path);
		goto out;
	}
	for (yaml_node_pair_t *pr = root->data.mapping.pairs.start;
	    pr < root->data.mapping.pairs.top; pr++) {
		const char *k = scalar(&doc, yaml_document_get_node(&doc, pr->key));
		yaml_node_t *seq = yaml_document_get_node(&doc, pr->value);
		int li;

		if (k == NULL)
			continue;
		for (li = 0; li < L_COUNT; li++)
			if (strcmp(k, list_name[li]) == 0)
				break;
		if (li == L_COUNT)
			continue;
		if (seq == NULL || seq->type != YAML_SEQUENCE_NODE) {
			snprintf(errstr, errstr_size, "%s:%zu: %s is not a list", path,
			    seq ? seq->start_mark.line + 1 : 0, k);
			goto out;
		}
		seen++;
		for (yaml_node_item_t *it = seq->data.sequence.items.start;
		    it < seq->data.sequence.items.top; it++)
			if (add_regex(p, li, path, &doc, yaml_document_get_node(&doc, *it), errstr,
			    errstr_size) < 0)
				goto out;
	}
	if (seen == 0) {
		snprintf(errstr, errstr_size, "%s: no user_agent_parsers, os_parsers or "
		    "device_parsers", path);
		goto out;
	}
	rc = 0;
out:
	yaml_document_delete(&doc);
	yaml_parser_delete(&yp);
	fclose(f);
	return rc;
}

/* Numbers the regexes of the three lists in order and indexes their
 * requirements for ua_pf_match. */
static int
index_regexes(struct ua_parser *p, char *errstr, size_t errstr_size)
{
	size_t total = 0, k = 0;
	uint32_t *req;
	int rc;

	for (int li = 0; li < L_COUNT; li++) {
		p->list[li].base = total;
		total += p->list[li].n;
	}
	if ((req = malloc((total ? total : 1) * sizeof(*req))) == NULL) {
		snprintf(errstr, errstr_size, "ua: %s", strerror(ENOMEM));
		return -1;
	}
	for (int li = 0; li < L_COUNT; li++)
		for (size_t i = 0; i < p->list[li].n; i++)
			req[k++] = p->list[li].v[i].req;
	rc = ua_pf_index(p->pf, req, total, errstr, errstr_size);
	free(req);
	return rc;
}

struct ua_parser *
ua_parser_new(const char *regexes_path, size_t cache_entries, char *errstr, size_t errstr_size)
{
	struct ua_parser *p;

	if (regexes_path == NULL)
		regexes_path = UA_DEFAULT_REGEXES;
	if ((p = calloc(1, sizeof(*p))) == NULL || (p->pf = ua_pf_new()) == NULL ||
	    (p->mctx = pcre2_match_context_create(NULL)) == NULL) {
		snprintf(errstr, errstr_size, "ua: %s", strerror(ENOMEM));
		if (p != NULL)
			ua_pf_free(p->pf);
		free(p);
		return NULL;
	}
	pcre2_set_match_limit(p->mctx, UA_MATCH_LIMIT);
	pcre2_set_depth_limit(p->mctx, UA_DEPTH_LIMIT);
	pcre2_set_heap_limit(p->mctx, UA_HEAP_LIMIT_KB);
	if (load(p, regexes_path, errstr, errstr_size) < 0)
		goto fail;
	if (ua_type_init(&p->typer, p->pf) < 0) {
		snprintf(errstr, errstr_size, "ua: %s", strerror(ENOMEM));
		goto fail;
	}
	if (ua_pf_build(p->pf, errstr, errstr_size) < 0 || index_regexes(p, errstr, errstr_size) < 0)
		goto fail;
	if (cache_entries > 0 && (p->cache = ua_cache_new(cache_entries)) == NULL) {
		snprintf(errstr, errstr_size, "ua: cache of %zu entries: %s", cache_entries,
		    strerror(ENOMEM));
		goto fail;
	}
	return p;
fail:
	ua_parser_free(p);
	return NULL;
}

void
ua_parser_free(struct ua_parser *p)
{
	if (p == NULL)
		return;
	for (int li = 0; li < L_COUNT; li++) {
		for (size_t i = 0; i < p->list[li].n; i++)
			rx_free(&p->list[li].v[i]);
		free(p->list[li].v);
	}
	ua_pf_free(p->pf);
	ua_cache_free(p->cache);
	pcre2_match_context_free(p->mctx);
	free(p);
}

/* ---- matching ---------------------------------------------------------------- */

/* Output buffer that drops leading white space and stops at its size. */
struct out {
	char *d;
	size_t size, n;
	int cut;
};

static void
out_put(struct out *o, const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if (o->n == 0 && ua_is_space((unsigned char)s[i]))
			continue;
		if (o->n + 1 >= o->size) {
			o->cut = 1;
			return;
		}
		o->d[o->n++] = s[i];
	}
}

/* n, less a UTF-8 character that s[0..n) ends inside of. */
static size_t
whole_chars(const char *s, size_t n)
{
	size_t i, need;
	unsigned char lead;

	if (n == 0)
		return 0;
	i = n - 1;
	while (i > 0 && n - i < 4 && ((unsigned char)s[i] & 0xc0) == 0x80)
		i--;
	lead = (unsigned char)s[i];
	need = lead < 0x80 ? 1 : lead >= 0xf0 ? 4 : lead >= 0xe0 ? 3 : lead >= 0xc0 ? 2 : 1;
	return i + need > n ? i : n;
}

/* Ends the field: trailing white space off, a cut character off, NUL. */
static void
out_end(struct out *o)
{
	if (o->cut)
		o->n = whole_chars(o->d, o->n);
	while (o->n > 0 && ua_is_space((unsigned char)o->d[o->n - 1]))
		o->n--;
	o->d[o->n] = '\0';
}

/* Group g of the match, whole characters only: PCRE2 runs on bytes (no UTF
 * mode), so a group can begin or end inside a character ("[^;]{0,30}"
 * counts bytes; the input is cut at UA_MAX_INPUT), and PostgreSQL refuses a
 * text that is not UTF-8, which would stop the batch for good. */
static void
put_group(struct out *o, const char *s, const PCRE2_SIZE *ov, uint32_t ngroups, int g)
{
	size_t a, b;

	if ((uint32_t)g >= ngroups || ov[2 * g] == PCRE2_UNSET)
		return;
	a = ov[2 * g];
	b = ov[2 * g + 1];
	while (a < b && ((unsigned char)s[a] & 0xc0) == 0x80)
		a++;
	out_put(o, s + a, whole_chars(s + a, b - a));
}

/* Fills one field from a match: the replacement with $1..$9 expanded, or
 * the default group. */
static void
fill(char *dst, size_t size, const char *repl, int defgroup, const char *s,
     const PCRE2_SIZE *ov, uint32_t ngroups)
{
	struct out o = { dst, size, 0, 0 };

	if (repl != NULL) {
		for (const char *q = repl; *q != '\0'; q++) {
			if (q[0] == '$' && q[1] >= '1' && q[1] <= '9') {
				put_group(&o, s, ov, ngroups, q[1] - '0');
				q++;
			} else {
				out_put(&o, q, 1);
			}
		}
	} else if (defgroup > 0) {
		put_group(&o, s, ov, ngroups, defgroup);
	}
	out_end(&o);
	/* whole groups of a subject that is not UTF-8 itself (ua_parse takes
	 * any bytes): its bad bytes become '?' */
	errstr_utf8_clean(dst);
}

/* Matches rx; a match, depth or heap limit counts as no match and sets
 * LIM_HIT in *limited (the same string hits it again: the result is as
 * good as any to cache), no memory LIM_NOMEM (the next try may fare better:
 * not cached). */
static int
run(const struct ua_parser *p, const struct ua_rx *rx, const char *s, size_t n,
    pcre2_match_data *md, int *limited)
{
	int rc = PCRE2_ERROR_JIT_STACKLIMIT;

	if (rx->jit)
		rc = pcre2_jit_match(rx->code, (PCRE2_SPTR)s, n, 0, 0, md, p->mctx);
	if (rc == PCRE2_ERROR_JIT_STACKLIMIT)
		rc = pcre2_match(rx->code, (PCRE2_SPTR)s, n, 0, PCRE2_NO_JIT, md, p->mctx);
	if (rc == PCRE2_ERROR_MATCHLIMIT || rc == PCRE2_ERROR_DEPTHLIMIT ||
	    rc == PCRE2_ERROR_HEAPLIMIT)
		*limited |= LIM_HIT;
	else if (rc == PCRE2_ERROR_NOMEMORY)
		*limited |= LIM_NOMEM;
	return rc;
}

/* Tries regex i of list li; 1 when it matched and gave a family (slots
 * filled), else 0. */
static int
try_rx(const struct ua_parser *p, int li, size_t i, const char *s, size_t n,
       pcre2_match_data *md, char **dst, const size_t *size, int nslot, int *limited)
{
	const struct ua_rx *rx = &p->list[li].v[i];
	const PCRE2_SIZE *ov;
	uint32_t ng;
	int rc = run(p, rx, s, n, md, limited);

	if (rc < 0)
		return 0; /* no match, or a match limit: try the next */
	ov = pcre2_get_ovector_pointer(md);
	ng = rc == 0 ? NGROUP : (uint32_t)rc;
	fill(dst[0], size[0], rx->repl[0], default_group[li][0], s, ov, ng);
	if (dst[0][0] == '\0')
		return 0; /* no family: not a match */
	for (int k = 1; k < nslot; k++)
		fill(dst[k], size[k], rx->repl[k], default_group[li][k], s, ov, ng);
	return 1;
}

/* Searches list li in order, trying only the regexes set in rxbits (NULL:
 * all); fills the slots (dst[i] of size[i]); 1 when a regex matched, 0 for
 * none. */
static int
search(const struct ua_parser *p, int li, const char *s, size_t n, const uint64_t *rxbits,
       pcre2_match_data *md, char **dst, const size_t *size, int nslot, int *limited)
{
	const struct ua_list *l = &p->list[li];
	size_t lo = l->base, hi = l->base + l->n;

	if (l->n == 0)
		return 0;
	if (rxbits == NULL) {
		for (size_t i = 0; i < l->n; i++)
			if (try_rx(p, li, i, s, n, md, dst, size, nslot, limited))
				return 1;
		return 0;
	}
	for (size_t w = lo >> 6; w <= (hi - 1) >> 6; w++) {
		uint64_t m = rxbits[w];

		if (w == lo >> 6)
			m &= ~(uint64_t)0 << (lo & 63);
		if (w == (hi - 1) >> 6 && (hi & 63) != 0)
			m &= ~(uint64_t)0 >> (64 - (hi & 63));
		while (m != 0) {
			size_t g = w * 64 + (size_t)__builtin_ctzll(m);

			m &= m - 1;
			if (try_rx(p, li, g - l->base, s, n, md, dst, size, nslot, limited))
				return 1;
		}
	}
	return 0;
}

static void
other(char **dst, int nslot)
{
	strcpy(dst[0], "Other");
	for (int k = 1; k < nslot; k++)
		dst[k][0] = '\0';
}

/* Copies at most UA_MAX_INPUT bytes of ua into lower, ASCII-lowercased;
 * returns the length used. */
static size_t
lowercase(const char *ua, size_t len, unsigned char *lower)
{
	lower[0] = '\0'; /* lower is never read past len; this quiets -Wmaybe-uninitialized */
	if (ua == NULL)
		return 0;
	if (len > UA_MAX_INPUT)
		len = UA_MAX_INPUT;
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)ua[i];

		lower[i] = (c >= 'A' && c <= 'Z') ? (unsigned char)(c + 32) : c;
	}
	return len;
}

/* The whole parse; no_prefilter runs every regex (for checks). Returns 0,
 * LIM_* bits, or -1 out of memory. */
static int
parse_full(const struct ua_parser *p, const char *ua, size_t len, struct ua_result *r,
           int no_prefilter)
{
	unsigned char lower[UA_MAX_INPUT];
	uint64_t bits[UA_PF_WORDS], rxbits[UA_PF_MAX_REGEXES / 64];
	const uint64_t *cand = no_prefilter ? NULL : rxbits;
	pcre2_match_data *md;
	char *d[NSLOT];
	size_t sz[NSLOT];
	int limited = 0;

	len = lowercase(ua, len, lower);
	ua_pf_match(p->pf, lower, len, bits, rxbits);
	md = pcre2_match_data_create(NGROUP, NULL);
	if (md == NULL)
		return -1;
	if (ua == NULL)
		ua = "";

	d[0] = r->browser.family;      sz[0] = sizeof(r->browser.family);
	d[1] = r->browser.major;       sz[1] = sizeof(r->browser.major);
	d[2] = r->browser.minor;       sz[2] = sizeof(r->browser.minor);
	d[3] = r->browser.patch;       sz[3] = sizeof(r->browser.patch);
	d[4] = r->browser.patch_minor; sz[4] = sizeof(r->browser.patch_minor);
	if (!search(p, L_UA, ua, len, cand, md, d, sz, NSLOT, &limited))
		other(d, NSLOT);

	d[0] = r->os.family;      sz[0] = sizeof(r->os.family);
	d[1] = r->os.major;       sz[1] = sizeof(r->os.major);
	d[2] = r->os.minor;       sz[2] = sizeof(r->os.minor);
	d[3] = r->os.patch;       sz[3] = sizeof(r->os.patch);
	d[4] = r->os.patch_minor; sz[4] = sizeof(r->os.patch_minor);
	if (!search(p, L_OS, ua, len, cand, md, d, sz, NSLOT, &limited))
		other(d, NSLOT);

	d[0] = r->device.family; sz[0] = sizeof(r->device.family);
	d[1] = r->device.brand;  sz[1] = sizeof(r->device.brand);
	d[2] = r->device.model;  sz[2] = sizeof(r->device.model);
	if (!search(p, L_DEV, ua, len, cand, md, d, sz, 3, &limited))
		other(d, 3);

	pcre2_match_data_free(md);
	ua_type_classify(&p->typer, bits, lower, len, r);
	return limited;
}

/* The parse without the cache: 0, LIM_* bits, or -1 when memory ran out
 * (out then says "Other"). */
static int
parse_uncached(const struct ua_parser *p, const char *ua, size_t len, struct ua_result *out)
{
	int rc = parse_full(p, ua, len, out, 0);

	if (rc < 0) {
		/* out of memory for match data: report "Other" rather than fail */
		memset(out, 0, sizeof(*out));
		strcpy(out->browser.family, "Other");
		strcpy(out->os.family, "Other");
		strcpy(out->device.family, "Other");
		out->type = UA_TYPE_OTHER;
		out->device_type = ua_device_type_name(UA_TYPE_OTHER);
	}
	return rc;
}

/* The parse of ua_parse and ua_parse_nocache: counts a limit hit; 1 when
 * the result may be cached (not for lack of memory: the next try may fare
 * better). */
static int
parse_counted(struct ua_parser *p, const char *ua, size_t len, struct ua_result *out)
{
	int rc = parse_uncached(p, ua, len, out);

	if (rc > 0 && (rc & LIM_HIT))
		atomic_fetch_add(&p->limited, 1);
	return rc >= 0 && !(rc & LIM_NOMEM);
}

int
ua_parse_nocache(struct ua_parser *p, const char *ua, size_t len, struct ua_result *out)
{
	if (p == NULL || out == NULL)
		return -1;
	parse_counted(p, ua, len, out);
	return 0;
}

int
ua_parse(struct ua_parser *p, const char *ua, size_t len, struct ua_result *out)
{
	uint64_t h;

	if (p == NULL || out == NULL)
		return -1;
	if (ua == NULL)
		len = 0;
	if (p->cache == NULL || len > UA_CACHE_MAX_KEY)
		return ua_parse_nocache(p, ua, len, out);
	h = ua_cache_hash(p->cache, ua ? ua : "", len);
	if (ua_cache_get(p->cache, h, ua ? ua : "", len, out))
		return 0;
	if (parse_counted(p, ua, len, out))
		ua_cache_put(p->cache, h, ua ? ua : "", len, out);
	return 0;
}

void
ua_parser_stats(struct ua_parser *p, struct ua_stats *st)
{
	memset(st, 0, sizeof(*st));
	if (p == NULL)
		return;
	if (p->cache != NULL)
		ua_cache_stats(p->cache, st);
	for (int li = 0; li < L_COUNT; li++)
		st->regexes += p->list[li].n;
	st->prefiltered = p->nprefiltered;
	st->limited = atomic_load(&p->limited);
}

/* ---- checks for tests and the fuzzer (declared in ua_int.h) ------------------ */

int
ua_parse_unfiltered(const struct ua_parser *p, const char *ua, size_t len, struct ua_result *out)
{
	if (p == NULL || out == NULL)
		return -1;
	return parse_full(p, ua, len, out, 1) < 0 ? -1 : 0;
}

int
ua_prefilter_check(const struct ua_parser *p, const char *ua, size_t len, char *msg,
                   size_t msg_size)
{
	unsigned char lower[UA_MAX_INPUT];
	uint64_t bits[UA_PF_WORDS], rxbits[UA_PF_MAX_REGEXES / 64];
	pcre2_match_data *md;
	int bad = 0, limited = 0;

	if (msg_size)
		msg[0] = '\0';
	len = lowercase(ua, len, lower);
	ua_pf_match(p->pf, lower, len, bits, rxbits);
	if ((md = pcre2_match_data_create(NGROUP, NULL)) == NULL)
		return -1;
	for (int li = 0; li < L_COUNT; li++)
		for (size_t i = 0; i < p->list[li].n; i++) {
			const struct ua_rx *rx = &p->list[li].v[i];
			size_t g = p->list[li].base + i;
			int cand = (rxbits[g >> 6] >> (g & 63)) & 1;
			const char *why = NULL;

			/* the index must agree with the requirement itself */
			if (cand != ua_pf_pass(p->pf, rx->req, bits))
				why = "candidate bit disagrees with";
			else if (!cand && run(p, rx, ua ? ua : "", len, md, &limited) >= 0)
				why = "matches but fails";
			if (why != NULL && bad++ == 0 && msg_size) {
				char req[512];

				ua_pf_describe(p->pf, rx->req, req, sizeof(req));
				snprintf(msg, msg_size, "%s regex at line %d %s its requirement %s",
				    list_name[li], rx->line, why, req);
			}
		}
	pcre2_match_data_free(md);
	return bad;
}

void
ua_parser_dump(const struct ua_parser *p, FILE *f)
{
	char buf[4096];

	ua_pf_info(p->pf, f);
	for (int li = 0; li < L_COUNT; li++)
		for (size_t i = 0; i < p->list[li].n; i++) {
			ua_pf_describe(p->pf, p->list[li].v[i].req, buf, sizeof(buf));
			fprintf(f, "%s:%d jit=%d %s\n", list_name[li], p->list[li].v[i].line,
			    p->list[li].v[i].jit, buf);
		}
}
