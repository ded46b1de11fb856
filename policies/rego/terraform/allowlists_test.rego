package sluice.terraform.allowlists_test

import data.sluice.terraform.allowlists

plan(after, unknown) := {"resource_changes": [{
	"address": "aws_instance.web", "mode": "managed", "type": "aws_instance", "name": "web",
	"change": {"actions": ["create"], "before": null, "after": after, "after_unknown": unknown},
}]}

test_pass_allowed_type_any_ami_by_default if {
	count(allowlists.deny) == 0 with input as plan({"instance_type": "t3.micro", "ami": "ami-123"}, {})
}

test_pass_allowed_ami if {
	count(allowlists.deny) == 0 with input as plan({"instance_type": "m6i.large", "ami": "ami-0abc"}, {})
		with data.sluice.config.terraform.allowed_amis as ["ami-0abc"]
}

test_fail_instance_type_outside_allowlist if {
	got := allowlists.deny with input as plan({"instance_type": "p4d.24xlarge", "ami": "ami-1"}, {})
	some r in got
	contains(r.msg, "p4d.24xlarge")
}

test_fail_ami_outside_allowlist if {
	got := allowlists.deny with input as plan({"instance_type": "t3.micro", "ami": "ami-evil"}, {})
		with data.sluice.config.terraform.allowed_amis as ["ami-0abc"]
	count(got) == 1
}

test_fail_unknown_ami_is_unverifiable if {
	p := plan({"instance_type": "t3.micro"}, {"ami": true})
	count(allowlists.unverifiable) == 1 with input as p with data.sluice.config.terraform.allowed_amis as ["ami-0abc"]
}
