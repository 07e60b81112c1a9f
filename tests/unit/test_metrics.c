/* test_metrics.c - the metrics registry: rendered text against
 * tests/data/metrics_expected.txt, registration errors, and increments from
 * several threads (while scrapes run) adding up. Run from the repository root. */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "metrics.h"
#include "unit.h"

#define EXPECTED "tests/data/metrics_expected.txt"
#define THREADS 4
#define PER_THREAD 200000

static char *
slurp(const char *path)
{
	FILE *f = fopen(path, "r");
	char *buf;
	long n;

	if (f == NULL)
		return NULL;
	fseek(f, 0, SEEK_END);
	n = ftell(f);
	rewind(f);
	buf = malloc((size_t)n + 1);
	if (buf != NULL && fread(buf, 1, (size_t)n, f) != (size_t)n) {
		free(buf);
		buf = NULL;
	}
	if (buf != NULL)
		buf[n] = '\0';
	fclose(f);
	return buf;
}

static double
answer(void *arg)
{
	return *(double *)arg;
}

/* Prints the first line where got and want differ. */
static void
show_diff(const char *got, const char *want)
{
	int line = 1;

	while (*got && *got == *want) {
		if (*got == '\n')
			line++;
		got++;
		want++;
	}
	fprintf(stderr, "rendered text differs from " EXPECTED " at line %d:\n"
	    "  got:  %.80s\n  want: %.80s\n", line, got, want);
}

static void
test_render(void)
{
	static const double bounds[] = { 0.25, 0.5, 1 };
	char errstr[256];
	double forty_two = 42;
	struct metrics *m = metrics_new();
	struct metrics_family *req, *st, *esc, *g, *fn, *lag, *h, *empty, *odd;
	struct metrics_series *s;
	char *text, *want;
	size_t len;

	req = metrics_counter(m, "lp_test_requests_total", "Requests served.", NULL,
	    errstr, sizeof(errstr));
	st = metrics_counter(m, "lp_test_responses_total", "Responses by status.", "status",
	    errstr, sizeof(errstr));
	esc = metrics_counter(m, "lp_test_escapes_total", "Help with a \\ backslash\nand a newline.",
	    "path", errstr, sizeof(errstr));
	g = metrics_gauge(m, "lp_test_temperature", "A set gauge.", NULL, errstr, sizeof(errstr));
	fn = metrics_gauge(m, "lp_test_pool_size", "A gauge computed at scrape time.", NULL,
	    errstr, sizeof(errstr));
	lag = metrics_gauge(m, "lp_test_lag", "Two labels.", "topic,partition", errstr,
	    sizeof(errstr));
	h = metrics_histogram(m, "lp_test_duration_seconds", "A histogram.", "method", bounds, 3,
	    errstr, sizeof(errstr));
	empty = metrics_counter(m, "lp_test_unused_total", "Labelled, no series yet.", "kind",
	    errstr, sizeof(errstr));
	odd = metrics_gauge(m, "lp_test:odd_values", "NaN and infinities.", "v", errstr,
	    sizeof(errstr));
	CHECK(req && st && esc && g && fn && lag && h && empty && odd, "registration: %s", errstr);
	if (!(req && st && esc && g && fn && lag && h && empty && odd)) {
		metrics_free(m);
		return;
	}
	s = metrics_series(req, NULL, NULL);
	metrics_inc(s);
	metrics_add(s, 2);
	metrics_add(metrics_series(st, "302", NULL), 2);
	metrics_inc(metrics_series(st, "404", NULL));
	CHECK(metrics_series(st, "302", NULL) == metrics_series(st, "302", NULL),
	    "same labels give the same series");
	CHECK(metrics_series(st, NULL, NULL) == NULL, "a missing label value is refused");
	metrics_inc(metrics_series(esc, "a\"b\\c\nd", NULL));
	metrics_set(metrics_series(g, NULL, NULL), -2.5);
	metrics_gauge_add(metrics_series(g, NULL, NULL), 1);
	metrics_set_fn(metrics_series(fn, NULL, NULL), answer, &forty_two);
	metrics_set(metrics_series(lag, "visits", "0"), 7);
	metrics_set(metrics_series(lag, "visits", "12"), 0.1);
	s = metrics_series(h, "GET", NULL);
	metrics_observe(s, 0.125);
	metrics_observe(s, 0.25);  /* on a bound: counted in that bucket (le) */
	metrics_observe(s, 0.75);
	metrics_observe(s, 3);
	CHECK(metrics_value(s) == 4, "histogram count: %g", metrics_value(s));
	CHECK(metrics_hist_sum(s) == 4.125, "histogram sum: %g", metrics_hist_sum(s));
	metrics_observe(metrics_series(h, "POST", NULL), 1e-9);
	metrics_set(metrics_series(odd, "nan", NULL), NAN);
	metrics_set(metrics_series(odd, "inf", NULL), INFINITY);
	metrics_set(metrics_series(odd, "-inf", NULL), -INFINITY);
	metrics_set(metrics_series(odd, "big", NULL), 12345678901234567.0);
	CHECK(metrics_value(metrics_series(fn, NULL, NULL)) == 42, "callback gauge value");
	forty_two = 43;

	text = metrics_render(m, &len);
	want = slurp(EXPECTED);
	CHECK(text != NULL && strlen(text) == len, "render returns its length");
	CHECK(want != NULL, "cannot read %s", EXPECTED);
	if (text != NULL && want != NULL) {
		CHECK(strcmp(text, want) == 0, "render matches %s", EXPECTED);
		if (strcmp(text, want) != 0) {
			show_diff(text, want);
			fprintf(stderr, "--- full render:\n%s", text);
		}
	}
	free(text);
	free(want);
	metrics_free(m);
}

static void
test_errors(void)
{
	static const double bad_bounds[] = { 1, 0.5 };
	static const double nan_bounds[] = { NAN };
	static const char *const bad_names[] = { "", "1abc", "a-b", "a b", "é" };
	struct metrics *m = metrics_new();
	char errstr[256];

	for (size_t i = 0; i < sizeof(bad_names) / sizeof(bad_names[0]); i++)
		CHECK(metrics_counter(m, bad_names[i], "x", NULL, errstr, sizeof(errstr)) == NULL,
		    "name \"%s\" refused", bad_names[i]);
	CHECK(metrics_counter(m, "ok_total", "x", NULL, errstr, sizeof(errstr)) != NULL, "%s", errstr);
	CHECK(metrics_gauge(m, "ok_total", "x", NULL, errstr, sizeof(errstr)) == NULL,
	    "duplicate refused");
	CHECK_STR(errstr, "metric \"ok_total\" registered twice", "duplicate message");
	CHECK(metrics_counter(m, "three_total", "x", "a,b,c", errstr, sizeof(errstr)) == NULL,
	    "three labels refused");
	CHECK(metrics_counter(m, "dup_total", "x", "a,a", errstr, sizeof(errstr)) == NULL,
	    "repeated label refused");
	CHECK(metrics_counter(m, "res_total", "x", "__name", errstr, sizeof(errstr)) == NULL,
	    "reserved label refused");
	CHECK(metrics_counter(m, "bad_label_total", "x", "a-b", errstr, sizeof(errstr)) == NULL,
	    "bad label refused");
	CHECK(metrics_histogram(m, "h1", "x", "le", metrics_latency_buckets,
	    metrics_latency_nbuckets, errstr, sizeof(errstr)) == NULL, "le refused on histogram");
	CHECK(metrics_histogram(m, "h2", "x", NULL, bad_bounds, 2, errstr, sizeof(errstr)) == NULL,
	    "decreasing bounds refused");
	CHECK(metrics_histogram(m, "h3", "x", NULL, nan_bounds, 1, errstr, sizeof(errstr)) == NULL,
	    "NaN bound refused");
	CHECK(metrics_histogram(m, "h4", "x", NULL, NULL, 0, errstr, sizeof(errstr)) == NULL,
	    "no buckets refused");
	CHECK(metrics_histogram(m, "h5", "x", NULL, metrics_latency_buckets,
	    metrics_latency_nbuckets, errstr, sizeof(errstr)) != NULL, "%s", errstr);
	metrics_free(m);
}

struct worker {
	pthread_t t;
	int id;
	struct metrics_family *c, *g, *h;
	struct metrics *m;
};

static void *
work(void *arg)
{
	struct worker *w = arg;
	char label[16];

	snprintf(label, sizeof(label), "t%d", w->id);
	for (int i = 0; i < PER_THREAD; i++) {
		/* The shared series is looked up each time (the lock-free path);
		 * the per-thread one is created by whichever thread comes first. */
		metrics_inc(metrics_series(w->c, "shared", NULL));
		metrics_inc(metrics_series(w->c, label, NULL));
		metrics_gauge_add(metrics_series(w->g, NULL, NULL), 1);
		metrics_observe(metrics_series(w->h, NULL, NULL), (i % 4) * 0.25);
	}
	return NULL;
}

static void *
scrape(void *arg)
{
	struct worker *w = arg;

	for (int i = 0; i < 200; i++)
		free(metrics_render(w->m, NULL));
	return NULL;
}

static void
test_threads(void)
{
	static const double b[] = { 0.1, 0.3, 0.6 };
	struct metrics *m = metrics_new();
	struct worker w[THREADS + 1];
	char errstr[256], label[16];
	double total = 0;

	w[0].m = m;
	w[0].c = metrics_counter(m, "par_total", "x", "who", errstr, sizeof(errstr));
	w[0].g = metrics_gauge(m, "par_gauge", "x", NULL, errstr, sizeof(errstr));
	w[0].h = metrics_histogram(m, "par_hist", "x", NULL, b, 3, errstr, sizeof(errstr));
	for (int i = 0; i <= THREADS; i++) {
		w[i] = w[0];
		w[i].id = i;
		pthread_create(&w[i].t, NULL, i == THREADS ? scrape : work, &w[i]);
	}
	for (int i = 0; i <= THREADS; i++)
		pthread_join(w[i].t, NULL);
	CHECK(metrics_value(metrics_series(w[0].c, "shared", NULL)) == THREADS * PER_THREAD,
	    "shared counter: %g, expected %d", metrics_value(metrics_series(w[0].c, "shared", NULL)),
	    THREADS * PER_THREAD);
	for (int i = 0; i < THREADS; i++) {
		snprintf(label, sizeof(label), "t%d", i);
		total += metrics_value(metrics_series(w[0].c, label, NULL));
	}
	CHECK(total == THREADS * PER_THREAD, "per-thread counters add up: %g", total);
	CHECK(metrics_value(metrics_series(w[0].g, NULL, NULL)) == THREADS * PER_THREAD,
	    "gauge adds: %g", metrics_value(metrics_series(w[0].g, NULL, NULL)));
	CHECK(metrics_value(metrics_series(w[0].h, NULL, NULL)) == THREADS * PER_THREAD,
	    "histogram count: %g", metrics_value(metrics_series(w[0].h, NULL, NULL)));
	/* Each thread observes 0, .25, .5, .75 in turn: sum = n/4 * 1.5. */
	CHECK(metrics_hist_sum(metrics_series(w[0].h, NULL, NULL)) == THREADS * PER_THREAD / 4 * 1.5,
	    "histogram sum: %g", metrics_hist_sum(metrics_series(w[0].h, NULL, NULL)));
	{
		char *text = metrics_render(m, NULL);
		char want[128];

		snprintf(want, sizeof(want), "par_hist_bucket{le=\"0.1\"} %d\n", THREADS * PER_THREAD / 4);
		CHECK(text && strstr(text, want), "first bucket holds a quarter: %s", want);
		snprintf(want, sizeof(want), "par_hist_bucket{le=\"0.6\"} %d\n", THREADS * PER_THREAD / 4 * 3);
		CHECK(text && strstr(text, want), "third bucket holds three quarters: %s", want);
		snprintf(want, sizeof(want), "par_hist_count %d\n", THREADS * PER_THREAD);
		CHECK(text && strstr(text, want), "count line: %s", want);
		free(text);
	}
	metrics_free(m);
}

struct collected {
	struct metrics_family *parts;
	struct metrics_series *total;
	int calls;
};

/* A collect hook: mirrors a module's total and creates labelled series. */
static void
collect(void *arg)
{
	struct collected *c = arg;
	char p[8];

	c->calls++;
	metrics_counter_set(c->total, 40 + (uint64_t)c->calls);
	snprintf(p, sizeof(p), "%d", c->calls);
	metrics_set(metrics_series(c->parts, p, NULL), c->calls * 1.5);
}

static void
test_collect(void)
{
	struct metrics *m = metrics_new();
	struct collected c = { 0 };
	char err[256], *text;

	c.total = metrics_series(metrics_counter(m, "mirror_total", "Mirrored.", NULL, err,
	    sizeof(err)), NULL, NULL);
	c.parts = metrics_gauge(m, "lag", "Per partition.", "partition", err, sizeof(err));
	CHECK(c.total && c.parts, "registration: %s", err);
	CHECK(metrics_on_collect(m, collect, &c) == 0, "hook accepted");
	free(metrics_render(m, NULL));
	text = metrics_render(m, NULL);
	CHECK(c.calls == 2, "hook ran once per render, got %d", c.calls);
	CHECK(text && strstr(text, "\nmirror_total 42\n"), "mirrored total: %s",
	    text ? text : "(none)");
	CHECK(text && strstr(text, "lag{partition=\"1\"} 1.5\nlag{partition=\"2\"} 3\n"),
	    "series made by the hook: %s", text ? text : "(none)");
	free(text);
	for (int i = 1; i < METRICS_MAX_HOOKS; i++)
		CHECK(metrics_on_collect(m, collect, &c) == 0, "hook %d accepted", i);
	CHECK(metrics_on_collect(m, collect, &c) == -1, "one hook too many refused");
	metrics_free(m);
}

int
main(void)
{
	test_render();
	test_errors();
	test_threads();
	test_collect();
	return unit_done("test_metrics");
}
