/* unit.h - the smallest test harness: CHECK counts, failures say what was
 * expected and what came, unit_done prints "name: N passed, N failed". */
#ifndef LP_UNIT_H
#define LP_UNIT_H

#include <stdio.h>
#include <string.h>

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

static inline int
unit_str_eq(const char *a, const char *b)
{
	return (a == NULL && b == NULL) || (a != NULL && b != NULL && strcmp(a, b) == 0);
}

#define CHECK_STR(got, want, what)                                             \
	do {                                                                   \
		const char *got_ = (got), *want_ = (want);                     \
		CHECK(unit_str_eq(got_, want_), "%s: expected \"%s\", got \"%s\"", \
		    (what), want_ ? want_ : "(null)", got_ ? got_ : "(null)");    \
	} while (0)

static inline int
unit_done(const char *name)
{
	printf("%s: %d passed, %d failed\n", name, unit_passed, unit_failed);
	return unit_failed ? 1 : 0;
}

#endif
