// Package scheme builds the runtime scheme of the Sluice binaries: the
// client-go kinds and the Sluice kinds.
package scheme

import (
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// New returns a scheme with the client-go and Sluice kinds, plus those the
// extra functions add (an apiextensions AddToScheme, for instance).
func New(extra ...func(*runtime.Scheme) error) (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	for _, add := range append([]func(*runtime.Scheme) error{clientgoscheme.AddToScheme, sluicev1.AddToScheme}, extra...) {
		if err := add(s); err != nil {
			return nil, err
		}
	}
	return s, nil
}
