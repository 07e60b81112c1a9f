/* ingest - linkpulse's Kafka -> enrich -> PostgreSQL loader: configuration,
 * signals and the consume loop (routing messages to the builder's lanes and
 * closing batches by count or time), with recovery from PostgreSQL failures
 * and lost offsets. */
#include "batch.h"
#include "builder.h"
#include "compactor.h"
#include "config.h"
#include "consumer.h"
#include "enrich.h"
#include "loader.h"
#include "log.h"
#include "metrics.h"
#include "metricsd.h"
#include "monotime.h"
#include "stats.h"

#include <signal.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

/* jemalloc's options, which it reads from this symbol before main (the name
 * is jemalloc's; MALLOC_CONF in the environment still overrides it; unused in
 * sanitizer builds, which keep libc's malloc). Freed memory is kept instead of
 * returned to the kernel (no decay) and backed by transparent huge pages where
 * the kernel allows them (THP mode madvise or always). ingest frees and
 * allocates its batch, rollup and fetch buffers again with every batch; with
 * decay it touched fresh pages each time, and a page fault costs ~12 µs on
 * the bench machine of the twenty-seventh session (README, Ingest: ~25% more
 * events/s). Resident memory stays at its peak: about two batches' buffers
 * and librdkafka's fetch queue (queued.max.messages.kbytes). */
const char *malloc_conf = "thp:always,dirty_decay_ms:-1,muzzy_decay_ms:-1";

struct ingest_conf {
	char *pg_dsn;
	char *kafka_bootstrap;
	char *kafka_topic;
	char *kafka_group;
	char *geoip_city_db;
	char *geoip_isp_db;
	char *geoip_locale;
	char *uap_regexes;
	char *metrics_addr;
	long long metrics_port;
	long long batch_max_events;
	long long batch_max_ms;
	long long kafka_session_timeout_ms;
	long long ua_cache_entries;
	long long geoip_cache_records;
	long long compact_interval_s;
	long long pg_statement_timeout_ms;
	char *log_level;
	char *log_format;
};

#define OFF(f) offsetof(struct ingest_conf, f)
static const struct cfg_opt ingest_tab[] = {
	{ "pg_dsn", CFG_STR, "dbname=linkpulse", 0, 0, NULL, OFF(pg_dsn), 0, "PostgreSQL connection string (libpq)" },
	{ "kafka_bootstrap", CFG_STR, "127.0.0.1:9092", 0, 0, NULL, OFF(kafka_bootstrap), 0, "Kafka bootstrap.servers" },
	{ "kafka_topic", CFG_STR, "visits", 0, 0, NULL, OFF(kafka_topic), 0, "topic of visit events" },
	{ "kafka_group", CFG_STR, "linkpulse-ingest", 0, 0, NULL, OFF(kafka_group), 0, "consumer group" },
	{ "geoip_city_db", CFG_STR, "var/geoip/GeoLite2-City.mmdb", 0, 0, NULL, OFF(geoip_city_db), 0,
	  "GeoLite2-City (or GeoIP2-City) database" },
	{ "geoip_isp_db", CFG_STR, "", 0, 0, NULL, OFF(geoip_isp_db), 0,
	  "optional GeoLite2-ASN or GeoIP2-ISP database (empty: isp/asn stay NULL)" },
	{ "geoip_locale", CFG_STR, "en", 0, 0, NULL, OFF(geoip_locale), 0, "locale of place names (en, zh-CN, de, ...)" },
	{ "uap_regexes", CFG_STR, "/usr/share/uap-core/regexes.yaml", 0, 0, NULL, OFF(uap_regexes), 0,
	  "uap-core regexes.yaml" },
	{ "metrics_addr", CFG_STR, "127.0.0.1", 0, 0, NULL, OFF(metrics_addr), 0,
	  "address of the /metrics and /healthz listener (numeric IPv4 or IPv6; 0.0.0.0 = all)" },
	{ "metrics_port", CFG_INT, "9101", 1, 65535, NULL, OFF(metrics_port), 0, "port of /metrics and /healthz" },
	{ "batch_max_events", CFG_INT, "40000", 1, 200000, NULL, OFF(batch_max_events), 1,
	  "close a batch at this many events (the lanes' buffers, written at start: ~2.4 KB per event of this, 94 MB at 40000)" },
	{ "batch_max_ms", CFG_INT, "500", 1, 600000, NULL, OFF(batch_max_ms), 1, "close a batch after this long" },
	{ "kafka_session_timeout_ms", CFG_INT, "10000", 6000, 300000, NULL, OFF(kafka_session_timeout_ms), 0,
	  "consumer group session timeout (a killed ingest's partitions move after this; "
	  "brokers refuse less than their group.min.session.timeout.ms, 6000 by default)" },
	{ "ua_cache_entries", CFG_INT, "100000", 0, 10000000, NULL, OFF(ua_cache_entries), 0,
	  "user-agent parse cache size (0: no cache)" },
	{ "geoip_cache_records", CFG_INT, "4096", 0, 1048576, NULL, OFF(geoip_cache_records), 0,
	  "decoded GeoIP records (and 4x as many addresses) cached per builder thread, ~0.6 KB per record (0: no cache)" },
	{ "compact_interval_s", CFG_INT, "60", 0, 86400, NULL, OFF(compact_interval_s), 0,
	  "run link_day_dim_compact() this often, on its own connection (0: never; run it from cron)" },
	{ "pg_statement_timeout_ms", CFG_INT, "60000", 0, 3600000, NULL, OFF(pg_statement_timeout_ms), 0,
	  "a loading statement running (or waiting on a lock) longer fails and its batch is retried (0: the server's or pg_dsn's)" },
	{ "log_level", CFG_ENUM, "info", 0, 0, "debug|info|warn|error", OFF(log_level), 1, "log level" },
	{ "log_format", CFG_ENUM, "logfmt", 0, 0, "logfmt|json", OFF(log_format), 1, "log line format" },
	CFG_END
};


static const struct cfg_prog ingest_prog = {
	"ingest", "linkpulse ingest: Kafka visit events -> enrichment -> PostgreSQL (COPY), exactly once.",
	"LINKPULSE_", ingest_tab, sizeof(struct ingest_conf)
};

struct app {
	struct ingest_conf conf;
	struct builder *builder;
	struct loader *loader;
	struct compactor *compactor;
	struct consumer *cons;
	int failed;              /* recording a lost range failed: reconnect, re-seek
	                          * (failed builds and loads: builder_failed) */
	int unloaded;            /* a batch failed and no recovery has loaded since:
	                          * its events wait in Kafka (exit 1 if we stop) */
	size_t taken;            /* messages given to the builder since the last close */
	int64_t opened_ms;       /* monotonic ms when the first of them came */
	const char *config_path; /* for SIGHUP */
	int argc;
	char **argv;
	struct metrics *metrics;
	struct metricsd *metricsd;
	int64_t recovered_ms;    /* monotonic ms of the last recovery */
	int retry_ms;            /* wait before the next one if it comes soon */
};

static volatile sig_atomic_t stop_flag, hup_flag;
static atomic_int unhealthy; /* loads failing: /healthz answers 503 */
static atomic_int offsets_failing; /* the stored offsets cannot be read: 503 too */
static atomic_int recovering; /* re-reading the stored offsets, re-assigning: 503 */

static void
on_signal(int sig)
{
	if (sig == SIGHUP)
		hup_flag = 1;
	else
		stop_flag = 1;
}

/* GET /healthz on the metrics listener's thread. */
static int
health(void *arg, char *reason, size_t reason_size)
{
	(void)arg;
	if (atomic_load(&offsets_failing)) {
		snprintf(reason, reason_size, "the stored offsets cannot be read from PostgreSQL "
		    "(retrying; nothing loads meanwhile)");
		return 0;
	}
	if (atomic_load(&unhealthy)) {
		snprintf(reason, reason_size, "batches cannot be loaded into PostgreSQL "
		    "(retrying from the stored offsets)");
		return 0;
	}
	if (atomic_load(&recovering)) {
		snprintf(reason, reason_size, "recovering: partitions wait to be re-assigned at "
		    "their stored offsets (retrying; nothing loads meanwhile)");
		return 0;
	}
	return 1;
}

/* SIGHUP: re-read the configuration; apply the reloadable settings (the
 * batch limits are read by this thread's loop, the log settings here). */
static void
reload(struct app *a)
{
	char errstr[512];

	hup_flag = 0;
	log_info("SIGHUP: reloading the configuration");
	if (cfg_reload(&ingest_prog, &a->conf, a->config_path, a->argc, a->argv, errstr,
	    sizeof(errstr)) < 0)
		return;
	if (log_init(NULL, a->conf.log_level, a->conf.log_format, errstr, sizeof(errstr)) < 0)
		log_error("config: %s", errstr);
}

/* builder_done_cb: a lane's batch committed (counted, lag updated) or
 * rolled back, or a message that could not be built. Runs on the lanes'
 * threads. */
static void
lane_done(void *ctx, int lane, const struct batch *b, int rc, const struct loader_result *res,
          const char *err)
{
	struct app *a = ctx;

	if (rc < 0) {
		stats_add_failure();
		atomic_store(&unhealthy, 1);
		if (b == NULL)
			log_error("%s; dropping what is queued, re-reading from the stored offsets", err);
		else
			log_error("lane %d: batch of %zu messages failed, rolled back: %s; "
			    "retrying from the stored offsets", lane, b->messages, err);
		return;
	}
	stats_observe_batch(res->seconds);
	stats_add_batch(b->messages, res->inserted, res->duplicates, res->rejects);
	for (int32_t i = 0; i < b->ntouched; i++)
		consumer_update_lag(a->cons, b->touched[i], b->next_offset[b->touched[i]]);
	if (res->rejects)
		log_warnx("lane %d: batch of %zu messages, %llu rejected into visit_reject", lane,
		    b->messages, (unsigned long long)res->rejects);
	log_debug("lane %d: batch committed: %zu messages, %llu rows, %llu duplicates, %llu rejects",
	    lane, b->messages, (unsigned long long)res->inserted,
	    (unsigned long long)res->duplicates, (unsigned long long)res->rejects);
}

/* consumer_conf.offsets_unreadable: /healthz follows the stored offsets'
 * reads (at assignment, and in a recovery's re-seek). */
static void
offsets_unreadable(void *ctx, int failing)
{
	(void)ctx;
	atomic_store(&offsets_failing, failing);
}

/* Closes the batch taken so far (the lanes load it as they finish it). */
static void
close_batch(struct app *a)
{
	builder_close(a->builder);
	a->taken = 0;
}

/* Finishes everything taken so far: built and loaded (dropped instead after
 * a failure). */
static void
drain(void *ctx)
{
	struct app *a = ctx;

	close_batch(a);
	builder_drain(a->builder);
}

/* Sleeps about ms while keeping the consumer polled (messages dropped: a
 * re-seek follows). */
static void
idle_poll(struct app *a, int ms)
{
	int64_t end = monotime_ms() + ms;

	while (!stop_flag && monotime_ms() < end) {
		rd_kafka_message_t *m = consumer_poll(a->cons, 100);
		if (m)
			rd_kafka_message_destroy(m);
	}
}

/* Re-seeks to the stored offsets. Returns 0, or -1 with recovery to run
 * again (unless stopping): going on from where the consumer is could store
 * offsets beyond messages a dropped batch held, and a partition could stay
 * where the broker put it. */
static int
reseek(struct app *a)
{
	if (consumer_reseek(a->cons) == 0)
		return 0;
	a->failed = !stop_flag;
	return -1;
}

/* After a failed load: reconnect with backoff, then re-seek every assigned
 * partition to the offsets stored in PostgreSQL. A load that fails again
 * soon after a recovery (a statement error on a working connection: a full
 * disk, a lock timeout) waits longer each time, up to 5 s, before the batch
 * is built and tried again. */
static void
recover(struct app *a)
{
	/* A batch failed (logged and counted already), or nothing consumed was
	 * left unloaded: partitions wait for their stored offsets or their
	 * assignment, a re-seek or a lost range's record failed (everything
	 * taken had been drained and loaded before those). */
	int lost = builder_failed(a->builder);
	int backoff = 200;
	char err[512];

	atomic_store(&recovering, 1);
	if (lost)
		a->unloaded = 1;
	builder_reset(a->builder);
	a->taken = 0;
	if (a->recovered_ms > 0 && monotime_ms() - a->recovered_ms < 10000) {
		a->retry_ms = a->retry_ms == 0 ? 200 : 2 * a->retry_ms;
		if (a->retry_ms > 5000)
			a->retry_ms = 5000;
		log_error("%s %lld ms after recovering; retrying in %d ms",
		    lost ? "loading failed again" : "partitions still cannot be re-assigned at "
		    "their stored offsets",
		    (long long)(monotime_ms() - a->recovered_ms), a->retry_ms);
		idle_poll(a, a->retry_ms);
	} else {
		a->retry_ms = 0;
	}
	while (!stop_flag && loader_connect(a->loader, err, sizeof(err)) < 0) {
		log_error("PostgreSQL unavailable: %s; retrying in %d ms", err, backoff);
		idle_poll(a, backoff);
		backoff = backoff * 2 > 5000 ? 5000 : backoff * 2;
	}
	if (stop_flag)
		return;
	a->failed = 0;
	a->recovered_ms = monotime_ms();
	if (reseek(a) < 0)
		return;
	atomic_store(&unhealthy, 0); /* reconnected and re-read: loading again */
	atomic_store(&recovering, 0);
	a->unloaded = 0;
	log_info("recovered: loading again from the stored offsets");
}

/* The broker no longer has the offset we need: record the range in
 * ingest_lost (and log it at error level), then resume where data exists. */
static void
out_of_range(struct app *a, int32_t p, int64_t at, const char *what)
{
	int64_t from, low, high, to, resume;
	char reason[512], err[512];

	drain(a);
	if (a->failed || builder_failed(a->builder))
		return;
	from = consumer_expected(a->cons, p);
	if (from < 0) {
		/* not ours (any more): a stale error from before a rebalance.
		 * Recording it would force the partition's stored offset back
		 * and log events another member loaded as lost. */
		log_warnx("partition %d: out of range at %lld, but it is not assigned here; "
		    "ignored", p, (long long)at);
		return;
	}
	if (consumer_watermarks(a->cons, p, &low, &high, err, sizeof(err)) < 0) {
		log_error("offset %lld of partition %d out of range and %s", (long long)from, p, err);
		idle_poll(a, 1000);
		reseek(a);
		return;
	}
	if (from < low) {
		to = resume = low;
		snprintf(reason, sizeof(reason), "%s: offsets %lld..%lld no longer on the broker "
		    "(retention); resumed at %lld", what, (long long)from, (long long)low - 1,
		    (long long)low);
	} else if (from > high) {
		to = low; /* where it resumed (the schema's to_offset) */
		resume = low;
		snprintf(reason, sizeof(reason), "%s: stored offset %lld beyond the end %lld "
		    "(topic recreated or truncated?); resumed at %lld", what, (long long)from,
		    (long long)high, (long long)low);
	} else {
		log_warnx("partition %d: out of range at %lld, but the broker has %lld..%lld; "
		    "re-seeking", p, (long long)from, (long long)low, (long long)high);
		reseek(a);
		return;
	}
	switch (loader_record_lost(a->loader, p, from, to, resume, reason, err, sizeof(err))) {
	case 0:
		log_error("LOST EVENTS: topic %s partition %d: %s", a->conf.kafka_topic, p, reason);
		stats_add_lost();
		reseek(a);
		return;
	case 1: /* a stale error: the partition went on elsewhere */
		log_warnx("partition %d: out of range at %lld, not recorded: %s; re-seeking", p,
		    (long long)from, err);
		reseek(a);
		return;
	default:
		log_error("LOST EVENTS: topic %s partition %d: %s (recording it failed: %s; "
		    "retried)", a->conf.kafka_topic, p, reason, err);
		a->failed = 1;
		return;
	}
}

/* Takes one message: to the builder (which then owns it; returns 1), or
 * handled here (returns 0: the caller destroys it). */
static int
handle_message(struct app *a, rd_kafka_message_t *m)
{
	int64_t exp;

	if (m->err) {
		if (m->err == RD_KAFKA_RESP_ERR__AUTO_OFFSET_RESET ||
		    m->err == RD_KAFKA_RESP_ERR_OFFSET_OUT_OF_RANGE)
			out_of_range(a, m->partition, m->offset, rd_kafka_message_errstr(m));
		else if (m->err != RD_KAFKA_RESP_ERR__PARTITION_EOF)
			log_warnx("kafka: %s", rd_kafka_message_errstr(m));
		return 0;
	}
	exp = consumer_expected(a->cons, m->partition);
	if (exp < 0 || m->offset < exp) {
		log_debug("dropping stale message partition %d offset %lld (expected %lld)",
		    m->partition, (long long)m->offset, (long long)exp);
		return 0;
	}
	if (m->offset > exp)
		log_warnx("partition %d: offsets %lld..%lld skipped by the broker (compaction or "
		    "transaction markers)", m->partition, (long long)exp, (long long)m->offset - 1);
	if (a->taken++ == 0)
		a->opened_ms = monotime_ms();
	consumer_set_expected(a->cons, m->partition, m->offset + 1);
	stats_add_consumed(1);
	builder_push(a->builder, consumer_lane(a->cons, m->partition), m);
	return 1;
}

static void
log_progress(int64_t *last)
{
	struct ingest_stats st;
	int64_t t = monotime_ms();

	if (t - *last < 10000)
		return;
	*last = t;
	stats_get(&st);
	log_info("messages=%llu rows=%llu duplicates=%llu rejects=%llu batches=%llu failures=%llu "
	    "lost_ranges=%llu lag=%lld", (unsigned long long)st.messages,
	    (unsigned long long)st.rows_loaded, (unsigned long long)st.duplicates,
	    (unsigned long long)st.rejects, (unsigned long long)st.batches,
	    (unsigned long long)st.batch_failures, (unsigned long long)st.lost_ranges,
	    (long long)st.lag_total);
}

static void
run(struct app *a)
{
	int64_t last_log = monotime_ms();

	while (!stop_flag) {
		rd_kafka_message_t *m;

		if (hup_flag)
			reload(a);
		if (a->failed || builder_failed(a->builder) || consumer_retry_pending(a->cons)) {
			recover(a);
			continue;
		}
		if ((m = consumer_poll(a->cons, 100)) != NULL && !handle_message(a, m))
			rd_kafka_message_destroy(m);
		if (a->taken > 0 && ((long long)a->taken >= a->conf.batch_max_events ||
		    monotime_ms() - a->opened_ms >= a->conf.batch_max_ms))
			close_batch(a);
		log_progress(&last_log);
	}
}

int
main(int argc, char **argv)
{
	struct app a;
	struct consumer_conf cc;
	enum cfg_action action;
	char errstr[512];
	struct sigaction sa;
	sigset_t hup;
	int rc = 0;

	/* A reload asked for while starting (systemd sends one as soon as the
	 * unit is active) waits for the handler instead of killing the process
	 * by SIGHUP's default action. */
	sigemptyset(&hup);
	sigaddset(&hup, SIGHUP);
	sigprocmask(SIG_BLOCK, &hup, NULL);
	memset(&a, 0, sizeof(a));
	a.argc = argc;
	a.argv = argv;
	if (cfg_from_args(&ingest_prog, &a.conf, argc, argv, &action, &a.config_path, errstr,
	    sizeof(errstr)) < 0) {
		fprintf(stderr, "ingest: %s\n", errstr);
		return 2;
	}
	if (action == CFG_EXIT_OK)
		return 0;
	if (log_init("ingest", a.conf.log_level, a.conf.log_format, errstr, sizeof(errstr)) < 0) {
		fprintf(stderr, "ingest: %s\n", errstr);
		cfg_free(&ingest_prog, &a.conf);
		return 2;
	}
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
	sigprocmask(SIG_UNBLOCK, &hup, NULL);
	signal(SIGPIPE, SIG_IGN);
	if ((a.metrics = metrics_new()) == NULL ||
	    stats_metrics(a.metrics, errstr, sizeof(errstr)) < 0 ||
	    (a.metricsd = metricsd_start(a.conf.metrics_addr, (int)a.conf.metrics_port, a.metrics,
	    health, &a, errstr, sizeof(errstr))) == NULL) {
		log_fatalx("metrics: %s", a.metrics ? errstr : "out of memory");
		rc = 1;
		goto out;
	}
	log_info("metrics on http://%s:%d/metrics", a.conf.metrics_addr,
	    metricsd_port(a.metricsd));
	if ((a.loader = loader_new(a.conf.pg_dsn, a.conf.kafka_group, a.conf.kafka_topic,
	    (int)a.conf.pg_statement_timeout_ms, errstr, sizeof(errstr))) == NULL) {
		log_fatalx("loader: %s", errstr);
		rc = 1;
		goto out;
	}
	{
		/* each lane's buffers: its share of a full batch, and a quarter
		 * more for uneven partitions; beyond that they grow */
		struct builder_conf bc = { a.conf.geoip_city_db, a.conf.geoip_isp_db,
		    a.conf.geoip_locale, a.conf.uap_regexes, (size_t)a.conf.ua_cache_entries,
		    (size_t)a.conf.geoip_cache_records,
		    (size_t)(a.conf.batch_max_events / LOADER_LANES * 5 / 4 + 1), a.loader,
		    lane_done, &a };

		if ((a.builder = builder_new(&bc, errstr, sizeof(errstr))) == NULL) {
			log_fatalx("enrichment: %s", errstr);
			rc = 1;
			goto out;
		}
	}
	if (a.conf.compact_interval_s > 0 && (a.compactor = compactor_start(a.conf.pg_dsn,
	    (int)a.conf.compact_interval_s, errstr, sizeof(errstr))) == NULL) {
		log_fatalx("compactor: %s", errstr);
		rc = 1;
		goto out;
	}
	if (loader_connect(a.loader, errstr, sizeof(errstr)) < 0)
		log_error("PostgreSQL: %s (retrying when partitions are assigned)", errstr);
	memset(&cc, 0, sizeof(cc));
	cc.bootstrap = a.conf.kafka_bootstrap;
	cc.topic = a.conf.kafka_topic;
	cc.group = a.conf.kafka_group;
	cc.session_timeout_ms = (int)a.conf.kafka_session_timeout_ms;
	cc.stop = &stop_flag;
	cc.drain = drain;
	cc.offsets_unreadable = offsets_unreadable;
	cc.ctx = &a;
	if ((a.cons = consumer_new(&cc, a.loader, errstr, sizeof(errstr))) == NULL) {
		log_fatalx("kafka consumer: %s", errstr);
		rc = 1;
		goto out;
	}
	log_info("consuming %s as group %s; batches of up to %lld events or %lld ms",
	    a.conf.kafka_topic, a.conf.kafka_group, a.conf.batch_max_events, a.conf.batch_max_ms);
	run(&a);
	log_info("stopping: finishing the current batch");
	drain(&a);
	/* the supervisor should know: the events consumed since the last
	 * commit stay in Kafka (their offsets did not move) for the next start */
	/* not a.failed: a re-seek or a lost range's record failing leaves
	 * nothing consumed unloaded (unloaded says when a batch did) */
	if (a.unloaded || builder_failed(a.builder)) {
		log_error("stopping: the last batch could not be loaded; its events are loaded "
		    "at the next start (the stored offsets did not move)");
		rc = 1;
	}
out:
	consumer_close(a.cons);
	compactor_stop(a.compactor);
	metricsd_stop(a.metricsd);
	builder_free(a.builder); /* its lanes load with the loader */
	loader_free(a.loader);
	{
		struct ingest_stats st;
		stats_get(&st);
		log_info("stopped: messages=%llu rows=%llu duplicates=%llu rejects=%llu batches=%llu",
		    (unsigned long long)st.messages, (unsigned long long)st.rows_loaded,
		    (unsigned long long)st.duplicates, (unsigned long long)st.rejects,
		    (unsigned long long)st.batches);
	}
	metrics_free(a.metrics);
	cfg_free(&ingest_prog, &a.conf);
	return rc;
}
