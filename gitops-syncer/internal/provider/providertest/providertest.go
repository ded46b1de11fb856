// Package providertest reads the real webhook payload examples of
// gitops-syncer/testdata/webhooks (octokit's, GitLab's and Gitea's) and
// edits them for the tests of every package.
package providertest

import (
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

// Dir is the folder of the payload examples.
func Dir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..", "testdata", "webhooks")
}

// Payload reads the example at path below Dir, e.g.
// "github/push.payload.json"; an error fails tb.
func Payload(tb testing.TB, path string) []byte {
	tb.Helper()
	b, err := os.ReadFile(filepath.Join(Dir(), filepath.FromSlash(path)))
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// Edit decodes a JSON payload, lets fn change it and encodes it again; an
// error fails tb.
func Edit(tb testing.TB, body []byte, fn func(m map[string]any)) []byte {
	tb.Helper()
	var m map[string]any
	if err := json.Unmarshal(body, &m); err != nil {
		tb.Fatal(err)
	}
	fn(m)
	out, err := json.Marshal(m)
	if err != nil {
		tb.Fatal(err)
	}
	return out
}
