package sluice.terraform.tags_test

import data.sluice.terraform.tags

plan(after, unknown) := {"resource_changes": [{
	"address": "aws_instance.web", "mode": "managed", "type": "aws_instance", "name": "web",
	"change": {"actions": ["create"], "before": null, "after": after, "after_unknown": unknown},
}]}

test_pass_tags_from_default_tags if {
	p := plan({"tags": null, "tags_all": {"owner": "team-a"}}, {})
	count(tags.deny) == 0 with input as p
}

test_pass_untaggable_resource if {
	count(tags.deny) == 0 with input as plan({"input": "x"}, {})
}

test_fail_missing_owner if {
	got := tags.deny with input as plan({"tags": {"env": "prod"}, "tags_all": {"env": "prod"}}, {})
	some r in got
	contains(r.msg, "owner")
}

test_fail_configured_tags if {
	got := tags.deny with input as plan({"tags": {"owner": "a"}}, {})
		with data.sluice.config.terraform.required_tags as ["owner", "cost-center"]
	some r in got
	contains(r.msg, "cost-center")
}

test_fail_unknown_tags_are_unverifiable if {
	p := plan({"tags": {"env": "prod"}}, {"tags_all": true})
	count(tags.unverifiable) == 1 with input as p
	count(tags.deny) == 0 with input as p
}
