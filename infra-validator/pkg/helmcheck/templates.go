package helmcheck

import (
	"fmt"
	"path"
	"sort"
	"strings"
	"text/template/parse"

	"helm.sh/helm/v3/pkg/chart"

	"github.com/sluice-gitops/sluice/infra-validator/pkg/report"
)

// unstableFuncs give a different result on every render, so an install
// never matches the approved digest.
var unstableFuncs = map[string]string{
	"now": "the current time", "randAlphaNum": "random text", "randAlpha": "random text",
	"randNumeric": "random text", "randAscii": "random text", "randBytes": "random bytes", "randInt": "a random number",
	"uuidv4": "a random UUID", "genCA": "a new key", "genCAWithKey": "a new certificate", "genPrivateKey": "a new key",
	"genSelfSignedCert": "a new key", "genSelfSignedCertWithKey": "a new certificate", "genSignedCert": "a new key",
	"genSignedCertWithKey": "a new certificate", "htpasswd": "a random salt", "bcrypt": "a random salt",
	"encryptAES": "a random IV", "shuffle": "a random order",
}

// scanTemplates reports template constructs whose output at install time
// differs from the client-only render: lookup (the live cluster), random
// and time functions, the release revision or upgrade flag, and
// .Capabilities.APIVersions. Each gets one warn finding per file.
func (c *checker) scanTemplates(ch *chart.Chart, prefix string) {
	for _, t := range ch.Templates {
		if t == nil || !strings.HasPrefix(t.Name, "templates/") {
			continue
		}
		name := path.Join(prefix, t.Name)
		trees := map[string]*parse.Tree{}
		p := parse.New(name)
		p.Mode = parse.SkipFuncCheck
		if _, err := p.Parse(string(t.Data), "{{", "}}", trees); err != nil {
			continue // rendering reports the parse error with its line
		}
		found := map[string]int{}
		for _, tree := range trees {
			walk(tree, tree.Root, found)
		}
		keys := make([]string, 0, len(found))
		for k := range found {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			line := found[k]
			var msg string
			switch {
			case k == "lookup":
				msg = "uses lookup: rendered without a cluster it returns nothing, so what Helm installs can differ from what was checked and approved (the Helm applier then refuses it with ManifestMismatch)"
			case strings.HasPrefix(k, ".Release."):
				msg = fmt.Sprintf("reads %s, which differs between the checked first-install render and an upgrade; the Helm applier would refuse the upgrade with ManifestMismatch", k)
			case k == ".Capabilities.APIVersions":
				msg = "reads .Capabilities.APIVersions: the output depends on the target cluster's APIs; list them in the validator's API versions so the digest matches"
			default:
				msg = fmt.Sprintf("calls %s, which yields %s on every render, so no install can match the approved digest", k, unstableFuncs[k])
			}
			c.add(report.SeverityWarn, "helm.unstable_render", "", c.chartFile(name), line, msg)
		}
	}
	for _, dep := range ch.Dependencies() {
		c.scanTemplates(dep, path.Join(prefix, "charts", dep.Name()))
	}
}

// walk records, with the line of the first use, the hazardous identifiers
// and fields used in a template tree.
func walk(tree *parse.Tree, n parse.Node, found map[string]int) {
	if n == nil {
		return
	}
	note := func(key string, node parse.Node) {
		if _, ok := found[key]; ok {
			return
		}
		loc, _ := tree.ErrorContext(node)
		line := 0
		if parts := strings.Split(loc, ":"); len(parts) >= 2 {
			fmt.Sscanf(parts[len(parts)-2], "%d", &line)
		}
		found[key] = line
	}
	switch x := n.(type) {
	case *parse.ListNode:
		if x == nil {
			return
		}
		for _, c := range x.Nodes {
			walk(tree, c, found)
		}
	case *parse.ActionNode:
		walk(tree, x.Pipe, found)
	case *parse.PipeNode:
		if x == nil {
			return
		}
		for _, c := range x.Cmds {
			walk(tree, c, found)
		}
	case *parse.CommandNode:
		for _, a := range x.Args {
			walk(tree, a, found)
		}
	case *parse.IdentifierNode:
		if x.Ident == "lookup" {
			note("lookup", x)
		} else if _, ok := unstableFuncs[x.Ident]; ok {
			note(x.Ident, x)
		}
	case *parse.FieldNode:
		checkFields(x.Ident, x, note)
	case *parse.ChainNode:
		walk(tree, x.Node, found)
		if v, ok := x.Node.(*parse.VariableNode); ok && len(v.Ident) == 1 && v.Ident[0] == "$" {
			checkFields(x.Field, x, note)
		}
	case *parse.VariableNode:
		// $.Release.Revision
		if len(x.Ident) > 1 && x.Ident[0] == "$" {
			checkFields(x.Ident[1:], x, note)
		}
	case *parse.IfNode:
		walkBranch(tree, &x.BranchNode, found)
	case *parse.RangeNode:
		walkBranch(tree, &x.BranchNode, found)
	case *parse.WithNode:
		walkBranch(tree, &x.BranchNode, found)
	case *parse.TemplateNode:
		walk(tree, x.Pipe, found)
	}
}

func walkBranch(tree *parse.Tree, b *parse.BranchNode, found map[string]int) {
	walk(tree, b.Pipe, found)
	walk(tree, b.List, found)
	walk(tree, b.ElseList, found)
}

func checkFields(ident []string, node parse.Node, note func(string, parse.Node)) {
	if len(ident) >= 2 && ident[0] == "Release" {
		switch ident[1] {
		case "Revision", "IsUpgrade", "IsInstall":
			note(".Release."+ident[1], node)
		}
	}
	if len(ident) >= 2 && ident[0] == "Capabilities" && ident[1] == "APIVersions" {
		note(".Capabilities.APIVersions", node)
	}
}
