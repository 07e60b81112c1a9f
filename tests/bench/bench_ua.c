/* bench_ua.c - user agents per second: uncached over every uap-core test
 * string (one core), beside a baseline in the same run that runs every regex
 * in order (no pre-filter), and cached over a Zipf-skewed mix of ~1,000
 * distinct strings (one thread, then two). Prints ratios. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <yaml.h>

#include "ua.h"
#include "ua_int.h"

#define SECONDS 2.0
#define DISTINCT 1000
#define MIXLEN (1 << 20)
#define CACHE_ENTRIES 10000

static char **uas;
static size_t *ualen;
static size_t nua, capua;
static uint32_t *mix;

static double
now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Collects every user_agent_string value of a uap-core test file. */
static int
read_suite(const char *path)
{
	FILE *f = fopen(path, "rb");
	yaml_parser_t yp;
	yaml_event_t ev;
	int want = 0, done = 0, rc = 0;

	if (f == NULL) {
		perror(path);
		return -1;
	}
	yaml_parser_initialize(&yp);
	yaml_parser_set_input_file(&yp, f);
	while (!done) {
		if (!yaml_parser_parse(&yp, &ev)) {
			fprintf(stderr, "%s: %s\n", path, yp.problem);
			rc = -1;
			break;
		}
		if (ev.type == YAML_SCALAR_EVENT) {
			const char *v = (const char *)ev.data.scalar.value;

			if (want) {
				if (nua == capua) {
					capua = capua ? capua * 2 : 4096;
					uas = realloc(uas, capua * sizeof(*uas));
					ualen = realloc(ualen, capua * sizeof(*ualen));
					if (uas == NULL || ualen == NULL)
						abort();
				}
				uas[nua] = strdup(v);
				ualen[nua] = strlen(v);
				nua++;
				want = 0;
			} else {
				want = strcmp(v, "user_agent_string") == 0;
			}
		} else if (ev.type != YAML_MAPPING_START_EVENT) {
			want = 0;
		}
		done = ev.type == YAML_STREAM_END_EVENT;
		yaml_event_delete(&ev);
	}
	yaml_parser_delete(&yp);
	fclose(f);
	return rc;
}

typedef int (*parse_fn)(struct ua_parser *, const char *, size_t, struct ua_result *);

static int
nocache(struct ua_parser *p, const char *s, size_t n, struct ua_result *r)
{
	return ua_parse_nocache(p, s, n, r);
}

static int
unfiltered(struct ua_parser *p, const char *s, size_t n, struct ua_result *r)
{
	return ua_parse_unfiltered(p, s, n, r);
}

/* Passes over all strings in order until SECONDS; strings per second. */
static double
run_all(struct ua_parser *p, parse_fn fn, double secs)
{
	struct ua_result r;
	double t0 = now(), t;
	long long n = 0;

	do {
		for (size_t i = 0; i < nua; i++)
			fn(p, uas[i], ualen[i], &r);
		n += (long long)nua;
		t = now();
	} while (t - t0 < secs);
	return (double)n / (t - t0);
}

struct crun {
	struct ua_parser *p;
	size_t offset;
	long long n;
	double secs;
};

static void *
run_mix(void *arg)
{
	struct crun *c = arg;
	struct ua_result r;
	double t0 = now(), t;
	long long n = 0;
	size_t k = c->offset;

	do {
		for (int i = 0; i < 4096; i++, k++) {
			uint32_t u = mix[k & (MIXLEN - 1)];

			ua_parse(c->p, uas[u], ualen[u], &r);
		}
		n += 4096;
		t = now();
	} while (t - t0 < c->secs);
	c->n = n;
	c->secs = t - t0;
	return NULL;
}

/* Zipf(s = 1) draws over the first DISTINCT distinct strings. */
static void
make_mix(void)
{
	double cdf[DISTINCT], sum = 0;
	uint32_t pick[DISTINCT];
	size_t np = 0;
	unsigned long long x = 0x9e3779b97f4a7c15ULL;

	for (size_t i = 0; i < nua && np < DISTINCT; i++) {
		int dup = 0;

		/* spread the picks over the three suites */
		size_t j = (i * 7919) % nua;

		for (size_t k = 0; k < np && !dup; k++)
			dup = strcmp(uas[pick[k]], uas[j]) == 0;
		if (!dup)
			pick[np++] = (uint32_t)j;
	}
	for (size_t i = 0; i < np; i++) {
		sum += 1.0 / (double)(i + 1);
		cdf[i] = sum;
	}
	mix = malloc(MIXLEN * sizeof(*mix));
	if (mix == NULL)
		abort();
	for (size_t i = 0; i < MIXLEN; i++) {
		double u;
		size_t lo = 0, hi = np - 1;

		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		u = (double)(x >> 11) / 9007199254740992.0 * sum;
		while (lo < hi) {
			size_t mid = (lo + hi) / 2;

			if (cdf[mid] < u)
				lo = mid + 1;
			else
				hi = mid;
		}
		mix[i] = pick[lo];
	}
	printf("cached mix: %zu distinct strings, Zipf s=1, %d draws\n", np, MIXLEN);
}

int
main(void)
{
	const char *dir = getenv("LP_UAP_DIR");
	const char *suites[] = { "test_ua.yaml", "test_os.yaml", "test_device.yaml" };
	char path[4096], err[512];
	struct ua_parser *p, *pc;
	double unc, base, c1, c2, mixunc;
	struct crun cr[2];
	pthread_t th[2];
	struct ua_stats st;
	double t0;

	if (dir == NULL || dir[0] == '\0')
		dir = "/usr/share/uap-core";
	for (int i = 0; i < 3; i++) {
		snprintf(path, sizeof(path), "%s/tests/%s", dir, suites[i]);
		if (read_suite(path) < 0)
			return 1;
	}
	snprintf(path, sizeof(path), "%s/regexes.yaml", dir);
	t0 = now();
	if ((p = ua_parser_new(path, 0, err, sizeof(err))) == NULL) {
		fprintf(stderr, "%s\n", err);
		return 1;
	}
	printf("ua_load_ms %.1f\n", (now() - t0) * 1000);
	printf("strings: %zu (all uap-core test strings)\n", nua);

	run_all(p, nocache, 0.3); /* warm up */
	unc = run_all(p, nocache, SECONDS);
	base = run_all(p, unfiltered, SECONDS / 2);
	printf("ua_uncached_per_sec %.0f\n", unc);
	printf("ua_unfiltered_per_sec %.0f (baseline: every regex in order, no pre-filter)\n", base);
	printf("ua_prefilter_speedup %.2f\n", unc / base);

	make_mix();
	if ((pc = ua_parser_new(path, CACHE_ENTRIES, err, sizeof(err))) == NULL) {
		fprintf(stderr, "%s\n", err);
		return 1;
	}
	cr[0] = (struct crun){ pc, 0, 0, 0.3 };
	run_mix(&cr[0]); /* warm up: fills the cache */
	cr[0] = (struct crun){ pc, 12345, 0, SECONDS };
	run_mix(&cr[0]);
	c1 = (double)cr[0].n / cr[0].secs;
	for (int t = 0; t < 2; t++) {
		cr[t] = (struct crun){ pc, (size_t)t * 500000, 0, SECONDS };
		pthread_create(&th[t], NULL, run_mix, &cr[t]);
	}
	for (int t = 0; t < 2; t++)
		pthread_join(th[t], NULL);
	c2 = (double)cr[0].n / cr[0].secs + (double)cr[1].n / cr[1].secs;
	ua_parser_stats(pc, &st);
	/* the same mix uncached, for the ratio */
	{
		struct ua_result r;
		long long n = 0;
		double t1 = now(), t;

		do {
			for (int i = 0; i < 256; i++, n++) {
				uint32_t u = mix[(size_t)n & (MIXLEN - 1)];

				ua_parse_nocache(p, uas[u], ualen[u], &r);
			}
			t = now();
		} while (t - t1 < SECONDS / 2);
		mixunc = (double)n / (t - t1);
	}
	printf("ua_cached_per_sec %.0f\n", c1);
	printf("ua_cached_2threads_per_sec %.0f\n", c2);
	printf("ua_mix_uncached_per_sec %.0f (baseline: same mix, no cache)\n", mixunc);
	printf("ua_cache_speedup %.1f\n", c1 / mixunc);
	printf("cache: %llu hits, %llu misses (hit rate %.4f), %zu entries\n",
	    (unsigned long long)st.hits, (unsigned long long)st.misses,
	    (double)st.hits / (double)(st.hits + st.misses ? st.hits + st.misses : 1), st.entries);

	ua_parser_free(p);
	ua_parser_free(pc);
	for (size_t i = 0; i < nua; i++)
		free(uas[i]);
	free(uas);
	free(ualen);
	free(mix);
	return 0;
}
