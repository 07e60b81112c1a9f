/* event.h - parses and validates one visit event (schemas/visit_event.schema.json:
 * version 2, a positional array, or version 1, an object) from a Kafka message
 * value with jansson; a failure gives the reason stored in visit_reject. */
#ifndef LP_INGEST_EVENT_H
#define LP_INGEST_EVENT_H

#include <jansson.h>
#include <stddef.h>

/* Largest ts accepted: 9999-12-31 23:59:59.999999 UTC, in microseconds (the
 * schema only says >= 0; PostgreSQL and partition names need a 4-digit year). */
#define EVENT_TS_MAX 253402300799999999LL

/* A validated event. Every string points into the json_t root returned by
 * event_parse (borrowed: valid until json_decref(root)); NULL means JSON null.
 * Strings are valid UTF-8 without NUL bytes (jansson guarantees it). */
struct event {
	long long id;             /* >= 1 */
	long long ts;             /* microseconds since the epoch, 0..EVENT_TS_MAX */
	const char *code;         /* 1..64 characters */
	size_t code_len;
	long long link_id;        /* valid when has_link_id */
	int has_link_id;          /* 0: orphan visit (link_id null) */
	int status;               /* 301, 302, 307, 308, 404 or 410 */
	const char *ip;           /* never NULL, <= 64 characters */
	const char *user_agent;   /* NULL when absent */
	size_t user_agent_len;
	const char *referer;
	const char *accept_language;
	const char *host;
	const char *query;
};

/* Parses len bytes at buf into *ev: [2, id, ts, code, link_id, status, ip,
 * user_agent, referer, accept_language, host, query] (what the redirector
 * writes since version 2) or {"v": 1, "id": ..., ...} (version 1, still read:
 * spooled or retained events of an older redirector). On success returns 0
 * and *root, owned by the caller (json_decref), holds the strings ev points
 * to. On a malformed event returns -1 with *root NULL and reason set, naming
 * the field, e.g. "bad JSON: ...", "missing field: ts",
 * "wrong type: ts: expected integer", "unknown schema version: 3 (...)",
 * "unknown field: foo", "unknown field: [12] (13 elements, expected 12)",
 * "bad value: status: 200 is not one of 301, 302, 307, 308, 404, 410".
 * reason is always valid UTF-8 (errstr_set), as visit_reject.reason must be:
 * a reason PostgreSQL refused would fail its batch on every retry. */
int event_parse(const void *buf, size_t len, json_t **root, struct event *ev,
                char *reason, size_t reason_size);

#endif
