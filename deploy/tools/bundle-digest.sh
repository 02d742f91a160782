#!/usr/bin/env bash
# Computes the canonical bundle digest of a ConfigMap with standard tools only
# (jq, base64, sha256sum, sort). Input: the ConfigMap as JSON on stdin, e.g.
#   kubectl get configmap -n NS NAME -o json | deploy/tools/bundle-digest.sh
# Output: sha256:<64 hex>, the value to pin in a CertificationProfile's spec.source.digest.
# The recipe is documented in shared/digests.py and the README.
set -euo pipefail
export LC_ALL=C
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cat >"$dir/.cm.json"
mkdir "$dir/files"
jq -r '(.data // {}) | keys[]' "$dir/.cm.json" | while IFS= read -r key; do
  jq -j --arg k "$key" '.data[$k]' "$dir/.cm.json" >"$dir/files/$key"
done
jq -r '(.binaryData // {}) | keys[]' "$dir/.cm.json" | while IFS= read -r key; do
  jq -r --arg k "$key" '.binaryData[$k]' "$dir/.cm.json" | base64 -d >"$dir/files/$key"
done
cd "$dir/files"
sum=$(ls -A | sort | xargs -r sha256sum -- | sha256sum | cut -d' ' -f1)
echo "sha256:$sum"
