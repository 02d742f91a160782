#!/usr/bin/env bash
# Installs the Debian packages the project needs (only those missing), as root.
# Go (>= 1.26) and Python (>= 3.11) are expected on the machine already.
set -euo pipefail
packages=()
command -v jq >/dev/null || packages+=(jq)
command -v openssl >/dev/null || packages+=(openssl)
# Real OpenMPI ranks for MPIJob checks on the local control plane.
command -v mpirun >/dev/null || packages+=(openmpi-bin)
# The dashboard's browser test drives Debian's Chromium with Playwright.
[[ -x /usr/bin/chromium ]] || packages+=(chromium)
# Container images (localcluster/images/build.sh): buildah builds the Dockerfiles (chroot
# isolation, vfs storage) on a Debian base that mmdebstrap makes from Debian's packages.
command -v buildah >/dev/null || packages+=(buildah)
command -v mmdebstrap >/dev/null || packages+=(mmdebstrap)
# Real nodes (localcluster/realnode): one containerd + runc per node, the CNI bridge and
# host-local plugins, iptables for kube-proxy, iproute2 for the nodes' network namespaces.
command -v containerd >/dev/null || packages+=(containerd)
command -v runc >/dev/null || packages+=(runc)
[[ -x /usr/lib/cni/bridge ]] || packages+=(containernetworking-plugins)
command -v iptables >/dev/null || packages+=(iptables)
command -v ip >/dev/null || packages+=(iproute2)
# nft: each real-node cluster's own table keeps its Pods off the host's other services.
command -v nft >/dev/null || packages+=(nftables)
if ((${#packages[@]})); then
  echo "installing Debian packages: ${packages[*]}" >&2
  if [[ $(id -u) -ne 0 ]]; then
    echo "not root: install ${packages[*]} yourself (e.g. sudo apt-get install ${packages[*]})" >&2
    exit 1
  fi
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${packages[@]}"
fi
command -v go >/dev/null || { echo "Go 1.26+ is required to build the local control plane" >&2; exit 1; }
