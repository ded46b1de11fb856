# A conftest policy for Terraform plans, as teams write them for
# `conftest test plan.json`. Used unchanged by infra-validator.
package main

import rego.v1

deny contains msg if {
	some rc in input.resource_changes
	"delete" in rc.change.actions
	msg := sprintf("%s: deleting resources is not allowed", [rc.address])
}

warn contains msg if {
	some rc in input.resource_changes
	rc.change.actions == ["create"]
	msg := sprintf("%s: new resource", [rc.address])
}

violation contains {"msg": msg, "details": {"type": rc.type}} if {
	some rc in input.resource_changes
	rc.type == "aws_instance"
	not rc.change.after.tags.owner
	msg := sprintf("%s: instance has no owner tag", [rc.address])
}

deny_public_bucket contains msg if {
	some rc in input.resource_changes
	rc.type == "aws_s3_bucket_acl"
	rc.change.after.acl == "public-read"
	msg := sprintf("%s: public bucket", [rc.address])
}

# An exception: the team accepts the instance-type rule below.
exception contains rules if {
	input.resource_changes
	rules := ["instance_type"]
}

deny_instance_type contains msg if {
	some rc in input.resource_changes
	rc.type == "aws_instance"
	msg := sprintf("%s: instance type check (excepted)", [rc.address])
}
