#!/usr/bin/env bash
# Print the path of a usable helm binary, installing helm from source with `go install` if none exists.
# Looks in: $HELM, PATH, $(go env GOPATH)/bin/helm, /usr/local/bin/helm. The first install takes ~6 min
# and ~1 GB of Go caches; later ones ~20 s. Exit status 1 (message on stderr) when helm cannot be had.
set -euo pipefail
HELM_VERSION=${HELM_VERSION:-v3.22.0}

usable() { [ -n "$1" ] && [ -x "$1" ] && "$1" version --short >/dev/null 2>&1; }

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
    echo "ensure-helm: no helm binary and no Go toolchain to build one; install helm ${HELM_VERSION}" >&2
    exit 1
fi
echo "ensure-helm: installing helm ${HELM_VERSION} with go install (several minutes the first time)..." >&2
if ! go install "helm.sh/helm/v3/cmd/helm@${HELM_VERSION}" >&2; then
    echo "ensure-helm: go install helm.sh/helm/v3/cmd/helm@${HELM_VERSION} failed" >&2
    exit 1
fi
if usable "$gopath_bin/helm"; then
    echo "$gopath_bin/helm"
    exit 0
fi
echo "ensure-helm: helm built but $gopath_bin/helm does not run" >&2
exit 1
