/* fuzz_event.c - libFuzzer: bytes into ingest's event_parse as they come, and
 * spliced as the user agent of a valid version 2 array and version 1 object.
 * An accepted event must satisfy the schema's bounds and survive a round trip:
 * dumped again as a version 2 array (jansson), it parses to the same fields. */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../ingest/event.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int
same_str(const char *a, const char *b)
{
	return (a == NULL && b == NULL) || (a != NULL && b != NULL && strcmp(a, b) == 0);
}

static json_t *
str_or_null(const char *s)
{
	return s ? json_string(s) : json_null();
}

/* Checks an accepted event; aborts (a fuzzer finding) when one is wrong. */
static void
check(const struct event *ev)
{
	json_t *arr, *root2;
	struct event ev2;
	char reason[256], *txt;
	int st = ev->status;

	if (ev->id < 1 || ev->ts < 0 || ev->ts > EVENT_TS_MAX || ev->code == NULL ||
	    ev->code_len == 0 || strlen(ev->code) != ev->code_len || ev->ip == NULL ||
	    (st != 301 && st != 302 && st != 307 && st != 308 && st != 404 && st != 410))
		abort();
	arr = json_pack("[iIIs#oioooooo]", 2, (json_int_t)ev->id, (json_int_t)ev->ts,
	    ev->code, (int)ev->code_len,
	    ev->has_link_id ? json_integer(ev->link_id) : json_null(), ev->status,
	    json_string(ev->ip), str_or_null(ev->user_agent), str_or_null(ev->referer),
	    str_or_null(ev->accept_language), str_or_null(ev->host), str_or_null(ev->query));
	if (arr == NULL)
		abort();
	txt = json_dumps(arr, JSON_COMPACT);
	json_decref(arr);
	if (txt == NULL)
		abort();
	if (event_parse(txt, strlen(txt), &root2, &ev2, reason, sizeof(reason)) != 0) {
		fprintf(stderr, "round trip rejected: %s: %s\n", reason, txt);
		abort();
	}
	if (ev2.id != ev->id || ev2.ts != ev->ts || ev2.code_len != ev->code_len ||
	    memcmp(ev2.code, ev->code, ev->code_len) != 0 || ev2.has_link_id != ev->has_link_id ||
	    (ev->has_link_id && ev2.link_id != ev->link_id) || ev2.status != ev->status ||
	    !same_str(ev2.ip, ev->ip) || !same_str(ev2.user_agent, ev->user_agent) ||
	    !same_str(ev2.referer, ev->referer) ||
	    !same_str(ev2.accept_language, ev->accept_language) ||
	    !same_str(ev2.host, ev->host) || !same_str(ev2.query, ev->query))
		abort();
	json_decref(root2);
	free(txt);
}

static void
one(const char *buf, size_t len)
{
	struct event ev;
	json_t *root;
	char reason[256];

	reason[0] = '\0';
	if (event_parse(buf, len, &root, &ev, reason, sizeof(reason)) == 0) {
		check(&ev);
		json_decref(root);
	} else if (root != NULL || reason[0] == '\0') {
		abort(); /* a rejection always has a reason and no root */
	}
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const char *const head[] = {
		"[2,1,1700000000000000,\"abc\",7,302,\"203.0.113.9\",\"",
		"{\"v\":1,\"id\":1,\"ts\":1700000000000000,\"code\":\"abc\",\"link_id\":null,"
		"\"status\":404,\"ip\":\"::1\",\"user_agent\":\"",
	};
	static const char *const tail[] = {
		"\",null,\"en\",\"s.test\",null]",
		"\",\"referer\":null,\"accept_language\":null,\"host\":null,\"query\":\"q\"}",
	};
	char *buf;

	one((const char *)data, size);
	for (int k = 0; k < 2; k++) {
		size_t h = strlen(head[k]), t = strlen(tail[k]);

		if ((buf = malloc(h + size + t)) == NULL)
			return 0;
		memcpy(buf, head[k], h);
		if (size)
			memcpy(buf + h, data, size);
		memcpy(buf + h + size, tail[k], t);
		one(buf, h + size + t);
		free(buf);
	}
	return 0;
}
