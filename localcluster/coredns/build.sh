#!/usr/bin/env bash
# Builds CoreDNS (github.com/coredns/coredns, the version go.mod pins) with only the plugins
# main.go imports, for the local cluster's real nodes. Cached: rebuilt only when go.mod, go.sum,
# main.go or the Go version change. Prints the binary's path on stdout as its last line.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
out_dir="${SIGNAL_COREDNS_DIR:-$repo/.cache/coredns}"
stamp="$( (cat "$here/go.mod" "$here/go.sum" "$here/main.go"; go version) | sha256sum | cut -c1-16)"
binary="$out_dir/coredns-$stamp"
# One build at a time per cache folder: a second caller (another checkout sharing the cache, a
# parallel test) waits here, then finds the first one's result.
mkdir -p "$out_dir"
exec 9>"$out_dir/.build.lock"
flock 9
if [[ -x "$binary" ]]; then
  echo "coredns: cached build $binary" >&2
  echo "$binary"
  exit 0
fi
mkdir -p "$out_dir"
echo "coredns: building (a few minutes on 2 cores when cold)" >&2
start=$(date +%s)
cd "$here"
CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$binary.tmp" .
mv "$binary.tmp" "$binary"
echo "coredns: built $binary in $(( $(date +%s) - start ))s" >&2
echo "$binary"
