#!/usr/bin/env bash
# Installs droce's build and test dependencies from Debian 12 packages.
set -euo pipefail
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO=sudo
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends \
  build-essential g++ meson ninja-build pkg-config git \
  dpdk dpdk-dev libdpdk-dev \
  libibverbs-dev ibverbs-utils ibverbs-providers rdma-core rdmacm-utils perftest qperf \
  libabsl-dev libgtest-dev libgmock-dev googletest \
  libpcap-dev tshark \
  clang libclang-rt-14-dev \
  python3 python3-matplotlib python3-pyverbs \
  iproute2 iputils-ping procps \
  nftables iperf3 ethtool \
  ucx-utils openmpi-bin libopenmpi-dev netpipe-openmpi libfabric-bin \
  libbpf-dev linux-libc-dev valgrind libns3-dev \
  dpkg-dev debhelper lintian >/dev/null
# nftables, iperf3, ethtool: the loss experiment's kernel-TCP baseline (tools/bench/loss/tcp.sh);
# ucx-utils, openmpi-bin, libopenmpi-dev (mpicc), netpipe-openmpi, libfabric-bin: the communication
# stacks run unmodified on droce (tests/stacks, doc/stacks.md) and across namespaces (tests/netns);
# libbpf-dev (and clang above): droce's XDP program and droced's interface binding (doc/netdev.md);
# tshark (dumpcap): tests/netns; valgrind: the bench stage's instruction count (callgrind).
# libns3-dev: droce's transport inside ns-3 (sim/ns3: ns3_incast, ns3_fabric; doc/cc.md), skipped without it.
# dpkg-dev, debhelper, lintian: the Debian packages (debian/, tools/build-deb.sh, tests/install/package.sh).
