#!/usr/bin/env bash
# Builds Kueue's manager (v0.17.0, `sigs.k8s.io/kueue/cmd/kueue`: its controllers and webhooks)
# from the Go module proxy for the local control plane, and copies from the same module the
# Kueue CRDs the local cluster installs (crds/). LOCAL TEST INFRASTRUCTURE ONLY: Signal ships
# no Kueue; on a real cluster, install Kueue yourself.
# Cached: rebuilt only when go.mod, go.sum or the Go version change (content hash in the name).
# Prints the directory holding the binary (and crds/) on stdout as its last line.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
out_root="${SIGNAL_KUEUE_DIR:-$repo/.cache/kueue}"
module=sigs.k8s.io/kueue
version="$(sed -n "s|^\t$module \(v[^ ]*\).*|\1|p" "$here/go.mod")"
stamp="$( (cat "$here/go.mod" "$here/go.sum"; go version) | sha256sum | cut -c1-16)"
out="$out_root/kueue-$version-$stamp"
crds=(resourceflavors clusterqueues localqueues workloads cohorts admissionchecks workloadpriorityclasses topologies
  multikueueclusters multikueueconfigs provisioningrequestconfigs)
cached=1
[[ -x "$out/kueue" ]] || cached=0
for crd in "${crds[@]}"; do [[ -f "$out/crds/kueue.x-k8s.io_$crd.yaml" ]] || cached=0; done
if [[ $cached == 1 ]]; then
  echo "kueue: cached build $out" >&2
  echo "$out"
  exit 0
fi
mkdir -p "$out/crds"
echo "kueue: building Kueue $version (cold build takes 5-20 minutes on 2 cores)" >&2
start=$(date +%s)
cd "$here"
if [[ ! -x "$out/kueue" ]]; then
  CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$out/kueue.tmp" "$module/cmd/kueue"
  mv "$out/kueue.tmp" "$out/kueue"
fi
module_dir="$(go list -m -json "$module" | jq -r .Dir)"
for crd in "${crds[@]}"; do
  cp "$module_dir/config/components/crd/bases/kueue.x-k8s.io_$crd.yaml" "$out/crds/"
done
chmod -R u+w "$out/crds"
echo "kueue: built $out in $(( $(date +%s) - start ))s" >&2
echo "$out"
