/* links.c - link creation (random pool, hash, sequence, alias), dedupe by
 * long-URL MD5, lookup, PATCH, soft delete, keyset listing and batch
 * resolve, over parameterized libpq queries with Redis as a cache. */
#include "links_int.h"
#include "linkbatch.h"
#include "digest.h"
#include "errstr.h"
#include "http.h"
#include "log.h"
#include "pool.h"
#include "rfc3339.h"
#include "workq.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <curl/curl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#define MAX_URL 4096
#define MAX_TAGS 32
#define MAX_TAG_LEN 64
#define CREATE_TRIES 64
/* The hash strategy walks one endless stream of candidates per URL and
 * length, from salt 0 at every create: the (k+1)-th link for a URL passes
 * the k taken codes before it. Candidates the Bloom filter skips cost no
 * query and do not count as tries; a bound on all candidates keeps the walk
 * finite (a URL with ~this many hash links, or a saturated filter). */
#define HASH_CANDIDATES_MAX 65536
/* The most queued single creates one batch statement takes (the workers
 * draining the queue are links_conf.batch_workers). */
#define LINKS_BATCH_MAX 256



static const char *const strategy_names[] = { "random", "sequence", "hash", "alias" };

int
links_fail(struct links_err *err, int status, const char *code, const char *field, const char *fmt, ...)
{
	va_list ap;

	err->status = status;
	err->code = code;
	/* errstr: both may quote the request cut at a byte count, and the
	 * error body is JSON, which takes only UTF-8 */
	errstr_set(err->field, sizeof(err->field), "%s", field ? field : "");
	va_start(ap, fmt);
	errstr_vset(err->msg, sizeof(err->msg), fmt, ap);
	va_end(ap);
	return -1;
}

int
links_db_fail(struct links_err *err, const char *errstr)
{
	log_warnx("links: %s", errstr);
	return links_fail(err, 503, "database_unavailable", NULL, "the database is unavailable: try again");
}

static const char *
url_host(const char *url, char *host, size_t host_size)
{
	CURLU *h = curl_url();
	char *p = NULL;

	host[0] = '\0';
	if (h != NULL && curl_url_set(h, CURLUPART_URL, url, 0) == CURLUE_OK &&
	    curl_url_get(h, CURLUPART_HOST, &p, 0) == CURLUE_OK) {
		snprintf(host, host_size, "%s", p);
		for (char *c = host; *c; c++)
			*c = (char)tolower((unsigned char)*c);
	}
	curl_free(p);
	curl_url_cleanup(h);
	return host;
}

/* localhost, *.localhost, 127.0.0.0/8 or [::1] (as url_host writes them). */
static int
loopback_host(const char *host)
{
	struct in_addr a;
	size_t n = strlen(host);

	if (strcmp(host, "localhost") == 0 || strcmp(host, "[::1]") == 0 ||
	    (n > 10 && strcmp(host + n - 10, ".localhost") == 0))
		return 1;
	return inet_pton(AF_INET, host, &a) == 1 && (ntohl(a.s_addr) >> 24) == 127;
}

struct links *
links_new(const struct links_conf *conf, struct pgpool *pg, struct kv *kv, struct bloom *bloom,
          struct pool *pool, char *errstr, size_t errstr_size)
{
	struct links *L = calloc(1, sizeof(*L));
	char *ace;
	size_t n;

	if (L == NULL || (L->base_url = strdup(conf->base_url)) == NULL) {
		free(L);
		snprintf(errstr, errstr_size, "out of memory");
		return NULL;
	}
	n = strlen(L->base_url);
	while (n > 0 && L->base_url[n - 1] == '/')
		L->base_url[--n] = '\0';
	url_host(L->base_url, L->base_host, sizeof(L->base_host));
	/* as a Location sends it (links_check_url compares targets so) */
	if ((ace = http_host_ace(L->base_host)) != NULL) {
		snprintf(L->base_host, sizeof(L->base_host), "%s", ace);
		free(ace);
	}
	if (L->base_host[0] == '\0') {
		snprintf(errstr, errstr_size, "base_url: \"%s\" is not a URL with a host", conf->base_url);
		links_free(L);
		return NULL;
	}
	/* Anyone could compute a public key's codes in order (the strategy's
	 * point is that they cannot): a development default must not serve
	 * the public. */
	if (!loopback_host(L->base_host) && (strcmp(conf->seq_secret,
	    LINKS_DEV_SEQUENCE_SECRET) == 0 || strncmp(conf->seq_secret, "change-me", 9) == 0 ||
	    strlen(conf->seq_secret) < 16)) {
		snprintf(errstr, errstr_size, "sequence_secret: the built-in key, the examples' "
		    "change-me placeholder or a key under 16 bytes, and base_url's host (%s) is "
		    "not a loopback one: set your own (e.g. openssl rand -hex 32; never change it "
		    "after)", L->base_host);
		links_free(L);
		return NULL;
	}
	if (codes_seq_key_from_secret(conf->seq_secret, &L->seqkey) < 0) {
		snprintf(errstr, errstr_size, "sequence_secret: unusable");
		links_free(L);
		return NULL;
	}
	L->pg = pg;
	L->kv = kv;
	L->bloom = bloom;
	L->pool = pool;
	L->default_length = conf->default_length;
	L->default_strategy = conf->default_strategy;
	L->cache_ttl_s = conf->cache_ttl_s;
	L->lookup_timeout_ms = conf->lookup_timeout_ms > 0 ? conf->lookup_timeout_ms : 5000;
	if (pool != NULL && (L->batch = linkbatch_new(L, conf->batch_workers, LINKS_BATCH_MAX,
	    errstr, errstr_size)) == NULL) {
		links_free(L);
		return NULL;
	}
	return L;
}

void
links_free(struct links *L)
{
	if (L == NULL)
		return;
	linkbatch_free(L->batch);
	free(L->base_url);
	free(L);
}

/* ------------------------------------------------------------ JSON out */

/* Column c of row i as a JSON string: checked UTF-8 (user text), or not
 * (ascii: codes, hex, timestamps PostgreSQL formatted). NULL as null. */
static json_t *
col_string(PGresult *r, int i, int c, int ascii)
{
	if (PQgetisnull(r, i, c))
		return json_null();
	return ascii ? json_stringn_nocheck(PQgetvalue(r, i, c), (size_t)PQgetlength(r, i, c)) :
	    json_stringn(PQgetvalue(r, i, c), (size_t)PQgetlength(r, i, c));
}

/* Built field by field rather than with json_pack (format parsing, UTF-8
 * checks of keys and ASCII values): a bulk create builds 1,000 of these,
 * and json_pack was a sixth of the redirector's CPU per bulk link. */
json_t *
links_row_json_at(PGresult *r, int i, int off)
{
	const char *tagtext = PQgetvalue(r, i, off + 10);
	json_t *o = json_object(), *tags;
	int strategy = atoi(PQgetvalue(r, i, off + 5));

	if (o == NULL)
		return NULL;
	tags = strcmp(tagtext, "[]") == 0 ? json_array() : json_loads(tagtext, 0, NULL);
	json_object_set_new_nocheck(o, "id",
	    json_integer(strtoll(PQgetvalue(r, i, off + 0), NULL, 10)));
	json_object_set_new_nocheck(o, "code", col_string(r, i, off + 1, 1));
	json_object_set_new_nocheck(o, "short_url", col_string(r, i, off + 2, 0));
	json_object_set_new_nocheck(o, "long_url", col_string(r, i, off + 3, 0));
	json_object_set_new_nocheck(o, "long_url_md5", col_string(r, i, off + 4, 1));
	json_object_set_new_nocheck(o, "strategy", json_string_nocheck(
	    strategy >= 0 && strategy <= 3 ? strategy_names[strategy] : "random"));
	json_object_set_new_nocheck(o, "redirect_type", json_integer(atoi(PQgetvalue(r, i, off + 6))));
	json_object_set_new_nocheck(o, "valid_since", col_string(r, i, off + 7, 1));
	json_object_set_new_nocheck(o, "expires_at", col_string(r, i, off + 8, 1));
	json_object_set_new_nocheck(o, "max_visits", PQgetisnull(r, i, off + 9) ? json_null() :
	    json_integer(strtoll(PQgetvalue(r, i, off + 9), NULL, 10)));
	json_object_set_new_nocheck(o, "tags", tags ? tags : json_array());
	json_object_set_new_nocheck(o, "disabled", json_boolean(PQgetvalue(r, i, off + 11)[0] == 't'));
	json_object_set_new_nocheck(o, "deleted", json_boolean(atoi(PQgetvalue(r, i, off + 12)) != 0));
	json_object_set_new_nocheck(o, "created_at", col_string(r, i, off + 13, 1));
	json_object_set_new_nocheck(o, "updated_at", col_string(r, i, off + 14, 1));
	json_object_set_new_nocheck(o, "hits",
	    json_integer(strtoll(PQgetvalue(r, i, off + 15), NULL, 10)));
	json_object_set_new_nocheck(o, "forward_query",
	    json_boolean(PQgetvalue(r, i, off + 16)[0] == 't'));
	return o;
}

static json_t *
row_json(PGresult *r, int i)
{
	return links_row_json_at(r, i, 0);
}

/* ------------------------------------------------------ validation */

/* Host names equal as DNS sees them: case aside, and a fully qualified
 * "s.test." the same as "s.test" (it would redirect back to this service). */
static int
same_host(const char *a, const char *b)
{
	size_t na = strlen(a), nb = strlen(b);

	if (na > 0 && a[na - 1] == '.')
		na--;
	if (nb > 0 && b[nb - 1] == '.')
		nb--;
	return na == nb && strncasecmp(a, b, na) == 0;
}

int
links_check_url(struct links *L, const char *url, const char *field, struct links_err *err)
{
	size_t n = strlen(url);
	CURLU *h;
	CURLUcode rc;
	char *scheme = NULL, *host = NULL, *ace = NULL;
	int ret = 0;

	if (n == 0)
		return links_fail(err, 400, "invalid_url", field, "%s must not be empty", field);
	if (n > MAX_URL)
		return links_fail(err, 400, "invalid_url", field, "%s is %zu characters; at most %d allowed",
		    field, n, MAX_URL);
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)url[i] < 0x20 || url[i] == 0x7f)
			return links_fail(err, 400, "invalid_url", field,
			    "%s contains a control character at position %zu", field, i);
	/* as the redirect sends it: a link created longer never redirected
	 * (libmicrohttpd dropped the connection, no room for its header) */
	if (http_location_length(url) > HTTP_LOCATION_MAX)
		return links_fail(err, 400, "invalid_url", field, "%s is %zu bytes as a Location "
		    "header (non-ASCII bytes and characters such as space or \" go as %%XX); at "
		    "most %d", field, http_location_length(url), HTTP_LOCATION_MAX);
	if ((h = curl_url()) == NULL)
		return links_fail(err, 503, "internal", NULL, "out of memory");
	rc = curl_url_set(h, CURLUPART_URL, url, 0);
	if (rc != CURLUE_OK) {
		ret = links_fail(err, 400, "invalid_url", field, "%s is not a valid URL: %s", field,
		    curl_url_strerror(rc));
	} else if (curl_url_get(h, CURLUPART_SCHEME, &scheme, 0) != CURLUE_OK ||
	    (strcasecmp(scheme, "http") != 0 && strcasecmp(scheme, "https") != 0)) {
		ret = links_fail(err, 400, "invalid_url", field, "%s must use http or https", field);
	} else if (curl_url_get(h, CURLUPART_HOST, &host, 0) != CURLUE_OK || *host == '\0') {
		ret = links_fail(err, 400, "invalid_url", field, "%s has no host", field);
	} else if (same_host((ace = http_host_ace(host)) != NULL ? ace : host, L->base_host)) {
		/* compared as the Location sends it: an international name
		 * mapped to ASCII ("\xef\xbd\x93.test", a fullwidth s, is s.test) */
		ret = links_fail(err, 400, "redirect_loop", field,
		    "%s points at this service's own host (%s): that would loop", field, host);
	}
	free(ace);
	curl_free(scheme);
	curl_free(host);
	curl_url_cleanup(h);
	return ret;
}

/* RFC 3339 date-time (rfc3339.h) of an instant PostgreSQL stores and
 * renders as the redirector reads it back (RFC3339_MIN_US..RFC3339_MAX_US). */
static int
valid_rfc3339(const char *s)
{
	int64_t us;

	return rfc3339_parse(s, &us) == 0 && us >= RFC3339_MIN_US && us <= RFC3339_MAX_US;
}

static int
parse_tags(json_t *v, char **out, struct links_err *err)
{
	size_t i, cap = 3;
	json_t *t;
	char *buf, *w;

	if (!json_is_array(v))
		return links_fail(err, 400, "invalid_field", "tags", "tags must be an array of strings");
	if (json_array_size(v) > MAX_TAGS)
		return links_fail(err, 400, "invalid_field", "tags", "at most %d tags allowed", MAX_TAGS);
	json_array_foreach(v, i, t) {
		const char *s = json_string_value(t);
		size_t n = s ? strlen(s) : 0;

		if (s == NULL || n == 0 || n > MAX_TAG_LEN)
			return links_fail(err, 400, "invalid_field", "tags",
			    "tags[%zu] must be a string of 1-%d bytes", i, MAX_TAG_LEN);
		for (size_t k = 0; k < n; k++)
			if ((unsigned char)s[k] < 0x20 || s[k] == 0x7f)
				return links_fail(err, 400, "invalid_field", "tags",
				    "tags[%zu] contains a control character", i);
		cap += 2 * n + 3;
	}
	if ((buf = malloc(cap)) == NULL)
		return links_fail(err, 503, "internal", NULL, "out of memory");
	w = buf;
	*w++ = '{';
	json_array_foreach(v, i, t) {
		const char *s = json_string_value(t);

		if (i > 0)
			*w++ = ',';
		*w++ = '"';
		for (; *s; s++) {
			if (*s == '"' || *s == '\\')
				*w++ = '\\';
			*w++ = *s;
		}
		*w++ = '"';
	}
	*w++ = '}';
	*w = '\0';
	*out = buf;
	return 0;
}

static int
parse_time_field(json_t *v, const char *name, const char **out, struct links_err *err)
{
	if (json_is_null(v)) {
		*out = NULL;
		return 0;
	}
	if (!json_is_string(v) || !valid_rfc3339(json_string_value(v)))
		return links_fail(err, 400, "invalid_field", name,
		    "%s must be an RFC 3339 date-time such as 2030-01-31T12:00:00Z between 1970-01-01 "
		    "and 9999-12-30, or null", name);
	*out = json_string_value(v);
	return 0;
}

/* A true/false member: *out and *has (when not NULL) set, or a 400. */
static int
parse_bool(json_t *v, const char *name, int *out, int *has, struct links_err *err)
{
	if (!json_is_boolean(v))
		return links_fail(err, 400, "invalid_field", name, "%s must be true or false", name);
	*out = json_is_true(v);
	if (has != NULL)
		*has = 1;
	return 0;
}

/* Checks every member of req against the allowed names; fills f. */
int
links_parse_fields(struct links *L, json_t *req, int is_patch, struct fields *f, struct links_err *err)
{
	static const char *const create_ok[] = { "url", "alias", "strategy", "length", "expires_at",
	    "valid_since", "max_visits", "redirect_type", "tags", "dedupe", "forward_query", NULL };
	static const char *const patch_ok[] = { "url", "expires_at", "valid_since", "max_visits",
	    "redirect_type", "disabled", "tags", "forward_query", NULL };
	const char *const *ok = is_patch ? patch_ok : create_ok;
	const char *key;
	json_t *v;

	memset(f, 0, sizeof(*f));
	f->strategy = -1;
	f->dedupe = 1;
	if (!json_is_object(req))
		return links_fail(err, 400, "invalid_json", NULL, "the request body must be a JSON object");
	json_object_foreach(req, key, v) {
		int known = 0;

		for (int i = 0; ok[i] != NULL; i++)
			if (strcmp(key, ok[i]) == 0)
				known = 1;
		if (!known)
			return links_fail(err, 400, "unknown_field", key, "unknown field \"%s\"", key);
		if (strcmp(key, "url") == 0) {
			if (!json_is_string(v))
				return links_fail(err, 400, "invalid_field", "url", "url must be a string");
			f->url = json_string_value(v);
			f->has_url = 1;
			if (links_check_url(L, f->url, "url", err) < 0)
				return -1;
		} else if (strcmp(key, "alias") == 0) {
			if (json_is_null(v))
				continue;
			if (!json_is_string(v) || !codes_valid_alias(json_string_value(v)))
				return links_fail(err, 400, "invalid_field", "alias",
				    "alias must be 1-64 characters of A-Z a-z 0-9 _ -");
			if (codes_is_reserved(json_string_value(v)))
				return links_fail(err, 400, "reserved_alias", "alias",
				    "alias \"%s\" is reserved", json_string_value(v));
			f->alias = json_string_value(v);
		} else if (strcmp(key, "strategy") == 0) {
			const char *s = json_string_value(v);

			for (int i = 0; s != NULL && i < 3; i++)
				if (strcmp(s, strategy_names[i]) == 0)
					f->strategy = i;
			if (f->strategy < 0)
				return links_fail(err, 400, "invalid_field", "strategy",
				    "strategy must be \"random\", \"hash\" or \"sequence\"");
		} else if (strcmp(key, "length") == 0) {
			if (!json_is_integer(v) || json_integer_value(v) < CODES_GEN_MIN ||
			    json_integer_value(v) > CODES_GEN_MAX)
				return links_fail(err, 400, "invalid_field", "length",
				    "length must be an integer from %d to %d", CODES_GEN_MIN, CODES_GEN_MAX);
			f->length = (int)json_integer_value(v);
		} else if (strcmp(key, "expires_at") == 0) {
			if (parse_time_field(v, "expires_at", &f->expires_at, err) < 0)
				return -1;
			f->has_expires = 1;
		} else if (strcmp(key, "valid_since") == 0) {
			if (parse_time_field(v, "valid_since", &f->valid_since, err) < 0)
				return -1;
			f->has_valid = 1;
		} else if (strcmp(key, "max_visits") == 0) {
			if (json_is_null(v)) {
				f->max_visits[0] = '\0';
			} else if (!json_is_integer(v) || json_integer_value(v) < 1) {
				return links_fail(err, 400, "invalid_field", "max_visits",
				    "max_visits must be a positive integer or null");
			} else {
				snprintf(f->max_visits, sizeof(f->max_visits), "%lld",
				    (long long)json_integer_value(v));
			}
			f->has_max = 1;
		} else if (strcmp(key, "redirect_type") == 0) {
			json_int_t t = json_integer_value(v);

			if (!json_is_integer(v) || (t != 301 && t != 302 && t != 307 && t != 308))
				return links_fail(err, 400, "invalid_field", "redirect_type",
				    "redirect_type must be 301, 302, 307 or 308");
			snprintf(f->redirect_type, sizeof(f->redirect_type), "%d", (int)t);
			f->has_redirect = 1;
		} else if (strcmp(key, "tags") == 0) {
			if (parse_tags(v, &f->tags, err) < 0)
				return -1;
			f->has_tags = 1;
		} else if (strcmp(key, "dedupe") == 0) {
			if (parse_bool(v, key, &f->dedupe, NULL, err) < 0)
				return -1;
		} else if (strcmp(key, "disabled") == 0) {
			if (parse_bool(v, key, &f->disabled, &f->has_disabled, err) < 0)
				return -1;
		} else if (strcmp(key, "forward_query") == 0) {
			if (parse_bool(v, key, &f->forward_query, &f->has_forward, err) < 0)
				return -1;
		}
	}
	if (!is_patch && f->url == NULL)
		return links_fail(err, 400, "missing_field", "url", "url is required");
	if (f->alias != NULL && (f->strategy >= 0 || f->length > 0))
		return links_fail(err, 400, "invalid_field", f->strategy >= 0 ? "strategy" : "length",
		    "an alias cannot be combined with strategy or length");
	return 0;
}

/* ---------------------------------------------------------- caching */

/* Redis keys: lp:link:<code> the cached record, lp:md5code the URL-MD5 to
 * code map, lp:fence:<code> set for FENCE_S seconds by an edit before its
 * UPDATE and again after its commit. While a fence stands no record of its code is written: a load
 * that read the row before the edit committed would otherwise put the old
 * record back after the edit's DEL, to be served for cache_ttl_s. */
#define FENCE_S 60

static const char CACHE_LUA[] =
    "if redis.call('EXISTS', KEYS[2]) == 1 then return 0 end "
    "redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[2]) "
    "redis.call('HSET', KEYS[3], ARGV[3], ARGV[4]) return 1";

void
links_cache_argv(const char *code, const char *json, const char *ttl, const char *md5,
                 char keys[2][96], const char *argv[LINKS_CACHE_ARGC],
                 size_t lens[LINKS_CACHE_ARGC])
{
	snprintf(keys[0], sizeof(keys[0]), "lp:link:%.64s", code);
	snprintf(keys[1], sizeof(keys[1]), "lp:fence:%.64s", code);
	argv[0] = "EVAL";
	argv[1] = CACHE_LUA;
	argv[2] = "3";
	argv[3] = keys[0];
	argv[4] = keys[1];
	argv[5] = "lp:md5code";
	argv[6] = json;
	argv[7] = ttl;
	argv[8] = md5;
	argv[9] = code;
	for (int i = 0; i < LINKS_CACHE_ARGC; i++)
		lens[i] = strlen(argv[i]);
}

/* Fences a code for ARGV[1] seconds and drops its record, and its MD5 map
 * entry when ARGV[2] names one: before an edit's UPDATE (no entry), and
 * again after its commit (links_invalidate), as the first fence may have
 * run out while the UPDATE waited on a row lock and a load that read the
 * old row before the commit may write any time after it. */
static const char FENCE_LUA[] =
    "redis.call('SET', KEYS[1], '1', 'EX', ARGV[1]) redis.call('DEL', KEYS[2]) "
    "if ARGV[2] ~= '' then redis.call('HDEL', KEYS[3], ARGV[2]) end return 1";

static redisReply *
fence(struct links *L, const char *code, const char *md5)
{
	return kv_cmd(L->kv, "EVAL %s 3 lp:fence:%s lp:link:%s lp:md5code %d %s", FENCE_LUA,
	    code, code, FENCE_S, md5 != NULL ? md5 : "");
}

void
links_cache(struct links *L, json_t *link)
{
	char *s = json_dumps(link, JSON_COMPACT), ttl[16], keys[2][96];
	const char *code = json_string_value(json_object_get(link, "code"));
	const char *md5 = json_string_value(json_object_get(link, "long_url_md5"));
	const char *argv[LINKS_CACHE_ARGC], *const *av = argv;
	size_t lens[LINKS_CACHE_ARGC];
	const size_t *lp = lens;
	int argc = LINKS_CACHE_ARGC;
	redisReply *r;

	if (s != NULL && code != NULL && md5 != NULL && kv_up(L->kv)) {
		snprintf(ttl, sizeof(ttl), "%d", L->cache_ttl_s);
		links_cache_argv(code, s, ttl, md5, keys, argv, lens);
		if (kv_pipeline(L->kv, 1, &argc, &av, &lp, &r) == 0)
			freeReplyObject(r);
	}
	free(s);
}

/* Before an edit of code: fences it and drops its record. 0, or -1 with err
 * (503) when Redis is configured and cannot be reached: the edit is refused
 * rather than leave the old record cached for cache_ttl_s. */
static int
links_fence(struct links *L, const char *code, struct links_err *err)
{
	redisReply *r;

	if (!kv_enabled(L->kv))
		return 0;
	if ((r = fence(L, code, NULL)) == NULL)
		return links_fail(err, 503, "cache_unavailable", NULL,
		    "the link cache (Redis) is unavailable: try again");
	freeReplyObject(r);
	return 0;
}

void
links_invalidate(struct links *L, const char *code, const char *md5)
{
	redisReply *r;

	if ((r = fence(L, code, md5)) != NULL)
		freeReplyObject(r);
}

int
links_fields_dedupe(const struct fields *f)
{
	/* null (none) asks for nothing the existing link lacks */
	return f->dedupe && !(f->has_expires && f->expires_at != NULL) &&
	    !(f->has_valid && f->valid_since != NULL) && !(f->has_max && f->max_visits[0]) &&
	    !(f->has_tags && strcmp(f->tags, "{}") != 0) && !f->forward_query;
}

/* A link eligible for dedupe: same target, live, no per-link limits, no
 * tags (a tagged link returned to another request would count that
 * request's visits in the tag's reports), not forwarding query strings. */
int
links_dedupable(json_t *link, const char *url, const char *redirect_type)
{
	return link != NULL &&
	    strcmp(json_string_value(json_object_get(link, "long_url")), url) == 0 &&
	    !json_is_true(json_object_get(link, "deleted")) &&
	    !json_is_true(json_object_get(link, "disabled")) &&
	    json_is_null(json_object_get(link, "expires_at")) &&
	    json_is_null(json_object_get(link, "valid_since")) &&
	    json_is_null(json_object_get(link, "max_visits")) &&
	    json_array_size(json_object_get(link, "tags")) == 0 &&
	    /* false, not absent: a copy written by a redirector older than
	     * 0020 says nothing about it (PostgreSQL decides then) */
	    json_is_false(json_object_get(link, "forward_query")) &&
	    json_integer_value(json_object_get(link, "redirect_type")) == atoi(redirect_type) &&
	    strcmp(json_string_value(json_object_get(link, "strategy")), "alias") != 0;
}

/* Finds a live link for the same URL: Redis MD5 map first, then PostgreSQL. */
static int
find_existing(struct links *L, PGconn *c, const char *url, const char *md5,
              const char *redirect_type, json_t **out, char *errstr, size_t errstr_size)
{
	redisReply *r = kv_cmd(L->kv, "HGET lp:md5code %s", md5);
	const char *params[3] = { md5, url, redirect_type };
	PGresult *res;

	*out = NULL;
	if (r != NULL && r->type == REDIS_REPLY_STRING) {
		redisReply *lr = kv_cmd(L->kv, "GET lp:link:%s", r->str);

		if (lr != NULL && lr->type == REDIS_REPLY_STRING) {
			json_t *link = json_loadb(lr->str, lr->len, 0, NULL);

			if (links_dedupable(link, url, redirect_type))
				*out = link;
			else
				json_decref(link);
		}
		if (lr != NULL)
			freeReplyObject(lr);
	}
	if (r != NULL)
		freeReplyObject(r);
	if (*out != NULL)
		return 0;
	res = pgpool_exec(c, "SELECT " LINK_COLS " FROM url_link l WHERE l.long_url_md5 = $1 "
	    "AND l.long_url = $2 AND " LINKS_DEDUPABLE_SQL " AND l.redirect_type = $3::smallint "
	    "ORDER BY l.id LIMIT 1", 3, params, NULL, errstr, errstr_size);
	if (res == NULL)
		return -1;
	if (PQntuples(res) == 1) {
		*out = row_json(res, 0);
		links_cache(L, *out);
	}
	PQclear(res);
	return 0;
}

/* ------------------------------------------------------------ create */

/* Inserts url_link for the code chosen by codesql (one row with a column
 * named code, from parameters $11 and up). Parameters $1..$10 are the link
 * fields, forward_query (a boolean, not a parameter: no client text) the
 * last. Returns 1 created, 0 when the code was taken, -1 error. */
static int
insert_link(PGconn *c, const char *codesql, const char **params, int nparams, int forward_query,
            json_t **out, char *errstr, size_t errstr_size)
{
	char sql[4096], state[6];
	PGresult *r;

	snprintf(sql, sizeof(sql),
	    "WITH c AS (%s), ins AS (INSERT INTO url_link (code, short_url, long_url, long_url_md5, "
	    "strategy, redirect_type, valid_since, expires_at, max_visits, tags, creator, updater, "
	    "forward_query) "
	    "SELECT c.code, $1 || '/' || c.code, $2, $3, $4::smallint, $5::smallint, "
	    "$6::timestamptz, $7::timestamptz, $8::bigint, coalesce($9::text[], '{}'), "
	    "nullif($10, '0')::bigint, nullif($10, '0')::bigint, %s FROM c RETURNING *) "
	    "SELECT " LINK_COLS_NEW " FROM ins l", codesql, forward_query ? "true" : "false");
	r = pgpool_exec(c, sql, nparams, params, state, errstr, errstr_size);
	if (r == NULL)
		return strcmp(state, "23505") == 0 ? 0 : -1;
	if (PQntuples(r) == 0) {
		PQclear(r);
		return 0;
	}
	*out = row_json(r, 0);
	PQclear(r);
	return 1;
}

/* Marks a pooled code unusable (it clashes with an alias or was claimed). */
static void
invalidate_code(PGconn *c, const char *code)
{
	const char *p1[1] = { code };
	char errstr[256];
	PGresult *r = pgpool_exec(c, "UPDATE unique_code SET status = -1, update_time = now() "
	    "WHERE code = $1 AND status IN (0, 2) AND EXISTS (SELECT 1 FROM url_link WHERE code = $1)",
	    1, p1, NULL, errstr, sizeof(errstr));

	PQclear(r);
}

/* The code step of insert_link for a code nothing else needs to claim: an
 * alias, or a pooled code (status 2, 0012). url_link's unique constraint on
 * code decides. */
#define CODE_AS_GIVEN "SELECT $11::text AS code"

/* Chooses the next candidate code for strategy; sets *codesql and *nparams.
 * Returns 1 ready, 0 skip this round (Bloom filter or reserved), -1 error. */
struct attempt {
	char code[CODES_ALIAS_MAX + 1];
	char cands[CODES_HASH_CANDIDATES][CODES_GEN_SIZE];
	char len_s[4], type_s[4];
	int cand, salt, from_pool, pg_pool_empty;
};

static int
next_code(struct links *L, PGconn *c, enum links_strategy strategy, const struct fields *f,
          int length, struct attempt *a, const char **codesql, int *nparams,
          struct links_err *err)
{
	char errstr[512];

	*codesql = "INSERT INTO unique_code (code, status, type) VALUES ($11, 1, $12::smallint) "
	    "ON CONFLICT (code) DO NOTHING RETURNING code";
	*nparams = 12;
	a->from_pool = 0;
	snprintf(a->len_s, sizeof(a->len_s), "%d", length);
	switch (strategy) {
	case LINKS_ALIAS:
		snprintf(a->code, sizeof(a->code), "%s", f->alias);
		*codesql = CODE_AS_GIVEN;
		*nparams = 11;
		return 1;
	case LINKS_RANDOM:
		snprintf(a->type_s, sizeof(a->type_s), "0");
		if (L->pool != NULL && length == pool_length(L->pool) && !a->pg_pool_empty) {
			if (pool_take(L->pool, a->code)) {
				a->from_pool = 1;
				/* Pooled (status 2): url_link's unique
				 * constraint on code is the claim. */
				*codesql = CODE_AS_GIVEN;
				*nparams = 11;
			} else {
				/* Redis down or empty: claim from PostgreSQL. */
				memcpy(a->code, a->len_s, sizeof(a->len_s));
				a->from_pool = 2;
				*codesql = "UPDATE unique_code SET status = 1, update_time = now() "
				    "WHERE id = (SELECT id FROM unique_code WHERE status = 0 AND type = 0 "
				    "AND length(code) = $11::int ORDER BY id LIMIT 1 "
				    "FOR UPDATE SKIP LOCKED) RETURNING code";
				*nparams = 11;
			}
			return 1;
		}
		if (codes_random(length, a->code, errstr, sizeof(errstr)) < 0)
			return links_fail(err, 503, "internal", NULL, "%s", errstr);
		break;
	case LINKS_HASH:
		snprintf(a->type_s, sizeof(a->type_s), "2");
		if (a->cand == 0 || a->cand == CODES_HASH_CANDIDATES) {
			codes_hash_candidates(f->url, strlen(f->url), length, a->salt++, a->cands);
			a->cand = 0;
		}
		memcpy(a->code, a->cands[a->cand], sizeof(a->cands[0]));
		a->cand++;
		if (L->bloom != NULL && bloom_maybe(L->bloom, a->code, strlen(a->code)))
			return 0;
		break;
	case LINKS_SEQUENCE: {
		PGresult *sr = pgpool_exec(c, "SELECT nextval('url_link_code_seq')", 0, NULL, NULL,
		    errstr, sizeof(errstr));
		unsigned long long ctr;

		if (sr == NULL)
			return links_db_fail(err, errstr);
		ctr = strtoull(PQgetvalue(sr, 0, 0), NULL, 10);
		PQclear(sr);
		snprintf(a->type_s, sizeof(a->type_s), "1");
		if (codes_seq_encode(&L->seqkey, ctr, length, a->code, errstr, sizeof(errstr)) < 0)
			return links_fail(err, 409, "code_space_exhausted", "length",
			    "no more sequence codes of length %d", length);
		break;
	}
	}
	return codes_is_reserved(a->code) ? 0 : 1;
}

enum links_strategy
links_strategy_of(const struct links *L, const struct fields *f)
{
	return f->alias ? LINKS_ALIAS : f->strategy >= 0 ? (enum links_strategy)f->strategy :
	    L->default_strategy;
}

int
links_length_of(const struct links *L, const struct fields *f)
{
	return f->length ? f->length : L->default_length;
}

struct links_pending {
	struct links *L;
	struct fields f;
	struct linkbatch_item it;  /* its rc, out (owned until taken), created
	                            * and err are the result, queued or not */
};

void
links_set_offload(struct links *L, struct workq *q)
{
	L->offload = q;
}

/* On a thread of L->offload: a create the batches do not take. p may be
 * freed once done ran. */
static void
create_job(void *arg)
{
	struct links_pending *p = arg;

	p->it.rc = links_create_fields(p->L, &p->f, p->it.key_id, &p->it.out, &p->it.created,
	    &p->it.err);
	p->it.done(p->it.done_arg);
}

struct links_pending *
links_create_start(struct links *L, json_t *req, long long key_id, void (*done)(void *arg),
                   void *arg, int *queued)
{
	struct links_pending *p = calloc(1, sizeof(*p));

	*queued = 0;
	if (p == NULL)
		return NULL;
	if (links_parse_fields(L, req, 0, &p->f, &p->it.err) < 0) {
		p->it.rc = -1;
		return p;
	}
	if (!p->f.has_redirect)
		snprintf(p->f.redirect_type, sizeof(p->f.redirect_type), "302");
	if (L->batch == NULL || !linkbatch_eligible(L, &p->f)) {
		p->L = L;
		p->it.key_id = key_id;
		p->it.done = done;
		p->it.done_arg = arg;
		if (done != NULL && L->offload != NULL &&
		    workq_submit(L->offload, create_job, p) == 0) {
			*queued = 1;
			return p;
		}
		p->it.rc = links_create_fields(L, &p->f, key_id, &p->it.out, &p->it.created,
		    &p->it.err);
		return p;
	}
	p->it.f = &p->f;
	p->it.key_id = key_id;
	if (done == NULL) {
		linkbatch_wait(L->batch, &p->it);
		return p;
	}
	p->it.done = done;
	p->it.done_arg = arg;
	*queued = 1;
	linkbatch_enqueue(L->batch, &p->it);
	return p;
}

int
links_pending_result(struct links_pending *p, json_t **out, int *created, struct links_err *err)
{
	*out = p->it.out;
	*created = p->it.created;
	if (p->it.rc < 0)
		*err = p->it.err;
	p->it.out = NULL;
	return p->it.rc;
}

void
links_pending_free(struct links_pending *p)
{
	if (p == NULL)
		return;
	json_decref(p->it.out);
	free(p->f.tags);
	free(p);
}

void
links_create_bulk(struct links *L, json_t *items, long long key_id, struct links_result *res)
{
	size_t n = json_array_size(items), nb = 0, i;
	struct fields *f = calloc(n + 1, sizeof(*f));
	struct linkbatch_item *bi = calloc(n + 1, sizeof(*bi));
	struct linkbatch_item **bp = calloc(n + 1, sizeof(*bp));
	size_t *at = calloc(n + 1, sizeof(*at));
	json_t *item;

	memset(res, 0, n * sizeof(*res));
	if (f == NULL || bi == NULL || bp == NULL || at == NULL) {
		for (i = 0; i < n; i++) {
			res[i].rc = -1;
			links_fail(&res[i].err, 503, "internal", NULL, "out of memory");
		}
		goto out;
	}
	json_array_foreach(items, i, item) {
		if (links_parse_fields(L, item, 0, &f[i], &res[i].err) < 0) {
			res[i].rc = -1;
			continue;
		}
		if (!f[i].has_redirect)
			snprintf(f[i].redirect_type, sizeof(f[i].redirect_type), "302");
		if (linkbatch_eligible(L, &f[i])) {
			bi[nb].f = &f[i];
			bi[nb].key_id = key_id;
			bp[nb] = &bi[nb];
			at[nb++] = i;
		} else {
			res[i].rc = links_create_fields(L, &f[i], key_id, &res[i].link, &res[i].created,
			    &res[i].err);
		}
	}
	linkbatch_run(L, bp, nb);
	for (size_t k = 0; k < nb; k++) {
		struct links_result *r = &res[at[k]];

		r->rc = bi[k].rc;
		r->link = bi[k].out;
		r->created = bi[k].created;
		if (r->rc < 0)
			r->err = bi[k].err;
	}
out:
	for (i = 0; f != NULL && i < n; i++)
		free(f[i].tags);
	free(f);
	free(bi);
	free(bp);
	free(at);
}

int
links_create_fields(struct links *L, struct fields *fp, long long key_id, json_t **out,
                    int *created, struct links_err *err)
{
	struct fields f = *fp;
	struct attempt a;
	char md5[33], strategy_s[4], key_s[24], errstr[512];
	const char *params[12];
	enum links_strategy strategy = links_strategy_of(L, fp);
	int length = links_length_of(L, fp), rc = -1;
	PGconn *c = NULL;

	*out = NULL;
	*created = 0;
	memset(&a, 0, sizeof(a));
	digest_md5_hex(f.url, strlen(f.url), md5);
	if ((c = pgpool_get(L->pg, 3000, errstr, sizeof(errstr))) == NULL) {
		links_db_fail(err, errstr);
		goto done;
	}
	if (strategy != LINKS_ALIAS && links_fields_dedupe(&f)) {
		if (find_existing(L, c, f.url, md5, f.redirect_type, out, errstr, sizeof(errstr)) < 0) {
			links_db_fail(err, errstr);
			goto done;
		}
		if (*out != NULL) {
			rc = 0;
			goto done;
		}
	}
	snprintf(strategy_s, sizeof(strategy_s), "%d", (int)strategy);
	snprintf(key_s, sizeof(key_s), "%lld", key_id);
	params[0] = L->base_url;
	params[1] = f.url;
	params[2] = md5;
	params[3] = strategy_s;
	params[4] = f.redirect_type;
	params[5] = f.valid_since;
	params[6] = f.expires_at;
	params[7] = f.max_visits[0] ? f.max_visits : NULL;
	params[8] = f.tags;
	params[9] = key_s;
	params[10] = a.code;
	params[11] = a.type_s;

	for (int attempt = 0, seen = 0; attempt < CREATE_TRIES; attempt++) {
		const char *codesql;
		int nparams, r;

		if ((r = next_code(L, c, strategy, &f, length, &a, &codesql, &nparams, err)) < 0)
			goto done;
		if (r == 0 && strategy == LINKS_HASH) { /* skipped without a query */
			if (++seen >= HASH_CANDIDATES_MAX) {
				links_fail(err, 409, "code_space_exhausted", "strategy", "the first %d "
				    "hash codes of this URL at length %d are taken; use another "
				    "strategy or length", HASH_CANDIDATES_MAX, length);
				goto done;
			}
			attempt--;
			continue;
		}
		if (r == 0)
			continue;
		if (a.from_pool == 2)
			params[10] = a.len_s;
		else
			params[10] = a.code;
		r = insert_link(c, codesql, params, nparams, f.forward_query, out, errstr,
		    sizeof(errstr));
		if (r < 0) {
			/* A popped code is still pooled (status 2) in PostgreSQL:
			 * back to the set, or it would never be handed out. (Had
			 * the INSERT committed after all, the next taker's unique
			 * violation invalidates it.) */
			if (a.from_pool == 1)
				pool_give_back(L->pool, a.code);
			links_db_fail(err, errstr);
			goto done;
		}
		if (r == 1) {
			const char *got = json_string_value(json_object_get(*out, "code"));

			if (L->bloom != NULL)
				bloom_add(L->bloom, got, strlen(got));
			if (strategy == LINKS_ALIAS)
				invalidate_code(c, got);
			*created = 1;
			rc = 0;
			links_cache(L, *out);
			goto done;
		}
		if (strategy == LINKS_ALIAS) {
			links_fail(err, 409, "alias_taken", "alias", "alias \"%s\" is already in use", f.alias);
			goto done;
		}
		if (strategy == LINKS_HASH && L->bloom != NULL) /* made elsewhere: skipped from now on */
			bloom_add(L->bloom, a.code, strlen(a.code));
		if (a.from_pool == 1)
			invalidate_code(c, a.code);
		else if (a.from_pool == 2)
			a.pg_pool_empty = 1; /* nothing unused in PostgreSQL: generate inline */
	}
	links_fail(err, 503, "code_space_busy", NULL, "could not find a free code after %d tries",
	    CREATE_TRIES);
done:
	if (c != NULL)
		pgpool_put(L->pg, c);
	return rc;
}

/* ------------------------------------------------------ get / patch */

static int
fetch(struct links *L, PGconn *c, const char *code, json_t **out, struct links_err *err)
{
	char errstr[512];
	const char *params[1] = { code };
	PGresult *r = pgpool_exec_timeout(c, "SELECT " LINK_COLS " FROM url_link l WHERE l.code = $1",
	    1, params, L->lookup_timeout_ms, NULL, errstr, sizeof(errstr));

	if (r == NULL)
		return links_db_fail(err, errstr);
	if (PQntuples(r) == 0) {
		PQclear(r);
		return links_fail(err, 404, "not_found", NULL, "no link with code \"%s\"", code);
	}
	*out = row_json(r, 0);
	PQclear(r);
	return 0;
}

int
links_get(struct links *L, const char *code, json_t **out, struct links_err *err)
{
	char errstr[512];
	PGconn *c;
	int rc;

	if (!codes_valid_alias(code)) /* cannot exist; PostgreSQL would refuse bad UTF-8 */
		return links_fail(err, 404, "not_found", NULL, "no link with code \"%s\"", code);
	if ((c = pgpool_get(L->pg, 3000, errstr, sizeof(errstr))) == NULL)
		return links_db_fail(err, errstr);
	rc = fetch(L, c, code, out, err);
	pgpool_put(L->pg, c);
	return rc;
}

int
links_patch(struct links *L, const char *code, json_t *req, long long key_id, json_t **out,
            struct links_err *err)
{
	struct fields f;
	char errstr[512], key_s[24], md5[33] = "";
	const char *params[16];
	PGconn *c = NULL;
	PGresult *r;
	int rc = -1;

	*out = NULL;
	if (!codes_valid_alias(code))
		return links_fail(err, 404, "not_found", NULL, "no live link with code \"%s\"", code);
	if (links_parse_fields(L, req, 1, &f, err) < 0)
		goto done;
	if (f.has_url)
		digest_md5_hex(f.url, strlen(f.url), md5);
	snprintf(key_s, sizeof(key_s), "%lld", key_id);
	params[0] = code;
	params[1] = f.has_url ? "t" : "f";
	params[2] = f.url;
	params[3] = md5;
	params[4] = f.has_expires ? "t" : "f";
	params[5] = f.expires_at;
	params[6] = f.has_valid ? "t" : "f";
	params[7] = f.valid_since;
	params[8] = f.has_max ? "t" : "f";
	params[9] = f.max_visits[0] ? f.max_visits : NULL;
	params[10] = f.has_redirect ? f.redirect_type : NULL;
	params[11] = f.has_disabled ? (f.disabled ? "t" : "f") : NULL;
	params[12] = f.has_tags ? "t" : "f";
	params[13] = f.tags;
	params[14] = key_s;
	params[15] = f.has_forward ? (f.forward_query ? "t" : "f") : NULL;
	if (links_fence(L, code, err) < 0)
		goto done;
	if ((c = pgpool_get(L->pg, 3000, errstr, sizeof(errstr))) == NULL) {
		links_db_fail(err, errstr);
		goto done;
	}
	r = pgpool_exec_timeout(c,
	    "WITH old AS (SELECT long_url_md5 FROM url_link WHERE code = $1 AND deleted = 0), "
	    "l AS (UPDATE url_link SET "
	    "long_url = CASE WHEN $2::bool THEN $3 ELSE long_url END, "
	    "long_url_md5 = CASE WHEN $2::bool THEN $4 ELSE long_url_md5 END, "
	    "expires_at = CASE WHEN $5::bool THEN $6::timestamptz ELSE expires_at END, "
	    "valid_since = CASE WHEN $7::bool THEN $8::timestamptz ELSE valid_since END, "
	    "max_visits = CASE WHEN $9::bool THEN $10::bigint ELSE max_visits END, "
	    "redirect_type = coalesce($11::smallint, redirect_type), "
	    "disabled = coalesce($12::bool, disabled), "
	    "forward_query = coalesce($16::bool, forward_query), "
	    "tags = CASE WHEN $13::bool THEN $14::text[] ELSE tags END, "
	    "updater = nullif($15, '0')::bigint, update_time = now() "
	    "WHERE code = $1 AND deleted = 0 RETURNING *) "
	    "SELECT " LINK_COLS ", (SELECT long_url_md5 FROM old) FROM l",
	    16, params, L->lookup_timeout_ms, NULL, errstr, sizeof(errstr));
	if (r == NULL) {
		links_db_fail(err, errstr);
		goto done;
	}
	if (PQntuples(r) == 0) {
		PQclear(r);
		links_fail(err, 404, "not_found", NULL, "no live link with code \"%s\"", code);
		goto done;
	}
	*out = row_json(r, 0);
	links_invalidate(L, code, PQgetvalue(r, 0, LINK_NCOLS));
	PQclear(r);
	rc = 0;
done:
	if (c != NULL)
		pgpool_put(L->pg, c);
	free(f.tags);
	return rc;
}

int
links_delete(struct links *L, const char *code, long long key_id, struct links_err *err)
{
	char errstr[512], key_s[24];
	const char *params[2] = { code, key_s };
	PGconn *c;
	PGresult *r;

	if (!codes_valid_alias(code))
		return links_fail(err, 404, "not_found", NULL, "no live link with code \"%s\"", code);
	if (links_fence(L, code, err) < 0)
		return -1;
	if ((c = pgpool_get(L->pg, 3000, errstr, sizeof(errstr))) == NULL)
		return links_db_fail(err, errstr);
	snprintf(key_s, sizeof(key_s), "%lld", key_id);
	r = pgpool_exec_timeout(c, "UPDATE url_link SET deleted = 1, update_time = now(), "
	    "updater = nullif($2, '0')::bigint WHERE code = $1 AND deleted = 0 RETURNING long_url_md5",
	    2, params, L->lookup_timeout_ms, NULL, errstr, sizeof(errstr));
	pgpool_put(L->pg, c);
	if (r == NULL)
		return links_db_fail(err, errstr);
	if (PQntuples(r) == 0) {
		PQclear(r);
		return links_fail(err, 404, "not_found", NULL, "no live link with code \"%s\"", code);
	}
	links_invalidate(L, code, PQgetvalue(r, 0, 0));
	PQclear(r);
	return 0;
}

int
links_list(struct links *L, const char *tag, long long limit, const char *cursor, json_t **out,
           struct links_err *err)
{
	char errstr[512], lim[24];
	const char *params[3];
	PGconn *c;
	PGresult *r;
	json_t *arr;
	int n;

	if (cursor != NULL && *cursor) {
		char *end;

		errno = 0;
		(void)strtoll(cursor, &end, 10);
		/* a link id: digits only, within bigint */
		if (!isdigit((unsigned char)*cursor) || *end != '\0' || errno == ERANGE)
			return links_fail(err, 400, "invalid_field", "cursor",
			    "cursor must be a next_cursor value from a previous page");
	}
	/* tags are 1-64 bytes of UTF-8 text (parse_tags) */
	if (tag != NULL && strlen(tag) > MAX_TAG_LEN)
		return links_fail(err, 400, "invalid_field", "tag", "tag must be at most %d bytes",
		    MAX_TAG_LEN);
	if (tag != NULL && !errstr_utf8_valid(tag))
		return links_fail(err, 400, "invalid_field", "tag", "tag must be UTF-8 text");
	snprintf(lim, sizeof(lim), "%lld", limit + 1);
	params[0] = tag && *tag ? tag : NULL;
	params[1] = cursor && *cursor ? cursor : NULL;
	params[2] = lim;
	if ((c = pgpool_get(L->pg, 3000, errstr, sizeof(errstr))) == NULL)
		return links_db_fail(err, errstr);
	r = pgpool_exec_timeout(c, "SELECT " LINK_COLS " FROM url_link l WHERE l.deleted = 0 "
	    "AND ($1::text IS NULL OR (l.tags @> ARRAY[$1::text] AND l.tags <> '{}')) "
	    "AND ($2::bigint IS NULL OR l.id < $2::bigint) ORDER BY l.id DESC LIMIT $3::int",
	    3, params, L->lookup_timeout_ms, NULL, errstr, sizeof(errstr));
	pgpool_put(L->pg, c);
	if (r == NULL)
		return links_db_fail(err, errstr);
	n = PQntuples(r);
	arr = json_array();
	for (int i = 0; i < n && i < limit; i++)
		json_array_append_new(arr, row_json(r, i));
	*out = json_pack("{s:o, s:o}", "links", arr, "next_cursor",
	    n > limit ? json_string(PQgetvalue(r, (int)limit - 1, 0)) : json_null());
	PQclear(r);
	return 0;
}

int
links_resolve(struct links *L, json_t *codes, json_t **out, struct links_err *err)
{
	size_t i, cap = 3;
	json_t *v, *res;
	char *arr, *w, errstr[512];
	const char *params[1];
	PGconn *c;
	PGresult *r;

	json_array_foreach(codes, i, v) {
		const char *s = json_string_value(v);

		if (s == NULL)
			return links_fail(err, 400, "invalid_field", "codes", "codes[%zu] must be a string", i);
		if (!codes_valid_alias(s))
			continue; /* cannot exist: resolves to null */
		cap += strlen(s) + 3;
	}
	if ((arr = malloc(cap)) == NULL)
		return links_fail(err, 503, "internal", NULL, "out of memory");
	w = arr;
	*w++ = '{';
	json_array_foreach(codes, i, v) {
		const char *s = json_string_value(v);
		size_t n = strlen(s);

		if (!codes_valid_alias(s))
			continue;
		if (w > arr + 1)
			*w++ = ',';
		/* quoted: an alias may be "null", which unquoted is a NULL element
		 * (aliases hold no '"' or '\\' to escape) */
		*w++ = '"';
		memcpy(w, s, n);
		w += n;
		*w++ = '"';
	}
	*w++ = '}';
	*w = '\0';
	params[0] = arr;
	if ((c = pgpool_get(L->pg, 3000, errstr, sizeof(errstr))) == NULL) {
		free(arr);
		return links_db_fail(err, errstr);
	}
	r = pgpool_exec_timeout(c, "SELECT code, long_url FROM url_link WHERE code = ANY($1::text[]) "
	    "AND deleted = 0", 1, params, L->lookup_timeout_ms, NULL, errstr, sizeof(errstr));
	pgpool_put(L->pg, c);
	free(arr);
	if (r == NULL)
		return links_db_fail(err, errstr);
	res = json_array();
	json_array_foreach(codes, i, v) {
		json_t *found = json_null();

		for (int k = 0; k < PQntuples(r); k++)
			if (strcmp(PQgetvalue(r, k, 0), json_string_value(v)) == 0) {
				found = json_string(PQgetvalue(r, k, 1));
				break;
			}
		json_array_append_new(res, found);
	}
	PQclear(r);
	*out = res;
	return 0;
}
