/* test_errstr.c - errstr_utf8_clean and errstr_set against
 * tests/data/utf8_cases.txt: invalid UTF-8 becomes '?', valid text is left
 * as it is, and a message cut at errstr_size never ends inside a character.
 * Run from the repository root. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../common/errstr.h"
#include "unit.h"

#define CASES "tests/data/utf8_cases.txt"

static void
one_case(char **fld, int n, const char *where, void *ctx)
{
	size_t bad;

	(void)ctx;
	if (n != 3 || unit_unescape(fld[0]) < 0 || unit_unescape(fld[1]) < 0) {
		CHECK(0, "%s: wants input, output and a count, tab-separated", where);
		return;
	}
	bad = errstr_utf8_clean(fld[0]);
	CHECK_STR(fld[0], fld[1], where);
	CHECK(bad == strtoul(fld[2], NULL, 10), "%s: %zu replaced, want %s", where, bad, fld[2]);
}

static void
run_cases(void)
{
	int n = unit_each_case(CASES, 4, one_case, NULL);

	CHECK(n >= 20, "%s: only %d cases", CASES, n);
}

/* errstr_set cutting "é" * 40 at every buffer size: always valid UTF-8,
 * always the longest whole-character prefix (a cut character becomes one
 * '?' at most). */
static void
every_cut(void)
{
	char word[81], buf[90];

	for (int i = 0; i < 40; i++)
		memcpy(word + 2 * i, "\xc3\xa9", 2);
	word[80] = '\0';
	for (size_t size = 1; size <= sizeof(buf); size++) {
		size_t len, whole;

		errstr_set(buf, size, "%s", word);
		len = strlen(buf);
		whole = len - (len % 2);
		CHECK(errstr_utf8_clean(buf) == 0, "size %zu: not valid UTF-8", size);
		CHECK(memcmp(buf, word, whole) == 0 && (len == whole || buf[len - 1] == '?'),
		    "size %zu: \"%s\"", size, buf);
	}
	errstr_set(NULL, 10, "ignored");
	errstr_set(buf, 0, "ignored");
}

int
main(void)
{
	run_cases();
	every_cut();
	return unit_done("test_errstr");
}
