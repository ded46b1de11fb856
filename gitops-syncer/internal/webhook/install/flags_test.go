package install_test

import (
	"flag"
	"io"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/types"

	"github.com/sluice-gitops/sluice/gitops-syncer/internal/provider"
	"github.com/sluice-gitops/sluice/gitops-syncer/internal/webhook/install"
)

func TestBindFlags_parsesTheWebhookAndStatusFlags(t *testing.T) {
	var o install.Options
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	o.BindFlags(fs)
	require.NoError(t, fs.Parse(nil))
	assert.Equal(t, ":9292", o.Addr)
	assert.True(t, o.Enabled())

	require.NoError(t, fs.Parse([]string{"--webhook-bind-address=0", "--status-provider=gitea", "--status-base-url=https://gitea.example.com", "--status-token-secret=sluice/gitea-token"}))
	assert.False(t, o.Enabled())
	assert.Equal(t, provider.Gitea, o.StatusProvider)
	assert.Equal(t, types.NamespacedName{Namespace: "sluice", Name: "gitea-token"}, o.StatusTokenSecret)

	assert.Error(t, fs.Parse([]string{"--status-provider=bitbucket"}))
	assert.Error(t, fs.Parse([]string{"--status-token-secret=no-namespace"}))

	require.NoError(t, fs.Parse([]string{"--registry-webhook-secret=sluice/registry-token"}))
	assert.Equal(t, types.NamespacedName{Namespace: "sluice", Name: "registry-token"}, o.RegistrySecret)
	assert.Error(t, fs.Parse([]string{"--registry-webhook-secret=registry-token"}))
}
