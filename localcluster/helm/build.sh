#!/usr/bin/env bash
# Builds the `helm` CLI (helm.sh/helm/v4/cmd/helm, the newest v4 release the Go module proxy
# serves, pinned in go.mod) so that tests lint, render, install, upgrade and uninstall Signal's
# chart (charts/signal) with the real Helm, and `make release` packages it. LOCAL TEST AND
# RELEASE TOOLING ONLY: Signal ships no Helm binary.
# Cached: rebuilt only when go.mod, go.sum or the Go version change (content hash in the name).
# Prints the path of the binary on stdout as its last line.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
out_root="${SIGNAL_HELM_DIR:-$repo/.cache/helm}"
module=helm.sh/helm/v4
version="$(sed -n "s|^\t$module \(v[^ ]*\).*|\1|p" "$here/go.mod")"
stamp="$( (cat "$here/go.mod" "$here/go.sum"; go version) | sha256sum | cut -c1-16)"
out="$out_root/helm-$version-$stamp"
# One build at a time per cache folder: a second caller (another checkout sharing the cache, a
# parallel test) waits here, then finds the first one's result.
mkdir -p "$out_root"
exec 9>"$out_root/.build.lock"
flock 9
if [[ -x "$out/helm" ]]; then
  echo "helm: cached build $out/helm" >&2
  echo "$out/helm"
  exit 0
fi
mkdir -p "$out"
echo "helm: building Helm $version (cold build: about 4.5 CPU-minutes, 10 minutes on 2 busy cores)" >&2
start=$(date +%s)
cd "$here"
ldflags="-s -w -X $module/internal/version.version=$version -X $module/internal/version.gitTreeState=clean"
CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$out/helm.tmp" "$module/cmd/helm"
mv "$out/helm.tmp" "$out/helm"
echo "helm: built $out/helm in $(( $(date +%s) - start ))s" >&2
echo "$out/helm"
