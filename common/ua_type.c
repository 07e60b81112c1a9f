/* ua_type.c - device type ("desktop", "mobile", "tablet", "bot", "tv",
 * "console", "other") and bot flag from a parsed user agent; the rules are
 * documented in ua.h. Tokens are found by the pre-filter's single pass. */
#include <string.h>

#include "ua_int.h"

/* Crawlers, link-preview fetchers, monitors, headless browsers and HTTP
 * libraries that uap-core's "Spider" rules miss. Matched ignoring ASCII case,
 * anywhere in the string. */
static const char *const ua_bot_tokens[] = {
	/* HTTP clients and libraries */
	"curl/", "libcurl", "wget/", "python-requests", "python-urllib", "python-httpx",
	"httpx/", "aiohttp", "urllib3", "go-http-client", "okhttp", "apache-httpclient",
	"commons-httpclient", "java-http-client", "libwww-perl", "lwp::simple",
	"node-fetch", "undici", "axios/", "got (https://github.com/sindresorhus/got)",
	"postmanruntime", "insomnia/", "httpie/", "guzzlehttp", "http.rb/", "faraday v",
	"restsharp", "unirest", "reqwest/", "ureq/", "(dart:io)", "powershell/",
	"aws-sdk-", "google-http-java-client", "http_request2", "winhttp",
	/* headless browsers, audits and monitors */
	"headlesschrome", "phantomjs", "slimerjs", "lighthouse", "pagespeed", "gtmetrix",
	"uptimerobot", "pingdom", "statuscake", "site24x7", "newrelicpinger", "datadog",
	"checkly", "uptime-kuma", "blackbox exporter", "check_http", "nagios", "zabbix",
	/* link-preview fetchers */
	"facebookexternalhit", "facebookcatalog", "meta-externalagent", "meta-externalfetcher",
	"whatsapp", "telegrambot", "slackbot", "slack-imgproxy", "discordbot", "twitterbot",
	"linkedinbot", "skypeuripreview", "pinterest/0.", "redditbot", "embedly", "iframely",
	"vkshare", "bitlybot", "mastodon/", "pleroma", "misskey", "akkoma", "bingpreview",
	"google-pagerenderer", "google favicon", "google-read-aloud", "snap url preview",
	/* search, ads and AI crawlers */
	"google-inspectiontool", "googleother", "google-extended", "feedfetcher-google",
	"mediapartners-google", "apis-google", "adsbot-google", "storebot-google",
	"gptbot", "chatgpt-user", "oai-searchbot", "claudebot", "claude-web", "anthropic-ai",
	"perplexitybot", "perplexity-user", "bytespider", "amazonbot", "applebot",
	"duckduckbot", "duckassistbot", "petalbot", "ccbot", "diffbot", "httrack",
	"cloudflare-alwaysonline", "amazon cloudfront",
	/* crawler conventions anywhere in the string ("+http://..." contact URL) */
	"+http", "crawler", "spider", "slurp",
};

/* Markers for the other types; the enum indexes ua_typer.mark. */
enum {
	M_IPAD, M_IPHONE, M_IPOD, M_ANDROID, M_MOBILE, M_MOBI, M_TABLET, M_TABLET_PC,
	M_KINDLE, M_SILK, M_PLAYBOOK, M_WINPHONE, M_BLACKBERRY, M_BB10, M_OPERA_MINI,
	M_KAIOS, M_SYMBIAN, M_SMARTTV, M_SMART_TV, M_HBBTV, M_GOOGLETV, M_GOOGLE_TV,
	M_ANDROID_TV, M_ANDROIDTV, M_APPLETV, M_APPLE_TV, M_CRKEY, M_ROKU, M_BRAVIA,
	M_NETCAST, M_TV_SAFARI, M_AFT, M_PLAYSTATION, M_XBOX, M_NINTENDO, M_OUYA,
	M_MOZILLA, M_DALVIK, M_NEXUS7, M_NEXUS9, M_NEXUS10, M_XOOM, M_SM_T, M_GT_P,
	M_WINDOWS_NT, M_MACINTOSH, M_X11, M_CROS, M_MIDP, M_J2ME, M_NMAX
};

static const char *const mark_text[M_NMAX] = {
	"ipad", "iphone", "ipod", "android", "mobile", "mobi", "tablet", "tablet pc",
	"kindle", "silk/", "playbook", "windows phone", "blackberry", "bb10", "opera mini",
	"kaios", "symbian", "smarttv", "smart-tv", "hbbtv", "googletv", "google tv",
	"android tv", "androidtv", "appletv", "apple tv", "crkey", "roku", "bravia",
	"netcast", "tv safari", "; aft", "playstation", "xbox", "nintendo", "ouya",
	"mozilla/", "dalvik", "nexus 7", "nexus 9", "nexus 10", "xoom", "sm-t", "gt-p",
	"windows nt", "macintosh", "(x11", "; cros ", "midp", "j2me",
};

_Static_assert(sizeof(ua_bot_tokens) / sizeof(ua_bot_tokens[0]) <= UA_TYPE_MAX_BOT,
    "too many bot tokens");
_Static_assert(M_NMAX <= UA_TYPE_MAX_MARK, "too many markers");

int
ua_type_init(struct ua_typer *t, struct ua_pf *pf)
{
	memset(t, 0, sizeof(*t));
	for (size_t i = 0; i < sizeof(ua_bot_tokens) / sizeof(ua_bot_tokens[0]); i++) {
		if ((t->bot[t->nbot++] = ua_pf_token(pf, ua_bot_tokens[i])) < 0)
			return -1;
	}
	for (int i = 0; i < M_NMAX; i++)
		if ((t->mark[i] = ua_pf_token(pf, mark_text[i])) < 0)
			return -1;
	return 0;
}

static int
has_prefix(const char *s, const char *p)
{
	return strncmp(s, p, strlen(p)) == 0;
}

/* uap-core device families of TVs and streaming boxes. */
static int
tv_family(const char *df, const char *os)
{
	static const char *const fam[] = {
		"AppleTV", "Chromecast", "HbbTV", "NetCast.TV", "NetCast.Media", "Roku",
		"GoogleTV", "WebTV", "Inettv",
	};
	static const char *const part[] = {
		"Android TV", "Google TV", "SmartTV", "smartTV", "SMART-TV", "Smart TV",
	};

	if (strcmp(os, "tvOS") == 0)
		return 1;
	for (size_t i = 0; i < sizeof(fam) / sizeof(fam[0]); i++)
		if (strcmp(df, fam[i]) == 0)
			return 1;
	for (size_t i = 0; i < sizeof(part) / sizeof(part[0]); i++)
		if (strstr(df, part[i]) != NULL)
			return 1;
	return 0;
}

static int
desktop_os(const char *os)
{
	static const char *const pre[] = {
		"Mac OS X", "Mac OS", "macOS", "Linux", "Ubuntu", "Debian", "Fedora",
		"Red Hat", "SUSE", "openSUSE", "Mint", "Linux Mint", "Arch Linux", "Gentoo",
		"Slackware", "CentOS", "Mandriva", "Kubuntu", "Xubuntu", "Lubuntu",
		"Chrome OS", "ChromeOS", "FreeBSD", "OpenBSD", "NetBSD", "DragonFly BSD",
		"Solaris", "SunOS", "BeOS", "Haiku", "OS/2", "AmigaOS", "IRIX", "HP-UX", "AIX",
	};

	if (has_prefix(os, "Windows"))
		return strstr(os, "Phone") == NULL && strstr(os, "Mobile") == NULL &&
		    strcmp(os, "Windows CE") != 0;
	for (size_t i = 0; i < sizeof(pre) / sizeof(pre[0]); i++)
		if (has_prefix(os, pre[i]))
			return 1;
	return 0;
}

static int
mobile_os(const char *os)
{
	static const char *const fam[] = {
		"iOS", "Android", "Windows Phone", "Windows Mobile", "Windows CE",
		"BlackBerry OS", "BlackBerry Tablet OS", "Symbian OS", "Symbian^3",
		"KaiOS", "Firefox OS", "Tizen", "Sailfish", "MeeGo", "Maemo", "Bada",
		"webOS", "Ubuntu Touch", "HarmonyOS",
	};

	for (size_t i = 0; i < sizeof(fam) / sizeof(fam[0]); i++)
		if (has_prefix(os, fam[i]))
			return 1;
	return 0;
}

static enum ua_device_type
classify(const struct ua_typer *t, const uint64_t *b, size_t n, const struct ua_result *r)
{
	const int *m = t->mark;
	const char *df = r->device.family, *brand = r->device.brand;
	int android = ua_pf_has(b, m[M_ANDROID]);
	int mobile = ua_pf_has(b, m[M_MOBILE]);

	/* 1. bots */
	if (n == 0 || strcmp(df, "Spider") == 0)
		return UA_TYPE_BOT;
	for (int i = 0; i < t->nbot; i++)
		if (ua_pf_has(b, t->bot[i]))
			return UA_TYPE_BOT;
	if (strcasestr(r->browser.family, "bot") != NULL ||
	    strcasestr(r->browser.family, "spider") != NULL ||
	    strcasestr(r->browser.family, "crawl") != NULL ||
	    strcasestr(r->browser.family, "slurp") != NULL)
		return UA_TYPE_BOT;
	/* 2. consoles */
	if (ua_pf_has(b, m[M_PLAYSTATION]) || ua_pf_has(b, m[M_XBOX]) ||
	    ua_pf_has(b, m[M_NINTENDO]) || ua_pf_has(b, m[M_OUYA]) ||
	    strcmp(brand, "Nintendo") == 0 || has_prefix(df, "PlayStation") ||
	    has_prefix(df, "Xbox"))
		return UA_TYPE_CONSOLE;
	/* 3. TVs and streaming boxes */
	if (ua_pf_has(b, m[M_SMARTTV]) || ua_pf_has(b, m[M_SMART_TV]) ||
	    ua_pf_has(b, m[M_HBBTV]) || ua_pf_has(b, m[M_GOOGLETV]) ||
	    ua_pf_has(b, m[M_GOOGLE_TV]) || ua_pf_has(b, m[M_ANDROID_TV]) ||
	    ua_pf_has(b, m[M_ANDROIDTV]) || ua_pf_has(b, m[M_APPLETV]) ||
	    ua_pf_has(b, m[M_APPLE_TV]) || ua_pf_has(b, m[M_CRKEY]) ||
	    ua_pf_has(b, m[M_ROKU]) || ua_pf_has(b, m[M_BRAVIA]) ||
	    ua_pf_has(b, m[M_NETCAST]) || ua_pf_has(b, m[M_TV_SAFARI]) ||
	    (android && ua_pf_has(b, m[M_AFT])) ||
	    tv_family(df, r->os.family))
		return UA_TYPE_TV;
	/* 4. tablets */
	if (ua_pf_has(b, m[M_IPAD]) || ua_pf_has(b, m[M_PLAYBOOK]) ||
	    (ua_pf_has(b, m[M_TABLET]) && !ua_pf_has(b, m[M_TABLET_PC])) ||
	    ((ua_pf_has(b, m[M_KINDLE]) || ua_pf_has(b, m[M_SILK])) && !mobile) ||
	    ua_pf_has(b, m[M_NEXUS7]) || ua_pf_has(b, m[M_NEXUS9]) ||
	    ua_pf_has(b, m[M_NEXUS10]) || ua_pf_has(b, m[M_XOOM]) ||
	    (android && (ua_pf_has(b, m[M_SM_T]) || ua_pf_has(b, m[M_GT_P]))) ||
	    strstr(r->device.model, "Tablet") != NULL || strstr(df, "Tablet") != NULL ||
	    strcmp(df, "iPad") == 0 || has_prefix(df, "Kindle") ||
	    (android && !mobile && ua_pf_has(b, m[M_MOZILLA]) &&
	     !ua_pf_has(b, m[M_DALVIK]) && strcmp(brand, "Generic") != 0 &&
	     strcmp(df, "Other") != 0))
		return UA_TYPE_TABLET;
	/* 5. phones */
	if (ua_pf_has(b, m[M_IPHONE]) || ua_pf_has(b, m[M_IPOD]) ||
	    ua_pf_has(b, m[M_WINPHONE]) || ua_pf_has(b, m[M_BLACKBERRY]) ||
	    ua_pf_has(b, m[M_BB10]) || ua_pf_has(b, m[M_OPERA_MINI]) ||
	    ua_pf_has(b, m[M_KAIOS]) || ua_pf_has(b, m[M_SYMBIAN]) ||
	    ua_pf_has(b, m[M_MIDP]) || ua_pf_has(b, m[M_J2ME]) || android ||
	    strcmp(df, "Generic Smartphone") == 0 || strcmp(df, "Generic Feature Phone") == 0 ||
	    has_prefix(df, "iPhone") || has_prefix(df, "iPod") || mobile_os(r->os.family) ||
	    mobile || ua_pf_has(b, m[M_MOBI]))
		return UA_TYPE_MOBILE;
	/* 6. computers */
	if (desktop_os(r->os.family) || strcmp(df, "Mac") == 0 ||
	    ua_pf_has(b, m[M_WINDOWS_NT]) || ua_pf_has(b, m[M_MACINTOSH]) ||
	    ua_pf_has(b, m[M_X11]) || ua_pf_has(b, m[M_CROS]))
		return UA_TYPE_DESKTOP;
	/* 7. a handset uap-core knows by brand but nothing above marks
	 * (feature phones: "SAMSUNG-SGH-E108", "LGE-PM225", ...) */
	if (brand[0] != '\0' && strcmp(df, "Other") != 0)
		return UA_TYPE_MOBILE;
	return UA_TYPE_OTHER;
}

void
ua_type_classify(const struct ua_typer *t, const uint64_t *bits, const unsigned char *lower,
                 size_t n, struct ua_result *r)
{
	size_t a = 0, e = n;

	/* blank strings count as empty */
	while (a < e && ua_is_space(lower[a]))
		a++;
	while (e > a && ua_is_space(lower[e - 1]))
		e--;
	r->type = classify(t, bits, e - a, r);
	r->device_type = ua_device_type_name(r->type);
	r->is_bot = r->type == UA_TYPE_BOT;
}

const char *
ua_device_type_name(enum ua_device_type t)
{
	switch (t) {
	case UA_TYPE_DESKTOP: return "desktop";
	case UA_TYPE_MOBILE:  return "mobile";
	case UA_TYPE_TABLET:  return "tablet";
	case UA_TYPE_BOT:     return "bot";
	case UA_TYPE_TV:      return "tv";
	case UA_TYPE_CONSOLE: return "console";
	case UA_TYPE_OTHER:   break;
	}
	return "other";
}
