package drift

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

func obj(t *testing.T, s string) map[string]any {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal([]byte(s), &m))
	return m
}

func TestChangedFields(t *testing.T) {
	const applied = `{"metadata":{"name":"web","resourceVersion":"1"},"spec":{"replicas":1,"template":{"spec":{"containers":[{"name":"web","image":"nginx:1"}]}}},"status":{"replicas":1}}`
	for _, tt := range []struct {
		name   string
		live   string
		ignore []string
		want   []string
	}{
		{"the same object is no drift, whatever the server set",
			`{"metadata":{"name":"web","resourceVersion":"9","generation":4,"managedFields":[]},"spec":{"replicas":1,"template":{"spec":{"containers":[{"name":"web","image":"nginx:1"}]}}},"status":{"replicas":3}}`,
			nil, nil},
		{"an edited image is drift, named by container",
			`{"metadata":{"name":"web"},"spec":{"replicas":1,"template":{"spec":{"containers":[{"name":"web","image":"evil:1"}]}}}}`,
			nil, []string{"spec.template.spec.containers[name=web].image"}},
		{"replicas owned by an ignored manager are no drift",
			`{"metadata":{"name":"web","managedFields":[{"manager":"kube-controller-manager","operation":"Update","subresource":"scale","fieldsV1":{"f:spec":{"f:replicas":{}}}}]},"spec":{"replicas":5,"template":{"spec":{"containers":[{"name":"web","image":"nginx:1"}]}}}}`,
			[]string{"kube-controller-manager"}, nil},
		{"replicas set by anyone else are drift",
			`{"metadata":{"name":"web","managedFields":[{"manager":"kubectl","operation":"Update","subresource":"scale","fieldsV1":{"f:spec":{"f:replicas":{}}}}]},"spec":{"replicas":5,"template":{"spec":{"containers":[{"name":"web","image":"nginx:1"}]}}}}`,
			[]string{"kube-controller-manager"}, []string{"spec.replicas"}},
		{"an ignored manager's keyed list entry is masked, the rest compared",
			`{"metadata":{"name":"web","managedFields":[{"manager":"mesh","fieldsV1":{"f:spec":{"f:template":{"f:spec":{"f:containers":{"k:{\"name\":\"sidecar\"}":{}}}}}}}]},"spec":{"replicas":1,"template":{"spec":{"containers":[{"name":"web","image":"nginx:1"},{"name":"sidecar","image":"proxy"}]}}}}`,
			[]string{"mesh"}, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			want := obj(t, applied)
			// The dry-run result keeps what other managers added.
			if tt.name == "an ignored manager's keyed list entry is masked, the rest compared" {
				want = obj(t, tt.live)
				want["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)["containers"].([]any)[1].(map[string]any)["image"] = "proxy:2"
			}
			got, more := ChangedFields(want, obj(t, tt.live), tt.ignore)
			require.Equal(t, tt.want, got)
			require.Zero(t, more)
		})
	}
}

func FuzzChangedFields(f *testing.F) {
	f.Add(`{"spec":{"a":[1,2]}}`, `{"spec":{"a":[1]},"metadata":{"managedFields":[{"manager":"x","fieldsV1":{"f:spec":{"f:a":{"v:1":{}}}}}]}}`)
	f.Fuzz(func(t *testing.T, a, b string) {
		var x, y map[string]any
		if json.Unmarshal([]byte(a), &x) != nil || json.Unmarshal([]byte(b), &y) != nil || x == nil || y == nil {
			return
		}
		got, _ := ChangedFields(x, y, []string{"x"})
		require.LessOrEqual(t, len(got), MaxFields)
		if same, _ := ChangedFields(y, y, nil); len(same) != 0 {
			t.Fatalf("an object differs from itself: %v", same)
		}
	})
}

func TestSubset(t *testing.T) {
	for _, tt := range []struct {
		name           string
		approved, live string
		want           bool
	}{
		{"live adds defaults and server fields", `{"spec":{"containers":[{"name":"a","image":"x"}]}}`, `{"spec":{"containers":[{"name":"a","image":"x","imagePullPolicy":"Always"}]},"status":{}}`, true},
		{"a changed value", `{"data":{"k":"v"}}`, `{"data":{"k":"w"}}`, false},
		{"a missing field", `{"data":{"k":"v"}}`, `{"data":{}}`, false},
		{"a list of another length", `{"a":[1]}`, `{"a":[1,2]}`, false},
		{"numbers by value", `{"a":1}`, `{"a":1.0}`, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, Subset(obj(t, tt.approved), obj(t, tt.live)))
		})
	}
}
