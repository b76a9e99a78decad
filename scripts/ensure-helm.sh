#!/usr/bin/env bash
# Print the path of a usable helm binary, installing helm from source with `go install` if none exists.
# Looks in: $HELM, PATH, $(go env GOPATH)/bin/helm, /usr/local/bin/helm. The first install takes ~6 min
# and ~1 GB of Go caches; later ones ~20 s. Exit status 1 (message on stderr) when helm cannot be had.
#
# "Usable" means it renders this project's chart as printed in the docs (`helm template t charts/pfs`, no
# --kube-version): a helm built by a plain `go install` reports Kubernetes v1.20 as its default and refuses
# the chart's `kubeVersion: >=1.25.0-0`. helm's own Makefile stamps the default from its client-go version
# with -ldflags; the same stamp is given here, so `helm template` and `helm install --dry-run` work as printed.
set -euo pipefail
cd "$(dirname "$0")/.."
HELM_VERSION=${HELM_VERSION:-v3.22.0}
# The Kubernetes version helm v3.22.0's Makefile derives from its client-go (v0.37.0 -> 1.37).
HELM_KUBE_MAJOR=${HELM_KUBE_MAJOR:-1}
HELM_KUBE_MINOR=${HELM_KUBE_MINOR:-37}

usable() {
    [ -n "$1" ] && [ -x "$1" ] && "$1" version --short >/dev/null 2>&1 &&
        "$1" template ensure-helm charts/pfs >/dev/null 2>&1
}

gopath_bin=""
if command -v go >/dev/null 2>&1; then
    gopath_bin="$(go env GOPATH)/bin"
fi

for cand in "${HELM:-}" "$(command -v helm 2>/dev/null || true)" \
    "${gopath_bin:+$gopath_bin/helm}" /usr/local/bin/helm; do
    if usable "$cand"; then
        echo "$cand"
        exit 0
    fi
done

if [ -z "$gopath_bin" ]; then
    echo "ensure-helm: no helm binary that renders charts/pfs and no Go toolchain to build one; install helm ${HELM_VERSION}" >&2
    exit 1
fi
echo "ensure-helm: installing helm ${HELM_VERSION} with go install (several minutes the first time)..." >&2
ldflags=""
for pkg in helm.sh/helm/v3/pkg/chartutil helm.sh/helm/v3/pkg/lint/rules; do
    ldflags="$ldflags -X $pkg.k8sVersionMajor=$HELM_KUBE_MAJOR -X $pkg.k8sVersionMinor=$HELM_KUBE_MINOR"
done
if ! go install -ldflags "$ldflags" "helm.sh/helm/v3/cmd/helm@${HELM_VERSION}" >&2; then
    echo "ensure-helm: go install helm.sh/helm/v3/cmd/helm@${HELM_VERSION} failed" >&2
    exit 1
fi
if usable "$gopath_bin/helm"; then
    echo "$gopath_bin/helm"
    exit 0
fi
echo "ensure-helm: helm built at $gopath_bin/helm but it does not render charts/pfs (helm template t charts/pfs)" >&2
exit 1
