/* enrich.c - derived visit columns: GeoIP, user agent, client_id, referer host
 * (libcurl CURLU) and the primary Accept-Language tag. */
#include "enrich.h"

#include "errstr.h"
#include "hash.h"

#include <curl/curl.h>
#include <idn2.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Referer hosts of the URLs seen last, direct-mapped by a hash of the URL:
 * a campaign's visits repeat a few referers (its landing page, a social
 * app), and libcurl's parse of one was ~5% of ingest's CPU. */
#define REF_SLOTS 256
#define REF_URL_MAX 256 /* longer URLs are parsed every time */
#define REF_BYTES_MAX (4 * 8192) /* the event schema's 8192 characters in UTF-8 */

struct ref_slot {
	size_t len;              /* 0: empty */
	char url[REF_URL_MAX];
	char host[256];
};

struct enricher {
	struct geo_db *geo;
	struct geo_cache *geo_cache; /* owned; NULL: none */
	struct ua_parser *ua;
	CURLU *url;
	struct ref_slot *ref;    /* owned, REF_SLOTS */
};

struct enricher *
enrich_new(const char *city_path, const char *isp_path, const char *locale,
           const char *uap_regexes, size_t ua_cache_entries, size_t geo_cache_records,
           char *errstr, size_t errstr_size)
{
	struct enricher *e;

	if ((e = calloc(1, sizeof(*e))) == NULL) {
		errstr_set(errstr, errstr_size, "out of memory");
		return NULL;
	}
	if ((e->geo = geo_open(city_path, isp_path, locale, errstr, errstr_size)) == NULL)
		goto fail;
	if (geo_cache_records > 0 && (e->geo_cache = geo_cache_new(geo_cache_records)) == NULL) {
		errstr_set(errstr, errstr_size, "GeoIP cache: out of memory");
		goto fail;
	}
	if ((e->ua = ua_parser_new(uap_regexes, ua_cache_entries, errstr, errstr_size)) == NULL)
		goto fail;
	if ((e->url = curl_url()) == NULL || (e->ref = calloc(REF_SLOTS, sizeof(*e->ref))) == NULL) {
		errstr_set(errstr, errstr_size, "curl_url: out of memory");
		goto fail;
	}
	return e;
fail:
	enrich_free(e);
	return NULL;
}

void
enrich_free(struct enricher *e)
{
	if (e == NULL)
		return;
	geo_close(e->geo);
	geo_cache_free(e->geo_cache);
	ua_parser_free(e->ua);
	if (e->url)
		curl_url_cleanup(e->url);
	free(e->ref);
	free(e);
}

void
enrich_geo_cache_stats(const struct enricher *e, unsigned long long *hits,
                       unsigned long long *misses)
{
	geo_cache_stats(e->geo_cache, hits, misses);
}

void
enrich_ua_stats(struct enricher *e, struct ua_stats *st)
{
	ua_parser_stats(e->ua, st);
}

/* "major.minor.patch" of the parts present, stopping at the first absent one
 * (or at the first that would not fit whole: the parts are at most
 * UA_VERSION_SIZE - 1 bytes and out 4 * UA_VERSION_SIZE, so never). */
static void
join_version(char *out, size_t size, const char *major, const char *minor, const char *patch)
{
	const char *parts[3] = { major, minor, patch };
	size_t n = 0;

	for (int i = 0; i < 3 && parts[i][0]; i++) {
		size_t len = strlen(parts[i]);

		if (n + (i > 0) + len >= size)
			break;
		if (i > 0)
			out[n++] = '.';
		memcpy(out + n, parts[i], len);
		n += len;
	}
	out[n] = '\0';
}

static void
lower_copy(char *out, size_t out_size, const char *s, size_t len)
{
	size_t i;

	if (len >= out_size)
		len = out_size - 1;
	for (i = 0; i < len; i++) {
		char c = s[i];
		out[i] = (c >= 'A' && c <= 'Z') ? (char)(c - 'A' + 'a') : c;
	}
	out[i] = '\0';
}

static int
is_ascii(const char *s)
{
	while (*s != '\0' && (unsigned char)*s < 0x80)
		s++;
	return *s == '\0';
}

/* The lower-case host of url by libcurl, "" when it has none. The handle is
 * cleared first: given a URL already, libcurl resolves a relative one ("not
 * a url", "://x/") against it, which gave such a referer the host of the
 * one before it. */
static void
parse_host(struct enricher *e, const char *url, char *out, size_t out_size)
{
	char *host = NULL;
	const char *name;
	uint8_t *ace = NULL; /* libidn2's, when it gave one */
	size_t len;

	out[0] = '\0';
	curl_url_set(e->url, CURLUPART_URL, NULL, 0);
	if (curl_url_set(e->url, CURLUPART_URL, url, CURLU_NON_SUPPORT_SCHEME) != CURLUE_OK)
		return;
	if (curl_url_get(e->url, CURLUPART_HOST, &host, 0) != CURLUE_OK || host == NULL)
		return;
	len = strlen(host);
	if (len > 1 && host[len - 1] == '.') /* "example.com." is example.com */
		host[--len] = '\0';
	/* libcurl percent-decodes the host and passes bytes above 0x7f: text
	 * that is not UTF-8 would fail the batch's COPY on every retry. */
	if (!errstr_utf8_valid(host)) {
		curl_free(host);
		return;
	}
	name = host;
	/* An international name in its punycode (ASCII) form by libidn2
	 * (UTS #46, which also folds case), so its spellings count as one
	 * host; as sent, lower-cased, when libidn2 refuses it. (libcurl's
	 * CURLU_PUNYCODE reads the locale's charset and, in 7.88, leaks the
	 * host when the conversion fails.) */
	if (!is_ascii(host) && idn2_lookup_u8((const uint8_t *)host, &ace,
	    IDN2_NFC_INPUT | IDN2_NONTRANSITIONAL) == IDN2_OK) {
		name = (const char *)ace;
		len = strlen(name);
	}
	if (len < out_size)
		lower_copy(out, out_size, name, len);
	idn2_free(ace);
	curl_free(host);
}

void
enrich_referer_host(struct enricher *e, const char *url, char *out, size_t out_size)
{
	size_t n = url != NULL ? strnlen(url, REF_BYTES_MAX + 1) : 0;
	struct ref_slot *s;

	out[0] = '\0';
	if (n == 0 || n > REF_BYTES_MAX)
		return;
	if (n >= REF_URL_MAX || out_size < sizeof(s->host)) {
		parse_host(e, url, out, out_size);
		return;
	}
	s = &e->ref[hash_bytes(url, n, 0) % REF_SLOTS];
	if (s->len != n || memcmp(s->url, url, n) != 0) {
		parse_host(e, url, s->host, sizeof(s->host));
		memcpy(s->url, url, n);
		s->len = n;
	}
	memcpy(out, s->host, strlen(s->host) + 1);
}

/* A language range (RFC 4647): 1-8 letters, then subtags of 1-8 letters or
 * digits, each after '-' (or '_', as some apps' HTTP stacks write it), 35
 * characters at most; "*" names no language. */
static int
tag_ok(const char *s, size_t len)
{
	size_t sub = 0, nsub = 0;

	if (len == 0 || len > 35)
		return 0;
	for (size_t i = 0; i < len; i++) {
		char c = s[i];

		if (c == '-' || c == '_') {
			if (sub == 0)
				return 0;
			sub = 0;
			nsub++;
			continue;
		}
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
		    (nsub > 0 && c >= '0' && c <= '9')) || ++sub > 8)
			return 0;
	}
	return sub > 0;
}

/* q of a parameter list ";q=0.8;x=y"; 1.0 when absent, -1 when unparsable. */
static double
parse_q(const char *p, const char *end)
{
	while (p < end) {
		const char *semi = memchr(p, ';', (size_t)(end - p));
		const char *s = p, *e = semi ? semi : end;
		while (s < e && (*s == ' ' || *s == '\t'))
			s++;
		if (e - s >= 2 && (s[0] == 'q' || s[0] == 'Q') && s[1] == '=') {
			char buf[16];
			size_t n = (size_t)(e - s - 2);
			char *stop;
			double q;

			while (n > 0 && (s[2 + n - 1] == ' ' || s[2 + n - 1] == '\t'))
				n--;
			if (n == 0 || n >= sizeof(buf))
				return -1;
			memcpy(buf, s + 2, n);
			buf[n] = '\0';
			q = strtod(buf, &stop);
			if (*stop != '\0' || q < 0 || q > 1)
				return -1;
			return q;
		}
		p = semi ? semi + 1 : end;
	}
	return 1.0;
}

void
enrich_language(const char *al, char *out, size_t out_size)
{
	double best = 0;
	const char *p = al;

	out[0] = '\0';
	if (al == NULL)
		return;
	while (*p) {
		const char *comma = strchr(p, ',');
		const char *end = comma ? comma : p + strlen(p);
		const char *semi = memchr(p, ';', (size_t)(end - p));
		const char *ts = p, *te = semi ? semi : end;
		double q;

		while (ts < te && (*ts == ' ' || *ts == '\t'))
			ts++;
		while (te > ts && (te[-1] == ' ' || te[-1] == '\t'))
			te--;
		q = semi ? parse_q(semi + 1, end) : 1.0;
		if (q > best && tag_ok(ts, (size_t)(te - ts)) && (size_t)(te - ts) < out_size) {
			best = q;
			lower_copy(out, out_size, ts, (size_t)(te - ts));
			for (char *u = out; (u = strchr(u, '_')) != NULL; u++)
				*u = '-'; /* en_US is en-us */
		}
		if (!comma)
			break;
		p = comma + 1;
	}
}

int
enrich_event(struct enricher *e, const struct event *ev, struct enrich_row *out,
             char *errstr, size_t errstr_size)
{
	if (geo_lookup_cached(e->geo, e->geo_cache, ev->ip, &out->geo) < 0) {
		errstr_set(errstr, errstr_size, "GeoIP lookup of %s: %s", ev->ip,
		    out->geo.err ? out->geo.err : "error");
		return -1;
	}
	ua_parse(e->ua, ev->user_agent, ev->user_agent_len, &out->ua);
	join_version(out->browser_version, sizeof(out->browser_version), out->ua.browser.major,
	    out->ua.browser.minor, out->ua.browser.patch);
	join_version(out->os_version, sizeof(out->os_version), out->ua.os.major,
	    out->ua.os.minor, out->ua.os.patch);
	if (digest_client_id(ev->ip, ev->user_agent, out->client_id) < 0) {
		errstr_set(errstr, errstr_size, "SHA-1 failed (libcrypto)");
		return -1;
	}
	enrich_referer_host(e, ev->referer, out->referer_host, sizeof(out->referer_host));
	enrich_language(ev->accept_language, out->language, sizeof(out->language));
	return 0;
}
