/* test_enrich.c - enrich_referer_host against tests/data/referer_cases.txt:
 * each URL alone, again (from enrich.c's host cache), after every other URL
 * and in reverse order, next to thousands of distinct URLs that evict and
 * collide in the cache, and at the cache's URL length limit and beyond. */
#include <stdlib.h>
#include <string.h>

#include "../../ingest/enrich.h"
#include "unit.h"

#define CASES "tests/data/referer_cases.txt"
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

static void
load_cases(void)
{
	FILE *fp = fopen(CASES, "r");
	char *line = NULL;
	size_t cap = 0;

	CHECK(fp != NULL, "cannot open %s (run from the repository root)", CASES);
	if (fp == NULL)
		return;
	while (getline(&line, &cap, fp) != -1 && ncases < MAXC) {
		char *f[3];
		int n;

		line[strcspn(line, "\n")] = '\0';
		if (line[0] == '#' || line[0] == '\0')
			continue;
		n = unit_split_tabs(line, f, 3);
		CHECK(n == 2, "%s: a case needs url and host, has %d fields", CASES, n);
		if (n != 2 || unit_unescape(f[0]) < 0 || unit_unescape(f[1]) < 0)
			continue;
		url[ncases] = strdup(f[0]);
		want[ncases++] = strdup(f[1]);
	}
	free(line);
	fclose(fp);
}

int
main(void)
{
	const char *city = getenv("LP_GEOIP_CITY"), *uap = getenv("LP_UAP_DIR");
	char regexes[1024], err[512] = "", u[9000], h[64], what[64];
	struct enricher *e;

	snprintf(regexes, sizeof(regexes), "%s/regexes.yaml", uap ? uap : "/usr/share/uap-core");
	e = enrich_new(city ? city : "var/geoip/GeoLite2-City.mmdb", NULL, "en", regexes, 64, 16, err,
	    sizeof(err));
	CHECK(e != NULL, "enrich_new: %s", err);
	if (e == NULL)
		return unit_done("test_enrich");
	load_cases();
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
	memset(u, 'a', sizeof(u) - 1); /* over 8192 bytes: no host */
	u[sizeof(u) - 1] = '\0';
	memcpy(u, "https://x.example/", strlen("https://x.example/"));
	check(e, u, "", "over 8192 bytes");
	check(e, NULL, "", "NULL");
	check(e, "", "", "empty");
	enrich_free(e);
	for (int i = 0; i < ncases; i++) {
		free(url[i]);
		free(want[i]);
	}
	return unit_done("test_enrich");
}
