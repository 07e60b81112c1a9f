/* eventid.c - snowflake ids: one atomic 64-bit word holds the last
 * (ms << 12 | sequence); a CAS loop advances it. */
#include "eventid.h"

#include <stdatomic.h>

static _Atomic uint64_t last;   /* (ms since epoch << 12) | sequence of the last id */
static uint64_t worker_bits;

void
eventid_init(int worker)
{
	if (worker < 0)
		worker = 0;
	worker_bits = (uint64_t)(worker & EVENTID_WORKER_MAX) << 12;
}

uint64_t
eventid_next(int64_t now_ms)
{
	uint64_t ms = now_ms > EVENTID_EPOCH_MS ? (uint64_t)(now_ms - EVENTID_EPOCH_MS) : 0;
	uint64_t want = ms << 12, old = atomic_load_explicit(&last, memory_order_relaxed), next;

	do {
		/* Same or earlier millisecond: the next sequence number (which
		 * carries into the millisecond after 4095). */
		next = want > old ? want : old + 1;
	} while (!atomic_compare_exchange_weak_explicit(&last, &old, next, memory_order_relaxed,
	    memory_order_relaxed));
	return ((next >> 12) << 22) | worker_bits | (next & 0xfff);
}

void
eventid_floor(int64_t floor_ms)
{
	uint64_t want, old = atomic_load_explicit(&last, memory_order_relaxed);

	if (floor_ms <= EVENTID_EPOCH_MS)
		return;
	want = (uint64_t)(floor_ms - EVENTID_EPOCH_MS) << 12;
	while (old < want && !atomic_compare_exchange_weak_explicit(&last, &old, want,
	    memory_order_relaxed, memory_order_relaxed))
		;
}

int64_t
eventid_last_ms(void)
{
	uint64_t v = atomic_load_explicit(&last, memory_order_relaxed);

	return v == 0 ? 0 : (int64_t)(v >> 12) + EVENTID_EPOCH_MS;
}

int64_t
eventid_ms(uint64_t id)
{
	return (int64_t)(id >> 22) + EVENTID_EPOCH_MS;
}

int
eventid_worker(uint64_t id)
{
	return (int)((id >> 12) & EVENTID_WORKER_MAX);
}

int
eventid_seq(uint64_t id)
{
	return (int)(id & 0xfff);
}
