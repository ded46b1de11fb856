package drift

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"helm.sh/helm/v3/pkg/kube"
	"helm.sh/helm/v3/pkg/release"
	"helm.sh/helm/v3/pkg/storage"
	"helm.sh/helm/v3/pkg/storage/driver"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/sluice-gitops/sluice/infra-validator/pkg/helmcheck"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
	"github.com/sluice-gitops/sluice/operator/internal/applier"
	helmapplier "github.com/sluice-gitops/sluice/operator/internal/applier/helm"
	"github.com/sluice-gitops/sluice/operator/internal/impersonate"
)

// DefaultIgnoreManagers are the field managers whose fields are never
// drift: kube-controller-manager is who the HorizontalPodAutoscaler (through
// the scale subresource) and the other built-in controllers write as.
var DefaultIgnoreManagers = []string{"kube-controller-manager"}

// HelmFieldManager is the field manager the Helm applier's writes carry:
// Helm's kube.ManagedFieldsManager, else the name of the running binary (as
// Helm itself decides).
func HelmFieldManager() string {
	if kube.ManagedFieldsManager != "" {
		return kube.ManagedFieldsManager
	}
	if len(os.Args) == 0 || os.Args[0] == "" {
		return "unknown"
	}
	return filepath.Base(os.Args[0])
}

// Report is the result of one check of one release.
type Report struct {
	// Objects are the drifted objects (and Terraform resources).
	Objects []sluicev1.DriftedObject
	// Checked is how many objects were compared.
	Checked int
}

// Drifted reports whether anything drifted.
func (r Report) Drifted() bool { return len(r.Objects) > 0 }

// HelmChecker compares a Helm release's live objects with the ones its
// last applied change installed, as the Repository's ServiceAccount.
type HelmChecker struct {
	// Config is the operator's connection; only impersonated copies are
	// used.
	Config *rest.Config
	// Mapper maps kinds to resources (the manager's REST mapper).
	Mapper meta.RESTMapper
	// IgnoreManagers are the field managers whose fields are not drift;
	// nil means DefaultIgnoreManagers.
	IgnoreManagers []string
	// Direct uses Config as it is instead of impersonating the
	// Repository's ServiceAccount (kubectl sluice audit, as its user).
	Direct bool

	mu      sync.Mutex
	clients map[string]*helmClients
}

// helmClients are the impersonated clients of one ServiceAccount, kept
// across checks so a pass makes no new connections.
type helmClients struct {
	dyn dynamic.Interface
	cs  kubernetes.Interface
}

func (h *HelmChecker) clientsFor(repo *sluicev1.Repository) (*helmClients, error) {
	user := ""
	if !h.Direct {
		var err error
		if user, err = impersonate.User(repo); err != nil {
			return nil, err
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if c, ok := h.clients[user]; ok {
		return c, nil
	}
	rc := rest.CopyConfig(h.Config)
	if !h.Direct {
		var err error
		if rc, err = impersonate.Config(h.Config, repo); err != nil {
			return nil, err
		}
	}
	if rc.Timeout == 0 {
		rc.Timeout = time.Minute
	}
	httpClient, err := rest.HTTPClientFor(rc)
	if err != nil {
		return nil, fmt.Errorf("drift client: %w", err)
	}
	dyn, err := dynamic.NewForConfigAndClient(rc, httpClient)
	if err != nil {
		return nil, fmt.Errorf("drift client: %w", err)
	}
	cs, err := kubernetes.NewForConfigAndClient(rc, httpClient)
	if err != nil {
		return nil, fmt.Errorf("drift client: %w", err)
	}
	if h.clients == nil {
		h.clients = map[string]*helmClients{}
	}
	c := &helmClients{dyn: dyn, cs: cs}
	h.clients[user] = c
	return c, nil
}

// ErrNoRecord is returned when the Helm release record of the applied
// change is gone.
var ErrNoRecord = errors.New("the Helm release record of the applied change is gone")

// AppliedRecord finds, in a Helm history, the revision the applied change
// installed (its recorded Helm revision, which must carry the change's
// approval label) and the newest deployed revision.
func AppliedRecord(hist []*release.Release, applied *sluicev1.ChangeRequest) (rec, deployed *release.Release) {
	label := strings.TrimPrefix(string(applied.Spec.ApprovalDigest), "sha256:")
	if len(label) > 40 {
		label = label[:40]
	}
	var want int
	if applied.Status.Apply != nil {
		want = int(applied.Status.Apply.HelmRevision)
	}
	for _, r := range hist {
		if r.Info != nil && r.Info.Status == release.StatusDeployed && (deployed == nil || r.Version > deployed.Version) {
			deployed = r
		}
		if r.Labels[helmapplier.LabelApproval] != label {
			continue
		}
		if (want != 0 && r.Version == want) || (want == 0 && (rec == nil || r.Version > rec.Version)) {
			rec = r
		}
	}
	return rec, deployed
}

// HelmHistory reads a Helm release's history from its storage Secrets.
func HelmHistory(cs kubernetes.Interface, ns, name string) ([]*release.Release, error) {
	store := storage.Init(driver.NewSecrets(cs.CoreV1().Secrets(ns)))
	h, err := store.History(name)
	if errors.Is(err, driver.ErrReleaseNotFound) {
		return nil, nil
	}
	return h, err
}

// Objects splits a Helm manifest into objects.
func Objects(manifest string) ([]*unstructured.Unstructured, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader([]byte(manifest)), 4096)
	var out []*unstructured.Unstructured
	for {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return nil, fmt.Errorf("parse the Helm manifest: %w", err)
		}
		if len(m) == 0 {
			continue
		}
		out = append(out, &unstructured.Unstructured{Object: m})
	}
}

// Check compares every object the applied change installed with the live
// one, and reports objects removed, objects changed (with the fields), the
// Helm record of the change no longer matching its manifestDigest, and
// objects of a revision installed after it outside Sluice (added).
func (h *HelmChecker) Check(ctx context.Context, rel *sluicev1.Release, repo *sluicev1.Repository, applied *sluicev1.ChangeRequest) (Report, error) {
	ns := applied.Spec.TargetNamespace
	if !h.Direct {
		if err := impersonate.CheckNamespace(repo, ns); err != nil {
			return Report{}, err
		}
	}
	c, err := h.clientsFor(repo)
	if err != nil {
		return Report{}, err
	}
	name := helmapplier.ReleaseName(applier.ReleaseOf(rel))
	hist, err := HelmHistory(c.cs, ns, name)
	if err != nil {
		return Report{}, fmt.Errorf("read the Helm history of %s/%s: %w", ns, name, err)
	}
	rec, deployed := AppliedRecord(hist, applied)
	var rep Report
	helmObj := func(fields ...string) {
		rep.Objects = append(rep.Objects, sluicev1.DriftedObject{Kind: "HelmRelease", Namespace: ns, Name: name, Change: sluicev1.DriftChanged, Fields: fields})
	}
	if rec == nil {
		helmObj(fmt.Sprintf("the record of revision %d, installed by %s, is gone", revisionOf(applied), applied.Name))
		return rep, nil
	}
	if got := helmcheck.ReleaseDigest([]byte(rec.Manifest), rec.Hooks); got != string(applied.Spec.ManifestDigest) {
		// The record was rewritten: its manifest is not what was approved,
		// so it is no basis to compare with either.
		helmObj(fmt.Sprintf("the record of revision %d hashes to %s, not the approved %s", rec.Version, got, applied.Spec.ManifestDigest))
		return rep, nil
	}
	objs, err := Objects(rec.Manifest)
	if err != nil {
		return Report{}, err
	}
	ignore := h.IgnoreManagers
	if ignore == nil {
		ignore = DefaultIgnoreManagers
	}
	live, err := h.listLive(ctx, c, ns, objs)
	if err != nil {
		return Report{}, err
	}
	seen := map[string]bool{}
	for _, o := range objs {
		d, key, err := h.checkObject(ctx, c, ns, o, live, ignore)
		if err != nil {
			return Report{}, err
		}
		seen[key] = true
		rep.Checked++
		if d != nil {
			rep.Objects = append(rep.Objects, *d)
		}
	}
	if deployed != nil && deployed.Version != rec.Version {
		helmObj(fmt.Sprintf("revision %d (%q) was installed after the applied revision %d, outside Sluice", deployed.Version, deployed.Info.Description, rec.Version))
		if extra, err := Objects(deployed.Manifest); err == nil {
			for _, o := range extra {
				if o.GetNamespace() == "" {
					o.SetNamespace(ns)
				}
				if !seen[objKey(o)] {
					rep.Objects = append(rep.Objects, sluicev1.DriftedObject{Kind: o.GetKind(), Namespace: o.GetNamespace(), Name: o.GetName(), Change: sluicev1.DriftAdded})
				}
			}
		}
	}
	return rep, nil
}

// AppliedObjects reads, as the Repository's ServiceAccount, the live copy
// of every object the Helm record of change cr installed (the record
// carrying cr's approval label and recorded revision, its manifest checked
// against cr's manifestDigest): what a verification's health judges.
// missing names the objects that are gone.
func (h *HelmChecker) AppliedObjects(ctx context.Context, rel *sluicev1.Release, repo *sluicev1.Repository, cr *sluicev1.ChangeRequest) (live []*unstructured.Unstructured, missing []string, err error) {
	ns := cr.Spec.TargetNamespace
	if !h.Direct {
		if err := impersonate.CheckNamespace(repo, ns); err != nil {
			return nil, nil, err
		}
	}
	c, err := h.clientsFor(repo)
	if err != nil {
		return nil, nil, err
	}
	name := helmapplier.ReleaseName(applier.ReleaseOf(rel))
	hist, err := HelmHistory(c.cs, ns, name)
	if err != nil {
		return nil, nil, fmt.Errorf("read the Helm history of %s/%s: %w", ns, name, err)
	}
	rec, _ := AppliedRecord(hist, cr)
	if rec == nil {
		return nil, nil, fmt.Errorf("the Helm record of revision %d, installed by %s, is gone", revisionOf(cr), cr.Name)
	}
	if got := helmcheck.ReleaseDigest([]byte(rec.Manifest), rec.Hooks); got != string(cr.Spec.ManifestDigest) {
		return nil, nil, fmt.Errorf("the Helm record of revision %d hashes to %s, not the approved %s", rec.Version, got, cr.Spec.ManifestDigest)
	}
	objs, err := Objects(rec.Manifest)
	if err != nil {
		return nil, nil, err
	}
	listed, err := h.listLive(ctx, c, ns, objs)
	if err != nil {
		return nil, nil, err
	}
	for _, o := range objs {
		got, ok := listed[objKey(o)]
		if !ok {
			ri, err := h.resource(c, ns, o)
			if err != nil {
				return nil, nil, err
			}
			if got, err = ri.Get(ctx, o.GetName(), metav1.GetOptions{}); apierrors.IsNotFound(err) {
				got = nil
			} else if err != nil {
				return nil, nil, fmt.Errorf("get %s %s/%s: %w", o.GetKind(), o.GetNamespace(), o.GetName(), err)
			}
		}
		if got == nil {
			missing = append(missing, fmt.Sprintf("%s %s/%s", o.GetKind(), o.GetNamespace(), o.GetName()))
			continue
		}
		got.SetAPIVersion(o.GetAPIVersion())
		got.SetKind(o.GetKind())
		live = append(live, got)
	}
	return live, missing, nil
}

func revisionOf(cr *sluicev1.ChangeRequest) int32 {
	if cr.Status.Apply == nil {
		return 0
	}
	return cr.Status.Apply.HelmRevision
}

func objKey(o *unstructured.Unstructured) string {
	return o.GroupVersionKind().GroupKind().String() + "/" + o.GetNamespace() + "/" + o.GetName()
}

// checkObject compares one approved object with the live one: a GET, then
// a server-side dry-run apply of the approved object (forced, as Helm's
// field manager), whose result is what re-applying it would leave; the
// fields where that differs from the live object are drift.
func (h *HelmChecker) checkObject(ctx context.Context, c *helmClients, ns string, o *unstructured.Unstructured, listed map[string]*unstructured.Unstructured, ignore []string) (*sluicev1.DriftedObject, string, error) {
	ri, err := h.resource(c, ns, o)
	if err != nil {
		return nil, "", err
	}
	key := objKey(o)
	d := &sluicev1.DriftedObject{Kind: o.GetKind(), Namespace: o.GetNamespace(), Name: o.GetName()}
	live, ok := listed[key]
	if !ok {
		live, err = ri.Get(ctx, o.GetName(), metav1.GetOptions{})
	}
	if (ok && live == nil) || apierrors.IsNotFound(err) {
		d.Change = sluicev1.DriftRemoved
		return d, key, nil
	}
	if err != nil {
		return nil, "", fmt.Errorf("get %s %s/%s: %w", o.GetKind(), o.GetNamespace(), o.GetName(), err)
	}
	// The approved object as it is live: nothing to re-apply. (A field
	// owned by an ignored manager that differs falls through to the
	// dry-run, which masks it.)
	if Subset(o.Object, live.Object) {
		return nil, key, nil
	}
	body, err := o.MarshalJSON()
	if err != nil {
		return nil, "", err
	}
	want, err := ri.Patch(ctx, o.GetName(), types.ApplyPatchType, body, metav1.PatchOptions{
		DryRun: []string{metav1.DryRunAll}, FieldManager: HelmFieldManager(), Force: ptr.To(true),
	})
	if err != nil {
		return nil, "", fmt.Errorf("dry-run apply %s %s/%s: %w", o.GetKind(), o.GetNamespace(), o.GetName(), err)
	}
	fields, more := ChangedFields(want.Object, live.Object, ignore)
	if len(fields) == 0 {
		return nil, key, nil
	}
	if more > 0 {
		fields[len(fields)-1] = fmt.Sprintf("… and %d more", more+1)
	}
	d.Change, d.Fields = sluicev1.DriftChanged, fields
	return d, key, nil
}

// resource is the dynamic client of an approved object's resource; it sets
// the release namespace on a namespaced object that names none (as Helm
// does when it installs).
func (h *HelmChecker) resource(c *helmClients, ns string, o *unstructured.Unstructured) (dynamic.ResourceInterface, error) {
	gvk := o.GroupVersionKind()
	m, err := h.Mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return nil, fmt.Errorf("map %s: %w", gvk, err)
	}
	if m.Scope.Name() != meta.RESTScopeNameNamespace {
		return c.dyn.Resource(m.Resource), nil
	}
	if o.GetNamespace() == "" {
		o.SetNamespace(ns)
	}
	return c.dyn.Resource(m.Resource).Namespace(o.GetNamespace()), nil
}

// listLive reads the live objects of every resource and namespace that
// holds more than one approved object with one LIST instead of a GET each
// (a release of 20 ConfigMaps is one request). The map holds an entry for
// each such approved object: the live one, or nil when it is gone. Objects
// of other groups are read one by one in checkObject.
func (h *HelmChecker) listLive(ctx context.Context, c *helmClients, ns string, objs []*unstructured.Unstructured) (map[string]*unstructured.Unstructured, error) {
	type group struct {
		ri   dynamic.ResourceInterface
		objs []*unstructured.Unstructured
	}
	groups := map[string]*group{}
	for _, o := range objs {
		ri, err := h.resource(c, ns, o)
		if err != nil {
			return nil, err
		}
		k := o.GroupVersionKind().String() + "/" + o.GetNamespace()
		if groups[k] == nil {
			groups[k] = &group{ri: ri}
		}
		groups[k].objs = append(groups[k].objs, o)
	}
	out := map[string]*unstructured.Unstructured{}
	for _, g := range groups {
		if len(g.objs) < 2 {
			continue
		}
		list, err := g.ri.List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, fmt.Errorf("list %s in %s: %w", g.objs[0].GetKind(), g.objs[0].GetNamespace(), err)
		}
		byName := make(map[string]*unstructured.Unstructured, len(list.Items))
		for i := range list.Items {
			byName[list.Items[i].GetName()] = &list.Items[i]
		}
		for _, o := range g.objs {
			live := byName[o.GetName()]
			if live != nil {
				// Items of a list carry no kind; the comparison wants it.
				live.SetAPIVersion(o.GetAPIVersion())
				live.SetKind(o.GetKind())
			}
			out[objKey(o)] = live
		}
	}
	return out, nil
}
