// Package terraform checks Terraform plans: it reads plan JSON (from a file,
// from a binary plan through `terraform show -json`, or by planning a
// directory through terraform-exec), counts and lists the changes, rates
// their risk (DESIGN.md §4), computes the semantic planDigest and the plan
// file's sha256, and reports values unknown until apply that a check
// depends on as "unverifiable" findings.
//
// Exported API:
//
//	func ReadPlan(data []byte) (*tfjson.Plan, error)
//	func Analyze(planJSON []byte, opts Options) (*Report, error)
//	func AnalyzePlan(plan *tfjson.Plan, opts Options) (*Report, error) // no "errored" flag: use Analyze
//	func PlanDigest(planJSON []byte) (string, error)
//	func PlanFileSHA256(planFile []byte) string
//	func UnknownPaths(rc *tfjson.ResourceChange) []string
//	func IsUnknown(rc *tfjson.ResourceChange, path string) bool
//	func DefaultStatefulTypes() []string
//	func DefaultSecurityAttributes() map[string][]string
//	func ShowPlanFile(ctx context.Context, opts ExecOptions, dir, planFile string) (*PlanResult, error)
//	func Plan(ctx context.Context, opts PlanOptions) (*PlanResult, error)
//	func KubernetesBackendOverride(namespace, secretSuffix string) ([]byte, error)
//	const BackendOverrideFile = "zz_sluice_backend_override.tf"; const DefaultTimeout = 10 * time.Minute
//	var ErrUnsupportedFormat error
//	type Options struct{ StatefulTypes, ProtectedTypes []string; ProtectedTag string;
//	    SecurityAttributes map[string][]string }
//	type Report struct{ FormatVersion, TerraformVersion string; Counts Counts;
//	    Resources []Resource; Risk report.Risk; RiskReasons []string; PlanDigest,
//	    PlanFileSHA256 string; Findings []report.Finding; Plan *tfjson.Plan }
//	type Counts struct{ Create, Update, Delete, Replace, Read, Forget, NoOp int }
//	type Resource struct{ Address, PreviousAddress, Type, Mode string; Action Action;
//	    Actions []string; Stateful, Protected bool; Unknown []string; Risk report.Risk }
//	type Action string // ActionCreate, ActionUpdate, ActionDelete, ActionReplace, ActionRead,
//	    ActionForget, ActionNoOp, ActionUnknown
//	type ExecOptions struct{ ExecPath string; Env map[string]string; DataDir string;
//	    Timeout time.Duration; Analyze Options }
//	type PlanOptions struct{ ExecOptions; Dir string; Vars map[string]string; Workspace string;
//	    Backend Backend; Kubernetes *KubernetesBackend; Destroy bool }
//	type Backend string // BackendOwn, BackendKubernetes, BackendNone ("" = none)
//	type KubernetesBackend struct{ Namespace, SecretSuffix string }
//	type PlanResult struct{ PlanFile, PlanJSON []byte; Plan *tfjson.Plan; Report *Report }
//	type RunError struct{ Step string; Kind ErrorKind; Diagnostics []Diagnostic; Stderr string } // a failed terraform step
//	type ErrorKind string // ErrorConfiguration (fix the stack), ErrorBackend (retry)
//	type Diagnostic struct{ Summary, Detail, File string; Line int }
//	var ErrConfiguration error; func IsConfigurationError(err error) bool
//	func ParseDiagnostics(stderr string) []Diagnostic
//
// Plan JSON of format_version 0.x and 1.x is accepted; any other major
// version is refused with a clear error rather than misread.
package terraform

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	tfjson "github.com/hashicorp/terraform-json"
)

// ErrUnsupportedFormat is wrapped by the error for a plan whose
// format_version this package does not understand.
var ErrUnsupportedFormat = errors.New("unsupported plan format_version")

// ReadPlan parses plan JSON as written by `terraform show -json`. Malformed
// JSON, a missing or unknown-major format_version and null entries are
// errors; numbers are kept as json.Number so large values survive.
func ReadPlan(data []byte) (*tfjson.Plan, error) {
	plan, _, err := readPlan(data)
	return plan, err
}

// planHead holds the top-level fields tfjson does not keep.
type planHead struct {
	FormatVersion *string `json:"format_version"`
	Errored       bool    `json:"errored"`
}

// planDoc decodes a plan and its head in one pass: planFields has the
// fields of tfjson.Plan without its UnmarshalJSON method, so the decoder
// fills them exactly as Plan.UnmarshalJSON does (which decodes into the same
// method-less copy), and Errored sits beside them.
type planDoc struct {
	*planFields
	Errored bool `json:"errored"`
}

type planFields tfjson.Plan

// readPlan is ReadPlan that also returns the head fields. A well-formed plan
// is decoded once (readPlanFast); anything else takes the careful path,
// which reads the head first so every error names what is wrong.
func readPlan(data []byte) (*tfjson.Plan, planHead, error) {
	data = bytes.TrimSpace(data)
	if plan, head, ok := readPlanFast(data); ok {
		return plan, head, nil
	}
	return readPlanSlow(data)
}

// readPlanFast decodes the plan and its head in one pass. It reports ok only
// when readPlanSlow would accept the same input with the same result: one
// JSON value and nothing after it, a format_version it accepts, and the
// checks of tfjson's Plan.Validate and checkPlanEntries. On any doubt it
// returns !ok and the caller takes the slow path for the error message.
func readPlanFast(data []byte) (*tfjson.Plan, planHead, bool) {
	var head planHead
	if len(data) == 0 {
		return nil, head, false
	}
	doc := planDoc{planFields: &planFields{}}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(&doc); err != nil {
		return nil, head, false
	}
	if dec.InputOffset() != int64(len(data)) {
		return nil, head, false
	}
	plan := (*tfjson.Plan)(doc.planFields)
	if plan.FormatVersion == "" || checkFormatVersion(plan.FormatVersion) != nil || plan.Validate() != nil {
		return nil, head, false
	}
	if checkPlanEntries(plan) != nil {
		return nil, head, false
	}
	plan.UseJSONNumber(true)
	v := plan.FormatVersion
	return plan, planHead{FormatVersion: &v, Errored: doc.Errored}, true
}

// readPlanSlow reads the head first, then the plan.
func readPlanSlow(data []byte) (*tfjson.Plan, planHead, error) {
	var head planHead
	if len(data) == 0 {
		return nil, head, errors.New("plan JSON is empty")
	}
	// Read the version first, so a future format gets a clear message
	// instead of whatever decoding error its new shape would cause.
	if err := json.Unmarshal(data, &head); err != nil {
		return nil, head, fmt.Errorf("plan JSON: %w", jsonError(data, err))
	}
	if head.FormatVersion == nil || *head.FormatVersion == "" {
		return nil, head, errors.New("plan JSON has no format_version: is this the output of `terraform show -json` on a plan?")
	}
	if err := checkFormatVersion(*head.FormatVersion); err != nil {
		return nil, head, err
	}
	plan := &tfjson.Plan{}
	plan.UseJSONNumber(true)
	if err := plan.UnmarshalJSON(data); err != nil {
		return nil, head, fmt.Errorf("plan JSON: %w", jsonError(data, err))
	}
	if err := checkPlanEntries(plan); err != nil {
		return nil, head, err
	}
	return plan, head, nil
}

// checkPlanEntries refuses null or address-less resource changes and null
// output changes.
func checkPlanEntries(plan *tfjson.Plan) error {
	for i, rc := range plan.ResourceChanges {
		if rc == nil || rc.Change == nil {
			return fmt.Errorf("plan JSON: resource_changes[%d] has no change", i)
		}
		if rc.Address == "" {
			return fmt.Errorf("plan JSON: resource_changes[%d] has no address", i)
		}
	}
	for name, oc := range plan.OutputChanges {
		if oc == nil {
			return fmt.Errorf("plan JSON: output_changes[%q] is null", name)
		}
	}
	return nil
}

// checkFormatVersion accepts major versions 0 and 1 (Terraform 0.12 to 1.x).
func checkFormatVersion(v string) error {
	major, _, _ := strings.Cut(v, ".")
	n, err := strconv.Atoi(major)
	if err != nil || n < 0 {
		return fmt.Errorf("%w %q: not a version number", ErrUnsupportedFormat, v)
	}
	if n > 1 {
		return fmt.Errorf("%w %q: this validator reads plan format 1.x; upgrade infra-validator for this Terraform version", ErrUnsupportedFormat, v)
	}
	return nil
}

// jsonError adds the line and column to a JSON syntax error.
func jsonError(data []byte, err error) error {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		line, col := position(data, se.Offset)
		return fmt.Errorf("line %d, column %d: %w", line, col, err)
	}
	var ue *json.UnmarshalTypeError
	if errors.As(err, &ue) {
		line, col := position(data, ue.Offset)
		return fmt.Errorf("line %d, column %d: %w", line, col, err)
	}
	return err
}

func position(data []byte, offset int64) (line, col int) {
	if offset > int64(len(data)) {
		offset = int64(len(data))
	}
	line = 1 + bytes.Count(data[:offset], []byte("\n"))
	col = int(offset) - bytes.LastIndexByte(data[:offset], '\n')
	return line, col
}
