/* monotime.h - timed waits on CLOCK_MONOTONIC: a condition variable whose
 * deadlines are monotonic, so a wall clock stepped back (an NTP step, a bad
 * RTC) does not stretch a wait by the step. */
#ifndef LP_MONOTIME_H
#define LP_MONOTIME_H

#include <pthread.h>
#include <time.h>

/* pthread_cond_init with CLOCK_MONOTONIC for pthread_cond_timedwait. 0 or
 * an error number. */
int monotime_cond_init(pthread_cond_t *cond);

/* *ts = now on CLOCK_MONOTONIC + ms: a deadline for a condition variable
 * from monotime_cond_init. */
void monotime_deadline(struct timespec *ts, long long ms);

#endif
