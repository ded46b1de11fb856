package drift

import (
	"context"
	"fmt"
	"reflect"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
	argoapplier "github.com/sluice-gitops/sluice/operator/internal/applier/argocd"
	"github.com/sluice-gitops/sluice/operator/internal/impersonate"
)

// ApplicationKind is the Kind of a release's Argo CD Application in a
// Release's drift status.
const ApplicationKind = "Application"

// Argo CD's sync and health codes (argoproj.io/v1alpha1).
const (
	argoSynced    = "Synced"
	argoOutOfSync = "OutOfSync"
	argoHealthy   = "Healthy"
	argoMissing   = "Missing"
)

// ArgoCDChecker reports drift of a release delivered by Argo CD from what
// Argo CD itself reports of the release's Application (named after the
// Release, in the control namespace): Argo CD already compares the live
// objects with the manifest the Sluice plugin renders for the approved
// commit, so the check reads that comparison instead of repeating it. It
// never writes, and it never turns on Argo CD's auto-sync or self-heal,
// which would sync revisions nobody approved.
//
// Drift is: the Application gone or not controlled by the Release; its
// spec no longer the one the Argo CD applier set for the applied change
// (another revision, repository, path or renderer than the Sluice plugin,
// another destination or project, ignoreDifferences that would hide
// drift, an automated sync policy); Argo CD comparing or having synced a
// revision other than the approved one; Argo CD having rendered the
// revision it synced with a plugin other than Sluice's (its status names
// no plugin: git at that revision says which, as the Argo CD applier
// checks after a sync); and every resource Argo CD reports OutOfSync
// (missing: removed; to be pruned: added; otherwise changed).
type ArgoCDChecker struct {
	// Config is the operator's connection; only impersonated copies are
	// used unless Direct.
	Config *rest.Config
	// Server is the destination cluster the Argo CD applier sets
	// (--argocd-server); empty compares no server.
	Server string
	// Direct uses Config as it is instead of impersonating the
	// Repository's ServiceAccount (kubectl sluice audit, as its user).
	Direct bool
	// Git reads the rendered revision from the Repository's git; nil means
	// one reading credentials with Config's identity (not impersonated).
	Git *argoapplier.GitReader

	mu      sync.Mutex
	clients map[string]client.Reader
}

// ArgoCDState is what Argo CD reports of a release's Application, held to
// the applied change.
type ArgoCDState struct {
	// Application is "<namespace>/<name>".
	Application string
	// Found is false when there is no Application.
	Found bool
	// SyncStatus, SyncRevision and Health are Argo CD's status.sync and
	// status.health.
	SyncStatus, SyncRevision, Health string
	// Server and Namespace are the Application's destination.
	Server, Namespace string
	// ReconciledAt is when Argo CD last compared the live state.
	ReconciledAt string
	// ComparisonError is Argo CD's ComparisonError condition, if any.
	ComparisonError string
	// Resources is how many resources Argo CD compared.
	Resources int
	// Report holds the drifted objects (Checked is Resources).
	Report Report
	// NoRevert, when set, says why re-applying the applied change would
	// not undo the drift: the Argo CD applier syncs again only when the
	// Application is not pinned to the approved revision, or Argo CD does
	// not report it synced and healthy there.
	NoRevert string
}

// Check implements Checker. A comparison Argo CD could not make (sync
// status Unknown) with no other drift is an error: nothing is known.
func (c *ArgoCDChecker) Check(ctx context.Context, rel *sluicev1.Release, repo *sluicev1.Repository, applied *sluicev1.ChangeRequest) (Report, error) {
	rep, _, err := c.check(ctx, rel, repo, applied)
	return rep, err
}

// check is Check, and says why a revert would not undo the drift (see
// ArgoCDState.NoRevert).
func (c *ArgoCDChecker) check(ctx context.Context, rel *sluicev1.Release, repo *sluicev1.Repository, applied *sluicev1.ChangeRequest) (Report, string, error) {
	st, err := c.Inspect(ctx, rel, repo, applied)
	if err != nil {
		return Report{}, "", err
	}
	if !st.Report.Drifted() && st.SyncStatus != argoSynced {
		return Report{}, "", fmt.Errorf("Argo CD reports the Application %s %s: %s", st.Application, orUnknown(st.SyncStatus), orUnknown(st.ComparisonError))
	}
	return st.Report, st.NoRevert, nil
}

// Inspect reads the release's Application and holds it to the applied
// change.
func (c *ArgoCDChecker) Inspect(ctx context.Context, rel *sluicev1.Release, repo *sluicev1.Repository, applied *sluicev1.ChangeRequest) (ArgoCDState, error) {
	st := ArgoCDState{Application: rel.Namespace + "/" + rel.Name}
	cl, err := c.clientFor(repo)
	if err != nil {
		return st, err
	}
	app := &unstructured.Unstructured{}
	app.SetGroupVersionKind(argoapplier.ApplicationGVK)
	if err := cl.Get(ctx, client.ObjectKey{Namespace: rel.Namespace, Name: rel.Name}, app); err != nil {
		if apierrors.IsNotFound(err) {
			st.Report.Objects = []sluicev1.DriftedObject{{Kind: ApplicationKind, Namespace: rel.Namespace, Name: rel.Name, Change: sluicev1.DriftRemoved}}
			return st, nil
		}
		return st, fmt.Errorf("read the Argo CD Application %s: %w", st.Application, err)
	}
	st.Found = true
	readArgoStatus(app, &st)

	fields := c.specDrift(app, repo, applied)
	rendered, err := c.renderedBy(ctx, app, rel, repo)
	if err != nil {
		return st, err
	}
	fields = append(fields, rendered...)
	if owner := metav1.GetControllerOf(app); owner == nil || owner.UID != rel.UID {
		fields = append([]string{"metadata.ownerReferences: not controlled by this Release"}, fields...)
		st.NoRevert = "the Application is not controlled by this Release, and the Argo CD applier leaves such an Application alone"
	}
	fields = append(fields, statusDrift(app, &st, applied.Spec.Revision)...)
	if len(fields) > 0 {
		if len(fields) > maxDriftFields {
			fields = append(fields[:maxDriftFields-1], fmt.Sprintf("… and %d more", len(fields)-maxDriftFields+1))
		}
		st.Report.Objects = append(st.Report.Objects, sluicev1.DriftedObject{Kind: ApplicationKind, Namespace: rel.Namespace, Name: rel.Name, Change: sluicev1.DriftChanged, Fields: fields})
	}
	st.Report.Objects = append(st.Report.Objects, outOfSyncResources(app)...)
	st.Report.Checked = st.Resources
	if st.NoRevert == "" {
		st.NoRevert = noRevert(app, st.Report.Objects, applied.Spec.Revision)
	}
	return st, nil
}

// noRevert says why re-applying the applied change through the Argo CD
// applier would not undo the drift in objs, or "" when it would: a re-apply
// syncs nothing while Argo CD reports the approved revision synced and
// healthy (only the Application's spec was edited). An object planted under
// the Application's tracking label is undone: the applier's syncs prune.
func noRevert(app *unstructured.Unstructured, objs []sluicev1.DriftedObject, revision string) string {
	if len(objs) == 0 {
		return ""
	}
	if !resyncs(app, revision) {
		return "Argo CD reports the approved revision synced and healthy, so a re-apply would not sync again; the next applied change sets the Application's spec back"
	}
	return ""
}

// clientFor is the reader of the Repository's ServiceAccount (or, Direct,
// of Config's user), kept across checks.
func (c *ArgoCDChecker) clientFor(repo *sluicev1.Repository) (client.Reader, error) {
	user := ""
	if !c.Direct {
		var err error
		if user, err = impersonate.User(repo); err != nil {
			return nil, err
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if cl, ok := c.clients[user]; ok {
		return cl, nil
	}
	cfg := rest.CopyConfig(c.Config)
	if !c.Direct {
		var err error
		if cfg, err = impersonate.Config(c.Config, repo); err != nil {
			return nil, err
		}
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = time.Minute
	}
	cl, err := client.New(cfg, client.Options{Scheme: runtime.NewScheme()})
	if err != nil {
		return nil, fmt.Errorf("drift client: %w", err)
	}
	if c.clients == nil {
		c.clients = map[string]client.Reader{}
	}
	c.clients[user] = cl
	return cl, nil
}

// readArgoStatus copies what Argo CD reports into st.
func readArgoStatus(app *unstructured.Unstructured, st *ArgoCDState) {
	st.SyncStatus, _, _ = unstructured.NestedString(app.Object, "status", "sync", "status")
	st.SyncRevision, _, _ = unstructured.NestedString(app.Object, "status", "sync", "revision")
	st.Health, _, _ = unstructured.NestedString(app.Object, "status", "health", "status")
	st.Server, _, _ = unstructured.NestedString(app.Object, "spec", "destination", "server")
	st.Namespace, _, _ = unstructured.NestedString(app.Object, "spec", "destination", "namespace")
	st.ReconciledAt, _, _ = unstructured.NestedString(app.Object, "status", "reconciledAt")
	resources, _, _ := unstructured.NestedSlice(app.Object, "status", "resources")
	st.Resources = len(resources)
	conds, _, _ := unstructured.NestedSlice(app.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] == "ComparisonError" {
			st.ComparisonError, _ = m["message"].(string)
		}
	}
}

// specDrift lists where the Application's spec is not what the Argo CD
// applier sets for the applied change.
func (c *ArgoCDChecker) specDrift(app *unstructured.Unstructured, repo *sluicev1.Repository, applied *sluicev1.ChangeRequest) []string {
	var fields []string
	spec, _, _ := unstructured.NestedMap(app.Object, "spec")
	src, _, _ := unstructured.NestedMap(spec, "source")
	// The applied change's folder, never the Release's, which a push
	// rewrites.
	wantPath, err := argoapplier.SourcePath(applied)
	if err != nil {
		fields = append(fields, "the applied change records no service folder, so the Application cannot be held to one")
	}
	for _, f := range []struct{ name, want string }{
		{"targetRevision", applied.Spec.Revision},
		{"repoURL", repo.Spec.URL},
		{"path", wantPath},
	} {
		if got, _ := src[f.name].(string); got != f.want {
			fields = append(fields, fmt.Sprintf("spec.source.%s: %q, not the approved %q", f.name, got, f.want))
		}
	}
	if plugin, _ := src["plugin"].(map[string]any); plugin == nil || plugin["name"] != argoapplier.PluginName || plugin["env"] != nil || plugin["parameters"] != nil {
		fields = append(fields, "spec.source.plugin: not the Sluice plugin alone")
	}
	for _, k := range []string{"helm", "kustomize", "directory", "chart"} {
		if src[k] != nil {
			fields = append(fields, "spec.source."+k+": set, so Argo CD renders on its own")
		}
	}
	if spec["sources"] != nil {
		fields = append(fields, "spec.sources: set, so Argo CD renders other sources")
	}
	if ns, _, _ := unstructured.NestedString(spec, "destination", "namespace"); ns != applied.Spec.TargetNamespace {
		fields = append(fields, fmt.Sprintf("spec.destination.namespace: %q, not %q", ns, applied.Spec.TargetNamespace))
	}
	if server, _, _ := unstructured.NestedString(spec, "destination", "server"); c.Server != "" && server != c.Server {
		fields = append(fields, fmt.Sprintf("spec.destination.server: %q, not %q", server, c.Server))
	}
	if p, _ := spec["project"].(string); repo.Name != "" && p != argoapplier.ProjectName(repo) {
		fields = append(fields, fmt.Sprintf("spec.project: %q, not %q", p, argoapplier.ProjectName(repo)))
	}
	if d, _ := spec["ignoreDifferences"].([]any); len(d) > 0 {
		fields = append(fields, "spec.ignoreDifferences: set, so Argo CD would not report what it ignores")
	}
	if auto, ok, _ := unstructured.NestedFieldNoCopy(spec, "syncPolicy", "automated"); ok && auto != nil {
		fields = append(fields, "spec.syncPolicy.automated: set, so Argo CD would sync on its own")
	}
	return fields
}

// renderedBy lists, as drift, a revision Argo CD last synced or compares
// that it rendered with a plugin other than Sluice's: Argo CD merges the
// override files of the source path at that revision into the source, and
// git says what they name. Nothing is listed before Argo CD synced or
// compared any revision.
func (c *ArgoCDChecker) renderedBy(ctx context.Context, app *unstructured.Unstructured, rel *sluicev1.Release, repo *sluicev1.Repository) ([]string, error) {
	rev, p := argoapplier.RenderedAt(app)
	if rev == "" || p == "" {
		return nil, nil
	}
	g, err := c.gitReader()
	if err != nil {
		return nil, err
	}
	// Argo CD names the Application "<name>" in its own namespace and
	// "<namespace>_<name>" elsewhere; both files are merged, to be safe.
	rep, err := g.Inspect(ctx, repo, rev, p, []string{rel.Name, rel.Namespace + "_" + rel.Name})
	if err != nil {
		return nil, fmt.Errorf("read what Argo CD rendered: %w", err)
	}
	if err := rep.UsedErr(rev); err != nil {
		return []string{"status: Argo CD did not render with the Sluice plugin: " + err.Error()}, nil
	}
	return nil, nil
}

// gitReader is c.Git, or one made at first use that reads the
// Repository's credentials as Config's own identity.
func (c *ArgoCDChecker) gitReader() (*argoapplier.GitReader, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.Git != nil {
		return c.Git, nil
	}
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	cl, err := client.New(rest.CopyConfig(c.Config), client.Options{Scheme: scheme})
	if err != nil {
		return nil, fmt.Errorf("drift client: %w", err)
	}
	c.Git = &argoapplier.GitReader{Secrets: cl}
	return c.Git, nil
}

// statusDrift lists what Argo CD compared or last synced other than the
// approved revision, and fills in st.
func statusDrift(app *unstructured.Unstructured, st *ArgoCDState, revision string) []string {
	var fields []string
	if st.SyncRevision != "" && st.SyncRevision != revision {
		fields = append(fields, fmt.Sprintf("status.sync.revision: Argo CD compares revision %s, not the approved %s", sluicev1.ShortSHA(st.SyncRevision), sluicev1.ShortSHA(revision)))
	}
	// The last sync operation: one that ran with another revision or
	// source (a sync or rollback by hand) put that revision's objects in
	// the cluster.
	phase, _, _ := unstructured.NestedString(app.Object, "status", "operationState", "phase")
	synced, _, _ := unstructured.NestedString(app.Object, "status", "operationState", "syncResult", "revision")
	if synced == "" {
		synced, _, _ = unstructured.NestedString(app.Object, "status", "operationState", "operation", "sync", "revision")
	}
	if (phase == "Succeeded" || phase == "Running") && synced != "" && synced != revision {
		by, _, _ := unstructured.NestedString(app.Object, "status", "operationState", "operation", "initiatedBy", "username")
		fields = append(fields, fmt.Sprintf("status.operationState: a sync by %s put revision %s in place (%s)", orUnknown(by), sluicev1.ShortSHA(synced), phase))
	}
	if override, ok, _ := unstructured.NestedMap(app.Object, "status", "operationState", "operation", "sync", "source"); ok && len(override) > 0 &&
		(phase == "Succeeded" || phase == "Running") {
		if spec, _, _ := unstructured.NestedMap(app.Object, "spec", "source"); !reflect.DeepEqual(override, spec) {
			fields = append(fields, "status.operationState: the last sync overrode the Application's source")
		}
	}
	if st.SyncStatus == argoOutOfSync && len(outOfSyncResources(app)) == 0 {
		fields = append(fields, "status.sync.status: OutOfSync")
	}
	return fields
}

// outOfSyncResources are the resources Argo CD reports OutOfSync, sorted:
// missing live (removed), live but not in the approved manifest (added,
// Argo CD would prune them), or different (changed).
func outOfSyncResources(app *unstructured.Unstructured) []sluicev1.DriftedObject {
	resources, _, _ := unstructured.NestedSlice(app.Object, "status", "resources")
	var out []sluicev1.DriftedObject
	for _, r := range resources {
		m, _ := r.(map[string]any)
		if m["status"] != argoOutOfSync {
			continue
		}
		kind, _ := m["kind"].(string)
		ns, _ := m["namespace"].(string)
		name, _ := m["name"].(string)
		health, _, _ := unstructured.NestedString(m, "health", "status")
		o := sluicev1.DriftedObject{Kind: kind, Namespace: ns, Name: name, Change: sluicev1.DriftChanged}
		switch {
		case m["requiresPruning"] == true:
			o.Change = sluicev1.DriftAdded
		case health == argoMissing:
			o.Change = sluicev1.DriftRemoved
		}
		out = append(out, o)
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Kind != b.Kind {
			return a.Kind < b.Kind
		}
		if a.Namespace != b.Namespace {
			return a.Namespace < b.Namespace
		}
		return a.Name < b.Name
	})
	return out
}

// resyncs reports whether the Argo CD applier, handed a re-apply of the
// applied change, would write the Application and ask for a sync: when
// the Application is not pinned to the approved revision, or Argo CD does
// not report that revision synced, succeeded and healthy (its Apply).
func resyncs(app *unstructured.Unstructured, revision string) bool {
	get := func(f ...string) string { s, _, _ := unstructured.NestedString(app.Object, f...); return s }
	opRevision := get("status", "operationState", "operation", "sync", "revision")
	if opRevision == "" {
		opRevision = get("status", "operationState", "syncResult", "revision")
	}
	done := get("status", "sync", "status") == argoSynced && get("status", "sync", "revision") == revision &&
		get("status", "operationState", "phase") == "Succeeded" && opRevision == revision &&
		get("status", "health", "status") == argoHealthy
	return get("spec", "source", "targetRevision") != revision || !done
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}
