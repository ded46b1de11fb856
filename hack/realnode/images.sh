#!/usr/bin/env bash
# Builds the e2e node's own images into bin/images/e2e/ (docker-archive
# tarballs that up.sh imports; no registry): the pod sandbox (pause), CoreDNS
# and the tests' workload (testapp), with the image tool's build verb
# (bin/images-tool, `make images-tool`).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/env.sh"
out="$root/bin/images/e2e"
bins="$out/bin"
mkdir -p "$bins"
export CGO_ENABLED=0

tool="$root/bin/images-tool"
[ -x "$tool" ] || { echo "e2e-images: $tool missing (make images-tool)" >&2; exit 1; }
# mkimage builds one FROM-scratch image of the given files.
mkimage() { "$tool" build "$@"; }

t0=$(date +%s)
(cd "$root/e2e" && go build -trimpath -ldflags '-s -w' -o "$bins/pause" ./cmd/pause && go build -trimpath -ldflags '-s -w' -o "$bins/testapp" ./cmd/testapp)
coredns="$root/bin/node/coredns-v$COREDNS_VERSION/coredns"
[ -x "$coredns" ] || { echo "e2e-images: $coredns missing (make node)" >&2; exit 1; }
# The sandbox image is the name containerd's sandbox_image asks for.
mkimage -o "$out/pause.tar" -t registry.k8s.io/pause:3.10 -entrypoint /pause -user 65535:65535 /pause="$bins/pause"
# CoreDNS runs as root: it binds port 53 (a non-root user's added
# NET_BIND_SERVICE is not effective without ambient capabilities) and
# charts/sluice's DNS egress rule names port 53 on the CoreDNS pods.
mkimage -o "$out/coredns.tar" -t "sluice.local/coredns:v$COREDNS_VERSION" -entrypoint "/coredns -conf /etc/coredns/Corefile" \
  -user 0:0 /coredns="$coredns" /etc/coredns/Corefile="$here/coredns/Corefile"
# A registry Sluice's default policies allow (docker.io, implied), like the
# chart's own images: the Helm applier tests deploy it through the gate.
mkimage -o "$out/testapp.tar" -t sluice-gitops/testapp:e2e -entrypoint /testapp -user 65532:65532 /testapp="$bins/testapp"

# Gitea, the forge of the pull-request test (make gitea builds it): its
# binary; the programs hack/gitea/pod-programs lists (git and what it runs
# by name, the server-side hooks' bash and tools) with their shared
# libraries (Debian's, dynamically linked: copied at the paths the loader
# looks at); and the templates and locales of its module
# (STATIC_ROOT_PATH; there is no built frontend, which the API, git over
# HTTP and webhooks do not need). Non-root: the base layer's user
# "nonroot" is Gitea's RUN_USER.
gitea_dir="$root/bin/gitea/$GITEA_VERSION"
[ -x "$gitea_dir/gitea" ] && [ -f "$gitea_dir/static-root" ] || { echo "e2e-images: $gitea_dir/gitea missing (make gitea)" >&2; exit 1; }
static=$(cat "$gitea_dir/static-root")
specs=("/gitea=$gitea_dir/gitea" "/gitea-static/templates=$static/templates" "/gitea-static/options=$static/options")
for b in $(grep -v '^#' "$root/hack/gitea/pod-programs"); do
  [ -x "$b" ] || { echo "e2e-images: $b missing: the Gitea image needs git, bash and sh (apt-get install git bash coreutils dash)" >&2; exit 1; }
  specs+=("$b=$(readlink -f "$b")")
  # ldd lists "name => /path (addr)" and the loader as "/path (addr)".
  for l in $(ldd "$b" | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}'); do
    specs+=("$l=$(readlink -f "$l")")
  done
done
mapfile -t specs < <(printf '%s\n' "${specs[@]}" | sort -u)
mkimage -o "$out/gitea.tar" -t "sluice.local/gitea:$GITEA_VERSION" -entrypoint /gitea -user 65532:65532 \
  -env PATH=/usr/bin -env HOME=/data -env GITEA_WORK_DIR=/data "${specs[@]}"
# with_libs prints /dst=src specs for the programs given and every shared
# library they load (Debian's, dynamically linked: copied at the paths the
# loader looks at; ldd lists "name => /path (addr)" and the loader as
# "/path (addr)").
with_libs() {
  local b l
  for b in "$@"; do
    echo "$b=$(readlink -f "$b")"
    for l in $(ldd "$b" | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}'); do
      echo "$l=$(readlink -f "$l")"
    done
  done | sort -u
}

# Argo CD (make argocd builds it, static as upstream ships it): one binary
# acting as the application controller, the repo-server or the
# config-management-plugin server by its name (ARGOCD_BINARY_NAME in the
# pods); git with its HTTP transport for the repo-server's fetches; cp for
# the init container that copies the binary into the repo-server's
# var-files volume as argocd-cmp-server, which the Sluice plugin sidecar
# (the operator image, FROM scratch) runs: so it must be static.
argocd="$root/bin/argocd/$ARGOCD_VERSION/argocd"
[ -x "$argocd" ] || { echo "e2e-images: $argocd missing (make argocd)" >&2; exit 1; }
if ldd "$argocd" >/dev/null 2>&1; then
  echo "e2e-images: $argocd is dynamically linked: the plugin sidecar (FROM scratch) cannot run it; rebuild it static (rm it, make argocd)" >&2; exit 1
fi
for b in /usr/bin/git /usr/lib/git-core/git-remote-http /usr/bin/cp /usr/bin/redis-server; do
  [ -x "$b" ] || { echo "e2e-images: $b missing: the Argo CD images need git, coreutils and redis-server (apt-get install git coreutils redis-server)" >&2; exit 1; }
done
mapfile -t specs < <(with_libs /usr/bin/git /usr/lib/git-core/git-remote-http /usr/bin/cp)
# git finds its HTTPS helper under the name git-remote-https too.
specs+=("/usr/lib/git-core/git-remote-https=$(readlink -f /usr/lib/git-core/git-remote-http)")
mkimage -o "$out/argocd.tar" -t "sluice.local/argocd:$ARGOCD_VERSION" -entrypoint /usr/local/bin/argocd -user 999:999 \
  -env PATH=/usr/local/bin:/usr/bin -env HOME=/home/argocd /usr/local/bin/argocd="$argocd" "${specs[@]}"
# Redis, Argo CD's cache (the controller and repo-server need it).
mapfile -t specs < <(with_libs /usr/bin/redis-server)
mkimage -o "$out/redis.tar" -t "sluice.local/redis:e2e" -entrypoint /usr/bin/redis-server -user 999:999 "${specs[@]}"
echo "e2e-images: pause, coredns, testapp, gitea, argocd, redis in ${out#$root/} ($(( $(date +%s) - t0 )) s)"
