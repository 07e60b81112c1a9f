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
	if (a->partition != b->partition)
		return a->partition < b->partition ? -1 : 1;
	return a->idx - b->idx;
}

int
lanes_plan(const int32_t *partition, const int64_t *backlog, int n, int nlanes, int *lane)
{
	struct item *it;
	int64_t *load;
	int *count;

	if (n <= 0 || nlanes <= 0)
		return 0;
	it = calloc((size_t)n, sizeof(*it));
	load = calloc((size_t)nlanes, sizeof(*load));
	count = calloc((size_t)nlanes, sizeof(*count));
	if (it == NULL || load == NULL || count == NULL) {
		free(it);
		free(load);
		free(count);
		return -1;
	}
	for (int i = 0; i < n; i++) {
		it[i].backlog = backlog[i] > 0 ? backlog[i] : 0;
		it[i].partition = partition[i];
		it[i].idx = i;
	}
	qsort(it, (size_t)n, sizeof(*it), by_backlog);
	for (int i = 0; i < n; i++) {
		int best = 0;

		for (int k = 1; k < nlanes; k++)
			if (load[k] < load[best] || (load[k] == load[best] && count[k] < count[best]))
				best = k;
		lane[it[i].idx] = best;
		load[best] += it[i].backlog;
		count[best]++;
	}
	free(it);
	free(load);
	free(count);
	return 0;
}
