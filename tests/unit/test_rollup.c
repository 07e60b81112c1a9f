/* test_rollup.c - ingest/rollup.c against tests/data/rollup_cases.txt: each
 * case's rollup input rows (as batch.c writes them) aggregate to exactly the
 * listed link_day_dim_batch elements, link_hour rows (with their distinct
 * human clients) and orphan_day rows; the keep mask leaves rows out. Output
 * order is free, so both sides are compared as sorted, decoded tuples. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../ingest/batch.h"
#include "../../ingest/rollup.h"
#include "unit.h"

#define CASES "tests/data/rollup_cases.txt"
#define MAXT 512      /* tuples per side of a case */
#define SEP "\x1f"    /* joins a tuple's decoded fields */

struct tuples {
	char *t[MAXT];
	int n;
};

static void
add(struct tuples *ts, const char *s)
{
	if (ts->n < MAXT)
		ts->t[ts->n++] = strdup(s);
}

static int
cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static void
clear(struct tuples *ts)
{
	for (int i = 0; i < ts->n; i++)
		free(ts->t[i]);
	ts->n = 0;
}

/* Decodes a COPY text field in place (\\ \t \n \r). */
static void
copy_unescape(char *s)
{
	char *w = s;

	for (char *r = s; *r != '\0'; r++) {
		if (*r == '\\' && r[1] != '\0') {
			r++;
			*w++ = *r == 't' ? '\t' : *r == 'n' ? '\n' : *r == 'r' ? '\r' : *r;
		} else {
			*w++ = *r;
		}
	}
	*w = '\0';
}

/* Parses the array literal s ({a,"b\"c"}) into at most max elements, each
 * decoded in a buffer of its own (caller frees). Returns the count or -1. */
static int
parse_array(const char *s, char **el, int max)
{
	int n = 0;

	if (*s++ != '{')
		return -1;
	if (*s == '}')
		return 0;
	for (;;) {
		char buf[1024];
		size_t k = 0;

		if (*s == '"') {
			for (s++; *s != '\0' && *s != '"'; s++) {
				if (*s == '\\' && s[1] != '\0')
					s++;
				if (k + 1 < sizeof(buf))
					buf[k++] = *s;
			}
			if (*s++ != '"')
				return -1;
		} else {
			while (*s != '\0' && *s != ',' && *s != '}' && k + 1 < sizeof(buf))
				buf[k++] = *s++;
		}
		buf[k] = '\0';
		if (n >= max)
			return -1;
		el[n++] = strdup(buf);
		if (*s == '}')
			return n;
		if (*s++ != ',')
			return -1;
	}
}

/* Tuples of one output of rollup_build: "dim"/"hour"/"orphan" lines. */
static void
decode_output(const char *kind, const struct batch_buf *o, struct tuples *ts, const char *where)
{
	char *text = strndup(o->data ? o->data : "", o->len), *save = NULL;

	for (char *line = strtok_r(text, "\n", &save); line != NULL; line = strtok_r(NULL, "\n", &save)) {
		char *f[8], tuple[4096];
		int n = unit_split_tabs(line, f, 8);

		for (int i = 0; i < n; i++)
			copy_unescape(f[i]);
		if (strcmp(kind, "dim") == 0) {
			char *d[64], *v[64], *c[64];
			int nd, nv, nc;

			CHECK(n == 6, "%s: day_dim row with %d fields", where, n);
			if (n != 6)
				continue;
			nd = parse_array(f[3], d, 64);
			nv = parse_array(f[4], v, 64);
			nc = parse_array(f[5], c, 64);
			CHECK(nd > 0 && nd == nv && nv == nc, "%s: arrays %d/%d/%d", where, nd, nv, nc);
			for (int i = 0; i < nd && nd == nv && nv == nc; i++) {
				snprintf(tuple, sizeof(tuple), "dim" SEP "%s" SEP "%s" SEP "%s" SEP "%s" SEP "%s" SEP "%s",
				    f[0], f[1], f[2], d[i], v[i], c[i]);
				add(ts, tuple);
			}
			for (int i = 0; i < nd; i++)
				free(d[i]);
			for (int i = 0; i < nv; i++)
				free(v[i]);
			for (int i = 0; i < nc; i++)
				free(c[i]);
		} else if (strcmp(kind, "hour") == 0) {
			char *cl[64], joined[2048] = "";
			int ncl;

			CHECK(n == 7, "%s: hour row with %d fields", where, n);
			if (n != 7 || (ncl = parse_array(f[6], cl, 64)) < 0)
				continue;
			qsort(cl, (size_t)ncl, sizeof(cl[0]), cmp);
			for (int i = 0; i < ncl; i++) {
				if (i)
					strcat(joined, ",");
				strncat(joined, cl[i], sizeof(joined) - strlen(joined) - 1);
				free(cl[i]);
			}
			snprintf(tuple, sizeof(tuple), "hour" SEP "%s" SEP "%s" SEP "%s" SEP "%s" SEP "%s" SEP "%s" SEP "%s",
			    f[0], f[1], f[2], f[3], f[4], f[5], joined);
			add(ts, tuple);
		} else {
			CHECK(n == 4, "%s: orphan row with %d fields", where, n);
			if (n != 4)
				continue;
			snprintf(tuple, sizeof(tuple), "orphan" SEP "%s" SEP "%s" SEP "%s" SEP "%s",
			    f[0], f[1], f[2], f[3]);
			add(ts, tuple);
		}
	}
	free(text);
}

/* Appends one roll row (15 plain fields, COPY-escaped here as batch.c does;
 * "\N" in the file: NULL) to b. */
static void
add_roll(struct batch *b, char **f, int n, const char *where)
{
	CHECK(n == 15, "%s: a roll row needs 15 fields, has %d", where, n);
	if (n != 15)
		return;
	if (b->rows == b->row_cap) {
		b->row_cap = b->row_cap ? 2 * b->row_cap : 16;
		b->row = realloc(b->row, b->row_cap * sizeof(*b->row));
	}
	memset(&b->row[b->rows], 0, sizeof(b->row[0]));
	b->row[b->rows++].roll_off = b->roll.len;
	for (int i = 0; i < 15; i++) {
		int null = strcmp(f[i], "\\N") == 0;
		long len = null ? 0 : unit_unescape(f[i]);

		CHECK(len >= 0, "%s: bad escape in field %d", where, i + 1);
		batch_put_text(&b->roll, null ? NULL : f[i], len < 0 ? 0 : (size_t)len);
	}
	b->roll.data[b->roll.len - 1] = '\n'; /* the last tab ends the row */
}

static void
run_case(struct rollup *r, struct batch *b, const unsigned char *keep, struct tuples *want,
         const char *where)
{
	struct tuples got = { .n = 0 };

	CHECK(rollup_build(r, b, keep) == 0, "%s: rollup_build failed", where);
	decode_output("dim", rollup_day_dim(r), &got, where);
	decode_output("hour", rollup_hour(r), &got, where);
	decode_output("orphan", rollup_orphan(r), &got, where);
	qsort(got.t, (size_t)got.n, sizeof(got.t[0]), cmp);
	qsort(want->t, (size_t)want->n, sizeof(want->t[0]), cmp);
	CHECK(got.n == want->n, "%s: %d tuples, expected %d", where, got.n, want->n);
	for (int i = 0; i < got.n && i < want->n; i++)
		CHECK_STR(got.t[i], want->t[i], where);
	if (got.n != want->n)
		for (int i = 0; i < got.n; i++)
			fprintf(stderr, "  got %s\n", got.t[i]);
	clear(&got);
}

int
main(void)
{
	FILE *fp = fopen(CASES, "r");
	struct rollup *r = rollup_new();
	struct batch b;
	struct tuples want = { .n = 0 };
	unsigned char keep[256];
	int have_keep = 0, ncases = 0, lineno = 0;
	char *line = NULL, where[160], name[96] = "";
	size_t cap = 0;

	CHECK(fp != NULL, "cannot open %s (run from the repository root)", CASES);
	CHECK(r != NULL, "rollup_new");
	if (fp == NULL || r == NULL)
		return 1;
	batch_init(&b);
	while (getline(&line, &cap, fp) != -1) {
		char *f[16];
		int n;

		lineno++;
		line[strcspn(line, "\n")] = '\0';
		if (line[0] == '#' || line[0] == '\0')
			continue;
		n = unit_split_tabs(line, f, 16);
		snprintf(where, sizeof(where), "%s:%d (%s)", CASES, lineno, name);
		if (strcmp(f[0], "case") == 0 && n == 2) {
			snprintf(name, sizeof(name), "%s", f[1]);
			batch_reset(&b);
			clear(&want);
			have_keep = 0;
		} else if (strcmp(f[0], "roll") == 0) {
			add_roll(&b, f + 1, n - 1, where);
		} else if (strcmp(f[0], "keep") == 0 && n == 2) {
			for (size_t i = 0; i < b.rows && i < sizeof(keep); i++)
				keep[i] = f[1][i] == '1';
			CHECK(strlen(f[1]) == b.rows, "%s: keep needs one digit per row", where);
			have_keep = 1;
		} else if ((strcmp(f[0], "dim") == 0 && n == 7) || (strcmp(f[0], "hour") == 0 && n == 8) ||
		    (strcmp(f[0], "orphan") == 0 && n == 5)) {
			char tuple[4096] = "";

			for (int i = 0; i < n; i++) {
				CHECK(unit_unescape(f[i]) >= 0, "%s: bad escape", where);
				if (i)
					strcat(tuple, SEP);
				strncat(tuple, f[i], sizeof(tuple) - strlen(tuple) - 1);
			}
			add(&want, tuple);
		} else if (strcmp(f[0], "end") == 0) {
			run_case(r, &b, have_keep ? keep : NULL, &want, where);
			ncases++;
		} else {
			CHECK(0, "%s: unknown line", where);
		}
	}
	CHECK(ncases >= 4, "only %d cases in %s", ncases, CASES);
	clear(&want);
	free(line);
	fclose(fp);
	batch_free(&b);
	rollup_free(r);
	return unit_done("test_rollup");
}
