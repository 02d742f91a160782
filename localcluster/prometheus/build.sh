#!/usr/bin/env bash
# Builds Prometheus's `prometheus` server and `promtool` (github.com/prometheus/prometheus, whose
# module versions are v0.3xx.y for Prometheus 3.xx.y) from the Go module proxy, so that Signal's
# alert rules (deploy/monitoring/) are checked and unit-tested by promtool and its metrics are
# scraped by a real Prometheus in the tests. LOCAL TEST INFRASTRUCTURE ONLY: Signal ships no
# Prometheus; on a real cluster the operator's own Prometheus (Operator) scrapes the controller.
# Built with the `remove_all_sd` tag: every service discovery plugin (AWS, Azure, GCE, Consul,
# ...) is left out; the tests use a static scrape configuration (promtool still links the
# Kubernetes discovery it imports directly). The web UI's assets are not embedded (no
# `builtinassets` tag): the tests use the HTTP API only.
# Cold build measured (empty Go build cache, modules downloaded): 330 s user + 52 s system CPU,
# 1063 s wall at nice 19 on a shared 2-core machine under load 11; 579 s wall at normal priority
# with the machine's Go build cache.
# Cached: rebuilt only when go.mod, go.sum, the tags or the Go version change (content hash in the
# name). Prints the directory holding both binaries on stdout as its last line.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
out_root="${SIGNAL_PROMETHEUS_DIR:-$repo/.cache/prometheus}"
module=github.com/prometheus/prometheus
tags=remove_all_sd
version="$(sed -n "s|^\t$module \(v[^ ]*\).*|\1|p" "$here/go.mod")"
stamp="$( (cat "$here/go.mod" "$here/go.sum"; echo "$tags"; go version) | sha256sum | cut -c1-16)"
out="$out_root/prometheus-$version-$stamp"
# One build at a time per cache folder: a second caller waits here, then finds the first one's
# result.
mkdir -p "$out_root"
exec 9>"$out_root/.build.lock"
flock 9
if [[ -x "$out/prometheus" && -x "$out/promtool" ]]; then
  echo "prometheus: cached build $out" >&2
  echo "$out"
  exit 0
fi
mkdir -p "$out"
echo "prometheus: building Prometheus $version prometheus and promtool (cold: about 6.5 minutes of CPU, 3-4 minutes on 2 idle cores)" >&2
start=$(date +%s)
cd "$here"
for cmd in promtool prometheus; do
  CGO_ENABLED=0 go build -trimpath -tags "$tags" -ldflags "-s -w" -o "$out/$cmd.tmp" "$module/cmd/$cmd"
  mv "$out/$cmd.tmp" "$out/$cmd"
done
echo "prometheus: built $out in $(( $(date +%s) - start ))s" >&2
echo "$out"
