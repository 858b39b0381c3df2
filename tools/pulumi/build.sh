#!/usr/bin/env bash
# The Pulumi CLI and its Python language host, built with `go` from the modules tools/pulumi/go.mod and go.sum pin,
# into one folder with the two Python shims of the sdk/v3 module beside them (where the CLI looks for bundled
# plugins) and a link to the uv that `make` bootstrapped (the uv toolchain looks uv up on the PATH).
#
#   tools/pulumi/build.sh DEST UV
#
# Built as Pulumi's release builds are (.goreleaser.yml: CGO_ENABLED=0, -trimpath, tags osusergo,grpcnotrace, the
# version stamped with -X so `pulumi version` prints it). A folder already built from the same pin and the same
# sources is kept as it is, without asking the network: the check reads go.mod, go.sum and the host's sources.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
dest=${1:?usage: build.sh DEST UV}
uv=${2:?usage: build.sh DEST UV}
mkdir -p "$dest"
dest=$(cd "$dest" && pwd)

version=$(awk '$1 == "github.com/pulumi/pulumi/pkg/v3" { print $2 }' "$here/go.mod")
sdk_version=$(awk '$1 == "github.com/pulumi/pulumi/sdk/v3" { print $2 }' "$here/go.mod")
if [ -z "$version" ] || [ "$version" != "$sdk_version" ]; then
    echo "tools/pulumi/go.mod must require github.com/pulumi/pulumi/pkg/v3 and sdk/v3 at one release" \
         "(pkg/v3 '$version', sdk/v3 '$sdk_version')" >&2
    exit 2
fi
sources=$(cd "$here" && cat go.mod go.sum build.sh cmd/pulumi-language-python/*.go | sha256sum | cut -c1-16)
wanted="$version $sources"

stamp="$dest/.built-from"
if [ -x "$dest/pulumi" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$wanted" ] \
        && [ "$("$dest/pulumi" version 2>/dev/null)" = "$version" ]; then
    ln -sfn "$(cd "$(dirname "$uv")" && pwd)/$(basename "$uv")" "$dest/uv"
    exit 0
fi

echo "building the Pulumi CLI $version and its Python language host into $dest (a first build takes minutes)"
started=$(date +%s)
export CGO_ENABLED=0
flags=(-trimpath -buildvcs=false -mod=readonly -tags osusergo,grpcnotrace
       -ldflags "-s -w -X github.com/pulumi/pulumi/sdk/v3/go/common/version.Version=$version")
(cd "$here" && go build "${flags[@]}" -o "$dest/pulumi" github.com/pulumi/pulumi/pkg/v3/cmd/pulumi)
(cd "$here" && go build "${flags[@]}" -o "$dest/pulumi-language-python" ./cmd/pulumi-language-python)

# Module zips keep no file modes and the module cache is read-only: the shims are copied out with their run bit.
sdk_dir=$(cd "$here" && go list -mod=readonly -m -f '{{.Dir}}' github.com/pulumi/pulumi/sdk/v3)
install -m 0755 "$sdk_dir/python/cmd/pulumi-language-python-exec" "$dest/pulumi-language-python-exec"
install -m 0755 "$sdk_dir/python/dist/pulumi-resource-pulumi-python" "$dest/pulumi-resource-pulumi-python"
ln -sfn "$(cd "$(dirname "$uv")" && pwd)/$(basename "$uv")" "$dest/uv"

test "$("$dest/pulumi" version)" = "$version"
test "$("$dest/pulumi-language-python" -version)" = "$version"
echo "$wanted" > "$stamp"
echo "built the Pulumi CLI $version in $(( $(date +%s) - started )) s"
