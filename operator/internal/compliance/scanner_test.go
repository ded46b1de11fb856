package compliance_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	openreports "github.com/openreports/reports-api/apis/openreports.io/v1alpha1"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
	"github.com/sluice-gitops/sluice/operator/internal/compliance"
	"github.com/sluice-gitops/sluice/operator/internal/plugin"
)

const (
	imagesDeny  = "sluice.kubernetes.images/deny"
	secretsDeny = "sluice.kubernetes.secrets/deny"
)

// TestScanner_violationsCarryProvenanceAndClearWhenFixed: a Deployment the
// Helm applier installed for an applied change, running an image tagged
// latest, is a failing result naming the policy, the bundle digest, the
// Release, the ChangeRequest and its approvers; a ConfigMap nobody applied
// through Sluice holding a plaintext password is a failing result marked
// unmanaged, whose message names the key but never the value. Fixing the
// image clears its result; full passes over a namespace where nothing
// changed write nothing; the metrics count the results by policy; and
// `kubectl sluice report` prints them.
func TestScanner_violationsCarryProvenanceAndClearWhenFixed(t *testing.T) {
	f := newFixture(t, compliance.Options{Interval: 300 * time.Millisecond})
	ctx := t.Context()
	ns := f.target("prod")
	release, change := f.appliedRelease("web-prod", ns, sluicev1.DeliveryHelm, "k8s:alice", "github:bob")
	argoRelease, argoChange := f.appliedRelease("api-prod", ns, sluicev1.DeliveryArgoCD, "k8s:carol")
	// What Argo CD synced for the Application of api-prod (in the control
	// namespace, so its instance label is "<namespace>_<name>").
	require.NoError(t, f.env.Client.Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "api-settings", Namespace: ns, Labels: map[string]string{"app.kubernetes.io/instance": f.ctl + "_api-prod"}},
		Data:       map[string]string{"API_TOKEN": "synced-by-argo-cd-0001"},
	}))

	dep := deployment(ns, "web", "ghcr.io/acme/web:latest")
	helmManaged(dep, "web-prod", ns)
	require.NoError(t, f.env.Client.Create(ctx, dep))
	const password = "correct-horse-battery-staple"
	require.NoError(t, f.env.Client.Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "handmade", Namespace: ns},
		Data:       map[string]string{"DB_PASSWORD": password, "LOG_LEVEL": "debug"},
	}))

	rep := f.report(ns, func(r *openreports.Report) bool {
		return len(results(r, "Deployment", "web", imagesDeny)) > 0 && len(results(r, "ConfigMap", "handmade", secretsDeny)) > 0 &&
			len(results(r, "ConfigMap", "api-settings", secretsDeny)) > 0
	}, "the image and the plaintext passwords")

	img := results(rep, "Deployment", "web", imagesDeny)[0]
	require.Equal(t, openreports.Result("fail"), img.Result)
	require.Contains(t, img.Description, `uses the mutable tag latest`)
	require.Equal(t, "true", img.Properties[compliance.PropertyManaged])
	require.Equal(t, release, img.Properties[compliance.PropertyRelease])
	require.Equal(t, change, img.Properties[compliance.PropertyChangeRequest])
	require.Equal(t, "k8s:alice,github:bob", img.Properties[compliance.PropertyApprovers])
	require.NotEmpty(t, img.Properties[compliance.PropertyBundleDigest])
	require.Equal(t, rep.Annotations[compliance.AnnotationBundleDigest], img.Properties[compliance.PropertyBundleDigest])
	require.Equal(t, ns, img.Subjects[0].Namespace)
	require.NotEmpty(t, img.Subjects[0].UID)

	synced := results(rep, "ConfigMap", "api-settings", secretsDeny)[0]
	require.Equal(t, "true", synced.Properties[compliance.PropertyManaged])
	require.Equal(t, argoRelease, synced.Properties[compliance.PropertyRelease])
	require.Equal(t, argoChange, synced.Properties[compliance.PropertyChangeRequest])
	require.Equal(t, "k8s:carol", synced.Properties[compliance.PropertyApprovers])

	cm := results(rep, "ConfigMap", "handmade", secretsDeny)[0]
	require.Equal(t, "false", cm.Properties[compliance.PropertyManaged])
	require.NotContains(t, cm.Properties, compliance.PropertyChangeRequest)
	require.Contains(t, cm.Description, `"DB_PASSWORD"`)
	raw, err := json.Marshal(rep)
	require.NoError(t, err)
	require.NotContains(t, string(raw), password, "a Secret value reached the Report")
	require.NotContains(t, string(raw), "synced-by-argo-cd-0001", "a Secret value reached the Report")

	policyResults := func(policy, result string) float64 { return f.gauge(ns, policy, result) }
	require.GreaterOrEqual(t, policyResults(imagesDeny, "fail"), 1.0)
	require.Equal(t, 2.0, policyResults(secretsDeny, "fail"))

	// kubectl sluice report: the table names the object, the policy, the
	// change and its approvers; -o json is the Report.
	var out bytes.Buffer
	require.NoError(t, plugin.Run(ctx, []string{"report", ns}, &out, &out, f.env.Config))
	t.Logf("kubectl sluice report %s:\n%s", ns, out.String())
	require.Contains(t, out.String(), "Deployment/web")
	require.Contains(t, out.String(), imagesDeny)
	require.Contains(t, out.String(), strings.TrimPrefix(change, f.ctl+"/"))
	require.Contains(t, out.String(), "k8s:alice,github:bob")
	require.NotContains(t, out.String(), password)
	out.Reset()
	require.NoError(t, plugin.Run(ctx, []string{"report"}, &out, &out, f.env.Config))
	t.Logf("kubectl sluice report:\n%s", out.String())
	require.Contains(t, out.String(), ns)
	out.Reset()
	require.NoError(t, plugin.Run(ctx, []string{"report", ns, "-o", "json"}, &out, &out, f.env.Config))
	var printed openreports.Report
	require.NoError(t, json.Unmarshal(out.Bytes(), &printed))
	require.Equal(t, rep.Summary.Fail, printed.Summary.Fail)
	require.Error(t, plugin.Run(ctx, []string{"report", f.prefix + "nowhere"}, &out, &out, f.env.Config))

	// The fix: a pinned tag. The image result clears; the password stays.
	require.NoError(t, f.env.Client.Get(ctx, client.ObjectKeyFromObject(dep), dep))
	dep.Spec.Template.Spec.Containers[0].Image = "ghcr.io/acme/web:1.4.2"
	require.NoError(t, f.env.Client.Update(ctx, dep))
	f.report(ns, func(r *openreports.Report) bool {
		return len(results(r, "Deployment", "web", imagesDeny)) == 0 && len(results(r, "ConfigMap", "handmade", secretsDeny)) == 1 &&
			len(results(r, "ConfigMap", "api-settings", secretsDeny)) == 1
	}, "the image result cleared and the password result kept")
	require.Eventually(t, func() bool { return policyResults(imagesDeny, "fail") == 0 }, time.Minute, 50*time.Millisecond,
		"the image failure's series is still set")

	// Nothing changes now: full passes (every 300ms) run and write nothing.
	settled := f.report(ns, func(*openreports.Report) bool { return true }, "")
	writes, passes := f.writes.Load(), f.scanner.Passes()
	require.Eventually(t, func() bool { return f.scanner.Passes() >= passes+5 }, time.Minute, 50*time.Millisecond, "no further passes ran")
	require.Equal(t, writes, f.writes.Load(), "passes over an unchanged namespace wrote a Report")
	again := &openreports.Report{}
	require.NoError(t, f.reports.Get(ctx, client.ObjectKeyFromObject(settled), again))
	require.Equal(t, settled.ResourceVersion, again.ResourceVersion)

	// Someone deletes the Report: the next full pass writes it back.
	require.NoError(t, f.reports.Delete(ctx, again))
	back := f.report(ns, func(r *openreports.Report) bool { return r.UID != again.UID }, "the Report written back")
	require.Equal(t, again.Summary, back.Summary)
}

// TestScanner_reportGoesWithTheTarget: a namespace that stops being a
// target (the Repository no longer lists it) loses its Report.
func TestScanner_reportGoesWithTheTarget(t *testing.T) {
	f := newFixture(t, compliance.Options{})
	ctx := t.Context()
	ns := f.target("gone")
	require.NoError(t, f.env.Client.Create(ctx, deployment(ns, "api", "nginx")))
	f.report(ns, func(r *openreports.Report) bool { return r.Summary.Fail > 0 }, "a failure")
	other := f.namespace("untargeted" + strings.TrimSuffix(f.prefix, "-"))
	require.NoError(t, f.env.Client.Create(ctx, deployment(other, "api", "nginx")))

	repo := &sluicev1.Repository{}
	require.NoError(t, f.env.Client.Get(ctx, client.ObjectKey{Namespace: f.ctl, Name: "infra"}, repo))
	repo.Spec.TargetNamespaces = []string{f.prefix + "other-*"}
	require.NoError(t, f.env.Client.Update(ctx, repo))
	require.Eventually(t, func() bool {
		err := f.reports.Get(ctx, client.ObjectKey{Namespace: ns, Name: compliance.ReportName}, &openreports.Report{})
		return client.IgnoreNotFound(err) == nil && err != nil
	}, time.Minute, 50*time.Millisecond, "the Report of a namespace no longer targeted is still there")
	err := f.reports.Get(ctx, client.ObjectKey{Namespace: other, Name: compliance.ReportName}, &openreports.Report{})
	require.True(t, client.IgnoreNotFound(err) == nil && err != nil, "a namespace no Repository targets got a Report: %v", err)
}

// gauge is the value of the sluice_compliance_results series of ns,
// policy and result; 0 when the series is not set.
func (f *fixture) gauge(ns, policy, result string) float64 {
	f.t.Helper()
	mfs, err := f.metrics.Gather()
	require.NoError(f.t, err)
	want := map[string]string{"namespace": ns, "policy": policy, "result": result}
	for _, mf := range mfs {
		if mf.GetName() != "sluice_compliance_results" {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if want[l.GetName()] != l.GetValue() {
					continue series
				}
			}
			return m.GetGauge().GetValue()
		}
	}
	return 0
}
