/* unit.h - the smallest test harness: CHECK counts, failures say what was
 * expected and what came, unit_done prints "name: N passed, N failed". */
#ifndef LP_UNIT_H
#define LP_UNIT_H

#include <stdio.h>
#include <stdlib.h>
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

/* Decodes the escapes of the tests/data case files in place: \t \n \r \\
 * and \xHH. Returns the decoded length, or -1 on any other escape. */
static inline long
unit_unescape(char *s)
{
	char *r = s, *w = s;

	while (*r != '\0') {
		if (*r != '\\') {
			*w++ = *r++;
			continue;
		}
		switch (r[1]) {
		case 't': *w++ = '\t'; r += 2; break;
		case 'n': *w++ = '\n'; r += 2; break;
		case 'r': *w++ = '\r'; r += 2; break;
		case '\\': *w++ = '\\'; r += 2; break;
		case 'x': {
			char hex[3] = { 0 }, *end;

			if (r[2] == '\0' || r[3] == '\0')
				return -1;
			hex[0] = r[2];
			hex[1] = r[3];
			*w++ = (char)strtoul(hex, &end, 16);
			if (*end != '\0')
				return -1;
			r += 4;
			break;
		}
		default:
			return -1;
		}
	}
	*w = '\0';
	return (long)(w - s);
}

/* Splits line on tabs in place into at most max fields; returns the count. */
static inline int
unit_split_tabs(char *line, char **f, int max)
{
	int n = 0;

	f[n++] = line;
	while (n < max && (line = strchr(line, '\t')) != NULL) {
		*line++ = '\0';
		f[n++] = line;
	}
	return n;
}

/* Calls fn for each case line of the data file path (blank lines and "#"
 * comments skipped) with its tab-separated fields, at most max, and
 * "path:line" for messages. Returns the number of cases, or -1 (counted as
 * a failure) when the file cannot be opened: run from the repository root. */
typedef void (*unit_case_fn)(char **fld, int n, const char *where, void *ctx);

static inline int
unit_each_case(const char *path, int max, unit_case_fn fn, void *ctx)
{
	FILE *f = fopen(path, "r");
	char line[4096], where[256], *fld[16];
	int lineno = 0, n = 0;

	CHECK(f != NULL, "cannot open %s (run from the repository root)", path);
	if (f == NULL)
		return -1;
	if (max > 16)
		max = 16;
	while (fgets(line, sizeof(line), f) != NULL) {
		lineno++;
		line[strcspn(line, "\n")] = '\0';
		if (line[0] == '#' || line[0] == '\0')
			continue;
		snprintf(where, sizeof(where), "%s:%d", path, lineno);
		fn(fld, unit_split_tabs(line, fld, max), where, ctx);
		n++;
	}
	fclose(f);
	return n;
}

static inline int
unit_done(const char *name)
{
	printf("%s: %d passed, %d failed\n", name, unit_passed, unit_failed);
	return unit_failed ? 1 : 0;
}

#endif
