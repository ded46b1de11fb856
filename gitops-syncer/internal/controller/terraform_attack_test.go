package controller_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-gitops/sluice/gitops-syncer/internal/changespec"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/terraform"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// TestSync_aPlanCannotReadTheSyncersCredentials: a pushed stack whose plan
// reads the syncer's credentials (a token file, the kubeconfig it uses,
// its environment) through file() and an error message that echoes what
// it read, lightly disguised. The reads are refused, the change is
// rejected with terraform's diagnostics, and no finding, status, Event or
// log line carries any of it.
func TestSync_aPlanCannotReadTheSyncersCredentials(t *testing.T) {
	const token = "eyJhbGciOiJSUzI1NiIsImtpZCI6InN5bmNlciJ9.eyJzdWIiOiJzeXN0ZW06c2VydmljZWFjY291bnQ6c2x1aWNlOnN5bmNlciJ9.c3luY2VyLXNpZ25hdHVyZS0wMTIzNDU2Nzg5"
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	require.NoError(t, os.WriteFile(tokenFile, []byte(token), 0o600))
	kubeconfig := filepath.Join(dir, "kubeconfig")
	require.NoError(t, os.WriteFile(kubeconfig, []byte("apiVersion: v1\nkind: Config\nusers: [{name: syncer, user: {token: "+token+"}}]\n"), 0o600))
	t.Setenv("KUBECONFIG", kubeconfig)
	t.Setenv("SLUICE_SYNCER_TOKEN", token)

	mainTF := envVariable + fmt.Sprintf(`locals {
  a = tonumber(replace(file(%q), ".", "-"))
  b = tonumber(replace(file(%q), ".", "-"))
  c = tonumber(replace(file("/proc/self/environ"), ".", "-"))
  d = tonumber(replace(file("/proc/1/environ"), ".", "-"))
}
resource "terraform_data" "queue" {
  input = [var.env, local.a, local.b, local.c, local.d]
}
`, tokenFile, kubeconfig)
	ns := newNamespace(t)
	fixture := terraformRepo(t, mainTF, "{env: staging}")
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
		if f.Source == "terraform" && f.Message == terraform.Withheld {
			withheld++
		}
	}
	assert.Equal(t, 4, withheld, "every failed read is a finding, its text for approvers only")
	// The approvers' copy of terraform's text says why.
	details := &corev1.Secret{}
	require.NoError(t, k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: changespec.PlanErrorSecretName(name)}, details))
	assert.Equal(t, 4, strings.Count(strings.ToLower(string(details.Data[changespec.PlanErrorKey])), "denied"), "every read was refused")

	var events corev1.EventList
	require.NoError(t, k8s.List(context.Background(), &events, client.InNamespace(ns)))
	rel := getRelease(t, ns, "stack-staging")
	texts := map[string]any{"findings": cr.Spec.Verdict.Findings, "plan error details": string(details.Data[changespec.PlanErrorKey]), "repository status": got.Status, "release status": rel.Status, "events": events.Items}
	dashed := strings.ReplaceAll(token, ".", "-")
	for what, v := range texts {
		b, err := json.Marshal(v)
		require.NoError(t, err)
		for _, part := range append(strings.Split(token, "."), dashed) {
			assert.NotContains(t, string(b), part, "the syncer's credential leaked into the %s", what)
		}
	}
	for _, part := range append(strings.Split(token, "."), dashed) {
		assert.NotContains(t, logs.String(), part, "the syncer's credential leaked into its log")
	}
}
