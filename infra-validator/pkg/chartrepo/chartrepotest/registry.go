package chartrepotest

import (
	"io"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	ggcrregistry "github.com/google/go-containerregistry/pkg/registry"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/registry"
)

// OCIRegistry starts an in-memory OCI registry over TLS (go-containerregistry's,
// stopped with the test) and returns it with Helm's registry client for it,
// which pushes charts as `helm push` does.
func OCIRegistry(t testing.TB) (*httptest.Server, *registry.Client) {
	t.Helper()
	srv := httptest.NewTLSServer(ggcrregistry.New(ggcrregistry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	c, err := registry.NewClient(registry.ClientOptHTTPClient(srv.Client()),
		registry.ClientOptCredentialsFile(filepath.Join(t.TempDir(), "config.json")))
	if err != nil {
		t.Fatal(err)
	}
	return srv, c
}

// MarkedChart packages chart "web" at version as `helm package` does; its
// one template is a ConfigMap "<release>-remote" whose data says marker and
// .Values.greeting (default "default"), so a test can tell which bytes
// were installed.
func MarkedChart(t testing.TB, version, marker string) []byte {
	t.Helper()
	ch := &chart.Chart{
		Metadata: &chart.Metadata{APIVersion: chart.APIVersionV2, Name: "web", Version: version, Type: "application"},
		Values:   map[string]any{"greeting": "default"},
		Templates: []*chart.File{{Name: "templates/cm.yaml", Data: []byte(
			"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}-remote\ndata:\n  marker: " + marker + "\n  greeting: {{ .Values.greeting | quote }}\n")}},
	}
	p, err := chartutil.Save(ch, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
