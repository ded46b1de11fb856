package compliance

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	openreports "github.com/openreports/reports-api/apis/openreports.io/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-gitops/sluice/infra-validator/pkg/policy"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
	"github.com/sluice-gitops/sluice/operator/internal/impersonate"
	"github.com/sluice-gitops/sluice/operator/internal/metrics"
)

// Kind is a kind of live object the scanner watches in each target
// namespace.
type Kind struct {
	schema.GroupVersionResource
	Kind string
}

// DefaultKinds are the kinds Sluice's default Kubernetes policies look
// at: workloads and bare Pods (pod specs: images, security, resources,
// secrets in env), ConfigMaps (plaintext secrets) and
// PodDisruptionBudgets (the production PDB check). Secrets are never
// watched.
var DefaultKinds = []Kind{
	{schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}, "Deployment"},
	{schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "statefulsets"}, "StatefulSet"},
	{schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "daemonsets"}, "DaemonSet"},
	{schema.GroupVersionResource{Group: "batch", Version: "v1", Resource: "jobs"}, "Job"},
	{schema.GroupVersionResource{Group: "batch", Version: "v1", Resource: "cronjobs"}, "CronJob"},
	{schema.GroupVersionResource{Version: "v1", Resource: "pods"}, "Pod"},
	{schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, "ConfigMap"},
	{schema.GroupVersionResource{Group: "policy", Version: "v1", Resource: "poddisruptionbudgets"}, "PodDisruptionBudget"},
}

// Options configure a Scanner.
type Options struct {
	// Config reaches the API server for the namespace-scoped informers.
	Config *rest.Config
	// Cache is the manager's cache: Repositories, Namespaces (metadata),
	// Releases and ChangeRequests, which the operator caches already.
	Cache cache.Cache
	// Client writes the Reports (and reads one the scanner has not
	// written since it started); Reports are not cached.
	Client client.Client
	// Engine is the compiled policy bundle, BundleDigest its digest.
	Engine       *policy.Engine
	BundleDigest string
	// Kinds are watched in every target namespace; nil means DefaultKinds.
	Kinds []Kind
	// Interval between full passes (every object evaluated again);
	// changes are evaluated Debounce after they are seen.
	Interval time.Duration
	Debounce time.Duration
	// Timeout bounds one object's evaluation.
	Timeout time.Duration
	// MaxResults and MaxBytes bound each Report's results.
	MaxResults, MaxBytes int
	// Metrics records the compliance metrics; nil records nothing.
	Metrics *metrics.ComplianceRecorder
	Log     logr.Logger
}

// Scanner evaluates the policy bundle over the live objects of every
// target namespace and keeps one Report per namespace. It is a manager
// Runnable that runs on the leader only.
//
// +kubebuilder:rbac:groups=gitops.sluice.dev,resources=repositories;releases;changerequests,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=pods;configmaps,verbs=list;watch
// +kubebuilder:rbac:groups=apps,resources=deployments;statefulsets;daemonsets,verbs=list;watch
// +kubebuilder:rbac:groups=batch,resources=jobs;cronjobs,verbs=list;watch
// +kubebuilder:rbac:groups=policy,resources=poddisruptionbudgets,verbs=list;watch
// +kubebuilder:rbac:groups=openreports.io,resources=reports,verbs=get;create;update;delete
type Scanner struct {
	o   Options
	dyn dynamic.Interface

	mu      sync.Mutex
	dirty   map[string]bool // namespaces with changes not yet evaluated
	targets bool            // the set of target namespaces may have changed
	wake    chan struct{}

	watches map[string]*nsWatch

	// passes and writes count namespace passes and Report writes (tests
	// and benchmarks wait on them).
	passes, writes atomic.Int64
}

// nsWatch is one target namespace's informers, evaluator and last Report.
type nsWatch struct {
	factory   dynamicinformer.DynamicSharedInformerFactory
	informers []toolscache.SharedIndexInformer
	stop      chan struct{}
	eval      *Evaluator
	last      *openreports.Report
}

// NewScanner returns a Scanner; o.Engine, o.Config, o.Cache and o.Client
// are required (New fills them from a manager).
func NewScanner(o Options) (*Scanner, error) {
	if o.Engine == nil || o.Config == nil || o.Cache == nil || o.Client == nil {
		return nil, fmt.Errorf("compliance: a scanner needs a policy engine, a rest config, a cache and a client")
	}
	if o.Kinds == nil {
		o.Kinds = DefaultKinds
	}
	if o.Interval <= 0 {
		o.Interval = DefaultInterval
	}
	if o.Debounce <= 0 {
		o.Debounce = DefaultDebounce
	}
	dyn, err := dynamic.NewForConfig(o.Config)
	if err != nil {
		return nil, fmt.Errorf("compliance: %w", err)
	}
	return &Scanner{o: o, dyn: dyn, dirty: map[string]bool{}, wake: make(chan struct{}, 1), watches: map[string]*nsWatch{}}, nil
}

const (
	// DefaultInterval is the default time between full passes.
	DefaultInterval = 10 * time.Minute
	// DefaultDebounce is how long changes gather before a pass.
	DefaultDebounce = time.Second
)

// NeedLeaderElection: only the leader writes Reports.
func (s *Scanner) NeedLeaderElection() bool { return true }

// Passes is the number of namespace passes run so far.
func (s *Scanner) Passes() int64 { return s.passes.Load() }

// Writes is the number of Report creates, updates and deletes so far.
func (s *Scanner) Writes() int64 { return s.writes.Load() }

// Start runs the scanner until ctx ends.
func (s *Scanner) Start(ctx context.Context) error {
	log := s.o.Log
	retarget := toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { s.poke("") },
		UpdateFunc: func(any, any) { s.poke("") },
		DeleteFunc: func(any) { s.poke("") },
	}
	ns := &metav1.PartialObjectMetadata{}
	ns.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Namespace"))
	for _, obj := range []client.Object{&sluicev1.Repository{}, ns} {
		inf, err := s.o.Cache.GetInformer(ctx, obj)
		if err != nil {
			return fmt.Errorf("compliance: watch %T: %w", obj, err)
		}
		if _, err := inf.AddEventHandler(retarget); err != nil {
			return fmt.Errorf("compliance: watch %T: %w", obj, err)
		}
	}
	// A Release applying a change changes who applied its objects.
	relInf, err := s.o.Cache.GetInformer(ctx, &sluicev1.Release{})
	if err != nil {
		return fmt.Errorf("compliance: watch Releases: %w", err)
	}
	onRelease := func(obj any) {
		if r, ok := obj.(*sluicev1.Release); ok && r.Status.AppliedTargetNamespace != "" {
			s.poke(r.Status.AppliedTargetNamespace)
		}
	}
	if _, err := relInf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc: onRelease, UpdateFunc: func(_, n any) { onRelease(n) }, DeleteFunc: onRelease,
	}); err != nil {
		return fmt.Errorf("compliance: watch Releases: %w", err)
	}
	if !s.o.Cache.WaitForCacheSync(ctx) {
		return nil
	}
	defer func() {
		for _, w := range s.watches {
			close(w.stop)
		}
	}()

	full := time.NewTimer(0)
	defer full.Stop()
	// retry runs a failed pass again, later each time it fails again
	// (a missing Report CRD, RBAC not granted yet), never in a hot loop.
	var retry <-chan time.Time
	backoff := time.Duration(0)
	for {
		isFull := false
		select {
		case <-ctx.Done():
			return nil
		case <-full.C:
			isFull = true
			full.Reset(s.o.Interval)
		case <-retry:
			isFull = true
		case <-s.wake:
			// Let changes gather, so a burst is one pass.
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(s.o.Debounce):
			}
		}
		retry = nil
		err := s.run(ctx, isFull)
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil:
			backoff = min(max(2*backoff, s.o.Debounce), s.o.Interval, maxBackoff)
			log.Error(err, "Compliance pass failed; retrying", "after", backoff)
			retry = time.After(backoff)
		default:
			backoff = 0
		}
	}
}

// maxBackoff bounds the wait before a failed pass runs again.
const maxBackoff = 5 * time.Minute

// poke marks a namespace dirty ("" : the targets may have changed) and
// wakes the loop.
func (s *Scanner) poke(ns string) {
	s.mu.Lock()
	if ns == "" {
		s.targets = true
	} else {
		s.dirty[ns] = true
	}
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// run is one pass: the target namespaces brought up to date, then every
// dirty namespace (all of them when full) evaluated and its Report written
// if it changed.
func (s *Scanner) run(ctx context.Context, full bool) error {
	s.mu.Lock()
	retarget := s.targets || full
	s.targets = false
	dirty := s.dirty
	s.dirty = map[string]bool{}
	s.mu.Unlock()

	if retarget {
		if err := s.retarget(ctx, dirty); err != nil {
			return err
		}
	}
	names := make([]string, 0, len(s.watches))
	for ns := range s.watches {
		if full || dirty[ns] {
			names = append(names, ns)
		}
	}
	sort.Strings(names)
	var firstErr error
	for _, ns := range names {
		if err := s.scan(ctx, ns, s.watches[ns], full); err != nil {
			s.o.Log.Error(err, "Compliance pass of a namespace failed", "namespace", ns)
			if firstErr == nil {
				firstErr = err
			}
		}
	}
	return firstErr
}

// retarget starts informers in new target namespaces (marking them dirty)
// and stops those of namespaces no longer targeted, deleting their Report.
func (s *Scanner) retarget(ctx context.Context, dirty map[string]bool) error {
	want, err := s.targetNamespaces(ctx)
	if err != nil {
		return err
	}
	for ns, w := range s.watches {
		if want[ns] {
			continue
		}
		close(w.stop)
		delete(s.watches, ns)
		s.o.Metrics.Forget(ns)
		rep := &openreports.Report{ObjectMeta: metav1.ObjectMeta{Name: ReportName, Namespace: ns}}
		if err := s.o.Client.Delete(ctx, rep); err == nil {
			s.writes.Add(1)
		} else if !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete the Report of %s: %w", ns, err)
		}
	}
	for ns := range want {
		if _, ok := s.watches[ns]; ok {
			continue
		}
		w := s.watch(ns)
		// A kind the operator may not list (RBAC) never syncs: give up
		// on the namespace for this pass instead of waiting forever.
		syncCtx, cancel := context.WithTimeout(ctx, syncTimeout)
		synced := toolscache.WaitForCacheSync(syncCtx.Done(), hasSynced(w.informers)...)
		cancel()
		if !synced {
			close(w.stop)
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("the live objects of namespace %s did not load within %s (can the operator list and watch %s there?)", ns, syncTimeout, kindNames(s.o.Kinds))
		}
		s.watches[ns] = w
		dirty[ns] = true
	}
	return nil
}

// syncTimeout bounds the first load of a namespace's live objects.
const syncTimeout = time.Minute

func kindNames(kinds []Kind) string {
	names := make([]string, 0, len(kinds))
	for _, k := range kinds {
		names = append(names, k.GroupVersionResource.GroupResource().String())
	}
	return strings.Join(names, ", ")
}

func hasSynced(infs []toolscache.SharedIndexInformer) []toolscache.InformerSynced {
	out := make([]toolscache.InformerSynced, 0, len(infs))
	for _, i := range infs {
		out = append(out, i.HasSynced)
	}
	return out
}

// targetNamespaces are the existing namespaces some Repository's
// targetNamespaces match.
func (s *Scanner) targetNamespaces(ctx context.Context) (map[string]bool, error) {
	repos := &sluicev1.RepositoryList{}
	if err := s.o.Cache.List(ctx, repos); err != nil {
		return nil, fmt.Errorf("list Repositories: %w", err)
	}
	nss := &metav1.PartialObjectMetadataList{}
	nss.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("NamespaceList"))
	if err := s.o.Cache.List(ctx, nss); err != nil {
		return nil, fmt.Errorf("list Namespaces: %w", err)
	}
	want := map[string]bool{}
	for _, ns := range nss.Items {
		if ns.DeletionTimestamp != nil {
			continue
		}
		for i := range repos.Items {
			// A malformed pattern matches nothing (the Repository's
			// status reports it).
			if ok, _ := impersonate.NamespaceAllowed(repos.Items[i].Spec.TargetNamespaces, ns.Name); ok {
				want[ns.Name] = true
				break
			}
		}
	}
	return want, nil
}

// watch starts the informers of one namespace. They keep each object
// without managedFields, status and the last-applied annotation, which no
// policy reads.
func (s *Scanner) watch(ns string) *nsWatch {
	w := &nsWatch{stop: make(chan struct{}), eval: &Evaluator{Engine: s.o.Engine, Timeout: s.o.Timeout}}
	w.factory = dynamicinformer.NewFilteredDynamicSharedInformerFactory(s.dyn, 0, ns, nil)
	handler := toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { s.poke(ns) },
		UpdateFunc: func(o, n any) { s.poke(ns) },
		DeleteFunc: func(any) { s.poke(ns) },
	}
	for _, k := range s.o.Kinds {
		inf := w.factory.ForResource(k.GroupVersionResource).Informer()
		_ = inf.SetTransform(slim)
		_, _ = inf.AddEventHandler(handler)
		w.informers = append(w.informers, inf)
	}
	w.factory.Start(w.stop)
	return w
}

// slim drops what no policy reads from a cached object; of an object a
// controller owns (a Deployment's Pods and ReplicaSets), which is never
// evaluated, it keeps the identity and owners only.
func slim(obj any) (any, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return obj, nil
	}
	if metav1.GetControllerOfNoCopy(u) != nil {
		meta := map[string]any{}
		for _, k := range []string{"name", "namespace", "uid", "resourceVersion", "ownerReferences"} {
			if v, ok := u.Object["metadata"].(map[string]any)[k]; ok {
				meta[k] = v
			}
		}
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": u.GetAPIVersion(), "kind": u.GetKind(), "metadata": meta,
		}}, nil
	}
	u.SetManagedFields(nil)
	delete(u.Object, "status")
	if a := u.GetAnnotations(); a != nil {
		if _, ok := a[corev1.LastAppliedConfigAnnotation]; ok {
			delete(a, corev1.LastAppliedConfigAnnotation)
			u.SetAnnotations(a)
		}
	}
	return u, nil
}

// objects lists a namespace's live objects from its informers, leaving
// out those a controller owns (a Deployment's ReplicaSets and Pods, a
// CronJob's Jobs): their owner is evaluated and reported.
func (w *nsWatch) objects() []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, inf := range w.informers {
		for _, item := range inf.GetStore().List() {
			u, ok := item.(*unstructured.Unstructured)
			if !ok || metav1.GetControllerOfNoCopy(u) != nil {
				continue
			}
			out = append(out, u)
		}
	}
	sort.Slice(out, func(i, j int) bool { return objectID(out[i]) < objectID(out[j]) })
	return out
}

// scan evaluates one namespace and writes its Report when it changed.
func (s *Scanner) scan(ctx context.Context, ns string, w *nsWatch, full bool) error {
	start := time.Now()
	objs := w.objects()
	before := w.eval.Evaluated
	outcomes, combined := w.eval.Evaluate(ctx, objs, full)
	prov, err := s.provenance(ctx, ns)
	if err != nil {
		return err
	}
	// A full pass reads the Report again (one GET per namespace and
	// interval), so one deleted or edited by hand is written back even
	// when nothing it reports changed.
	if w.last == nil || full {
		w.last = nil
		prev := &openreports.Report{}
		err := s.o.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: ReportName}, prev)
		switch {
		case err == nil:
			w.last = prev
		case !apierrors.IsNotFound(err):
			return fmt.Errorf("read the Report: %w", err)
		}
	}
	rep := Build(Input{
		Namespace: ns, BundleDigest: s.o.BundleDigest, Objects: objs, Outcomes: outcomes, Combined: combined,
		Provenance: prov, Previous: w.last, Now: time.Now(), MaxResults: s.o.MaxResults, MaxBytes: s.o.MaxBytes,
	})
	if err := s.write(ctx, w, rep); err != nil {
		return err
	}
	s.passes.Add(1)
	s.o.Metrics.Pass(ns, full, w.eval.Evaluated-before, time.Since(start), counts(outcomes, combined))
	return nil
}

// write creates or updates the Report, and writes nothing when it equals
// the last one written.
func (s *Scanner) write(ctx context.Context, w *nsWatch, rep *openreports.Report) error {
	if w.last != nil && sameReport(w.last, rep) {
		return nil
	}
	if w.last == nil {
		if err := s.o.Client.Create(ctx, rep); err != nil {
			if apierrors.IsAlreadyExists(err) {
				w.last = nil // read it on the next pass
				s.poke(rep.Namespace)
			}
			return fmt.Errorf("create the Report: %w", err)
		}
	} else {
		rep.ResourceVersion = w.last.ResourceVersion
		rep.UID = w.last.UID
		if err := s.o.Client.Update(ctx, rep); err != nil {
			if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
				w.last = nil // someone else wrote it: read it again
				s.poke(rep.Namespace)
			}
			return fmt.Errorf("update the Report: %w", err)
		}
	}
	s.writes.Add(1)
	s.o.Metrics.Write(rep.Namespace)
	w.last = rep
	return nil
}

// sameReport compares what Sluice writes of a Report.
func sameReport(a, b *openreports.Report) bool {
	for _, k := range []string{AnnotationBundleDigest, AnnotationOmitted} {
		if a.Annotations[k] != b.Annotations[k] {
			return false
		}
	}
	return a.Labels[LabelManagedBy] == b.Labels[LabelManagedBy] &&
		a.Source == b.Source &&
		equality.Semantic.DeepEqual(a.Scope, b.Scope) &&
		equality.Semantic.DeepEqual(a.Configuration, b.Configuration) &&
		a.Summary == b.Summary &&
		equality.Semantic.DeepEqual(a.Results, b.Results)
}

// counts are the results by policy and result over all of a namespace's
// outcomes (not only those the Report keeps).
func counts(outcomes map[types.UID]Outcome, combined Outcome) map[metrics.PolicyResult]int {
	out := map[metrics.PolicyResult]int{}
	add := func(oc Outcome) {
		for _, f := range oc.Findings {
			out[metrics.PolicyResult{Policy: f.Policy, Result: string(severityResult(f.Severity))}]++
		}
		for p := range oc.Errors {
			out[metrics.PolicyResult{Policy: p, Result: string(resultError)}]++
		}
	}
	for _, oc := range outcomes {
		add(oc)
	}
	add(combined)
	return out
}
