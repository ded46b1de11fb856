# Copied unchanged from github.com/open-policy-agent/conftest v0.71.1, examples/kubernetes/combine/combine.rego
# Copyright The Conftest Authors. Apache License 2.0: see LICENSE in this folder.
package main
import rego.v1

violation := [msg] if {
    some i
    input[i].contents.kind == "Deployment"
    deployment := input[i].contents
    not service_selects_app(deployment.spec.selector.matchLabels.app)
    msg := sprintf("Deployment '%v' has no matching service", [deployment.metadata.name])
}

service_selects_app(app) if {
    some i
    input[i].contents.kind == "Service"
    service := input[i].contents
    service.spec.selector.app == app
}
