package controller_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
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

// gammaMoved writes service gamma with staging as gammaService does and
// prod moved to namespace ns with delivery.
func gammaMoved(r *gittest.Repo, ns, delivery string) {
	gammaService(r, "staging", "prod")
	m := "apiVersion: sluice.dev/v1alpha1\nkind: Service\nname: gamma\nowners: [team-gamma]\nchart: {path: charts/service}\nvalues: [values.yaml]\nterraform: {dir: terraform}\nenvironments:\n"
	m += "  - name: staging\n    namespace: gamma-staging\n    terraform: {vars: {env: staging}}\n    delivery: helm\n    approval: {required: 0, autoApproveRisk: high}\n"
	m += fmt.Sprintf("  - name: prod\n    namespace: %s\n    terraform: {vars: {env: prod}}\n    delivery: %s\n    approval: {required: 0, autoApproveRisk: high}\n", ns, delivery)
	r.WriteFile("services/gamma/service.yaml", m)
}

// markAppliedIn records cr as its release's applied change in namespace
// ns, as the operator does once it applied it.
func markAppliedIn(t *testing.T, ns string, cr sluicev1.ChangeRequest, target string) {
	t.Helper()
	rel := getRelease(t, ns, cr.Spec.Release)
	orig := rel.DeepCopy()
	rel.Status.AppliedChange, rel.Status.AppliedRevision, rel.Status.AppliedDigest = cr.Name, cr.Spec.Revision, cr.Spec.ApprovalDigest
	rel.Status.AppliedRule, rel.Status.AppliedTargetNamespace = cr.Spec.Rule.DeepCopy(), target
	require.NoError(t, k8s.Status().Patch(context.Background(), rel, client.MergeFrom(orig)))
}

// TestDelete_isJudgedByWhatWasAppliedNotByAnUnappliedNamespaceMove: prod
// is applied in gamma-prod; a push moves prod to the staging namespace
// (and Argo CD) and waits for approval; a push then removes prod. The
// Delete removes what was applied: prod's namespace (so prod's rules
// select it), the applied delivery and source, never the Release's
// current spec, which the unapproved push wrote.
func TestDelete_isJudgedByWhatWasAppliedNotByAnUnappliedNamespaceMove(t *testing.T) {
	for _, retained := range []bool{true, false} {
		t.Run(fmt.Sprintf("applied change retained=%v", retained), func(t *testing.T) {
			ns := newNamespace(t)
			fixture := gittest.NewRepo(t, t.TempDir(), "infra")
			fixture.CopyDir(chartDir, "charts/service")
			gammaService(fixture, "staging", "prod")
			first := fixture.Commit("gamma", "alice@example.com")
			startSyncer(t, ns, "")
			repo := newRepository(t, ns, "infra", fixture.FileURL(), func(r *sluicev1.Repository) { r.Spec.Prune = true })
			waitHandled(t, repo, requestReconcile(t, repo))
			applied := changeRequests(t, ns)[sluicev1.ChangeRequestName("gamma-prod", first, 1)]
			require.NotNil(t, applied.Spec.Source, "every change records its source")
			markAppliedIn(t, ns, applied, "gamma-prod")

			gammaMoved(fixture, "gamma-staging", "argocd")
			move := fixture.Commit("prod moves", "mallory@example.com")
			waitHandled(t, repo, requestReconcile(t, repo))
			moved, ok := changeRequests(t, ns)[sluicev1.ChangeRequestName("gamma-prod", move, 1)]
			require.True(t, ok, "the move is a change waiting for approval")
			require.Equal(t, "gamma-staging", moved.Spec.TargetNamespace)
			require.Equal(t, "gamma-staging", getRelease(t, ns, "gamma-prod").Spec.TargetNamespace, "the Release's spec summarises the newest change")
			if !retained {
				require.NoError(t, k8s.Delete(context.Background(), &applied))
			}

			gammaService(fixture, "staging")
			removal := fixture.Commit("drop prod", "mallory@example.com")
			waitHandled(t, repo, requestReconcile(t, repo))
			del, ok := changeRequests(t, ns)[sluicev1.DeleteChangeRequestName("gamma-prod", removal, 1)]
			require.True(t, ok, "a Delete change")
			require.NotNil(t, del.Spec.Deletion)
			assert.Equal(t, "gamma-prod", del.Spec.TargetNamespace, "judged in the applied namespace, where prod's rules select it")
			assert.Equal(t, "gamma-prod", del.Spec.Deletion.TargetNamespace, "removes the workload where it was applied")
			assert.Equal(t, sluicev1.DeliveryHelm, del.Spec.Deletion.Delivery, "the applied delivery, not the pushed argocd")
			assert.Equal(t, sluicev1.DeliveryHelm, del.Spec.Delivery)
			assert.Empty(t, del.Spec.Deletion.Application)
			require.NotNil(t, del.Spec.Deletion.Source)
			assert.Equal(t, applied.Spec.Source.Path, del.Spec.Deletion.Source.Path)
			assert.Equal(t, applied.Spec.Source.Terraform, del.Spec.Deletion.Source.Terraform)
			for _, o := range del.Spec.Deletion.Objects {
				if o.Namespace != "" {
					assert.Equal(t, "gamma-prod", o.Namespace, "%s/%s", o.Kind, o.Name)
				}
			}
			var notes []string
			for _, f := range del.Spec.Verdict.Findings {
				if f.Policy == "delete.applied" {
					notes = append(notes, f.Message)
				}
			}
			if retained {
				assert.Empty(t, notes, "everything came from the applied change")
			} else {
				require.NotEmpty(t, notes, "a finding says the applied change is gone")
				assert.Contains(t, strings.Join(notes, "\n"), applied.Name+" is gone")
			}
		})
	}
}

// switchingValidator validates with ok, or with broken once fail is set.
type switchingValidator struct {
	ok, broken validation.Validator
	fail       atomic.Bool
	failures   atomic.Int32
}

func (s *switchingValidator) Validate(ctx context.Context, req validation.Request) (*validation.Result, error) {
	if s.fail.Load() {
		s.failures.Add(1)
		return s.broken.Validate(ctx, req)
	}
	return s.ok.Validate(ctx, req)
}

// TestSync_aPushThatCannotBePlannedChangesNothing: a push moves the
// service folder and its Terraform init fails (the state back end does
// not answer). There is no ChangeRequest for it, and neither the
// Release's spec nor the pending change moves: an applier of the pending
// change cannot be pointed at the new folder by a push nobody saw.
func TestSync_aPushThatCannotBePlannedChangesNothing(t *testing.T) {
	ns := newNamespace(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close()) // nothing answers there
	cs, err := kubernetes.NewForConfig(env.Config)
	require.NoError(t, err)
	srv, err := tfstate.NewServer(cs, tfstate.Options{BaseURL: "http://" + addr})
	require.NoError(t, err)
	broken, err := validation.NewLibrary(context.Background(), validation.LibraryOptions{Runner: &runner.Local{}, State: srv})
	require.NoError(t, err)
	sw := &switchingValidator{ok: validator, broken: broken}

	mainTF := envVariable + "resource \"terraform_data\" \"queue\" {\n  input = var.env\n}\n"
	fixture := terraformRepo(t, mainTF, "{env: staging}")
	startSyncer(t, ns, "", func(s *syncer.Syncer) { s.Reconciler.Validator = sw })
	repo := newRepository(t, ns, "infra", fixture.FileURL())
	waitHandled(t, repo, requestReconcile(t, repo))
	first := fixture.Head("main")
	pendingName := sluicev1.ChangeRequestName("stack-staging", first, 1)
	pending, ok := changeRequests(t, ns)[pendingName]
	require.True(t, ok, "the first change waits for approval")
	before := getRelease(t, ns, "stack-staging")
	require.Equal(t, sluicev1.RelativePath("services/stack"), before.Spec.SourcePath)

	// The push moves the folder; planning it fails at terraform init.
	sw.fail.Store(true)
	for _, f := range []string{"service.yaml", "values.yaml", "terraform/main.tf"} {
		fixture.WriteFile("services/moved/"+f, readFixture(t, fixture, "services/stack/"+f))
	}
	fixture.Remove("services/stack")
	move := fixture.Commit("move the folder", "mallory@example.com")
	requestReconcile(t, repo)
	require.Eventually(t, func() bool {
		rel := getRelease(t, ns, "stack-staging")
		c := meta.FindStatusCondition(rel.Status.Conditions, sluicev1.ConditionSynced)
		return sw.failures.Load() >= 1 && c != nil && c.Status == metav1.ConditionFalse && c.Reason == sluicev1.ReasonSyncFailed
	}, timeout, tick, "the push is retried, not planned")

	crs := changeRequests(t, ns)
	_, made := crs[sluicev1.ChangeRequestName("stack-staging", move, 1)]
	assert.False(t, made, "no ChangeRequest for a push that could not be planned")
	after := getRelease(t, ns, "stack-staging")
	assert.Equal(t, before.Spec, after.Spec, "the Release's spec is written from recorded changes only")
	assert.Equal(t, pendingName, after.Status.LatestChange)
	still, ok := crs[pendingName]
	require.True(t, ok)
	assert.Equal(t, pending.Spec, still.Spec, "the pending change is what it was")
	assert.Equal(t, sluicev1.RelativePath("services/stack"), still.Spec.Source.Path)
}

// readFixture reads path from the fixture's worktree.
func readFixture(t *testing.T, r *gittest.Repo, path string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(r.Work, filepath.FromSlash(path)))
	require.NoError(t, err)
	return string(data)
}
