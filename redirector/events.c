/* events.c - the producer side of visit events: JSON per visit (jansson;
 * schema version 2, an array), encoded 64 at a time by the request thread that
 * took them (or by the encoder thread when a thread goes quiet),
 * rd_kafka_produce_batch without blocking, failed deliveries reported on a
 * poller thread (to the spool), and a monitor thread that checks the broker
 * and replays the spool through a producer of its own. */
#include "events.h"
#include "errstr.h"
#include "eventid.h"
#include "idmark.h"
#include "log.h"
#include "monotime.h"
#include "spool.h"

#include <errno.h>
#include <jansson.h>
#include <librdkafka/rdkafka.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct events {
	rd_kafka_t *rk;             /* live visits; reports failures only */
	rd_kafka_topic_t *rkt;      /* the visits topic, made once: producing by
	                             * name would look it up under the client's
	                             * write lock on every event */
	rd_kafka_t *rk_replay;      /* spool replays; reports every delivery */
	rd_kafka_topic_t *rkt_replay;
	struct spool *spool;
	char *spool_dir;            /* owned: where the ids' mark is kept */
	int64_t id_lease;           /* the mark on disk now: no id reaches it */
	int shutdown_flush_ms;
	long long deadline_ms;      /* events_deadline's, 0 none */
	int message_timeout_ms;

	pthread_t poller, monitor, encoder;
	int threads;                /* 0, 1 (poller) or 2 (both) */
	int encoding;               /* the encoder thread runs */
	_Atomic(struct pending *) inbox; /* visits left by threads that exited,
	                            * newest first */
	atomic_long inbox_len;
	atomic_int running;
	pthread_mutex_t mtx;        /* monitor's sleep */
	pthread_cond_t cond;

	atomic_int connected;
	atomic_int fatal;           /* the live producer's fatal error: events spool */
	atomic_int replay_fatal;    /* the replay producer's: replay stops */
	_Atomic uint64_t failed, spooled;
	_Atomic uint64_t replayed;  /* rk_replay's deliveries (it reports each;
	                            * rk's are derived: see events_stats) */
	_Atomic uint64_t live_failed; /* failed deliveries of rk's messages */
	_Atomic uint64_t live_delivered; /* the highest estimate given out (see
	                            * events_stats) */

	pthread_key_t tls;          /* struct local of the calling thread */
	int tls_made;
	pthread_mutex_t locals_mtx; /* locals list, retired_* */
	struct local *locals;
	uint64_t retired_events, retired_produced; /* of threads that exited */
	_Atomic long long replay_outstanding;
	_Atomic long long replay_failed;  /* deliveries of the file being replayed that failed */
	_Atomic long long last_fail_log;
};

/* Puts one event in the spool, counting it. */
static void
to_spool(struct events *ev, const void *key, size_t klen, const void *val, size_t vlen)
{
	if (spool_append(ev->spool, key, klen, val, vlen) == 0)
		atomic_fetch_add(&ev->spooled, 1);
}

/* Logs a delivery problem at most once a second. */
static void
fail_log(struct events *ev, const char *what, const char *why)
{
	long long now = monotime_ms(), last = atomic_load(&ev->last_fail_log);

	if (now - last >= 1000 && atomic_compare_exchange_strong(&ev->last_fail_log, &last, now))
		log_warnx("events: %s (%s); spooling to disk (%llu spooled so far)", what, why,
		    (unsigned long long)atomic_load(&ev->spooled));
}

/*
 * Delivery reports. The live producer is set up with
 * delivery.report.only.error: librdkafka frees a delivered message on its
 * broker thread instead of queueing it for a callback on the poller thread,
 * which cost ~0.4 us of CPU per event (bench_events, interleaved pairs,
 * twenty-first session). Its delivered count is derived in events_stats; the
 * replay producer reports every delivery, as replay_file waits for them.
 */
/* Errors with which Kafka refuses a message for good: sent again, it is
 * refused again, so a spool file holding it would never be done. */
static int
refused_for_good(rd_kafka_resp_err_t err)
{
	return err == RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE ||
	    err == RD_KAFKA_RESP_ERR_INVALID_MSG_SIZE ||
	    err == RD_KAFKA_RESP_ERR_RECORD_LIST_TOO_LARGE ||
	    err == RD_KAFKA_RESP_ERR_INVALID_RECORD;
}

static void
dr_cb(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
	struct events *ev = opaque;
	int replay = rk == ev->rk_replay; /* every message it carries is a replay */

	if (m->err == RD_KAFKA_RESP_ERR_NO_ERROR) {
		if (!replay)
			return; /* not asked for; counted by events_stats */
		atomic_fetch_add(&ev->replayed, 1);
		if (!atomic_load_explicit(&ev->connected, memory_order_relaxed))
			atomic_store(&ev->connected, 1);
	} else {
		/* a live event goes to the spool; a replayed one is still in
		 * the file it came from, which then stays for a later try
		 * (replay_file): spooling it again could be refused at
		 * spool_max_bytes, the replay file counting too, and the file
		 * was removed all the same */
		if (!replay) {
			atomic_fetch_add(&ev->live_failed, 1);
			to_spool(ev, m->key, m->key_len, m->payload, m->len);
		} else if (!refused_for_good(m->err) ||
		    spool_refuse(ev->spool, m->key, m->key_len, m->payload, m->len) < 0) {
			atomic_fetch_add(&ev->replay_failed, 1);
		} else {
			log_debug("events: Kafka refused a replayed visit event for good (%s)",
			    rd_kafka_err2str(m->err));
		}
		atomic_fetch_add(&ev->failed, 1);
		fail_log(ev, "delivery failed", rd_kafka_err2str(m->err));
	}
	if (replay)
		atomic_fetch_sub(&ev->replay_outstanding, 1);
}

static void
error_cb(rd_kafka_t *rk, int err, const char *reason, void *opaque)
{
	struct events *ev = opaque;
	char buf[512];

	if (err == RD_KAFKA_RESP_ERR__FATAL) {
		rd_kafka_fatal_error(rk, buf, sizeof(buf));
		if (rk == ev->rk_replay) {
			atomic_store(&ev->replay_fatal, 1);
			log_error("events: fatal error of the replay producer: %s; the spool is "
			    "NOT REPLAYED until restart (new events still go to Kafka)", buf);
		} else {
			atomic_store(&ev->fatal, 1);
			log_error("events: fatal producer error: %s; every event now goes to the "
			    "spool until restart (/readyz answers 503)", buf);
		}
		return;
	}
	if (err == RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN) {
		if (atomic_exchange(&ev->connected, 0) == 1)
			log_warnx("events: all Kafka brokers are down (%s)", reason);
		return;
	}
	log_debug("events: kafka: %s: %s", rd_kafka_err2name((rd_kafka_resp_err_t)err), reason);
}

/* The replay producer's errors: it idles between outages, so its view of the
 * brokers does not decide `connected` (the monitor and the live producer
 * do); a fatal error stops replay, not the live producer. */
static void
replay_error_cb(rd_kafka_t *rk, int err, const char *reason, void *opaque)
{
	if (err == RD_KAFKA_RESP_ERR__FATAL) {
		error_cb(rk, err, reason, opaque);
		return;
	}
	log_debug("events: kafka (replay): %s: %s",
	    rd_kafka_err2name((rd_kafka_resp_err_t)err), reason);
}

static void
log_cb(const rd_kafka_t *rk, int level, const char *fac, const char *buf)
{
	(void)rk;
	if (level <= 3)
		log_warnx("kafka %s: %s", fac, buf);
	else
		log_debug("kafka %s: %s", fac, buf);
}

static int
set(rd_kafka_conf_t *kc, const char *name, const char *value, char *errstr, size_t errstr_size)
{
	char e[256];

	if (rd_kafka_conf_set(kc, name, value, e, sizeof(e)) != RD_KAFKA_CONF_OK) {
		errstr_set(errstr, errstr_size, "kafka %s=%s: %s", name, value, e);
		return -1;
	}
	return 0;
}

/* A producer for live events (replay 0: delivery reports of failures only)
 * or for spool replays (replay 1: every report). Returns it (the caller's, to
 * rd_kafka_destroy) or NULL with errstr set. */
static rd_kafka_t *
make_producer(struct events *ev, const struct events_conf *conf, int replay, char *errstr,
              size_t errstr_size)
{
	rd_kafka_conf_t *kc = rd_kafka_conf_new();
	char linger[16], qmax[16], tmo[16], maxb[16];
	rd_kafka_t *rk;

	snprintf(linger, sizeof(linger), "%d", conf->linger_ms);
	snprintf(qmax, sizeof(qmax), "%d", conf->queue_max_messages);
	snprintf(tmo, sizeof(tmo), "%d", conf->message_timeout_ms);
	snprintf(maxb, sizeof(maxb), "%d", conf->message_max_bytes > 0 ? conf->message_max_bytes :
	    1000000);
	if (set(kc, "bootstrap.servers", conf->bootstrap, errstr, errstr_size) < 0 ||
	    set(kc, "client.id", replay ? "linkpulse-redirector-replay" : "linkpulse-redirector",
	    errstr, errstr_size) < 0 ||
	    set(kc, "delivery.report.only.error", replay ? "false" : "true", errstr,
	    errstr_size) < 0 ||
	    set(kc, "enable.idempotence", "true", errstr, errstr_size) < 0 ||
	    set(kc, "acks", "all", errstr, errstr_size) < 0 ||
	    set(kc, "compression.codec", "lz4", errstr, errstr_size) < 0 ||
	    set(kc, "linger.ms", linger, errstr, errstr_size) < 0 ||
	    set(kc, "queue.buffering.max.messages", qmax, errstr, errstr_size) < 0 ||
	    set(kc, "message.timeout.ms", tmo, errstr, errstr_size) < 0 ||
	    set(kc, "message.max.bytes", maxb, errstr, errstr_size) < 0 ||
	    set(kc, "log.connection.close", "false", errstr, errstr_size) < 0) {
		rd_kafka_conf_destroy(kc);
		return NULL;
	}
	rd_kafka_conf_set_opaque(kc, ev);
	rd_kafka_conf_set_dr_msg_cb(kc, dr_cb);
	rd_kafka_conf_set_error_cb(kc, replay ? replay_error_cb : error_cb);
	rd_kafka_conf_set_log_cb(kc, log_cb);
	if ((rk = rd_kafka_new(RD_KAFKA_PRODUCER, kc, errstr, errstr_size)) == NULL)
		rd_kafka_conf_destroy(kc);
	return rk;
}

/* ------------------------------------------------------------ JSON */

/* The event is schemas/visit_event.schema.json version 2, a positional array
 * (jansson parses and dumps it faster than an object, which must name every
 * field: see README, The visit event):
 * [2, id, ts, code, link_id, status, ip, user_agent, referer, accept_language,
 *  host, query]. Positions of its members (NPOS: how many): */
enum {
	POS_V, POS_ID, POS_TS, POS_CODE, POS_LINK_ID, POS_STATUS, POS_IP, POS_UA, POS_REFERER,
	POS_LANG, POS_HOST, POS_QUERY, NPOS
};
#define EVENT_VERSION 2

/* The string fields of a visit, in the event's order. */
enum { F_CODE, F_IP, F_UA, F_REFERER, F_LANG, F_HOST, F_QUERY, NFIELDS };

#define VISIT_STR(m) offsetof(struct events_visit, m)

static const struct {
	size_t pos;          /* its position in the event */
	size_t max;          /* bytes kept (the schema's maxLength) */
	size_t off;          /* its member of struct events_visit */
} fields[NFIELDS] = {
	{ POS_CODE, 64, VISIT_STR(code) }, { POS_IP, 64, VISIT_STR(ip) },
	{ POS_UA, 8192, VISIT_STR(user_agent) }, { POS_REFERER, 8192, VISIT_STR(referer) },
	{ POS_LANG, 1024, VISIT_STR(accept_language) },
	{ POS_HOST, 1024, VISIT_STR(host) }, { POS_QUERY, 8192, VISIT_STR(query) },
};

/* String field i of a visit (borrowed; NULL when absent). */
static const char **
visit_str(const struct events_visit *v, int i)
{
	return (const char **)(void *)((char *)(uintptr_t)v + fields[i].off);
}

/* A visit waiting to be encoded: a copy whose strings (cut to the schema's
 * limits) point into data. One allocation. */
struct pending {
	struct pending *next;
	uint64_t id;
	struct events_visit v;
	char data[];
};

/* Pushes the chain first..last (newest first) onto the list at head. */
static void
list_push(_Atomic(struct pending *) *head, struct pending *first, struct pending *last)
{
	last->next = atomic_load_explicit(head, memory_order_relaxed);
	while (!atomic_compare_exchange_weak_explicit(head, &last->next, first,
	    memory_order_release, memory_order_relaxed))
		;
}

/* The last visit of a non-empty list into *tail (NULL for an empty one);
 * returns the list's length. */
static long
list_tail(struct pending *p, struct pending **tail)
{
	long n = 0;

	*tail = NULL;
	for (; p != NULL; p = p->next, n++)
		*tail = p;
	return n;
}

/* Moves a whole list (newest first; NULL: nothing) into the inbox. */
static void
inbox_push_list(struct events *ev, struct pending *head)
{
	struct pending *tail;
	long n = list_tail(head, &tail);

	if (head == NULL)
		return;
	atomic_fetch_add(&ev->inbox_len, n);
	list_push(&ev->inbox, head, tail);
}

/* Per request thread: one event array reused for every visit (its value
 * nodes are updated in place, so a visit allocates only the copies of its
 * strings), the buffer it is dumped into, the thread's visits not yet
 * encoded, and its counters. Found through ev->tls; linked in ev->locals so
 * events_stats can add them up and the encoder thread can take the visits
 * of a thread that went quiet. */
struct local {
	json_t *arr;                  /* the event; holds a reference to each node */
	json_t *id, *ts, *status, *link_id;
	json_t *str[NFIELDS];
	int present[NFIELDS];         /* str[i] (not null) is in arr */
	int has_link;                 /* link_id (not null) is in arr */
	char *buf;                    /* owned, cap bytes */
	size_t cap;
	_Atomic uint64_t events, produced;
	_Atomic(struct pending *) waiting; /* visits not yet encoded, newest first;
	                            * taken whole (atomic_exchange) by this thread
	                            * or the encoder thread */
	atomic_long nwaiting;       /* how many */
	_Atomic long long flushed_ms; /* when this thread last took its list */
	struct events *ev;
	struct local *prev, *next;
};

static void
local_free(struct local *l)
{
	if (l == NULL)
		return;
	json_decref(l->arr);
	json_decref(l->id);
	json_decref(l->ts);
	json_decref(l->status);
	json_decref(l->link_id);
	for (int i = 0; i < NFIELDS; i++)
		json_decref(l->str[i]);
	free(l->buf);
	free(l);
}

/* Thread exit: keeps the thread's counts, unlinks and frees its state. */
static void
local_exit(void *arg)
{
	struct local *l = arg;
	struct events *ev = l->ev;

	pthread_mutex_lock(&ev->locals_mtx);
	/* visits this thread did not encode: to the encoder thread */
	inbox_push_list(ev, atomic_exchange(&l->waiting, NULL));
	ev->retired_events += atomic_load(&l->events);
	ev->retired_produced += atomic_load(&l->produced);
	if (l->prev)
		l->prev->next = l->next;
	else
		ev->locals = l->next;
	if (l->next)
		l->next->prev = l->prev;
	pthread_mutex_unlock(&ev->locals_mtx);
	local_free(l);
}

/* This thread's state, made on its first visit; NULL when out of memory. */
static struct local *
local_get(struct events *ev)
{
	struct local *l = pthread_getspecific(ev->tls);
	json_t *o;
	int bad = 0;

	if (l != NULL)
		return l;
	if ((l = calloc(1, sizeof(*l))) == NULL)
		return NULL;
	l->ev = ev;
	l->cap = 4096;
	atomic_store(&l->flushed_ms, monotime_ms());
	l->arr = o = json_array();
	l->id = json_integer(0);
	l->ts = json_integer(0);
	l->status = json_integer(0);
	l->link_id = json_integer(0);
	for (int i = 0; i < NFIELDS; i++)
		bad |= (l->str[i] = json_string("")) == NULL;
	/* every position null (the strings and link_id until a visit sets
	 * them), then the members every event has */
	for (int i = 0; o != NULL && i < NPOS; i++)
		bad |= json_array_append_new(o, json_null()) < 0;
	if (bad || o == NULL || l->id == NULL || l->ts == NULL || l->status == NULL ||
	    l->link_id == NULL || (l->buf = malloc(l->cap)) == NULL ||
	    json_array_set_new(o, POS_V, json_integer(EVENT_VERSION)) < 0 ||
	    json_array_set(o, POS_ID, l->id) < 0 || json_array_set(o, POS_TS, l->ts) < 0 ||
	    json_array_set(o, POS_STATUS, l->status) < 0) {
		local_free(l);
		return NULL;
	}
	if (pthread_setspecific(ev->tls, l) != 0) {
		local_free(l);
		return NULL;
	}
	pthread_mutex_lock(&ev->locals_mtx);
	l->next = ev->locals;
	if (ev->locals)
		ev->locals->prev = l;
	ev->locals = l;
	pthread_mutex_unlock(&ev->locals_mtx);
	return l;
}

/* 1 when s[0..n) is 7-bit ASCII (so valid UTF-8), 8 bytes at a time. */
static int
is_ascii(const char *s, size_t n)
{
	uint64_t acc = 0, w;
	size_t k = 0;

	for (; k + 8 <= n; k += 8) {
		memcpy(&w, s + k, 8);
		acc |= w;
	}
	for (; k < n; k++)
		acc |= (unsigned char)s[k];
	return (acc & UINT64_C(0x8080808080808080)) == 0;
}

/* Sets string field i to at most fields[i].max bytes of s (NULL: null).
 * A value equal to the node's current one is left in place (jansson would
 * copy it again). ASCII (nearly every header) skips jansson's UTF-8 check;
 * other bytes get it, and invalid UTF-8 (a bad header, or a character split
 * by the truncation) becomes '?' per non-ASCII byte so that a visit is never
 * lost to it. */
/* s's length cut to max bytes, and then back to the start of a character
 * the cut would split (UTF-8 continuation bytes), so that a long header's
 * event keeps its text whole. */
static size_t
cut_len(const char *s, size_t max)
{
	size_t n = strnlen(s, max);

	for (int k = 0; k < 3 && s[n] != '\0' && n > 0 && ((unsigned char)s[n] & 0xc0) == 0x80; k++)
		n--;
	return n;
}

static int
set_str(struct local *l, int i, const char *s)
{
	size_t n;
	int same; /* the node holds s already: no new copy */

	if (s == NULL) {
		if (l->present[i] && json_array_set_new(l->arr, fields[i].pos, json_null()) < 0)
			return -1;
		l->present[i] = 0;
		return 0;
	}
	n = cut_len(s, fields[i].max);
	same = json_string_length(l->str[i]) == n &&
	    memcmp(json_string_value(l->str[i]), s, n) == 0;
	if (!same && (is_ascii(s, n) ? json_string_setn_nocheck(l->str[i], s, n) < 0 :
	    json_string_setn(l->str[i], s, n) < 0)) {
		char *copy = malloc(n + 1);

		if (copy == NULL)
			return -1;
		/* only the bytes that are not UTF-8 become '?' (every byte past
		 * 0x7f did: one Latin-1 byte cost a field all its characters) */
		memcpy(copy, s, n);
		copy[n] = '\0';
		errstr_utf8_clean(copy);
		n = json_string_setn(l->str[i], copy, n) < 0;
		free(copy);
		if (n)
			return -1;
	}
	if (!l->present[i] && json_array_set(l->arr, fields[i].pos, l->str[i]) < 0)
		return -1;
	l->present[i] = 1;
	return 0;
}

/* Dumps the visit into l->buf from offset at (the buffer grown when it does
 * not fit; bytes before at are kept). Returns the length, 0 on error. */
static size_t
event_json(struct local *l, const struct events_visit *v, uint64_t id, size_t at)
{
	const char *s[NFIELDS];
	size_t n;
	int want_link = v->link_id > 0;

	for (int i = 0; i < NFIELDS; i++)
		s[i] = *visit_str(v, i);
	if (s[F_IP] == NULL)
		s[F_IP] = "";
	json_integer_set(l->id, (json_int_t)id);
	json_integer_set(l->ts, (json_int_t)v->ts_us);
	json_integer_set(l->status, v->status);
	if (want_link)
		json_integer_set(l->link_id, v->link_id);
	if (want_link != l->has_link) {
		if ((want_link ? json_array_set(l->arr, POS_LINK_ID, l->link_id) :
		    json_array_set_new(l->arr, POS_LINK_ID, json_null())) < 0)
			return 0;
		l->has_link = want_link;
	}
	for (int i = 0; i < NFIELDS; i++)
		if (set_str(l, i, s[i]) < 0)
			return 0;
	n = json_dumpb(l->arr, l->buf + at, l->cap - at, JSON_COMPACT);
	if (n > l->cap - at) {
		size_t cap = l->cap * 2 > at + n ? l->cap * 2 : at + n;
		char *nb = realloc(l->buf, cap);

		if (nb == NULL)
			return 0;
		l->buf = nb;
		l->cap = cap;
		n = json_dumpb(l->arr, l->buf + at, l->cap - at, JSON_COMPACT);
	}
	return n <= l->cap - at ? n : 0;
}

/* A request thread encodes and produces its visits itself, this many at a
 * time: the copies are still in its core's cache, and jansson's and
 * librdkafka's code and data stay hot for the run. Handing every visit to one
 * encoder thread instead (thirteenth to seventeenth sessions) moved each copy
 * to the other core and cost 2-5% more CPU per request (interleaved wrk runs,
 * eighteenth session). */
#define LOCAL_BATCH 64

/* Encodes the visits p[0..n) (n <= LOCAL_BATCH; they stay the caller's)
 * with l, the calling thread's state (NULL when it could not be made: the
 * visits are logged as lost), one after the other in l->buf, and hands them
 * to librdkafka in one rd_kafka_produce_batch: the topic's lock and the clock
 * are taken once for all of them. Those it refuses go to the spool. */
static void
publish_some(struct events *ev, struct local *l, struct pending *const *p, int n)
{
	rd_kafka_message_t m[LOCAL_BATCH];
	size_t off[LOCAL_BATCH], at = 0;
	uint64_t good = 0;
	int k = 0;

	for (int i = 0; i < n; i++) {
		const struct events_visit *v = &p[i]->v;
		size_t len = l != NULL ? event_json(l, v, p[i]->id, at) : 0;

		if (len == 0) {
			log_error("events: cannot encode the event for code %s", v->code);
			continue;
		}
		memset(&m[k], 0, sizeof(m[k]));
		m[k].key = (void *)v->code;
		m[k].key_len = strlen(v->code);
		m[k].len = len;
		off[k++] = at;
		at += len;
	}
	if (k == 0)
		return;
	atomic_fetch_add_explicit(&l->events, (uint64_t)k, memory_order_relaxed);
	for (int i = 0; i < k; i++)
		m[i].payload = l->buf + off[i];  /* l->buf no longer moves */
	if (atomic_load_explicit(&ev->fatal, memory_order_relaxed)) {
		for (int i = 0; i < k; i++)
			m[i].err = RD_KAFKA_RESP_ERR__FATAL;
	} else {
		/* F_COPY: librdkafka copies each value into its message's own
		 * allocation, so l->buf is reused at once. The partitioner
		 * places each message by its key, as producev would. */
		rd_kafka_produce_batch(ev->rkt, RD_KAFKA_PARTITION_UA, RD_KAFKA_MSG_F_COPY, m, k);
	}
	for (int i = 0; i < k; i++) {
		if (m[i].err == RD_KAFKA_RESP_ERR_NO_ERROR) {
			good++;
			continue;
		}
		atomic_fetch_add(&ev->failed, 1);
		to_spool(ev, m[i].key, m[i].key_len, m[i].payload, m[i].len);
		fail_log(ev, "producer refused an event", rd_kafka_err2str(m[i].err));
	}
	/* release: a reader that sees the count sees the messages queued
	 * (live_delivered) */
	if (good > 0)
		atomic_fetch_add_explicit(&l->produced, good, memory_order_release);
}

/* publish_some of one visit (v's strings are only read during the call). */
static void
publish_now(struct events *ev, struct local *l, const struct events_visit *v, uint64_t id)
{
	struct pending one = { .next = NULL, .id = id, .v = *v };
	struct pending *p = &one;

	publish_some(ev, l, &p, 1);
}

size_t
events_encode(struct events *ev, const struct events_visit *v, uint64_t id, const char **out)
{
	struct local *l = local_get(ev);
	size_t n = l != NULL ? event_json(l, v, id, 0) : 0;

	*out = n > 0 ? l->buf : NULL;
	return n;
}

/* The encoder thread takes the visits of a thread that has not taken its
 * own list for this long (a thread that went quiet, or a slow trickle), so
 * a visit waits at most about this plus the encoder's nap (<= 16 ms). */
#define STALE_MS 5

static struct pending *
pending_new(const struct events_visit *v, uint64_t id)
{
	size_t total = 0, len[NFIELDS];
	struct pending *p;
	char *d;

	for (int i = 0; i < NFIELDS; i++) {
		const char *s = *visit_str(v, i);

		len[i] = s != NULL ? cut_len(s, fields[i].max) : 0;
		total += s != NULL ? len[i] + 1 : 0;
	}
	if ((p = malloc(sizeof(*p) + total)) == NULL)
		return NULL;
	p->next = NULL;
	p->id = id;
	p->v = *v;
	d = p->data;
	for (int i = 0; i < NFIELDS; i++) {
		const char **s = visit_str(&p->v, i);

		if (*s == NULL)
			continue;
		memcpy(d, *s, len[i]);
		d[len[i]] = '\0';
		*s = d;
		d += len[i] + 1;
	}
	return p;
}

/* Encodes, produces and frees a list taken whole (newest first), oldest
 * first, LOCAL_BATCH at a time, with l, the calling thread's state (see
 * publish_some). Returns how many. */
static long
publish_list(struct events *ev, struct local *l, struct pending *p)
{
	struct pending *rev = NULL, *next, *chunk[LOCAL_BATCH];
	long n = 0;
	int k = 0;

	for (; p != NULL; p = next) {
		next = p->next;
		p->next = rev;
		rev = p;
	}
	for (p = rev; p != NULL; p = next) {
		next = p->next;
		chunk[k++] = p;
		if (k == LOCAL_BATCH || next == NULL) {
			publish_some(ev, l, chunk, k);
			for (int i = 0; i < k; i++)
				free(chunk[i]);
			n += k;
			k = 0;
		}
	}
	return n;
}

/* publish_list of a list taken off the request threads, on the calling
 * thread (the encoder, or the one closing); NULL: nothing. */
static long
publish_taken(struct events *ev, struct pending *p)
{
	return p != NULL ? publish_list(ev, local_get(ev), p) : 0;
}

/* Publishes everything in the inbox. Returns how many. */
static long
drain_inbox(struct events *ev)
{
	struct pending *p = atomic_exchange(&ev->inbox, NULL);
	long n = publish_taken(ev, p);

	atomic_fetch_sub(&ev->inbox_len, n);
	return n;
}

/* Takes the lists of the threads that have not taken theirs for STALE_MS
 * (all of them when all is set) and publishes them. Returns how many. */
static long
sweep_locals(struct events *ev, int all)
{
	struct pending *taken = NULL;
	long long now = monotime_ms();

	pthread_mutex_lock(&ev->locals_mtx);
	for (struct local *l = ev->locals; l != NULL; l = l->next) {
		struct pending *p, *tail;

		if (atomic_load_explicit(&l->waiting, memory_order_relaxed) == NULL ||
		    (!all && now - atomic_load_explicit(&l->flushed_ms, memory_order_relaxed) <
		    STALE_MS))
			continue;
		if ((p = atomic_exchange(&l->waiting, NULL)) == NULL)
			continue;
		atomic_fetch_sub(&l->nwaiting, list_tail(p, &tail));
		tail->next = taken;  /* each thread's visits stay in order */
		taken = p;
	}
	pthread_mutex_unlock(&ev->locals_mtx);
	return publish_taken(ev, taken);
}

/* Publishes every visit not yet encoded, of every thread. */
static void
publish_all(struct events *ev)
{
	sweep_locals(ev, 1);
	drain_inbox(ev);
}

/* The encoder thread: publishes the visits of threads that went quiet and of
 * threads that exited. It looks again after 1 ms, doubling to 16 ms while
 * it finds nothing. */
static void *
encoder_main(void *arg)
{
	struct events *ev = arg;
	long nap_ns = 1000000;

	while (atomic_load(&ev->running)) {
		struct timespec ts = { 0, 0 };

		if (sweep_locals(ev, 0) + drain_inbox(ev) > 0)
			nap_ns = 1000000;
		else if (nap_ns < 16000000)
			nap_ns *= 2;
		ts.tv_nsec = nap_ns;
		nanosleep(&ts, NULL);
	}
	publish_all(ev);
	return NULL;
}

uint64_t
events_publish(struct events *ev, const struct events_visit *v)
{
	uint64_t id = eventid_next(v->ts_us / 1000);
	struct local *l;
	struct pending *p;

	l = local_get(ev);
	if (!ev->encoding || l == NULL || (p = pending_new(v, id)) == NULL) {
		publish_now(ev, l, v, id);
		return id;
	}
	list_push(&l->waiting, p, p);
	if (atomic_fetch_add_explicit(&l->nwaiting, 1, memory_order_relaxed) + 1 >= LOCAL_BATCH) {
		atomic_store_explicit(&l->flushed_ms, monotime_ms(), memory_order_relaxed);
		/* counted as waiting until encoded and produced */
		atomic_fetch_sub_explicit(&l->nwaiting,
		    publish_list(ev, l, atomic_exchange(&l->waiting, NULL)), memory_order_relaxed);
	}
	return id;
}

/* ------------------------------------------------------------ threads */

/* Sleeps up to ms unless events_close wakes us. */
static void
nap(struct events *ev, int ms)
{
	struct timespec ts;

	monotime_deadline(&ts, ms);
	pthread_mutex_lock(&ev->mtx);
	if (atomic_load(&ev->running))
		pthread_cond_timedwait(&ev->cond, &ev->mtx, &ts);
	pthread_mutex_unlock(&ev->mtx);
}

/* Serves delivery reports every POLL_MS. Blocking in rd_kafka_poll would
 * wake this thread for every produce response (one per partition batch);
 * a report waiting up to POLL_MS only delays a counter or a spool write. */
#define POLL_MS 50

/* The ids' mark stays ahead of every id taken: at least IDMARK_AHEAD_MS
 * past the later of the clock and the last id, renewed (IDMARK_LEASE_MS
 * ahead) by the poller thread every POLL_MS; at a clean stop it is
 * the last id's time + 1. After a crash a restart's ids start at most a
 * lease ahead of the clock, never on an id of the run before. */
#define IDMARK_LEASE_MS 120000
#define IDMARK_AHEAD_MS 60000

/* The later of the clock and the last id (the mark's floor at start). */
static int64_t
idmark_top(void)
{
	int64_t now = (int64_t)monotime_wall_ms(), last = eventid_last_ms();

	return last > now ? last : now;
}

/* Writes a mark a lease past idmark_top. Returns 0 or -1 with errstr. */
static int
store_lease(struct events *ev, char *errstr, size_t errstr_size)
{
	int64_t lease = idmark_top() + IDMARK_LEASE_MS;

	if (idmark_store(ev->spool_dir, lease, errstr, errstr_size) < 0)
		return -1;
	ev->id_lease = lease;
	return 0;
}

static void
renew_idmark(struct events *ev)
{
	char err[512];

	if (idmark_top() + IDMARK_AHEAD_MS > ev->id_lease && store_lease(ev, err, sizeof(err)) < 0)
		log_error("events: the event ids' mark: %s (a restart with the clock behind "
		    "could repeat ids)", err);
}

static void *
poller_main(void *arg)
{
	struct events *ev = arg;

	while (atomic_load(&ev->running)) {
		rd_kafka_poll(ev->rk, 0);
		rd_kafka_poll(ev->rk_replay, 0);
		/* here, not in the monitor: a replay holds that for minutes */
		renew_idmark(ev);
		nap(ev, POLL_MS);
	}
	return NULL;
}

static int
replay_record(void *ctx, const char *key, size_t klen, const char *val, size_t vlen)
{
	struct events *ev = ctx;
	rd_kafka_resp_err_t err;

	for (;;) {
		/* Kafka gone again or a delivery of this file failed: the file
		 * stays, no use feeding the rest of it */
		if (!atomic_load(&ev->running) || atomic_load(&ev->replay_fatal) ||
		    !atomic_load(&ev->connected) || atomic_load(&ev->replay_failed) > 0)
			return 1;
		atomic_fetch_add(&ev->replay_outstanding, 1);
		err = rd_kafka_producev(ev->rk_replay, RD_KAFKA_V_RKT(ev->rkt_replay),
		    RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_KEY(key, klen),
		    RD_KAFKA_V_VALUE((void *)(uintptr_t)val, vlen), RD_KAFKA_V_END);
		if (err == RD_KAFKA_RESP_ERR_NO_ERROR)
			return 0;
		atomic_fetch_sub(&ev->replay_outstanding, 1);
		if (refused_for_good(err) && spool_refuse(ev->spool, key, klen, val, vlen) == 0) {
			/* the records after it go on (counted and logged once the
			 * file is done: spool_refuse_close) */
			log_debug("events: Kafka refuses a spooled visit event for good (%s, %zu "
			    "bytes)", rd_kafka_err2str(err), vlen);
			return 0;
		}
		if (err != RD_KAFKA_RESP_ERR__QUEUE_FULL) {
			log_warnx("events: replay stopped: %s", rd_kafka_err2str(err));
			return 1;
		}
		nap(ev, 5); /* its own queue is full: wait for deliveries */
	}
}

/* Replays one spool file; removes it once every record is delivered.
 * Returns 0 when it was removed, -1 when it stays for a later try (a
 * delivery failed, Kafka went away, time ran out): then it is sent whole
 * again, and ingest drops the repeats by event id. */
static int
replay_file(struct events *ev, const char *path)
{
	long long deadline;
	int rc;

	if (atomic_load(&ev->replay_outstanding) > 0) {
		/* reports of an earlier attempt still due (a stalled broker
		 * answers past the wait below): they would count against this
		 * attempt and write into its refused file */
		log_warnx("events: %lld replayed messages of an earlier attempt still await "
		    "their delivery reports", (long long)atomic_load(&ev->replay_outstanding));
		return -1;
	}
	log_info("events: replaying %s", path);
	atomic_store(&ev->replay_failed, 0);
	if (spool_refuse_open(ev->spool, path) < 0)
		log_warnx("events: records Kafka refuses for good keep %s back", path);
	rc = spool_read(path, replay_record, ev);
	if (rc < 0 && access(path, F_OK) < 0 && errno == ENOENT) {
		/* removed from outside: its bytes still counted against
		 * spool_max_bytes, and no take offers it again */
		log_warnx("events: %s vanished before its replay; counting the spool again", path);
		spool_refuse_close(ev->spool, 0, NULL);
		spool_recount(ev->spool);
		return 0;
	}
	deadline = monotime_ms() + ev->message_timeout_ms + 5000;
	while (atomic_load(&ev->replay_outstanding) > 0 && monotime_ms() < deadline &&
	    atomic_load(&ev->running))
		nap(ev, 10);
	if (rc == 0 && atomic_load(&ev->replay_outstanding) == 0 &&
	    atomic_load(&ev->replay_failed) == 0) {
		uint64_t refused;

		if (spool_refuse_close(ev->spool, 1, &refused) < 0)
			return -1; /* kept: retried after the monitor's wait */
		if (spool_done(ev->spool, path) < 0)
			return -1; /* kept: retried after the monitor's wait */
		if (refused > 0)
			log_error("events: Kafka refused %llu visit events of %s for good (past "
			    "kafka_message_max_bytes, or invalid): kept in refused-%s",
			    (unsigned long long)refused, path,
			    strrchr(path, '-') ? strrchr(path, '-') + 1 : path);
		log_info("events: replayed %s (%llu replayed in all)", path,
		    (unsigned long long)atomic_load(&ev->replayed));
		return 0;
	}
	spool_refuse_close(ev->spool, 0, NULL); /* written again next time */
	return -1;
}

static void *
monitor_main(void *arg)
{
	struct events *ev = arg;
	char path[4096];
	int wait_ms = 1000;

	while (atomic_load(&ev->running)) {
		const struct rd_kafka_metadata *md = NULL;
		rd_kafka_resp_err_t err = rd_kafka_metadata(ev->rk, 0, NULL, &md, 1000);
		int was;

		if (md != NULL)
			rd_kafka_metadata_destroy(md);
		was = atomic_exchange(&ev->connected, err == RD_KAFKA_RESP_ERR_NO_ERROR);
		if (was != (err == RD_KAFKA_RESP_ERR_NO_ERROR)) {
			log_info("events: Kafka %s%s%s", err ? "unreachable (" : "reachable",
			    err ? rd_kafka_err2str(err) : "", err ? ")" : "");
			wait_ms = 1000; /* back: replay at once */
		}
		while (err == RD_KAFKA_RESP_ERR_NO_ERROR && atomic_load(&ev->running) &&
		    !atomic_load(&ev->replay_fatal) && atomic_load(&ev->connected) &&
		    spool_take(ev->spool, path, sizeof(path)) == 1) {
			if (replay_file(ev, path) < 0) {
				/* the same file comes back first: try it again
				 * later, waiting longer each time (up to 30 s)
				 * while Kafka refuses it */
				wait_ms = wait_ms < 16000 ? 2 * wait_ms : 30000;
				log_warnx("events: %s stays spooled; next replay in %d s", path,
				    wait_ms / 1000);
				break;
			}
			wait_ms = 1000;
		}
		nap(ev, wait_ms);
	}
	return NULL;
}

/* ------------------------------------------------------------ lifecycle */

/* Ids go on after the mark the last run left; a new mark a lease ahead. */
static int
start_idmark(struct events *ev, char *errstr, size_t errstr_size)
{
	char err[512];
	int64_t mark = idmark_load(ev->spool_dir, err, sizeof(err)), now = (int64_t)monotime_wall_ms();

	if (mark < 0) {
		log_error("events: %s: ids start from the clock", err);
		mark = 0;
	} else if (mark > now + 86400000) {
		/* a day ahead: an edited or mis-scaled file more likely than a
		 * run whose clock was that far ahead, and honoring it would keep
		 * every id that far from its visit (or past the id's 41 bits) */
		log_error("events: the event ids' mark in %s is %lld s ahead of the clock: "
		    "ignored, ids start from the clock", ev->spool_dir,
		    (long long)((mark - now) / 1000));
		mark = 0;
	} else if (mark > now + 3600000) {
		log_warnx("events: the event ids' mark in %s is %lld s ahead of the clock; ids "
		    "go on after it", ev->spool_dir, (long long)((mark - now) / 1000));
	}
	eventid_floor(mark);
	return store_lease(ev, errstr, errstr_size);
}

void
events_deadline(struct events *ev, long long deadline_ms)
{
	if (ev != NULL)
		ev->deadline_ms = deadline_ms;
}

struct events *
events_new(const struct events_conf *conf, char *errstr, size_t errstr_size)
{
	struct events *ev = calloc(1, sizeof(*ev));
	struct spool_conf sc;

	if (ev == NULL) {
		errstr_set(errstr, errstr_size, "out of memory");
		return NULL;
	}
	pthread_mutex_init(&ev->mtx, NULL);
	pthread_mutex_init(&ev->locals_mtx, NULL);
	if (monotime_cond_init(&ev->cond) < 0) {
		errstr_set(errstr, errstr_size, "events: cannot set up a condition variable on CLOCK_MONOTONIC");
		events_close(ev);
		return NULL;
	}
	if (pthread_key_create(&ev->tls, local_exit) != 0) {
		errstr_set(errstr, errstr_size, "events: cannot create thread-local state");
		events_close(ev);
		return NULL;
	}
	ev->tls_made = 1;
	ev->shutdown_flush_ms = conf->shutdown_flush_ms;
	ev->message_timeout_ms = conf->message_timeout_ms;
	eventid_init(conf->worker_id);
	sc.dir = conf->spool_dir;
	sc.max_bytes = conf->spool_max_bytes;
	sc.fsync_ms = conf->spool_fsync_ms;
	if ((ev->spool_dir = strdup(conf->spool_dir)) == NULL) {
		errstr_set(errstr, errstr_size, "out of memory");
		events_close(ev);
		return NULL;
	}
	/* the spool holds spool_dir's lock from here: the mark is this
	 * process's alone */
	if ((ev->spool = spool_open(&sc, errstr, errstr_size)) == NULL ||
	    start_idmark(ev, errstr, errstr_size) < 0 ||
	    (ev->rk = make_producer(ev, conf, 0, errstr, errstr_size)) == NULL ||
	    (ev->rk_replay = make_producer(ev, conf, 1, errstr, errstr_size)) == NULL) {
		events_close(ev);
		return NULL;
	}
	if ((ev->rkt = rd_kafka_topic_new(ev->rk, conf->topic, NULL)) == NULL ||
	    (ev->rkt_replay = rd_kafka_topic_new(ev->rk_replay, conf->topic, NULL)) == NULL) {
		errstr_set(errstr, errstr_size, "kafka topic %s: %s", conf->topic,
		    rd_kafka_err2str(rd_kafka_last_error()));
		events_close(ev);
		return NULL;
	}
	atomic_store(&ev->running, 1);
	if (pthread_create(&ev->poller, NULL, poller_main, ev) != 0) {
		errstr_set(errstr, errstr_size, "events: cannot start the delivery thread");
		events_close(ev);
		return NULL;
	}
	ev->threads = 1;
	if (pthread_create(&ev->monitor, NULL, monitor_main, ev) != 0) {
		errstr_set(errstr, errstr_size, "events: cannot start the replay thread");
		events_close(ev);
		return NULL;
	}
	ev->threads = 2;
	if (pthread_create(&ev->encoder, NULL, encoder_main, ev) != 0) {
		errstr_set(errstr, errstr_size, "events: cannot start the encoder thread");
		events_close(ev);
		return NULL;
	}
	ev->encoding = 1;
	return ev;
}

/* Waits up to ms for rk's queue to drain; what is still queued or in flight
 * then goes to the spool through its (failed) delivery report. */
static void
flush_producer(rd_kafka_t *rk, int ms)
{
	int left = rd_kafka_outq_len(rk);

	if (left > 0)
		log_info("events: flushing %d queued event(s) of %s (up to %d ms)", left,
		    rd_kafka_name(rk), ms);
	if (rd_kafka_flush(rk, ms) == RD_KAFKA_RESP_ERR__TIMED_OUT) {
		log_warnx("events: %d event(s) undelivered at shutdown; spooling them",
		    rd_kafka_outq_len(rk));
		rd_kafka_purge(rk, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
		rd_kafka_flush(rk, 2000);
		rd_kafka_poll(rk, 0);
	}
}

void
events_close(struct events *ev)
{
	struct events_stats st;

	if (ev == NULL)
		return;
	pthread_mutex_lock(&ev->mtx);
	atomic_store(&ev->running, 0);
	pthread_cond_broadcast(&ev->cond);
	pthread_mutex_unlock(&ev->mtx);
	/* The encoder publishes what the request threads left before it exits;
	 * the poller still runs meanwhile. */
	if (ev->encoding) {
		pthread_join(ev->encoder, NULL);
		ev->encoding = 0;
		publish_all(ev);  /* a request thread still running would have added */
	}
	if (ev->threads >= 2)
		pthread_join(ev->monitor, NULL);
	if (ev->threads >= 1)
		pthread_join(ev->poller, NULL);
	if (ev->rk != NULL) {
		/* one shutdown_flush_ms for both producers (each waited it in
		 * full, twice the time a supervisor's stop timeout was sized
		 * for); the replay producer's messages are all still in the
		 * file they came from, which stays unless every one of them
		 * was delivered */
		long long end = monotime_ms() + ev->shutdown_flush_ms;

		if (ev->deadline_ms > 0 && ev->deadline_ms < end)
			end = ev->deadline_ms;
		flush_producer(ev->rk, end > monotime_ms() ? (int)(end - monotime_ms()) : 0);
		if (ev->rk_replay != NULL)
			flush_producer(ev->rk_replay, end > monotime_ms() ? (int)(end - monotime_ms()) : 0);
		if (ev->rkt != NULL)
			rd_kafka_topic_destroy(ev->rkt);
		if (ev->rkt_replay != NULL)
			rd_kafka_topic_destroy(ev->rkt_replay);
		if (ev->rk_replay != NULL)
			rd_kafka_destroy(ev->rk_replay);
		rd_kafka_destroy(ev->rk);
		ev->rk = ev->rk_replay = NULL;
		ev->rkt = ev->rkt_replay = NULL;
		/* Every id is taken (the request threads are stopped, the
		 * encoder and the poller joined): the exact mark, while the
		 * spool still holds spool_dir's lock (a successor could be
		 * waiting for it, and would read the mark then) */
		if (ev->id_lease > 0) {
			char err[512];

			/* eventid_floor put the last id at the start's mark at least */
			if (idmark_store(ev->spool_dir, eventid_last_ms() + 1, err, sizeof(err)) < 0)
				log_error("events: the event ids' mark: %s (a restart with the clock "
				    "behind could repeat ids)", err);
		}
		/* the counts once the spool has written (or dropped) its last
		 * records: they were logged before, without its final drops */
		spool_stop(ev->spool);
		events_stats(ev, &st);
		log_info("events: events=%llu produced=%llu delivered=%llu failed=%llu spooled=%llu "
		    "replayed=%llu spool_dropped=%llu spool_bytes=%llu spool_refused=%llu",
		    (unsigned long long)st.events, (unsigned long long)st.produced,
		    (unsigned long long)st.delivered, (unsigned long long)st.failed,
		    (unsigned long long)st.spooled, (unsigned long long)st.replayed,
		    (unsigned long long)st.spool_dropped, (unsigned long long)st.spool_bytes,
		    (unsigned long long)st.spool_refused);
	}
	spool_close(ev->spool);
	free(ev->spool_dir);
	/* Threads that published and are still alive (the request threads are
	 * stopped before this) leave their state to us. */
	while (ev->locals != NULL) {
		struct local *l = ev->locals;

		ev->locals = l->next;
		local_free(l);
	}
	if (ev->tls_made)
		pthread_key_delete(ev->tls);
	pthread_mutex_destroy(&ev->locals_mtx);
	pthread_cond_destroy(&ev->cond);
	pthread_mutex_destroy(&ev->mtx);
	free(ev);
}

int
events_connected(struct events *ev)
{
	return atomic_load(&ev->connected) && !events_failed(ev);
}

int
events_failed(struct events *ev)
{
	/* the live producer only: with the replay producer failed alone the
	 * instance still sends every new event to Kafka, and taking it out of
	 * rotation (everywhere at once, for a shared cause) would cost more
	 * than the spool it cannot drain until restart */
	return atomic_load(&ev->fatal);
}

/*
 * The live producer's deliveries, which it does not report: produced, read
 * before its queue length (queued), less the queue and the failures, read
 * after. A message leaves the queue delivered, or failed with live_failed
 * counted first, so this never counts one that was not delivered; it can
 * count too few (a message queued between the two reads, a failure of one
 * produced after), so the highest value given out is kept and returned: a
 * counter that never goes back, exact once the queue is empty.
 */
static uint64_t
live_delivered(struct events *ev, uint64_t produced, uint64_t queued)
{
	uint64_t failed = atomic_load(&ev->live_failed);
	uint64_t est = produced > queued + failed ? produced - queued - failed : 0;
	uint64_t seen = atomic_load(&ev->live_delivered);

	while (est > seen && !atomic_compare_exchange_weak(&ev->live_delivered, &seen, est))
		;
	return est > seen ? est : seen;
}

void
events_stats(struct events *ev, struct events_stats *out)
{
	struct spool_stats ss;

	spool_stats(ev->spool, &ss);
	pthread_mutex_lock(&ev->locals_mtx);
	out->events = ev->retired_events;
	out->produced = ev->retired_produced;
	out->pending = (uint64_t)atomic_load(&ev->inbox_len);
	for (struct local *l = ev->locals; l != NULL; l = l->next) {
		out->events += atomic_load_explicit(&l->events, memory_order_relaxed);
		out->produced += atomic_load_explicit(&l->produced, memory_order_acquire);
		out->pending += (uint64_t)atomic_load_explicit(&l->nwaiting, memory_order_relaxed);
	}
	pthread_mutex_unlock(&ev->locals_mtx);
	out->queued = ev->rk ? (uint64_t)rd_kafka_outq_len(ev->rk) : 0;
	out->replayed = atomic_load(&ev->replayed);
	out->delivered = live_delivered(ev, out->produced, out->queued) + out->replayed;
	if (ev->rk_replay != NULL)
		out->queued += (uint64_t)rd_kafka_outq_len(ev->rk_replay);
	out->failed = atomic_load(&ev->failed);
	out->spooled = atomic_load(&ev->spooled);
	out->spool_dropped = ss.dropped;
	out->spool_refused = ss.refused;
	out->spool_bytes = ss.bytes;
	out->connected = events_connected(ev);
	out->replay_stopped = atomic_load(&ev->replay_fatal) != 0;
}
