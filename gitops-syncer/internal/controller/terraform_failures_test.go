package controller_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-gitops/sluice/gitops-syncer/internal/gittest"
	"github.com/sluice-gitops/sluice/gitops-syncer/internal/syncer"
	"github.com/sluice-gitops/sluice/gitops-syncer/internal/validation"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/runner"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/tfstate"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// terraformRepo makes a repository with the golden-path chart and one
// service "stack" whose staging environment plans terraform/main.tf with
// vars.
func terraformRepo(t *testing.T, mainTF, vars string) *gittest.Repo {
	t.Helper()
	r := gittest.NewRepo(t, t.TempDir(), "infra")
	r.CopyDir(chartDir, "charts/service")
	r.WriteFile("services/stack/service.yaml", fmt.Sprintf(`apiVersion: sluice.dev/v1alpha1
kind: Service
name: stack
owners: [team-stack]
chart: {path: charts/service}
values: [values.yaml]
terraform: {dir: terraform}
environments:
  - name: staging
    namespace: stack-staging
    terraform: {vars: %s}
    delivery: helm
    approval: {required: 1}
`, vars))
	r.WriteFile("services/stack/values.yaml", "image:\n  repository: ghcr.io/example/stack\n  tag: \"1.0.0\"\n")
	r.WriteFile("services/stack/terraform/main.tf", mainTF)
	r.Commit("stack", "alice@example.com")
	return r
}

const envVariable = "variable \"env\" {\n  type = string\n}\n"

// TestSync_aBrokenTerraformStackIsRejectedWithTerraformsDiagnostics: a
// stack terraform refuses fails the same way on every retry, so the
// change is rejected at once with findings a human can act on.
func TestSync_aBrokenTerraformStackIsRejectedWithTerraformsDiagnostics(t *testing.T) {
	tests := []struct {
		name, mainTF, vars string
		file               string
		line               bool
		message            string
	}{
		{"a syntax error points at its file and line",
			envVariable + "resource \"terraform_data\" \"queue\" {\n  input = var.env\n  bogus {\n}\n", "{env: staging}",
			"services/stack/terraform/main.tf", true, "Unclosed configuration block"},
		{"an undeclared variable names the variable",
			envVariable + "resource \"terraform_data\" \"queue\" {\n  input = var.env\n}\n", "{env: staging, region: eu-west-1}",
			"services/stack/terraform", false, `Value for undeclared variable: A variable named "region"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ns := newNamespace(t)
			fixture := terraformRepo(t, tt.mainTF, tt.vars)
			startSyncer(t, ns, "")
			repo := newRepository(t, ns, "infra", fixture.FileURL())
			got := waitHandled(t, repo, requestReconcile(t, repo))
			ready := meta.FindStatusCondition(got.Status.Conditions, sluicev1.ConditionReady)
			require.NotNil(t, ready)
			assert.Equal(t, metav1.ConditionTrue, ready.Status, "a rejected change is not a sync failure: %s", ready.Message)

			name := sluicev1.ChangeRequestName("stack-staging", fixture.Head("main"), 1)
			cr, ok := changeRequests(t, ns)[name]
			require.True(t, ok, "no ChangeRequest %s", name)
			assert.Equal(t, sluicev1.VerdictFail, cr.Spec.Verdict.Result)
			var found *sluicev1.Finding
			for i, f := range cr.Spec.Verdict.Findings {
				if f.Source == "terraform" && f.Severity == sluicev1.SeverityDeny {
					found = &cr.Spec.Verdict.Findings[i]
					break
				}
			}
			require.NotNil(t, found, "no terraform finding in %+v", cr.Spec.Verdict.Findings)
			t.Logf("%s:%d %s: %s", found.File, found.Line, found.Policy, found.Message)
			assert.Equal(t, tt.file, found.File)
			assert.Equal(t, tt.line, found.Line > 0, "line %d", found.Line)
			assert.Contains(t, found.Message, tt.message)
			assert.NotContains(t, found.Message, os.TempDir(), "no scratch paths")
		})
	}
}

// TestSync_anUnreachableStateBackendIsRetried: the state backend's API
// server does not answer; the change is not rejected (it may plan fine a
// minute later): no ChangeRequest, Ready=False with the reason, and the
// commit is not recorded as synced, so it is tried again.
func TestSync_anUnreachableStateBackendIsRetried(t *testing.T) {
	ns := newNamespace(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close()) // nothing answers there
	cs, err := kubernetes.NewForConfig(env.Config)
	require.NoError(t, err)
	srv, err := tfstate.NewServer(cs, tfstate.Options{BaseURL: "http://" + addr})
	require.NoError(t, err)
	granted := &recordingGranter{Server: srv}
	lib, err := validation.NewLibrary(context.Background(), validation.LibraryOptions{Runner: &runner.Local{}, State: granted})
	require.NoError(t, err)
	unreachable := &countingValidator{Validator: lib}

	fixture := terraformRepo(t, envVariable+"resource \"terraform_data\" \"queue\" {\n  input = var.env\n}\n", "{env: staging}")
	startSyncer(t, ns, "", func(s *syncer.Syncer) { s.Reconciler.Validator = unreachable })
	repo := newRepository(t, ns, "infra", fixture.FileURL())
	ready := waitReady(t, repo, metav1.ConditionFalse, sluicev1.ReasonGitOperationFailed)
	t.Log(ready.Message)
	assert.Contains(t, ready.Message, "stack-staging")
	assert.Contains(t, ready.Message, "connection refused")
	assert.NotContains(t, ready.Message, granted.password())

	got := &sluicev1.Repository{}
	require.NoError(t, k8s.Get(context.Background(), client.ObjectKeyFromObject(repo), got))
	reconciling := meta.FindStatusCondition(got.Status.Conditions, sluicev1.ConditionReconciling)
	require.NotNil(t, reconciling, "a retried failure is Reconciling")
	assert.Equal(t, metav1.ConditionTrue, reconciling.Status)
	assert.Nil(t, meta.FindStatusCondition(got.Status.Conditions, sluicev1.ConditionStalled), "not for a human")
	assert.Empty(t, got.Status.LastSyncedCommit, "the commit is tried again")
	rel := getRelease(t, ns, "stack-staging")
	synced := meta.FindStatusCondition(rel.Status.Conditions, sluicev1.ConditionSynced)
	require.NotNil(t, synced, "the Release says it is not synced")
	assert.Equal(t, metav1.ConditionFalse, synced.Status)
	assert.Equal(t, sluicev1.ReasonSyncFailed, synced.Reason)
	assert.Contains(t, synced.Message, "connection refused")
	assert.NotContains(t, synced.Message, granted.password())
	assert.Empty(t, changeRequests(t, ns), "nothing is rejected for a failing back end")
	// It is retried with backoff, and never becomes a ChangeRequest.
	require.Eventually(t, func() bool { return unreachable.calls.Load() >= 3 }, timeout, tick, "validation is retried")
	assert.Empty(t, changeRequests(t, ns))
}

// recordingGranter remembers the last run credential it granted.
type recordingGranter struct {
	*tfstate.Server
	mu   sync.Mutex
	last string
}

func (g *recordingGranter) Grant(gr tfstate.Grant) (tfstate.Credential, error) {
	c, err := g.Server.Grant(gr)
	g.mu.Lock()
	defer g.mu.Unlock()
	g.last = c.Password
	return c, err
}

func (g *recordingGranter) password() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.last == "" {
		return "no credential was granted"
	}
	return g.last
}

// countingValidator counts the validations of the real validator it wraps.
type countingValidator struct {
	validation.Validator
	calls atomic.Int32
}

func (c *countingValidator) Validate(ctx context.Context, req validation.Request) (*validation.Result, error) {
	c.calls.Add(1)
	return c.Validator.Validate(ctx, req)
}
