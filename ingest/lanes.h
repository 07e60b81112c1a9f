/* lanes.h - which loading lane takes which partition: the partitions with the
 * most messages to catch up on are placed first, each in the lane with the
 * least work so far, so that a backlog splits evenly and the lanes finish it
 * together. */
#ifndef LP_INGEST_LANES_H
#define LP_INGEST_LANES_H

#include <stdint.h>

/* Fills lane[i] (0..nlanes-1) for the n partitions whose messages to catch up
 * on are backlog[i] (negative counts as 0): largest backlog first (ties: the
 * lower partition), each to the lane with the smallest total so far (ties:
 * fewer partitions, then the lower lane). With no backlog anywhere the
 * partitions alternate. lane_backlog[k] and lane_count[k] (nlanes each) get
 * lane k's total backlog and partitions. The arrays are the caller's.
 * Returns 0, or -1 when out of memory (lane untouched). */
int lanes_plan(const int32_t *partition, const int64_t *backlog, int n, int nlanes, int *lane,
               int64_t *lane_backlog, int *lane_count);

#endif
