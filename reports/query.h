/* query.h - reads PostgreSQL for reports: rollups first (link_hour summed to
 * local days, link_day_dim over whole UTC days), visit_record only for the
 * parts of a range no rollup can answer. All SQL is parameterised. */
#ifndef LP_REPORTS_QUERY_H
#define LP_REPORTS_QUERY_H

#include "model.h"

#include <jansson.h>
#include <stddef.h>

struct query;

/* Connects, sets the session time zone to tz (an unknown zone fails with
 * "unknown time zone"), detects hll. from/to are validated YYYY-MM-DD or NULL
 * (defaults: to = today in tz, from = to - 29 days). Returns NULL with errstr;
 * *bad_input is set to 1 when the fault is the caller's (zone, from > to). */
struct query *query_open(const char *dsn, const char *tz, const char *from, const char *to,
                         int exclude_bots, long long top_n, const char *base_url,
                         int *bad_input, char *errstr, size_t errstr_size);
void query_close(struct query *q);

/* The run's range (days, hours when 7 days or less); owned by q. */
const struct model_range *query_range(const struct query *q);

/* url_link.id of code: 1 found, 0 unknown, -1 error. */
int query_link_id(struct query *q, const char *code, long long *id,
                  char *errstr, size_t errstr_size);

/* Link ids, ordered by code: tagged with tag (tag != NULL), or every link
 * with visits in the range (include_empty: every link). *ids is malloc'ed
 * (caller frees); *n may be 0. */
int query_link_ids(struct query *q, const char *tag, int include_empty, long long **ids,
                   size_t *n, char *errstr, size_t errstr_size);

/* One report per id into out[0..n) (caller owns each; out[i] stays NULL for
 * an id that no longer exists). n is best kept to a few hundred per call. */
int query_reports(struct query *q, const long long *ids, size_t n, json_t **out,
                  char *errstr, size_t errstr_size);

/* The combined report of ids for tag; caller owns it. NULL with errstr. */
json_t *query_combined(struct query *q, const char *tag, const long long *ids, size_t n,
                       char *errstr, size_t errstr_size);

#endif
