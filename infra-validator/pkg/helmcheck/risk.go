package helmcheck

import (
	"fmt"
	"reflect"
	"sort"
	"strings"

	"helm.sh/helm/v3/pkg/release"

	"github.com/sluice-gitops/sluice/infra-validator/pkg/report"
)

// highRiskKinds change who may do what, what the API server accepts, or
// who may talk to whom.
var highRiskKinds = map[string]string{
	"Role": "RBAC object", "ClusterRole": "RBAC object", "RoleBinding": "RBAC object", "ClusterRoleBinding": "RBAC object",
	"CustomResourceDefinition":       "CRD",
	"ValidatingWebhookConfiguration": "admission webhook", "MutatingWebhookConfiguration": "admission webhook",
	"ValidatingAdmissionPolicy": "admission policy", "ValidatingAdmissionPolicyBinding": "admission policy",
	"MutatingAdmissionPolicy": "admission policy", "MutatingAdmissionPolicyBinding": "admission policy",
	"NetworkPolicy": "NetworkPolicy", "APIService": "APIService",
}

// volatileLabels change with every chart release and say nothing about
// the workload.
var volatileLabels = []string{"helm.sh/chart", "app.kubernetes.io/version"}

// runsCommands are the kinds that run a command as soon as they exist.
var runsCommands = map[string]bool{"Job": true, "Pod": true, "CronJob": true}

// risk rates the change from Options.Previous (what the last applied
// revision rendered) to the rendered objects (DESIGN.md §4):
//   - high: a new or changed RBAC object, CRD, admission webhook or policy,
//     NetworkPolicy or APIService (hooks included), or any non-hook object
//     of Previous that is gone;
//   - medium: a new object, a new or changed hook (a hook runs or creates
//     something at install or upgrade whatever its kind), or a change
//     beyond the low-risk fields;
//   - low: no change, or changes only to container images and resources,
//     replicas, ConfigMap/Secret data, chart-version labels and checksum/*
//     annotations of objects that are not hooks.
//
// Hooks are compared with the hooks of Previous (Result.Rendered carries
// them); a hook that is gone deletes nothing, so it adds no risk.
func (c *checker) risk(objs []Object) {
	prev, problems := splitManifest(c.opts.Previous, false)
	if len(problems) > 0 {
		// Without the whole previous manifest, deletions cannot be seen.
		c.res.Risk = report.RiskHigh
		c.res.RiskReasons = append(c.res.RiskReasons, "the previous manifest cannot be read, so removed objects cannot be detected")
		c.add(report.SeverityWarn, "helm.previous_manifest", "", "", 0,
			fmt.Sprintf("the previous manifest cannot be read (%s: %s); risk is rated high", problems[0].source, problems[0].msg))
	}
	prevByID := map[string]Object{}
	for _, p := range prev {
		setNamespace(&p, c.opts.Namespace)
		prevByID[riskKey(p)] = p
	}
	type reason struct {
		risk report.Risk
		text string
	}
	var reasons []reason
	add := func(r report.Risk, format string, args ...any) {
		reasons = append(reasons, reason{r, fmt.Sprintf(format, args...)})
	}
	seen := map[string]bool{}
	for _, o := range objs {
		if o.CRDFolder {
			// Installed from crds/ on a first install only, never
			// upgraded by Helm: rated as new every time.
			add(report.RiskHigh, "%s: CRD from crds/", o.ID())
			continue
		}
		what, high := highRiskKinds[o.Kind]
		key := riskKey(o)
		seen[key] = true
		p, existed := prevByID[key]
		switch {
		case o.Hook && !existed && high:
			add(report.RiskHigh, "%s: new hook creating a %s", o.ID(), what)
		case o.Hook && !existed:
			add(report.RiskMedium, "%s: new hook (%s)", o.ID(), hookEvents(o))
		case o.Hook && reflect.DeepEqual(p.Object, o.Object):
		case o.Hook && high:
			add(report.RiskHigh, "%s: hook creating a %s changed", o.ID(), what)
		case o.Hook:
			add(report.RiskMedium, "%s: hook changed (%s)", o.ID(), hookEvents(o))
		case !existed && high:
			add(report.RiskHigh, "%s: new %s", o.ID(), what)
		case !existed && runsCommands[o.Kind]:
			add(report.RiskMedium, "%s: new %s (runs a command)", o.ID(), o.Kind)
		case !existed:
			add(report.RiskMedium, "%s: new object", o.ID())
		case reflect.DeepEqual(p.Object, o.Object):
		case high:
			add(report.RiskHigh, "%s: %s changed", o.ID(), what)
		case reflect.DeepEqual(lowRiskNormal(p), lowRiskNormal(o)):
			add(report.RiskLow, "%s: image, replicas, resources or data changed", o.ID())
		default:
			add(report.RiskMedium, "%s: changed", o.ID())
		}
	}
	for key, p := range prevByID {
		if !seen[key] && !p.Hook {
			add(report.RiskHigh, "%s: deleted", p.ID())
		}
	}
	rank := map[report.Risk]int{report.RiskLow: 0, report.RiskMedium: 1, report.RiskHigh: 2}
	sort.SliceStable(reasons, func(i, j int) bool {
		if rank[reasons[i].risk] != rank[reasons[j].risk] {
			return rank[reasons[i].risk] > rank[reasons[j].risk]
		}
		return reasons[i].text < reasons[j].text
	})
	for _, r := range reasons {
		c.res.Risk = report.MaxRisk(c.res.Risk, r.risk)
		if rank[r.risk] > 0 {
			c.res.RiskReasons = append(c.res.RiskReasons, r.text)
		}
	}
}

// hookEvents is the hook's helm.sh/hook annotation, e.g. "pre-upgrade".
func hookEvents(o Object) string {
	md, _ := o.Object["metadata"].(map[string]any)
	ann, _ := md["annotations"].(map[string]any)
	ev, _ := ann[release.HookAnnotation].(string)
	return ev
}

// riskKey identifies an object across revisions; hooks and installed
// objects are apart, as Helm keeps them.
func riskKey(o Object) string {
	if o.Hook {
		return "hook:" + groupOf(o.APIVersion) + "/" + o.ID()
	}
	return groupOf(o.APIVersion) + "/" + o.ID()
}

// lowRiskNormal returns a copy of the object without the fields whose
// change is low risk.
func lowRiskNormal(o Object) any {
	v := deepCopy(o.Object)
	m := v.(map[string]any)
	if o.Kind == "ConfigMap" || o.Kind == "Secret" {
		delete(m, "data")
		delete(m, "binaryData")
		delete(m, "stringData")
	}
	if spec, ok := m["spec"].(map[string]any); ok {
		delete(spec, "replicas")
	}
	strip(v)
	return v
}

// strip removes, anywhere in the object, container images and resources,
// volatile labels and checksum annotations.
func strip(v any) {
	switch t := v.(type) {
	case map[string]any:
		for k, c := range t {
			switch k {
			case "containers", "initContainers", "ephemeralContainers":
				if list, ok := c.([]any); ok {
					for _, item := range list {
						if cm, ok := item.(map[string]any); ok {
							delete(cm, "image")
							delete(cm, "resources")
						}
					}
				}
			case "labels":
				if lm, ok := c.(map[string]any); ok {
					for _, l := range volatileLabels {
						delete(lm, l)
					}
				}
			case "annotations":
				if am, ok := c.(map[string]any); ok {
					for a := range am {
						if strings.HasPrefix(a, "checksum/") {
							delete(am, a)
						}
					}
				}
			}
			strip(c)
		}
	case []any:
		for _, c := range t {
			strip(c)
		}
	}
}

func deepCopy(v any) any {
	switch t := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(t))
		for k, c := range t {
			out[k] = deepCopy(c)
		}
		return out
	case []any:
		out := make([]any, len(t))
		for i, c := range t {
			out[i] = deepCopy(c)
		}
		return out
	}
	return v
}
