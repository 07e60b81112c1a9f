/* http.h - the redirector's libmicrohttpd server: an internal epoll thread
 * pool, limits, whole-body accumulation, and small helpers to answer with
 * JSON, redirects or errors. Routing is the caller's (a handler callback). */
#ifndef LP_HTTP_H
#define LP_HTTP_H

#include <jansson.h>
#include <microhttpd.h>
#include <stddef.h>

struct workq;

struct http_req {
	struct MHD_Connection *conn;
	const char *method;  /* "GET", ... (libmicrohttpd's) */
	const char *path;    /* decoded path without query (libmicrohttpd's) */
	const char *rawuri;  /* request target as sent, with query (ours) */
	const char *query;   /* raw query after '?', or NULL (points into rawuri) */
	const char *body;    /* NUL-terminated request body (ours), or NULL */
	size_t body_len;
	long long body_verdict; /* keep_body's answer: > 0 the body was kept,
	                      * 0, -1, HTTP_KEEP_STOPPING or HTTP_KEEP_OVERLOADED
	                      * refused; HTTP_KEEP_NOT_ASKED */
	const struct sockaddr *peer;
	double start;        /* monotonic seconds when the request arrived */
	int status;          /* set by the responders */
	void *priv;          /* http.c's per-request state */
};

/* Answers later: called on the connection's thread once http_resume ran,
 * with the request rebuilt; it answers like a handler. req is NULL when the
 * connection went away instead: then it only frees arg. */
typedef enum MHD_Result (*http_resume_fn)(void *arg, struct http_req *req);

/* Returns an MHD_Result from one of the responders below. */
typedef enum MHD_Result (*http_handler)(void *ctx, struct http_req *req);

/* Sees every request once it is answered (req->status set): the handler's
 * answers, deferred ones when they are sent, and http.c's own (400, 413,
 * 431). */
typedef void (*http_observer)(void *ctx, const struct http_req *req);

/* Longest Location a redirect sends (http_location_length): the
 * connection's memory holds the request's head and the response's. */
#define HTTP_LOCATION_MAX 4096

/* Bytes of url as a Location header: UTF-8 and the characters a URI may
 * not hold as they are go as %XX. */
size_t http_location_length(const char *url);

/* url (borrowed) with an international host name in its punycode (ASCII)
 * form, as DNS and clients other than browsers need it: "b\xc3\xbccher.de"
 * -> "xn--bcher-kva.de". The rest is unchanged. The URL as it is when its
 * host is ASCII (IP literals too), when libidn2 refuses the name, or when
 * the result would pass HTTP_LOCATION_MAX. Caller frees; NULL when out of
 * memory. */
char *http_location_url(const char *url);

/* host (borrowed: a name without port, percent-decoded) in the ASCII form
 * http_location_url sends: libidn2's UTS #46 mapping with STD3 rules, so
 * "\xef\xbd\x93.test" (a fullwidth s) is "s.test". A malloc'd string the
 * caller frees, or NULL when host is ASCII, when libidn2 refuses it, when
 * the result holds anything but letters, digits, '-' and '.', or when out
 * of memory. */
char *http_host_ace(const char *host);

struct http_conf {
	const char *addr;        /* listen address, e.g. "127.0.0.1" or "0.0.0.0" */
	int port;
	int threads;             /* epoll thread pool size */
	int max_connections;
	int max_connections_per_ip; /* from one peer address at once; 0: no limit */
	int timeout_s;           /* idle connection timeout */
	size_t max_body;         /* larger bodies get 413 */
	size_t max_header;       /* largest request line and headers (bigger: 431) */
	http_observer observe;   /* or NULL */
	/* Or NULL (every one keeps it). Whether a POST, PATCH or PUT with an
	 * Authorization header keeps its body (up to max_body), asked once
	 * its headers are in: > 0 keeps it, 0 or -1 has it read and dropped;
	 * the handler sees the answer as req->body_verdict. path (decoded)
	 * and auth (the header's value) are borrowed. may_wait 0: asked on an
	 * HTTP thread, it must not block and answers HTTP_KEEP_ASK_LATER when
	 * it cannot tell at once; it is then asked again with may_wait 1 on a
	 * thread of keep_body_queue while the connection waits suspended
	 * (HTTP_KEEP_OVERLOADED when that queue is full, HTTP_KEEP_STOPPING
	 * when the server's drain refuses deferrals, -1 out of memory). */
	long long (*keep_body)(void *ctx, const char *path, const char *auth, int may_wait);
	struct workq *keep_body_queue; /* borrowed; NULL: keep_body may always wait */
};

#define HTTP_KEEP_ASK_LATER (-2)
#define HTTP_KEEP_NOT_ASKED (-3)
#define HTTP_KEEP_STOPPING (-4)
#define HTTP_KEEP_OVERLOADED (-5)

struct http_server;

/* Starts listening. ctx is passed to handler. Returns NULL with errstr. */
struct http_server *http_start(const struct http_conf *conf, http_handler handler, void *ctx,
                               char *errstr, size_t errstr_size);
/* Stops accepting new connections (the listening socket closes) without
 * waiting; connections already open are served until http_stop. */
void http_quiesce(struct http_server *s);
/* Drains, then stops and frees: returns 0. For up to half of drain_ms,
 * requests are served as before but every answer made by the responders
 * below closes its connection (http_draining), until the deferred requests
 * are answered; then requests are still served but none deferred (those
 * that would wait get 503 "unavailable") while the deferred ones are
 * answered, up to drain_ms in all. When some are still waiting then (a lookup, API call or create
 * stuck on its database), returns -1 and leaves the server running, no
 * handler running again, its threads and memory untouched (libmicrohttpd
 * cannot stop with connections suspended, and the jobs holding them will
 * still resume them): the caller then exits without freeing what those
 * jobs use. */
int http_stop(struct http_server *s, int drain_ms);

/* From a handler that cannot answer without waiting: suspends the
 * connection (no thread waits for it) and returns a token for http_resume;
 * the handler then returns MHD_YES without answering. Once http_resume(token)
 * ran, from any thread, fn(arg, req) answers on the connection's thread.
 * http_stop waits for every deferred request to be answered (up to its
 * drain_ms). In the drain's second half http_defer returns NULL: the
 * handler answers by itself without waiting on a database (http_stopping). */
struct http_deferred;
struct http_deferred *http_defer(struct http_req *req, http_resume_fn fn, void *arg);
void http_resume(struct http_deferred *d);

/* From a handler whose work waits on PostgreSQL or Redis: runs
 * handler(ctx, copy of req) on a thread of q (workq.h) while the connection
 * is suspended, and sends what it answered through the responders below once
 * it returns (nothing answered: the connection closes). That handler reads
 * the request as any handler does, but must neither defer (http_defer) nor
 * queue a response by itself. With q full the request gets 503
 * "overloaded" at once (out of memory: "unavailable"). Returns what a
 * handler returns. */
struct workq;
enum MHD_Result http_offload(struct http_req *req, struct workq *q, http_handler handler,
                             void *ctx);

/* 1 once http_stop began: the answers of the responders below then close
 * their connections; a handler answering with a shared prepared response
 * should answer with a fresh one instead (the header cannot be added to a
 * shared one). */
int http_draining(const struct http_req *req);

/* 503 "unavailable", the server stopping: for a handler whose http_defer
 * was refused and whose work would wait on a database. */
enum MHD_Result http_stopping(struct http_req *req);

/* Request header value or NULL (libmicrohttpd owns it). */
const char *http_header(struct http_req *req, const char *name);

/* The first value of each of n headers (names compared case-insensitively)
 * in one pass over the request's headers; values[i] is NULL when names[i]
 * is absent. libmicrohttpd owns the values. */
void http_headers(struct http_req *req, const char *const *names, const char **values, size_t n);

/* Every value of header name joined with ", " into buf, or NULL when the
 * header is absent. Returns buf or NULL. A join longer than size - 1 keeps
 * its last whole elements (where proxies append: X-Forwarded-For) and drops
 * the ones at its start. */
char *http_header_join(struct http_req *req, const char *name, char *buf, size_t size);

/* Responders: each queues a response and returns the MHD result. */
enum MHD_Result http_json(struct http_req *req, unsigned status, json_t *body /* stolen */);
/* {"error": {"code": code, "message": message, "field": field?}} */
enum MHD_Result http_error(struct http_req *req, unsigned status, const char *code,
                           const char *field, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* 405 with the JSON error body and "Allow: allow" (RFC 9110 requires it),
 * e.g. allow "GET, HEAD". */
enum MHD_Result http_not_allowed(struct http_req *req, const char *allow);
/* 1 when the request's method is GET or HEAD (MHD sends no body for HEAD). */
int http_is_get(const struct http_req *req);
enum MHD_Result http_redirect(struct http_req *req, unsigned status, const char *location);
/* The body-less redirect response to location (caller destroys it; NULL when
 * out of memory): Location and "Cache-Control: private, max-age=0". A
 * Location is ASCII (RFC 9110, a URI reference): a URL kept as its creator
 * sent it, with UTF-8 in its host, path or query, goes out with each byte of
 * 0x80 or more as %XX, as browsers send it. http_redirect queues one;
 * redirect.c prepares one per cached link. */
struct MHD_Response *http_redirect_response(const char *location);
/* Answers with resp (taken: destroyed here; NULL: out of memory, the
 * connection closes), as the helpers below do: "Connection: close" while the
 * server drains, kept for later on an offload thread. */
enum MHD_Result http_respond(struct http_req *req, unsigned status, struct MHD_Response *resp);

enum MHD_Result http_text(struct http_req *req, unsigned status, const char *content_type,
                          const char *text, size_t len);

/* Monotonic clock in seconds. */
double http_now(void);

#endif
