#!/usr/bin/env bash
# Fetches the Apache Kafka broker the tests run (hack/kafka/pom.xml: kafka_2.13
# and its runtime dependencies, from Maven Central) once into
#   ${FLOWLENS_CACHE:-~/.cache/flowlens}/kafka/<version>/libs
# and prints that directory. internal/testkit/kafkatest finds it there.
# Needs Java 17+ and Maven (installed with apt when missing).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
version=$(sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' "$here/pom.xml")
cache=${FLOWLENS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/flowlens}
dir=$cache/kafka/$version
if [ -f "$dir/.complete" ]; then
	echo "$dir"
	exit 0
fi
need=()
command -v java >/dev/null || need+=(openjdk-17-jre-headless)
command -v mvn >/dev/null || need+=(maven)
if [ ${#need[@]} -gt 0 ]; then
	echo "installing: ${need[*]}" >&2
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
echo "fetching Apache Kafka $version into $dir" >&2
rm -rf "$dir.tmp"
mvn -q -B -f "$here/pom.xml" dependency:copy-dependencies \
	-DincludeScope=runtime -DoutputDirectory="$dir.tmp/libs" >&2
touch "$dir.tmp/.complete"
rm -rf "$dir"
mv "$dir.tmp" "$dir"
echo "$dir"
