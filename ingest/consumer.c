/* consumer.c - librdkafka consumer group member (style of kcat): eager
 * rebalance callback that assigns at the offsets stored in PostgreSQL (no row:
 * offset 0, so anything the broker dropped is reported, not skipped) and
 * spreads the partitions over the loading lanes by backlog. */
#include "consumer.h"

#include "errstr.h"
#include "lanes.h"
#include "log.h"
#include "stats.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

struct consumer {
	rd_kafka_t *rk;
	struct loader *loader;
	char *topic;
	volatile sig_atomic_t *stop;
	void (*drain)(void *ctx);
	void (*offsets_unreadable)(void *ctx, int failing); /* or NULL */
	void *ctx;
	int64_t *expected;  /* indexed by partition, -1 unassigned */
	int *lane;          /* indexed by partition: its loading lane */
	int32_t nexpected;  /* entries of both */
	/* owned: the partitions a re-seek is to assign (an assign failed, or
	 * their stored offsets could not be read, in the rebalance callback
	 * or a re-seek); NULL none */
	rd_kafka_topic_partition_list_t *retry;
};

/* Makes partition an index of c->expected and c->lane. Returns 0 or -1. */
static int
grow(struct consumer *c, int32_t partition)
{
	int32_t n = c->nexpected ? c->nexpected : 64;
	int64_t *e;
	int *l;

	if (partition < c->nexpected)
		return 0;
	while (n <= partition)
		n *= 2;
	if ((e = realloc(c->expected, (size_t)n * sizeof(*e))) == NULL)
		return -1;
	c->expected = e;
	if ((l = realloc(c->lane, (size_t)n * sizeof(*l))) == NULL)
		return -1;
	c->lane = l;
	for (int32_t i = c->nexpected; i < n; i++) {
		e[i] = -1;
		l[i] = i % LOADER_LANES;
	}
	c->nexpected = n;
	return 0;
}

void
consumer_set_expected(struct consumer *c, int32_t partition, int64_t next)
{
	if (partition < 0 || grow(c, partition) < 0)
		return;
	c->expected[partition] = next;
}

int
consumer_lane(struct consumer *c, int32_t partition)
{
	return partition >= 0 && partition < c->nexpected ? c->lane[partition] : 0;
}

int64_t
consumer_expected(struct consumer *c, int32_t partition)
{
	if (partition < 0 || partition >= c->nexpected)
		return -1;
	return c->expected[partition];
}

/* Sets every partition of parts to its stored offset (0 without a row).
 * Returns 0, or -1 when PostgreSQL could not tell (logged): one try, never a
 * wait, as librdkafka's callbacks must return in time (a member that stops
 * polling for max.poll.interval.ms leaves the group); the caller's recovery
 * retries with backoff while it polls. */
static int
fill_stored_offsets(struct consumer *c, rd_kafka_topic_partition_list_t *parts)
{
	int32_t *ids = NULL;
	int64_t *offs = NULL;
	int n = parts->cnt, rc = -1;
	char err[512];

	if (n == 0) { /* nothing to read: whatever failed before is moot */
		if (c->offsets_unreadable)
			c->offsets_unreadable(c->ctx, 0);
		return 0;
	}
	ids = calloc((size_t)n, sizeof(*ids));
	offs = calloc((size_t)n, sizeof(*offs));
	if (ids == NULL || offs == NULL)
		goto out;
	for (int i = 0; i < n; i++)
		ids[i] = parts->elems[i].partition;
	if (loader_read_offsets(c->loader, ids, n, offs, err, sizeof(err)) < 0) {
		log_error("reading stored offsets: %s", err);
		if (c->offsets_unreadable)
			c->offsets_unreadable(c->ctx, 1);
		goto out;
	}
	if (c->offsets_unreadable)
		c->offsets_unreadable(c->ctx, 0);
	for (int i = 0; i < n; i++) {
		int64_t o = offs[i] < 0 ? 0 : offs[i];
		parts->elems[i].offset = o;
		consumer_set_expected(c, ids[i], o);
	}
	rc = 0;
out:
	free(ids);
	free(offs);
	return rc;
}

/* Spreads parts (their offsets: where reading starts) over the loading lanes
 * by how many messages each has to catch up on, from the broker's end offsets
 * (one ListOffsets request per broker). Called only with every lane drained,
 * so no partition's messages are in two lanes at once. Without the end
 * offsets the partitions alternate; out of memory, the lanes stay as they were. */
static void
plan_lanes(struct consumer *c, const rd_kafka_topic_partition_list_t *parts)
{
	int n = parts->cnt, count[LOADER_LANES], *lane = NULL;
	int64_t total[LOADER_LANES], *backlog = NULL;
	int32_t *ids = NULL;
	rd_kafka_topic_partition_list_t *ends = NULL;
	rd_kafka_resp_err_t err;
	char line[256];
	size_t off = 0;

	if (n == 0)
		return;
	if ((ends = rd_kafka_topic_partition_list_copy(parts)) == NULL ||
	    (lane = calloc((size_t)n, sizeof(*lane))) == NULL ||
	    (ids = calloc((size_t)n, sizeof(*ids))) == NULL ||
	    (backlog = calloc((size_t)n, sizeof(*backlog))) == NULL)
		goto oom;
	for (int i = 0; i < n; i++)
		ends->elems[i].offset = RD_KAFKA_OFFSET_END; /* as a ListOffsets timestamp: latest */
	if ((err = rd_kafka_offsets_for_times(c->rk, ends, 5000)) != RD_KAFKA_RESP_ERR_NO_ERROR)
		log_warnx("end offsets of %s: %s; spreading its partitions over the lanes by count",
		    c->topic, rd_kafka_err2str(err));
	for (int i = 0; i < n; i++) {
		const rd_kafka_topic_partition_t *e = &ends->elems[i];

		ids[i] = parts->elems[i].partition;
		backlog[i] = err == RD_KAFKA_RESP_ERR_NO_ERROR && e->err == RD_KAFKA_RESP_ERR_NO_ERROR &&
		    e->offset > parts->elems[i].offset ? e->offset - parts->elems[i].offset : 0;
	}
	if (lanes_plan(ids, backlog, n, LOADER_LANES, lane, total, count) < 0)
		goto oom;
	for (int i = 0; i < n; i++)
		if (grow(c, ids[i]) == 0)
			c->lane[ids[i]] = lane[i];
	for (int k = 0; k < LOADER_LANES && off < sizeof(line); k++) {
		int w = snprintf(line + off, sizeof(line) - off, "%slane %d: %d partitions, %lld "
		    "messages behind", k ? "; " : "", k, count[k], (long long)total[k]);
		off += w > 0 ? (size_t)w : 0;
	}
	log_info("%s", line);
	goto out;
oom:
	log_warnx("planning the loading lanes: out of memory; they stay as they were");
out:
	if (ends)
		rd_kafka_topic_partition_list_destroy(ends);
	free(lane);
	free(ids);
	free(backlog);
}

static void
rebalance_cb(rd_kafka_t *rk, rd_kafka_resp_err_t err, rd_kafka_topic_partition_list_t *parts,
             void *opaque)
{
	struct consumer *c = opaque;
	rd_kafka_resp_err_t aerr;

	if (c->retry != NULL) { /* the group's word replaces it */
		rd_kafka_topic_partition_list_destroy(c->retry);
		c->retry = NULL;
	}
	if (err == RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS) {
		if (*c->stop) {
			log_warnx("stopping: not assigning %d partitions", parts->cnt);
			rd_kafka_assign(rk, NULL);
			return;
		}
		if (fill_stored_offsets(c, parts) < 0) {
			/* assigned by the main loop's recovery once it can read
			 * them (it polls meanwhile: the group keeps this member) */
			log_warnx("not assigning %d partitions until their stored offsets "
			    "can be read", parts->cnt);
			if ((c->retry = rd_kafka_topic_partition_list_copy(parts)) == NULL)
				log_error("out of memory: %d partitions stay unassigned until "
				    "the next rebalance", parts->cnt);
			rd_kafka_assign(rk, NULL);
			return;
		}
		log_info("assigned %d partitions of %s at their stored offsets", parts->cnt, c->topic);
		plan_lanes(c, parts);
		if ((aerr = rd_kafka_assign(rk, parts)) != RD_KAFKA_RESP_ERR_NO_ERROR) {
			/* not consumed until a re-seek assigns them (main loop) */
			log_error("assigning %d partitions: %s; re-seeking", parts->cnt,
			    rd_kafka_err2str(aerr));
			c->retry = rd_kafka_topic_partition_list_copy(parts);
		}
	} else {
		if (c->drain)
			c->drain(c->ctx);
		/* An eager revoke takes the whole assignment, whichever
		 * partitions the list names (after a failed re-assign, none). */
		for (int32_t i = 0; i < c->nexpected; i++)
			c->expected[i] = -1;
		log_info("revoked %d partitions (%s)", parts->cnt, rd_kafka_err2str(err));
		if ((aerr = rd_kafka_assign(rk, NULL)) != RD_KAFKA_RESP_ERR_NO_ERROR)
			log_warnx("unassigning: %s", rd_kafka_err2str(aerr));
	}
}

static void
log_cb(const rd_kafka_t *rk, int level, const char *fac, const char *buf)
{
	(void)rk;
	if (level <= 3)
		log_error("kafka %s: %s", fac, buf);
	else if (level <= 4)
		log_warnx("kafka %s: %s", fac, buf);
	else
		log_debug("kafka %s: %s", fac, buf);
}

static int
set(rd_kafka_conf_t *kc, const char *k, const char *v, char *errstr, size_t errstr_size)
{
	if (rd_kafka_conf_set(kc, k, v, errstr, errstr_size) != RD_KAFKA_CONF_OK)
		return -1;
	return 0;
}

struct consumer *
consumer_new(const struct consumer_conf *cc, struct loader *loader, char *errstr,
             size_t errstr_size)
{
	struct consumer *c = calloc(1, sizeof(*c));
	rd_kafka_conf_t *kc;
	rd_kafka_topic_partition_list_t *sub;
	rd_kafka_resp_err_t err;
	char num[24], hb[24];

	if (c == NULL || (c->topic = strdup(cc->topic)) == NULL) {
		free(c);
		errstr_set(errstr, errstr_size, "out of memory");
		return NULL;
	}
	c->loader = loader;
	c->stop = cc->stop;
	c->drain = cc->drain;
	c->offsets_unreadable = cc->offsets_unreadable;
	c->ctx = cc->ctx;
	kc = rd_kafka_conf_new();
	snprintf(num, sizeof(num), "%d", cc->session_timeout_ms);
	/* a third of the session, at most librdkafka's default 3 s: heartbeats
	 * further apart than the session would lose the group */
	snprintf(hb, sizeof(hb), "%d", cc->session_timeout_ms / 3 < 3000 ?
	    cc->session_timeout_ms / 3 : 3000);
	if (set(kc, "bootstrap.servers", cc->bootstrap, errstr, errstr_size) < 0 ||
	    set(kc, "group.id", cc->group, errstr, errstr_size) < 0 ||
	    set(kc, "client.id", "linkpulse-ingest", errstr, errstr_size) < 0 ||
	    set(kc, "enable.auto.commit", "false", errstr, errstr_size) < 0 ||
	    set(kc, "enable.auto.offset.store", "false", errstr, errstr_size) < 0 ||
	    /* out of range is reported to us (then recorded in ingest_lost) */
	    set(kc, "auto.offset.reset", "error", errstr, errstr_size) < 0 ||
	    set(kc, "session.timeout.ms", num, errstr, errstr_size) < 0 ||
	    set(kc, "heartbeat.interval.ms", hb, errstr, errstr_size) < 0 ||
	    set(kc, "enable.partition.eof", "false", errstr, errstr_size) < 0 ||
	    set(kc, "fetch.wait.max.ms", "100", errstr, errstr_size) < 0 ||
	    set(kc, "queued.max.messages.kbytes", "131072", errstr, errstr_size) < 0) {
		rd_kafka_conf_destroy(kc);
		free(c->topic);
		free(c);
		return NULL;
	}
	rd_kafka_conf_set_log_cb(kc, log_cb);
	rd_kafka_conf_set_rebalance_cb(kc, rebalance_cb);
	rd_kafka_conf_set_opaque(kc, c);
	if ((c->rk = rd_kafka_new(RD_KAFKA_CONSUMER, kc, errstr, errstr_size)) == NULL) {
		rd_kafka_conf_destroy(kc);
		free(c->topic);
		free(c);
		return NULL;
	}
	rd_kafka_poll_set_consumer(c->rk);
	sub = rd_kafka_topic_partition_list_new(1);
	rd_kafka_topic_partition_list_add(sub, cc->topic, RD_KAFKA_PARTITION_UA);
	err = rd_kafka_subscribe(c->rk, sub);
	rd_kafka_topic_partition_list_destroy(sub);
	if (err) {
		errstr_set(errstr, errstr_size, "subscribe %s: %s", cc->topic, rd_kafka_err2str(err));
		rd_kafka_destroy(c->rk);
		free(c->topic);
		free(c);
		return NULL;
	}
	return c;
}

rd_kafka_message_t *
consumer_poll(struct consumer *c, int timeout_ms)
{
	return rd_kafka_consumer_poll(c->rk, timeout_ms);
}

int
consumer_retry_pending(const struct consumer *c)
{
	return c->retry != NULL;
}

int
consumer_reseek(struct consumer *c)
{
	rd_kafka_topic_partition_list_t *parts = NULL;
	rd_kafka_resp_err_t err;

	if (c->drain)
		c->drain(c->ctx);
	if (c->retry != NULL) {
		parts = c->retry;
		c->retry = NULL;
	} else if ((err = rd_kafka_assignment(c->rk, &parts)) != RD_KAFKA_RESP_ERR_NO_ERROR) {
		log_error("reading the assignment: %s", rd_kafka_err2str(err));
		return -1;
	}
	if (fill_stored_offsets(c, parts) < 0) {
		c->retry = parts; /* for the next try (they may still be assigned) */
		return -1;
	}
	plan_lanes(c, parts); /* drained above: e.g. a backlog after an outage */
	rd_kafka_assign(c->rk, NULL);
	if ((err = rd_kafka_assign(c->rk, parts)) != RD_KAFKA_RESP_ERR_NO_ERROR) {
		/* cleared above: the next try assigns these, not the empty
		 * assignment it would read */
		log_error("re-assigning %d partitions: %s", parts->cnt, rd_kafka_err2str(err));
		c->retry = parts;
		return -1;
	}
	log_info("re-assigned %d partitions at their stored offsets", parts->cnt);
	rd_kafka_topic_partition_list_destroy(parts);
	return 0;
}

int
consumer_watermarks(struct consumer *c, int32_t partition, int64_t *low, int64_t *high,
                    char *errstr, size_t errstr_size)
{
	rd_kafka_resp_err_t err = rd_kafka_query_watermark_offsets(c->rk, c->topic, partition,
	    low, high, 5000);

	if (err) {
		errstr_set(errstr, errstr_size, "watermarks of %s [%d]: %s", c->topic, partition,
		    rd_kafka_err2str(err));
		return -1;
	}
	return 0;
}

void
consumer_update_lag(struct consumer *c, int32_t partition, int64_t next)
{
	int64_t low, high;

	if (rd_kafka_get_watermark_offsets(c->rk, c->topic, partition, &low, &high) ==
	    RD_KAFKA_RESP_ERR_NO_ERROR && high >= 0)
		stats_set_lag(partition, high > next ? high - next : 0);
}

void
consumer_close(struct consumer *c)
{
	if (c == NULL)
		return;
	rd_kafka_consumer_close(c->rk);
	rd_kafka_destroy(c->rk);
	if (c->retry != NULL)
		rd_kafka_topic_partition_list_destroy(c->retry);
	free(c->expected);
	free(c->lane);
	free(c->topic);
	free(c);
}
