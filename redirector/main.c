/* redirector - linkpulse's HTTP front: the /api/v1 links API and GET /{code}
 * redirects. Also `redirector apikey create|revoke|list|check` for keys. */
#include "api.h"
#include "apikey.h"
#include "bloom.h"
#include "clientip.h"
#include "config.h"
#include "errstr.h"
#include "events.h"
#include "http.h"
#include "kv.h"
#include "links.h"
#include "log.h"
#include "metrics.h"
#include "metricsd.h"
#include "monotime.h"
#include "pgpool.h"
#include "pool.h"
#include "redirect.h"
#include "workq.h"

#include <curl/curl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* jemalloc's options, which it reads from this symbol before main (the name
 * is jemalloc's; MALLOC_CONF in the environment still overrides it; unused in
 * sanitizer builds, which keep libc's malloc). Freed memory is kept instead of
 * returned to the kernel (no decay) and backed by transparent huge pages where
 * the kernel allows them. Every visit's copy and every event is allocated and
 * freed; with decay the heap's pages were returned and faulted in again, and a
 * page fault costs ~12 µs on the bench machine of the twenty-seventh session
 * (README, Redirects: ~1 µs less CPU per request). Resident memory stays at its
 * peak, which the bounded queues bound. */
const char *malloc_conf = "thp:always,dirty_decay_ms:-1,muzzy_decay_ms:-1";

struct redirector_conf {
	char *listen_addr;
	long long listen_port;
	char *base_url;
	char *pg_dsn;
	long long pg_pool_size;
	char *redis_url;
	long long redis_timeout_ms;
	char *kafka_bootstrap;
	char *kafka_topic;
	char *spool_dir;
	long long http_threads;
	long long max_connections;
	long long max_connections_per_ip;
	long long request_timeout_s;
	long long max_body_bytes;
	long long max_header_bytes;
	char *code_strategy;
	long long code_length;
	char *sequence_secret;
	long long pool_low_water;
	long long pool_batch;
	long long pool_pg_reserve;
	long long create_batch_workers;
	long long bloom_expected;
	long long bloom_fpr_ppm;
	long long link_cache_ttl_s;
	char *trusted_proxies;
	long long cache_max_entries;
	long long cache_max_bytes;
	long long cache_ttl_ms;
	long long cache_negative_ttl_ms;
	long long cold_lookup_threads;
	long long cold_lookup_queue;
	long long api_threads;
	long long lookup_timeout_ms;
	long long api_queue;
	long long worker_id;
	long long kafka_linger_ms;
	long long kafka_queue_max_messages;
	long long kafka_message_timeout_ms;
	long long kafka_message_max_bytes;
	long long shutdown_flush_ms;
	long long shutdown_drain_ms;
	long long spool_max_bytes;
	long long spool_fsync_ms;
	char *metrics_allow;
	char *metrics_addr;
	long long metrics_port;
	char *log_level;
	char *log_format;
};

#define OFF(f) offsetof(struct redirector_conf, f)
static const struct cfg_opt redirector_tab[] = {
	{ "listen_addr", CFG_STR, "127.0.0.1", 0, 0, NULL, OFF(listen_addr), 0, "IPv4 address to listen on" },
	{ "listen_port", CFG_INT, "8080", 1, 65535, NULL, OFF(listen_port), 0, "TCP port to listen on" },
	{ "base_url", CFG_STR, "http://127.0.0.1:8080", 0, 0, NULL, OFF(base_url), 0,
	  "public base of short URLs ({base_url}/{code}); its host is refused as a target" },
	{ "pg_dsn", CFG_STR, "dbname=linkpulse", 0, 0, NULL, OFF(pg_dsn), 0, "PostgreSQL connection string (libpq)" },
	{ "pg_pool_size", CFG_INT, "16", 1, 1000, NULL, OFF(pg_pool_size), 0, "most PostgreSQL connections" },
	{ "redis_url", CFG_STR, "redis://127.0.0.1:6379/0", 0, 0, NULL, OFF(redis_url), 0,
	  "Redis for the link cache and code pool (redis://host:port/db; empty = none)" },
	{ "redis_timeout_ms", CFG_INT, "200", 10, 10000, NULL, OFF(redis_timeout_ms), 0,
	  "Redis connect and command timeout" },
	{ "kafka_bootstrap", CFG_STR, "127.0.0.1:9092", 0, 0, NULL, OFF(kafka_bootstrap), 0,
	  "Kafka bootstrap.servers for visit events (empty = publish no events)" },
	{ "kafka_topic", CFG_STR, "visits", 0, 0, NULL, OFF(kafka_topic), 0, "topic for visit events" },
	{ "spool_dir", CFG_STR, "var/spool", 0, 0, NULL, OFF(spool_dir), 0,
	  "directory of the on-disk event spool used while Kafka is unreachable" },
	{ "http_threads", CFG_INT, "0", 0, 256, NULL, OFF(http_threads), 0,
	  "HTTP worker threads (epoll thread pool); 0 = number of cores" },
	{ "max_connections", CFG_INT, "10000", 1, 1000000, NULL, OFF(max_connections), 0,
	  "most concurrent client connections" },
	{ "max_connections_per_ip", CFG_INT, "0", 0, 1000000, NULL, OFF(max_connections_per_ip), 0,
	  "most concurrent connections from one peer address, more are closed at once (0 = no "
	  "limit; behind a load balancer or proxy every client has its address: keep 0 there)" },
	{ "request_timeout_s", CFG_INT, "30", 1, 3600, NULL, OFF(request_timeout_s), 0,
	  "idle connection / request timeout" },
	{ "max_body_bytes", CFG_INT, "8388608", 1024, 1073741824, NULL, OFF(max_body_bytes), 0,
	  "largest request body (bigger: 413)" },
	{ "max_header_bytes", CFG_INT, "8192", 4096, 1048576, NULL, OFF(max_header_bytes), 0,
	  "largest request line and headers, 64 bytes more counted per header and per query parameter (bigger: 431); a connection's memory is this plus 5 KiB for the response's headers (libmicrohttpd zeroes it per request: keep it modest)" },
	{ "code_strategy", CFG_ENUM, "random", 0, 0, "random|hash|sequence", OFF(code_strategy), 0,
	  "default code strategy (overridable per request)" },
	{ "code_length", CFG_INT, "6", 1, 8, NULL, OFF(code_length), 0, "default code length" },
	{ "sequence_secret", CFG_STR, LINKS_DEV_SEQUENCE_SECRET, 0, 0, NULL, OFF(sequence_secret), 0,
	  "key of the sequence strategy's permutation: the built-in one is public and refused unless base_url's host is a loopback one (set your own, e.g. openssl rand -hex 32; never change it)" },
	{ "pool_low_water", CFG_INT, "20000", 1, 100000000, NULL, OFF(pool_low_water), 0,
	  "refill the Redis code pool below this many codes" },
	{ "pool_batch", CFG_INT, "10000", 1, 1000000, NULL, OFF(pool_batch), 0, "codes generated per refill round" },
	{ "pool_pg_reserve", CFG_INT, "10000", 0, 100000000, NULL, OFF(pool_pg_reserve), 0,
	  "unused codes kept in PostgreSQL only, claimed by creation while Redis is down" },
	{ "create_batch_workers", CFG_INT, "2", 1, 64, NULL, OFF(create_batch_workers), 0,
	  "threads turning queued single creates into batches (fewer: bigger batches, less CPU per create)" },
	{ "bloom_expected", CFG_INT, "10000000", 1000, 4000000000LL, NULL, OFF(bloom_expected), 0,
	  "codes the Bloom filter is sized for" },
	{ "bloom_fpr_ppm", CFG_INT, "1000", 1, 500000, NULL, OFF(bloom_fpr_ppm), 0,
	  "Bloom filter target false-positive rate, parts per million (1000 = 0.1%)" },
	{ "link_cache_ttl_s", CFG_INT, "86400", 1, 31536000, NULL, OFF(link_cache_ttl_s), 0,
	  "TTL of link records cached in Redis" },
	{ "trusted_proxies", CFG_STR, "", 0, 0, NULL, OFF(trusted_proxies), 0,
	  "comma-separated CIDRs of proxies whose X-Forwarded-For is believed (empty = none)" },
	{ "cache_max_entries", CFG_INT, "100000", 1, 100000000, NULL, OFF(cache_max_entries), 0,
	  "most links in the in-process redirect cache" },
	{ "cache_max_bytes", CFG_INT, "67108864", 65536, 68719476736LL, NULL, OFF(cache_max_bytes), 0,
	  "most memory of the in-process redirect cache" },
	{ "cache_ttl_ms", CFG_INT, "5000", 1, 3600000, NULL, OFF(cache_ttl_ms), 0,
	  "how long a link stays in the in-process cache: edits made through another "
	  "redirector take effect within this" },
	{ "cache_negative_ttl_ms", CFG_INT, "1000", 1, 600000, NULL, OFF(cache_negative_ttl_ms), 0,
	  "how long an unknown code is remembered as unknown" },
	{ "cold_lookup_threads", CFG_INT, "16", 1, 1024, NULL, OFF(cold_lookup_threads), 0,
	  "threads that look up codes the in-process cache cannot answer (Redis, then "
	  "PostgreSQL) while the request's connection waits suspended, so HTTP threads never "
	  "wait on a lookup (keep it near pg_pool_size)" },
	{ "cold_lookup_queue", CFG_INT, "1024", 1, 1000000, NULL, OFF(cold_lookup_queue), 0,
	  "most such lookups waiting for a thread; a request that finds it full gets 503 "
	  "\"overloaded\" at once (while PostgreSQL is slow, a flood of made-up codes "
	  "cannot hold every connection)" },
	{ "lookup_timeout_ms", CFG_INT, "5000", 100, 600000, NULL, OFF(lookup_timeout_ms), 0,
	  "longest a link's lookup statement in PostgreSQL may run (a redirect's cold lookup), "
	  "and each statement of the API's get, list, resolve, edit and delete; past it the "
	  "statement is cancelled and the request gets 503" },
	{ "api_threads", CFG_INT, "8", 1, 1024, NULL, OFF(api_threads), 0,
	  "threads that run API calls other than creates (their key check, get, list, resolve, "
	  "edit, delete) and the creates the batch workers do not take (alias, hash, sequence, "
	  "other lengths) while the connection waits suspended" },
	{ "api_queue", CFG_INT, "256", 1, 1000000, NULL, OFF(api_queue), 0,
	  "most such calls waiting for a thread; a call that finds it full gets 503 "
	  "\"overloaded\" at once" },
	{ "worker_id", CFG_INT, "0", 0, 1023, NULL, OFF(worker_id), 0,
	  "event id worker number: unique per redirector process sharing a topic" },
	{ "kafka_linger_ms", CFG_INT, "200", 0, 60000, NULL, OFF(kafka_linger_ms), 0,
	  "linger.ms: how long events wait to be batched" },
	{ "kafka_queue_max_messages", CFG_INT, "100000", 1, 10000000, NULL, OFF(kafka_queue_max_messages), 0,
	  "librdkafka queue size (queue.buffering.max.messages); beyond it events go to the spool" },
	{ "kafka_message_max_bytes", CFG_INT, "1000000", 1000, 100000000, NULL, OFF(kafka_message_max_bytes), 0,
	  "message.max.bytes: the largest event Kafka is asked to take (keep it at most the "
	  "topic's max.message.bytes); a spooled event Kafka refuses for good goes to "
	  "spool_dir/refused-N.spool" },
	{ "kafka_message_timeout_ms", CFG_INT, "30000", 1000, 3600000, NULL, OFF(kafka_message_timeout_ms), 0,
	  "message.timeout.ms: events undelivered after this go to the spool" },
	{ "shutdown_flush_ms", CFG_INT, "5000", 0, 50000, NULL, OFF(shutdown_flush_ms), 0,
	  "at SIGTERM, wait this long for Kafka to take queued events; the rest are spooled "
	  "(keep it ~10 s under the supervisor's stop timeout: compose 60 s, systemd 90 s)" },
	{ "shutdown_drain_ms", CFG_INT, "30000", 0, 600000, NULL, OFF(shutdown_drain_ms), 0,
	  "at SIGTERM, wait this long for requests waiting on a lookup, an API call or a "
	  "create to be answered; past it the process flushes or spools its events and exits "
	  "with status 1 without answering them (shutdown_flush_ms counts from the signal too: "
	  "keep the longer of the two ~10 s under the supervisor's stop timeout)" },
	{ "spool_max_bytes", CFG_INT, "1073741824", 65536, 1099511627776LL, NULL, OFF(spool_max_bytes), 0,
	  "cap of the event spool; beyond it events are dropped (counted, logged at error)" },
	{ "spool_fsync_ms", CFG_INT, "50", 1, 10000, NULL, OFF(spool_fsync_ms), 0,
	  "the spool is written and fsynced in batches this often" },
	{ "metrics_allow", CFG_STR, "127.0.0.0/8,::1,10.0.0.0/8,172.16.0.0/12,192.168.0.0/16", 0, 0,
	  NULL, OFF(metrics_allow), 0,
	  "comma-separated CIDRs that may GET /metrics (others get 404; empty = nobody)" },
	{ "metrics_port", CFG_INT, "0", 0, 65535, NULL, OFF(metrics_port), 0,
	  "also serve GET /metrics (to anyone who reaches it) on a listener of its own at "
	  "metrics_addr:metrics_port (0 = none); with it, metrics_allow can be empty" },
	{ "metrics_addr", CFG_STR, "127.0.0.1", 0, 0, NULL, OFF(metrics_addr), 0,
	  "address of the metrics_port listener (numeric IPv4 or IPv6)" },
	{ "log_level", CFG_ENUM, "info", 0, 0, "debug|info|warn|error", OFF(log_level), 1,
	  "log level (debug adds one line per request)" },
	{ "log_format", CFG_ENUM, "logfmt", 0, 0, "logfmt|json", OFF(log_format), 1, "log line format" },
	CFG_END
};

static const struct cfg_prog redirector_prog = {
	"redirector",
	"linkpulse redirector: links API and redirects.\n"
	"Also: redirector [options] apikey create NAME | revoke ID|PREFIX|KEY | list | check KEY",
	"LINKPULSE_", redirector_tab, sizeof(struct redirector_conf)
};

struct app {
	struct redirector_conf conf;
	int abandoned;              /* serve left requests unanswered: free nothing */
	struct workq *api_q;        /* API calls off the HTTP threads */
	struct pgpool *pg;
	struct kv *kv;
	struct bloom *bloom;
	struct pool *pool;
	struct links *links;
	struct redirect *redir;
	struct events *events;
	struct api api;
	const char *config_path; /* for SIGHUP (argv or environ) */
	int argc;                /* the arguments cfg_from_args read */
	char **argv;
	struct metrics *metrics;
	struct metricsd *metricsd;        /* the metrics_port listener, or NULL */
	struct clientip *metrics_allow;
	struct metrics_family *requests;  /* by status */
	struct metrics_series *latency;
	struct metrics_series *_Atomic by_status[600]; /* requests series cache */
	struct metrics_series *ev[10], *cache[4], *pool_size, *replay_stopped, *cold[2], *api_m[2],
	    *spool_refused;
};

/* GET /metrics for addresses in metrics_allow; 404 (like any unknown path
 * without a link) for the rest. */
static enum MHD_Result
metrics_answer(struct app *app, struct http_req *req)
{
	struct MHD_Response *resp;

	if (!clientip_peer_trusted(app->metrics_allow, req->peer))
		return http_error(req, 404, "not_found", NULL, "no such short link");
	if (!http_is_get(req))
		return http_not_allowed(req, "GET, HEAD");
	if ((resp = metricsd_response(app->metrics)) == NULL)
		return http_error(req, 500, "internal", NULL, "out of memory");
	return http_respond(req, 200, resp);
}

/* A create, edit or deletion of code through this process (api.c): its
 * redirects see it at once (other processes: within cache_ttl_ms), and a
 * code just created no longer answers 404 from the negative cache. */
static void
changed(void *ctx, const char *code)
{
	struct app *app = ctx;

	redirect_invalidate(app->redir, code);
}

/* Every answered request (http_observer: a create deferred and answered
 * later too, and http.c's own 400/413/431): counted by status, timed from
 * its arrival, and logged at debug level. Creates were not counted: their
 * handler defers them and the answer was sent past this. */
static void
observe(void *ctx, const struct http_req *req)
{
	struct app *app = ctx;
	double dt = http_now() - req->start;
	int st = req->status;

	if (st >= 100 && st < 600) {
		struct metrics_series *s = atomic_load_explicit(&app->by_status[st],
		    memory_order_acquire);

		if (s == NULL) {
			char code[8];

			snprintf(code, sizeof(code), "%d", st);
			if ((s = metrics_series(app->requests, code, NULL)) != NULL)
				atomic_store_explicit(&app->by_status[st], s, memory_order_release);
		}
		if (s != NULL)
			metrics_inc(s);
	}
	metrics_observe(app->latency, dt);
	if (log_enabled(LOG_LVL_DEBUG))
		log_debug("request method=%s path=%s status=%d duration_ms=%.3f", req->method,
		    req->path, st, dt * 1000);
}

/* "/api/v1" or under it */
static int
is_api_path(const char *p)
{
	return strncmp(p, "/api/v1", 7) == 0 && (p[7] == '/' || p[7] == '\0');
}

static enum MHD_Result
route(void *ctx, struct http_req *req)
{
	struct app *app = ctx;
	const char *p = req->path;

	if (is_api_path(p))
		return api_handle(&app->api, req, p + 7);
	if (strcmp(p, "/healthz") == 0)
		return !http_is_get(req) ? http_not_allowed(req, "GET, HEAD") :
		    http_json(req, 200, json_pack("{s:s}", "status", "ok"));
	if (strcmp(p, "/metrics") == 0)
		return metrics_answer(app, req);
	if (strcmp(p, "/readyz") == 0)
		return !http_is_get(req) ? http_not_allowed(req, "GET, HEAD") :
		    redirect_ready(app->redir, req);
	return redirect_handle(app->redir, req);
}

/* http_conf.keep_body: only an API request whose key checks out keeps its
 * body (the handler takes the key's id from the verdict), so that a client
 * without a key cannot make the process hold max_body_bytes per connection
 * by sending any Authorization header. On an HTTP thread the key cache
 * answers, or the question goes to an API thread (a key not cached costs a
 * query). A key that cannot be checked (PostgreSQL down) keeps none: -1, and
 * the handler answers 503. */
static long long
keep_body(void *ctx, const char *path, const char *auth, int may_wait)
{
	struct app *app = ctx;
	char errstr[256];
	long long id;

	if (!is_api_path(path) || strncasecmp(auth, "Bearer ", 7) != 0)
		return 0;
	if (!may_wait)
		return (id = apikey_check_cached(auth + 7)) == APIKEY_NOT_CACHED ?
		    HTTP_KEEP_ASK_LATER : id;
	if ((id = apikey_check(app->pg, auth + 7, errstr, sizeof(errstr))) < 0)
		log_warnx("api key check: %s", errstr);
	return id;
}

static int
apikey_cmd(struct app *app, int argc, char **argv)
{
	char errstr[512], key[64];
	PGconn *c;
	long long id;
	int rc = 1, n;

	if (argc < 1) {
		fprintf(stderr, "redirector apikey: create NAME | revoke ID|PREFIX|KEY | list | check KEY\n");
		return 2;
	}
	if ((c = pgpool_get(app->pg, 5000, errstr, sizeof(errstr))) == NULL) {
		fprintf(stderr, "redirector apikey: %s\n", errstr);
		return 1;
	}
	if (strcmp(argv[0], "create") == 0 && argc == 2) {
		if (apikey_create(c, argv[1], key, sizeof(key), &id, errstr, sizeof(errstr)) == 0) {
			printf("created key %lld (%s): %s\n", id, argv[1], key);
			rc = 0;
		}
	} else if (strcmp(argv[0], "revoke") == 0 && argc == 2) {
		if ((n = apikey_revoke(c, argv[1], errstr, sizeof(errstr))) > 0) {
			printf("revoked %d key(s)\n", n);
			rc = 0;
		} else if (n == 0) {
			snprintf(errstr, sizeof(errstr), "no live key matches \"%s\"", argv[1]);
		}
	} else if (strcmp(argv[0], "list") == 0 && argc == 1) {
		rc = apikey_list(c, stdout, errstr, sizeof(errstr)) == 0 ? 0 : 1;
	} else if (strcmp(argv[0], "check") == 0 && argc == 2) {
		pgpool_put(app->pg, c);
		c = NULL;
		id = apikey_check(app->pg, argv[1], errstr, sizeof(errstr));
		if (id > 0) {
			printf("valid key %lld\n", id);
			rc = 0;
		} else if (id == 0) {
			snprintf(errstr, sizeof(errstr), "unknown or revoked key");
		}
	} else {
		snprintf(errstr, sizeof(errstr), "unknown apikey command (create NAME | revoke X | list | check KEY)");
		rc = 2;
	}
	if (c != NULL)
		pgpool_put(app->pg, c);
	if (rc != 0)
		fprintf(stderr, "redirector apikey: %s\n", errstr);
	return rc;
}

/* Loads every known code into the Bloom filter. */
static int
load_bloom(struct app *app, char *errstr, size_t errstr_size)
{
	PGconn *c = pgpool_get(app->pg, 5000, errstr, errstr_size);
	PGresult *r;

	if (c == NULL)
		return -1;
	r = pgpool_exec(c, "SELECT code FROM unique_code UNION ALL SELECT code FROM url_link "
	    "WHERE strategy = 3", 0, NULL, NULL, errstr, errstr_size);
	pgpool_put(app->pg, c);
	if (r == NULL)
		return -1;
	for (int i = 0; i < PQntuples(r); i++)
		bloom_add(app->bloom, PQgetvalue(r, i, 0), (size_t)PQgetlength(r, i, 0));
	log_info("bloom filter: %d codes loaded, %llu bits, %d hashes", PQntuples(r),
	    (unsigned long long)bloom_bits(app->bloom), bloom_hashes(app->bloom));
	PQclear(r);
	return 0;
}

/* Scrape-time copy of the counters events, the link cache and the pool keep. */
static void
collect(void *arg)
{
	struct app *app = arg;
	struct events_stats es;
	struct lcache_stats cs;

	memset(&es, 0, sizeof(es));
	if (app->events != NULL)
		events_stats(app->events, &es);
	metrics_counter_set(app->ev[0], es.produced);
	metrics_counter_set(app->ev[1], es.delivered);
	metrics_counter_set(app->ev[2], es.failed);
	metrics_counter_set(app->ev[3], es.spooled);
	metrics_counter_set(app->ev[4], es.replayed);
	metrics_counter_set(app->ev[5], es.spool_dropped);
	metrics_set(app->ev[6], (double)es.queued);
	metrics_set(app->ev[7], (double)es.spool_bytes);
	metrics_set(app->ev[8], app->events != NULL && es.connected);
	metrics_set(app->ev[9], (double)es.pending);
	metrics_set(app->replay_stopped, es.replay_stopped);
	metrics_counter_set(app->spool_refused, es.spool_refused);
	memset(&cs, 0, sizeof(cs));
	if (app->redir != NULL)
		redirect_cache_stats(app->redir, &cs);
	metrics_counter_set(app->cache[0], cs.hits);
	metrics_counter_set(app->cache[1], cs.misses);
	metrics_counter_set(app->cache[2], cs.load_errors);
	metrics_set(app->cache[3], (double)cs.entries);
	metrics_set(app->pool_size, app->pool != NULL ? (double)pool_size(app->pool) : -1);
	if (app->redir != NULL) {
		uint64_t pending, refused;

		redirect_cold_stats(app->redir, &pending, &refused);
		metrics_set(app->cold[0], (double)pending);
		metrics_counter_set(app->cold[1], refused);
	}
	if (app->api_q != NULL) {
		struct workq_stats ws;

		workq_stats(app->api_q, &ws);
		metrics_set(app->api_m[0], (double)(ws.queued + ws.running));
		metrics_counter_set(app->api_m[1], ws.refused);
	}
}

/* The registry behind GET /metrics; names are docs/operations.md's. */
static int
metrics_setup(struct app *app, char *errstr, size_t errstr_size)
{
	static const struct {
		int type;
		const char *name, *help;
	} defs[] = {
		{ METRICS_COUNTER, "linkpulse_redirector_events_produced_total",
		  "Visit events handed to the Kafka producer (first attempt)." },
		{ METRICS_COUNTER, "linkpulse_redirector_events_delivered_total",
		  "Visit events acknowledged by Kafka (acks=all), replays included." },
		{ METRICS_COUNTER, "linkpulse_redirector_events_failed_total",
		  "Delivery failures (live events: they go to the spool; replayed ones: their file is sent again) and events the producer queue refused." },
		{ METRICS_COUNTER, "linkpulse_redirector_events_spooled_total",
		  "Visit events handed to the on-disk spool (those a failed write lost are in spool_dropped too)." },
		{ METRICS_COUNTER, "linkpulse_redirector_events_replayed_total",
		  "Deliveries of spooled visit events (a file retried after a failure is sent, and counted, whole again)." },
		{ METRICS_COUNTER, "linkpulse_redirector_events_spool_dropped_total",
		  "Visit events lost: the spool full (spool_max_bytes), a failed write, a record past its bounds, or held in memory at exit with no spool file to write." },
		{ METRICS_GAUGE, "linkpulse_redirector_producer_queue_depth",
		  "Events in librdkafka's queue now." },
		{ METRICS_GAUGE, "linkpulse_redirector_spool_bytes", "Bytes in the event spool now." },
		{ METRICS_GAUGE, "linkpulse_redirector_kafka_connected",
		  "1 while the producer reaches a Kafka broker." },
		{ METRICS_GAUGE, "linkpulse_redirector_events_pending",
		  "Visits copied by request threads and not yet encoded and produced." },
		{ METRICS_COUNTER, "linkpulse_redirector_cache_hits_total",
		  "Redirect lookups answered by the in-process link cache." },
		{ METRICS_COUNTER, "linkpulse_redirector_cache_misses_total",
		  "Redirect lookups the in-process cache had to load (Redis, then PostgreSQL)." },
		{ METRICS_COUNTER, "linkpulse_redirector_cache_load_errors_total",
		  "Link loads that failed (Redis and PostgreSQL unreachable)." },
		{ METRICS_GAUGE, "linkpulse_redirector_cache_entries",
		  "Links (and unknown codes) in the in-process cache now." },
		{ METRICS_GAUGE, "linkpulse_redirector_code_pool_size",
		  "Codes left in the Redis pool at the last look (-1 unknown)." },
		{ METRICS_GAUGE, "linkpulse_redirector_replay_stopped",
		  "1 after the replay producer's fatal error: spooled events wait for a restart." },
		{ METRICS_GAUGE, "linkpulse_redirector_cold_lookups_pending",
		  "Lookups of codes not in the in-process cache waiting for or running on a cold-lookup thread now." },
		{ METRICS_COUNTER, "linkpulse_redirector_cold_lookups_refused_total",
		  "Requests answered 503 overloaded: cold_lookup_queue lookups were already waiting." },
		{ METRICS_GAUGE, "linkpulse_redirector_api_pending",
		  "API calls other than creates, and key checks of calls with a body, waiting for or running on an API thread now." },
		{ METRICS_COUNTER, "linkpulse_redirector_api_refused_total",
		  "API calls answered 503 overloaded: api_queue calls were already waiting." },
		{ METRICS_COUNTER, "linkpulse_redirector_events_spool_refused_total",
		  "Spooled visit events Kafka refused for good (past kafka_message_max_bytes, or invalid), kept in spool_dir/refused-N.spool and not replayed." },
	};
	struct metrics_series *out[sizeof(defs) / sizeof(defs[0])];
	struct metrics_family *f;

	if ((app->metrics = metrics_new()) == NULL) {
		errstr_set(errstr, errstr_size, "out of memory");
		return -1;
	}
	if ((app->metrics_allow = clientip_new(app->conf.metrics_allow, errstr,
	    errstr_size)) == NULL)
		return -1;
	if ((app->requests = metrics_counter(app->metrics, "linkpulse_redirector_requests_total",
	    "HTTP responses by status code.", "status", errstr, errstr_size)) == NULL ||
	    (f = metrics_histogram(app->metrics, "linkpulse_redirector_request_duration_seconds",
	    "Time from request arrival to response queued.", NULL, metrics_latency_buckets,
	    metrics_latency_nbuckets, errstr, errstr_size)) == NULL ||
	    (app->latency = metrics_series(f, NULL, NULL)) == NULL)
		return -1;
	for (size_t i = 0; i < sizeof(defs) / sizeof(defs[0]); i++) {
		f = defs[i].type == METRICS_COUNTER ?
		    metrics_counter(app->metrics, defs[i].name, defs[i].help, NULL, errstr,
		    errstr_size) :
		    metrics_gauge(app->metrics, defs[i].name, defs[i].help, NULL, errstr,
		    errstr_size);
		if (f == NULL || (out[i] = metrics_series(f, NULL, NULL)) == NULL) {
			if (f != NULL)
				errstr_set(errstr, errstr_size, "out of memory");
			return -1;
		}
	}
	memcpy(app->ev, out, sizeof(app->ev));
	memcpy(app->cache, out + 10, sizeof(app->cache));
	app->pool_size = out[14];
	app->replay_stopped = out[15];
	app->cold[0] = out[16];
	app->cold[1] = out[17];
	app->api_m[0] = out[18];
	app->api_m[1] = out[19];
	app->spool_refused = out[20];
	return metrics_on_collect(app->metrics, collect, app);
}

/* SIGHUP: re-read the configuration; apply the reloadable settings. */
static void
reload(struct app *app)
{
	char errstr[512];

	log_info("SIGHUP: reloading the configuration");
	if (cfg_reload(&redirector_prog, &app->conf, app->config_path, app->argc, app->argv,
	    errstr, sizeof(errstr)) < 0)
		return;
	if (log_init(NULL, app->conf.log_level, app->conf.log_format, errstr,
	    sizeof(errstr)) < 0)
		log_error("config: %s", errstr);
}

static void
app_free(struct app *app)
{
	metricsd_stop(app->metricsd); /* first: a scrape reads what the rest frees */
	workq_free(app->api_q);       /* its calls use the links and the pools */
	redirect_free(app->redir);
	events_close(app->events);
	links_free(app->links);
	pool_free(app->pool);
	bloom_free(app->bloom);
	kv_free(app->kv);
	pgpool_free(app->pg);
	apikey_cache_free();
	clientip_free(app->metrics_allow);
	metrics_free(app->metrics);
	cfg_free(&redirector_prog, &app->conf);
}

static int
serve(struct app *app)
{
	struct redirector_conf *cf = &app->conf;
	struct http_conf hc;
	struct links_conf lc;
	struct redirect_conf rc;
	struct events_conf ec;
	struct http_server *srv;
	char errstr[512];
	sigset_t set;
	int sig;
	long threads = cf->http_threads ? cf->http_threads : sysconf(_SC_NPROCESSORS_ONLN);

	/* Signals are taken by sigwait below. Blocked before the first thread
	 * starts (the metrics daemon, the code pool's refill, the batch create
	 * workers, librdkafka's), so every thread inherits the mask and a
	 * SIGHUP or SIGTERM that arrives outside sigwait waits for it instead
	 * of killing the process by its default action. */
	sigemptyset(&set);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGHUP);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	signal(SIGPIPE, SIG_IGN);

	if (metrics_setup(app, errstr, sizeof(errstr)) < 0 ||
	    (cf->metrics_port > 0 && (app->metricsd = metricsd_start(cf->metrics_addr,
	    (int)cf->metrics_port, app->metrics, NULL, NULL, errstr, sizeof(errstr))) == NULL)) {
		log_fatalx("metrics: %s", errstr);
		return 1;
	}
	if (app->metricsd != NULL)
		log_info("metrics on http://%s:%d/metrics", cf->metrics_addr,
		    metricsd_port(app->metricsd));
	lc.base_url = cf->base_url;
	lc.default_length = (int)cf->code_length;
	lc.default_strategy = strcmp(cf->code_strategy, "hash") == 0 ? LINKS_HASH :
	    strcmp(cf->code_strategy, "sequence") == 0 ? LINKS_SEQUENCE : LINKS_RANDOM;
	lc.seq_secret = cf->sequence_secret;
	lc.cache_ttl_s = (int)cf->link_cache_ttl_s;
	lc.batch_workers = (int)cf->create_batch_workers;
	lc.lookup_timeout_ms = (int)cf->lookup_timeout_ms;
	if ((app->bloom = bloom_new((uint64_t)cf->bloom_expected, (double)cf->bloom_fpr_ppm / 1e6,
	    errstr, sizeof(errstr))) == NULL ||
	    load_bloom(app, errstr, sizeof(errstr)) < 0 ||
	    (app->pool = pool_new(app->pg, app->kv, app->bloom, (int)cf->code_length,
	    cf->pool_low_water, cf->pool_batch, cf->pool_pg_reserve, errstr,
	    sizeof(errstr))) == NULL ||
	    (app->links = links_new(&lc, app->pg, app->kv, app->bloom, app->pool, errstr,
	    sizeof(errstr))) == NULL) {
		log_fatalx("%s", errstr);
		return 1;
	}
	if (*cf->kafka_bootstrap == '\0') {
		log_warnx("kafka_bootstrap is empty: visits are NOT recorded");
	} else {
		memset(&ec, 0, sizeof(ec));
		ec.bootstrap = cf->kafka_bootstrap;
		ec.topic = cf->kafka_topic;
		ec.spool_dir = cf->spool_dir;
		ec.linger_ms = (int)cf->kafka_linger_ms;
		ec.queue_max_messages = (int)cf->kafka_queue_max_messages;
		ec.message_timeout_ms = (int)cf->kafka_message_timeout_ms;
		ec.message_max_bytes = (int)cf->kafka_message_max_bytes;
		ec.shutdown_flush_ms = (int)cf->shutdown_flush_ms;
		ec.spool_max_bytes = (uint64_t)cf->spool_max_bytes;
		ec.spool_fsync_ms = (int)cf->spool_fsync_ms;
		ec.worker_id = (int)cf->worker_id;
		if ((app->events = events_new(&ec, errstr, sizeof(errstr))) == NULL) {
			log_fatalx("%s", errstr);
			return 1;
		}
	}
	memset(&rc, 0, sizeof(rc));
	rc.trusted_proxies = cf->trusted_proxies;
	rc.cache_max_entries = cf->cache_max_entries;
	rc.cache_max_bytes = cf->cache_max_bytes;
	rc.cache_ttl_ms = (int)cf->cache_ttl_ms;
	rc.cache_negative_ttl_ms = (int)cf->cache_negative_ttl_ms;
	rc.cold_lookup_threads = (int)cf->cold_lookup_threads;
	rc.cold_lookup_queue = cf->cold_lookup_queue;
	if ((app->redir = redirect_new(&rc, app->pg, app->kv, app->links, app->events, errstr,
	    sizeof(errstr))) == NULL) {
		log_fatalx("%s", errstr);
		return 1;
	}
	app->api.links = app->links;
	app->api.pg = app->pg;
	app->api.changed = changed;
	app->api.changed_ctx = app;
	if ((app->api_q = workq_new((int)cf->api_threads, (size_t)cf->api_queue, "lp-api", errstr,
	    sizeof(errstr))) == NULL) {
		log_fatalx("%s", errstr);
		return 1;
	}
	app->api.offload = app->api_q;
	links_set_offload(app->links, app->api_q);

	if (pool_start(app->pool, errstr, sizeof(errstr)) < 0) {
		log_fatalx("%s", errstr);
		return 1;
	}
	hc.addr = cf->listen_addr;
	hc.port = (int)cf->listen_port;
	hc.threads = (int)threads;
	hc.max_connections = (int)cf->max_connections;
	hc.max_connections_per_ip = (int)cf->max_connections_per_ip;
	hc.timeout_s = (int)cf->request_timeout_s;
	hc.max_body = (size_t)cf->max_body_bytes;
	hc.max_header = (size_t)cf->max_header_bytes;
	hc.observe = observe;
	hc.keep_body = keep_body;
	hc.keep_body_queue = app->api_q;
	if ((srv = http_start(&hc, route, app, errstr, sizeof(errstr))) == NULL) {
		log_fatalx("%s", errstr);
		return 1;
	}
	log_info("listening on %s:%lld (%ld threads), base URL %s", cf->listen_addr,
	    cf->listen_port, threads, cf->base_url);
	for (;;) {
		if (sigwait(&set, &sig) != 0)
			continue;
		if (sig == SIGHUP) {
			reload(app);
			continue;
		}
		break;
	}
	log_info("signal %d: draining", sig);
	events_deadline(app->events, monotime_ms() + cf->shutdown_flush_ms);
	http_quiesce(srv);
	/* Past shutdown_drain_ms no handler runs any more, but the server and
	 * the requests still waiting stay as they are: their lookups or creates
	 * use the cache, the pools and the links, so nothing is freed. */
	app->abandoned = http_stop(srv, (int)cf->shutdown_drain_ms) < 0;
	/* Nor a scrape of the metrics_port listener: its collect reads the
	 * handles events_close destroys. */
	metricsd_stop(app->metricsd);
	app->metricsd = NULL;
	/* No request runs any more: flush what Kafka has not taken yet. */
	events_close(app->events);
	app->events = NULL;
	if (app->abandoned) {
		log_warnx("stopped with requests unanswered");
		return 1;
	}
	log_info("stopped");
	return 0;
}

int
main(int argc, char **argv)
{
	static struct app app;
	enum cfg_action action;
	char errstr[512];
	int cmd_at = argc, rc;
	sigset_t hup;

	/* A reload asked for while starting (systemd sends one as soon as the
	 * unit is active) waits for serve's sigwait instead of killing the
	 * process by SIGHUP's default action. */
	sigemptyset(&hup);
	sigaddset(&hup, SIGHUP);
	pthread_sigmask(SIG_BLOCK, &hup, NULL);
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "-c") == 0 || strcmp(argv[i], "-o") == 0 ||
		    strcmp(argv[i], "--config") == 0 || strcmp(argv[i], "--set") == 0) {
			i++;
			continue;
		}
		if (strcmp(argv[i], "apikey") == 0) {
			cmd_at = i;
			break;
		}
	}
	app.argc = cmd_at;
	app.argv = argv;
	if (cfg_from_args(&redirector_prog, &app.conf, cmd_at, argv, &action, &app.config_path,
	    errstr, sizeof(errstr)) < 0) {
		fprintf(stderr, "redirector: %s\n", errstr);
		return 2;
	}
	if (action == CFG_EXIT_OK)
		return 0;
	if (log_init("redirector", app.conf.log_level, app.conf.log_format, errstr,
	    sizeof(errstr)) < 0) {
		fprintf(stderr, "redirector: %s\n", errstr);
		cfg_free(&redirector_prog, &app.conf);
		return 2;
	}
	curl_global_init(CURL_GLOBAL_DEFAULT);
	if ((app.pg = pgpool_new(app.conf.pg_dsn, (int)app.conf.pg_pool_size, errstr,
	    sizeof(errstr))) == NULL ||
	    (app.kv = kv_new(app.conf.redis_url, 64, (int)app.conf.redis_timeout_ms, errstr,
	    sizeof(errstr))) == NULL) {
		log_fatalx("%s", errstr);
		app_free(&app);
		return 1;
	}
	if (cmd_at < argc) {
		pthread_sigmask(SIG_UNBLOCK, &hup, NULL); /* a hangup ends a command */
		rc = apikey_cmd(&app, argc - cmd_at - 1, argv + cmd_at + 1);
	} else {
		rc = serve(&app);
	}
	if (app.abandoned) {
		/* Threads still use it all (see serve): no frees, and no exit
		 * handlers running beside them. */
		fflush(NULL);
		_exit(rc);
	}
	app_free(&app);
	curl_global_cleanup();
	return rc;
}
