#!/usr/bin/env bash
# The GCS server of the object-store tests: fake-gcs-server (fsouza, BSD-2-Clause) at a fixed version from the Go
# module proxy, with third_party/fake-gcs-server/xml-api.patch applied: the XML API's object writes (PUT, copy,
# conditional create, DELETE, multipart uploads), list start-after and quoted listing ETags, which obstore (Rust
# object_store) sends and upstream does not serve (its issues 331 and 852).  Built into build/go once per version and
# patch; Go's module and build caches make a rebuild fast.  Prints the binary's path.
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION=v1.56.1
patch_file=third_party/fake-gcs-server/xml-api.patch
stamp="$VERSION $(sha256sum "$patch_file" | cut -d' ' -f1)"
out=build/go/fake-gcs-server
if [ -x "$out" ] && [ "$(cat build/go/fake-gcs-server.stamp 2>/dev/null)" = "$stamp" ]; then
    echo "$PWD/$out"
    exit 0
fi
go=$(command -v go || echo /usr/local/go/bin/go)
if [ ! -x "$go" ]; then
    echo "build-fake-gcs: no Go toolchain (go 1.26+, for fake-gcs-server $VERSION); install Go first" >&2
    exit 1
fi
export GOFLAGS=-mod=mod
src=$(mktemp -d)
trap 'chmod -R u+w "$src"; rm -rf "$src"' EXIT
module=$("$go" mod download -json "github.com/fsouza/fake-gcs-server@$VERSION" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
cp -r "$module/." "$src/"
chmod -R u+w "$src"
patch -s -d "$src" -p1 < "$patch_file"
mkdir -p build/go
(cd "$src" && "$go" build -o "$OLDPWD/$out.new" .)
mv "$out.new" "$out"
echo "$stamp" > build/go/fake-gcs-server.stamp
echo "$PWD/$out"
