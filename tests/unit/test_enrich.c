/* test_enrich.c - enrich_language against tests/data/language_cases.txt, and
 * enrich_referer_host against tests/data/referer_cases.txt:
 * each URL alone, again (from enrich.c's host cache), after every other URL
 * and in reverse order, next to thousands of distinct URLs that evict and
 * collide in the cache, at the cache's URL length limit and beyond, and up
 * to the event schema's 8192 characters. */
#include <stdlib.h>
#include <string.h>

#include "../../ingest/enrich.h"
#include "unit.h"

#define CASES "tests/data/referer_cases.txt"
#define LANG_CASES "tests/data/language_cases.txt"
#define MAXC 64

static char *url[MAXC], *want[MAXC];
static int ncases;

static void
check(struct enricher *e, const char *u, const char *w, const char *what)
{
	char host[256];

	memset(host, 'x', sizeof(host));
	enrich_referer_host(e, u, host, sizeof(host));
	CHECK(strcmp(host, w) == 0, "%s: %s: expected \"%s\", got \"%.255s\"", what, u, w, host);
}

/* Reads a two-field case file into in[]/out[]; returns the count. */
static int
load_cases(const char *path, char **in, char **out)
{
	FILE *fp = fopen(path, "r");
	char *line = NULL;
	size_t cap = 0;
	int n_cases = 0;

	CHECK(fp != NULL, "cannot open %s (run from the repository root)", path);
	if (fp == NULL)
		return 0;
	while (getline(&line, &cap, fp) != -1 && n_cases < MAXC) {
		char *f[3];
		int n;

		line[strcspn(line, "\n")] = '\0';
		if (line[0] == '#' || line[0] == '\0')
			continue;
		n = unit_split_tabs(line, f, 3);
		CHECK(n == 2, "%s: a case needs two fields, has %d", path, n);
		if (n != 2 || unit_unescape(f[0]) < 0 || unit_unescape(f[1]) < 0)
			continue;
		in[n_cases] = strdup(f[0]);
		out[n_cases++] = strdup(f[1]);
	}
	free(line);
	fclose(fp);
	return n_cases;
}

/* enrich_language against LANG_CASES. */
static void
test_language(void)
{
	char *hdr[MAXC], *lang[MAXC], got[64];
	int n = load_cases(LANG_CASES, hdr, lang);

	CHECK(n >= 10, "%s: only %d cases", LANG_CASES, n);
	for (int i = 0; i < n; i++) {
		memset(got, 'x', sizeof(got));
		enrich_language(hdr[i], got, sizeof(got));
		CHECK(strcmp(got, lang[i]) == 0, "Accept-Language \"%s\": expected \"%s\", got \"%.63s\"",
		    hdr[i], lang[i], got);
		free(hdr[i]);
		free(lang[i]);
	}
}

int
main(void)
{
	const char *city = getenv("LP_GEOIP_CITY"), *uap = getenv("LP_UAP_DIR");
	static char u[40000];
	char regexes[1024], err[512] = "", h[64], what[64];
	size_t n;
	struct enricher *e;

	snprintf(regexes, sizeof(regexes), "%s/regexes.yaml", uap ? uap : "/usr/share/uap-core");
	e = enrich_new(city ? city : "var/geoip/GeoLite2-City.mmdb", NULL, "en", regexes, 64, 16, err,
	    sizeof(err));
	CHECK(e != NULL, "enrich_new: %s", err);
	if (e == NULL)
		return unit_done("test_enrich");
	ncases = load_cases(CASES, url, want);
	CHECK(ncases >= 10, "%s: only %d cases", CASES, ncases);
	for (int i = 0; i < ncases; i++) {
		check(e, url[i], want[i], "first");
		check(e, url[i], want[i], "again");
	}
	for (int i = ncases - 1; i >= 0; i--)
		check(e, url[i], want[i], "reverse");
	/* distinct URLs: every cache slot taken and replaced several times */
	for (int round = 0; round < 2; round++)
		for (int i = 0; i < 3000; i++) {
			snprintf(u, sizeof(u), "https://H%d.Example/p?%d", i, round);
			snprintf(h, sizeof(h), "h%d.example", i);
			check(e, u, h, "many");
			if (i % 100 == 0)
				check(e, url[i / 100 % ncases], want[i / 100 % ncases], "among many");
		}
	/* around the cache's URL length limit (255 bytes cached, longer not) */
	for (size_t len = 250; len <= 260; len++) {
		size_t base = strlen("https://long.example/");

		memcpy(u, "https://long.example/", base);
		memset(u + base, 'a', len - base);
		u[len] = '\0';
		snprintf(what, sizeof(what), "length %zu", len);
		check(e, u, "long.example", what);
		check(e, u, "long.example", what);
	}
	/* the event schema allows 8192 characters, up to 4 bytes each */
	n = (size_t)sprintf(u, "https://x.example/");
	while (n < 8000) {
		memcpy(u + n, "\xc3\xa9", 2); /* U+00E9: 2 bytes, 1 character */
		n += 2;
	}
	u[n] = '\0';
	check(e, u, "x.example", "4,000 2-byte characters");
	memset(u, 'a', sizeof(u) - 1); /* over 4 x 8192 bytes: no host */
	u[sizeof(u) - 1] = '\0';
	memcpy(u, "https://x.example/", strlen("https://x.example/"));
	check(e, u, "", "over 32768 bytes");
	check(e, NULL, "", "NULL");
	check(e, "", "", "empty");
	enrich_free(e);
	test_language();
	for (int i = 0; i < ncases; i++) {
		free(url[i]);
		free(want[i]);
	}
	return unit_done("test_enrich");
}
