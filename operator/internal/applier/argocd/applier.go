// Package argocd is the applier for delivery argocd (DESIGN.md §5, §9.6):
// it drives an Argo CD Application owned by the Release, pinned to the
// approved commit, whose source is the Sluice config management plugin
// (cmp.go), so Argo CD applies exactly the approved manifest, inside a
// per-Repository AppProject that bounds where Argo CD may put it. The
// change counts as applied only once Argo CD reports that very revision
// synced through the plugin, the sync operation succeeded and the
// application healthy.
//
// One Apply runs these steps, and stops at the first that fails:
//
//  1. the target namespace is one the Repository allows; no object of the
//     verdict lies outside it; the change records a commit, a
//     manifestDigest, its source (service folder) and its Release as
//     controller;
//  2. with the operator's own rights, create or update the Repository's
//     AppProject in Argo CD's namespace (project.go): destinations are the
//     Repository's target (and extra) namespaces, cluster-scoped kinds
//     only those the Repository allows, sources its URL, Applications only
//     from its control namespace;
//  3. as the Repository's ServiceAccount (impersonation), read the
//     Application "<release>" in the control namespace. When Argo CD already
//     reports the approved revision synced, succeeded and healthy, the
//     change is applied: return (a re-run after a restart repeats nothing);
//  4. unless a sync of the approved revision is in flight or finished,
//     download and verify the artifact, and read git itself at the
//     approved commit (gitcheck.go: the artifact holds only what the
//     approved change packed, Argo CD checks out the whole commit): refuse
//     the commit when any .argocd-source*.yaml lies anywhere in it or it
//     has submodules (Argo CD merges such a file into the source and could
//     rename the plugin, so that another config management plugin of the
//     repo-server renders); then create or patch the Application, built
//     from the approved change only (repository URL, commit, the change's
//     service folder, plugin, target namespace, project), and ask for a
//     sync through its operation field, with prune: objects the
//     Application tracks that the approved revision no longer renders are
//     deleted;
//  5. watch the Application until Argo CD reports the outcome, for at most
//     Options.Wait; a failed sync fails the change with Argo CD's message,
//     a sync of anything but the source Sluice set fails it too, and so
//     does a sync Argo CD rendered with a plugin other than Sluice's (the
//     plugin name Argo CD used is not in its status: it is derived from
//     git at the synced commit as the repo-server derives it); a sync
//     still running returns applier.Waiting and is looked at again on a
//     later call.
//
// Nothing is read from the Release's spec, which every push rewrites: the
// Release's name is the change's, its UID the change's controller
// reference (the syncer makes the Release the change's controller).
//
// The Argo CD Go types cannot be compiled next to controller-runtime v0.25,
// so Applications and AppProjects are handled as unstructured objects; the
// field names are Argo CD's argoproj.io/v1alpha1 API.
package argocd

import (
	"context"
	"errors"
	"fmt"
	"path"
	"regexp"
	"slices"
	"strings"
	"time"

	argoapp "github.com/argoproj/argo-cd/v2/pkg/apis/application"
	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-gitops/sluice/kit/text"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
	"github.com/sluice-gitops/sluice/operator/internal/applier"
	"github.com/sluice-gitops/sluice/operator/internal/artifact"
	"github.com/sluice-gitops/sluice/operator/internal/impersonate"
)

// Name is the applier's name in status and metrics.
const Name = "argocd"

// ApplicationGVK is Argo CD's Application kind.
var ApplicationGVK = schema.GroupVersionKind{Group: argoapp.Group, Version: "v1alpha1", Kind: argoapp.ApplicationKind}

// ResourcesFinalizer makes Argo CD delete what an Application deployed
// before the Application goes (Argo CD's resources-finalizer), with
// background propagation: the objects go at once and the cluster's garbage
// collector removes their dependents (foreground propagation would hold
// the Application until every dependent is gone).
const ResourcesFinalizer = "resources-finalizer.argocd.argoproj.io/background"

// infoChangeRequest names the operation info entry carrying the
// ChangeRequest that asked for a sync.
const infoChangeRequest = "sluice.changeRequest"

// InClusterServer is Argo CD's name for the cluster it runs in.
const InClusterServer = "https://kubernetes.default.svc"

// Defaults.
const (
	DefaultNamespace = "argocd"
	DefaultWait      = 10 * time.Second
	pollInterval     = 500 * time.Millisecond
)

// Options configure the Argo CD applier.
type Options struct {
	// Config is the operator's own connection; it must be allowed to
	// impersonate the Repositories' ServiceAccounts, which need rights on
	// argoproj.io applications in the control namespace, and to manage
	// argoproj.io appprojects in Namespace.
	Config *rest.Config
	// Fetcher downloads and verifies artifacts (the Helm applier's).
	Fetcher *artifact.Fetcher
	// Namespace is Argo CD's own namespace, where the per-Repository
	// AppProjects live. Empty means DefaultNamespace.
	Namespace string
	// Server is the destination cluster; empty means InClusterServer.
	Server string
	// Wait is how long one Apply watches a sync before it hands the
	// reconcile worker back with an applier.Waiting (looked at again after
	// as long); zero means DefaultWait.
	Wait time.Duration
	// Log receives progress at V(1).
	Log logr.Logger
	// Git reads the approved commit from the Repository's git; nil means
	// one reading credentials with Config's identity.
	Git *GitReader
}

// Applier applies approved changes through Argo CD Applications.
type Applier struct {
	opts   Options
	scheme *runtime.Scheme
	// own is the operator's own client, for the AppProjects only.
	own client.Client
}

var (
	_ applier.Applier = (*Applier)(nil)
	_ applier.Cleaner = (*Applier)(nil)
)

// New checks the options and returns the applier.
func New(opts Options) (*Applier, error) {
	if opts.Config == nil {
		return nil, errors.New("argocd applier: no rest config")
	}
	if opts.Fetcher == nil {
		return nil, errors.New("argocd applier: no artifact fetcher")
	}
	if opts.Namespace == "" {
		opts.Namespace = DefaultNamespace
	}
	if opts.Server == "" {
		opts.Server = InClusterServer
	}
	if opts.Wait == 0 {
		opts.Wait = DefaultWait
	}
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	own, err := client.New(opts.Config, client.Options{Scheme: scheme})
	if err != nil {
		return nil, fmt.Errorf("argocd applier: %w", err)
	}
	if opts.Git == nil {
		opts.Git = &GitReader{Secrets: own}
	}
	return &Applier{opts: opts, scheme: scheme, own: own}, nil
}

// Name implements applier.Applier.
func (a *Applier) Name() string { return Name }

// commitSHA is a full git commit id (SHA-1 or SHA-256), as the API requires.
var commitSHA = regexp.MustCompile(`^[a-f0-9]{40}([a-f0-9]{24})?$`)

// ErrSyncing is wrapped by the applier.Waiting returned while Argo CD has
// not finished the sync of the approved revision; the operator calls again
// later, without an error.
var ErrSyncing = errors.New("Argo CD has not finished syncing the approved revision")

// Apply implements applier.Applier.
func (a *Applier) Apply(ctx context.Context, req applier.Request) (applier.Result, error) {
	cr, repo := req.Change, req.Repository
	if cr == nil || repo == nil {
		return applier.Result{}, applier.Permanent(sluicev1.ReasonInvalidSpec, "the request has no change or repository")
	}
	if err := impersonate.CheckNamespace(repo, cr.Spec.TargetNamespace); err != nil {
		return applier.Result{}, err
	}
	if err := checkConfined(cr); err != nil {
		return applier.Result{}, err
	}
	if !commitSHA.MatchString(cr.Spec.Revision) {
		return applier.Result{}, applier.Permanent(sluicev1.ReasonInvalidSpec, "the change records no commit to pin the Application to")
	}
	if !sluicev1.ValidDigest(string(cr.Spec.ManifestDigest)) {
		return applier.Result{}, applier.Permanent(sluicev1.ReasonInvalidSpec, "the change records no manifestDigest, so nothing can be checked against it")
	}
	if _, err := SourcePath(cr); err != nil {
		return applier.Result{}, err
	}
	rel, err := releaseOf(cr)
	if err != nil {
		return applier.Result{}, err
	}
	project, err := a.ensureProject(ctx, repo)
	if err != nil {
		return applier.Result{}, err
	}
	c, err := impersonate.Client(a.opts.Config, repo, a.scheme)
	if err != nil {
		return applier.Result{}, err
	}
	who := impersonate.ServiceAccountUser(repo.Namespace, repo.Spec.ServiceAccountName)
	log := a.opts.Log.WithValues("application", rel.Namespace+"/"+rel.Name, "change", cr.Name, "revision", cr.Spec.Revision)

	app, err := a.get(ctx, c, rel, who)
	if err != nil {
		return applier.Result{}, err
	}
	pinned := app != nil && targetRevision(app) == cr.Spec.Revision
	if !pinned || (!syncing(app, cr.Name) && !readStatus(app).doneFor(cr.Spec.Revision)) {
		if err := a.checkNoOverrides(ctx, cr, repo, rel); err != nil {
			return applier.Result{}, err
		}
		if app, err = a.requestSync(ctx, c, app, cr, rel, repo, project, who); err != nil {
			return applier.Result{}, err
		}
		log.V(1).Info("Sync requested")
	}

	deadline := time.Now().Add(a.opts.Wait)
	for {
		st := readStatus(app)
		switch {
		case st.doneFor(cr.Spec.Revision):
			if err := syncedAsSet(app, a.desiredSource(cr, repo), cr.Spec.TargetNamespace); err != nil {
				return applier.Result{}, err
			}
			if err := a.checkRenderedBySluice(ctx, app, repo, rel); err != nil {
				return applier.Result{}, err
			}
			return applier.Result{Message: fmt.Sprintf("Argo CD Application %s/%s synced revision %s and is Healthy", rel.Namespace, rel.Name, sluicev1.ShortSHA(cr.Spec.Revision))}, nil
		case st.failedFor(cr.Name) && projectNotSeenYet(st.message, project) && time.Now().Before(deadline):
			// Argo CD's cache had not seen a just-created AppProject yet:
			// ask again, nothing was applied.
			time.Sleep(pollInterval)
			if app, err = a.requestSync(ctx, c, app, cr, rel, repo, project, who); err != nil {
				return applier.Result{}, err
			}
			continue
		case st.failedFor(cr.Name):
			return applier.Result{}, applier.Permanent(sluicev1.ReasonApplyFailed,
				"Argo CD's sync of revision %s ended %s: %s", sluicev1.ShortSHA(cr.Spec.Revision), st.phase, text.Truncate(st.message, 1200))
		}
		if time.Now().After(deadline) {
			// Not a failure: the worker is handed back and the change
			// is looked at again after as long.
			return applier.Result{}, &applier.Waiting{Reason: sluicev1.ReasonWaitingForArgoCD, RetryAfter: a.opts.Wait, Err: ErrSyncing,
				Message: fmt.Sprintf("waiting for Argo CD to sync revision %s: sync %s, operation %s, health %s %s", sluicev1.ShortSHA(cr.Spec.Revision),
					orNone(st.syncStatus), orNone(st.phase), orNone(st.health), text.Truncate(st.healthMessage, 200))}
		}
		select {
		case <-ctx.Done():
			return applier.Result{}, ctx.Err()
		case <-time.After(pollInterval):
		}
		if app, err = a.get(ctx, c, rel, who); err != nil {
			return applier.Result{}, err
		}
		if app == nil {
			return applier.Result{}, fmt.Errorf("the Application %s/%s disappeared during the sync", rel.Namespace, rel.Name)
		}
	}
}

// The Repository's ServiceAccount (not the operator) needs get, create,
// update and delete on argoproj.io applications in the control namespace.

// get reads the release's Application; nil when there is none.
func (a *Applier) get(ctx context.Context, c client.Client, rel releaseRef, who string) (*unstructured.Unstructured, error) {
	app := newApplication()
	err := c.Get(ctx, client.ObjectKey{Namespace: rel.Namespace, Name: rel.Name}, app)
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, explain("read the Application", rel.Namespace, who, err)
	}
	return app, nil
}

// requestSync creates or updates the Application for the change and sets
// its operation to a sync of the approved revision.
func (a *Applier) requestSync(ctx context.Context, c client.Client, cur *unstructured.Unstructured, cr *sluicev1.ChangeRequest, rel releaseRef, repo *sluicev1.Repository, project, who string) (*unstructured.Unstructured, error) {
	if cur != nil {
		if owner := metav1.GetControllerOf(cur); owner == nil || owner.UID != rel.UID {
			return nil, applier.Permanent(sluicev1.ReasonOwnershipConflict,
				"the Argo CD Application %s/%s exists and is not controlled by this Release; it is left alone", rel.Namespace, rel.Name)
		}
	}
	want := a.desired(cr, rel, repo, project)
	if cur == nil {
		if err := c.Create(ctx, want); err != nil {
			return nil, explain("create the Application", rel.Namespace, who, err)
		}
		return want, nil
	}
	// Keep what Argo CD owns (status, its own finalizers and annotations)
	// and replace what Sluice decides: spec, operation, labels, owner.
	next := cur.DeepCopy()
	next.Object["spec"] = want.Object["spec"]
	next.Object["operation"] = want.Object["operation"]
	labels := next.GetLabels()
	if labels == nil {
		labels = map[string]string{}
	}
	for k, v := range want.GetLabels() {
		labels[k] = v
	}
	next.SetLabels(labels)
	if !slices.Contains(next.GetFinalizers(), ResourcesFinalizer) {
		// A narrower or older resources finalizer is replaced: Sluice
		// prunes with background propagation.
		next.SetFinalizers(slices.DeleteFunc(next.GetFinalizers(), func(f string) bool {
			return strings.HasPrefix(f, "resources-finalizer.argocd.argoproj.io")
		}))
		next.SetFinalizers(append(next.GetFinalizers(), ResourcesFinalizer))
	}
	// The resourceVersion read makes a concurrent change a conflict,
	// retried by the operator.
	if err := c.Update(ctx, next); err != nil {
		return nil, explain("update the Application", rel.Namespace, who, err)
	}
	return next, nil
}

// checkConfined refuses, with OutsideNamespace, a change whose verdict
// found objects outside its target namespace (the gate never hands such a
// change over; this holds if it did). Argo CD renders the chart itself, so
// objects the chart puts elsewhere are bounded at sync time only by the
// Repository's AppProject, and Argo CD applies only the approved manifest
// (cmp.go).
func checkConfined(cr *sluicev1.ChangeRequest) error {
	for _, f := range cr.Spec.Verdict.Findings {
		if f.Policy == "helm.namespace" && f.Severity == sluicev1.SeverityDeny {
			return applier.Permanent(sluicev1.ReasonOutsideNamespace, "the validator found an object outside namespace %s: %s %s", cr.Spec.TargetNamespace, f.Resource, f.Message)
		}
	}
	return nil
}

// releaseRef is the identity of a change's Release: its namespace and name
// (the change's) and UID (the change's controller reference), all the
// Application needs. The Release's spec is never read.
type releaseRef struct {
	Namespace, Name string
	UID             types.UID
}

// releaseOf is the Release of cr from the change alone.
func releaseOf(cr *sluicev1.ChangeRequest) (releaseRef, error) {
	owner := metav1.GetControllerOf(cr)
	if cr.Spec.Release == "" || owner == nil || owner.Kind != "Release" || owner.Name != cr.Spec.Release || owner.UID == "" ||
		owner.APIVersion != sluicev1.GroupVersion.String() {
		return releaseRef{}, applier.Permanent(sluicev1.ReasonInvalidSpec, "the change is not controlled by its Release %q, so the Application cannot be tied to it", cr.Spec.Release)
	}
	return releaseRef{Namespace: cr.Namespace, Name: cr.Spec.Release, UID: owner.UID}, nil
}

// desired is the Application for the change, built from the approved
// change only: the Repository's URL at the approved commit, the change's
// service folder, the Sluice plugin (no parameters, no env), into the
// change's target namespace, in the Repository's AppProject. The chart and
// values come from the verified artifact, in the plugin.
func (a *Applier) desired(cr *sluicev1.ChangeRequest, rel releaseRef, repo *sluicev1.Repository, project string) *unstructured.Unstructured {
	app := newApplication()
	app.SetNamespace(rel.Namespace)
	app.SetName(rel.Name)
	app.SetLabels(map[string]string{
		sluicev1.LabelRelease:       rel.Name,
		sluicev1.LabelChangeRequest: cr.Name,
	})
	app.SetFinalizers([]string{ResourcesFinalizer})
	app.SetOwnerReferences([]metav1.OwnerReference{{
		APIVersion: sluicev1.GroupVersion.String(), Kind: "Release", Name: rel.Name, UID: rel.UID,
		Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(false),
	}})
	app.Object["spec"] = map[string]any{
		"project": project,
		"source":  a.desiredSource(cr, repo),
		"destination": map[string]any{
			"server":    a.opts.Server,
			"namespace": cr.Spec.TargetNamespace,
		},
	}
	app.Object["operation"] = map[string]any{
		"initiatedBy": map[string]any{"username": "sluice:" + cr.Namespace + "/" + cr.Name},
		"info":        []any{map[string]any{"name": infoChangeRequest, "value": cr.Name}},
		// prune: objects this Application tracks that the approved
		// revision no longer renders are deleted, as the Helm applier
		// deletes what a release upgrade drops; without it such a change
		// stays OutOfSync and never counts as applied. Background
		// propagation (as the resources finalizer): the object goes at
		// once and the garbage collector removes its dependents; Argo CD's
		// default, foreground, keeps it (and the sync OutOfSync) until
		// every dependent is gone.
		"sync": map[string]any{"revision": cr.Spec.Revision, "prune": true,
			"syncOptions": []any{"PrunePropagationPolicy=background"}},
	}
	return app
}

// desiredSource is the Application's source for the change.
func (a *Applier) desiredSource(cr *sluicev1.ChangeRequest, repo *sluicev1.Repository) map[string]any {
	p, _ := SourcePath(cr)
	return map[string]any{
		"repoURL":        repo.Spec.URL,
		"targetRevision": cr.Spec.Revision,
		"path":           p,
		"plugin":         map[string]any{"name": PluginName},
	}
}

// SourcePath is the Application's source path for a change: the service
// folder the change records (its source), never the Release's, which a
// later push rewrites before it is planned.
func SourcePath(cr *sluicev1.ChangeRequest) (string, error) {
	if cr.Spec.Source == nil {
		return "", applier.Permanent(sluicev1.ReasonInvalidSpec, "the change records no source, so its service folder is unknown")
	}
	raw := string(cr.Spec.Source.Path)
	p := path.Clean(raw)
	if raw == "" || p == "." || path.IsAbs(p) || p == ".." || strings.HasPrefix(p, "../") {
		return "", applier.Permanent(sluicev1.ReasonInvalidSpec, "the change names no service folder inside the repository (source path %q)", raw)
	}
	return p, nil
}

// appNames are the names Argo CD may give the Application rel in override
// file names: "<name>" when it lives in Argo CD's namespace,
// "<namespace>_<name>" elsewhere (Application.InstanceName).
func (a *Applier) appNames(rel releaseRef) []string {
	if rel.Namespace == a.opts.Namespace {
		return []string{rel.Name}
	}
	return []string{rel.Namespace + "_" + rel.Name}
}

// checkNoOverrides downloads and verifies the change's artifact, then
// reads git itself at the approved commit and refuses it, with
// ManifestMismatch, when Argo CD could render it with anything but the
// Sluice plugin: an Argo CD override file anywhere in the repository or
// a submodule (see gitcheck.go). The artifact cannot answer this: it holds
// only what the approved change packed, and Argo CD checks out the whole
// commit.
func (a *Applier) checkNoOverrides(ctx context.Context, cr *sluicev1.ChangeRequest, repo *sluicev1.Repository, rel releaseRef) error {
	content, err := a.opts.Fetcher.FetchChange(ctx, cr)
	if err != nil {
		return err
	}
	_ = content.Close()
	p, err := SourcePath(cr)
	if err != nil {
		return err
	}
	rep, err := a.opts.Git.Inspect(ctx, repo, cr.Spec.Revision, p, a.appNames(rel))
	if err != nil {
		return err
	}
	if err := rep.Err(cr.Spec.Revision); err != nil {
		return &applier.Failure{Reason: sluicev1.ReasonManifestMismatch, Message: "refused: " + err.Error(), Err: err}
	}
	return nil
}

// checkRenderedBySluice fails the change, with ManifestMismatch, when the
// sync Argo CD reports was rendered by another plugin than Sluice's. Argo
// CD's status says only "Plugin" and the source as the Application set it;
// the plugin it used is that source merged with the override files of the
// synced commit, so it is derived from git as the repo-server derives it.
func (a *Applier) checkRenderedBySluice(ctx context.Context, app *unstructured.Unstructured, repo *sluicev1.Repository, rel releaseRef) error {
	rev, p := RenderedAt(app)
	rep, err := a.opts.Git.Inspect(ctx, repo, rev, p, a.appNames(rel))
	if err != nil {
		return err
	}
	if err := rep.UsedErr(rev); err != nil {
		return &applier.Failure{Reason: sluicev1.ReasonManifestMismatch, Message: "Argo CD did not render the approved manifest: " + err.Error(), Err: err}
	}
	return nil
}

// RenderedAt is the commit and source path of what Argo CD last synced
// (its operation state) or, without one, compares.
func RenderedAt(app *unstructured.Unstructured) (revision, sourcePath string) {
	get := func(f ...string) string { s, _, _ := unstructured.NestedString(app.Object, f...); return s }
	revision = get("status", "operationState", "syncResult", "revision")
	sourcePath = get("status", "operationState", "syncResult", "source", "path")
	if revision == "" {
		revision = get("status", "sync", "revision")
		sourcePath = get("status", "sync", "comparedTo", "source", "path")
	}
	if sourcePath == "" {
		sourcePath = get("spec", "source", "path")
	}
	return revision, sourcePath
}

// Cleanup implements applier.Cleaner: it deletes the Release's Application
// (Argo CD's resources finalizer removes what it deployed first) and
// reports done once it is gone.
func (a *Applier) Cleanup(ctx context.Context, r applier.Removal, repo *sluicev1.Repository) (applier.Result, error) {
	if r.Release == nil || repo == nil {
		return applier.Result{Message: "no Release or Repository: no Argo CD Application to delete"}, nil
	}
	rel := releaseRef{Namespace: r.Release.Namespace, Name: r.Release.Name, UID: r.Release.UID}
	c, err := impersonate.Client(a.opts.Config, repo, a.scheme)
	if err != nil {
		return applier.Result{}, err
	}
	who := impersonate.ServiceAccountUser(repo.Namespace, repo.Spec.ServiceAccountName)
	app, err := a.get(ctx, c, rel, who)
	if err != nil {
		return applier.Result{}, err
	}
	if app == nil {
		return applier.Result{Message: fmt.Sprintf("the Argo CD Application %s/%s is gone, and what it deployed to namespace %s with it", rel.Namespace, rel.Name, orNone(r.TargetNamespace))}, nil
	}
	if owner := metav1.GetControllerOf(app); owner == nil || owner.UID != rel.UID {
		return applier.Result{Message: fmt.Sprintf("the Argo CD Application %s/%s is not controlled by this Release: left alone", rel.Namespace, rel.Name)}, nil
	}
	if app.GetDeletionTimestamp() == nil {
		if err := c.Delete(ctx, app, client.Preconditions{UID: ptr.To(app.GetUID())}); client.IgnoreNotFound(err) != nil {
			return applier.Result{}, explain("delete the Application", rel.Namespace, who, err)
		}
	}
	return applier.Result{}, applier.Wait(sluicev1.ReasonWaitingForArgoCD, a.opts.Wait, "waiting for Argo CD to prune the Application %s/%s", rel.Namespace, rel.Name)
}

func newApplication() *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(ApplicationGVK)
	return u
}

// appStatus is what Apply reads of an Application's status.
type appStatus struct {
	syncStatus, syncRevision   string
	phase, opRevision, message string
	health, healthMessage      string
	// opChange is the ChangeRequest that asked for the last operation
	// (Sluice's info entry, which Argo CD copies into operationState).
	opChange         string
	operationPending bool
	pendingChange    string
}

func readStatus(app *unstructured.Unstructured) appStatus {
	var s appStatus
	s.syncStatus, _, _ = unstructured.NestedString(app.Object, "status", "sync", "status")
	s.syncRevision, _, _ = unstructured.NestedString(app.Object, "status", "sync", "revision")
	s.phase, _, _ = unstructured.NestedString(app.Object, "status", "operationState", "phase")
	s.message, _, _ = unstructured.NestedString(app.Object, "status", "operationState", "message")
	// Argo CD says why per object (e.g. "… is not permitted in project …").
	resources, _, _ := unstructured.NestedSlice(app.Object, "status", "operationState", "syncResult", "resources")
	for _, r := range resources {
		m, _ := r.(map[string]any)
		status, _ := m["status"].(string)
		msg, _ := m["message"].(string)
		if msg == "" || status == "Synced" || status == "Pruned" {
			continue
		}
		kind, _ := m["kind"].(string)
		name, _ := m["name"].(string)
		s.message += fmt.Sprintf("; %s/%s: %s", kind, name, msg)
	}
	s.opRevision, _, _ = unstructured.NestedString(app.Object, "status", "operationState", "operation", "sync", "revision")
	if s.opRevision == "" {
		s.opRevision, _, _ = unstructured.NestedString(app.Object, "status", "operationState", "syncResult", "revision")
	}
	s.health, _, _ = unstructured.NestedString(app.Object, "status", "health", "status")
	s.healthMessage, _, _ = unstructured.NestedString(app.Object, "status", "health", "message")
	if op, ok, _ := unstructured.NestedMap(app.Object, "status", "operationState", "operation"); ok {
		s.opChange = changeOf(op)
	}
	if op, ok, _ := unstructured.NestedMap(app.Object, "operation"); ok && op != nil {
		s.operationPending = true
		s.pendingChange = changeOf(op)
	}
	return s
}

// changeOf reads the ChangeRequest name Sluice put into an operation's info.
func changeOf(op map[string]any) string {
	info, _, _ := unstructured.NestedSlice(op, "info")
	for _, i := range info {
		if m, ok := i.(map[string]any); ok && m["name"] == infoChangeRequest {
			v, _ := m["value"].(string)
			return v
		}
	}
	return ""
}

// doneFor: Argo CD synced rev, the operation for it succeeded, and the
// application is healthy.
func (s appStatus) doneFor(rev string) bool {
	return !s.operationPending && s.syncStatus == "Synced" && s.syncRevision == rev &&
		s.phase == "Succeeded" && s.opRevision == rev && s.health == "Healthy"
}

// failedFor: the operation change asked for ended without success.
func (s appStatus) failedFor(change string) bool {
	return !s.operationPending && s.opChange == change && (s.phase == "Failed" || s.phase == "Error")
}

func targetRevision(app *unstructured.Unstructured) string {
	rev, _, _ := unstructured.NestedString(app.Object, "spec", "source", "targetRevision")
	return rev
}

// syncing reports whether change already asked for a sync that is in
// flight or has an outcome, so it must not be asked for again.
func syncing(app *unstructured.Unstructured, change string) bool {
	s := readStatus(app)
	if s.operationPending {
		return s.pendingChange == change
	}
	return s.opChange == change
}

// explain turns an API error of the impersonated client into an applier
// error: a refusal is permanent and says which Role is missing.
func explain(step, namespace, who string, err error) error {
	if apierrors.IsForbidden(err) {
		return &applier.Failure{Reason: sluicev1.ReasonApplyFailed,
			Message: fmt.Sprintf("%s may not %s in namespace %s (give it a Role there for argoproj.io applications)", who, step, namespace), Err: err}
	}
	return fmt.Errorf("%s: %w", step, err)
}

// projectNotSeenYet reports an operation that failed only because Argo
// CD did not know the project yet.
func projectNotSeenYet(message, project string) bool {
	return strings.Contains(message, fmt.Sprintf("appproject.argoproj.io %q not found", project))
}

// syncedAsSet checks that what Argo CD reports it compared and synced is
// the source Sluice set, rendered by the Sluice plugin, into the target
// namespace: a changed or overridden source fails the change.
func syncedAsSet(app *unstructured.Unstructured, want map[string]any, ns string) error {
	got, _, _ := unstructured.NestedMap(app.Object, "status", "sync", "comparedTo", "source")
	gotNS, _, _ := unstructured.NestedString(app.Object, "status", "sync", "comparedTo", "destination", "namespace")
	sourceType, _, _ := unstructured.NestedString(app.Object, "status", "sourceType")
	plugin, _, _ := unstructured.NestedMap(got, "plugin")
	wantPlugin, _ := want["plugin"].(map[string]any)
	same := got["repoURL"] == want["repoURL"] && got["targetRevision"] == want["targetRevision"] && got["path"] == want["path"] &&
		plugin != nil && plugin["name"] == wantPlugin["name"] && plugin["env"] == nil && plugin["parameters"] == nil &&
		got["helm"] == nil && got["kustomize"] == nil && got["directory"] == nil && got["chart"] == nil
	if !same || sourceType != "Plugin" || gotNS != ns {
		return applier.Permanent(sluicev1.ReasonManifestMismatch,
			"Argo CD synced a source other than the one Sluice set (source type %q, namespace %q, source %v)", sourceType, gotNS, got)
	}
	return nil
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}
