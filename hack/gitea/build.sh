#!/usr/bin/env bash
# Builds Gitea from the Go module proxy into bin/gitea/<version>/, for the
# real-forge tests (gitops-syncer/internal/provider/giteatest). Gitea's module
# declares its path as gitea.dev and its go.mod has replace lines, so neither
# `go install module@version` nor a require in a project go.mod can build it:
# the module is downloaded and built in its own (read-only) cache folder,
# which only writes the -o target. Pure Go (SQLite is modernc in 1.27), no
# frontend assets: the API, git smart HTTP and webhooks do not need them.
# Does nothing when the binary is there.
set -euo pipefail

GITEA_VERSION=${GITEA_VERSION:-v1.27.3}
module=code.gitea.io/gitea
root=$(cd "$(dirname "$0")/../.." && pwd)
dest="$root/bin/gitea/$GITEA_VERSION"

if [ -x "$dest/gitea" ]; then
  echo "gitea: Gitea $GITEA_VERSION present in ${dest#$root/}"
  exit 0
fi
mkdir -p "$dest"
# Gitea's module must not see the project's go.work.
export GOWORK=off GOFLAGS=-buildvcs=false CGO_ENABLED=0
start=$(date +%s)
src=$(go mod download -json "$module@$GITEA_VERSION" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
if [ -z "$src" ] || [ ! -f "$src/go.mod" ]; then
  echo "gitea: cannot download $module@$GITEA_VERSION from the module proxy" >&2
  exit 1
fi
echo "gitea: building Gitea $GITEA_VERSION (about 8 CPU-minutes cold, seconds with a warm Go cache)..."
# -trimpath: the build cache then does not depend on the folder, so a fresh
# clone reuses what an earlier build compiled.
(cd "$src" && go build -trimpath -ldflags "-s -w -X \"main.Version=${GITEA_VERSION#v}\"" -o "$dest/gitea.tmp" .)
mv "$dest/gitea.tmp" "$dest/gitea"
# The tests point STATIC_ROOT_PATH (templates, locales) at the module folder.
printf '%s\n' "$src" > "$dest/static-root"
"$dest/gitea" --version
echo "gitea: built in $(( $(date +%s) - start ))s, binary in ${dest#$root/}"
