/* fuzz_geo.c - libFuzzer: bytes as an IP string into geo_lookup/geo_addr_class
 * on $LP_GEOIP_CITY (else var/geoip/GeoLite2-City.mmdb), opened once; 4- and
 * 16-byte inputs are also looked up as binary IPv4/IPv6 addresses. */
#include <arpa/inet.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "geo.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct geo_db *geo_en, *geo_zh;

int
LLVMFuzzerInitialize(int *argc, char ***argv)
{
	const char *path = getenv("LP_GEOIP_CITY");
	char err[512];

	(void)argc;
	(void)argv;
	if (path == NULL || path[0] == '\0')
		path = "var/geoip/GeoLite2-City.mmdb";
	geo_en = geo_open(path, NULL, "en", err, sizeof(err));
	if (geo_en != NULL)
		geo_zh = geo_open(path, NULL, "zh-CN", err, sizeof(err));
	if (geo_en == NULL || geo_zh == NULL) {
		fprintf(stderr, "fuzz_geo: %s\n", err);
		abort();
	}
	return 0;
}

static void
check(const struct geo_db *geo, const char *ip)
{
	const char *class = geo_addr_class(ip);
	struct geo_result r;
	int rc = geo_lookup(geo, ip, &r);

	/* a real, intact database never errors */
	if (rc != 0 || r.err != NULL)
		abort();
	if (strnlen(r.country_code, sizeof(r.country_code)) == sizeof(r.country_code) ||
	    strnlen(r.country, sizeof(r.country)) == sizeof(r.country) ||
	    strnlen(r.province, sizeof(r.province)) == sizeof(r.province) ||
	    strnlen(r.city, sizeof(r.city)) == sizeof(r.city) ||
	    strnlen(r.isp, sizeof(r.isp)) == sizeof(r.isp) ||
	    strnlen(r.asn_org, sizeof(r.asn_org)) == sizeof(r.asn_org))
		abort();
	/* no ISP database: those stay empty */
	if (r.isp[0] != '\0' || r.asn_org[0] != '\0' || r.asn != -1)
		abort();
	/* special and unparsable addresses never reach the database */
	if (class != NULL && (r.country_code[0] != '\0' || r.country[0] != '\0' ||
	    r.province[0] != '\0' || r.city[0] != '\0'))
		abort();
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char text[INET6_ADDRSTRLEN];
	char *ip = malloc(size + 1); /* exact size, so ASan sees any over-read */

	if (ip == NULL)
		return 0;
	memcpy(ip, data, size);
	ip[size] = '\0';
	check(geo_en, ip);
	check(geo_zh, ip);
	free(ip);

	if ((size == 4 && inet_ntop(AF_INET, data, text, sizeof(text)) != NULL) ||
	    (size == 16 && inet_ntop(AF_INET6, data, text, sizeof(text)) != NULL)) {
		check(geo_en, text);
		check(geo_zh, text);
	}
	return 0;
}
