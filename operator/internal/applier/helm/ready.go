package helm

// Readiness without a held worker. With Options.Wait, Helm installs or
// upgrades without its blocking wait, and the change waits for readiness
// the way an Argo CD sync is waited for: Apply returns an
// *applier.Waiting, the reconcile worker is free for other changes, and
// the operator looks again (a pod of the release changing readiness, or
// ReadyPoll) until the objects of the revision are ready or the Helm
// timeout has passed.
//
// The release record says what Helm's wait would say, so a restart, a
// reader of `helm status` and the recovery of an interrupted run all see
// the usual Helm states:
//
//   - while the objects are not ready, the revision stays pending-install
//     or pending-upgrade and the revision before it stays deployed (the
//     storage driver keeps them so as Helm finishes: guardedDriver.Update);
//     its description is the change's marker, which no interrupted Helm
//     run leaves on a pending record ("Initial install underway",
//     "Preparing upgrade"), so a restart resumes the wait and never
//     installs again;
//   - ready (every object of the revision's manifest kstatus Current, the
//     judgement a verification's health makes): the revision before it is
//     superseded and this one deployed, in Helm's order;
//   - the timeout (from the revision's time of deployment, so it survives
//     a restart): the revision is marked failed with Helm's description,
//     then rolled back to the revision before it, or, for a first install,
//     uninstalled (what Sluice did after a failed blocking wait too).
//
// A chart with post-install or post-upgrade hooks keeps Helm's blocking
// wait: Helm runs those hooks only once the objects are ready, and Sluice
// does not run hooks itself.

import (
	"context"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/release"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/sluice-gitops/sluice/infra-validator/pkg/helmcheck"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
	"github.com/sluice-gitops/sluice/operator/internal/applier"
	"github.com/sluice-gitops/sluice/operator/internal/verify"
)

// DefaultReadyPoll is how often a change waiting for readiness is looked
// at when no pod of its release wakes it first: Helm's own wait polls
// every two seconds.
const DefaultReadyPoll = 2 * time.Second

// hasPostHooks reports whether a release record runs hooks on event, which
// Helm runs only after its wait.
func hasPostHooks(rel *release.Release, event release.HookEvent) bool {
	for _, h := range rel.Hooks {
		for _, e := range h.Events {
			if e == event {
				return true
			}
		}
	}
	return false
}

// awaitingReadiness reports whether rec is the revision change cr
// installed and now waits for readiness (pending, with cr's marker).
func awaitingReadiness(rec *release.Release, cr *sluicev1.ChangeRequest) bool {
	return rec != nil && rec.Info != nil && rec.Info.Status.IsPending() && rec.Info.Description == marker(cr)
}

// awaitReady looks once at the objects of rec, the pending revision change
// cr installed: ready → the record is marked deployed and the change
// applied; the Helm timeout passed → failed and rolled back; else Waiting.
func (a *Applier) awaitReady(ctx context.Context, s *session, name string, cr *sluicev1.ChangeRequest, rec *release.Release, hist []*release.Release, log logr.Logger) (applier.Result, error) {
	if got := helmcheck.ReleaseDigest([]byte(rec.Manifest), rec.Hooks); got != string(cr.Spec.ManifestDigest) {
		// Only someone who can write the release's storage Secrets gets
		// here; nothing of it is trusted.
		return applier.Result{}, applier.Permanent(sluicev1.ReasonManifestMismatch,
			"the pending Helm revision %d hashes to %s, not the approved %s", rec.Version, got, cr.Spec.ManifestDigest)
	}
	h, err := a.readiness(ctx, s, rec)
	if err != nil {
		return applier.Result{}, err
	}
	if h.State == verify.Healthy {
		what := "upgraded"
		if rec.Info.Status == release.StatusPendingInstall {
			what = "installed"
		}
		if err := s.markReady(rec, hist); err != nil {
			return applier.Result{}, s.explain("record the ready revision", err)
		}
		log.Info("Helm release ready", "revision", rec.Version)
		return result(s.namespace, rec, what+", its objects ready"), nil
	}
	deadline := rec.Info.LastDeployed.Time.Add(a.opts.Timeout)
	now := time.Now()
	if !now.Before(deadline) {
		return applier.Result{}, a.notReady(s, name, rec, hist, h.Message, log)
	}
	log.V(1).Info("Waiting for the Helm release to be ready", "revision", rec.Version, "health", h.Message)
	return applier.Result{}, a.waiting(s, name, rec, min(a.opts.ReadyPoll, deadline.Sub(now)+time.Second))
}

// waiting is the Waiting of a change whose revision rec waits for
// readiness. Its message is the same at every look, so looking again
// writes no status.
func (a *Applier) waiting(s *session, name string, rec *release.Release, after time.Duration) error {
	return applier.Wait(sluicev1.ReasonWaitingForReadiness, after,
		"Helm revision %d of %s/%s is applied; waiting for its objects to be ready (Helm's timeout, %s, ends at %s)",
		rec.Version, s.namespace, name, a.opts.Timeout, rec.Info.LastDeployed.Time.Add(a.opts.Timeout).UTC().Format(time.RFC3339))
}

// readiness is the kstatus verdict (verify.ObjectsHealth, as a
// verification judges a Helm change) over the live copies, read as the
// Repository's ServiceAccount, of every object in rec's manifest.
func (a *Applier) readiness(ctx context.Context, s *session, rec *release.Release) (verify.Health, error) {
	objs, err := helmcheck.ParseManifest(rec.Manifest)
	if err != nil {
		return verify.Health{}, applier.Permanent(sluicev1.ReasonApplyFailed, "the manifest of Helm revision %d cannot be read: %v", rec.Version, err)
	}
	rc, err := s.cfg.RESTClientGetter.ToRESTConfig()
	if err != nil {
		return verify.Health{}, fmt.Errorf("helm client: %w", err)
	}
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		return verify.Health{}, fmt.Errorf("helm client: %w", err)
	}
	var live []*unstructured.Unstructured
	var missing []string
	for _, o := range objs {
		gv, err := schema.ParseGroupVersion(o.APIVersion)
		if err != nil {
			return verify.Health{}, applier.Permanent(sluicev1.ReasonApplyFailed, "%s %s has an invalid apiVersion %q", o.Kind, o.Name, o.APIVersion)
		}
		m, err := a.mapping(schema.GroupVersionKind{Group: gv.Group, Version: gv.Version, Kind: o.Kind})
		if err != nil {
			return verify.Health{}, err
		}
		ri := dynamic.ResourceInterface(dyn.Resource(m.Resource))
		if m.Scope.Name() == meta.RESTScopeNameNamespace {
			ns := o.ExplicitNamespace
			if ns == "" {
				ns = s.namespace
			}
			ri = dyn.Resource(m.Resource).Namespace(ns)
		}
		got, err := ri.Get(ctx, o.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			missing = append(missing, o.Kind+" "+o.Name)
			continue
		case err != nil:
			return verify.Health{}, s.explain("read "+o.Kind+" "+o.Name, err)
		}
		got.SetAPIVersion(o.APIVersion)
		got.SetKind(o.Kind)
		live = append(live, got)
	}
	return verify.ObjectsHealth(live, missing)
}

// mapping maps a kind to its resource with the applier's shared REST
// mapper (discovery is read once, not at every look), reading discovery
// again once for a kind it does not know yet.
func (a *Applier) mapping(gvk schema.GroupVersionKind) (*meta.RESTMapping, error) {
	m, err := a.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if meta.IsNoMatchError(err) {
		a.mapper.Reset()
		m, err = a.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	}
	if err != nil {
		return nil, fmt.Errorf("map %s to a resource: %w", gvk, err)
	}
	return m, nil
}

// markReady records rec as Helm's wait does once the objects are ready:
// the revision deployed before it superseded, then rec deployed (a
// restart between the two finds rec still pending, looks again and
// finishes).
func (s *session) markReady(rec *release.Release, hist []*release.Release) error {
	for _, r := range hist {
		if r.Version < rec.Version && r.Info != nil && r.Info.Status == release.StatusDeployed {
			r.SetStatus(release.StatusSuperseded, "Superseded")
			if err := s.cfg.Releases.Update(r); err != nil {
				return err
			}
		}
	}
	rec.Info.Status = release.StatusDeployed
	return s.cfg.Releases.Update(rec)
}

// notReady ends a wait that ran out of time as Helm's wait with rollback
// on failure does: rec is marked failed with Helm's description, then an
// upgrade is rolled back to the revision deployed before it and a first
// install is uninstalled. The change fails with ReasonReadyTimeout.
func (a *Applier) notReady(s *session, name string, rec *release.Release, hist []*release.Release, health string, log logr.Logger) error {
	upgrade := rec.Info.Status == release.StatusPendingUpgrade
	what := "Release"
	if upgrade {
		what = "Upgrade"
	}
	rec.SetStatus(release.StatusFailed, fmt.Sprintf("%s %q failed: timed out waiting for the condition", what, name))
	if err := s.cfg.Releases.Update(rec); err != nil {
		return s.explain("mark the revision that was not ready failed", err)
	}
	fail := &applier.Failure{Reason: sluicev1.ReasonReadyTimeout,
		Message: fmt.Sprintf("the objects of Helm revision %d were not ready within %s: %s", rec.Version, a.opts.Timeout, health)}
	var previous *release.Release
	for _, r := range hist {
		if r.Version < rec.Version && r.Info != nil && (r.Info.Status == release.StatusDeployed || r.Info.Status == release.StatusSuperseded) &&
			(previous == nil || r.Version > previous.Version) {
			previous = r
		}
	}
	if previous == nil {
		if err := s.uninstall(name, true); err != nil {
			return fmt.Errorf("%w; uninstalling it also failed: %v", fail, err)
		}
		log.Info("Uninstalled a first install that was not ready in time", "revision", rec.Version)
		fail.Message += "; uninstalled"
		return fail
	}
	rb := action.NewRollback(s.cfg)
	rb.Version = previous.Version
	rb.Timeout = a.opts.Timeout
	rb.MaxHistory = a.opts.MaxHistory
	if err := rb.Run(name); err != nil {
		return fmt.Errorf("%w; rolling back to revision %d also failed: %v", fail, previous.Version, err)
	}
	log.Info("Rolled back a revision that was not ready in time", "revision", rec.Version, "to", previous.Version)
	fail.Message += fmt.Sprintf("; rolled back to revision %d", previous.Version)
	return fail
}
