/* unit.h - the smallest test harness: CHECK counts, failures say what was
 * expected and what came, unit_done prints "name: N passed, N failed". */
#ifndef LP_UNIT_H
#define LP_UNIT_H

#include <stdio.h>

static int unit_passed, unit_failed;

#define CHECK(cond, ...)                                                       \
	do {                                                                   \
		if (cond) {                                                    \
			unit_passed++;                                         \
		} else {                                                       \
			unit_failed++;                                         \
			fprintf(stderr, "%s:%d: FAIL: ", __FILE__, __LINE__);  \
			fprintf(stderr, __VA_ARGS__);                          \
			fputc('\n', stderr);                                   \
		}                                                              \
	} while (0)

#define CHECK_STR(got, want, what)                                             \
	CHECK(((got) == NULL && (want) == NULL) ||                             \
	    ((got) != NULL && (want) != NULL && strcmp((got), (want)) == 0),   \
	    "%s: expected \"%s\", got \"%s\"", (what),                         \
	    (want) ? (want) : "(null)", (got) ? (got) : "(null)")

static inline int
unit_done(const char *name)
{
	printf("%s: %d passed, %d failed\n", name, unit_passed, unit_failed);
	return unit_failed ? 1 : 0;
}

#endif
