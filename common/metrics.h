/* metrics.h - a Prometheus registry: counters, gauges (set, or computed by a
 * callback at scrape time) and fixed-bucket histograms, with up to two labels,
 * updated lock-free (C11 atomics) and rendered in text exposition format 0.0.4. */
#ifndef LP_METRICS_H
#define LP_METRICS_H

#include <stddef.h>
#include <stdint.h>

#define METRICS_MAX_LABELS 2
#define METRICS_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

enum metrics_type { METRICS_COUNTER, METRICS_GAUGE, METRICS_HISTOGRAM };

struct metrics;        /* a registry */
struct metrics_family; /* one metric name: type, help, label names */
struct metrics_series; /* one set of label values of a family: the values */

/* Latency buckets in seconds, 0.5 ms .. 10 s (14 bounds). */
extern const double metrics_latency_buckets[];
extern const size_t metrics_latency_nbuckets;

/* A new empty registry, owned by the caller (metrics_free). NULL on OOM. */
struct metrics *metrics_new(void);
/* Frees the registry with every family and series it holds. */
void metrics_free(struct metrics *m);

/* Registers a family. name must match [a-zA-Z_:][a-zA-Z0-9_:]* and be new in
 * the registry; labels is NULL or "" (none), "status" or "topic,partition"
 * (at most METRICS_MAX_LABELS, not "le", not starting with "__"). Strings are
 * copied. The family belongs to the registry. NULL with errstr on error.
 * Thread-safe; normally done once at start. */
struct metrics_family *metrics_counter(struct metrics *m, const char *name, const char *help,
                                       const char *labels, char *errstr, size_t errstr_size);
struct metrics_family *metrics_gauge(struct metrics *m, const char *name, const char *help,
                                     const char *labels, char *errstr, size_t errstr_size);
/* bounds: nbounds finite, strictly increasing upper bounds (copied); the
 * +Inf bucket is implicit. */
struct metrics_family *metrics_histogram(struct metrics *m, const char *name, const char *help,
                                         const char *labels, const double *bounds,
                                         size_t nbounds, char *errstr, size_t errstr_size);

/* The series of family f for these label values (one per label name, in
 * order; NULL for a family without labels or for unused ones), created on
 * first use and owned by the registry. Finding an existing series takes no
 * lock; keep the pointer for hot paths. NULL on OOM or when a value the
 * family needs is NULL. */
struct metrics_series *metrics_series(struct metrics_family *f, const char *v1, const char *v2);

/* Counters: add to the total (lock-free). */
void metrics_inc(struct metrics_series *s);
void metrics_add(struct metrics_series *s, uint64_t n);

/* Gauges: set or add to the value (lock-free). */
void metrics_set(struct metrics_series *s, double v);
void metrics_gauge_add(struct metrics_series *s, double delta);
/* Gauges: the value is fn(arg) at each scrape instead (fn runs on the
 * scraping thread, under the registry lock; it must not call metrics_*
 * registration functions). arg is borrowed and must outlive the registry or
 * a later metrics_set_fn(s, NULL, NULL). */
void metrics_set_fn(struct metrics_series *s, double (*fn)(void *arg), void *arg);

/* Counters whose total another module keeps: sets the counter to total (a
 * value that only grows), e.g. from a collect hook (lock-free). */
void metrics_counter_set(struct metrics_series *s, uint64_t total);

/* Adds a hook run at the start of every metrics_render, before anything is
 * read, one scrape at a time: it copies a module's own counters into series
 * (metrics_counter_set, metrics_set) from one consistent snapshot. It may
 * create series (metrics_series) but not families. arg is borrowed and must
 * outlive the registry. At most METRICS_MAX_HOOKS hooks; -1 beyond. */
#define METRICS_MAX_HOOKS 8
int metrics_on_collect(struct metrics *m, void (*fn)(void *arg), void *arg);

/* Histograms: counts v into the first bucket whose bound is >= v (lock-free). */
void metrics_observe(struct metrics_series *s, double v);

/* Current value: counter total, gauge value (callback called), or for a
 * histogram the number of observations. */
double metrics_value(struct metrics_series *s);
/* Histogram sum of observations (0 for other types). */
double metrics_hist_sum(struct metrics_series *s);

/* Renders every family in registration order, series in creation order, as
 * Prometheus text format 0.0.4 (# HELP, # TYPE, escaped label values).
 * Returns a NUL-terminated malloc'd buffer the caller frees, its length in
 * *len (may be NULL); NULL on OOM. */
char *metrics_render(struct metrics *m, size_t *len);

#endif
