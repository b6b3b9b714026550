#!/usr/bin/env bash
# Installs what the dashboards' proof and pictures need, with apt, only when
# missing (as hack/install-deps.sh does for the other steps).
#   hack/dashboards/install-deps.sh prometheus   Debian's prometheus (the panel-query test, test/dashboards)
#   hack/dashboards/install-deps.sh render       python3-matplotlib (hack/dashboards/render.py)
#
# The prometheus package ships a service; the test runs its own server on
# loopback and wants none. Where no /usr/sbin/policy-rc.d exists, one that
# refuses every service start is put in place for the install and removed
# after, so installing starts nothing.
set -euo pipefail

need=()
case "${1:-}" in
prometheus)
	# The package ships both: prometheus (test/dashboards), promtool (rule tests).
	{ [ -x /usr/bin/prometheus ] && [ -x /usr/bin/promtool ]; } || need+=(prometheus)
	;;
render)
	/usr/bin/python3 -c 'import matplotlib' 2>/dev/null || need+=(python3-matplotlib)
	;;
*)
	echo "usage: $0 prometheus|render" >&2
	exit 2
	;;
esac
[ ${#need[@]} -eq 0 ] && exit 0
echo "installing: ${need[*]}"
if [ "$(id -u)" -ne 0 ]; then
	echo "need root to apt-get install ${need[*]}" >&2
	exit 1
fi
policy=/usr/sbin/policy-rc.d
if [ ! -e "$policy" ]; then
	printf '#!/bin/sh\nexit 101\n' >"$policy"
	chmod 755 "$policy"
	trap 'rm -f "$policy"' EXIT
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
