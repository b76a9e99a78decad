#!/usr/bin/env bash
# Print the path of a usable kube-apiserver, building it from Go modules if none exists, and make sure
# etcd is installed (Debian's etcd-server). tests/test_kube_apiserver.py uses both to apply the rendered
# chart to a real API server with `kubectl apply --dry-run=server` (kind/k3s need a container engine or
# GitHub downloads, which this machine does not have).
#
# k8s.io/kubernetes replaces its k8s.io/* staging modules with local directories, so `go install
# pkg@version` refuses it: the build goes through a throw-away module that requires k8s.io/kubernetes and
# points each staging module at its published v0.X.Y, and the version is stamped with -ldflags (unstamped, the
# server says v0.0.0-master and Helm refuses charts with a kubeVersion). The first build takes ~10 min on 2 idle
# cores (49 min measured with the machine's load average at 20-35), later ones ~1 min (link only); the binary
# lands in $(go env GOPATH)/bin. Not run by `make test`: the `kube` tests skip without it.
# Exit status 1 (message on stderr) on failure.
set -euo pipefail
KUBE_VERSION=${KUBE_VERSION:-v1.37.2}

# A binary built without the version stamp reports v0.0.0-master, which charts' kubeVersion checks refuse.
usable() { [ -n "$1" ] && [ -x "$1" ] && "$1" --version 2>/dev/null | grep -q 'Kubernetes v1\.'; }

if ! command -v etcd >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "ensure-kube-apiserver: installing etcd-server (Debian)..." >&2
        (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq etcd-server) >&2
    else
        echo "ensure-kube-apiserver: etcd not found; install etcd-server (Debian) or an etcd binary" >&2
        exit 1
    fi
fi

gopath_bin=""
if command -v go >/dev/null 2>&1; then
    gopath_bin="$(go env GOPATH)/bin"
fi
for cand in "${KUBE_APISERVER:-}" "$(command -v kube-apiserver 2>/dev/null || true)" \
    "${gopath_bin:+$gopath_bin/kube-apiserver}"; do
    if usable "$cand"; then
        echo "$cand"
        exit 0
    fi
done
if [ -z "$gopath_bin" ]; then
    echo "ensure-kube-apiserver: no kube-apiserver and no Go toolchain to build one" >&2
    exit 1
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
minor=${KUBE_VERSION#v1.}
staging_version="v0.${minor}"
echo "ensure-kube-apiserver: building kube-apiserver ${KUBE_VERSION} from Go modules (~10 min the first time)..." >&2
cd "$work"
go mod init pfs.local/kube-apiserver-build >/dev/null 2>&1
kube_gomod=$(go mod download -json "k8s.io/kubernetes@${KUBE_VERSION}" | sed -n 's/^\t"GoMod": "\(.*\)",$/\1/p')
[ -f "$kube_gomod" ] || { echo "ensure-kube-apiserver: cannot download k8s.io/kubernetes@${KUBE_VERSION}" >&2; exit 1; }
{
    echo "require k8s.io/kubernetes ${KUBE_VERSION}"
    # every `k8s.io/x => ./staging/src/k8s.io/x` line of Kubernetes' go.mod becomes `k8s.io/x => k8s.io/x v0.N.P`
    sed -n 's#^[[:space:]]*\(k8s\.io/[a-z0-9-]*\) => \./staging/src/.*#replace \1 => \1 '"${staging_version}"'#p' "$kube_gomod"
} >>go.mod
if ! grep -q '^replace k8s.io/api ' go.mod; then
    echo "ensure-kube-apiserver: found no staging replacements in $kube_gomod" >&2
    exit 1
fi
go get "k8s.io/kubernetes/cmd/kube-apiserver@${KUBE_VERSION}" >&2
major_minor=${KUBE_VERSION#v}
pkg=k8s.io/component-base/version
ldflags="-X $pkg.gitVersion=${KUBE_VERSION} -X $pkg.gitMajor=${major_minor%%.*} -X $pkg.gitMinor=$(echo "$minor" | cut -d. -f1)"
ldflags="$ldflags -X $pkg.gitTreeState=clean -X $pkg.buildDate=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
nice go build -trimpath -ldflags "$ldflags" -o "$gopath_bin/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver >&2
if usable "$gopath_bin/kube-apiserver"; then
    echo "$gopath_bin/kube-apiserver"
    exit 0
fi
echo "ensure-kube-apiserver: built $gopath_bin/kube-apiserver but it does not run" >&2
exit 1
