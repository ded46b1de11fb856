package controller

import (
	"context"
	"slices"
	"strings"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
)

// kindsCache is the manager's cache, noting every kind it was asked to
// read or watch: each such kind is an informer (a watch and a copy of
// every object of the kind in memory). The operator must cache only what
// it owns; CachedKinds lets a test check that it does.
type kindsCache struct {
	cache.Cache
	scheme *runtime.Scheme

	// selectors are the label selectors of the kinds configured with one.
	selectors map[schema.GroupVersionKind]string

	mu    sync.Mutex
	kinds map[CachedKind]bool
}

// CachedKind is a kind the cache holds an informer for, whether the
// informer keeps the objects' metadata only, and the label selector that
// limits it to some objects ("" for all).
type CachedKind struct {
	schema.GroupVersionKind
	MetadataOnly bool
	Selector     string
}

// String names the kind, "(metadata)" after a metadata-only one and the
// selector after a label-selected one.
func (k CachedKind) String() string {
	s := k.GroupVersionKind.String()
	if k.MetadataOnly {
		s += " (metadata)"
	}
	if k.Selector != "" {
		s += " (selected by " + k.Selector + ")"
	}
	return s
}

// newKindsCache is a cache.NewCacheFunc building the cache as
// controller-runtime does and noting the kinds it serves.
func newKindsCache(cfg *rest.Config, opts cache.Options) (cache.Cache, error) {
	c, err := cache.New(cfg, opts)
	if err != nil {
		return nil, err
	}
	k := &kindsCache{Cache: c, scheme: opts.Scheme, kinds: map[CachedKind]bool{}, selectors: map[schema.GroupVersionKind]string{}}
	for obj, by := range opts.ByObject {
		gvk, err := apiutil.GVKForObject(obj, opts.Scheme)
		if err == nil && by.Label != nil && !by.Label.Empty() {
			k.selectors[gvk] = by.Label.String()
		}
	}
	return k, nil
}

// note records the kind of obj (a typed object or list, an unstructured
// one, or metadata only, which carries its kind).
func (k *kindsCache) note(obj runtime.Object) {
	gvk, err := apiutil.GVKForObject(obj, k.scheme)
	if err != nil {
		return // the cache itself reports it
	}
	k.noteKind(gvk, isMetadata(obj))
}

// isMetadata tells a metadata-only object or list.
func isMetadata(obj runtime.Object) bool {
	switch obj.(type) {
	case *metav1.PartialObjectMetadata, *metav1.PartialObjectMetadataList:
		return true
	}
	return false
}

func (k *kindsCache) noteKind(gvk schema.GroupVersionKind, metadata bool) {
	// A list names the kind of its items.
	gvk.Kind = strings.TrimSuffix(gvk.Kind, "List")
	k.mu.Lock()
	defer k.mu.Unlock()
	k.kinds[CachedKind{GroupVersionKind: gvk, MetadataOnly: metadata, Selector: k.selectors[gvk]}] = true
}

// Get implements client.Reader.
func (k *kindsCache) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	k.note(obj)
	return k.Cache.Get(ctx, key, obj, opts...)
}

// List implements client.Reader.
func (k *kindsCache) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	k.note(list)
	return k.Cache.List(ctx, list, opts...)
}

// GetInformer implements cache.Informers.
func (k *kindsCache) GetInformer(ctx context.Context, obj client.Object, opts ...cache.InformerGetOption) (cache.Informer, error) {
	k.note(obj)
	return k.Cache.GetInformer(ctx, obj, opts...)
}

// GetInformerForKind implements cache.Informers.
func (k *kindsCache) GetInformerForKind(ctx context.Context, gvk schema.GroupVersionKind, opts ...cache.InformerGetOption) (cache.Informer, error) {
	k.noteKind(gvk, false)
	return k.Cache.GetInformerForKind(ctx, gvk, opts...)
}

// CachedKinds returns the kinds the manager's cache was asked to read or
// watch so far, sorted; nil when the manager was not built by NewManager.
func CachedKinds(mgr ctrl.Manager) []CachedKind {
	k, ok := mgr.GetCache().(*kindsCache)
	if !ok {
		return nil
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	out := make([]CachedKind, 0, len(k.kinds))
	for ck := range k.kinds {
		out = append(out, ck)
	}
	slices.SortFunc(out, func(a, b CachedKind) int {
		return strings.Compare(a.String(), b.String())
	})
	return out
}
