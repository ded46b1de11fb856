package terraform

import (
	"fmt"
	"path"
	"sort"
	"strings"

	tfjson "github.com/hashicorp/terraform-json"

	"github.com/sluice-gitops/sluice/infra-validator/pkg/report"
)

// Action is the effect of one resource change.
type Action string

const (
	ActionCreate  Action = "create"
	ActionUpdate  Action = "update"
	ActionDelete  Action = "delete"
	ActionReplace Action = "replace"
	ActionRead    Action = "read"
	ActionForget  Action = "forget"
	ActionNoOp    Action = "no-op"
	// ActionUnknown is an action list this package does not recognise; it
	// is rated high so it never passes as harmless.
	ActionUnknown Action = "unknown"
)

// Options tune the analysis. The zero value uses the defaults.
type Options struct {
	// StatefulTypes are resource types (a trailing "*" matches a prefix)
	// whose destroy or replace is high risk. Nil means DefaultStatefulTypes.
	StatefulTypes []string
	// ProtectedTypes are extra types whose destroy or replace is high risk
	// (the policies' protected_types list).
	ProtectedTypes []string
	// ProtectedTag marks a resource protected when its tags (or labels)
	// before the change carry this key with the value "true". Default
	// "protected", as in the default policies.
	ProtectedTag string
	// SecurityAttributes maps a resource type to attribute paths ("*"
	// matches any list index or map key) that security checks read; a value
	// unknown until apply there gives an "unverifiable" finding. Nil means
	// DefaultSecurityAttributes.
	SecurityAttributes map[string][]string
}

// Counts of the resource changes in a plan, by action.
type Counts struct {
	Create  int `json:"create"`
	Update  int `json:"update"`
	Delete  int `json:"delete"`
	Replace int `json:"replace"`
	Read    int `json:"read,omitempty"`
	Forget  int `json:"forget,omitempty"`
	NoOp    int `json:"noOp,omitempty"`
}

// Resource is one resource the plan touches (no-op changes are left out).
type Resource struct {
	Address         string   `json:"address"`
	PreviousAddress string   `json:"previousAddress,omitempty"`
	Type            string   `json:"type"`
	Mode            string   `json:"mode"`
	Action          Action   `json:"action"`
	Actions         []string `json:"actions"`
	Stateful        bool     `json:"stateful,omitempty"`
	Protected       bool     `json:"protected,omitempty"`
	// Unknown lists the attribute paths whose values are unknown until apply.
	Unknown []string    `json:"unknown,omitempty"`
	Risk    report.Risk `json:"risk"`
}

// Report is the analysis of one plan.
type Report struct {
	FormatVersion    string      `json:"formatVersion"`
	TerraformVersion string      `json:"terraformVersion,omitempty"`
	Counts           Counts      `json:"counts"`
	Resources        []Resource  `json:"resources"`
	Risk             report.Risk `json:"risk"`
	// RiskReasons says which changes set the risk, highest first.
	RiskReasons []string `json:"riskReasons,omitempty"`
	// PlanDigest is the semantic digest: equal for plans with the same effect.
	PlanDigest string `json:"planDigest"`
	// PlanFileSHA256 is "sha256:<hex>" of the binary plan file, when known.
	PlanFileSHA256 string           `json:"planFileSHA256,omitempty"`
	Findings       []report.Finding `json:"findings,omitempty"`
	// Code lists the provisioners, external data sources and providers
	// new to the stack (see ExecutedCode); any that runs rates the plan
	// high.
	Code []Code `json:"code,omitempty"`
	// Plan is the parsed plan (numbers as json.Number), for policy input.
	Plan *tfjson.Plan `json:"-"`
}

// DefaultStatefulTypes lists resource types that hold data: destroying or
// replacing one loses it. A trailing "*" matches a prefix.
func DefaultStatefulTypes() []string {
	return []string{
		// AWS
		"aws_db_instance", "aws_rds_cluster", "aws_rds_cluster_instance", "aws_rds_global_cluster",
		"aws_dynamodb_table", "aws_dynamodb_global_table", "aws_s3_bucket", "aws_s3_object",
		"aws_ebs_volume", "aws_ebs_snapshot", "aws_efs_file_system", "aws_fsx_*",
		"aws_elasticache_cluster", "aws_elasticache_replication_group", "aws_memorydb_cluster",
		"aws_redshift_cluster", "aws_docdb_cluster", "aws_neptune_cluster", "aws_keyspaces_table",
		"aws_timestream_table", "aws_kinesis_stream", "aws_sqs_queue", "aws_msk_cluster",
		"aws_opensearch_domain", "aws_elasticsearch_domain", "aws_kms_key", "aws_secretsmanager_secret",
		"aws_backup_vault", "aws_glacier_vault", "aws_ecr_repository", "aws_route53_zone",
		// Google Cloud
		"google_sql_database_instance", "google_sql_database", "google_storage_bucket",
		"google_compute_disk", "google_compute_region_disk", "google_bigquery_dataset",
		"google_bigquery_table", "google_spanner_instance", "google_spanner_database",
		"google_bigtable_instance", "google_bigtable_table", "google_redis_instance",
		"google_filestore_instance", "google_firestore_database", "google_kms_crypto_key",
		"google_alloydb_cluster", "google_secret_manager_secret", "google_dns_managed_zone",
		// Azure
		"azurerm_storage_account", "azurerm_storage_container", "azurerm_managed_disk",
		"azurerm_mssql_server", "azurerm_mssql_database", "azurerm_postgresql_*", "azurerm_mysql_*",
		"azurerm_cosmosdb_*", "azurerm_redis_cache", "azurerm_key_vault", "azurerm_key_vault_key",
		// Kubernetes
		"kubernetes_namespace", "kubernetes_namespace_v1", "kubernetes_persistent_volume",
		"kubernetes_persistent_volume_v1", "kubernetes_persistent_volume_claim",
		"kubernetes_persistent_volume_claim_v1", "kubernetes_stateful_set", "kubernetes_stateful_set_v1",
		"kubernetes_secret", "kubernetes_secret_v1",
	}
}

// accessTypes are resource types that grant access or open the network; an
// update of one is medium rather than low risk.
var accessTypes = []string{
	"aws_iam_*", "aws_security_group", "aws_security_group_rule", "aws_vpc_security_group_*",
	"aws_network_acl*", "aws_kms_key_policy", "aws_s3_bucket_policy", "aws_s3_bucket_acl",
	"aws_s3_bucket_public_access_block", "aws_lb_listener", "aws_route", "aws_route_table*",
	"google_*_iam_*", "google_compute_firewall", "azurerm_role_*", "azurerm_network_security_*",
	"kubernetes_cluster_role*", "kubernetes_role*", "kubernetes_network_policy*",
}

// DefaultSecurityAttributes maps resource types to the attributes the
// default security policies read (open ingress, public buckets,
// encryption, allowlists). A value unknown until apply in one of them makes
// the check unverifiable.
func DefaultSecurityAttributes() map[string][]string {
	return map[string][]string{
		"aws_security_group":                                 {"ingress"},
		"aws_security_group_rule":                            {"type", "cidr_blocks", "ipv6_cidr_blocks", "from_port", "to_port", "protocol"},
		"aws_vpc_security_group_ingress_rule":                {"cidr_ipv4", "cidr_ipv6", "from_port", "to_port", "ip_protocol"},
		"aws_s3_bucket":                                      {"acl"},
		"aws_s3_bucket_acl":                                  {"acl", "access_control_policy"},
		"aws_s3_bucket_public_access_block":                  {"block_public_acls", "block_public_policy", "ignore_public_acls", "restrict_public_buckets"},
		"aws_s3_bucket_policy":                               {"policy"},
		"aws_s3_bucket_server_side_encryption_configuration": {"rule"},
		"aws_db_instance":                                    {"storage_encrypted", "publicly_accessible"},
		"aws_rds_cluster":                                    {"storage_encrypted"},
		"aws_ebs_volume":                                     {"encrypted"},
		"aws_efs_file_system":                                {"encrypted"},
		"aws_instance":                                       {"ami", "instance_type", "root_block_device.*.encrypted", "ebs_block_device.*.encrypted"},
		"aws_launch_template":                                {"image_id", "instance_type"},
		"google_compute_firewall":                            {"source_ranges", "allow"},
		"azurerm_network_security_rule":                      {"source_address_prefix", "source_address_prefixes", "destination_port_range", "destination_port_ranges"},
	}
}

func (o Options) withDefaults() Options {
	if o.StatefulTypes == nil {
		o.StatefulTypes = DefaultStatefulTypes()
	}
	if o.ProtectedTag == "" {
		o.ProtectedTag = "protected"
	}
	if o.SecurityAttributes == nil {
		o.SecurityAttributes = DefaultSecurityAttributes()
	}
	return o
}

// matchType reports whether typ matches one of the patterns (exact, or a
// path.Match glob such as "aws_fsx_*").
func matchType(patterns []string, typ string) bool {
	for _, p := range patterns {
		if p == typ {
			return true
		}
		if strings.ContainsAny(p, "*?[") {
			if ok, _ := path.Match(p, typ); ok {
				return true
			}
		}
	}
	return false
}

// typeMatcher returns matchType(patterns, typ) as a function that
// remembers its answer per type.
func typeMatcher(patterns []string) func(typ string) bool {
	seen := map[string]bool{}
	return func(typ string) bool {
		ok, found := seen[typ]
		if !found {
			ok = matchType(patterns, typ)
			seen[typ] = ok
		}
		return ok
	}
}

// Analyze reads plan JSON and analyses it (ReadPlan, then AnalyzePlan).
func Analyze(planJSON []byte, opts Options) (*Report, error) {
	plan, head, err := readPlan(planJSON)
	if err != nil {
		return nil, err
	}
	return analyze(plan, head.Errored, opts)
}

// AnalyzePlan counts and lists the changes of a parsed plan, rates its risk,
// computes its PlanDigest and reports unknown security-relevant values as
// "unverifiable" findings. The plan must come from ReadPlan (or satisfy
// its checks). PlanFileSHA256 is left empty: only a plan file has one.
func AnalyzePlan(plan *tfjson.Plan, opts Options) (*Report, error) {
	return analyze(plan, false, opts)
}

func analyze(plan *tfjson.Plan, errored bool, opts Options) (*Report, error) {
	if plan == nil {
		return nil, fmt.Errorf("plan is nil")
	}
	opts = opts.withDefaults()
	// A plan repeats a few types many times; the glob matches are
	// computed once per type.
	stateful := typeMatcher(opts.StatefulTypes)
	protectedType := typeMatcher(opts.ProtectedTypes)
	access := typeMatcher(accessTypes)
	digest, err := digestPlan(plan)
	if err != nil {
		return nil, err
	}
	r := &Report{
		FormatVersion:    plan.FormatVersion,
		TerraformVersion: plan.TerraformVersion,
		Resources:        []Resource{},
		Risk:             report.RiskLow,
		PlanDigest:       digest,
		Plan:             plan,
	}
	type reason struct {
		risk report.Risk
		text string
	}
	var reasons []reason

	if errored {
		r.Risk = report.RiskHigh
		reasons = append(reasons, reason{report.RiskHigh, "the plan errored and is incomplete"})
		r.Findings = append(r.Findings, report.Finding{
			Severity: report.SeverityDeny, Source: "terraform", Policy: "terraform.plan_errored",
			Message: "terraform reported errors while planning; the plan is incomplete and cannot be applied",
		})
	}

	for _, rc := range plan.ResourceChanges {
		if rc == nil || rc.Change == nil {
			return nil, fmt.Errorf("plan: resource change without change")
		}
		act := classify(rc)
		switch act {
		case ActionCreate:
			r.Counts.Create++
		case ActionUpdate:
			r.Counts.Update++
		case ActionDelete:
			r.Counts.Delete++
		case ActionReplace:
			r.Counts.Replace++
		case ActionRead:
			r.Counts.Read++
		case ActionForget:
			r.Counts.Forget++
		case ActionNoOp:
			r.Counts.NoOp++
			continue
		}
		res := Resource{
			Address:         rc.Address,
			PreviousAddress: rc.PreviousAddress,
			Type:            rc.Type,
			Mode:            string(rc.Mode),
			Action:          act,
			Actions:         actionStrings(rc.Change.Actions),
			Stateful:        stateful(rc.Type),
			Protected:       protectedType(rc.Type) || taggedProtected(rc.Change.Before, opts.ProtectedTag),
			Unknown:         UnknownPaths(rc),
		}
		res.Risk, res.Stateful = resourceRisk(res, rc, access)
		if why := riskWhy(res); why != "" {
			reasons = append(reasons, reason{res.Risk, rc.Address + ": " + why})
		}
		r.Risk = report.MaxRisk(r.Risk, res.Risk)
		r.Resources = append(r.Resources, res)
		if act == ActionUnknown {
			r.Findings = append(r.Findings, report.Finding{
				Severity: report.SeverityWarn, Source: "terraform", Policy: "terraform.unknown_action", Resource: rc.Address,
				Message: fmt.Sprintf("unrecognised actions %v; rated high risk", res.Actions),
			})
		}
		r.Findings = append(r.Findings, unverifiable(rc, act, opts.SecurityAttributes)...)
	}

	if len(plan.DeferredChanges) > 0 || (plan.Complete != nil && !*plan.Complete) {
		r.Risk = report.RiskHigh
		reasons = append(reasons, reason{report.RiskHigh, fmt.Sprintf("%d changes are deferred to a later plan", len(plan.DeferredChanges))})
		r.Findings = append(r.Findings, report.Finding{
			Severity: report.SeverityUnverifiable, Source: "terraform", Policy: "terraform.deferred_changes",
			Message: fmt.Sprintf("the plan is incomplete: %d resource changes are deferred until a later plan and cannot be checked now", len(plan.DeferredChanges)),
		})
	}

	// Pushed code that terraform runs (at apply, or already at plan) can
	// do anything the run can: it is shown and rated high.
	r.Code = ExecutedCode(plan)
	codeFs, codeWhy := codeFindings(r.Code)
	r.Findings = append(r.Findings, codeFs...)
	for _, why := range codeWhy {
		r.Risk = report.RiskHigh
		reasons = append(reasons, reason{report.RiskHigh, why})
	}

	// Output changes count towards the effect but not the risk.
	sort.SliceStable(reasons, func(i, j int) bool { return rank(reasons[i].risk) > rank(reasons[j].risk) })
	for _, rs := range reasons {
		if rank(rs.risk) > 0 {
			r.RiskReasons = append(r.RiskReasons, rs.text)
		}
	}
	return r, nil
}

func rank(r report.Risk) int {
	switch r {
	case report.RiskLow:
		return 0
	case report.RiskMedium:
		return 1
	}
	return 2
}

func actionStrings(a tfjson.Actions) []string {
	out := make([]string, len(a))
	for i, x := range a {
		out[i] = string(x)
	}
	return out
}

func classify(rc *tfjson.ResourceChange) Action {
	a := rc.Change.Actions
	switch {
	case a.NoOp():
		return ActionNoOp
	case a.Create():
		return ActionCreate
	case a.Update():
		return ActionUpdate
	case a.Delete():
		return ActionDelete
	case a.Replace():
		return ActionReplace
	case a.Read():
		return ActionRead
	case a.Forget():
		return ActionForget
	}
	return ActionUnknown
}

// resourceRisk rates one change:
//   - destroy or replace of a stateful or protected resource: high;
//   - any other destroy or replace, a forget, a create: medium;
//   - an update of a type that grants access or opens the network: medium;
//   - other updates and reads: low;
//   - unrecognised actions: high.
func resourceRisk(res Resource, rc *tfjson.ResourceChange, accessType func(string) bool) (report.Risk, bool) {
	stateful := res.Stateful && rc.Mode != tfjson.DataResourceMode
	switch res.Action {
	case ActionDelete, ActionReplace:
		if stateful || res.Protected {
			return report.RiskHigh, stateful
		}
		return report.RiskMedium, stateful
	case ActionCreate, ActionForget:
		return report.RiskMedium, stateful
	case ActionUpdate:
		if accessType(rc.Type) {
			return report.RiskMedium, stateful
		}
		return report.RiskLow, stateful
	case ActionRead, ActionNoOp:
		return report.RiskLow, stateful
	}
	return report.RiskHigh, stateful
}

func riskWhy(res Resource) string {
	switch {
	case res.Action == ActionUnknown:
		return fmt.Sprintf("unrecognised actions %v", res.Actions)
	case res.Risk == report.RiskHigh && res.Protected:
		return string(res.Action) + " of a protected resource"
	case res.Risk == report.RiskHigh:
		return string(res.Action) + " of a stateful resource"
	case res.Risk == report.RiskMedium && res.Action == ActionUpdate:
		return "update of an access or network resource"
	case res.Risk == report.RiskMedium:
		return string(res.Action)
	}
	return ""
}

// taggedProtected reports whether the values before the change carry the
// protected tag (in tags, tags_all or labels) set to "true".
func taggedProtected(before any, key string) bool {
	obj, ok := before.(map[string]any)
	if !ok {
		return false
	}
	for _, field := range []string{"tags", "tags_all", "labels"} {
		tags, ok := obj[field].(map[string]any)
		if !ok {
			continue
		}
		if v, ok := tags[key]; ok && strings.EqualFold(fmt.Sprint(v), "true") {
			return true
		}
	}
	return false
}

// unverifiable reports the security-relevant attributes of a change whose
// values are unknown until apply.
func unverifiable(rc *tfjson.ResourceChange, act Action, attrs map[string][]string) []report.Finding {
	if act != ActionCreate && act != ActionUpdate && act != ActionReplace {
		return nil
	}
	var out []report.Finding
	for _, pattern := range attrs[rc.Type] {
		for _, p := range unknownMatches(rc.Change.AfterUnknown, splitPath(pattern), "") {
			out = append(out, report.Finding{
				Severity: report.SeverityUnverifiable, Source: "terraform", Policy: "terraform.unknown_value",
				Resource: rc.Address,
				Message:  fmt.Sprintf("%s is unknown until apply, so the checks that read it cannot be verified", p),
			})
		}
	}
	return out
}
