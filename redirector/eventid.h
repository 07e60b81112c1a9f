/* eventid.h - 64-bit, unique, time-ordered visit event ids (snowflake layout:
 * ms since 2024-01-01 UTC << 22 | worker << 12 | sequence), lock-free. */
#ifndef LP_EVENTID_H
#define LP_EVENTID_H

#include <stdint.h>

#define EVENTID_EPOCH_MS 1704067200000LL /* 2024-01-01T00:00:00Z */
#define EVENTID_WORKER_MAX 1023

/* Sets this process's worker number (0..1023); every redirector sharing a
 * topic needs its own. Call before eventid_next. */
void eventid_init(int worker);

/* The next id. now_ms is the wall clock in ms since the Unix epoch. Ids are
 * strictly increasing within the process even when the clock steps back or
 * more than 4096 ids are taken in one millisecond (the id's time then runs
 * ahead of the clock until it catches up). Thread-safe. */
uint64_t eventid_next(int64_t now_ms);

/* Ids taken from now on have a time of at least floor_ms (ms since the Unix
 * epoch): a run whose clock is behind the last run's ids (a clock stepped
 * back across a restart) goes on after them instead of minting their ids
 * again. Thread-safe; it never moves the ids back. */
void eventid_floor(int64_t floor_ms);

/* The time of the last id taken, ms since the Unix epoch (0: none yet, and
 * no floor). */
int64_t eventid_last_ms(void);

/* The parts of an id (for tests and logs). */
int64_t eventid_ms(uint64_t id);
int eventid_worker(uint64_t id);
int eventid_seq(uint64_t id);

#endif
