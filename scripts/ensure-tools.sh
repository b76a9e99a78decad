#!/usr/bin/env bash
# System tools the test suite uses besides Python packages: OpenSSH server (SFTP tests),
# setpriv (util-linux, permission tests), strace (counting the system calls of a pruned scan)
# setfacl/getfacl (acl) and setfattr/getfattr (attr) (cp's xattr and ACL tests),
# rsync (the differential tests' oracle), helm (chart tests), and gcc + libfuse3-dev + fuse3 (latfs, for the fault suite). Installs what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
missing=()
command -v sshd >/dev/null 2>&1 || [ -x /usr/sbin/sshd ] || missing+=(openssh-server)
command -v setpriv >/dev/null 2>&1 || missing+=(util-linux)
command -v strace >/dev/null 2>&1 || missing+=(strace)
# getfattr/setfattr and getfacl/setfacl: the xattr and ACL tests (tests/test_xattrs_manifest.py)
command -v setfattr >/dev/null 2>&1 || missing+=(attr)
command -v setfacl >/dev/null 2>&1 || missing+=(acl)
# rsync: the oracle of the differential sync tests (tests/test_oracle.py: pfs sync against rsync -aHAX --delete)
command -v rsync >/dev/null 2>&1 || missing+=(rsync)
# latfs (benchmarks/latfs), the FUSE file system the fault suite stops and unmounts mid-job (tests/faults/)
command -v fusermount3 >/dev/null 2>&1 || missing+=(fuse3)
[ -f /usr/include/fuse3/fuse.h ] || missing+=(libfuse3-dev)
command -v pkg-config >/dev/null 2>&1 || missing+=(pkg-config)
command -v gcc >/dev/null 2>&1 || missing+=(gcc)
# patch: applies third_party/fake-gcs-server/xml-api.patch (scripts/build-fake-gcs.sh)
command -v patch >/dev/null 2>&1 || missing+=(patch)
if [ ${#missing[@]} -gt 0 ] && [ "$(id -u)" = 0 ]; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}") >/dev/null
fi
# miri (scripts/test-native.sh runs the core's thread-pool tests under it): a rustup component of the nightly
# toolchain, about a minute to install. Without rustup or a network, test-native.sh says so and goes on.
rustup=$(command -v rustup || echo "$HOME/.cargo/bin/rustup")
if [ -x "$rustup" ] && ! "$rustup" run nightly cargo miri --version >/dev/null 2>&1; then
    echo "ensure-tools: installing miri (rustup component add --toolchain nightly miri rust-src)..." >&2
    if "$rustup" toolchain list | grep -q '^nightly'; then
        add=("$rustup" component add --toolchain nightly miri rust-src)
    else
        add=("$rustup" toolchain install nightly --profile minimal -c miri -c rust-src)
    fi
    if "${add[@]}" >/dev/null 2>&1; then
        "$rustup" run nightly cargo miri setup >/dev/null 2>&1 || true
    else
        echo "ensure-tools: miri could not be installed (no network or no nightly toolchain); its tests will run natively only" >&2
    fi
fi
./scripts/ensure-helm.sh >/dev/null
# Azurite (npm), the Azure Blob server of the object-store tests (tests/stores.py), in a project-local prefix:
# never whatever this machine has on its PATH.  Node comes from apt when missing.
AZURITE_VERSION=3.37.0
if [ ! -x build/node/node_modules/.bin/azurite-blob ] || \
    ! grep -q "\"version\": \"$AZURITE_VERSION\"" build/node/node_modules/azurite/package.json 2>/dev/null; then
    if ! command -v npm >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
        (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm) >/dev/null
    fi
    mkdir -p build/node
    npm install --silent --no-audit --no-fund --prefix build/node "azurite@$AZURITE_VERSION" >/dev/null
fi
# fake-gcs-server with the XML API's writes (the GCS server of the object-store tests), built from the Go module proxy
./scripts/build-fake-gcs.sh >/dev/null
