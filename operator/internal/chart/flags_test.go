package chart_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// repoRoot is the repository root (where go.work is), from this package.
const repoRoot = "../../.."

var usageFlag = regexp.MustCompile(`(?m)^\s+-([a-z0-9][a-z0-9-]*)\b`)

// buildCommands builds the commands (through the workspace, as `make
// build` does) into one folder, with one go invocation for both.
func buildCommands(t *testing.T, pkgs ...string) string {
	t.Helper()
	dir := t.TempDir()
	cmd := exec.Command("go", append([]string{"build", "-o", dir + string(os.PathSeparator)}, pkgs...)...)
	cmd.Dir = repoRoot
	// The workspace holds every module; a caller's GOWORK=off would hide
	// the syncer from the operator module.
	cmd.Env = append(os.Environ(), "GOWORK=")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "go build %v: %s", pkgs, out)
	return dir
}

// usageFlags runs the binary with -help and returns the flags its usage
// lists.
func usageFlags(t *testing.T, binary string) map[string]bool {
	t.Helper()
	out, err := exec.Command(binary, "-help").CombinedOutput()
	require.NoError(t, err, "%s -help: %s", binary, out)
	flags := map[string]bool{}
	for _, m := range usageFlag.FindAllStringSubmatch(string(out), -1) {
		flags[m[1]] = true
	}
	require.NotEmpty(t, flags, "no flags in the usage of %s", binary)
	return flags
}

// TestChart_argumentsAreFlagsTheBinariesKnow: a flag the binary does not
// define makes the pod exit at start, so every argument the chart passes,
// with every optional feature turned on, must be one of the binary's flags.
func TestChart_argumentsAreFlagsTheBinariesKnow(t *testing.T) {
	r := renderChart(t, `
runner: {allowPorts: [443]}
argocd: {enabled: true}
operator: {watchNamespaces: [team-a]}
syncer:
  watchNamespaces: [team-a]
  allowFileURLs: true
  terraform: {path: /usr/local/bin/terraform, kubeconfigSecret: tf}
  statusProvider: {name: github, baseURL: 'https://api.github.example', tokenSecret: gh}
`)
	require.Empty(t, r.denies())
	bin := buildCommands(t, "./operator/cmd/operator", "./gitops-syncer/cmd/gitops-syncer", "./infra-validator/cmd/infra-validator")
	t.Run("sluice-runner", func(t *testing.T) {
		c := find[*appsv1.Deployment](t, r, "sluice-runner").Spec.Template.Spec.Containers[0]
		require.Equal(t, "infra-validator", c.Command[0])
		// `runner serve -help` prints its usage and exits non-zero.
		out, _ := exec.Command(filepath.Join(bin, c.Command[0]), append(c.Command[1:], "-help")...).CombinedOutput()
		known := map[string]bool{}
		for _, m := range usageFlag.FindAllStringSubmatch(string(out), -1) {
			known[m[1]] = true
		}
		require.NotEmpty(t, known, "no flags in the usage of %v: %s", c.Command, out)
		for _, a := range c.Args {
			name, _, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
			assert.True(t, known[name], "the runner passes --%s, which %v does not define", name, c.Command)
		}
	})
	t.Run("sluice-argocd-cmp", func(t *testing.T) {
		var p cmpPlugin
		require.NoError(t, yaml.Unmarshal([]byte(find[*corev1.ConfigMap](t, r, "sluice-argocd-cmp").Data["plugin.yaml"]), &p))
		c := p.Spec.Generate.Command
		require.Greater(t, len(c), 3)
		require.Equal(t, []string{"operator", "argocd-cmp", "generate"}, c[:3])
		// `argocd-cmp generate -help` prints its usage and exits non-zero.
		out, _ := exec.Command(filepath.Join(bin, c[0]), append(c[1:3:3], "-help")...).CombinedOutput()
		known := map[string]bool{}
		for _, m := range usageFlag.FindAllStringSubmatch(string(out), -1) {
			known[m[1]] = true
		}
		require.NotEmpty(t, known, "no flags in the usage of %v: %s", c[:3], out)
		for _, a := range c[3:] {
			name, _, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
			assert.True(t, known[name], "the plugin passes --%s, which %v does not define", name, c[:3])
		}
	})
	for deployment, binary := range map[string]string{"sluice-operator": "operator", "sluice-syncer": "gitops-syncer"} {
		t.Run(deployment, func(t *testing.T) {
			known := usageFlags(t, filepath.Join(bin, binary))
			for _, a := range find[*appsv1.Deployment](t, r, deployment).Spec.Template.Spec.Containers[0].Args {
				name, _, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
				assert.True(t, known[name], "%s passes --%s, which %s does not define", deployment, name, binary)
			}
		})
	}
}
