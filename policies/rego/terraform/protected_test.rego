package sluice.terraform.protected_test

import data.sluice.terraform.protected

plan(rc) := {"format_version": "1.2", "resource_changes": [rc]}

change(type, actions, before) := {
	"address": sprintf("%s.this", [type]),
	"mode": "managed",
	"type": type,
	"name": "this",
	"change": {"actions": actions, "before": before, "after": null, "after_unknown": {}},
}

test_pass_update_of_protected_type if {
	rc := object.union(change("aws_db_instance", ["update"], {}), {"change": {"actions": ["update"], "after": {}}})
	count(protected.deny) == 0 with input as plan(rc)
}

test_pass_destroy_of_unprotected_resource if {
	count(protected.deny) == 0 with input as plan(change("aws_instance", ["delete"], {"tags": {"protected": "false"}}))
}

test_fail_destroy_of_protected_type if {
	got := protected.deny with input as plan(change("aws_db_instance", ["delete"], {}))
	some r in got
	r.resource == "aws_db_instance.this"
	contains(r.msg, "destroyed")
}

test_fail_replace_of_tagged_resource if {
	got := protected.deny with input as plan(change("aws_instance", ["delete", "create"], {"tags_all": {"protected": "true"}}))
	some r in got
	contains(r.msg, "replaced")
	contains(r.msg, "tag protected=true")
}

test_fail_configurable_type_list if {
	got := protected.deny with input as plan(change("terraform_data", ["delete"], {}))
		with data.sluice.config.terraform.protected_types as ["terraform_data"]
	count(got) == 1
}
