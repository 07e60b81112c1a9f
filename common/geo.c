/* geo.c - GeoIP enrichment over libmaxminddb: classifies the address first
 * (special ranges never reach the database), then reads only the fields it
 * needs with MMDB_aget_value from the memory-mapped City and ISP/ASN files,
 * or from a caller's cache of records already decoded. */
#include "geo.h"
#include "errstr.h"
#include "hash.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <maxminddb.h>

#define GEO_LOCALE_MAX 32

struct geo_db {
	MMDB_s city;
	MMDB_s isp;
	int has_isp;
	int locale_is_en;          /* no "en" fallback look-up needed */
	char locale[GEO_LOCALE_MAX];
};

/* A parsed address: IPv4-mapped IPv6 is turned into IPv4. */
struct geo_addr {
	int family; /* AF_INET or AF_INET6 */
	int mapped; /* written as IPv4-mapped IPv6 */
	union {
		struct sockaddr sa;
		struct sockaddr_in sin;
		struct sockaddr_in6 sin6;
	} u;
	unsigned char b[16]; /* address bytes: 4 for AF_INET, 16 for AF_INET6 */
};

/* The fields geo_lookup reads from one City record, and from one ISP record. */
struct geo_city_rec {
	uint32_t key;              /* the record's data offset + 1; 0: empty slot */
	char country_code[3], country[64], province[96], city[96];
};

struct geo_isp_rec {
	uint32_t key;
	long long asn;
	char isp[128], asn_org[128];
};

/* Where one address led in one database: its record, or none. */
struct geo_addr_rec {
	unsigned char b[16];       /* the address bytes (4 used for IPv4) */
	uint8_t used, v6, found;
	uint32_t offset;           /* the record's data offset, when found */
};

#define GEO_ADDR_PER_REC 4     /* address slots per record slot */

struct geo_cache {
	size_t mask;               /* slots - 1 */
	struct geo_city_rec *city; /* owned, mask + 1 */
	struct geo_isp_rec *isp;   /* owned, mask + 1 */
	size_t amask;              /* address slots - 1 */
	struct geo_addr_rec *city_addr, *isp_addr; /* owned, amask + 1 each */
	unsigned long long hits, misses;
};

struct geo_cache *
geo_cache_new(size_t slots)
{
	struct geo_cache *c = calloc(1, sizeof(*c));
	size_t n = 1;

	while (n < slots && n < ((size_t)1 << 24))
		n <<= 1;
	if (c == NULL || (c->city = calloc(n, sizeof(*c->city))) == NULL ||
	    (c->isp = calloc(n, sizeof(*c->isp))) == NULL ||
	    (c->city_addr = calloc(n * GEO_ADDR_PER_REC, sizeof(*c->city_addr))) == NULL ||
	    (c->isp_addr = calloc(n * GEO_ADDR_PER_REC, sizeof(*c->isp_addr))) == NULL) {
		geo_cache_free(c);
		return NULL;
	}
	c->mask = n - 1;
	c->amask = n * GEO_ADDR_PER_REC - 1;
	return c;
}

void
geo_cache_free(struct geo_cache *c)
{
	if (c == NULL)
		return;
	free(c->city);
	free(c->isp);
	free(c->city_addr);
	free(c->isp_addr);
	free(c);
}

void
geo_cache_stats(const struct geo_cache *c, unsigned long long *hits, unsigned long long *misses)
{
	*hits = c ? c->hits : 0;
	*misses = c ? c->misses : 0;
}

/* The slot of a record's data offset. */
static size_t
geo_slot(const struct geo_cache *c, uint32_t offset)
{
	return (size_t)(((uint64_t)offset * 0x9e3779b97f4a7c15ULL) >> 40) & c->mask;
}

static int
geo_parse(const char *ip, struct geo_addr *a)
{
	static const unsigned char mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };

	memset(a, 0, sizeof(*a));
	if (ip == NULL)
		return -1;
	if (inet_pton(AF_INET, ip, &a->u.sin.sin_addr) == 1) {
		a->family = AF_INET;
	} else if (inet_pton(AF_INET6, ip, &a->u.sin6.sin6_addr) == 1) {
		memcpy(a->b, &a->u.sin6.sin6_addr, 16);
		if (memcmp(a->b, mapped, sizeof(mapped)) != 0) {
			a->family = AF_INET6;
			a->u.sin6.sin6_family = AF_INET6;
			return 0;
		}
		memset(&a->u, 0, sizeof(a->u));
		memcpy(&a->u.sin.sin_addr, a->b + 12, 4);
		a->family = AF_INET;
		a->mapped = 1;
	} else {
		return -1;
	}
	a->u.sin.sin_family = AF_INET;
	memcpy(a->b, &a->u.sin.sin_addr, 4);
	return 0;
}

/* 1 when the first bits of addr equal those of net. */
static int
geo_in(const unsigned char *addr, const unsigned char *net, unsigned bits)
{
	unsigned whole = bits / 8, rest = bits % 8;

	if (memcmp(addr, net, whole) != 0)
		return 0;
	if (rest == 0)
		return 1;
	return ((addr[whole] ^ net[whole]) & (0xff << (8 - rest)) & 0xff) == 0;
}

struct geo_range {
	unsigned char net[16];
	unsigned bits;
	const char *class;
};

/* The ranges documented at geo_addr_class in geo.h. */
static const struct geo_range geo_v4_ranges[] = {
	{ { 0 }, 8, "unspecified" },
	{ { 10 }, 8, "private" },
	{ { 100, 64 }, 10, "private" },
	{ { 127 }, 8, "loopback" },
	{ { 169, 254 }, 16, "link-local" },
	{ { 172, 16 }, 12, "private" },
	{ { 192, 0, 0 }, 24, "reserved" },
	{ { 192, 0, 2 }, 24, "reserved" },
	{ { 192, 168 }, 16, "private" },
	{ { 198, 18 }, 15, "reserved" },
	{ { 198, 51, 100 }, 24, "reserved" },
	{ { 203, 0, 113 }, 24, "reserved" },
	{ { 224 }, 4, "multicast" },
	{ { 240 }, 4, "reserved" },
};

static const struct geo_range geo_v6_ranges[] = {
	{ { 0 }, 128, "unspecified" },
	{ { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1 }, 128, "loopback" },
	{ { 0 }, 96, "reserved" },
	{ { 0x01, 0x00 }, 64, "reserved" },
	{ { 0x20, 0x01, 0x0d, 0xb8 }, 32, "reserved" },
	{ { 0xfc }, 7, "private" },
	{ { 0xfe, 0x80 }, 10, "link-local" },
	{ { 0xfe, 0xc0 }, 10, "reserved" },
	{ { 0xff }, 8, "multicast" },
};

static const char *
geo_classify(const struct geo_addr *a)
{
	const struct geo_range *r, *end;

	if (a->family == AF_INET) {
		r = geo_v4_ranges;
		end = r + sizeof(geo_v4_ranges) / sizeof(geo_v4_ranges[0]);
	} else {
		r = geo_v6_ranges;
		end = r + sizeof(geo_v6_ranges) / sizeof(geo_v6_ranges[0]);
	}
	for (; r < end; r++)
		if (geo_in(a->b, r->net, r->bits))
			return r->class;
	return NULL;
}

const char *
geo_addr_class(const char *ip)
{
	struct geo_addr a;

	if (geo_parse(ip, &a) == -1)
		return "invalid";
	return geo_classify(&a);
}

static int
geo_type_has(const MMDB_s *m, const char *const *words)
{
	const char *type = m->metadata.database_type;

	if (type == NULL)
		return 0;
	for (; *words != NULL; words++)
		if (strstr(type, *words) != NULL)
			return 1;
	return 0;
}

/* Opens one database into *m; on failure m holds nothing to close. */
static int
geo_open_one(MMDB_s *m, const char *path, const char *what,
             const char *const *types, char *errstr, size_t errstr_size)
{
	int rc = MMDB_open(path, MMDB_MODE_MMAP, m);

	if (rc != MMDB_SUCCESS) {
		if (rc == MMDB_IO_ERROR)
			errstr_set(errstr, errstr_size, "geo: %s: %s: %s", path,
			    MMDB_strerror(rc), strerror(errno));
		else
			errstr_set(errstr, errstr_size, "geo: %s: %s", path, MMDB_strerror(rc));
		return -1;
	}
	if (!geo_type_has(m, types)) {
		errstr_set(errstr, errstr_size,
		    "geo: %s: database type \"%s\" is not a %s layout", path,
		    m->metadata.database_type ? m->metadata.database_type : "", what);
		MMDB_close(m);
		return -1;
	}
	return 0;
}

static int
geo_has_language(const MMDB_s *m, const char *locale)
{
	size_t i, n = m->metadata.languages.count;

	if (n == 0) /* the file lists none: names are looked up anyway */
		return 1;
	for (i = 0; i < n; i++)
		if (strcmp(m->metadata.languages.names[i], locale) == 0)
			return 1;
	return 0;
}

struct geo_db *
geo_open(const char *city_path, const char *isp_path, const char *locale,
         char *errstr, size_t errstr_size)
{
	static const char *const city_types[] = { "City", "Country", "Enterprise", NULL };
	static const char *const isp_types[] = { "ASN", "ISP", "Enterprise", NULL };
	struct geo_db *db;
	size_t i;

	if (locale == NULL || locale[0] == '\0')
		locale = "en";
	if (city_path == NULL || city_path[0] == '\0') {
		errstr_set(errstr, errstr_size, "geo: no city database path given");
		return NULL;
	}
	if (strlen(locale) >= GEO_LOCALE_MAX) {
		errstr_set(errstr, errstr_size, "geo: locale \"%.40s\" is too long", locale);
		return NULL;
	}
	for (i = 0; locale[i] != '\0'; i++) {
		unsigned char c = (unsigned char)locale[i];

		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
		    (c >= '0' && c <= '9') || c == '-' || c == '_')) {
			errstr_set(errstr, errstr_size,
			    "geo: locale \"%s\": only letters, digits, '-' and '_' allowed",
			    locale);
			return NULL;
		}
	}
	if ((db = calloc(1, sizeof(*db))) == NULL) {
		errstr_set(errstr, errstr_size, "geo: %s", strerror(ENOMEM));
		return NULL;
	}
	memcpy(db->locale, locale, strlen(locale) + 1);
	db->locale_is_en = strcmp(locale, "en") == 0;

	if (geo_open_one(&db->city, city_path, "City", city_types, errstr,
	    errstr_size) == -1) {
		free(db);
		return NULL;
	}
	if (!geo_has_language(&db->city, locale)) {
		char langs[256] = "";
		size_t n = db->city.metadata.languages.count;

		for (i = 0; i < n; i++) {
			size_t used = strlen(langs);

			snprintf(langs + used, sizeof(langs) - used, "%s%s",
			    i ? " " : "", db->city.metadata.languages.names[i]);
		}
		errstr_set(errstr, errstr_size,
		    "geo: %s: locale \"%s\" is not among the database's languages (%s)",
		    city_path, locale, langs);
		MMDB_close(&db->city);
		free(db);
		return NULL;
	}
	if (isp_path != NULL && isp_path[0] != '\0') {
		if (geo_open_one(&db->isp, isp_path, "GeoLite2-ASN or GeoIP2-ISP",
		    isp_types, errstr, errstr_size) == -1) {
			MMDB_close(&db->city);
			free(db);
			return NULL;
		}
		db->has_isp = 1;
	}
	return db;
}

void
geo_close(struct geo_db *db)
{
	if (db == NULL)
		return;
	MMDB_close(&db->city);
	if (db->has_isp)
		MMDB_close(&db->isp);
	free(db);
}

/* Copies a UTF-8 string of len bytes into dst (size bytes, NUL added),
 * cutting before a character that would not fit whole. */
static void
geo_copy(char *dst, size_t size, const char *src, size_t len)
{
	const char *nul;

	if ((nul = memchr(src, '\0', len)) != NULL)
		len = (size_t)(nul - src);
	if (len >= size) {
		len = size - 1;
		while (len > 0 && ((unsigned char)src[len] & 0xc0) == 0x80)
			len--;
	}
	memcpy(dst, src, len);
	dst[len] = '\0';
}

/* Reads the value at path. Returns 1 with *data set when present, 0 when
 * absent (missing key, short array, other shape), -1 on a database error. */
static int
geo_get(MMDB_entry_s *entry, const char *const *path, MMDB_entry_data_s *data,
        const char **err)
{
	int rc = MMDB_aget_value(entry, data, path);

	switch (rc) {
	case MMDB_SUCCESS:
		return data->has_data ? 1 : 0;
	case MMDB_LOOKUP_PATH_DOES_NOT_MATCH_DATA_ERROR:
	case MMDB_INVALID_LOOKUP_PATH_ERROR:
		return 0;
	default:
		*err = MMDB_strerror(rc);
		return -1;
	}
}

/* Copies the UTF-8 string at path into dst. Returns 1, 0 (absent or not a
 * string) or -1 as geo_get. */
static int
geo_get_str(MMDB_entry_s *entry, const char *const *path, char *dst,
            size_t size, const char **err)
{
	MMDB_entry_data_s data;
	int rc = geo_get(entry, path, &data, err);

	if (rc != 1)
		return rc;
	if (data.type != MMDB_DATA_TYPE_UTF8_STRING || data.data_size == 0)
		return 0;
	geo_copy(dst, size, data.utf8_string, data.data_size);
	return 1;
}

/* names[locale], else names["en"]: path ends with a NULL slot at name_slot
 * that this fills in, then NULL. */
static int
geo_get_name(const struct geo_db *db, MMDB_entry_s *entry, const char **path,
             size_t name_slot, char *dst, size_t size, const char **err)
{
	int rc;

	path[name_slot] = db->locale;
	rc = geo_get_str(entry, path, dst, size, err);
	if (rc != 0 || db->locale_is_en)
		return rc;
	path[name_slot] = "en";
	return geo_get_str(entry, path, dst, size, err);
}

static int
geo_get_uint(MMDB_entry_s *entry, const char *const *path, long long *out,
             const char **err)
{
	MMDB_entry_data_s data;
	int rc = geo_get(entry, path, &data, err);

	if (rc != 1)
		return rc;
	switch (data.type) {
	case MMDB_DATA_TYPE_UINT16:
		*out = data.uint16;
		return 1;
	case MMDB_DATA_TYPE_UINT32:
		*out = data.uint32;
		return 1;
	case MMDB_DATA_TYPE_INT32:
		if (data.int32 < 0)
			return 0;
		*out = data.int32;
		return 1;
	case MMDB_DATA_TYPE_UINT64:
		if (data.uint64 > (uint64_t)INT64_MAX)
			return 0;
		*out = (long long)data.uint64;
		return 1;
	default:
		return 0;
	}
}

/* Finds a's record in m. Returns 1 with *entry, 0 when m has none for it,
 * -1 on error. */
static int
geo_find(const MMDB_s *m, const struct geo_addr *a, MMDB_entry_s *entry,
         const char **err)
{
	MMDB_lookup_result_s res;
	int mmdb_error = MMDB_SUCCESS;

	res = MMDB_lookup_sockaddr(m, &a->u.sa, &mmdb_error);
	if (mmdb_error == MMDB_IPV6_LOOKUP_IN_IPV4_DATABASE_ERROR)
		return 0;
	if (mmdb_error != MMDB_SUCCESS) {
		*err = MMDB_strerror(mmdb_error);
		return -1;
	}
	if (!res.found_entry)
		return 0;
	*entry = res.entry;
	return 1;
}

/* geo_find through an address cache (tab NULL: none): an address seen
 * before is not looked up in the tree again. Errors are not cached. */
static int
geo_find_cached(const MMDB_s *m, struct geo_addr_rec *tab, size_t mask,
                const struct geo_addr *a, MMDB_entry_s *entry, const char **err)
{
	size_t n = a->family == AF_INET ? 4 : 16;
	struct geo_addr_rec *r;
	int rc;

	if (tab == NULL)
		return geo_find(m, a, entry, err);
	r = &tab[(size_t)hash_bytes(a->b, n, 0) & mask];
	if (r->used && r->v6 == (n == 16) && memcmp(r->b, a->b, n) == 0) {
		if (!r->found)
			return 0;
		entry->mmdb = m;
		entry->offset = r->offset;
		return 1;
	}
	rc = geo_find(m, a, entry, err);
	if (rc == 1 && entry->offset >= UINT32_MAX)
		return rc; /* cannot be kept (no database is that large) */
	if (rc >= 0) {
		memcpy(r->b, a->b, n);
		r->v6 = n == 16;
		r->used = 1;
		r->found = rc == 1;
		r->offset = rc == 1 ? entry->offset : 0;
	}
	return rc;
}

static int
geo_lookup_city(const struct geo_db *db, struct geo_cache *c, const struct geo_addr *a,
                struct geo_result *out)
{
	static const char *const iso[] = { "country", "iso_code", NULL };
	const char *country[] = { "country", "names", NULL, NULL };
	const char *province[] = { "subdivisions", "0", "names", NULL, NULL };
	const char *city[] = { "city", "names", NULL, NULL };
	struct geo_city_rec *rec = NULL;
	MMDB_entry_s entry;
	int rc;

	if ((rc = geo_find_cached(&db->city, c ? c->city_addr : NULL, c ? c->amask : 0, a, &entry,
	    &out->err)) != 1)
		return rc;
	if (c != NULL && entry.offset < UINT32_MAX) {
		rec = &c->city[geo_slot(c, entry.offset)];
		if (rec->key == entry.offset + 1) {
			c->hits++;
			memcpy(out->country_code, rec->country_code, sizeof(rec->country_code));
			memcpy(out->country, rec->country, strlen(rec->country) + 1);
			memcpy(out->province, rec->province, strlen(rec->province) + 1);
			memcpy(out->city, rec->city, strlen(rec->city) + 1);
			return 0;
		}
		c->misses++;
	}
	if (geo_get_str(&entry, iso, out->country_code, sizeof(out->country_code),
	    &out->err) == -1 ||
	    geo_get_name(db, &entry, country, 2, out->country, sizeof(out->country),
	    &out->err) == -1 ||
	    geo_get_name(db, &entry, province, 3, out->province, sizeof(out->province),
	    &out->err) == -1 ||
	    geo_get_name(db, &entry, city, 2, out->city, sizeof(out->city),
	    &out->err) == -1)
		return -1;
	if (rec != NULL) {
		rec->key = entry.offset + 1;
		memcpy(rec->country_code, out->country_code, sizeof(rec->country_code));
		memcpy(rec->country, out->country, sizeof(rec->country));
		memcpy(rec->province, out->province, sizeof(rec->province));
		memcpy(rec->city, out->city, sizeof(rec->city));
	}
	return 0;
}

static int geo_read_isp(MMDB_entry_s *entry, struct geo_result *out);

static int
geo_lookup_isp(const struct geo_db *db, struct geo_cache *c, const struct geo_addr *a,
               struct geo_result *out)
{
	struct geo_isp_rec *rec = NULL;
	MMDB_entry_s entry;
	int rc;

	if ((rc = geo_find_cached(&db->isp, c ? c->isp_addr : NULL, c ? c->amask : 0, a, &entry,
	    &out->err)) != 1)
		return rc;
	if (c != NULL && entry.offset < UINT32_MAX) {
		rec = &c->isp[geo_slot(c, entry.offset)];
		if (rec->key == entry.offset + 1) {
			out->asn = rec->asn;
			memcpy(out->isp, rec->isp, strlen(rec->isp) + 1);
			memcpy(out->asn_org, rec->asn_org, strlen(rec->asn_org) + 1);
			return 0;
		}
	}
	if ((rc = geo_read_isp(&entry, out)) == 0 && rec != NULL) {
		rec->key = entry.offset + 1;
		rec->asn = out->asn;
		memcpy(rec->isp, out->isp, sizeof(rec->isp));
		memcpy(rec->asn_org, out->asn_org, sizeof(rec->asn_org));
	}
	return rc;
}

/* The ISP fields of one ISP/ASN record. */
static int
geo_read_isp(MMDB_entry_s *entry, struct geo_result *out)
{
	static const char *const asn[] = { "autonomous_system_number", NULL };
	static const char *const aso[] = { "autonomous_system_organization", NULL };
	static const char *const isp[] = { "isp", NULL };
	static const char *const org[] = { "organization", NULL };
	int rc;

	if (geo_get_uint(entry, asn, &out->asn, &out->err) == -1 ||
	    geo_get_str(entry, aso, out->asn_org, sizeof(out->asn_org), &out->err) == -1)
		return -1;
	rc = geo_get_str(entry, isp, out->isp, sizeof(out->isp), &out->err);
	if (rc == 0)
		rc = geo_get_str(entry, org, out->isp, sizeof(out->isp), &out->err);
	if (rc == -1)
		return -1;
	if (rc == 0)
		memcpy(out->isp, out->asn_org, strlen(out->asn_org) + 1);
	return 0;
}

static void
geo_clear(struct geo_result *out)
{
	memset(out, 0, sizeof(*out));
	out->asn = -1;
	out->err = NULL;
}

int
geo_lookup(const struct geo_db *db, const char *ip, struct geo_result *out)
{
	return geo_lookup_cached(db, NULL, ip, out);
}

int
geo_lookup_cached(const struct geo_db *db, struct geo_cache *c, const char *ip,
                  struct geo_result *out)
{
	struct geo_addr a;

	geo_clear(out);
	if (db == NULL) {
		out->err = "geo: no database";
		return -1;
	}
	if (geo_parse(ip, &a) == -1) {
		out->addr_class = "invalid";
		return 0;
	}
	if (a.family == AF_INET && a.mapped) {
		static const unsigned char mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };

		memcpy(out->addr, mapped, 12);
		memcpy(out->addr + 12, a.b, 4);
		out->addr_len = 16;
	} else {
		out->addr_len = a.family == AF_INET ? 4 : 16;
		memcpy(out->addr, a.b, out->addr_len);
	}
	out->addr_class = geo_classify(&a);
	if (out->addr_class != NULL)
		return 0;
	if (geo_lookup_city(db, c, &a, out) == -1 ||
	    (db->has_isp && geo_lookup_isp(db, c, &a, out) == -1)) {
		const char *err = out->err;

		geo_clear(out);
		out->err = err;
		return -1;
	}
	return 0;
}
