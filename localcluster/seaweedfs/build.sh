#!/usr/bin/env bash
# Builds SeaweedFS's `weed` (github.com/seaweedfs/seaweedfs/weed: master, volume server, filer and
# S3 gateway in one binary) from the Go module proxy, so that the local cluster runs a real
# S3-compatible artifact store for Signal's tests. LOCAL TEST INFRASTRUCTURE ONLY: Signal ships no
# SeaweedFS; on a real cluster, point the artifact store at the operator's own S3 service.
# The proxy serves SeaweedFS only as a pseudo-version (its release tags are not semver), pinned
# in go.mod. Cached: rebuilt only when go.mod, go.sum or the Go version change (content hash in
# the name). Prints the directory holding the binary on stdout as its last line.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
out_root="${SIGNAL_SEAWEEDFS_DIR:-$repo/.cache/seaweedfs}"
module=github.com/seaweedfs/seaweedfs
version="$(sed -n "s|^\t$module \(v[^ ]*\).*|\1|p" "$here/go.mod")"
stamp="$( (cat "$here/go.mod" "$here/go.sum"; go version) | sha256sum | cut -c1-16)"
out="$out_root/seaweedfs-$version-$stamp"
# One build at a time per cache folder: a second caller (another checkout sharing the cache, a
# parallel test) waits here, then finds the first one's result.
mkdir -p "$out_root"
exec 9>"$out_root/.build.lock"
flock 9
if [[ -x "$out/weed" ]]; then
  echo "seaweedfs: cached build $out" >&2
  echo "$out"
  exit 0
fi
mkdir -p "$out"
echo "seaweedfs: building SeaweedFS $version weed (cold build takes 10-40 minutes on 2 cores)" >&2
start=$(date +%s)
cd "$here"
CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$out/weed.tmp" "$module/weed"
mv "$out/weed.tmp" "$out/weed"
echo "seaweedfs: built $out in $(( $(date +%s) - start ))s" >&2
echo "$out"
