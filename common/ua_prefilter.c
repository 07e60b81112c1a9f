/* ua_prefilter.c - literal pre-filter for the uap-core regexes: interns the
 * literals ua_analyse.c requires of each pattern, finds all literals of a
 * string in one Aho-Corasick pass and turns them into the set of regexes that
 * can match, so most regexes are never run. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ua_int.h"

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

uint32_t
ua_pf_analyse(struct ua_pf *pf, const char *pat, size_t len, int *err)
{
	struct ua_an_result res;
	uint32_t handle = UA_PF_NONE;

	*err = 0;
	if (ua_analyse(pat, len, &res) < 0)
		goto oom;
	if (res.nsets == 0)
		goto out;
	handle = (uint32_t)pf->npool;
	if (pool_push(pf, (uint32_t)res.nsets) < 0)
		goto oom;
	for (int k = 0; k < res.nsets; k++) {
		if (pool_push(pf, (uint32_t)res.nlit[k]) < 0)
			goto oom;
		for (int i = 0; i < res.nlit[k]; i++) {
			int id = intern(pf, res.lit[k][i], res.len[k][i]);

			if (id < 0 || pool_push(pf, (uint32_t)id) < 0)
				goto oom;
		}
	}
	goto out;
oom:
	*err = -1;
	handle = UA_PF_NONE;
out:
	ua_analyse_free(&res);
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
		buf[i] = (unsigned char)(lit[i] >= 'A' && lit[i] <= 'Z' ? lit[i] + 32 : lit[i]);
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
