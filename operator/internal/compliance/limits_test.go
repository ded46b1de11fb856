package compliance_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	openreports "github.com/openreports/reports-api/apis/openreports.io/v1alpha1"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sluice-gitops/sluice/infra-validator/pkg/policy"
	"github.com/sluice-gitops/sluice/operator/internal/compliance"
)

// objectSizeLimit is etcd's default request limit, which bounds one object.
const objectSizeLimit = 1536 * 1024

// TestScanner_largeNamespaceStaysBounded: 5,000 objects of which 2,000
// break a policy. The Report keeps at most its limit of results, stays
// under the object size limit, and its summary counts every result
// exactly; the process's heap stays bounded.
func TestScanner_largeNamespaceStaysBounded(t *testing.T) {
	f := newFixture(t, compliance.Options{})
	ns := f.target("big")
	const total, failing = 5000, 2000
	start := time.Now()
	createConfigMaps(t, f, ns, total, failing)
	t.Logf("created %d ConfigMaps in %s", total, time.Since(start).Round(time.Millisecond))

	rep := f.report(ns, func(r *openreports.Report) bool {
		return r.Summary.Pass+r.Summary.Fail == total
	}, fmt.Sprintf("all %d objects", total))
	require.Equal(t, failing, rep.Summary.Fail, "the summary counts every failure, kept or not")
	require.Equal(t, total-failing, rep.Summary.Pass)
	require.Zero(t, rep.Summary.Error)
	require.LessOrEqual(t, len(rep.Results), compliance.DefaultMaxResults)
	require.Equal(t, compliance.DefaultMaxResults, rep.Configuration.Limits.MaxResults)
	require.Equal(t, strconv.Itoa(failing-len(rep.Results)), rep.Annotations[compliance.AnnotationOmitted])
	raw, err := json.Marshal(rep)
	require.NoError(t, err)
	require.Less(t, len(raw), objectSizeLimit)

	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	t.Logf("Report %d bytes, %d results; test process heap in use after GC: %.1f MiB", len(raw), len(rep.Results), float64(ms.HeapInuse)/(1<<20))
	require.Less(t, ms.HeapInuse, uint64(512<<20), "the heap grew past 512 MiB for 5,000 small objects")
}

// createConfigMaps creates n ConfigMaps in ns, the first failing of them
// holding a plaintext password, in parallel.
func createConfigMaps(t *testing.T, f *fixture, ns string, n, failing int) {
	t.Helper()
	ctx := t.Context()
	work := make(chan int)
	errs := make(chan error, 8)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				cm := &corev1.ConfigMap{
					ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%05d", i), Namespace: ns},
					Data:       map[string]string{"LOG_LEVEL": "info"},
				}
				if i < failing {
					cm.Data["DB_PASSWORD"] = fmt.Sprintf("plaintext-%08d", i)
				}
				if err := f.env.Client.Create(ctx, cm); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	for i := range n {
		select {
		case work <- i:
		case err := <-errs:
			close(work)
			wg.Wait()
			t.Fatal(err)
		}
	}
	close(work)
	wg.Wait()
	select {
	case err := <-errs:
		t.Fatal(err)
	default:
	}
}

// brokenPolicies are a policy set with a rule that fails on every
// ConfigMap (a result without "msg" is an error, as in conftest), one that
// runs for minutes on objects labelled slow=yes, and one whose message
// echoes secret-named values.
const brokenPolicies = `package main

deny_broken contains {"no": "msg"} if input.kind == "ConfigMap"

deny_slow contains msg if {
	input.metadata.labels.slow == "yes"
	found := [1 |
		some i in numbers.range(1, 20000)
		some j in numbers.range(1, 20000)
		i == j + 100000
	]
	count(found) == 0
	msg := "never reached"
}

deny_echo contains msg if {
	input.kind == "ConfigMap"
	msg := sprintf("token %s, password %s", [input.data.api_token, input.data.DB_PASSWORD])
}
`

// TestScanner_aPolicyThatErrorsOrTimesOutIsAnErrorResult: a rule that
// fails on an object, and a rule that takes longer than the evaluation
// timeout, are each an error result for that policy and object; the other
// policies' results are still there, and no message carries a secret value
// a rule echoed.
func TestScanner_aPolicyThatErrorsOrTimesOutIsAnErrorResult(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "broken.rego"), []byte(brokenPolicies), 0o600))
	opts := policy.Options{PolicyDirs: []string{dir}}
	engine, digest, err := compliance.LoadBundle(t.Context(), opts)
	require.NoError(t, err)
	f := newFixture(t, compliance.Options{Engine: engine, BundleDigest: digest, Timeout: 500 * time.Millisecond})
	ctx := t.Context()
	ns := f.target("broken")

	const token = "tok-9f8e7d6c5b4a3210"
	require.NoError(t, f.env.Client.Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "settings", Namespace: ns},
		Data:       map[string]string{"api_token": token, "DB_PASSWORD": "hunter2-hunter2"},
	}))
	slow := deployment(ns, "slow", "nginx:latest")
	slow.Labels = map[string]string{"slow": "yes"}
	require.NoError(t, f.env.Client.Create(ctx, slow))

	rep := f.report(ns, func(r *openreports.Report) bool {
		return len(results(r, "ConfigMap", "settings", "main/deny_broken")) > 0 && len(results(r, "Deployment", "slow", "main/deny_slow")) > 0
	}, "an error result for each broken policy")
	t.Log(describe(rep))

	broken := results(rep, "ConfigMap", "settings", "main/deny_broken")[0]
	require.Equal(t, openreports.Result("error"), broken.Result)
	require.Contains(t, broken.Description, "msg")
	require.Equal(t, digest, broken.Properties[compliance.PropertyBundleDigest])
	echo := results(rep, "ConfigMap", "settings", "main/deny_echo")
	require.Len(t, echo, 1)
	require.Equal(t, "token "+policy.Redacted+", password "+policy.Redacted, echo[0].Description)
	timedOut := results(rep, "Deployment", "slow", "main/deny_slow")[0]
	require.Equal(t, openreports.Result("error"), timedOut.Result)
	require.Contains(t, timedOut.Description, "timed out")

	// The other policies still ran on both objects.
	require.Len(t, results(rep, "ConfigMap", "settings", secretsDeny), 2, "the plaintext secrets of the ConfigMap")
	require.NotEmpty(t, results(rep, "Deployment", "slow", imagesDeny), "the image of the slow Deployment")
	require.Equal(t, 2, rep.Summary.Error)

	raw, err := json.Marshal(rep)
	require.NoError(t, err)
	for _, secret := range []string{token, "hunter2-hunter2"} {
		require.NotContains(t, string(raw), secret)
	}
}

var _ = context.Background
