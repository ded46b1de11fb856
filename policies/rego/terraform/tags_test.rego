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

# The effective tags fall back to tags when tags_all is null, and a tag with
# an empty value counts as missing.
test_fail_null_tags_all_falls_back_to_tags if {
	got := tags.deny with input as plan({"tags": {"owner": ""}, "tags_all": null}, {})
	some r in got
	contains(r.msg, "owner")
}

test_pass_null_tags_all_with_owner_in_tags if {
	count(tags.deny) == 0 with input as plan({"tags": {"owner": "a"}, "tags_all": null}, {})
}

# A taggable resource whose tags are both null misses every required tag.
test_fail_null_tags_and_tags_all if {
	count(tags.deny) == 1 with input as plan({"tags": null, "tags_all": null}, {})
}

# A wholly unknown planned value makes the tags unverifiable, not denied.
test_fail_wholly_unknown_value_is_unverifiable if {
	p := plan({"tags": {}}, true)
	count(tags.deny) == 0 with input as p
	count(tags.unverifiable) == 2 with input as p
}

# Only created or updated managed resources are checked.
test_pass_destroyed_and_data_resources if {
	p := {"resource_changes": [
		{"address": "aws_instance.a", "mode": "managed", "type": "aws_instance", "name": "a", "change": {"actions": ["delete"], "before": {"tags": {}}, "after": {"tags": {}}, "after_unknown": {}}},
		{"address": "data.aws_instance.b", "mode": "data", "type": "aws_instance", "name": "b", "change": {"actions": ["read"], "before": null, "after": {"tags": {}}, "after_unknown": {}}},
	]}
	count(tags.deny) == 0 with input as p
}
