/* model.h - the report as a jansson json_t shaped by schemas/report.schema.json:
 * skeletons with zero-filled series, setters for what the queries find, and
 * the index.json of a multi-link run. Renderers read only this model. */
#ifndef LP_REPORTS_MODEL_H
#define LP_REPORTS_MODEL_H

#include <jansson.h>
#include <stddef.h>

/* The breakdown dimensions, in report order (link_day_dim.dimension names). */
extern const char *const model_dims[];
#define MODEL_NDIMS 10

/* The index of dimension name in model_dims, -1 when it is not one. */
int model_dim_index(const char *name);

/* What every report of one run shares. Strings are borrowed. days/hours are
 * the labels of the zero-filled series (hours NULL when the range is longer
 * than 7 days); both arrays are borrowed and copied into each report. */
struct model_range {
	const char *from, *to, *tz;
	int exclude_bots;
	long long top_n;
	const json_t *days;   /* array of "YYYY-MM-DD" */
	const json_t *hours;  /* array of RFC 3339 hour starts, or NULL */
	/* model_zero_series of days and hours (or NULL): every report's series
	 * starts as references to these shared all-zero entries and gets an
	 * object of its own for an entry only when a figure is set in it (most
	 * days of most links have no visits). Borrowed; never modified. */
	const json_t *zero_days, *zero_hours;
};

/* All-zero series entries { key: label, visits: 0, uniques: 0 [, bot_visits:
 * 0 when bots] }, one per label. Caller owns the array. */
json_t *model_zero_series(const json_t *labels, const char *key, int bots);

/* One link's descriptive fields (borrowed). tags_json is a JSON array text. */
struct model_link {
	const char *code, *short_url, *long_url, *created_at, *tags_json;
	int deleted;
	long long all_time, all_time_bots;
};

/* New report skeleton for one link (zero totals, zero-filled series, empty
 * top lists). Caller owns the result (json_decref). NULL on bad tags_json. */
json_t *model_new_link(const struct model_link *l, const struct model_range *r);

/* New combined report for a tag; codes is stolen (array of strings). */
json_t *model_new_tag(const char *tag, json_t *codes, long long all_time,
                      long long all_time_bots, const struct model_range *r);

/* Series and totals setters. kind: 'd' daily (idx into days), 'h' hourly
 * (idx into hours), 't' totals. first/last are RFC 3339 or NULL. Out-of-range
 * idx is ignored. */
void model_set_counts(json_t *rep, int kind, long long idx, long long visits,
                      long long bots, const char *first, const char *last);
void model_set_uniques(json_t *rep, int kind, long long idx, long long uniques);
/* Overrides totals.first_visit / last_visit (NULL = null). */
void model_set_first_last(json_t *rep, const char *first, const char *last);

/* Appends one top-N entry; value "" means unknown (null). */
void model_top_add(json_t *rep, const char *dim, const char *value, long long visits,
                   long long bots);

/* Totals of a report (0 when absent). */
long long model_total(const json_t *rep, const char *key);

/* index.json: { range, generated_at, links: [...], combined? }. Caller owns it. */
json_t *model_index_new(const struct model_range *r);
void model_index_add(json_t *index, const json_t *rep, const char *file);
void model_index_set_combined(json_t *index, const json_t *rep, const char *file);

#endif
