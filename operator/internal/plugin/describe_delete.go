package plugin

import (
	"fmt"
	"strings"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// maxListedObjects bounds the objects describe lists for a Delete change.
const maxListedObjects = 20

// deletionFields are the describe lines of a Delete change: what it
// removes and how far it got.
func deletionFields(cr *sluicev1.ChangeRequest) [][2]string {
	d := cr.Spec.Deletion
	if !cr.IsDelete() || d == nil {
		return nil
	}
	var out [][2]string
	if d.AppliedChange != "" {
		out = append(out, [2]string{"Removes applied change", fmt.Sprintf("%s (revision %s)", d.AppliedChange, sluicev1.ShortSHA(d.AppliedRevision))})
	}
	n := len(d.Objects) + int(d.ObjectsTruncated)
	objs := make([]string, 0, min(len(d.Objects), maxListedObjects))
	for i, o := range d.Objects {
		if i == maxListedObjects {
			break
		}
		objs = append(objs, o.Kind+" "+strings.TrimPrefix(o.Namespace+"/"+o.Name, "/"))
	}
	if n > len(objs) {
		objs = append(objs, fmt.Sprintf("… %d more", n-len(objs)))
	}
	out = append(out, [2]string{"Removes objects", fmt.Sprintf("%d: %s", n, orNone(strings.Join(objs, ", ")))})
	if d.Application != "" {
		out = append(out, [2]string{"Removes Application", d.Application})
	}
	if t := d.Terraform; t != nil {
		out = append(out, [2]string{"Destroys", fmt.Sprintf("the Terraform stack %s by the approved destroy plan", t.Dir)})
	}
	if st := cr.Status.Deletion; st != nil {
		// What the operator recorded each step did (which namespace was
		// cleaned, what was left, why it failed), not a blanket claim.
		var done []string
		if st.WorkloadRemovedAt != nil {
			done = append(done, "workload step done")
		}
		if st.InfrastructureDestroyedAt != nil {
			done = append(done, "infrastructure step done")
		}
		if st.ReleaseDeletedAt != nil {
			done = append(done, "Release deleted")
		}
		if cr.Status.Phase == sluicev1.PhaseFailed {
			done = append(done, "the removal failed")
		}
		out = append(out, [2]string{"Deletion", orNone(strings.Join(done, ", "))})
		if ap := cr.Status.Apply; ap != nil && ap.Message != "" {
			out = append(out, [2]string{"  what happened", ap.Message})
		}
	}
	return out
}
