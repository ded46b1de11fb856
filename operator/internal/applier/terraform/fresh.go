package terraform

import (
	"archive/zip"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	tf "github.com/sluice-gitops/sluice/infra-validator/pkg/terraform"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
	"github.com/sluice-gitops/sluice/operator/internal/applier"
)

// stateMeta is what identifies one version of a Terraform state.
type stateMeta struct {
	Lineage string `json:"lineage"`
	Serial  uint64 `json:"serial"`
}

// CheckDestroyPlan implements applier.Destroyer for the chain.
func (c *chain) CheckDestroyPlan(ctx context.Context, req applier.Request) error {
	return c.tf.CheckFresh(ctx, req)
}

// CheckFresh fails with StalePlan when the change's plan file was made
// against another version of the release's state than the current one:
// terraform itself would refuse it as stale ("Saved plan is stale": the
// prior state's lineage and serial recorded in the plan file differ from
// the state's). A Delete change checks this before it removes the
// workload, so a stale destroy plan removes nothing at all. A plan or
// state it cannot read is left to terraform's own check at apply.
func (a *Applier) CheckFresh(ctx context.Context, req applier.Request) error {
	cr, rel, repo := req.Change, req.Release, req.Repository
	if cr == nil || rel == nil || repo == nil || repo.Spec.ServiceAccountName == "" {
		return applier.Permanent(sluicev1.ReasonInvalidSpec, "the request has no change, release or repository ServiceAccount")
	}
	sa := repo.Spec.ServiceAccountName
	token, err := a.token(ctx, repo.Namespace, sa)
	if err != nil {
		return err
	}
	asSA := rest.AnonymousClientConfig(a.opts.Config)
	asSA.BearerToken = token
	plan, err := readPlan(ctx, asSA, cr, repo.Namespace+":"+sa)
	if err != nil {
		return err
	}
	prior, ok := planPriorState(plan)
	if !ok {
		return nil
	}
	stack, err := stackOf(cr)
	if err != nil {
		return err
	}
	ws := "default"
	if stack.Workspace != "" {
		ws = stack.Workspace
	}
	cs, err := kubernetes.NewForConfig(asSA)
	if err != nil {
		return err
	}
	s, err := cs.CoreV1().Secrets(cr.Namespace).Get(ctx, StateSecretName(ws, rel.Name), metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return stale("the release's Terraform state is gone")
	case err != nil:
		return fmt.Errorf("read the Terraform state of %s: %w", rel.Name, err)
	}
	current, ok := gzippedStateMeta(s.Data["tfstate"])
	if !ok {
		return nil
	}
	if current.Lineage != prior.Lineage || current.Serial != prior.Serial {
		return stale(fmt.Sprintf("the plan was made against state serial %d, the state is at serial %d", prior.Serial, current.Serial))
	}
	return nil
}

func stale(why string) error {
	return &applier.Failure{Reason: sluicev1.ReasonStalePlan,
		Message: "the Terraform state changed after this destroy plan was made (" + why + "), so nothing was removed; ask for a re-plan (annotate the Release " + sluicev1.AnnotationReplan + ") and approve the new change"}
}

// planPriorState reads the prior state's lineage and serial from a plan
// file (a zip holding the state snapshot as "tfstate").
func planPriorState(plan []byte) (stateMeta, bool) {
	zr, err := zip.NewReader(bytes.NewReader(plan), int64(len(plan)))
	if err != nil {
		return stateMeta{}, false
	}
	for _, f := range zr.File {
		if f.Name != "tfstate" {
			continue
		}
		rc, err := f.Open()
		if err != nil {
			return stateMeta{}, false
		}
		defer rc.Close()
		var m stateMeta
		if err := json.NewDecoder(io.LimitReader(rc, 256<<20)).Decode(&m); err != nil || m.Lineage == "" {
			return stateMeta{}, false
		}
		return m, true
	}
	return stateMeta{}, false
}

// gzippedStateMeta reads lineage and serial from the kubernetes backend's
// gzipped state.
func gzippedStateMeta(b []byte) (stateMeta, bool) {
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return stateMeta{}, false
	}
	var m stateMeta
	if err := json.NewDecoder(io.LimitReader(zr, 256<<20)).Decode(&m); err != nil || m.Lineage == "" {
		return stateMeta{}, false
	}
	return m, true
}

// StateVersion identifies one version of a Terraform state.
type StateVersion struct {
	Lineage string
	Serial  uint64
}

// PlanPriorState is the version of the state a plan file was made
// against; false when the file does not say.
func PlanPriorState(plan []byte) (StateVersion, bool) {
	m, ok := planPriorState(plan)
	return StateVersion{Lineage: m.Lineage, Serial: m.Serial}, ok
}

// StoredStateVersion is the version of a state as the state Secret
// stores it (gzipped JSON under "tfstate"); false when it cannot be read.
func StoredStateVersion(gz []byte) (StateVersion, bool) {
	m, ok := gzippedStateMeta(gz)
	return StateVersion{Lineage: m.Lineage, Serial: m.Serial}, ok
}

// StoredState reads the state a state Secret stores (gzipped JSON under
// "tfstate") into its lineage, serial and resources digest, without
// terraform: what audit compares with the state an apply recorded.
func StoredState(gz []byte) (tf.StateRecord, error) {
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		return tf.StateRecord{}, fmt.Errorf("the stored state is not gzipped: %w", err)
	}
	raw, err := io.ReadAll(io.LimitReader(zr, 256<<20))
	if err != nil {
		return tf.StateRecord{}, fmt.Errorf("the stored state: %w", err)
	}
	return tf.ReadStateRecord(raw)
}
