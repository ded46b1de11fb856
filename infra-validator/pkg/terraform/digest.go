package terraform

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sort"

	tfjson "github.com/hashicorp/terraform-json"
)

// digestVersion prefixes the canonical form so a future change of the
// form can never collide with today's digests.
const digestVersion = "sluice-plan-digest/v1\n"

// canonicalChange is the part of a resource change that describes its
// effect. Left out on purpose: action_reason and replace_paths (why, not
// what), generated_config, and everything outside resource_changes and
// output_changes (timestamp, terraform_version, variables, prior_state,
// configuration). No-op changes are left out too: they change nothing.
type canonicalChange struct {
	Address         string            `json:"address"`
	PreviousAddress string            `json:"previous_address,omitempty"`
	ModuleAddress   string            `json:"module_address,omitempty"`
	Mode            string            `json:"mode"`
	Type            string            `json:"type"`
	Name            string            `json:"name"`
	Index           any               `json:"index,omitempty"`
	ProviderName    string            `json:"provider_name"`
	Deposed         string            `json:"deposed,omitempty"`
	Actions         []string          `json:"actions"`
	Before          any               `json:"before"`
	After           any               `json:"after"`
	AfterUnknown    any               `json:"after_unknown"`
	BeforeSensitive any               `json:"before_sensitive"`
	AfterSensitive  any               `json:"after_sensitive"`
	Importing       *tfjson.Importing `json:"importing,omitempty"`
}

type canonicalOutput struct {
	Name            string   `json:"name"`
	Actions         []string `json:"actions"`
	Before          any      `json:"before"`
	After           any      `json:"after"`
	AfterUnknown    any      `json:"after_unknown"`
	BeforeSensitive any      `json:"before_sensitive"`
	AfterSensitive  any      `json:"after_sensitive"`
}

// PlanDigest returns the semantic digest of plan JSON: "sha256:" and the
// hex sha256 of a canonical JSON form of resource_changes and
// output_changes, sorted by address, with object keys sorted and volatile
// fields left out. Two plans with the same effect have the same digest,
// whatever order the configuration declares things in, whichever folder it
// was planned from, and whenever.
func PlanDigest(planJSON []byte) (string, error) {
	plan, err := ReadPlan(planJSON)
	if err != nil {
		return "", err
	}
	return digestPlan(plan)
}

func digestPlan(plan *tfjson.Plan) (string, error) {
	changes := make([]canonicalChange, 0, len(plan.ResourceChanges))
	for _, rc := range plan.ResourceChanges {
		if rc == nil || rc.Change == nil || rc.Change.Actions.NoOp() {
			continue
		}
		c := rc.Change
		changes = append(changes, canonicalChange{
			Address: rc.Address, PreviousAddress: rc.PreviousAddress, ModuleAddress: rc.ModuleAddress,
			Mode: string(rc.Mode), Type: rc.Type, Name: rc.Name, Index: rc.Index,
			ProviderName: rc.ProviderName, Deposed: rc.DeposedKey,
			Actions: actionStrings(c.Actions), Before: c.Before, After: c.After,
			AfterUnknown: c.AfterUnknown, BeforeSensitive: c.BeforeSensitive, AfterSensitive: c.AfterSensitive,
			Importing: c.Importing,
		})
	}
	sort.Slice(changes, func(i, j int) bool {
		if changes[i].Address != changes[j].Address {
			return changes[i].Address < changes[j].Address
		}
		return changes[i].Deposed < changes[j].Deposed
	})
	outputs := make([]canonicalOutput, 0, len(plan.OutputChanges))
	for name, c := range plan.OutputChanges {
		if c == nil || c.Actions.NoOp() {
			continue
		}
		outputs = append(outputs, canonicalOutput{
			Name: name, Actions: actionStrings(c.Actions), Before: c.Before, After: c.After,
			AfterUnknown: c.AfterUnknown, BeforeSensitive: c.BeforeSensitive, AfterSensitive: c.AfterSensitive,
		})
	}
	sort.Slice(outputs, func(i, j int) bool { return outputs[i].Name < outputs[j].Name })

	h := sha256.New()
	h.Write([]byte(digestVersion))
	// encoding/json writes map keys sorted and json.Number verbatim, so its
	// encoding is canonical for a given set of values. HTML escaping is off
	// so the bytes do not depend on an escaping choice. canonicalEncoder
	// writes those same bytes without reflection.
	enc := newCanonicalEncoder()
	for i := range changes {
		if err := enc.change(&changes[i]); err != nil {
			return "", fmt.Errorf("plan digest: resource %s: %w", changes[i].Address, err)
		}
		h.Write([]byte("r"))
		h.Write(enc.buf)
	}
	for i := range outputs {
		if err := enc.output(&outputs[i]); err != nil {
			return "", fmt.Errorf("plan digest: output %s: %w", outputs[i].Name, err)
		}
		h.Write([]byte("o"))
		h.Write(enc.buf)
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}

// PlanFileSHA256 returns "sha256:" and the hex sha256 of a binary plan
// file: the integrity check the applier repeats before applying it.
func PlanFileSHA256(planFile []byte) string {
	sum := sha256.Sum256(planFile)
	return "sha256:" + hex.EncodeToString(sum[:])
}
