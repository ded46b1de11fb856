// Package argocd is the applier for delivery argocd (DESIGN.md §5): it
// drives an Argo CD Application owned by the Release, pinned to the
// approved commit, and counts the change applied only once Argo CD reports
// that very revision synced, the sync operation succeeded and the
// application healthy.
//
// One Apply runs these steps, and stops at the first that fails:
//
//  1. the target namespace is one the Repository allows, and the
//     Release's; no object of the verdict lies outside it;
//  2. as the Repository's ServiceAccount (impersonation), read the
//     Application "<release>" in the control namespace. When Argo CD already
//     reports the approved revision synced, succeeded and healthy, the
//     change is applied: return (a re-run after a restart repeats nothing);
//  3. unless a sync of the approved revision is in flight or finished,
//     create or patch the Application (source pinned to the commit, the
//     release's chart and values, destination the target namespace, owner
//     the Release) and ask for a sync through its operation field;
//  4. watch the Application until Argo CD reports the outcome, for at most
//     Options.Wait; a failed sync fails the change, a sync still running
//     is looked at again on the next (backed-off) call.
//
// The Argo CD Go types cannot be compiled next to controller-runtime v0.25,
// so the Application is handled as an unstructured object; the field names
// are Argo CD's argoproj.io/v1alpha1 API.
package argocd

import (
	"context"
	"errors"
	"fmt"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	argoapp "github.com/argoproj/argo-cd/v2/pkg/apis/application"
	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
	"github.com/sluice-gitops/sluice/operator/internal/applier"
	"github.com/sluice-gitops/sluice/operator/internal/impersonate"
)

// Name is the applier's name in status and metrics.
const Name = "argocd"

// ApplicationGVK is Argo CD's Application kind.
var ApplicationGVK = schema.GroupVersionKind{Group: argoapp.Group, Version: "v1alpha1", Kind: argoapp.ApplicationKind}

// ResourcesFinalizer makes Argo CD delete what an Application deployed
// before the Application goes (Argo CD's resources-finalizer).
const ResourcesFinalizer = "resources-finalizer.argocd.argoproj.io"

// infoChangeRequest names the operation info entry carrying the
// ChangeRequest that asked for a sync.
const infoChangeRequest = "sluice.changeRequest"

// InClusterServer is Argo CD's name for the cluster it runs in.
const InClusterServer = "https://kubernetes.default.svc"

// Defaults.
const (
	DefaultProject = "default"
	DefaultWait    = 2 * time.Minute
	pollInterval   = 500 * time.Millisecond
)

// Options configure the Argo CD applier.
type Options struct {
	// Config is the operator's own connection; it must be allowed to
	// impersonate the Repositories' ServiceAccounts, which need rights on
	// argoproj.io applications in the control namespace.
	Config *rest.Config
	// Project is the Argo CD AppProject of the Applications; it bounds what
	// Argo CD itself may deploy. Empty means DefaultProject.
	Project string
	// Server is the destination cluster; empty means InClusterServer.
	Server string
	// Wait is how long one Apply watches a sync before it hands back a
	// retryable "still syncing"; zero means DefaultWait.
	Wait time.Duration
	// Log receives progress at V(1).
	Log logr.Logger
}

// Applier applies approved changes through Argo CD Applications.
type Applier struct {
	opts   Options
	scheme *runtime.Scheme
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
	if opts.Project == "" {
		opts.Project = DefaultProject
	}
	if opts.Server == "" {
		opts.Server = InClusterServer
	}
	if opts.Wait == 0 {
		opts.Wait = DefaultWait
	}
	return &Applier{opts: opts, scheme: runtime.NewScheme()}, nil
}

// Name implements applier.Applier.
func (a *Applier) Name() string { return Name }

// commitSHA is a full git commit id (SHA-1 or SHA-256), as the API requires.
var commitSHA = regexp.MustCompile(`^[a-f0-9]{40}([a-f0-9]{24})?$`)

// ErrSyncing is returned (wrapped) while Argo CD has not finished the sync
// of the approved revision; the operator calls again with backoff.
var ErrSyncing = errors.New("Argo CD has not finished syncing the approved revision")

// Apply implements applier.Applier.
func (a *Applier) Apply(ctx context.Context, req applier.Request) (applier.Result, error) {
	cr, rel, repo := req.Change, req.Release, req.Repository
	if cr == nil || rel == nil || repo == nil {
		return applier.Result{}, applier.Permanent(sluicev1.ReasonInvalidSpec, "the request has no change, release or repository")
	}
	if err := impersonate.CheckNamespace(repo, cr.Spec.TargetNamespace); err != nil {
		return applier.Result{}, err
	}
	if err := checkConfined(cr, rel); err != nil {
		return applier.Result{}, err
	}
	if !commitSHA.MatchString(cr.Spec.Revision) {
		return applier.Result{}, applier.Permanent(sluicev1.ReasonInvalidSpec, "the change records no commit to pin the Application to")
	}
	if rel.Spec.Chart.Path == "" {
		return applier.Result{}, applier.Permanent(sluicev1.ReasonInvalidSpec, "delivery argocd needs a chart in the infra repository (chart.path)")
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
		if app, err = a.requestSync(ctx, c, app, cr, rel, repo, who); err != nil {
			return applier.Result{}, err
		}
		log.V(1).Info("Sync requested")
	}

	deadline := time.Now().Add(a.opts.Wait)
	for {
		st := readStatus(app)
		switch {
		case st.doneFor(cr.Spec.Revision):
			return applier.Result{Message: fmt.Sprintf("Argo CD Application %s/%s synced revision %s and is Healthy", rel.Namespace, rel.Name, short(cr.Spec.Revision))}, nil
		case st.failedFor(cr.Name):
			return applier.Result{}, applier.Permanent(sluicev1.ReasonApplyFailed,
				"Argo CD's sync of revision %s ended %s: %s", short(cr.Spec.Revision), st.phase, sluicev1.Truncate(st.message, 600))
		}
		if time.Now().After(deadline) {
			return applier.Result{}, fmt.Errorf("%w %s: sync %s, operation %s, health %s %s", ErrSyncing, short(cr.Spec.Revision),
				orNone(st.syncStatus), orNone(st.phase), orNone(st.health), sluicev1.Truncate(st.healthMessage, 200))
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
func (a *Applier) get(ctx context.Context, c client.Client, rel *sluicev1.Release, who string) (*unstructured.Unstructured, error) {
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
func (a *Applier) requestSync(ctx context.Context, c client.Client, cur *unstructured.Unstructured, cr *sluicev1.ChangeRequest, rel *sluicev1.Release, repo *sluicev1.Repository, who string) (*unstructured.Unstructured, error) {
	if cur != nil {
		if owner := metav1.GetControllerOf(cur); owner == nil || owner.UID != rel.UID {
			return nil, applier.Permanent(sluicev1.ReasonOwnershipConflict,
				"the Argo CD Application %s/%s exists and is not controlled by this Release; it is left alone", rel.Namespace, rel.Name)
		}
	}
	want, err := a.desired(cr, rel, repo)
	if err != nil {
		return nil, err
	}
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
		next.SetFinalizers(append(next.GetFinalizers(), ResourcesFinalizer))
	}
	// The resourceVersion read makes a concurrent change a conflict,
	// retried by the operator.
	if err := c.Update(ctx, next); err != nil {
		return nil, explain("update the Application", rel.Namespace, who, err)
	}
	return next, nil
}

// checkConfined refuses, with OutsideNamespace, a change whose Application
// would not stay in the release's target namespace: a destination other than
// the Release's, or a verdict that found objects outside it (the gate never
// hands such a change over; this holds if it did). Argo CD renders the chart
// itself, so objects the chart puts elsewhere are bounded at sync time only
// by the AppProject; giving Argo CD the approved manifest and a
// per-Repository AppProject is issue 14.
func checkConfined(cr *sluicev1.ChangeRequest, rel *sluicev1.Release) error {
	if rel.Spec.TargetNamespace != "" && cr.Spec.TargetNamespace != rel.Spec.TargetNamespace {
		return applier.Permanent(sluicev1.ReasonOutsideNamespace, "the change deploys to namespace %q, its Release to %q", cr.Spec.TargetNamespace, rel.Spec.TargetNamespace)
	}
	for _, f := range cr.Spec.Verdict.Findings {
		if f.Policy == "helm.namespace" && f.Severity == sluicev1.SeverityDeny {
			return applier.Permanent(sluicev1.ReasonOutsideNamespace, "the validator found an object outside namespace %s: %s %s", cr.Spec.TargetNamespace, f.Resource, f.Message)
		}
	}
	return nil
}

// desired is the Application for the change: the release's chart at the
// approved commit with its values files, into the target namespace.
func (a *Applier) desired(cr *sluicev1.ChangeRequest, rel *sluicev1.Release, repo *sluicev1.Repository) (*unstructured.Unstructured, error) {
	chartPath := path.Clean(string(rel.Spec.Chart.Path))
	valueFiles := make([]any, 0, len(rel.Spec.Values))
	for _, v := range rel.Spec.Values {
		// Argo CD resolves value files against the source path; the
		// Release's are repository-relative.
		rp, err := relPath(chartPath, path.Clean(string(v)))
		if err != nil {
			return nil, applier.Permanent(sluicev1.ReasonInvalidSpec, "values file %q: %v", v, err)
		}
		valueFiles = append(valueFiles, rp)
	}
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
		"project": a.opts.Project,
		"source": map[string]any{
			"repoURL":        repo.Spec.URL,
			"targetRevision": cr.Spec.Revision,
			"path":           chartPath,
			"helm": map[string]any{
				"releaseName": rel.Name,
				"valueFiles":  valueFiles,
			},
		},
		"destination": map[string]any{
			"server":    a.opts.Server,
			"namespace": cr.Spec.TargetNamespace,
		},
	}
	app.Object["operation"] = map[string]any{
		"initiatedBy": map[string]any{"username": "sluice:" + cr.Namespace + "/" + cr.Name},
		"info":        []any{map[string]any{"name": infoChangeRequest, "value": cr.Name}},
		"sync":        map[string]any{"revision": cr.Spec.Revision},
	}
	return app, nil
}

// Cleanup implements applier.Cleaner: it deletes the Release's Application
// (Argo CD's resources finalizer removes what it deployed first) and
// reports done once it is gone.
func (a *Applier) Cleanup(ctx context.Context, rel *sluicev1.Release, repo *sluicev1.Repository) error {
	c, err := impersonate.Client(a.opts.Config, repo, a.scheme)
	if err != nil {
		return err
	}
	who := impersonate.ServiceAccountUser(repo.Namespace, repo.Spec.ServiceAccountName)
	app, err := a.get(ctx, c, rel, who)
	if err != nil || app == nil {
		return err
	}
	if owner := metav1.GetControllerOf(app); owner == nil || owner.UID != rel.UID {
		return nil // not ours: left alone
	}
	if app.GetDeletionTimestamp() == nil {
		if err := c.Delete(ctx, app, client.Preconditions{UID: ptr.To(app.GetUID())}); client.IgnoreNotFound(err) != nil {
			return explain("delete the Application", rel.Namespace, who, err)
		}
	}
	return fmt.Errorf("waiting for Argo CD to prune the Application %s/%s", rel.Namespace, rel.Name)
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

// relPath is target relative to the folder base (both slash-separated and
// repository-relative), refusing paths that leave the repository.
func relPath(base, target string) (string, error) {
	if path.IsAbs(target) || target == ".." || strings.HasPrefix(target, "../") {
		return "", errors.New("leaves the repository")
	}
	rel, err := filepath.Rel(filepath.FromSlash(base), filepath.FromSlash(target))
	if err != nil {
		return "", err
	}
	return filepath.ToSlash(rel), nil
}

func short(rev string) string { return sluicev1.ShortSHA(rev) }

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}
