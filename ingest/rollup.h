/* rollup.h - one batch's rollups computed in C from the rollup input rows of
 * the visits it inserts (batch.h BATCH_ROLL_FIELDS): link_day_dim_batch rows
 * (per link, day and is_bot, the dimension/value/visits arrays), per
 * link-hour counters with their distinct human client_ids, and orphan counts
 * per code and day, each a whole COPY binary stream (header, rows, trailer). */
#ifndef LP_INGEST_ROLLUP_H
#define LP_INGEST_ROLLUP_H

#include <stddef.h>

#include "batch.h"

struct rollup;

/* Columns of the three outputs, in COPY row order. */
#define ROLLUP_DAY_DIM_COLUMNS "url_link_id, day, is_bot, dimension, value, visits"
#define ROLLUP_HOUR_COLUMNS \
	"url_link_id, hour, visits, bot_visits, first_visit, last_visit, clients"
#define ROLLUP_ORPHAN_COLUMNS "unique_code, day, visits, bot_visits"

/* Returns an empty rollup the caller owns (rollup_free), or NULL (no memory). */
struct rollup *rollup_new(void);
void rollup_free(struct rollup *r);

/* Aggregates the roll rows i of b with keep[i] set (keep NULL: all) into r,
 * which is emptied first. Returns 0, or -1 when out of memory. r refers to
 * b's buffers until the next rollup_build. */
int rollup_build(struct rollup *r, const struct batch *b, const unsigned char *keep);

/* Each output (owned by r, valid until the next rollup_build): a whole COPY
 * stream in binary format (FORMAT binary). */
const struct batch_buf *rollup_day_dim(const struct rollup *r);
const struct batch_buf *rollup_hour(const struct rollup *r);
const struct batch_buf *rollup_orphan(const struct rollup *r);

#endif
