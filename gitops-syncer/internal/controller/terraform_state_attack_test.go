package controller_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-gitops/sluice/gitops-syncer/internal/changespec"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/review"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/terraform"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// stateSecret is the release's state as the kubernetes backend keeps it,
// made by a real apply of stack with terraform's own local state.
func stateSecret(t *testing.T, ns, release, stack string) *corev1.Secret {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "main.tf"), []byte(stack), 0o644))
	for _, args := range [][]string{{"init", "-no-color", "-input=false"}, {"apply", "-no-color", "-input=false", "-auto-approve"}} {
		cmd := exec.Command("terraform", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "TF_CLI_CONFIG_FILE="+filepath.Join(dir, "none"))
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "terraform %s: %s", args[0], out)
	}
	state, err := os.ReadFile(filepath.Join(dir, "terraform.tfstate"))
	require.NoError(t, err)
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	_, err = zw.Write(state)
	require.NoError(t, err)
	require.NoError(t, zw.Close())
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name: "tfstate-default-" + release, Namespace: ns,
			Labels:      map[string]string{"tfstate": "true", "tfstateSecretSuffix": release, "tfstateWorkspace": "default", "app.kubernetes.io/managed-by": "terraform"},
			Annotations: map[string]string{"encoding": "gzip"},
		},
		Data: map[string][]byte{"tfstate": buf.Bytes()},
	}
}

// TestSync_aPlanErrorShowsNoPieceOfTheStateOrOfAFile: the release's
// state holds a sensitive value; a push makes the plan fail on a piece of
// it (tonumber(substr(nonsensitive(x), 0, 12))), another on /etc/hosts.
// No piece of either is in any finding, the review ConfigMap or the
// pull-request comment rendered from it, an event or the log: the
// findings say "plan failed (details for approvers)" at the file and
// line, and the full text is in the Secret <change>-plan-error, owned by
// the change.
func TestSync_aPlanErrorShowsNoPieceOfTheStateOrOfAFile(t *testing.T) {
	const secret = "Zq7-sEcReT-vAlUe-9xKw"
	hosts, err := os.ReadFile("/etc/hosts")
	require.NoError(t, err)
	db := "resource \"terraform_data\" \"db\" {\n  input = sensitive(\"" + secret + "\")\n}\n"
	attacks := map[string]struct{ tf, detail string }{
		"a piece of a sensitive state value": {"locals {\n  x = tonumber(substr(nonsensitive(terraform_data.db.output), 0, 12))\n}\noutput \"x\" {\n  value = local.x\n}\n", secret[:12]},
		"a readable file":                    {"locals {\n  h = tonumber(file(\"/etc/hosts\"))\n}\noutput \"h\" {\n  value = local.h\n}\n", "cannot convert"},
	}
	for name, attack := range attacks {
		t.Run(name, func(t *testing.T) {
			ns := newNamespace(t)
			require.NoError(t, k8s.Create(context.Background(), stateSecret(t, ns, "stack-staging", db)))
			fixture := terraformRepo(t, envVariable+db+attack.tf, "{env: staging}")
			startSyncer(t, ns, "")
			repo := newRepository(t, ns, "infra", fixture.FileURL())
			got := waitHandled(t, repo, requestReconcile(t, repo))

			name := sluicev1.ChangeRequestName("stack-staging", fixture.Head("main"), 1)
			cr, ok := changeRequests(t, ns)[name]
			require.True(t, ok, "no ChangeRequest %s", name)
			assert.Equal(t, sluicev1.VerdictFail, cr.Spec.Verdict.Result)
			withheld := 0
			for _, f := range cr.Spec.Verdict.Findings {
				t.Logf("%s:%d %s", f.File, f.Line, f.Message)
				if f.Source == "terraform" && f.Message == terraform.Withheld && f.File == "services/stack/terraform/main.tf" && f.Line > 0 {
					withheld++
				}
			}
			assert.Equal(t, 1, withheld, "the failure is shown where it is, without its text")

			ctx := context.Background()
			cm := &corev1.ConfigMap{}
			require.NoError(t, k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: review.ConfigMapName(name)}, cm))
			assert.Equal(t, string(cr.Spec.ApprovalDigest), cm.Annotations[review.AnnotationApprovalDigest], "the review carries the change's digest")
			section, stored, err := review.FromConfigMap(cm, &cr)
			require.NoError(t, err)
			require.True(t, stored)
			comment := strings.Join(review.Markdown([]*review.Section{section}, review.LimitGitHub, 0), "\n")
			var events corev1.EventList
			require.NoError(t, k8s.List(ctx, &events, client.InNamespace(ns)))
			shown := map[string]any{"findings": cr.Spec.Verdict.Findings, "review": section, "comment": comment,
				"repository status": got.Status, "events": events.Items, "log": logLinesOf(ns)}
			for what, v := range shown {
				b, err := json.Marshal(v)
				require.NoError(t, err)
				for i := 0; i+4 <= len(secret); i++ {
					assert.NotContains(t, string(b), secret[i:i+4], "a piece of the state value is in the %s", what)
				}
				for _, f := range strings.Fields(string(hosts)) {
					if len(f) >= 4 && !strings.HasPrefix(f, "#") {
						assert.NotContains(t, string(b), f, "a piece of /etc/hosts is in the %s", what)
					}
				}
			}

			details := &corev1.Secret{}
			require.NoError(t, k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: changespec.PlanErrorSecretName(name)}, details))
			assert.True(t, metav1.IsControlledBy(details, &cr), "owned by the change")
			assert.Contains(t, string(details.Data[changespec.PlanErrorKey]), attack.detail, "the approvers' copy says what failed")
		})
	}
}

// logLinesOf is the lines of the package's shared log that mention
// namespace ns: what this test's syncer logged, not other tests' (a test
// whose back end refuses connections logs loopback addresses).
func logLinesOf(ns string) string {
	var out []string
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(line, ns) {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}
