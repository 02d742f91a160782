#!/usr/bin/env bash
# Builds the real Kubeflow MPI operator v0.8.0 (`cmd/mpi-operator`) for the local cluster, from
# its source tree: $SIGNAL_MPI_OPERATOR_SRC, default ../shared/upstream-src/mpi-operator-v0.8.0
# beside this repository (elsewhere: `git clone --branch v0.8.0` of github.com/kubeflow/mpi-operator).
# The Go module proxy refuses the operator's own module but serves all its dependencies, so the
# tree is copied (it may be read-only) to a build directory and built there with -mod=mod.
# Nothing of it is committed here. Cached: rebuilt only when the source tree or the Go version
# change (content hash in the name). Prints the binary's path on stdout as its last line.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
src="${SIGNAL_MPI_OPERATOR_SRC:-$repo/../shared/upstream-src/mpi-operator-v0.8.0}"
out_root="${SIGNAL_MPI_OPERATOR_DIR:-$repo/.cache/mpi-operator}"
if [[ ! -f "$src/go.mod" || ! -d "$src/cmd/mpi-operator" ]]; then
  echo "mpi-operator: no source tree at $src (need go.mod and cmd/mpi-operator): run" \
    "\`git clone --branch v0.8.0 https://github.com/kubeflow/mpi-operator DIR\` and set SIGNAL_MPI_OPERATOR_SRC=DIR" >&2
  exit 1
fi
src="$(cd "$src" && pwd)"
stamp="$( (cd "$src" && find go.mod go.sum cmd pkg -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum; go version) \
  | sha256sum | cut -c1-16)"
out="$out_root/mpi-operator-$stamp"
# One build at a time per cache folder: a second caller (another checkout sharing the cache, a
# parallel test) waits here, then finds the first one's result.
mkdir -p "$out_root"
exec 9>"$out_root/.build.lock"
flock 9
if [[ -x "$out/mpi-operator" ]]; then
  echo "mpi-operator: cached build $out/mpi-operator" >&2
  echo "$out/mpi-operator"
  exit 0
fi
echo "mpi-operator: building the Kubeflow MPI operator from $src (cold build takes several minutes on 2 cores)" >&2
start=$(date +%s)
mkdir -p "$out"
work="$out/src"
rm -rf "$work"
mkdir -p "$work"
cp -R "$src/go.mod" "$src/go.sum" "$src/cmd" "$src/pkg" "$work/"
chmod -R u+w "$work"
(cd "$work" && GOFLAGS=-mod=mod CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" \
  -o "$out/mpi-operator.tmp" ./cmd/mpi-operator)
mv "$out/mpi-operator.tmp" "$out/mpi-operator"
rm -rf "$work"
echo "mpi-operator: built $out/mpi-operator in $(( $(date +%s) - start ))s" >&2
echo "$out/mpi-operator"
