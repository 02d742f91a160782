#!/usr/bin/env bash
# Builds the local control-plane multicall binary (etcd, kube-apiserver, kubelet, kube-proxy,
# kube-controller-manager, kube-scheduler) from the upstream Go modules.
# Cached: the binary is rebuilt only when go.mod, go.sum, main.go or the Go version change.
# Prints the binary's path on stdout as its last line.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
out_dir="${SIGNAL_KPLANE_DIR:-$repo/.cache/kplane}"
kube_version="$(cat "$here/KUBE_VERSION")"
stamp="$( (cat "$here/go.mod" "$here/go.sum" "$here/main.go"; go version) | sha256sum | cut -c1-16)"
binary="$out_dir/kplane-$kube_version-$stamp"
# One build at a time per cache folder: a second caller (another checkout sharing the cache, a
# parallel test) waits here, then finds the first one's result.
mkdir -p "$out_dir"
exec 9>"$out_dir/.build.lock"
flock 9
if [[ -x "$binary" ]]; then
  echo "kplane: cached build $binary" >&2
  echo "$binary"
  exit 0
fi
mkdir -p "$out_dir"
echo "kplane: building Kubernetes $kube_version components (cold build takes 10-25 minutes on 2 cores)" >&2
start=$(date +%s)
cd "$here"
pkg=k8s.io/component-base/version
ldflags="-s -w -X $pkg.gitVersion=$kube_version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$(echo "$kube_version" | cut -d. -f2) -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$binary.tmp" .
mv "$binary.tmp" "$binary"
echo "kplane: built $binary in $(( $(date +%s) - start ))s" >&2
echo "$binary"
