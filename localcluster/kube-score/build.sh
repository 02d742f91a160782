#!/usr/bin/env bash
# Builds kube-score (github.com/zegl/kube-score/cmd/kube-score, pinned in go.mod) so that
# tests/integration/test_kube_score.py scores the rendered bundle with an independent linter.
# TEST TOOLING ONLY: never shipped. Cached: rebuilt only when go.mod, go.sum or the Go version
# change (content hash in the name). Prints the path of the binary on stdout as its last line.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
out_root="${SIGNAL_KUBE_SCORE_DIR:-$repo/.cache/kube-score}"
module=github.com/zegl/kube-score
version="$(sed -n "s|^\t$module \(v[^ ]*\).*|\1|p" "$here/go.mod")"
stamp="$( (cat "$here/go.mod" "$here/go.sum"; go version) | sha256sum | cut -c1-16)"
out="$out_root/kube-score-$version-$stamp"
mkdir -p "$out_root"
exec 9>"$out_root/.build.lock"
flock 9
if [[ -x "$out/kube-score" ]]; then
  echo "kube-score: cached build $out/kube-score" >&2
  echo "$out/kube-score"
  exit 0
fi
mkdir -p "$out"
echo "kube-score: building kube-score $version" >&2
start=$(date +%s)
cd "$here"
CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=$version" -o "$out/kube-score.tmp" "$module/cmd/kube-score"
mv "$out/kube-score.tmp" "$out/kube-score"
echo "kube-score: built $out/kube-score in $(( $(date +%s) - start ))s" >&2
echo "$out/kube-score"
