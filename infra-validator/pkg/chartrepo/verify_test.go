package chartrepo_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"helm.sh/helm/v3/pkg/registry"

	"github.com/sluice-gitops/sluice/infra-validator/pkg/chartrepo"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/chartrepo/chartrepotest"
)

// pushSigned pushes a chart with its provenance file as `helm push` does
// when the .prov lies beside the archive (a provenance layer).
func (o *ociRegistry) pushSigned(t *testing.T, name, version string, tgz, prov []byte) {
	t.Helper()
	c, err := registry.NewClient(registry.ClientOptHTTPClient(o.srv.Client()),
		registry.ClientOptCredentialsFile(filepath.Join(t.TempDir(), "config.json")))
	require.NoError(t, err)
	_, err = c.Push(tgz, o.host()+"/charts/"+name+":"+version, registry.PushOptProvData(prov), registry.PushOptCreationTime("2026-01-01T00:00:00Z"))
	require.NoError(t, err)
}

func TestVerifySignature_provenanceByAKeyOfTheKeyring(t *testing.T) {
	ctx := context.Background()
	alice, mallory := chartrepotest.NewPGPKey(t, "alice"), chartrepotest.NewPGPKey(t, "mallory")
	h := newHelmRepo(t, "", "")
	web := packChart(t, "web", "1.0.0", "signed")
	h.add(t, "web", "1.0.0", web)
	require.NoError(t, os.WriteFile(filepath.Join(h.dir, "web-1.0.0.tgz.prov"), alice.Provenance(t, "web-1.0.0.tgz", web), 0o644))
	h.add(t, "plain", "1.0.0", packChart(t, "plain", "1.0.0", "unsigned"))
	// A .prov alice really signed, but for other bytes than the archive.
	swapped := packChart(t, "swapped", "1.0.0", "served")
	h.add(t, "swapped", "1.0.0", swapped)
	require.NoError(t, os.WriteFile(filepath.Join(h.dir, "swapped-1.0.0.tgz.prov"),
		alice.Provenance(t, "swapped-1.0.0.tgz", packChart(t, "swapped", "1.0.0", "signed")), 0o644))

	pull := func(name string) *chartrepo.Chart {
		c, err := chartrepo.Pull(ctx, chartrepo.Ref{Repo: h.srv.URL, Name: name, Version: "1.0.0"}, h.opts())
		require.NoError(t, err)
		return c
	}
	byAlice := &chartrepo.Verification{Provider: chartrepo.Provenance, Keyring: alice.Keyring}
	require.NoError(t, chartrepo.VerifySignature(ctx, pull("web"), byAlice, h.opts()))
	require.NoError(t, chartrepo.VerifySignature(ctx, pull("web"), &chartrepo.Verification{Provider: chartrepo.Provenance, Keyring: alice.Armored}, h.opts()),
		"an armored keyring")

	for _, tt := range []struct {
		name, chart, want string
		v                 *chartrepo.Verification
	}{
		{"a key not in the keyring", "web", "provenance", &chartrepo.Verification{Provider: chartrepo.Provenance, Keyring: mallory.Keyring}},
		{"no provenance file", "plain", "serves no provenance file (plain-1.0.0.tgz.prov)", byAlice},
		{"a provenance file of other bytes", "swapped", "sha256 sum does not match", byAlice},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := chartrepo.VerifySignature(ctx, pull(tt.chart), tt.v, h.opts())
			require.ErrorIs(t, err, chartrepo.ErrSignature)
			require.ErrorContains(t, err, tt.want)
			require.NotContains(t, err.Error(), os.TempDir(), "no private path")
		})
	}

	err := chartrepo.VerifySignature(ctx, pull("web"), &chartrepo.Verification{Provider: chartrepo.Provenance, Keyring: []byte("not a keyring")}, h.opts())
	require.ErrorContains(t, err, "keyring: not an OpenPGP keyring")
	require.NotErrorIs(t, err, chartrepo.ErrSignature, "a bad keyring is the Repository's problem, not the chart's")

	t.Run("in an OCI registry, the provenance layer", func(t *testing.T) {
		o := newOCIRegistry(t, "", "")
		o.pushSigned(t, "web", "1.0.0", web, alice.Provenance(t, "web-1.0.0.tgz", web))
		o.push(t, "plain", "1.0.0", packChart(t, "plain", "1.0.0", "unsigned"))
		c, err := chartrepo.Pull(ctx, chartrepo.Ref{Repo: o.repoURL(), Name: "web", Version: "1.0.0"}, o.opts())
		require.NoError(t, err)
		require.NoError(t, chartrepo.VerifySignature(ctx, c, byAlice, o.opts()))
		require.ErrorIs(t, chartrepo.VerifySignature(ctx, c, &chartrepo.Verification{Provider: chartrepo.Provenance, Keyring: mallory.Keyring}, o.opts()), chartrepo.ErrSignature)
		c, err = chartrepo.Pull(ctx, chartrepo.Ref{Repo: o.repoURL(), Name: "plain", Version: "1.0.0"}, o.opts())
		require.NoError(t, err)
		err = chartrepo.VerifySignature(ctx, c, byAlice, o.opts())
		require.ErrorIs(t, err, chartrepo.ErrSignature)
		require.ErrorContains(t, err, "0 provenance layers")
	})
}

func TestVerifySignature_cosignOfTheChartsManifestDigest(t *testing.T) {
	ctx := context.Background()
	alice, mallory := chartrepotest.NewCosignKey(t), chartrepotest.NewCosignKey(t)
	o := newOCIRegistry(t, "", "")
	for _, n := range []string{"web", "plain", "forged", "copied"} {
		o.push(t, n, "1.0.0", packChart(t, n, "1.0.0", n))
	}
	pull := func(name string) *chartrepo.Chart {
		c, err := chartrepo.Pull(ctx, chartrepo.Ref{Repo: o.repoURL(), Name: name, Version: "1.0.0"}, o.opts())
		require.NoError(t, err)
		return c
	}
	ref := func(name string) string { return o.host() + "/charts/" + name }
	web := pull("web")
	alice.Sign(t, o.srv.Client(), ref("web"), web.Digest, web.Digest)
	forged := pull("forged")
	mallory.Sign(t, o.srv.Client(), ref("forged"), forged.Digest, forged.Digest)
	// alice's signature of web, stored as the signature of copied.
	copied := pull("copied")
	alice.Sign(t, o.srv.Client(), ref("copied"), web.Digest, copied.Digest)

	byAlice := &chartrepo.Verification{Provider: chartrepo.Cosign, PublicKeys: [][]byte{alice.PublicPEM}}
	require.NoError(t, chartrepo.VerifySignature(ctx, web, byAlice, o.opts()))
	require.NoError(t, chartrepo.VerifySignature(ctx, web, &chartrepo.Verification{Provider: chartrepo.Cosign, PublicKeys: [][]byte{mallory.PublicPEM, alice.PublicPEM}}, o.opts()),
		"one of several keys")

	for _, tt := range []struct{ name, chart, want string }{
		{"no signature", "plain", "no cosign signature (sha256-"},
		{"a signature by another key", "forged", "not made by any of the public keys"},
		{"another chart's signature", "copied", "it signs " + web.Digest + ", not " + copied.Digest},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := chartrepo.VerifySignature(ctx, pull(tt.chart), byAlice, o.opts())
			require.ErrorIs(t, err, chartrepo.ErrSignature)
			require.ErrorContains(t, err, tt.want)
		})
	}

	err := chartrepo.VerifySignature(ctx, web, &chartrepo.Verification{Provider: chartrepo.Cosign, PublicKeys: [][]byte{[]byte("not a key")}}, o.opts())
	require.ErrorContains(t, err, "cosign: public key 1")
	require.NotErrorIs(t, err, chartrepo.ErrSignature)

	h := newHelmRepo(t, "", "")
	h.add(t, "web", "1.0.0", packChart(t, "web", "1.0.0", "x"))
	c, err := chartrepo.Pull(ctx, chartrepo.Ref{Repo: h.srv.URL, Name: "web", Version: "1.0.0"}, h.opts())
	require.NoError(t, err)
	require.ErrorContains(t, chartrepo.VerifySignature(ctx, c, byAlice, h.opts()), "oci:// registries only")
}
