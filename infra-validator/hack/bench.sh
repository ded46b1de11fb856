#!/usr/bin/env bash
# infra-validator benchmarks, printed in one run on the same inputs and
# policies:
#   1. conftest compatibility: the conftest policies of
#      internal/cli/testdata/conftest give the same failures and warnings
#      through infra-validator as through `conftest test`;
#   2. time per plan, infra-validator CLI vs `conftest test`, for a small and
#      a 2,000-resource plan, with the conftest policy set and with Sluice's
#      default Terraform policies (conftest --namespace 'sluice.terraform.*');
#   3. time per plan of the library with policies compiled once (Go benchmark)
#      vs `conftest test`, alternating;
#   4. time per chart of the library (render + schema + policy) vs `helm
#      template`, alternating;
#   5. peak memory of the CLI on a 10,000-resource plan;
#   6. terraform through the sandboxed runner vs bare terraform;
#   7. CPU time of rendering the pull-request comment vs validating, 2,000-resource plan;
#   8. Kustomize build of a 500-object overlay: the library (package sources,
#      as the validator and the Helm applier build) vs the `kustomize build`
#      CLI of the same module version (--reorder none: the library keeps
#      input order, Helm sorts by kind at install), alternating, same output checked.
# Installs conftest v0.71.1, helm v3.22.0 and kustomize v5.8.2 (the CLI of
# sigs.k8s.io/kustomize/api v0.21.2, the library's version) into bin/tools
# when missing.
# BENCH_SMOKE=1 (make bench-smoke) runs one short iteration of each (one
# run per timing, one iteration per Go benchmark): its figures mean
# nothing, it shows every benchmark still runs to its end.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
MOD=$ROOT/infra-validator
TOOLS=$ROOT/bin/tools
CONFTEST_VERSION=v0.71.1
HELM_VERSION=v3.22.0
KUSTOMIZE_VERSION=v5.8.2
RUNS=${BENCH_RUNS:-9}
if [ -n "${BENCH_SMOKE:-}" ]; then
	RUNS=1 BENCH_TIME=1x
fi
mkdir -p "$TOOLS"

install_tool() { # name module@version
	local name=$1 pkg=$2
	if [ ! -x "$TOOLS/$name" ]; then
		echo "installing $pkg into bin/tools (a few minutes when the module cache is cold)"
		(cd "$ROOT" && GOWORK=off GOFLAGS=-buildvcs=false GOBIN="$TOOLS" go install "$pkg")
	fi
}
install_tool conftest "github.com/open-policy-agent/conftest@$CONFTEST_VERSION"
install_tool helm "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
install_tool kustomize "sigs.k8s.io/kustomize/kustomize/v5@$KUSTOMIZE_VERSION"
CONFTEST=$TOOLS/conftest
HELM=$TOOLS/helm

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
IV=$WORK/infra-validator
BT=$WORK/benchtool
(cd "$MOD" && go build -o "$IV" ./cmd/infra-validator && go build -o "$BT" ./hack/benchtool)

CDATA=$MOD/internal/cli/testdata/conftest
SMALL=$CDATA/inputs/plan.json
"$BT" genplan 2000 "$WORK/plan-2000.json"
"$BT" genplan 10000 "$WORK/plan-10000.json"
LARGE=$WORK/plan-2000.json
DEFAULTS=$ROOT/policies/rego
DEFAULT_DATA=$ROOT/policies/data/defaults.yaml

echo "infra-validator: $("$IV" version)"
echo "conftest:        $("$CONFTEST" --version | tr '\n' ' ') (installed as $CONFTEST_VERSION)"
echo "helm:            $("$HELM" version --short)"
echo "machine:         $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo

echo "== 1. conftest compatibility (same policies, same inputs, printed side by side)"
compat=ok
(cd "$CDATA" &&
	"$BT" compare "$IV" "$CONFTEST" terraform inputs/plan.json --policy policy --data policy/data.yaml &&
	"$BT" compare "$IV" "$CONFTEST" kubernetes inputs/manifests.yaml --policy policy --namespace kubernetes &&
	"$BT" compare "$IV" "$CONFTEST" terraform inputs/plan.json --policy policy --all-namespaces --data policy/data.yaml &&
	"$BT" compare "$IV" "$CONFTEST" kubernetes inputs/manifests.yaml --policy policy --all-namespaces --data policy/data.yaml &&
	"$BT" compare "$IV" "$CONFTEST" kubernetes inputs/manifests.yaml --policy policy --combine --namespace combined &&
	"$BT" compare "$IV" "$CONFTEST" terraform "$LARGE" --policy policy --data policy/data.yaml) || compat=DIFFERENT
echo "conftest compatibility: $compat"
echo

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1fx", a / b }'; }
verdict() { awk -v a="$1" -v b="$2" -v want="$3" 'BEGIN { if (a / b >= want) print "met"; else print "NOT met" }'; }

echo "== 2. time per plan: infra-validator CLI vs conftest test (median of $RUNS alternating runs, ms)"
printf "  %-34s %12s %12s %10s %s\n" "plan / policies" "conftest" "CLI" "speed-up" "target CLI <= conftest"
for size in small 2000; do
	plan=$SMALL
	[ $size = 2000 ] && plan=$LARGE
	read -r c i < <("$BT" pair "$RUNS" "$CONFTEST" test --no-color --policy "$CDATA/policy" --data "$CDATA/policy/data.yaml" "$plan" \
		-- "$IV" terraform --no-default-policies --policy "$CDATA/policy" --data "$CDATA/policy/data.yaml" "$plan")
	printf "  %-34s %12s %12s %10s %s\n" "$size / conftest policy set" "$c" "$i" "$(ratio "$c" "$i")" "$(verdict "$c" "$i" 1)"
	read -r c i < <("$BT" pair "$RUNS" "$CONFTEST" test --no-color --policy "$DEFAULTS" --data "$DEFAULT_DATA" --namespace 'sluice.terraform.*' "$plan" \
		-- "$IV" terraform "$plan")
	printf "  %-34s %12s %12s %10s %s\n" "$size / Sluice default policies" "$c" "$i" "$(ratio "$c" "$i")" "$(verdict "$c" "$i" 1)"
done
echo

# alt_lib RUNS BENCH TESTBIN ENV=VALUE -- CMD...: RUNS rounds of one timed
# run of CMD (ms) followed by one run of the library's Go benchmark BENCH
# from the prebuilt TESTBIN (ms per op over ${BENCH_TIME:-20x}), so load that
# comes and goes weighs on both sides alike; prints the two medians.
alt_lib() {
	local runs=$1 name=$2 bin=$3 envset=$4 a=() l=() i
	shift 5
	for ((i = 0; i < runs; i++)); do
		a+=("$("$BT" time 1 "$@")")
		l+=("$(cd "$(dirname "$bin")" && env "$envset" "$bin" -test.run '^$' -test.bench "^$name\$" -test.benchtime "${BENCH_TIME:-20x}" |
			awk -v b="$name" '$1 ~ "^"b { printf "%.2f", $3 / 1e6 }')")
	done
	echo "$(printf '%s\n' "${a[@]}" | sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }')" \
		"$(printf '%s\n' "${l[@]}" | sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }')"
}
# The validate package's test binary runs in its own folder (its testdata).
(cd "$MOD" && go test -c -o "$MOD/pkg/validate/validate.bench.test" ./pkg/validate)
VT=$MOD/pkg/validate/validate.bench.test
trap 'rm -rf "$WORK" "$VT"' EXIT

echo "== 3. time per plan: library, policies compiled once (Go benchmark of validate.CheckPlanJSON, defaults) vs conftest test, $RUNS alternating rounds (medians, ms), load average $(cut -d' ' -f1-3 /proc/loadavg)"
printf "  %-34s %12s %12s %10s %s\n" "plan" "conftest" "library" "speed-up" "target >= 10x"
for size in small 2000; do
	plan=$SMALL
	[ $size = 2000 ] && plan=$LARGE
	read -r c lib < <(alt_lib "$RUNS" BenchmarkCheckPlanJSON "$VT" "PLAN_JSON=$plan" -- \
		"$CONFTEST" test --no-color --policy "$DEFAULTS" --data "$DEFAULT_DATA" --namespace 'sluice.terraform.*' "$plan")
	printf "  %-34s %12s %12s %10s %s\n" "$size" "$c" "$lib" "$(ratio "$c" "$lib")" "$(verdict "$c" "$lib" 10)"
done
echo

echo "== 4. time per chart: library (render + schema + policy, Go benchmark of validate.CheckChart) vs helm template, $RUNS alternating rounds (medians, ms), load average $(cut -d' ' -f1-3 /proc/loadavg)"
CHART=${BENCH_CHART:-$MOD/pkg/validate/testdata/repo/charts/web}
VALUES=$CHART/values.yaml
read -r h lib < <(alt_lib "$RUNS" BenchmarkCheckChart "$VT" "CHART_DIR=$CHART" -- \
	"$HELM" template bench "$CHART" -f "$VALUES" --namespace shop-prod --kube-version 1.37.2)
printf "  %-34s %12s %12s %10s %s\n" "chart" "helm template" "library" "speed-up" "target >= 2x"
printf "  %-34s %12s %12s %10s %s\n" "$(basename "$CHART")" "$h" "$lib" "$(ratio "$h" "$lib")" "$(verdict "$h" "$lib" 2)"
echo

echo "== 5. peak memory, 10,000-resource plan (default policies)"
echo "  infra-validator CLI: $("$BT" peak "$IV" terraform "$WORK/plan-10000.json")"
echo "  conftest (same policies): $("$BT" peak "$CONFTEST" test --no-color --policy "$DEFAULTS" --data "$DEFAULT_DATA" --namespace 'sluice.terraform.*' "$WORK/plan-10000.json")"
echo

echo "== 6. terraform through the sandboxed runner vs bare terraform (same stack, same run, alternating; median of $RUNS runs)"
(cd "$MOD" && go build -o "$WORK/runnerbench" ./hack/runnerbench)
"$WORK/runnerbench" "$RUNS" 20 | sed 's/^/  /'
echo

echo "== 7. pull-request comment vs validation, 2,000-resource plan (Go benchmark, CPU time per run, taking turns)"
(cd "$MOD" && go test -run '^$' -bench '^BenchmarkReviewVsValidate2000$' -benchtime "${BENCH_TIME:-20x}" ./pkg/review) |
	awk '/^BenchmarkReviewVsValidate2000/ { for (i = 1; i < NF; i++) m[$(i + 1)] = $i
		printf "  validate %.1f ms, render the comment %.1f ms: %.1f%% of the validation (target < 10%%)\n", m["validate-cpu-ns/op"] / 1e6, m["render-cpu-ns/op"] / 1e6, m["render-%"] }'
echo

echo "== 8. Kustomize build, 500-object overlay: library vs kustomize build (median of $RUNS alternating runs, ms, process start included)"
"$BT" genoverlay 500 "$WORK/overlay500"
"$BT" kustomize "$WORK/overlay500/overlay" >"$WORK/kustomize-lib.yaml"
"$TOOLS/kustomize" build --reorder none --load-restrictor LoadRestrictionsNone "$WORK/overlay500/overlay" >"$WORK/kustomize-cli.yaml"
same=$(cmp -s "$WORK/kustomize-lib.yaml" "$WORK/kustomize-cli.yaml" && echo "same output" || echo "OUTPUT DIFFERS")
read -r kcli klib < <("$BT" pair "$RUNS" "$TOOLS/kustomize" build --reorder none --load-restrictor LoadRestrictionsNone "$WORK/overlay500/overlay" -- "$BT" kustomize "$WORK/overlay500/overlay")
printf "  %-34s %12s %12s %10s %s\n" "overlay" "kustomize" "library" "speed-up" "target library <= CLI"
printf "  %-34s %12s %12s %10s %s (%s)\n" "500 objects" "$kcli" "$klib" "$(ratio "$kcli" "$klib")" "$(verdict "$kcli" "$klib" 1)" "$same"
