/* ua.h - user-agent parsing with uap-core's regexes.yaml (libyaml + PCRE2 JIT):
 * browser, OS and device as uap-core specifies, plus a coarse device type and a
 * bot flag, behind a literal pre-filter and a bounded thread-safe S3-FIFO cache. */
#ifndef LP_UA_H
#define LP_UA_H

#include <stddef.h>
#include <stdint.h>

#define UA_DEFAULT_REGEXES "/usr/share/uap-core/regexes.yaml"

/* Longest input parsed: bytes past this are ignored (real user agents are far
 * shorter; the cap bounds regex work per string). */
#define UA_MAX_INPUT 2048
/* Longest input the cache keeps; longer strings are parsed every time. */
#define UA_CACHE_MAX_KEY 1024

/* Field sizes, including the terminating NUL. Longer values are cut at a
 * UTF-8 character boundary. */
#define UA_FAMILY_SIZE  256
#define UA_VERSION_SIZE 64
#define UA_BRAND_SIZE   128
#define UA_MODEL_SIZE   256

/*
 * uap-core semantics (docs/specification.md of uap-core), as implemented here:
 *  - Three ordered lists (user_agent_parsers, os_parsers, device_parsers) are
 *    searched independently; in each the first regex that matches anywhere in
 *    the string wins. Matching is case sensitive unless the entry has
 *    regex_flag: 'i'. Matching is byte-wise (ASCII classes for \d \w \s).
 *  - A *_replacement, when present, replaces the field; "$1".."$9" in it are
 *    replaced by the capture groups (an unset group gives ""). Without one the
 *    field is its capture group: family $1, major $2, minor $3, patch $4,
 *    patch_minor $5 (browser and OS); device family $1 and model $1; device
 *    brand has no default.
 *  - Every field is trimmed of leading/trailing white space; an empty field
 *    is "no value", returned as "" here. A match whose family comes out empty
 *    does not count and the search goes on with the next regex.
 *  - No match: family "Other", every other field "".
 *
 * device_type and is_bot (this project's rules, not uap-core's), in order:
 *  1. is_bot = 1 and device_type "bot" when any of:
 *     a. uap-core's device family is "Spider" (its own crawler rules: bot,
 *        crawl, spider, slurp, facebookexternalhit, WhatsApp, Python-urllib,
 *        ^Java/, Pingdom, ...);
 *     b. the string contains, ignoring ASCII case, a token of a well-known
 *        crawler, link-preview fetcher, monitor, headless browser or HTTP
 *        library (uap-core's Spider rules only look at the first 100 bytes
 *        and miss many), e.g. "curl/", "wget/", "python-requests",
 *        "aiohttp", "httpx", "go-http-client", "okhttp", "apache-httpclient",
 *        "libwww-perl", "node-fetch", "axios/", "postmanruntime",
 *        "guzzlehttp", "headlesschrome", "phantomjs", "lighthouse",
 *        "facebookexternalhit", "facebookcatalog", "meta-externalagent",
 *        "whatsapp", "telegrambot", "slackbot", "discordbot", "twitterbot",
 *        "skypeuripreview", "embedly", "iframely", "mastodon/", "gptbot",
 *        "claudebot", "bytespider", "uptimerobot", and the crawler
 *        conventions "+http" (contact URL), "crawler", "spider", "slurp"
 *        (full list: ua_bot_tokens in ua_type.c);
 *     c. uap-core's browser family contains "bot", "spider", "crawl" or
 *        "slurp" (any case), e.g. "Googlebot", "YandexBot";
 *     d. the string is empty or blank.
 *  2. "console": the string says "PlayStation", "Xbox", "Nintendo" or
 *     "OUYA", or uap-core's device is a PlayStation*, Xbox* or brand Nintendo.
 *  3. "tv": the string carries a TV marker (SmartTV, SMART-TV, HbbTV,
 *     GoogleTV, Android TV, AppleTV, CrKey, Roku, BRAVIA, NetCast,
 *     "TV Safari", an Android "; AFT" Fire TV model), or the OS is tvOS, or
 *     the device family is a TV one (AppleTV, Chromecast, HbbTV, Roku,
 *     NetCast.*, WebTV, ... or contains "Android TV", "SmartTV", ...).
 *  4. "tablet": the string says "iPad", "PlayBook", "Tablet" (but not
 *     "Tablet PC", which desktop Windows sends), "Nexus 7/9/10", "Xoom",
 *     "Kindle" or "Silk/" without "Mobile", Android with a Galaxy Tab model
 *     ("SM-T", "GT-P"); or uap-core's device is "iPad", Kindle*, or has
 *     "Tablet" in family or model; or it is a browser ("Mozilla/", not
 *     "Dalvik") on Android without the "Mobile" token (Google's convention
 *     for tablets) on a device uap-core identified (not "Other"/Generic).
 *  5. "mobile": the string says "iPhone", "iPod", "Windows Phone",
 *     "BlackBerry", "BB10", "Opera Mini", "KaiOS", "Symbian", "MIDP",
 *     "J2ME", "Android", "Mobile" or "Mobi"; or uap-core's device is
 *     iPhone*, iPod*, "Generic Smartphone" or "Generic Feature Phone"; or
 *     its OS is iOS, Android, Windows Phone/Mobile/CE, BlackBerry OS,
 *     Symbian, KaiOS, Firefox OS, Tizen, Sailfish, webOS, ...
 *  6. "desktop": OS family Windows (not Phone/Mobile/CE), Mac OS X/macOS,
 *     Linux distributions, Chrome OS, the BSDs, Solaris, ..., device family
 *     "Mac", or the markers "Windows NT", "Macintosh", "(X11", "; CrOS " (not
 *     the "cros" inside "Microsoft").
 *  7. "mobile": uap-core named the device with a brand (feature phones
 *     that carry none of the markers above, e.g. "SAMSUNG-SGH-E108").
 *  8. otherwise "other".
 */

enum ua_device_type {
	UA_TYPE_OTHER = 0,
	UA_TYPE_DESKTOP,
	UA_TYPE_MOBILE,
	UA_TYPE_TABLET,
	UA_TYPE_BOT,
	UA_TYPE_TV,
	UA_TYPE_CONSOLE,
};

struct ua_browser {
	char family[UA_FAMILY_SIZE];        /* "Other" when no regex matched */
	char major[UA_VERSION_SIZE];        /* "" = no value */
	char minor[UA_VERSION_SIZE];
	char patch[UA_VERSION_SIZE];
	char patch_minor[UA_VERSION_SIZE];
};

struct ua_os {
	char family[UA_FAMILY_SIZE];        /* "Other" when no regex matched */
	char major[UA_VERSION_SIZE];
	char minor[UA_VERSION_SIZE];
	char patch[UA_VERSION_SIZE];
	char patch_minor[UA_VERSION_SIZE];
};

struct ua_device {
	char family[UA_FAMILY_SIZE];        /* "Other" when no regex matched */
	char brand[UA_BRAND_SIZE];          /* "" = no value */
	char model[UA_MODEL_SIZE];          /* "" = no value */
};

/* Plain value: fixed-size arrays, nothing to free, safe to copy. */
struct ua_result {
	struct ua_browser browser;
	struct ua_os os;
	struct ua_device device;
	enum ua_device_type type;
	/* "desktop","mobile","tablet","bot","tv","console","other": static
	 * storage, never freed. */
	const char *device_type;
	int is_bot;                         /* 0 or 1 */
};

struct ua_stats {
	uint64_t hits;       /* cache hits */
	uint64_t misses;     /* cache misses (parsed, then inserted) */
	uint64_t evictions;  /* entries dropped to make room */
	size_t entries;      /* entries held now */
	size_t capacity;     /* bound given to ua_parser_new */
	size_t regexes;      /* regexes loaded, all three lists */
	size_t prefiltered;  /* regexes that have a literal pre-filter */
	uint64_t limited;    /* parses (cached or not) where a regex hit PCRE2's
	                      * match limit (1,000,000 steps): counted as no
	                      * match, as the next regex decides */
};

struct ua_parser;

/* Loads and compiles regexes_path (NULL: UA_DEFAULT_REGEXES). cache_entries
 * bounds the result cache (0: no cache). Returns a parser owned by the
 * caller (free with ua_parser_free), or NULL with errstr set
 * ("path:line: reason"). The parser is immutable but for its cache:
 * ua_parse may be called from any number of threads at once. */
struct ua_parser *ua_parser_new(const char *regexes_path, size_t cache_entries,
                                char *errstr, size_t errstr_size);

/* Frees the parser and everything it owns. NULL is a no-op. Not to be
 * called while another thread is inside ua_parse on it. */
void ua_parser_free(struct ua_parser *p);

/* Parses len bytes at ua (need not be NUL-terminated; may hold any bytes;
 * NULL or len 0 is the empty string) into *out, which the caller owns.
 * Returns 0, or -1 only when p or out is NULL. Thread-safe. */
int ua_parse(struct ua_parser *p, const char *ua, size_t len, struct ua_result *out);

/* Same, bypassing the cache (neither read nor filled); counts limit hits
 * as ua_parse does (ua_stats.limited). */
int ua_parse_nocache(struct ua_parser *p, const char *ua, size_t len,
                     struct ua_result *out);

/* Name of a device type ("desktop", ...): static storage. */
const char *ua_device_type_name(enum ua_device_type t);

/* Counters, read under the cache locks (consistent per stripe). */
void ua_parser_stats(struct ua_parser *p, struct ua_stats *st);

#endif
