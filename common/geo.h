/* geo.h - IP address to country / province / city (GeoLite2-City or
 * GeoIP2-City .mmdb) and ISP / ASN (optional GeoLite2-ASN or GeoIP2-ISP
 * .mmdb) through libmaxminddb, with names in a configured locale. */
#ifndef LP_GEO_H
#define LP_GEO_H

#include <stddef.h>

/* Opaque; owns the memory-mapped databases. */
struct geo_db;

/* Result of one lookup, filled by geo_lookup into caller-owned storage.
 * Every string is NUL-terminated UTF-8, "" when unknown, and cut at a
 * character boundary when longer than its array. */
struct geo_result {
	char country_code[3]; /* ISO 3166-1 alpha-2 ("CN"), from country.iso_code */
	char country[64];     /* country.names[locale], else names["en"] */
	char province[96];    /* subdivisions[0].names[locale], else ["en"] */
	char city[96];        /* city.names[locale], else ["en"] */
	char isp[128];        /* ISP database: isp, else organization, else
	                       * autonomous_system_organization */
	char asn_org[128];    /* ISP database: autonomous_system_organization */
	long long asn;        /* autonomous_system_number, -1 when unknown */
	const char *err;      /* when geo_lookup returns -1: static text saying
	                       * why (never freed); NULL otherwise */
	const char *addr_class; /* geo_addr_class of the address, found by the
	                       * same parse (static; NULL: global unicast) */
	unsigned char addr[16]; /* the address as written: addr_len bytes, 4 for
	                       * IPv4, 16 for IPv6 (IPv4-mapped too), 0 when
	                       * ip is not an address (as PostgreSQL's inet reads it) */
	size_t addr_len;
};

/* Opens city_path (required: a City or Country layout database) and, when
 * isp_path is neither NULL nor "", a GeoLite2-ASN or GeoIP2-ISP layout
 * database, both memory-mapped (MMDB_MODE_MMAP). locale is the name language
 * ("en", "zh-CN", ...; NULL or "" means "en") and must be one of the city
 * database's languages. The strings are copied. Returns a handle the caller
 * owns and frees with geo_close, or NULL with errstr set. */
struct geo_db *geo_open(const char *city_path, const char *isp_path,
                        const char *locale, char *errstr, size_t errstr_size);

/* Unmaps the databases and frees db. NULL is a no-op. */
void geo_close(struct geo_db *db);

/* Looks up ip, an IPv4 ("8.8.8.8") or IPv6 ("2001:4860::8888",
 * "::ffff:8.8.8.8") address in text, with no port, brackets, zone or
 * surrounding spaces. Always fills *out (empty strings, asn -1 when unknown).
 * Addresses geo_addr_class calls special, unparsable strings (and NULL), and
 * addresses missing from a database give empty fields and return 0: not an
 * error. Without an ISP database isp/asn_org are "" and asn -1. Returns -1
 * only when a database answers with an error (a corrupt file); out->err then
 * says why and the fields are empty.
 * Thread-safe: any number of threads may call it on one db at once. */
int geo_lookup(const struct geo_db *db, const char *ip, struct geo_result *out);

/* A cache for one thread's lookups (caller-owned: geo_cache_new /
 * geo_cache_free) of decoded data records and of addresses. A MaxMind
 * database stores each distinct record once and points every network with
 * the same data (a city's, an ASN's) at it, so the fields of the records a
 * stream of visits meets are decoded once instead of walking the record's
 * maps per visit; and an address seen again (a visitor's second click, a
 * carrier's NAT) skips the walk down the search tree to its record. Both
 * are direct-mapped: a newer entry replaces an older one in its slot. Not
 * thread-safe. */
struct geo_cache;

/* An empty cache of 'slots' records per database (rounded up to a power of
 * two; ~0.3 KB each) and four times as many addresses (28 bytes each), or
 * NULL when out of memory. */
struct geo_cache *geo_cache_new(size_t slots);
void geo_cache_free(struct geo_cache *c);
/* Lookups answered from the cache and lookups that decoded their record. */
void geo_cache_stats(const struct geo_cache *c, unsigned long long *hits,
                     unsigned long long *misses);

/* geo_lookup through cache c (NULL: none); the same results. A cache must
 * only ever be used with one db. */
int geo_lookup_cached(const struct geo_db *db, struct geo_cache *c, const char *ip,
                      struct geo_result *out);

/* Classifies ip before any lookup. Returns NULL for an address that may have
 * a location (global unicast), else a static string:
 *   "invalid"       not an IPv4/IPv6 address in text (or NULL)
 *   "unspecified"   0.0.0.0/8 ("this network"), ::/128
 *   "loopback"      127.0.0.0/8, ::1/128
 *   "private"       10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16 (RFC 1918),
 *                   100.64.0.0/10 (RFC 6598 shared/CGN), fc00::/7 (ULA)
 *   "link-local"    169.254.0.0/16, fe80::/10
 *   "multicast"     224.0.0.0/4, ff00::/8
 *   "reserved"      192.0.0.0/24 (IETF protocol assignments),
 *                   192.0.2.0/24, 198.51.100.0/24, 203.0.113.0/24,
 *                   2001:db8::/32 (documentation), 198.18.0.0/15
 *                   (benchmarking), 240.0.0.0/4 (incl. 255.255.255.255),
 *                   ::/96 other than :: and ::1 (deprecated IPv4-compatible),
 *                   100::/64 (discard), fec0::/10 (old site-local)
 * An IPv4-mapped IPv6 address (::ffff:a.b.c.d) is classified, and looked up,
 * as its IPv4 address. */
const char *geo_addr_class(const char *ip);

#endif
