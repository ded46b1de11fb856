// Package helm is the embedded default applier (delivery: helm): a Helm v3
// SDK upgrade --install of the approved artifact's chart with the
// environment's values, as the Repository's ServiceAccount, into the
// change's target namespace, installing only manifests that hash to the
// approved manifestDigest (DESIGN.md §5).
//
// One Apply runs these steps, and stops at the first that fails:
//
//  1. the target namespace is one the Repository allows;
//  2. as the ServiceAccount, read the Helm history (storage: Secrets in the
//     target namespace); a deployed latest revision that carries this
//     change's marker means the change is already applied: return it;
//  3. download, verify (archive, content and approval digests) and extract
//     the artifact;
//  4. load the chart and values the change's spec.source names (folder,
//     environment, chart, values files; never the Release's spec, which a
//     later push rewrites) from the verified content, and check the service
//     manifest there agrees with the change; a Kustomize overlay or a
//     manifests folder is built into the same generated chart the
//     validator rendered (infra-validator/pkg/sources); this step is
//     package approved, shared with the Argo CD plugin;
//  5. recover a release an earlier attempt left behind (pending-*, or never
//     deployed): uninstall it when nothing was ever deployed, otherwise mark
//     the interrupted revision failed and upgrade over it;
//  6. install or upgrade through the gate (postrender.go): the
//     post-renderer refuses objects outside the target namespace that the
//     Repository does not allow (OutsideNamespace), and the release record
//     Helm stores before it creates anything or runs a hook must hash,
//     manifests and hooks, to the approved manifestDigest
//     (ManifestMismatch); on failure uninstall a first install or roll
//     back to the previous deployed revision;
//  7. with Wait, Helm does not wait: the revision stays pending and the
//     change waits for its objects to be ready without holding a worker
//     (ready.go), resumed at step 2 by every later call.
package helm

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/kube"
	"helm.sh/helm/v3/pkg/release"
	"helm.sh/helm/v3/pkg/storage"
	"helm.sh/helm/v3/pkg/storage/driver"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"

	"github.com/sluice-gitops/sluice/infra-validator/pkg/helmcheck"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
	"github.com/sluice-gitops/sluice/operator/internal/applier"
	"github.com/sluice-gitops/sluice/operator/internal/applier/approved"
	"github.com/sluice-gitops/sluice/operator/internal/artifact"
	"github.com/sluice-gitops/sluice/operator/internal/impersonate"
)

// Name is the applier's name in status and metrics.
const Name = "helm"

// LabelApproval is the Helm release label (on the storage Secret) holding
// the first 40 hex digits of the approvalDigest a revision installs.
const LabelApproval = "gitops.sluice.dev/approval"

// DefaultTimeout bounds hooks and, when Wait is on, the wait for readiness.
const DefaultTimeout = 5 * time.Minute

// DefaultMaxHistory is how many Helm revisions are kept per release.
const DefaultMaxHistory = 10

// Options configure the Helm applier.
type Options struct {
	// Config is the operator's own connection; it must be allowed to
	// impersonate the Repositories' ServiceAccounts and nothing is applied
	// with it directly.
	Config *rest.Config
	// Fetcher downloads and verifies artifacts.
	Fetcher *artifact.Fetcher
	// KubeVersion is the Kubernetes version charts are rendered for; it must
	// be the validator's, or every digest differs. Empty means
	// DefaultKubeVersion.
	KubeVersion string
	// Wait makes a change applied only once the objects it installed are
	// ready (kstatus Current). Helm itself does not wait (except for a
	// chart with post-install or post-upgrade hooks): Apply returns an
	// *applier.Waiting until they are, or fails the change after Timeout
	// (ready.go).
	Wait bool
	// Timeout bounds hooks and Wait; zero means DefaultTimeout.
	Timeout time.Duration
	// ReadyPoll is how soon a change waiting for readiness is looked at
	// again when nothing wakes it earlier; zero means DefaultReadyPoll.
	ReadyPoll time.Duration
	// MaxHistory is how many revisions Helm keeps; zero means
	// DefaultMaxHistory.
	MaxHistory int
	// Log receives Helm's debug output at V(1).
	Log logr.Logger
}

// Applier installs approved changes with the Helm SDK.
type Applier struct {
	opts Options
	caps *chartutil.Capabilities
	// mapper maps the kinds of a revision's objects to resources for the
	// readiness looks, with discovery read once for all of them (each
	// session's own is read again per apply).
	mapper meta.ResettableRESTMapper
}

var (
	_ applier.Applier = (*Applier)(nil)
	_ applier.Cleaner = (*Applier)(nil)
)

// New checks the options and returns the applier.
func New(opts Options) (*Applier, error) {
	if opts.Config == nil {
		return nil, errors.New("helm applier: no rest config")
	}
	if opts.Fetcher == nil {
		return nil, errors.New("helm applier: no artifact fetcher")
	}
	if opts.Timeout == 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.MaxHistory == 0 {
		opts.MaxHistory = DefaultMaxHistory
	}
	if opts.ReadyPoll == 0 {
		opts.ReadyPoll = DefaultReadyPoll
	}
	caps, err := renderCapabilities(opts.KubeVersion)
	if err != nil {
		return nil, fmt.Errorf("helm applier: %w", err)
	}
	dc, err := discovery.NewDiscoveryClientForConfig(opts.Config)
	if err != nil {
		return nil, fmt.Errorf("helm applier: %w", err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))
	return &Applier{opts: opts, caps: caps, mapper: mapper}, nil
}

// Name implements applier.Applier.
func (a *Applier) Name() string { return Name }

// ReleaseName is the Helm release name of a Release: the Release's own
// name, "<service>-<environment>", the name the validator renders with.
func ReleaseName(rel *applier.ReleaseRef) string { return rel.Name }

// marker is the description of a revision installed for cr; it makes a
// re-run of the same change recognise its own finished work.
func marker(cr *sluicev1.ChangeRequest) string {
	return fmt.Sprintf("Sluice change %s/%s %s", cr.Namespace, cr.Name, cr.Spec.ApprovalDigest)
}

func approvalLabel(d sluicev1.Digest) string {
	s := strings.TrimPrefix(string(d), "sha256:")
	if len(s) > 40 {
		s = s[:40]
	}
	return s
}

// Apply implements applier.Applier. It is idempotent per change: a re-run
// after a crash finishes or confirms the earlier attempt and never installs
// a second revision for a change already deployed.
func (a *Applier) Apply(ctx context.Context, req applier.Request) (applier.Result, error) {
	cr, rel, repo := req.Change, req.Release, req.Repository
	if cr == nil || rel == nil {
		return applier.Result{}, applier.Permanent(sluicev1.ReasonInvalidSpec, "the request has no change or no release")
	}
	src, err := applier.SourceOf(cr)
	if err != nil {
		return applier.Result{}, err
	}
	ns := cr.Spec.TargetNamespace
	if err := impersonate.CheckNamespace(repo, ns); err != nil {
		return applier.Result{}, err
	}
	if !sluicev1.ValidDigest(string(cr.Spec.ManifestDigest)) {
		return applier.Result{}, applier.Permanent(sluicev1.ReasonInvalidSpec, "the change records no manifestDigest, so nothing can be checked against it")
	}
	name := ReleaseName(rel)
	if err := chartutil.ValidateReleaseName(name); err != nil {
		return applier.Result{}, applier.Permanent(sluicev1.ReasonInvalidSpec, "%q cannot be a Helm release name: %v", name, err)
	}
	s, err := a.session(repo, ns)
	if err != nil {
		return applier.Result{}, err
	}
	log := a.opts.Log.WithValues("helmRelease", ns+"/"+name, "change", cr.Name)

	hist, err := s.history(name)
	if err != nil {
		return applier.Result{}, s.explain("read the Helm history", err)
	}
	last, deployed := latest(hist), latestDeployed(hist)
	if last != nil && last.Info.Status == release.StatusDeployed && last.Info.Description == marker(cr) {
		log.V(1).Info("Change already deployed", "revision", last.Version)
		return result(ns, last, "already deployed"), nil
	}
	if awaitingReadiness(last, cr) {
		// Installed by an earlier call (before a restart, too): never
		// again, only looked at.
		return a.awaitReady(ctx, s, name, cr, last, hist, log)
	}

	content, err := a.opts.Fetcher.FetchChange(ctx, cr)
	if err != nil {
		return applier.Result{}, err
	}
	defer func() { _ = content.Close() }()
	ch, vals, err := loadInputs(content.Dir, cr, src)
	if err != nil {
		return applier.Result{}, err
	}

	// Helm runs to the end once started: cancelling it half-way leaves the
	// release failed while Helm goes on in the background. A killed process
	// is what the recovery below is for.
	hctx := context.WithoutCancel(ctx)

	if last != nil && (deployed == nil || last.Info.Status.IsPending()) {
		if err := a.recover(s, name, last, deployed, log); err != nil {
			return applier.Result{}, err
		}
		if deployed == nil {
			last = nil // uninstalled: install afresh.
		}
	}

	gate, err := newApplyGate(s, cr, repo)
	if err != nil {
		return applier.Result{}, err
	}
	if err := gate.checkCRDFolder(ch); err != nil {
		return applier.Result{}, s.explain("check the chart's crds/", err)
	}
	if last == nil {
		return a.install(hctx, s, name, cr, ch, vals, gate, log)
	}
	return a.upgrade(hctx, s, name, cr, ch, vals, gate, deployed, log)
}

func (a *Applier) install(ctx context.Context, s *session, name string, cr *sluicev1.ChangeRequest, ch *chart.Chart, vals map[string]any, gate *applyGate, log logr.Logger) (applier.Result, error) {
	newInstall := func() *action.Install {
		in := action.NewInstall(s.cfg)
		in.ReleaseName, in.Namespace = name, s.namespace
		in.Timeout = a.opts.Timeout
		in.Description = marker(cr)
		in.Labels = map[string]string{LabelApproval: approvalLabel(cr.Spec.ApprovalDigest)}
		in.PostRenderer = gate
		return in
	}
	if len(ch.CRDObjects()) > 0 {
		// Install puts a chart's crds/ in before it renders; render first
		// (dry run, no writes) so a refused chart installs no CRD either.
		// A dry run stores no record, so its record is checked here.
		dry := newInstall()
		dry.DryRun, dry.DryRunOption = true, "server"
		r, err := dry.RunWithContext(ctx, ch, vals)
		if err == nil {
			err = gate.checkRelease(r)
		}
		if err != nil {
			return applier.Result{}, s.explain("check the chart before installing its CRDs", err)
		}
	}
	in := newInstall()
	a.deferWait(gate, release.HookPostInstall, func() { in.Wait = true })
	s.guard.arm(gate)
	r, err := in.RunWithContext(ctx, ch, vals)
	s.guard.disarm()
	if err == nil {
		log.Info("Installed Helm release", "revision", r.Version)
		return a.appliedOrWaiting(s, name, r, gate, "installed")
	}
	failure := s.explain("install", err)
	if !refused(err) {
		// Nothing of a failed first install may stay behind.
		if uerr := s.uninstall(name, true); uerr != nil {
			return applier.Result{}, fmt.Errorf("%w; uninstalling the failed install also failed: %v", failure, uerr)
		}
	}
	return applier.Result{}, failure
}

func (a *Applier) upgrade(ctx context.Context, s *session, name string, cr *sluicev1.ChangeRequest, ch *chart.Chart, vals map[string]any, gate *applyGate, deployed *release.Release, log logr.Logger) (applier.Result, error) {
	up := action.NewUpgrade(s.cfg)
	up.Namespace = s.namespace
	up.Timeout = a.opts.Timeout
	up.MaxHistory = a.opts.MaxHistory
	up.Description = marker(cr)
	up.Labels = map[string]string{LabelApproval: approvalLabel(cr.Spec.ApprovalDigest)}
	up.PostRenderer = gate
	a.deferWait(gate, release.HookPostUpgrade, func() { up.Wait = true })
	s.guard.arm(gate)
	r, err := up.RunWithContext(ctx, name, ch, vals)
	s.guard.disarm()
	if err == nil {
		log.Info("Upgraded Helm release", "revision", r.Version)
		return a.appliedOrWaiting(s, name, r, gate, "upgraded")
	}
	failure := s.explain("upgrade", err)
	if refused(err) || deployed == nil {
		return applier.Result{}, failure // refused before anything was stored.
	}
	rb := action.NewRollback(s.cfg)
	rb.Version = deployed.Version
	rb.Timeout = a.opts.Timeout
	rb.MaxHistory = a.opts.MaxHistory
	if rerr := rb.Run(name); rerr != nil {
		return applier.Result{}, fmt.Errorf("%w; rolling back to revision %d also failed: %v", failure, deployed.Version, rerr)
	}
	log.Info("Rolled back after a failed upgrade", "revision", deployed.Version)
	var f *applier.Failure
	if errors.As(failure, &f) {
		f.Message += fmt.Sprintf("; rolled back to revision %d", deployed.Version)
	}
	return applier.Result{}, failure
}

// deferWait sets how the run waits for readiness: with Options.Wait, Sluice
// waits after Helm returns (ready.go) unless the record Helm creates has
// post hooks of event, which Helm runs only after its own wait: then
// blocking switches Helm's wait on, before Helm starts applying.
func (a *Applier) deferWait(gate *applyGate, event release.HookEvent, blocking func()) {
	gate.deferWait, gate.postHook, gate.blockingWait = a.opts.Wait, event, blocking
}

// appliedOrWaiting is the outcome of a run that succeeded: applied, or,
// when Sluice waits for readiness, the first Waiting of the wait (the
// objects were created a moment ago).
func (a *Applier) appliedOrWaiting(s *session, name string, r *release.Release, gate *applyGate, what string) (applier.Result, error) {
	if !gate.waitsItself() {
		return result(s.namespace, r, what), nil
	}
	return applier.Result{}, a.waiting(s, name, r, a.opts.ReadyPoll)
}

// recover makes an interrupted release usable again. When nothing was ever
// deployed the leftovers are uninstalled, so the install starts from
// nothing; otherwise the pending revision is marked failed and the upgrade
// that follows completes the change over it.
func (a *Applier) recover(s *session, name string, last, deployed *release.Release, log logr.Logger) error {
	if deployed == nil {
		log.Info("Removing a Helm release that never deployed", "revision", last.Version, "status", last.Info.Status.String())
		if err := s.uninstall(name, true); err != nil {
			return s.explain("remove the interrupted first install", err)
		}
		return nil
	}
	if last.Info.Status.IsPending() {
		log.Info("Marking an interrupted Helm revision failed", "revision", last.Version, "status", last.Info.Status.String())
		last.SetStatus(release.StatusFailed, fmt.Sprintf("Interrupted while %s; marked failed by Sluice to recover", last.Info.Status))
		if err := s.cfg.Releases.Update(last); err != nil {
			return s.explain("mark the interrupted revision failed", err)
		}
	}
	return nil
}

// Cleanup implements applier.Cleaner: it uninstalls the Release's Helm
// release from the namespace it was applied to (r.TargetNamespace, never
// the Release's spec) as the Repository's ServiceAccount, and returns once
// it is gone, saying where it was removed from. Without a Repository, or
// in a namespace the Repository no longer allows, nothing may be removed:
// an approved Delete change then fails (OutsideNamespace), and a
// finalizer's cleanup leaves the Helm release in place and says so, so
// the Release can go.
func (a *Applier) Cleanup(ctx context.Context, r applier.Removal, repo *sluicev1.Repository) (applier.Result, error) {
	rel, ns := r.Release, r.TargetNamespace
	if rel == nil || ns == "" {
		return applier.Result{Message: "nothing was applied, so no Helm release to uninstall"}, nil
	}
	name := ReleaseName(rel)
	log := a.opts.Log.WithValues("helmRelease", ns+"/"+name)
	leave := func(reason, why string) (applier.Result, error) {
		msg := fmt.Sprintf("the Helm release %s in namespace %s was left in place: %s", name, ns, why)
		if r.Change != nil {
			return applier.Result{}, applier.Permanent(reason, "%s", msg)
		}
		log.Info("Left the Helm release in place", "reason", why)
		return applier.Result{Message: msg}, nil
	}
	// Without the Repository there is no ServiceAccount to act as, and a
	// namespace the Repository no longer allows is not to be touched.
	if repo == nil {
		return leave(sluicev1.ReasonInvalidSpec, "its Repository is gone, so there is no ServiceAccount to uninstall it as")
	}
	if err := impersonate.CheckNamespace(repo, ns); err != nil {
		return leave(sluicev1.ReasonOutsideNamespace, "the Repository does not allow that namespace ("+err.Error()+")")
	}
	s, err := a.session(repo, ns)
	if err != nil {
		return applier.Result{}, err
	}
	h, err := s.history(name)
	if err != nil {
		return applier.Result{}, s.explain("read the Helm history", err)
	}
	if len(h) == 0 {
		return applier.Result{Message: fmt.Sprintf("no Helm release %s in namespace %s: nothing to uninstall", name, ns)}, nil
	}
	if err := s.uninstall(name, false); err != nil {
		return applier.Result{}, s.explain("uninstall", err)
	}
	log.Info("Uninstalled Helm release")
	return applier.Result{Message: fmt.Sprintf("Helm release %s uninstalled from namespace %s", name, ns)}, nil
}

// refused reports a refusal of the gate: Helm stopped before it stored a
// release record or touched any object.
func refused(err error) bool {
	return errors.Is(err, helmcheck.ErrManifestMismatch) || errors.Is(err, helmcheck.ErrOutsideNamespace)
}

// session is one impersonated Helm configuration for one namespace.
type session struct {
	cfg       *action.Configuration
	namespace string
	user      string
	// guard is the storage driver: it checks the release records Helm
	// creates while a gate is armed.
	guard *guardedDriver
}

func (a *Applier) session(repo *sluicev1.Repository, ns string) (*session, error) {
	rc, err := impersonate.Config(a.opts.Config, repo)
	if err != nil {
		return nil, err
	}
	if rc.Timeout == 0 {
		rc.Timeout = 2 * time.Minute // no single request may hang an apply.
	}
	g, err := NewRESTClientGetter(rc, ns)
	if err != nil {
		return nil, fmt.Errorf("helm client: %w", err)
	}
	cs, err := kubernetes.NewForConfig(g.config)
	if err != nil {
		return nil, fmt.Errorf("helm client: %w", err)
	}
	debug := func(format string, v ...any) { a.opts.Log.V(1).Info(fmt.Sprintf(format, v...)) }
	kc := kube.New(g)
	kc.Namespace = ns
	kc.Log = debug
	d := driver.NewSecrets(cs.CoreV1().Secrets(ns))
	d.Log = debug
	guard := &guardedDriver{Driver: d}
	store := storage.Init(guard)
	store.MaxHistory = a.opts.MaxHistory
	caps := a.caps.Copy()
	cfg := &action.Configuration{
		RESTClientGetter: g,
		KubeClient:       kc,
		Releases:         store,
		Capabilities:     caps,
		Log:              debug,
	}
	return &session{cfg: cfg, namespace: ns, user: rc.Impersonate.UserName, guard: guard}, nil
}

func (s *session) history(name string) ([]*release.Release, error) {
	h, err := s.cfg.Releases.History(name)
	if errors.Is(err, driver.ErrReleaseNotFound) {
		return nil, nil
	}
	return h, err
}

// uninstall removes the release and its history; a release that is not
// there is no error. Hooks are skipped when recovering a half-done install.
func (s *session) uninstall(name string, skipHooks bool) error {
	h, err := s.history(name)
	if err != nil {
		return err
	}
	if len(h) == 0 {
		return nil
	}
	un := action.NewUninstall(s.cfg)
	un.DisableHooks = skipHooks
	un.KeepHistory = false
	_, err = un.Run(name)
	if errors.Is(err, driver.ErrReleaseNotFound) {
		return nil
	}
	return err
}

func latest(h []*release.Release) *release.Release {
	var l *release.Release
	for _, r := range h {
		if l == nil || r.Version > l.Version {
			l = r
		}
	}
	return l
}

func latestDeployed(h []*release.Release) *release.Release {
	var l *release.Release
	for _, r := range h {
		if r.Info != nil && r.Info.Status == release.StatusDeployed && (l == nil || r.Version > l.Version) {
			l = r
		}
	}
	return l
}

func result(ns string, r *release.Release, what string) applier.Result {
	return applier.Result{
		HelmRevision: int32(r.Version),
		Message:      fmt.Sprintf("Helm release %s/%s revision %d %s", ns, r.Name, r.Version, what),
	}
}

// loadInputs loads the chart and the merged values the approved change
// names from the verified content only (approved.Load: the same inputs
// the Argo CD plugin renders) and merges the values as the validator does.
func loadInputs(dir string, cr *sluicev1.ChangeRequest, src *sluicev1.ChangeSource) (*chart.Chart, map[string]any, error) {
	in, err := approved.Load(dir, cr, src, sluicev1.DeliveryHelm)
	if err != nil {
		return nil, nil, err
	}
	vals, err := in.Values(dir)
	if err != nil {
		return nil, nil, err
	}
	return in.Chart, vals, nil
}
