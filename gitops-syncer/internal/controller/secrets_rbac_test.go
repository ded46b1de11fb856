package controller_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sluice-gitops/sluice/gitops-syncer/internal/artifact"
	"github.com/sluice-gitops/sluice/gitops-syncer/internal/gittest"
	"github.com/sluice-gitops/sluice/gitops-syncer/internal/syncer"
	"github.com/sluice-gitops/sluice/kit/testenv"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// TestSync_readsRepositorySecretsWithGetOnlyInItsNamespace runs the syncer
// as a user whose only Secret rights are get and create in the namespace it
// serves (the chart's per-namespace binding): no list, no watch, nothing
// cluster-wide. It must still read the Repository's git credentials (direct
// GETs, no Secret informer) and turn the commit into ChangeRequests.
func TestSync_readsRepositorySecretsWithGetOnlyInItsNamespace(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	root := t.TempDir()
	fixture := seedHelmRepo(t, root, "infra")
	srv := gittest.StartHTTP(t, root, gitUser, gitPassword)
	basicAuthSecret(t, ns, "git", gitUser, gitPassword)

	user := "syncer-" + ns
	cfg, err := env.AddUser(user)
	require.NoError(t, err)
	// Cluster-wide: the Sluice kinds and events, no Secret verb at all.
	cr := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: user},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{sluicev1.GroupVersion.Group}, Resources: []string{"repositories"}, Verbs: []string{"get", "list", "watch"}},
			{APIGroups: []string{sluicev1.GroupVersion.Group}, Resources: []string{"repositories/status"}, Verbs: []string{"get", "patch", "update"}},
			{APIGroups: []string{sluicev1.GroupVersion.Group}, Resources: []string{"releases"}, Verbs: []string{"get", "list", "watch", "create", "patch", "update", "delete"}},
			{APIGroups: []string{sluicev1.GroupVersion.Group}, Resources: []string{"releases/status"}, Verbs: []string{"get", "patch"}},
			{APIGroups: []string{sluicev1.GroupVersion.Group}, Resources: []string{"changerequests"}, Verbs: []string{"get", "list", "watch", "create", "delete"}},
			{APIGroups: []string{sluicev1.GroupVersion.Group}, Resources: []string{"approvals"}, Verbs: []string{"get", "list", "create"}},
			{APIGroups: []string{"events.k8s.io", ""}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
		},
	}
	require.NoError(t, k8s.Create(ctx, cr))
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), cr) })
	crb := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: user},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: user},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}},
	}
	require.NoError(t, k8s.Create(ctx, crb))
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), crb) })
	// In the namespace it serves: Secrets get and create, nothing more.
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "syncer-secrets", Namespace: ns},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get", "create"}}},
	}
	require.NoError(t, k8s.Create(ctx, role))
	require.NoError(t, k8s.Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "syncer-secrets", Namespace: ns},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}},
	}))
	may := func(namespace, verb, resource string) bool {
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User: user, Groups: []string{"system:authenticated"},
			ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: namespace, Verb: verb, Resource: resource},
		}}
		require.NoError(t, k8s.Create(ctx, sar))
		return sar.Status.Allowed
	}
	require.Eventually(t, func() bool { return may(ns, "get", "secrets") }, timeout, tick, "the Role is not effective")
	require.False(t, may(ns, "list", "secrets"))
	require.False(t, may(ns, "watch", "secrets"))
	require.False(t, may("", "list", "secrets"))

	s, err := syncer.New(cfg, syncer.Options{
		ArtifactAddr: "127.0.0.1:0", ArtifactToken: artifact.StaticToken(testArtifactToken),
		DataDir: t.TempDir(), Namespaces: []string{ns}, Validator: validator, SkipNameValidation: true,
	})
	require.NoError(t, err)
	testenv.Go(t, s)

	repo := newRepository(t, ns, "infra", srv.RepoURL("infra"), func(r *sluicev1.Repository) {
		r.Spec.SecretRef = &sluicev1.LocalObjectReference{Name: "git"}
	})
	got := waitHandled(t, repo, requestReconcile(t, repo))
	assert.Equal(t, fixture.Head("main"), got.Status.LastSyncedCommit, "the syncer read the credentials and fetched")
	waitReady(t, repo, metav1.ConditionTrue, sluicev1.ReasonSucceeded)
	assert.Len(t, changeRequests(t, ns), 2, "one ChangeRequest per release")
}
