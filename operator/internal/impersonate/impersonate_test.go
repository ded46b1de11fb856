package impersonate

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-gitops/sluice/kit/testenv"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
	"github.com/sluice-gitops/sluice/operator/internal/applier"
)

var env *testenv.Env

func TestMain(m *testing.M) {
	testenv.Main(m, testenv.Options{}, func(e *testenv.Env) error { env = e; return nil })
}

func repo(ns string, patterns ...string) *sluicev1.Repository {
	return &sluicev1.Repository{
		ObjectMeta: metav1.ObjectMeta{Name: "infra", Namespace: ns},
		Spec:       sluicev1.RepositorySpec{ServiceAccountName: "deployer", TargetNamespaces: patterns},
	}
}

func TestCheckNamespace_onlyTheRepositorysPatterns(t *testing.T) {
	cases := []struct {
		sentence string
		patterns []string
		ns       string
		allowed  bool
	}{
		{"an exact name is allowed", []string{"checkout-staging"}, "checkout-staging", true},
		{"a glob allows its matches", []string{"checkout-*"}, "checkout-prod", true},
		{"a glob does not allow a prefix of itself", []string{"checkout-*"}, "checkout", false},
		{"a namespace outside every pattern is refused", []string{"checkout-*", "payments"}, "kube-system", false},
		{"a character class is honoured", []string{"team-[ab]"}, "team-b", true},
		{"a malformed pattern allows nothing", []string{"team-["}, "team-[", false},
		{"an invalid namespace name is refused", []string{"*"}, "Not_A_Namespace", false},
	}
	for _, tc := range cases {
		t.Run(tc.sentence, func(t *testing.T) {
			err := CheckNamespace(repo("sluice", tc.patterns...), tc.ns)
			if tc.allowed {
				require.NoError(t, err)
				return
			}
			f, ok := applier.AsFailure(err)
			require.True(t, ok, "want a permanent failure, got %v", err)
			require.Equal(t, sluicev1.ReasonNamespaceNotAllowed, f.Reason)
			require.Contains(t, f.Message, tc.ns)
		})
	}
}

func TestUser_refusesABadServiceAccountName(t *testing.T) {
	r := repo("sluice", "*")
	r.Spec.ServiceAccountName = "Bad Name"
	_, err := User(r)
	f, ok := applier.AsFailure(err)
	require.True(t, ok)
	require.Equal(t, sluicev1.ReasonInvalidSpec, f.Reason)
	_, err = User(nil)
	require.Error(t, err)
}

func TestConfig_actsAsTheServiceAccountWithItsRBACOnly(t *testing.T) {
	ctx := context.Background()
	for _, ns := range []string{"imp-control", "imp-target", "imp-other"} {
		require.NoError(t, env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	}
	require.NoError(t, env.GrantRole(ctx, "imp-target", "deploy", types.NamespacedName{Namespace: "imp-control", Name: "deployer"},
		[]rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"*"}}},
		authorizationv1.ResourceAttributes{Verb: "create", Resource: "configmaps"}))

	cfg, err := Config(env.Config, repo("imp-control", "imp-target"))
	require.NoError(t, err)
	require.Empty(t, env.Config.Impersonate.UserName, "the operator's own config is not changed")
	cs, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)

	review, err := cs.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	require.NoError(t, err)
	require.Equal(t, "system:serviceaccount:imp-control:deployer", review.Status.UserInfo.Username)
	require.Contains(t, review.Status.UserInfo.Groups, "system:serviceaccounts:imp-control", "the API server adds the ServiceAccount's groups")

	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "x"}}
	_, err = cs.CoreV1().ConfigMaps("imp-target").Create(ctx, cm, metav1.CreateOptions{})
	require.NoError(t, err, "allowed by the ServiceAccount's Role")
	_, err = cs.CoreV1().ConfigMaps("imp-other").Create(ctx, cm, metav1.CreateOptions{})
	require.True(t, apierrors.IsForbidden(err), "no Role in imp-other: %v", err)
	_, err = cs.CoreV1().Secrets("imp-target").List(ctx, metav1.ListOptions{})
	require.True(t, apierrors.IsForbidden(err), "the Role grants configmaps only: %v", err)

	c, err := Client(env.Config, repo("imp-control", "imp-target"), env.Scheme)
	require.NoError(t, err)
	var got corev1.ConfigMap
	require.NoError(t, c.Get(ctx, clientKey("imp-target", "x"), &got))
}

func clientKey(ns, name string) client.ObjectKey { return client.ObjectKey{Namespace: ns, Name: name} }
