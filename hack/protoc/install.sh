#!/usr/bin/env bash
# Installs protoc (Debian's protobuf-compiler) and the well-known type
# definitions (google/protobuf/*.proto, from libprotobuf-dev) with apt, only
# when missing. Used by `make generate-grpc` (hack/make/grpc.mk).
#
# The Go plugins (protoc-gen-go, protoc-gen-go-grpc) are not installed here:
# grpc.mk builds them with `go install module@version` at the versions it pins.
set -euo pipefail

need=()
command -v protoc >/dev/null || need+=(protobuf-compiler)
[ -f /usr/include/google/protobuf/timestamp.proto ] || need+=(libprotobuf-dev)
[ ${#need[@]} -eq 0 ] && exit 0

echo "installing: ${need[*]}"
if [ "$(id -u)" -ne 0 ]; then
	echo "need root to apt-get install ${need[*]}" >&2
	exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
