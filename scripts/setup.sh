#!/usr/bin/env bash
# Installs what building and testing upf needs on a fresh Debian machine (idempotent):
# the pinned Rust toolchain, clang and libbpf-dev for the BPF programs, nightly + cargo-fuzz
# for the fuzz smoke run, tshark, scapy and Go (for interop/go-smf, on go-pfcp v0.0.24) for
# the interoperability cross-checks, iproute2, iputils-ping, iperf3, procps and ethtool for
# `upf demo` and the end-to-end suite, kubernetes-validate and kustomize for the Kubernetes
# example's check.
set -euo pipefail
cd "$(dirname "$0")/.."
export DEBIAN_FRONTEND=noninteractive

apt_pkgs=()
command -v tshark >/dev/null || apt_pkgs+=(tshark)
command -v python3 >/dev/null || apt_pkgs+=(python3 python3-pip)
command -v cc >/dev/null || apt_pkgs+=(build-essential)
# The BPF programs (crates/*/bpf/*.bpf.c) are built by clang with libbpf's headers
# (bpf/bpf_helpers.h, bpf/bpf_endian.h) and the kernel's UAPI headers (linux/bpf.h).
command -v clang >/dev/null || apt_pkgs+=(clang)
[[ -f /usr/include/bpf/bpf_helpers.h ]] || apt_pkgs+=(libbpf-dev)
[[ -f /usr/include/linux/bpf.h ]] || apt_pkgs+=(linux-libc-dev)
# `upf demo` and the end-to-end suite (crates/upf/tests/e2e.rs, scripts/e2e.sh; root):
# namespaces, veths and TUN (iproute2), real traffic (iperf3, ping), sysctl (procps), veth
# offload settings (ethtool).
command -v ip >/dev/null || apt_pkgs+=(iproute2)
command -v ping >/dev/null || apt_pkgs+=(iputils-ping)
command -v iperf3 >/dev/null || apt_pkgs+=(iperf3)
command -v sysctl >/dev/null || apt_pkgs+=(procps)
command -v ethtool >/dev/null || apt_pkgs+=(ethtool)
# The cluster store: etcd-client compiles etcd's protobuf API (protoc); tests start etcd.
command -v protoc >/dev/null || apt_pkgs+=(protobuf-compiler)
[[ -f /usr/include/google/protobuf/descriptor.proto ]] || apt_pkgs+=(libprotobuf-dev)
command -v etcd >/dev/null || apt_pkgs+=(etcd-server)
# Go: the tarball's /usr/local/go, else Debian's (bookworm: 1.19, enough for go-pfcp v0.0.24).
go_bin=$(command -v go || ls /usr/local/go/bin/go /usr/lib/go-1.*/bin/go 2>/dev/null | tail -n 1 || true)
[[ -n $go_bin ]] || apt_pkgs+=(golang-go)
if ((${#apt_pkgs[@]})); then
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${apt_pkgs[@]}" >/dev/null
fi

if ! command -v cargo >/dev/null; then
  echo "setup: no cargo/rustup on this machine; install Rust via rustup first" >&2
  exit 1
fi
toolchain=$(sed -n 's/^channel *= *"\(.*\)"/\1/p' rust-toolchain.toml)
rustup toolchain list | grep -q "^$toolchain" || rustup toolchain install "$toolchain" --profile minimal
rustup component add --toolchain "$toolchain" rustfmt clippy >/dev/null 2>&1 || true
# The fuzz smoke run needs nightly and cargo-fuzz; without them scripts/fuzz-smoke.sh says so
# loudly and skips, rather than failing the whole setup on a machine that cannot fetch nightly.
rustup toolchain list | grep -q '^nightly' || rustup toolchain install nightly --profile minimal \
  || echo "setup: WARNING: no nightly toolchain; the fuzz smoke run will be skipped" >&2
command -v cargo-fuzz >/dev/null || cargo +"$toolchain" install cargo-fuzz --locked --quiet \
  || echo "setup: WARNING: cargo-fuzz did not install; the fuzz smoke run will be skipped" >&2

python3 -c 'import scapy, sys; sys.exit(scapy.VERSION != "2.8.0")' 2>/dev/null \
  || python3 -m pip install --quiet --root-user-action=ignore 'scapy==2.8.0'
# scripts/check-k8s.py: Kubernetes' schemas (bundled, offline) for deploy/kubernetes.
python3 -c 'import kubernetes_validate as k, sys; sys.exit(k.__version__ != "1.37.0")' 2>/dev/null \
  || python3 -m pip install --quiet --root-user-action=ignore 'kubernetes-validate==1.37.0'

# The go-pfcp client: fetch its modules (pinned by interop/go-smf/go.sum) and build it once,
# so that the interop run only rebuilds from the cache. GOTOOLCHAIN=local: never download a
# newer Go toolchain than the one installed.
go_bin=${go_bin:-$(command -v go || echo /usr/bin/go)}
"$go_bin" version
mkdir -p target
(cd interop/go-smf && GOFLAGS=-mod=mod GOTOOLCHAIN=local CGO_ENABLED=0 "$go_bin" build -o ../../target/go-smf .)
# kustomize renders deploy/kubernetes for scripts/check-k8s.py (~1 min to build the first
# time; it needs Go >= 1.22, so an old Debian Go leaves it out, said here and by the check).
[[ $(target/tools/kustomize version 2>/dev/null) == v5.7.1 ]] \
  || GOBIN=$PWD/target/tools GOFLAGS=-mod=mod GOTOOLCHAIN=local CGO_ENABLED=0 \
    "$go_bin" install sigs.k8s.io/kustomize/kustomize/v5@v5.7.1 \
  || echo "setup: WARNING: kustomize did not install; check-k8s cannot render the example" >&2
echo "setup: ok"
