package helm

import (
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// RESTClientGetter hands Helm an already impersonated rest.Config instead
// of a kubeconfig file, pinned to one namespace. Discovery and the REST
// mapper are cached for the getter's life (one apply).
type RESTClientGetter struct {
	config    *rest.Config
	namespace string
	discovery discovery.CachedDiscoveryInterface
	mapper    meta.RESTMapper
}

var _ genericclioptions.RESTClientGetter = (*RESTClientGetter)(nil)

// NewRESTClientGetter returns Helm's connection through cfg (copied, with
// a request rate that does not throttle a chart), pinned to namespace.
func NewRESTClientGetter(cfg *rest.Config, namespace string) (*RESTClientGetter, error) {
	cfg = rest.CopyConfig(cfg)
	if cfg.QPS == 0 {
		// client-go's default of 5 requests a second throttles any chart
		// with more than a handful of objects.
		cfg.QPS, cfg.Burst = 50, 100
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, err
	}
	cached := memory.NewMemCacheClient(dc)
	return &RESTClientGetter{
		config:    cfg,
		namespace: namespace,
		discovery: cached,
		mapper:    restmapper.NewDeferredDiscoveryRESTMapper(cached),
	}, nil
}

func (g *RESTClientGetter) ToRESTConfig() (*rest.Config, error) {
	return rest.CopyConfig(g.config), nil
}

func (g *RESTClientGetter) ToDiscoveryClient() (discovery.CachedDiscoveryInterface, error) {
	return g.discovery, nil
}

func (g *RESTClientGetter) ToRESTMapper() (meta.RESTMapper, error) { return g.mapper, nil }

// ToRawKubeConfigLoader only supplies the namespace; the connection comes
// from ToRESTConfig.
func (g *RESTClientGetter) ToRawKubeConfigLoader() clientcmd.ClientConfig {
	return clientcmd.NewDefaultClientConfig(*clientcmdapi.NewConfig(), &clientcmd.ConfigOverrides{
		Context: clientcmdapi.Context{Namespace: g.namespace},
	})
}
