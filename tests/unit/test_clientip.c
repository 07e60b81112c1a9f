/* test_clientip - X-Forwarded-For trust rules from tests/data/clientip_cases.txt,
 * plus the trusted_proxies parser's refusals and IPv4 text against inet_ntop. */
#include "../../redirector/clientip.h"
#include "unit.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *
trim(char *s)
{
	char *e;

	while (*s == ' ' || *s == '\t')
		s++;
	e = s + strlen(s);
	while (e > s && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\n'))
		*--e = '\0';
	return s;
}

int
main(void)
{
	FILE *f = fopen("tests/data/clientip_cases.txt", "r");
	char line[1024], errstr[256], out[CLIENTIP_MAX];
	int lineno = 0, cases = 0;
	static const char *const bad[] = { "10.0.0.0/33", "1.2.3", "::1/129", "10.0.0.0/",
	    "10.0.0.0/8x", "example.com" };

	CHECK(f != NULL, "cannot open tests/data/clientip_cases.txt");
	while (f != NULL && fgets(line, sizeof(line), f) != NULL) {
		char *field[4], *p = line;
		struct clientip *c;
		int n = 0;

		lineno++;
		if (line[0] == '#' || line[0] == '\n')
			continue;
		while (n < 4 && (field[n] = strsep(&p, "|")) != NULL)
			field[n] = trim(field[n]), n++;
		CHECK(n == 4, "line %d: expected 4 fields", lineno);
		if (n != 4)
			continue;
		c = clientip_new(strcmp(field[0], "-") == 0 ? "" : field[0], errstr, sizeof(errstr));
		CHECK(c != NULL, "line %d: %s", lineno, errstr);
		if (c == NULL)
			continue;
		clientip_resolve_text(c, field[1], strcmp(field[2], "-") == 0 ? NULL : field[2], out);
		CHECK(strcmp(out, field[3]) == 0, "line %d: peer %s xff \"%s\": expected %s, got %s",
		    lineno, field[1], field[2], field[3], out);
		clientip_free(c);
		cases++;
	}
	if (f != NULL)
		fclose(f);
	CHECK(cases >= 20, "only %d cases read", cases);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct clientip *c = clientip_new(bad[i], errstr, sizeof(errstr));

		CHECK(c == NULL, "\"%s\" accepted as a CIDR", bad[i]);
		CHECK(c != NULL || strstr(errstr, "trusted_proxies") != NULL, "error names the setting: %s",
		    errstr);
		clientip_free(c);
	}
	/* every octet value in every position (odd multipliers permute 0..255),
	 * against inet_ntop */
	{
		struct clientip *c = clientip_new("", errstr, sizeof(errstr));
		char text[INET_ADDRSTRLEN], want[INET_ADDRSTRLEN];
		int wrong = 0;

		CHECK(c != NULL, "%s", errstr);
		for (int v = 0; c != NULL && v < 256; v++) {
			unsigned char b[4] = { (unsigned char)v, (unsigned char)(255 - v),
			    (unsigned char)(v * 7), (unsigned char)(v * 5 + 3) };

			inet_ntop(AF_INET, b, want, sizeof(want));
			snprintf(text, sizeof(text), "%u.%u.%u.%u", b[0], b[1], b[2], b[3]);
			clientip_resolve_text(c, text, NULL, out);
			wrong += strcmp(out, want) != 0;
			CHECK(strcmp(out, want) == 0, "%s: expected %s, got %s", text, want, out);
		}
		CHECK(wrong == 0, "%d of 256 IPv4 addresses printed wrong", wrong);
		clientip_free(c);
	}
	printf("%d XFF cases\n", cases);
	return unit_done("test_clientip");
}
