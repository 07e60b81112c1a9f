/* metrics.c - Prometheus registry: families in a mutex-guarded list, series in
 * append-only lists read without locks, values in C11 atomics (doubles kept
 * as their bit patterns), rendered to text format 0.0.4 with open_memstream. */
#include "metrics.h"
#include "errstr.h"

#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const double metrics_latency_buckets[] = {
	0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10
};
const size_t metrics_latency_nbuckets = sizeof(metrics_latency_buckets) / sizeof(metrics_latency_buckets[0]);

struct metrics_series {
	struct metrics_series *_Atomic next;
	struct metrics_family *fam;
	char *values[METRICS_MAX_LABELS];
	_Atomic uint64_t value;    /* counter total, or gauge value as double bits */
	_Atomic uint64_t sum;      /* histogram sum as double bits */
	_Atomic uint64_t *buckets; /* histogram: nbounds + 1 (last is +Inf), not cumulative */
	double (*fn)(void *);      /* gauge callback, under the registry mutex */
	void *fn_arg;
};

struct metrics_family {
	struct metrics_family *next; /* under the registry mutex */
	struct metrics *reg;
	enum metrics_type type;
	char *name, *help;
	int nlabels;
	char *labels[METRICS_MAX_LABELS];
	double *bounds;
	size_t nbounds;
	struct metrics_series *_Atomic head;
	struct metrics_series *tail; /* under the registry mutex */
};

struct metrics {
	pthread_mutex_t mtx;
	struct metrics_family *head, *tail;
	pthread_mutex_t collect_mtx; /* one scrape's hooks at a time */
	int nhooks;
	struct {
		void (*fn)(void *);
		void *arg;
	} hooks[METRICS_MAX_HOOKS];
};

static uint64_t
dbits(double d)
{
	uint64_t u;

	memcpy(&u, &d, sizeof(u));
	return u;
}

static double
bitsd(uint64_t u)
{
	double d;

	memcpy(&d, &u, sizeof(d));
	return d;
}

static void
atomic_add_double(_Atomic uint64_t *a, double delta)
{
	uint64_t old = atomic_load_explicit(a, memory_order_relaxed);

	while (!atomic_compare_exchange_weak_explicit(a, &old, dbits(bitsd(old) + delta),
	    memory_order_relaxed, memory_order_relaxed))
		;
}

struct metrics *
metrics_new(void)
{
	struct metrics *m = calloc(1, sizeof(*m));

	if (m != NULL) {
		pthread_mutex_init(&m->mtx, NULL);
		pthread_mutex_init(&m->collect_mtx, NULL);
	}
	return m;
}

static void
series_free(struct metrics_series *s)
{
	for (int i = 0; i < METRICS_MAX_LABELS; i++)
		free(s->values[i]);
	free(s->buckets);
	free(s);
}

static void
family_free(struct metrics_family *f)
{
	struct metrics_series *s = atomic_load(&f->head), *n;

	for (; s != NULL; s = n) {
		n = atomic_load(&s->next);
		series_free(s);
	}
	for (int i = 0; i < METRICS_MAX_LABELS; i++)
		free(f->labels[i]);
	free(f->name);
	free(f->help);
	free(f->bounds);
	free(f);
}

void
metrics_free(struct metrics *m)
{
	struct metrics_family *f, *n;

	if (m == NULL)
		return;
	for (f = m->head; f != NULL; f = n) {
		n = f->next;
		family_free(f);
	}
	pthread_mutex_destroy(&m->mtx);
	pthread_mutex_destroy(&m->collect_mtx);
	free(m);
}

static int
name_ok(const char *s, int colon)
{
	if (s == NULL || *s == '\0' || (*s >= '0' && *s <= '9'))
		return 0;
	for (; *s; s++)
		if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') ||
		    (*s >= '0' && *s <= '9') || *s == '_' || (colon && *s == ':')))
			return 0;
	return 1;
}

/* Splits "a,b" into f->labels. */
static int
parse_labels(struct metrics_family *f, const char *labels, char *errstr, size_t errstr_size)
{
	const char *p = labels;

	while (p != NULL && *p != '\0') {
		const char *comma = strchr(p, ',');
		size_t len = comma ? (size_t)(comma - p) : strlen(p);
		char *l;

		if (f->nlabels == METRICS_MAX_LABELS) {
			errstr_set(errstr, errstr_size, "%s: more than %d labels", f->name,
			    METRICS_MAX_LABELS);
			return -1;
		}
		if ((l = strndup(p, len)) == NULL) {
			errstr_set(errstr, errstr_size, "out of memory");
			return -1;
		}
		f->labels[f->nlabels++] = l;
		if (!name_ok(l, 0) || strncmp(l, "__", 2) == 0 ||
		    (f->type == METRICS_HISTOGRAM && strcmp(l, "le") == 0)) {
			errstr_set(errstr, errstr_size, "%s: invalid label name \"%s\"", f->name, l);
			return -1;
		}
		for (int i = 0; i < f->nlabels - 1; i++)
			if (strcmp(f->labels[i], l) == 0) {
				errstr_set(errstr, errstr_size, "%s: label \"%s\" given twice",
				    f->name, l);
				return -1;
			}
		p = comma ? comma + 1 : NULL;
	}
	return 0;
}

static struct metrics_family *
family_new(struct metrics *m, enum metrics_type type, const char *name, const char *help,
           const char *labels, const double *bounds, size_t nbounds,
           char *errstr, size_t errstr_size)
{
	struct metrics_family *f, *g;

	if (!name_ok(name, 1)) {
		errstr_set(errstr, errstr_size, "invalid metric name \"%s\"", name ? name : "(null)");
		return NULL;
	}
	if ((f = calloc(1, sizeof(*f))) == NULL ||
	    (f->name = strdup(name)) == NULL ||
	    (f->help = strdup(help ? help : "")) == NULL) {
		errstr_set(errstr, errstr_size, "out of memory");
		goto fail;
	}
	f->reg = m;
	f->type = type;
	if (parse_labels(f, labels, errstr, errstr_size) < 0)
		goto fail;
	if (type == METRICS_HISTOGRAM) {
		if (nbounds == 0 || bounds == NULL) {
			errstr_set(errstr, errstr_size, "%s: a histogram needs buckets", name);
			goto fail;
		}
		for (size_t i = 0; i < nbounds; i++)
			if (!isfinite(bounds[i]) || (i > 0 && bounds[i] <= bounds[i - 1])) {
				errstr_set(errstr, errstr_size,
				    "%s: bucket bounds must be finite and increasing", name);
				goto fail;
			}
		if ((f->bounds = malloc(nbounds * sizeof(*bounds))) == NULL) {
			errstr_set(errstr, errstr_size, "out of memory");
			goto fail;
		}
		memcpy(f->bounds, bounds, nbounds * sizeof(*bounds));
		f->nbounds = nbounds;
	}
	pthread_mutex_lock(&m->mtx);
	for (g = m->head; g != NULL; g = g->next)
		if (strcmp(g->name, name) == 0)
			break;
	if (g != NULL) {
		pthread_mutex_unlock(&m->mtx);
		errstr_set(errstr, errstr_size, "metric \"%s\" registered twice", name);
		goto fail;
	}
	if (m->tail != NULL)
		m->tail->next = f;
	else
		m->head = f;
	m->tail = f;
	pthread_mutex_unlock(&m->mtx);
	/* A family without labels always shows its one series (value 0). */
	if (f->nlabels == 0 && metrics_series(f, NULL, NULL) == NULL) {
		errstr_set(errstr, errstr_size, "out of memory");
		return NULL; /* f stays registered and is freed with m */
	}
	return f;
fail:
	if (f != NULL)
		family_free(f);
	return NULL;
}

struct metrics_family *
metrics_counter(struct metrics *m, const char *name, const char *help, const char *labels,
                char *errstr, size_t errstr_size)
{
	return family_new(m, METRICS_COUNTER, name, help, labels, NULL, 0, errstr, errstr_size);
}

struct metrics_family *
metrics_gauge(struct metrics *m, const char *name, const char *help, const char *labels,
              char *errstr, size_t errstr_size)
{
	return family_new(m, METRICS_GAUGE, name, help, labels, NULL, 0, errstr, errstr_size);
}

struct metrics_family *
metrics_histogram(struct metrics *m, const char *name, const char *help, const char *labels,
                  const double *bounds, size_t nbounds, char *errstr, size_t errstr_size)
{
	return family_new(m, METRICS_HISTOGRAM, name, help, labels, bounds, nbounds,
	    errstr, errstr_size);
}

static int
series_match(const struct metrics_series *s, const char *const *v, int n)
{
	for (int i = 0; i < n; i++)
		if (strcmp(s->values[i], v[i]) != 0)
			return 0;
	return 1;
}

static struct metrics_series *
series_find(struct metrics_series *s, const char *const *v, int n)
{
	for (; s != NULL; s = atomic_load_explicit(&s->next, memory_order_acquire))
		if (series_match(s, v, n))
			return s;
	return NULL;
}

struct metrics_series *
metrics_series(struct metrics_family *f, const char *v1, const char *v2)
{
	const char *const v[METRICS_MAX_LABELS] = { v1, v2 };
	struct metrics_series *s;
	struct metrics *m = f->reg;

	for (int i = 0; i < f->nlabels; i++)
		if (v[i] == NULL)
			return NULL;
	if ((s = series_find(atomic_load_explicit(&f->head, memory_order_acquire), v,
	    f->nlabels)) != NULL)
		return s;
	pthread_mutex_lock(&m->mtx);
	if ((s = series_find(atomic_load_explicit(&f->head, memory_order_acquire), v,
	    f->nlabels)) != NULL)
		goto out;
	if ((s = calloc(1, sizeof(*s))) == NULL)
		goto out;
	s->fam = f;
	for (int i = 0; i < f->nlabels; i++)
		if ((s->values[i] = strdup(v[i])) == NULL)
			goto oom;
	if (f->type == METRICS_HISTOGRAM &&
	    (s->buckets = calloc(f->nbounds + 1, sizeof(*s->buckets))) == NULL)
		goto oom;
	/* Published fully built: readers load next with acquire. */
	if (f->tail != NULL)
		atomic_store_explicit(&f->tail->next, s, memory_order_release);
	else
		atomic_store_explicit(&f->head, s, memory_order_release);
	f->tail = s;
	goto out;
oom:
	series_free(s);
	s = NULL;
out:
	pthread_mutex_unlock(&m->mtx);
	return s;
}

void
metrics_inc(struct metrics_series *s)
{
	atomic_fetch_add_explicit(&s->value, 1, memory_order_relaxed);
}

void
metrics_add(struct metrics_series *s, uint64_t n)
{
	atomic_fetch_add_explicit(&s->value, n, memory_order_relaxed);
}

void
metrics_counter_set(struct metrics_series *s, uint64_t total)
{
	atomic_store_explicit(&s->value, total, memory_order_relaxed);
}

int
metrics_on_collect(struct metrics *m, void (*fn)(void *arg), void *arg)
{
	int rc = -1;

	pthread_mutex_lock(&m->collect_mtx);
	if (m->nhooks < METRICS_MAX_HOOKS) {
		m->hooks[m->nhooks].fn = fn;
		m->hooks[m->nhooks].arg = arg;
		m->nhooks++;
		rc = 0;
	}
	pthread_mutex_unlock(&m->collect_mtx);
	return rc;
}

void
metrics_set(struct metrics_series *s, double v)
{
	atomic_store_explicit(&s->value, dbits(v), memory_order_relaxed);
}

void
metrics_gauge_add(struct metrics_series *s, double delta)
{
	atomic_add_double(&s->value, delta);
}

void
metrics_set_fn(struct metrics_series *s, double (*fn)(void *arg), void *arg)
{
	struct metrics *m = s->fam->reg;

	pthread_mutex_lock(&m->mtx);
	s->fn = fn;
	s->fn_arg = arg;
	pthread_mutex_unlock(&m->mtx);
}

void
metrics_observe(struct metrics_series *s, double v)
{
	const struct metrics_family *f = s->fam;
	size_t i = 0;

	while (i < f->nbounds && !(v <= f->bounds[i]))
		i++;
	atomic_fetch_add_explicit(&s->buckets[i], 1, memory_order_relaxed);
	atomic_add_double(&s->sum, v);
}

/* Gauge value; the caller holds the registry mutex. */
static double
gauge_value(const struct metrics_series *s)
{
	if (s->fn != NULL)
		return s->fn(s->fn_arg);
	return bitsd(atomic_load_explicit(&s->value, memory_order_relaxed));
}

static uint64_t
hist_count(const struct metrics_series *s)
{
	uint64_t n = 0;

	for (size_t i = 0; i <= s->fam->nbounds; i++)
		n += atomic_load_explicit(&s->buckets[i], memory_order_relaxed);
	return n;
}

double
metrics_value(struct metrics_series *s)
{
	struct metrics *m = s->fam->reg;
	double v;

	switch (s->fam->type) {
	case METRICS_COUNTER:
		return (double)atomic_load_explicit(&s->value, memory_order_relaxed);
	case METRICS_HISTOGRAM:
		return (double)hist_count(s);
	default:
		pthread_mutex_lock(&m->mtx);
		v = gauge_value(s);
		pthread_mutex_unlock(&m->mtx);
		return v;
	}
}

double
metrics_hist_sum(struct metrics_series *s)
{
	if (s->fam->type != METRICS_HISTOGRAM)
		return 0;
	return bitsd(atomic_load_explicit(&s->sum, memory_order_relaxed));
}

/* Prometheus float text: NaN, +Inf, -Inf, else the shortest of %.15g and
 * %.17g that reads back to the same double. */
static const char *
fmt_double(char *buf, size_t size, double v)
{
	if (isnan(v))
		return "NaN";
	if (isinf(v))
		return v > 0 ? "+Inf" : "-Inf";
	snprintf(buf, size, "%.15g", v);
	if (strtod(buf, NULL) != v)
		snprintf(buf, size, "%.17g", v);
	return buf;
}

/* Writes s escaping backslash and newline, and double quote when quote. */
static void
put_escaped(FILE *out, const char *s, int quote)
{
	for (; *s; s++) {
		if (*s == '\\')
			fputs("\\\\", out);
		else if (*s == '\n')
			fputs("\\n", out);
		else if (quote && *s == '"')
			fputs("\\\"", out);
		else
			fputc(*s, out);
	}
}

/* Writes {l1="v1",l2="v2"[,le="x"]} or nothing when there are no labels. */
static void
put_labels(FILE *out, const struct metrics_series *s, const char *le)
{
	const struct metrics_family *f = s->fam;

	if (f->nlabels == 0 && le == NULL)
		return;
	fputc('{', out);
	for (int i = 0; i < f->nlabels; i++) {
		fprintf(out, "%s%s=\"", i ? "," : "", f->labels[i]);
		put_escaped(out, s->values[i], 1);
		fputc('"', out);
	}
	if (le != NULL)
		fprintf(out, "%sle=\"%s\"", f->nlabels ? "," : "", le);
	fputc('}', out);
}

static void
render_series(FILE *out, const struct metrics_series *s)
{
	const struct metrics_family *f = s->fam;
	char num[40];
	uint64_t cum = 0;

	switch (f->type) {
	case METRICS_COUNTER:
		fputs(f->name, out);
		put_labels(out, s, NULL);
		fprintf(out, " %" PRIu64 "\n", atomic_load_explicit(&s->value, memory_order_relaxed));
		break;
	case METRICS_GAUGE:
		fputs(f->name, out);
		put_labels(out, s, NULL);
		fprintf(out, " %s\n", fmt_double(num, sizeof(num), gauge_value(s)));
		break;
	case METRICS_HISTOGRAM:
		/* Cumulative counts; _count is the +Inf bucket so they agree even
		 * while observations land during the scrape. */
		for (size_t i = 0; i <= f->nbounds; i++) {
			cum += atomic_load_explicit(&s->buckets[i], memory_order_relaxed);
			fprintf(out, "%s_bucket", f->name);
			put_labels(out, s, i < f->nbounds ?
			    fmt_double(num, sizeof(num), f->bounds[i]) : "+Inf");
			fprintf(out, " %" PRIu64 "\n", cum);
		}
		fprintf(out, "%s_sum", f->name);
		put_labels(out, s, NULL);
		fprintf(out, " %s\n", fmt_double(num, sizeof(num),
		    bitsd(atomic_load_explicit(&s->sum, memory_order_relaxed))));
		fprintf(out, "%s_count", f->name);
		put_labels(out, s, NULL);
		fprintf(out, " %" PRIu64 "\n", cum);
		break;
	}
}

char *
metrics_render(struct metrics *m, size_t *len)
{
	static const char *const type_names[] = { "counter", "gauge", "histogram" };
	char *buf = NULL;
	size_t n = 0;
	FILE *out = open_memstream(&buf, &n);

	if (out == NULL)
		return NULL;
	/* Hooks run outside the registry lock: they may create series. */
	pthread_mutex_lock(&m->collect_mtx);
	for (int i = 0; i < m->nhooks; i++)
		m->hooks[i].fn(m->hooks[i].arg);
	pthread_mutex_lock(&m->mtx);
	pthread_mutex_unlock(&m->collect_mtx);
	for (const struct metrics_family *f = m->head; f != NULL; f = f->next) {
		fprintf(out, "# HELP %s ", f->name);
		put_escaped(out, f->help, 0);
		fprintf(out, "\n# TYPE %s %s\n", f->name, type_names[f->type]);
		for (const struct metrics_series *s = atomic_load(&f->head); s != NULL;
		    s = atomic_load(&s->next))
			render_series(out, s);
	}
	pthread_mutex_unlock(&m->mtx);
	if (ferror(out)) {
		fclose(out);
		free(buf);
		return NULL;
	}
	if (fclose(out) != 0) {
		free(buf);
		return NULL;
	}
	if (len != NULL)
		*len = n;
	return buf;
}
