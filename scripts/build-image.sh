#!/usr/bin/env bash
# `make image`: build the pfs image the Helm chart runs by default (charts/pfs: image.repository, appVersion)
# from this checkout. Steps, each reusing what a previous run left:
#   1. podman (apt-get install podman buildah runc uidmap mmdebstrap, as root, when missing);
#   2. the pfs wheel, compiled core included, built on the host by maturin (`uv build`) into build/image/;
#   3. a base: $BASE_IMAGE if set, else python:3.11-slim when a registry answers, else a Debian bookworm base
#      made by mmdebstrap from Debian's packages (~3 min once; cached as $PFS_IMAGE_CACHE/debian-py311-N.tar and
#      imported as localhost/debian-py311:bookworm-N);
#   4. podman build with the flags these machines need (runc, explicit ulimits, host network).
# Prints the image name on the last line (only that with --print-name). Env: IMAGE (default: the chart's), BASE_IMAGE, PYTHON (the base's
# interpreter), PFS_IMAGE_CACHE (default ~/.cache/pfs-image), EXTRA_PACKAGES (e.g. jupyterlab).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/podman-flags.sh

repo=$(sed -n 's/^  repository: *//p' charts/pfs/values.yaml | head -1)
tag=$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' charts/pfs/Chart.yaml)
IMAGE=${IMAGE:-$repo:$tag}
CACHE=${PFS_IMAGE_CACHE:-$HOME/.cache/pfs-image}
# BASE_RECIPE: bump when the mmdebstrap command below changes, so cached bases of the old recipe are not reused
BASE_RECIPE=3
DEBIAN_BASE=localhost/debian-py311:bookworm-$BASE_RECIPE
log() { echo "build-image: $*" >&2; }
if [ "${1:-}" = "--print-name" ]; then echo "$IMAGE"; exit 0; fi  # what `make image` would build (tests/test_helm.py)

# 1. podman
need=()
for tool in podman runc mmdebstrap newuidmap; do command -v "$tool" >/dev/null 2>&1 || need+=("$tool"); done
if [ ${#need[@]} -gt 0 ]; then
    [ "$(id -u)" = 0 ] || { log "missing ${need[*]}: apt-get install podman buildah runc uidmap mmdebstrap"; exit 1; }
    log "installing podman buildah runc uidmap mmdebstrap with apt-get"
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq -o DPkg::Lock::Timeout=600 \
        podman buildah runc uidmap mmdebstrap) >/dev/null
fi

# 2. the wheel (maturin through uv's isolated build; cargo is incremental in native/target)
if ! command -v cargo >/dev/null 2>&1 && [ -x "$HOME/.cargo/bin/cargo" ]; then export PATH="$HOME/.cargo/bin:$PATH"; fi
UV=$(command -v uv || echo "${PYTHON_HOST:-python3} -m uv")
# Rebuilt only when its inputs changed (a stamp keyed on them, as scripts/setup.sh does): minutes of Rust.
want=$( (cat pyproject.toml; find native operators dask_pfs airflow_pfs -path native/target -prune -o -type f \
    \( -name '*.rs' -o -name '*.py' -o -name 'Cargo.*' -o -name '*.typed' \) -print0 | sort -z | xargs -0 cat) \
    | sha256sum | cut -c1-16)
if [ "$(cat build/image/.stamp 2>/dev/null)" != "$want" ] || ! ls build/image/*.whl >/dev/null 2>&1; then
    rm -rf build/image && mkdir -p build/image
    log "building the pfs wheel (maturin, release profile)"
    $UV build -q --wheel --out-dir build/image . >&2
    echo "$want" > build/image/.stamp
fi

# 3. the base
if [ -z "${BASE_IMAGE:-}" ]; then
    if podman image exists docker.io/library/python:3.11-slim \
        || timeout 60 podman pull -q docker.io/library/python:3.11-slim >/dev/null 2>&1; then
        BASE_IMAGE=docker.io/library/python:3.11-slim
        PYTHON=${PYTHON:-/usr/local/bin/python3.11}
    else
        if ! podman image exists "$DEBIAN_BASE"; then
            mkdir -p "$CACHE"
            if [ ! -s "$CACHE/debian-py311-$BASE_RECIPE.tar" ]; then
                log "no registry: making a Debian bookworm base with mmdebstrap (~3 min, once)"
                # merged /usr set up by mmdebstrap's hook, not by the usrmerge package (which pulls in perl, 46 MB);
                # no recommended packages, docs, man pages or translations
                mmdebstrap --quiet --variant=minbase --include=python3.11,python3-venv,ca-certificates \
                    --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr --aptopt='APT::Install-Recommends "false"' \
                    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
                    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/locale/*' \
                    --dpkgopt='path-exclude=/usr/share/info/*' \
                    bookworm "$CACHE/debian-py311-$BASE_RECIPE.partial.tar" "${DEBIAN_MIRROR:-http://deb.debian.org/debian}" \
                    </dev/null >&2
                mv "$CACHE/debian-py311-$BASE_RECIPE.partial.tar" "$CACHE/debian-py311-$BASE_RECIPE.tar"
            fi
            podman import -q "$CACHE/debian-py311-$BASE_RECIPE.tar" "$DEBIAN_BASE" >/dev/null
        fi
        BASE_IMAGE=$DEBIAN_BASE
        PYTHON=${PYTHON:-/usr/bin/python3.11}
    fi
fi
PYTHON=${PYTHON:-/usr/local/bin/python3.11}

# 4. the image; the host's CA bundle goes in as a build secret (PyPI through a TLS-inspecting proxy), not a layer
CA=${PFS_BUILD_CA_FILE:-${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}}
secret=()
[ -s "$CA" ] && secret=(--secret "id=cacert,src=$CA")
log "podman build -t $IMAGE (base $BASE_IMAGE)"
podman build "${PODMAN_FLAGS[@]}" "${secret[@]}" --build-arg "BASE_IMAGE=$BASE_IMAGE" --build-arg "PYTHON=$PYTHON" \
    --build-arg "EXTRA_PACKAGES=${EXTRA_PACKAGES:-}" -t "$IMAGE" -f Dockerfile . >&2
echo "$IMAGE"
