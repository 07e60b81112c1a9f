/* http.c - libmicrohttpd glue: epoll thread pool, raw URI capture (for the
 * "/?code" form and the event's query string), body accumulation with a size
 * cap (413), and JSON/redirect responders. */
#include "http.h"
#include "errstr.h"
#include "log.h"
#include "monotime.h"
#include "workq.h"

#include <errno.h>
#include <idn2.h>
#include <stdint.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <sys/socket.h>

enum { CLOSED_NEW = 1, CLOSED_ALL = 2 };

#define HANDLER_SLOTS 512 /* at least http_threads' bound: shared past it */

struct handler_slot {
	atomic_int n;       /* access_cb calls running */
	atomic_int active;  /* requests begun (URI seen) and not completed */
} __attribute__((aligned(64)));

static atomic_int slots_taken;
static _Thread_local int my_slot = -1;

struct http_server {
	struct MHD_Daemon *d;
	http_handler handler;
	http_observer observe;
	long long (*keep_body)(void *ctx, const char *path, const char *auth, int may_wait);
	struct workq *keep_body_queue;
	void *ctx;
	size_t max_body;
	size_t max_header;
	atomic_int deferred;  /* deferred requests not yet answered (or gone) */
	atomic_int stopping;  /* http_stop began: answers say "Connection: close" */
	atomic_int closed;    /* CLOSED_NEW: only deferred answers run; CLOSED_ALL: none */
	/* access_cb calls running now, one counter per HTTP thread on a cache
	 * line of its own (their sum is the count; one shared counter cost
	 * two contended atomic updates per call) */
	struct handler_slot *in_handler;
	atomic_int resuming;  /* http_resume calls inside MHD_resume_connection */
	atomic_int held;      /* requests whose key was checked off their thread
	                       * and kept: their bodies come, then their handlers
	                       * run (the drain's first half waits for them) */
};

/* This thread's slot (libmicrohttpd calls a connection's callbacks on
 * its worker's thread). */
static struct handler_slot *
my_handler_slot(struct http_server *s)
{
	if (my_slot < 0)
		my_slot = atomic_fetch_add(&slots_taken, 1) % HANDLER_SLOTS;
	return &s->in_handler[my_slot];
}

/* Requests begun and not completed, all threads. */
static int
requests_active(struct http_server *s)
{
	int n = 0;

	for (int i = 0; i < HANDLER_SLOTS; i++)
		n += atomic_load(&s->in_handler[i].active);
	return n;
}

/* Per-request state, created by the URI log callback and freed when the
 * request completes. */
struct reqstate {
	char *body;     /* owned */
	size_t len, cap;
	int too_big;
	int discard;    /* the body is read and dropped, not kept */
	int started;    /* the headers-only first call has been seen */
	long long verdict;         /* keep_body's, or HTTP_KEEP_NOT_ASKED */
	struct keep_ask *asking;   /* owned: keep_body asked off this thread */
	int held;                  /* asked off this thread and kept: counted in
	                            * the server's held until the handler ran */
	int reject;     /* 400 or 431 found in the headers (answered at the end) */
	const char *reject_why;
	double start;
	http_resume_fn resume_fn;  /* set while an answer is deferred */
	void *resume_arg;
	int capturing;             /* an offloaded handler runs: queue() keeps its answer */
	struct MHD_Response *captured; /* owned: that answer, sent once resumed */
	unsigned captured_status;
	struct MHD_Connection *conn;   /* its connection (for suspend/resume) */
	struct http_server *server;
	char rawuri[];  /* in the same allocation */
};

/* A struct http_deferred * is the request's struct reqstate *. */

double
http_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void *
uri_logger(void *cls, const char *uri, struct MHD_Connection *conn)
{
	size_t n = strlen(uri ? uri : "/") + 1;
	struct reqstate *st = malloc(sizeof(*st) + n);

	if (st == NULL)
		return NULL;
	memset(st, 0, sizeof(*st));
	memcpy(st->rawuri, uri ? uri : "/", n);
	st->start = http_now();
	st->conn = conn;
	st->server = cls;
	atomic_fetch_add(&my_handler_slot(st->server)->active, 1);
	return st;
}

static void
completed(void *cls, struct MHD_Connection *conn, void **req_cls,
          enum MHD_RequestTerminationCode toe)
{
	struct reqstate *st = *req_cls;

	(void)cls;
	(void)conn;
	(void)toe;
	if (st == NULL)
		return;
	if (st->resume_fn != NULL) {  /* deferred, but the connection went away */
		st->resume_fn(st->resume_arg, NULL);
		atomic_fetch_sub(&st->server->deferred, 1);
	}
	if (st->asking != NULL) { /* asked off its thread, never called again */
		free(st->asking);
		atomic_fetch_sub(&st->server->deferred, 1);
	}
	if (st->held)
		atomic_fetch_sub(&st->server->held, 1);
	if (st->captured != NULL)
		MHD_destroy_response(st->captured);
	atomic_fetch_sub(&my_handler_slot(st->server)->active, 1);
	free(st->body);
	free(st);
	*req_cls = NULL;
}

static enum MHD_Result
queue(struct http_req *req, unsigned status, struct MHD_Response *resp)
{
	struct reqstate *st = req->priv;
	enum MHD_Result r;

	if (resp == NULL)
		return MHD_NO;
	if (st != NULL && st->capturing) { /* on an offload thread: sent later */
		if (st->captured != NULL) { /* as libmicrohttpd: the first answer stands */
			MHD_destroy_response(resp);
			return MHD_NO;
		}
		req->status = (int)status;
		st->captured = resp;
		st->captured_status = status;
		return MHD_YES;
	}
	req->status = (int)status;
	/* Draining: the client's next request goes to a new connection, which
	 * another instance takes (this one no longer listens). */
	if (st != NULL && atomic_load(&st->server->stopping))
		MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
	r = MHD_queue_response(req->conn, status, resp);
	MHD_destroy_response(resp);
	return r;
}

enum MHD_Result
http_respond(struct http_req *req, unsigned status, struct MHD_Response *resp)
{
	return queue(req, status, resp);
}

enum MHD_Result
http_text(struct http_req *req, unsigned status, const char *content_type,
          const char *text, size_t len)
{
	struct MHD_Response *resp = MHD_create_response_from_buffer(len, (void *)(uintptr_t)text,
	    MHD_RESPMEM_MUST_COPY);

	if (resp != NULL && content_type != NULL)
		MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, content_type);
	return queue(req, status, resp);
}

/* The JSON response of body (stolen), with Allow: allow when not NULL, and
 * WWW-Authenticate on a 401. */
static enum MHD_Result
json_allow(struct http_req *req, unsigned status, json_t *body, const char *allow)
{
	char *s = json_dumps(body, JSON_COMPACT);
	struct MHD_Response *resp;

	json_decref(body);
	if (s == NULL)
		return MHD_NO;
	resp = MHD_create_response_from_buffer(strlen(s), s, MHD_RESPMEM_MUST_FREE);
	if (resp == NULL) {
		free(s);
		return MHD_NO;
	}
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
	/* an error is never for a cache to keep (RFC 9111 lets one store a
	 * 404 or 410 heuristically): a link made or enabled later must not
	 * meet a kept 404 or 410 (the redirect path's shared answers say so;
	 * these, e.g. its answers during the drain, did not) */
	if (status >= 400)
		MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
	if (allow != NULL)
		MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, allow);
	if (status == MHD_HTTP_UNAUTHORIZED) /* RFC 9110: a 401 names its scheme */
		MHD_add_response_header(resp, MHD_HTTP_HEADER_WWW_AUTHENTICATE,
		    "Bearer realm=\"linkpulse\"");
	return queue(req, status, resp);
}

enum MHD_Result
http_json(struct http_req *req, unsigned status, json_t *body)
{
	return json_allow(req, status, body, NULL);
}

/* {"error": {"code": code, "message": msg, "field": field?}} (caller owns). */
static json_t *
error_body(const char *code, const char *field, const char *msg)
{
	json_t *err = json_pack("{s:s, s:s}", "code", code, "message", msg);

	if (field != NULL)
		json_object_set_new(err, "field", json_string(field));
	return json_pack("{s:o}", "error", err);
}

enum MHD_Result
http_not_allowed(struct http_req *req, const char *allow)
{
	char msg[256];

	errstr_set(msg, sizeof(msg), "%.32s is not allowed here (allowed: %s)", req->method, allow);
	return json_allow(req, 405, error_body("method_not_allowed", NULL, msg), allow);
}

int
http_is_get(const struct http_req *req)
{
	return strcmp(req->method, "GET") == 0 || strcmp(req->method, "HEAD") == 0;
}

enum MHD_Result
http_error(struct http_req *req, unsigned status, const char *code, const char *field,
           const char *fmt, ...)
{
	char msg[1024];
	va_list ap;

	/* errstr: the message may quote the request (a path, cut at a byte
	 * count), jansson takes only UTF-8, and a NULL body would drop the
	 * connection */
	va_start(ap, fmt);
	errstr_vset(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	return http_json(req, status, error_body(code, field, msg));
}

/* 1 for a byte a Location sends as %XX: bytes of 0x80 or more (UTF-8),
 * control characters (a stored URL has none; a forwarded query string may)
 * and the ASCII characters a URI may not hold as they are (RFC 3986: space,
 * " < > \\ ^ ` { | }); '%' itself stays, as the URL's own escapes do. */
static int
location_escapes(unsigned char c)
{
	return c >= 0x7f || c < 0x20 || c == ' ' || c == '"' || c == '<' || c == '>' || c == '\\' ||
	    c == '^' || c == '`' || c == '{' || c == '|' || c == '}';
}

size_t
http_location_length(const char *url)
{
	size_t n = 0;

	for (const unsigned char *p = (const unsigned char *)url; *p != '\0'; p++)
		n += location_escapes(*p) ? 3 : 1;
	return n;
}

char *
http_host_ace(const char *host)
{
	const int flags = IDN2_NFC_INPUT | IDN2_NONTRANSITIONAL;
	uint8_t *ace = NULL, *plain = NULL;
	char *out = NULL;
	int ascii = 1;

	for (const unsigned char *p = (const unsigned char *)host; *p != '\0'; p++)
		if (*p >= 0x80)
			ascii = 0;
	if (ascii)
		return NULL;
	/* With STD3 rules libidn2 drops a character that maps to ASCII other
	 * than letters, digits and '-' (a fullwidth '@' or '/'), which would
	 * name another host; without them it keeps the ASCII: the two must
	 * agree, and be a plain name. */
	if (idn2_lookup_u8((const uint8_t *)host, &ace, flags | IDN2_USE_STD3_ASCII_RULES) ==
	    IDN2_OK && idn2_lookup_u8((const uint8_t *)host, &plain, flags) == IDN2_OK &&
	    strcmp((const char *)ace, (const char *)plain) == 0 && ace[0] != '\0' &&
	    strspn((const char *)ace, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
	    "0123456789-.") == strlen((const char *)ace))
		out = strdup((const char *)ace);
	idn2_free(ace);
	idn2_free(plain);
	return out;
}

char *
http_location_url(const char *url)
{
	const char *s = strstr(url, "://"), *host, *end, *at;
	char *name, *ace, *out = NULL;
	size_t hl, ul = strlen(url);

	if (s == NULL)
		return strdup(url);
	host = s + 3;
	end = host + strcspn(host, "/?#");
	for (at = host; at < end; at++)
		if (*at == '@')
			host = at + 1;  /* after the user information */
	/* the name up to a port; an ASCII one (an IP literal too) stays */
	hl = strcspn(host, ":/?#");
	if ((name = strndup(host, hl)) == NULL)
		return NULL;
	ace = http_host_ace(name);
	free(name);
	if (ace == NULL)
		return strdup(url);
	if ((out = malloc(ul - hl + strlen(ace) + 1)) != NULL) {
		size_t pre = (size_t)(host - url), al = strlen(ace);

		memcpy(out, url, pre);
		memcpy(out + pre, ace, al);
		memcpy(out + pre + al, host + hl, ul - pre - hl + 1);
		if (http_location_length(out) > HTTP_LOCATION_MAX) {
			free(out);
			out = NULL;
		}
	}
	free(ace);
	return out != NULL ? out : strdup(url);
}

/* Adds Location: url to resp (MHD copies it), with location_escapes bytes
 * as %XX (see http_redirect_response). MHD_NO when out of memory. */
static enum MHD_Result
add_location(struct MHD_Response *resp, const char *url)
{
	static const char hex[] = "0123456789ABCDEF";
	size_t n = http_location_length(url);
	enum MHD_Result rc;
	char *enc, *w;

	if (n == strlen(url))
		return MHD_add_response_header(resp, MHD_HTTP_HEADER_LOCATION, url);
	if ((enc = malloc(n + 1)) == NULL)
		return MHD_NO;
	w = enc;
	for (const unsigned char *p = (const unsigned char *)url; *p != '\0'; p++) {
		if (!location_escapes(*p)) {
			*w++ = (char)*p;
		} else {
			*w++ = '%';
			*w++ = hex[*p >> 4];
			*w++ = hex[*p & 0xf];
		}
	}
	*w = '\0';
	rc = MHD_add_response_header(resp, MHD_HTTP_HEADER_LOCATION, enc);
	free(enc);
	return rc;
}

struct MHD_Response *
http_redirect_response(const char *location)
{
	struct MHD_Response *resp = MHD_create_response_from_buffer(0, NULL,
	    MHD_RESPMEM_PERSISTENT);

	if (resp == NULL)
		return NULL;
	if (add_location(resp, location) == MHD_NO ||
	    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL,
	    "private, max-age=0") == MHD_NO) {
		MHD_destroy_response(resp);
		return NULL;
	}
	return resp;
}

enum MHD_Result
http_redirect(struct http_req *req, unsigned status, const char *location)
{
	return queue(req, status, http_redirect_response(location));
}

const char *
http_header(struct http_req *req, const char *name)
{
	return MHD_lookup_connection_value(req->conn, MHD_HEADER_KIND, name);
}

struct pick {
	const char *const *names;
	const char **values;
	size_t n, left;
};

static enum MHD_Result
pick_cb(void *cls, enum MHD_ValueKind kind, const char *key, const char *value)
{
	struct pick *p = cls;

	(void)kind;
	if (key == NULL || value == NULL)
		return MHD_YES;
	for (size_t i = 0; i < p->n; i++)
		if (p->values[i] == NULL && strcasecmp(key, p->names[i]) == 0) {
			p->values[i] = value;
			p->left--;
			break;
		}
	return p->left > 0 ? MHD_YES : MHD_NO;
}

void
http_headers(struct http_req *req, const char *const *names, const char **values, size_t n)
{
	struct pick p = { names, values, n, n };

	for (size_t i = 0; i < n; i++)
		values[i] = NULL;
	if (n > 0)
		MHD_get_connection_values(req->conn, MHD_HEADER_KIND, pick_cb, &p);
}

struct join {
	const char *name;
	char *buf;
	size_t size;
	size_t skip;  /* bytes of the whole join before buf's first */
	size_t pos;   /* bytes of the whole join so far */
	int found;
};

/* Appends n bytes of s to the join: the part from j->skip on, up to
 * size - 1 bytes, lands in buf; pos counts them all. */
static void
join_put(struct join *j, const char *s, size_t n)
{
	size_t from = j->pos < j->skip ? j->skip - j->pos : 0, at, room;

	if (from < n) {
		at = j->pos + from - j->skip;
		room = at < j->size - 1 ? j->size - 1 - at : 0;
		memcpy(j->buf + at, s + from, n - from < room ? n - from : room);
	}
	j->pos += n;
}

static enum MHD_Result
join_cb(void *cls, enum MHD_ValueKind kind, const char *key, const char *value)
{
	struct join *j = cls;

	(void)kind;
	if (key == NULL || value == NULL || strcasecmp(key, j->name) != 0)
		return MHD_YES;
	if (j->found)
		join_put(j, ", ", 2);
	join_put(j, value, strlen(value));
	j->found = 1;
	return MHD_YES;
}

char *
http_header_join(struct http_req *req, const char *name, char *buf, size_t size)
{
	struct join j = { name, buf, size, 0, 0, 0 };
	char *keep;

	if (size == 0)
		return NULL;
	MHD_get_connection_values(req->conn, MHD_HEADER_KIND, join_cb, &j);
	if (!j.found)
		return NULL;
	if (j.pos < size) {
		buf[j.pos] = '\0';
		return buf;
	}
	/* Too long: join again keeping the end, whole elements only. Proxies
	 * append, so the elements nearest the right are the ones a trusted
	 * proxy wrote; a cut at the end would let a client push them out with
	 * a long header of its own. */
	j.skip = j.pos - (size - 1);
	j.pos = 0;
	j.found = 0;
	MHD_get_connection_values(req->conn, MHD_HEADER_KIND, join_cb, &j);
	buf[size - 1] = '\0';
	keep = strchr(buf, ','); /* the first element kept was cut: drop it */
	keep = keep != NULL ? keep + 1 : buf + size - 1;
	memmove(buf, keep, strlen(keep) + 1);
	return buf;
}

/* libmicrohttpd's %HH decoding, with a decoded NUL made 0x7f: a path is
 * read as a C string, and "/code%00xyz" redirected as "/code" (a link
 * reachable at any number of other paths; PATCH /api/v1/links/code%00x
 * changed "code"). 0x7f is in no code, alias or route. */
static size_t
unescape_cb(void *cls, struct MHD_Connection *conn, char *s)
{
	size_t n = MHD_http_unescape(s);

	(void)cls;
	(void)conn;
	for (size_t i = 0; i < n; i++)
		if (s[i] == '\0')
			s[i] = 0x7f;
	return n;
}

struct head_count {
	int hosts;   /* Host headers */
	int n;       /* all headers and query arguments */
};

static enum MHD_Result
count_headers(void *cls, enum MHD_ValueKind kind, const char *key, const char *value)
{
	struct head_count *hc = cls;

	(void)value;
	hc->hosts += kind == MHD_HEADER_KIND && key != NULL &&
	    strcasecmp(key, MHD_HTTP_HEADER_HOST) == 0;
	hc->n++;
	return MHD_YES;
}

/* libmicrohttpd's own record of each header and each query argument,
 * taken from the connection's memory beside the bytes (0.9.75: ~56 bytes) */
#define HEADER_RECORD 64

/* The path of an absolute-form target ("http://host/path", RFC 9112
 * 3.2.2, sent to proxies and accepted from anyone), the origin-form one as
 * it is; NULL for a target that is neither (answered 400). */
static const char *
target_path(const char *url)
{
	const char *p;

	if (url[0] == '/')
		return url;
	if (strncasecmp(url, "http://", 7) == 0)
		p = url + 7;
	else if (strncasecmp(url, "https://", 8) == 0)
		p = url + 8;
	else
		return NULL;
	p = strchr(p, '/');
	return p != NULL ? p : "/";
}

/* Checks of the request head, on the headers-only first call: the request
 * line and headers within max_header_bytes (the connection's memory has
 * room for the response's headers too: a Location of up to
 * HTTP_LOCATION_MAX bytes), one Host header (HTTP/1.1 needs it, two are
 * ambiguous: RFC 9112 3.2), a target that is a path or an absolute URL. */
static void
check_head(struct http_server *s, struct reqstate *st, struct MHD_Connection *conn,
           const char *url, const char *version)
{
	const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn,
	    MHD_CONNECTION_INFO_REQUEST_HEADER_SIZE);
	struct head_count hc = { 0, 0 };

	/* one walk: the kind is a mask */
	MHD_get_connection_values(conn, MHD_HEADER_KIND | MHD_GET_ARGUMENT_KIND, count_headers,
	    &hc);
	/* the bytes and libmicrohttpd's records of them: a head within this
	 * leaves the response's share of the memory free (a query of many
	 * short arguments left too little for a long Location: the
	 * connection was dropped unanswered) */
	if (ci != NULL && ci->header_size + (size_t)hc.n * HEADER_RECORD > s->max_header) {
		st->reject = 431;
		st->reject_why = "request line and headers are larger than max_header_bytes";
		return;
	}
	if (hc.hosts > 1 || (hc.hosts == 0 && strcmp(version, MHD_HTTP_VERSION_1_1) == 0)) {
		st->reject = 400;
		st->reject_why = hc.hosts > 1 ? "more than one Host header" :
		    "an HTTP/1.1 request needs a Host header";
		return;
	}
	if (target_path(url) == NULL) {
		st->reject = 400;
		st->reject_why = "the request target is neither a path nor an absolute URL";
	}
}

static enum MHD_Result access_run(struct http_server *s, struct MHD_Connection *conn,
                                  const char *url, const char *method, const char *version,
                                  const char *upload_data, size_t *upload_data_size,
                                  void **req_cls);

/* Suspends st's connection, counted as deferred (http_stop waits for it):
 * 0, or -1 when the server no longer defers (nothing suspended). Counted
 * before closed is read, as http_stop sets closed before it waits for the
 * handlers running and then reads the count: either it waits for this one
 * or this one sees closed. */
static int
suspend(struct reqstate *st)
{
	atomic_fetch_add(&st->server->deferred, 1);
	if (atomic_load(&st->server->closed)) {
		atomic_fetch_sub(&st->server->deferred, 1);
		return -1;
	}
	MHD_suspend_connection(st->conn);
	return 0;
}

/* keep_body asked on a keep_body_queue thread while the connection waits
 * suspended in its headers-only first call; libmicrohttpd makes that call
 * again once it is resumed. */
struct keep_ask {
	struct reqstate *st;
	long long verdict;
	char *path;               /* in the same allocation */
	char auth[];
};

static void
keep_ask_main(void *arg)
{
	struct keep_ask *k = arg;
	struct http_server *s = k->st->server;

	k->verdict = s->keep_body(s->ctx, k->path, k->auth, 1);
	if (k->verdict == HTTP_KEEP_ASK_LATER)
		k->verdict = -1;
	http_resume((struct http_deferred *)(void *)k->st);
}

/* Suspends the connection and queues the question: HTTP_KEEP_ASK_LATER, or
 * the verdict when it could not be queued (nothing suspended then). */
static long long
keep_ask(struct http_server *s, struct reqstate *st, const char *path, const char *auth)
{
	size_t np = strlen(path) + 1, na = strlen(auth) + 1;
	struct keep_ask *k;

	if (s->keep_body_queue == NULL || (k = malloc(sizeof(*k) + na + np)) == NULL)
		return -1;
	k->st = st;
	k->verdict = HTTP_KEEP_OVERLOADED; /* unless a thread answers */
	memcpy(k->auth, auth, na);
	k->path = k->auth + na;
	memcpy(k->path, path, np);
	st->asking = k;
	if (suspend(st) < 0) {
		st->asking = NULL;
		free(k);
		return HTTP_KEEP_STOPPING;
	}
	if (workq_submit(s->keep_body_queue, keep_ask_main, k) < 0)
		http_resume((struct http_deferred *)(void *)st);
	return HTTP_KEEP_ASK_LATER;
}

static void
set_verdict(struct reqstate *st, long long v)
{
	st->verdict = v;
	if (v <= 0)
		st->discard = 1;
}

/* Every call libmicrohttpd makes for a request (headers, body, the end). */
static enum MHD_Result
access_cb(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
          const char *version, const char *upload_data, size_t *upload_data_size,
          void **req_cls)
{
	struct http_server *s = cls;
	struct reqstate *st = *req_cls;
	enum MHD_Result r;
	int closed;

	/* Counted before closed is read, as http_stop sets closed before it
	 * reads the count: either it waits for this call or this call sees
	 * closed and closes the connection. Once the drain is over no new
	 * request runs (so none is deferred), only the answers of those
	 * deferred before; once they are given up on, nothing runs (what the
	 * handlers use is being freed, or the process exits). */
	atomic_int *count = &my_handler_slot(s)->n;

	atomic_fetch_add(count, 1);
	closed = atomic_load(&s->closed);
	if (closed == CLOSED_ALL || st == NULL)
		r = MHD_NO;
	else
		r = access_run(s, conn, url, method, version, upload_data, upload_data_size, req_cls);
	atomic_fetch_sub(count, 1);
	return r;
}

static enum MHD_Result
access_run(struct http_server *s, struct MHD_Connection *conn, const char *url,
           const char *method, const char *version, const char *upload_data,
           size_t *upload_data_size, void **req_cls)
{
	struct reqstate *st = *req_cls;
	struct http_req req;
	const union MHD_ConnectionInfo *ci;
	enum MHD_Result r;
	char *q;

	if (st->asking != NULL) {  /* the first call again: keep_body answered */
		set_verdict(st, st->asking->verdict);
		free(st->asking);
		st->asking = NULL;
		/* A kept body is still to come: counted as held (before it stops
		 * counting as deferred) so that the drain's first half waits for
		 * its handler; a refused one is answered without a deferral. */
		if (st->verdict > 0) {
			st->held = 1;
			atomic_fetch_add(&s->held, 1);
		}
		atomic_fetch_sub(&s->deferred, 1);
		return MHD_YES;
	}
	if (*upload_data_size > 0) {
		if (st->discard) {
			*upload_data_size = 0;
			return MHD_YES;
		}
		if (!st->too_big && st->len + *upload_data_size > s->max_body)
			st->too_big = 1;
		if (!st->too_big) {
			if (st->len + *upload_data_size + 1 > st->cap) {
				size_t ncap = (st->len + *upload_data_size + 1) * 2;
				char *nb;

				if (ncap > s->max_body + 1)
					ncap = s->max_body + 1;
				if ((nb = realloc(st->body, ncap)) == NULL)
					return MHD_NO;
				st->body = nb;
				st->cap = ncap;
			}
			memcpy(st->body + st->len, upload_data, *upload_data_size);
			st->len += *upload_data_size;
			st->body[st->len] = '\0';
		}
		*upload_data_size = 0;
		return MHD_YES;
	}
	/* The first call carries headers only; the body (if any) follows. */
	if (!st->started) {
		const char *auth;

		st->started = 1;
		check_head(s, st, conn, url, version);
		/* Only a request that may take a body and carries credentials
		 * the keep_body hook accepts keeps one: the bodies of others (a
		 * redirect's, an API call without a valid key, answered 401) are
		 * read and dropped, so clients without a key cannot hold
		 * max_body_bytes each. */
		auth = MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
		    MHD_HTTP_HEADER_AUTHORIZATION);
		st->verdict = HTTP_KEEP_NOT_ASKED;
		if ((strcmp(method, "POST") != 0 && strcmp(method, "PATCH") != 0 &&
		    strcmp(method, "PUT") != 0) || auth == NULL || st->reject) {
			st->discard = 1;
		} else if (s->keep_body != NULL) {
			long long v = s->keep_body(s->ctx, target_path(url), auth,
			    s->keep_body_queue == NULL);

			/* not known at once: asked on another thread, so that an
			 * HTTP thread never waits on it */
			if (v == HTTP_KEEP_ASK_LATER &&
			    (v = keep_ask(s, st, target_path(url), auth)) == HTTP_KEEP_ASK_LATER)
				return MHD_YES;
			set_verdict(st, v);
		}
		return MHD_YES;
	}
	memset(&req, 0, sizeof(req));
	req.priv = st;
	req.conn = conn;
	req.method = method;
	req.path = st->reject ? url : target_path(url);
	req.rawuri = st->rawuri;
	q = strchr(st->rawuri, '?');
	req.query = q ? q + 1 : NULL;
	req.body = st->len ? st->body : NULL;
	req.body_len = st->len;
	req.body_verdict = st->verdict;
	req.start = st->start;
	ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
	req.peer = ci ? ci->client_addr : NULL;
	if (st->resume_fn != NULL) {  /* resumed: the deferred answer */
		http_resume_fn fn = st->resume_fn;

		st->resume_fn = NULL;
		r = fn(st->resume_arg, &req);
		atomic_fetch_sub(&s->deferred, 1);
	} else if (st->reject) {
		r = http_error(&req, (unsigned)st->reject, st->reject == 431 ?
		    "header_too_large" : "bad_request", NULL, "%s", st->reject_why);
	} else if (st->too_big) {
		r = http_error(&req, 413, "body_too_large", NULL,
		    "request body is larger than %zu bytes", s->max_body);
	} else {
		r = s->handler(s->ctx, &req);
	}
	/* every answer, the deferred ones when they are sent (status 0: the
	 * handler deferred it) */
	if (req.status != 0 && s->observe != NULL)
		s->observe(s->ctx, &req);
	if (st->held) {  /* after the handler, which may have deferred it anew */
		st->held = 0;
		atomic_fetch_sub(&s->held, 1);
	}
	return r;
}

struct http_deferred *
http_defer(struct http_req *req, http_resume_fn fn, void *arg)
{
	struct reqstate *st = req->priv;

	st->resume_fn = fn;
	st->resume_arg = arg;
	if (suspend(st) < 0) {
		st->resume_fn = NULL;
		return NULL;
	}
	return (struct http_deferred *)(void *)st;
}

void
http_resume(struct http_deferred *d)
{
	struct reqstate *st = (struct reqstate *)(void *)d;
	struct http_server *s = st->server;

	/* After MHD_resume_connection's lock the connection's thread may answer
	 * and free st at once, while this thread still wakes the worker (a
	 * write to its event fd): http_stop waits for that before it stops the
	 * daemon, which closes the fd. */
	atomic_fetch_add(&s->resuming, 1);
	MHD_resume_connection(st->conn);
	atomic_fetch_sub(&s->resuming, 1);
}

enum MHD_Result
http_stopping(struct http_req *req)
{
	return http_error(req, 503, "unavailable", NULL, "the server is stopping; try again");
}

int
http_draining(const struct http_req *req)
{
	const struct reqstate *st = req->priv;

	return st != NULL && atomic_load(&st->server->stopping);
}

/* A handler run off the HTTP thread (http_offload). */
struct offload {
	struct http_req req;     /* a copy: what it points to lives while suspended */
	http_handler handler;
	void *ctx;
	struct http_deferred *deferred;
	int refused;             /* not queued: the queue was full */
};

/* On a thread of the offload's queue. o may be freed once http_resume ran. */
static void
offload_main(void *arg)
{
	struct offload *o = arg;
	struct reqstate *st = o->req.priv;

	st->capturing = 1;
	(void)o->handler(o->ctx, &o->req); /* MHD_NO: nothing captured, or what was stands */
	st->capturing = 0;
	http_resume(o->deferred);
}

/* On the connection's thread: sends what the handler answered (req NULL:
 * the connection went away; st is still there, freed right after). */
static enum MHD_Result
offload_resumed(void *arg, struct http_req *req)
{
	struct offload *o = arg;
	struct reqstate *st = o->req.priv;
	struct MHD_Response *resp = st->captured;
	int refused = o->refused;

	st->captured = NULL;
	free(o);
	if (req == NULL) {
		if (resp != NULL)
			MHD_destroy_response(resp);
		return MHD_NO;
	}
	if (refused)
		return http_error(req, 503, "overloaded", NULL,
		    "too many requests are waiting for the database; try again");
	if (resp == NULL) /* the handler answered nothing: the connection closes */
		return MHD_NO;
	return queue(req, st->captured_status, resp);
}

enum MHD_Result
http_offload(struct http_req *req, struct workq *q, http_handler handler, void *ctx)
{
	struct offload *o = calloc(1, sizeof(*o));

	if (o == NULL)
		return http_error(req, 503, "unavailable", NULL, "out of memory; try again");
	o->req = *req;
	o->handler = handler;
	o->ctx = ctx;
	/* Suspended before a thread can run it and resume it. */
	if ((o->deferred = http_defer(req, offload_resumed, o)) == NULL) {
		free(o);
		return http_stopping(req);
	}
	if (workq_submit(q, offload_main, o) < 0) {
		o->refused = 1;
		http_resume(o->deferred);
	}
	return MHD_YES;
}

/* libmicrohttpd's panics are not survivable: its MHD_PANIC is marked as
 * never returning, and in Debian's 0.9.75 build the code after a panic call
 * is the next block's or the next function's (a handler that returned ran
 * into it). This one logs where and aborts, as the library's default does. */
static void
panic_cb(void *cls, const char *file, unsigned int line, const char *reason)
{
	(void)cls;
	log_error("http: libmicrohttpd panic at %s:%u: %s", file ? file : "?", line,
	    reason ? reason : "");
	abort();
}

struct http_server *
http_start(const struct http_conf *conf, http_handler handler, void *ctx,
           char *errstr, size_t errstr_size)
{
	struct http_server *s = calloc(1, sizeof(*s));
	struct sockaddr_in sin;

	if (s == NULL || (s->in_handler = aligned_alloc(64,
	    HANDLER_SLOTS * sizeof(*s->in_handler))) == NULL) {
		free(s);
		snprintf(errstr, errstr_size, "out of memory");
		return NULL;
	}
	memset(s->in_handler, 0, HANDLER_SLOTS * sizeof(*s->in_handler));
	s->handler = handler;
	s->observe = conf->observe;
	s->keep_body = conf->keep_body;
	s->keep_body_queue = conf->keep_body_queue;
	s->ctx = ctx;
	s->max_body = conf->max_body;
	s->max_header = conf->max_header;
	memset(&sin, 0, sizeof(sin));
	sin.sin_family = AF_INET;
	sin.sin_port = htons((uint16_t)conf->port);
	if (inet_pton(AF_INET, conf->addr, &sin.sin_addr) != 1) {
		snprintf(errstr, errstr_size, "listen_addr: \"%s\" is not an IPv4 address", conf->addr);
		free(s->in_handler);
		free(s);
		return NULL;
	}
	MHD_set_panic_func(panic_cb, NULL);
	s->d = MHD_start_daemon(MHD_USE_EPOLL_INTERNAL_THREAD | MHD_USE_ERROR_LOG |
	    MHD_ALLOW_SUSPEND_RESUME,
	    (uint16_t)conf->port, NULL, NULL, access_cb, s,
	    MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sin,
	    MHD_OPTION_THREAD_POOL_SIZE, (unsigned)conf->threads,
	    MHD_OPTION_CONNECTION_LIMIT, (unsigned)conf->max_connections,
	    MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)conf->max_connections_per_ip,
	    MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)conf->timeout_s,
	    MHD_OPTION_CONNECTION_MEMORY_LIMIT, conf->max_header + HTTP_LOCATION_MAX + 1024,
	    MHD_OPTION_UNESCAPE_CALLBACK, unescape_cb, NULL,
	    MHD_OPTION_URI_LOG_CALLBACK, uri_logger, s,
	    MHD_OPTION_NOTIFY_COMPLETED, completed, NULL,
	    MHD_OPTION_LISTEN_BACKLOG_SIZE, 1024u,
	    MHD_OPTION_END);
	if (s->d == NULL) {
		snprintf(errstr, errstr_size, "could not listen on %s:%d", conf->addr, conf->port);
		free(s->in_handler);
		free(s);
		return NULL;
	}
	return s;
}

/* Stops accepting by disconnecting the listening socket (connect with
 * AF_UNSPEC): the kernel stops listening on it, resets the connections
 * still in its backlog and refuses new ones, while the descriptor and its
 * place in every worker's epoll set stay as libmicrohttpd left them.
 * MHD_quiesce_daemon is not used: in 0.9.75 it races its own epoll workers
 * to remove the listening socket from their sets, and the loser panics
 * (ENOENT). Closing or replacing the descriptor would leave the same trap
 * (a worker at its connection limit removes the descriptor, which is then
 * no longer in its set). A disconnected socket reports EPOLLHUP, which the
 * workers skip without accepting; they poll without sleeping until
 * http_stop, which waits only for deferred requests. MHD_stop_daemon
 * closes the socket later. */
void
http_quiesce(struct http_server *s)
{
	const union MHD_DaemonInfo *info;
	struct sockaddr sa;

	info = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_LISTEN_FD);
	if (info == NULL || info->listen_fd == MHD_INVALID_SOCKET)
		return;
	memset(&sa, 0, sizeof(sa));
	sa.sa_family = AF_UNSPEC;
	if (connect(info->listen_fd, &sa, sizeof(sa)) < 0)
		log_warn("http: could not stop accepting; new connections are accepted "
		    "until the end of the drain");
}

/* Waits until *v is 0 or the monotonic clock passes deadline; 1 when it was
 * seen at 0. */
static int
wait_zero(atomic_int *v, long long deadline)
{
	for (;;) {
		if (atomic_load(v) <= 0)
			return 1;
		if (monotime_ms() >= deadline)
			return 0;
		usleep(1000);
	}
}

/* Waits until every access_cb call that began before closed was set has
 * ended, or deadline passes; 1 when they have. Each thread's counter needs
 * to be seen at 0 once after that: a call that starts later sees closed
 * (and then defers nothing), so a counter busy again does not matter (under
 * load, waiting for all of them at 0 at once could take until deadline). */
static int
wait_idle(struct http_server *s, long long deadline)
{
	char seen[HANDLER_SLOTS] = { 0 };
	int left = HANDLER_SLOTS;

	for (;;) {
		for (int i = 0; i < HANDLER_SLOTS; i++)
			if (!seen[i] && atomic_load(&s->in_handler[i].n) <= 0) {
				seen[i] = 1;
				left--;
			}
		if (left == 0)
			return 1;
		if (monotime_ms() >= deadline)
			return 0;
		usleep(1000);
	}
}

int
http_stop(struct http_server *s, int drain_ms)
{
	long long t0 = monotime_ms(), deadline = t0 + drain_ms;

	if (s == NULL)
		return 0;
	/* Phase 1 (at most half the drain): requests keep being served, each
	 * answer closing its connection, until the deferred ones (waiting on
	 * a lookup, an API call or a create) are answered. */
	atomic_store(&s->stopping, 1);
	/* ... and the held ones (keys checked off their threads, bodies
	 * coming) have run their handlers; phase 2 no longer waits for those
	 * (a slow upload would hold the stop to its deadline): their handlers
	 * then answer 503 "unavailable" */
	while (monotime_ms() < t0 + drain_ms / 2) {
		wait_zero(&s->deferred, t0 + drain_ms / 2);
		if (!wait_zero(&s->held, t0 + drain_ms / 2) || atomic_load(&s->deferred) <= 0)
			break;
	}
	/* Phase 2: requests are still served, but none is deferred any more
	 * (http_defer refuses: the handler answers 503 "unavailable"), while
	 * those deferred are answered. A call that read closed before it was
	 * set may still defer: waited for (bounded by the deadline: a create
	 * stuck in the database holds its HTTP thread), then the count only
	 * falls. */
	atomic_store(&s->closed, CLOSED_NEW);
	if (!wait_idle(s, deadline) || !wait_zero(&s->deferred, deadline)) {
		/* libmicrohttpd must not stop with a connection suspended: it
		 * panics ("MHD_stop_daemon() called while we have suspended
		 * connections"). So no handler runs again, and the server stays.
		 * A handler still running is one stuck in the database (an API
		 * call): it touches no visit event. */
		log_warnx("http: %d requests still waiting after %d ms (a lookup, API call or "
		    "create stuck on its database): exiting without them",
		    atomic_load(&s->deferred), drain_ms);
		atomic_store(&s->closed, CLOSED_ALL);
		wait_idle(s, monotime_ms() + 1000);
		return -1;
	}
	/* The answers queued are sent (the stop closes connections without
	 * flushing), and the resumers are out of libmicrohttpd. */
	for (long long until = monotime_ms() + 2000; requests_active(s) > 0 &&
	    monotime_ms() < until; )
		usleep(1000);
	while (atomic_load(&s->resuming) > 0)
		usleep(1000);
	MHD_stop_daemon(s->d);
	free(s->in_handler);
	free(s);
	return 0;
}
