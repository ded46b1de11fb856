package helm

import (
	"bytes"
	"fmt"
	"sync"
	"sync/atomic"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/release"
	"helm.sh/helm/v3/pkg/storage/driver"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/sluice-gitops/sluice/infra-validator/pkg/helmcheck"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// applyGate holds one install or upgrade to what was approved, at the two
// points where Helm shows what it is about to do:
//
//   - as the post-renderer (Run), it sees the non-hook manifests right
//     after rendering and refuses, with helmcheck.ErrOutsideNamespace, any
//     object outside the target namespace that the Repository does not
//     allow, deciding the scope of each kind with the impersonated
//     client's REST mapper (what the API server serves);
//   - through the storage driver (guardedDriver.Create), it sees the
//     release record Helm stores before it creates any object or runs any
//     hook, and refuses, with helmcheck.ErrManifestMismatch, a record whose
//     manifests and hooks do not hash to the approved manifestDigest
//     (helmcheck.ReleaseDigest, as the validator computes it), and any
//     hook outside the target namespace.
//
// Helm never passes hooks to a post-renderer (action.renderResources), so
// the release record is the only place hooks can be checked before they
// run.
type applyGate struct {
	approved sluicev1.Digest
	target   string
	confine  helmcheck.Confinement
	mapper   meta.RESTMapper

	mu       sync.Mutex
	manifest []byte

	// deferWait: Sluice, not Helm, waits for this run's objects to be
	// ready (ready.go), so the record Helm finishes as deployed is kept
	// pending and the revision before it deployed until then. The record
	// Helm creates says which run it is (version, pending status) and
	// whether post hooks need Helm's own wait (then blockingWait is
	// called and nothing is deferred).
	deferWait     bool
	blockingWait  func()
	postHook      release.HookEvent
	version       int
	pendingStatus release.Status
}

// newApplyGate returns the gate of one change: the approved digest, the
// change's target namespace, the Repository's allowances, and the REST
// mapper of the session's impersonated client.
func newApplyGate(s *session, cr *sluicev1.ChangeRequest, repo *sluicev1.Repository) (*applyGate, error) {
	mapper, err := s.cfg.RESTClientGetter.ToRESTMapper()
	if err != nil {
		return nil, fmt.Errorf("helm client: %w", err)
	}
	return &applyGate{approved: cr.Spec.ManifestDigest, target: s.namespace, confine: confinementOf(repo), mapper: mapper}, nil
}

// confinementOf is the Repository's allowedExtraNamespaces and
// allowedClusterKinds, as the validator takes them.
func confinementOf(repo *sluicev1.Repository) helmcheck.Confinement {
	var c helmcheck.Confinement
	if repo == nil {
		return c
	}
	c.ExtraNamespaces = append(c.ExtraNamespaces, repo.Spec.AllowedExtraNamespaces...)
	for _, gk := range repo.Spec.AllowedClusterKinds {
		c.ClusterKinds = append(c.ClusterKinds, schema.GroupKind{Group: gk.Group, Kind: gk.Kind})
	}
	return c
}

// Run implements postrender.PostRenderer: it checks where every rendered
// object goes and returns the manifests unchanged.
func (g *applyGate) Run(rendered *bytes.Buffer) (*bytes.Buffer, error) {
	if rendered == nil {
		rendered = &bytes.Buffer{}
	}
	data := bytes.Clone(rendered.Bytes())
	g.mu.Lock()
	g.manifest = data
	g.mu.Unlock()
	if err := g.checkManifest(string(data), "manifest"); err != nil {
		return nil, err
	}
	return bytes.NewBuffer(bytes.Clone(data)), nil
}

// checkRelease checks a release record Helm is about to store: its digest
// over manifests and hooks, and where every object, hooks included, goes.
func (g *applyGate) checkRelease(rel *release.Release) error {
	if got := helmcheck.ReleaseDigest([]byte(rel.Manifest), rel.Hooks); got != string(g.approved) {
		return fmt.Errorf("%w: rendered %s, approved %s", helmcheck.ErrManifestMismatch, got, g.approved)
	}
	if err := g.checkManifest(rel.Manifest, "manifest"); err != nil {
		return err
	}
	for _, h := range rel.Hooks {
		if err := g.checkManifest(h.Manifest, "hook "+h.Path); err != nil {
			return err
		}
	}
	return nil
}

// checkCRDFolder checks the chart's crds/ folder, which Helm installs
// before it renders anything.
func (g *applyGate) checkCRDFolder(ch *chart.Chart) error {
	for _, crd := range ch.CRDObjects() {
		if err := g.checkManifest(string(crd.File.Data), crd.Filename); err != nil {
			return err
		}
	}
	return nil
}

// checkManifest checks every object of a YAML stream.
func (g *applyGate) checkManifest(manifest, what string) error {
	objs, err := helmcheck.ParseManifest(manifest)
	if err != nil {
		return fmt.Errorf("%w: the %s cannot be read: %v", helmcheck.ErrOutsideNamespace, what, err)
	}
	for _, o := range objs {
		if err := g.checkObject(o); err != nil {
			return err
		}
	}
	return nil
}

// checkObject refuses an object outside the target namespace that the
// Repository does not allow, with the scope the API server gives its kind.
func (g *applyGate) checkObject(o helmcheck.Object) error {
	what := o.Kind + " " + o.Name
	if o.Source != "" {
		what += " (" + o.Source + ")"
	}
	if helmcheck.IsList(o) {
		return fmt.Errorf("%w: %s would be installed item by item, unchecked", helmcheck.ErrOutsideNamespace, what)
	}
	gv, err := schema.ParseGroupVersion(o.APIVersion)
	if err != nil {
		return fmt.Errorf("%w: %s has an invalid apiVersion %q", helmcheck.ErrOutsideNamespace, what, o.APIVersion)
	}
	gk := schema.GroupKind{Group: gv.Group, Kind: o.Kind}
	mapping, err := g.mapper.RESTMapping(gk, gv.Version)
	if meta.IsNoMatchError(err) {
		return fmt.Errorf("%w: %s is of a kind the API server does not serve (%s), so its scope is unknown", helmcheck.ErrOutsideNamespace, what, o.APIVersion)
	}
	if err != nil {
		return fmt.Errorf("map %s to a resource: %w", what, err)
	}
	scope := helmcheck.ScopeCluster
	if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
		scope = helmcheck.ScopeNamespaced
	}
	return g.confine.Check(gk, scope, o.ExplicitNamespace, g.target, what)
}

// guardedDriver is the Helm storage driver of a session: while a gate is
// armed, every release record Helm creates must pass it, and a refused
// record is neither stored nor acted on (Helm stores the record of an
// install or upgrade before it creates any object or runs any hook).
type guardedDriver struct {
	driver.Driver
	gate atomic.Pointer[applyGate]
}

// Create implements driver.Creator.
func (d *guardedDriver) Create(key string, rls *release.Release) error {
	if g := d.gate.Load(); g != nil {
		if err := g.checkRelease(rls); err != nil {
			return err
		}
		g.created(rls)
	}
	return d.Driver.Create(key, rls)
}

// Update implements driver.Updator: while a gate that defers the wait is
// armed, the run's record Helm finishes as deployed is stored as pending
// (with the change's marker as its description), and the deployed
// revision Helm would supersede is left deployed, as they stand while
// Helm's own wait runs (ready.go finishes them).
func (d *guardedDriver) Update(key string, rls *release.Release) error {
	if g := d.gate.Load(); g != nil {
		var skip bool
		if rls, skip = g.deferred(rls); skip {
			return nil
		}
	}
	return d.Driver.Update(key, rls)
}

// created notes the record of this run, which Helm stores before it runs
// anything (synchronously, before the goroutine that applies and waits):
// a record with post hooks keeps Helm's blocking wait.
func (g *applyGate) created(rls *release.Release) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.deferWait || rls.Info == nil {
		return
	}
	if hasPostHooks(rls, g.postHook) {
		g.deferWait = false
		if g.blockingWait != nil {
			g.blockingWait()
		}
		return
	}
	g.version, g.pendingStatus = rls.Version, rls.Info.Status
}

// deferred is the record to store for an update Helm makes while the wait
// is deferred (a copy; Helm's own object is left alone), or skip to store
// nothing.
func (g *applyGate) deferred(rls *release.Release) (_ *release.Release, skip bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.deferWait || g.version == 0 || rls.Info == nil {
		return rls, false
	}
	switch {
	case rls.Version == g.version && rls.Info.Status == release.StatusDeployed:
		cp, info := *rls, *rls.Info
		info.Status = g.pendingStatus
		cp.Info = &info
		return &cp, false
	case rls.Version != g.version && rls.Info.Status == release.StatusSuperseded:
		return rls, true
	}
	return rls, false
}

// waitsItself reports whether this run left the wait for readiness to
// Sluice (ready.go): its record is stored pending.
func (g *applyGate) waitsItself() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.deferWait && g.version != 0
}

// arm makes g check every release record created until disarm.
func (d *guardedDriver) arm(g *applyGate) { d.gate.Store(g) }

// disarm stops checking (a rollback stores an earlier, approved record).
func (d *guardedDriver) disarm() { d.gate.Store(nil) }
