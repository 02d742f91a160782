#!/usr/bin/env bash
# Builds signal-static (the pause container, the nodes' namespace holder and the test tool):
# standard library only, static (CGO_ENABLED=0). Cached by the hash of its sources and the Go
# version. Prints the binary's path on stdout as its last line.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../../.." && pwd)"
out_dir="${SIGNAL_REALNODE_DIR:-$repo/.cache/realnode}"
stamp="$( (cat "$here/go.mod" "$here/main.go"; go version) | sha256sum | cut -c1-16)"
binary="$out_dir/signal-static-$stamp"
# One build at a time per cache folder: a second caller (another checkout sharing the cache, a
# parallel test) waits here, then finds the first one's result.
mkdir -p "$out_dir"
exec 9>"$out_dir/.build.lock"
flock 9
if [[ -x "$binary" ]]; then
  echo "$binary"
  exit 0
fi
mkdir -p "$out_dir"
cd "$here"
CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$binary.tmp" .
mv "$binary.tmp" "$binary"
echo "signal-static: built $binary" >&2
echo "$binary"
