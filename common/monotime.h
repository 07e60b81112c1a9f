/* monotime.h - timed waits on CLOCK_MONOTONIC: a condition variable whose
 * deadlines are monotonic, so a wall clock stepped back (an NTP step, a bad
 * RTC) does not stretch a wait by the step; both clocks in ms. */
#ifndef LP_MONOTIME_H
#define LP_MONOTIME_H

#include <pthread.h>
#include <time.h>

/* pthread_cond_init with CLOCK_MONOTONIC for pthread_cond_timedwait.
 * Returns 0, or -1 when the clock cannot be set (cond is then initialised
 * with the defaults, so that pthread_cond_destroy may be called on it, but
 * must not be waited on with monotime_deadline: fail the constructor). */
int monotime_cond_init(pthread_cond_t *cond);

/* *ts = now on CLOCK_MONOTONIC + ms: a deadline for a condition variable
 * from monotime_cond_init. */
void monotime_deadline(struct timespec *ts, long long ms);

/* CLOCK_MONOTONIC now, in ms. */
long long monotime_ms(void);

/* The wall clock (CLOCK_REALTIME) now, in ms since the Unix epoch. */
long long monotime_wall_ms(void);

#endif
