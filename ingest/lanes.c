/* lanes.c - spreads the assigned partitions over ingest's loading lanes by
 * their backlog (longest processing time first), so that after an outage or
 * on a first start both lanes have the same number of messages to load. */
#include "lanes.h"

#include <stdlib.h>

struct item {
	int64_t backlog;
	int32_t partition;
	int idx;
};

static int
by_backlog(const void *pa, const void *pb)
{
	const struct item *a = pa, *b = pb;

	if (a->backlog != b->backlog)
		return a->backlog > b->backlog ? -1 : 1;
	return (a->partition > b->partition) - (a->partition < b->partition);
}

int
lanes_plan(const int32_t *partition, const int64_t *backlog, int n, int nlanes, int *lane,
           int64_t *lane_backlog, int *lane_count)
{
	struct item *it;

	for (int k = 0; k < nlanes; k++) {
		lane_backlog[k] = 0;
		lane_count[k] = 0;
	}
	if (n <= 0 || nlanes <= 0)
		return 0;
	if ((it = calloc((size_t)n, sizeof(*it))) == NULL)
		return -1;
	for (int i = 0; i < n; i++) {
		it[i].backlog = backlog[i] > 0 ? backlog[i] : 0;
		it[i].partition = partition[i];
		it[i].idx = i;
	}
	qsort(it, (size_t)n, sizeof(*it), by_backlog);
	for (int i = 0; i < n; i++) {
		int best = 0;

		for (int k = 1; k < nlanes; k++)
			if (lane_backlog[k] < lane_backlog[best] ||
			    (lane_backlog[k] == lane_backlog[best] && lane_count[k] < lane_count[best]))
				best = k;
		lane[it[i].idx] = best;
		lane_backlog[best] += it[i].backlog;
		lane_count[best]++;
	}
	free(it);
	return 0;
}
