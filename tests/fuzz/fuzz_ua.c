/* fuzz_ua.c - libFuzzer target: arbitrary bytes into the user-agent parser,
 * alone and spliced into typical user agents (to reach deep regex paths).
 * Checks cached == uncached, bounded fields, and now and then that the
 * literal pre-filter skipped no regex that matches. Regexes: $LP_UAP_REGEXES
 * (default /usr/share/uap-core/regexes.yaml), loaded once. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ua.h"
#include "ua_int.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct ua_parser *parser;

static const char *const templates[] = {
	"Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) "
	"Chrome/120.0.0.0 Safari/537.36",
	"Mozilla/5.0 (Linux; Android 13; SM-S911B Build/TP1A.220624.014) AppleWebKit/537.36 "
	"(KHTML, like Gecko) Chrome/120.0.0.0 Mobile Safari/537.36",
	"Mozilla/5.0 (iPhone; CPU iPhone OS 17_1 like Mac OS X) AppleWebKit/605.1.15 "
	"(KHTML, like Gecko) Version/17.1 Mobile/15E148 Safari/604.1",
	"Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)",
	"Mozilla/5.0 (Linux; U; Android 4.0.3; ko-kr; LG-L160L Build/IML74K) "
	"AppleWebKit/534.30 (KHTML, like Gecko) Version/4.0 Mobile Safari/534.30",
	"Dalvik/2.1.0 (Linux; U; Android 9; Redmi Note 7 MIUI/V11.0.3.0)",
	"Mozilla/5.0 (SMART-TV; Linux; Tizen 5.0) AppleWebKit/537.36 (KHTML, like Gecko) "
	"SamsungBrowser/2.2 Chrome/63.0.3239.84 TV Safari/537.36",
	"Podcasts/1555.2.1 CFNetwork/1240.0.4 Darwin/20.5.0",
};

static void
fail(const char *what, const uint8_t *data, size_t size)
{
	fprintf(stderr, "fuzz_ua: %s (input of %zu bytes)\n", what, size);
	(void)data;
	abort();
}

static void
check_result(const struct ua_result *r, const uint8_t *data, size_t size)
{
	if (memchr(r->browser.family, '\0', sizeof(r->browser.family)) == NULL ||
	    memchr(r->os.family, '\0', sizeof(r->os.family)) == NULL ||
	    memchr(r->device.family, '\0', sizeof(r->device.family)) == NULL ||
	    memchr(r->device.model, '\0', sizeof(r->device.model)) == NULL ||
	    memchr(r->device.brand, '\0', sizeof(r->device.brand)) == NULL ||
	    memchr(r->browser.patch_minor, '\0', sizeof(r->browser.patch_minor)) == NULL)
		fail("unterminated field", data, size);
	if (r->browser.family[0] == '\0' || r->os.family[0] == '\0' || r->device.family[0] == '\0')
		fail("empty family", data, size);
	if (r->device_type == NULL || strcmp(r->device_type, ua_device_type_name(r->type)) != 0 ||
	    r->is_bot != (r->type == UA_TYPE_BOT))
		fail("inconsistent type", data, size);
}

static int
same(const struct ua_result *a, const struct ua_result *b)
{
	return strcmp(a->browser.family, b->browser.family) == 0 &&
	    strcmp(a->browser.major, b->browser.major) == 0 &&
	    strcmp(a->browser.minor, b->browser.minor) == 0 &&
	    strcmp(a->browser.patch, b->browser.patch) == 0 &&
	    strcmp(a->browser.patch_minor, b->browser.patch_minor) == 0 &&
	    strcmp(a->os.family, b->os.family) == 0 && strcmp(a->os.major, b->os.major) == 0 &&
	    strcmp(a->os.minor, b->os.minor) == 0 && strcmp(a->os.patch, b->os.patch) == 0 &&
	    strcmp(a->os.patch_minor, b->os.patch_minor) == 0 &&
	    strcmp(a->device.family, b->device.family) == 0 &&
	    strcmp(a->device.brand, b->device.brand) == 0 &&
	    strcmp(a->device.model, b->device.model) == 0 && a->type == b->type &&
	    a->is_bot == b->is_bot;
}

static void
one(const char *s, size_t n, const uint8_t *data, size_t size, int deep)
{
	struct ua_result a, b;
	char msg[1024];

	if (ua_parse(parser, s, n, &a) != 0 || ua_parse_nocache(parser, s, n, &b) != 0)
		fail("ua_parse failed", data, size);
	check_result(&a, data, size);
	if (!same(&a, &b))
		fail("cached and uncached results differ", data, size);
	if (deep) {
		int bad = ua_prefilter_check(parser, s, n, msg, sizeof(msg));

		if (bad != 0) {
			fprintf(stderr, "fuzz_ua: pre-filter: %s\n", msg);
			fail("pre-filter skipped a matching regex", data, size);
		}
	}
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static char buf[UA_MAX_INPUT * 2];
	const char *t;
	size_t tn, at, n;
	/* the exhaustive pre-filter check runs every regex: one input in 16 */
	int deep = size > 0 && (data[size - 1] & 15) == 0;

	if (parser == NULL) {
		const char *path = getenv("LP_UAP_REGEXES");
		char err[512];

		parser = ua_parser_new(path && *path ? path : UA_DEFAULT_REGEXES, 256, err,
		    sizeof(err));
		if (parser == NULL) {
			fprintf(stderr, "fuzz_ua: %s\n", err);
			abort();
		}
	}
	one((const char *)data, size, data, size, deep);

	/* spliced: template chosen by the first byte, the rest inserted at a
	 * point chosen by the second */
	if (size >= 2) {
		t = templates[data[0] % (sizeof(templates) / sizeof(templates[0]))];
		tn = strlen(t);
		at = data[1] % (tn + 1);
		n = size - 2 < sizeof(buf) - tn ? size - 2 : sizeof(buf) - tn;
		memcpy(buf, t, at);
		memcpy(buf + at, data + 2, n);
		memcpy(buf + at + n, t + at, tn - at);
		one(buf, tn + n, data, size, deep);
	}
	return 0;
}
