package sources

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path"

	"github.com/Masterminds/semver/v3"
	"helm.sh/helm/v3/pkg/chart"

	"github.com/sluice-gitops/sluice/infra-validator/pkg/chartrepo"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/manifest"
)

// RemoteChartDir is the folder of a release's artifact holding the chart
// the syncer fetched from a chart repository: resolved.json (repository,
// name, exact version, digest), chart.tgz and, for OCI, oci-manifest.json.
// The artifact is bound to contentDigest and so to approvalDigest: the
// validator renders and the Helm applier installs these very bytes, each
// after checking them against the digest (RemoteChart). It is not a path
// a repository may hold (the syncer refuses one that does).
const RemoteChartDir = ".sluice/chart"

// Names of the files in RemoteChartDir.
const (
	RemoteResolvedFile    = "resolved.json"
	RemoteChartFile       = "chart.tgz"
	RemoteOCIManifestFile = "oci-manifest.json"
)

// ErrRemoteChartMissing: the content holds no fetched chart for a service
// whose chart comes from a chart repository.
var ErrRemoteChartMissing = errors.New("the chart from the chart repository was not fetched into the content")

// RemoteChartFiles are the files of RemoteChartDir for a fetched chart,
// keyed by their path in the artifact.
func RemoteChartFiles(c *chartrepo.Chart) (map[string][]byte, error) {
	resolved, err := json.Marshal(c.Resolved)
	if err != nil {
		return nil, err
	}
	files := map[string][]byte{
		path.Join(RemoteChartDir, RemoteResolvedFile): append(resolved, '\n'),
		path.Join(RemoteChartDir, RemoteChartFile):    c.TarGz,
	}
	if c.OCIManifest != nil {
		files[path.Join(RemoteChartDir, RemoteOCIManifestFile)] = c.OCIManifest
	}
	return files, nil
}

// RemoteChart loads the fetched chart of svc's environment env
// (Service.ChartOf) from the content at root: resolved.json must name its repository and chart at a version in its
// range, and the bytes must match the digest (chartrepo.Verify); the
// archive is checked (no "../", no links, bounded) before Helm loads it.
func RemoteChart(root string, svc *manifest.Service, env string) (*chart.Chart, *chartrepo.Resolved, error) {
	want := svc.ChartOf(env)
	ch, r, err := loadFetched(root, RemoteChartDir, want)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, fmt.Errorf("service %s chart %s from %s: %w", svc.Name, want.Name, want.Repo, ErrRemoteChartMissing)
	}
	return ch, r, err
}

// CheckResolved checks that r is a resolution of the manifest's chart: the
// same repository and name, at the exact version or one in its range.
func CheckResolved(c manifest.Chart, r *chartrepo.Resolved) error {
	if r.Repo != c.Repo || r.Name != c.Name {
		return fmt.Errorf("the fetched chart %s from %s is not the manifest's %s from %s", r.Name, r.Repo, c.Name, c.Repo)
	}
	if r.Version == c.Version {
		return nil
	}
	v, err := semver.StrictNewVersion(r.Version)
	if err != nil {
		return fmt.Errorf("the fetched chart's version %q is not a semantic version", r.Version)
	}
	cons, err := semver.NewConstraint(c.Version)
	if err != nil || !cons.Check(v) {
		return fmt.Errorf("the fetched chart's version %s is not in the manifest's %q", r.Version, c.Version)
	}
	return nil
}
