/* enrich.h - turns a validated visit event into the derived visit_record
 * columns: GeoIP (geo.h), user agent (ua.h), client_id (digest.h), referer
 * host (libcurl's URL parser) and primary language of Accept-Language. */
#ifndef LP_INGEST_ENRICH_H
#define LP_INGEST_ENRICH_H

#include <stddef.h>

#include "digest.h"
#include "event.h"
#include "geo.h"
#include "ua.h"

struct enricher;

/* The derived columns of one event; a plain value the caller owns. Empty
 * strings mean NULL in visit_record. */
struct enrich_row {
	char client_id[DIGEST_SHA1_HEX_SIZE];
	struct geo_result geo;
	struct ua_result ua;
	char browser_version[4 * UA_VERSION_SIZE]; /* "major.minor.patch", parts present */
	char os_version[4 * UA_VERSION_SIZE];
	char referer_host[256];
	char language[36];
};

/* Opens the GeoIP databases (isp_path may be NULL or "") with a cache of
 * geo_cache_records decoded records (geo.h; 0: none) and compiles the
 * uap-core regexes with a result cache of ua_cache_entries. Returns an
 * enricher the caller owns (enrich_free), or NULL with errstr set. Not
 * thread-safe: one thread uses an enricher. */
struct enricher *enrich_new(const char *city_path, const char *isp_path, const char *locale,
                            const char *uap_regexes, size_t ua_cache_entries,
                            size_t geo_cache_records, char *errstr, size_t errstr_size);
void enrich_free(struct enricher *e);

/* Fills *out (caller-owned) for ev. Returns 0, or -1 when the GeoIP database
 * reports corruption or libcrypto fails (errstr set). */
int enrich_event(struct enricher *e, const struct event *ev, struct enrich_row *out,
                 char *errstr, size_t errstr_size);

/* Lower-case host of a URL ("https://News.Example.com:8443/x" ->
 * "news.example.com") into out: international names in punycode
 * ("bücher.example" -> "xn--bcher-kva.example"), no trailing dot; "" when url
 * is NULL or has no parsable host, or the host is not UTF-8. Uses e's URL
 * handle (libcurl). */
void enrich_referer_host(struct enricher *e, const char *url, char *out, size_t out_size);

/* Primary language tag of an Accept-Language header: the tag with the
 * highest q (first on ties; "*", q=0 and ranges that are not RFC 4647's
 * ignored), lower case, '_' written '-' ("da, en-GB;q=0.8" -> "da";
 * "en;q=0.5, zh-CN" -> "zh-cn"; "en_US" -> "en-us"). "" when none. */
void enrich_language(const char *accept_language, char *out, size_t out_size);

/* Lookups answered by the GeoIP record cache, and the others (0 and 0
 * without a cache). */
void enrich_geo_cache_stats(const struct enricher *e, unsigned long long *hits,
                            unsigned long long *misses);

/* Cache counters of the user-agent parser. */
void enrich_ua_stats(struct enricher *e, struct ua_stats *st);

#endif
