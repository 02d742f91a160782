#!/usr/bin/env bash
# Builds Argo Workflows' workflow-controller, argoexec and argo CLI (v4.0.5, the only v4 release
# the Go module proxy serves) for the local control plane and `argo lint --offline`, and copies
# from the same module the CRDs the local cluster installs (crds/): Workflow, WorkflowTemplate
# and WorkflowTaskResult with their full schemas, and the kinds the controller's informers wait
# for with minimal ones. LOCAL TEST INFRASTRUCTURE ONLY: that release has reported security
# flaws, so these binaries are never shipped in an image or a deployment.
# Cached: rebuilt only when go.mod, go.sum, overlay/ or the Go version change (content hash in
# the name). Prints the directory holding the binaries (and crds/) on stdout as its last line.
#   build.sh [TOOL...]   only those tools (make demo: workflow-controller argoexec); default all
# three. A later call for another tool adds it to the same directory.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
out_root="${SIGNAL_ARGO_DIR:-$repo/.cache/argo}"
module=github.com/argoproj/argo-workflows/v4
version="$(sed -n "s|^\t$module \(v[^ ]*\).*|\1|p" "$here/go.mod")"
stamp="$( (cat "$here/go.mod" "$here/go.sum" "$here"/overlay/*; go version) | sha256sum | cut -c1-16)"
out="$out_root/argo-$version-$stamp"
all_tools=(workflow-controller argoexec argo)
tools=("$@")
((${#tools[@]})) || tools=("${all_tools[@]}")
for tool in "${tools[@]}"; do
  [[ " ${all_tools[*]} " == *" $tool "* ]] || { echo "argo: unknown tool '$tool': choose from ${all_tools[*]}" >&2; exit 2; }
done
# The kinds whose informers workflow-controller waits for, beyond Workflow, WorkflowTemplate and
# WorkflowTaskResult (minimal schemas: the controller only lists and watches them here).
extra_crds=(workflowtasksets workflowartifactgctasks clusterworkflowtemplates cronworkflows workfloweventbindings)
# The kinds Signal uses, with their full schemas (validation as on a real cluster).
full_crds=(workflows workflowtemplates workflowtaskresults)
# One build at a time per cache folder: a second caller (another checkout sharing the cache, a
# parallel test) waits here, then finds the first one's result.
mkdir -p "$out_root"
exec 9>"$out_root/.build.lock"
flock 9
cached=1
for tool in "${tools[@]}"; do [[ -x "$out/$tool" ]] || cached=0; done
for crd in "${extra_crds[@]}" "${full_crds[@]}"; do [[ -f "$out/crds/argoproj.io_$crd.yaml" ]] || cached=0; done
if [[ $cached == 1 ]]; then
  echo "argo: cached build $out" >&2
  echo "$out"
  exit 0
fi
mkdir -p "$out/crds"
echo "argo: building Argo Workflows $version ${tools[*]} (cold build takes 5-30 minutes on 2 cores)" >&2
start=$(date +%s)
cd "$here"
# The module zip lacks workflow/executor/osspecific's Linux file, so argoexec does not compile
# for Linux from it, and the UI bundle the argo CLI embeds (ui/dist/app). Build against an
# extracted copy of the zip (a workspace replace: overlays may not touch the module cache),
# adding our own files with an overlay (overlay/): the Linux file and a placeholder page.
zip="$(go mod download -json "$module@$version" | jq -r .Zip)"
src="$out_root/src-$version"
if [[ ! -d "$src" ]]; then
  rm -rf "$src.tmp"
  python3 -m zipfile -e "$zip" "$src.tmp"
  mv "$src.tmp" "$src"
fi
module_dir="$src/$module@$version"
printf 'go 1.26\n\nuse %s\n\nreplace %s %s => %s\n' "$here" "$module" "$version" "$module_dir" > "$out/go.work"
printf '{"Replace": {"%s": "%s", "%s": "%s"}}\n' \
  "$module_dir/workflow/executor/osspecific/signal_linux.go" "$here/overlay/signal_linux.go" \
  "$module_dir/ui/dist/app/index.html" "$here/overlay/ui-placeholder.html" > "$out/overlay.json"
ldflags="-s -w -X $module.version=$version -X $module.gitTag=$version -X $module.gitTreeState=clean -X $module.buildDate=1970-01-01T00:00:00Z"
for tool in "${tools[@]}"; do
  if [[ ! -x "$out/$tool" ]]; then
    GOWORK="$out/go.work" CGO_ENABLED=0 go build -overlay "$out/overlay.json" -trimpath -ldflags "$ldflags" \
      -o "$out/$tool.tmp" "$module/cmd/$tool"
    mv "$out/$tool.tmp" "$out/$tool"
  fi
done
for crd in "${extra_crds[@]}"; do
  cp "$module_dir/manifests/base/crds/minimal/argoproj.io_$crd.yaml" "$out/crds/"
done
for crd in "${full_crds[@]}"; do
  cp "$module_dir/manifests/base/crds/full/argoproj.io_$crd.yaml" "$out/crds/"
done
chmod -R u+w "$out/crds"
echo "argo: built $out in $(( $(date +%s) - start ))s" >&2
echo "$out"
