/* compactor.h - runs link_day_dim_compact() (migrations 0007 and 0008) every
 * interval on its own thread and PostgreSQL connection, so loading never
 * waits for it. */
#ifndef LP_COMPACTOR_H
#define LP_COMPACTOR_H

#include <stddef.h>

struct compactor;

/* Starts the thread; the first compaction runs interval_s after the start.
 * dsn is copied. NULL with errstr when the thread cannot start. The caller
 * owns the result: stop and free it with compactor_stop. */
struct compactor *compactor_start(const char *dsn, int interval_s, char *errstr,
                                  size_t errstr_size);

/* Cancels a compaction in progress (it rolls back; the sums are unchanged),
 * joins the thread, closes the connection and frees c. NULL is a no-op. */
void compactor_stop(struct compactor *c);

#endif
