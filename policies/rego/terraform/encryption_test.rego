package sluice.terraform.encryption_test

import data.sluice.terraform.encryption as enc

rc(type, name, after, unknown) := {
	"address": sprintf("%s.%s", [type, name]), "mode": "managed", "type": type, "name": name,
	"change": {"actions": ["create"], "before": null, "after": after, "after_unknown": unknown},
}

plan(changes) := {"resource_changes": changes}

test_pass_encrypted_volume_and_db if {
	p := plan([
		rc("aws_ebs_volume", "v", {"encrypted": true}, {}),
		rc("aws_db_instance", "db", {"storage_encrypted": true}, {}),
		rc("aws_instance", "i", {"root_block_device": [{"encrypted": true}]}, {}),
	])
	count(enc.deny) == 0 with input as p
	count(enc.unverifiable) == 0 with input as p
}

test_pass_bucket_with_sse_resource if {
	p := {
		"resource_changes": [
			rc("aws_s3_bucket", "logs", {"bucket": "logs"}, {}),
			rc("aws_s3_bucket_server_side_encryption_configuration", "logs", {}, {"bucket": true}),
		],
		"configuration": {"root_module": {"resources": [{
			"address": "aws_s3_bucket_server_side_encryption_configuration.logs",
			"type": "aws_s3_bucket_server_side_encryption_configuration",
			"expressions": {"bucket": {"references": ["aws_s3_bucket.logs.id", "aws_s3_bucket.logs"]}},
		}]}},
	}
	count(enc.deny) == 0 with input as p
}

test_pass_bucket_named_by_planned_sse if {
	p := plan([
		rc("aws_s3_bucket", "a", {"bucket": "bucket-a"}, {}),
		rc("aws_s3_bucket", "b", {"bucket": "bucket-b"}, {}),
		rc("aws_s3_bucket_server_side_encryption_configuration", "a", {"bucket": "bucket-a"}, {}),
	])
	got := enc.deny with input as p
	{r.resource | some r in got} == {"aws_s3_bucket.b"}
}

test_fail_unencrypted_volume if {
	got := enc.deny with input as plan([rc("aws_ebs_volume", "v", {"encrypted": false}, {})])
	count(got) == 1
}

test_fail_unencrypted_db_and_instance_disk if {
	p := plan([
		rc("aws_db_instance", "db", {"storage_encrypted": false}, {}),
		rc("aws_instance", "i", {"root_block_device": [{"encrypted": false}]}, {}),
	])
	count(enc.deny) == 2 with input as p
}

test_fail_bucket_without_encryption if {
	got := enc.deny with input as plan([rc("aws_s3_bucket", "data", {"bucket": "data"}, {})])
	some r in got
	r.resource == "aws_s3_bucket.data"
}

test_fail_unknown_encryption_is_unverifiable if {
	p := plan([rc("aws_ebs_volume", "v", {}, {"encrypted": true})])
	count(enc.unverifiable) == 1 with input as p
	count(enc.deny) == 0 with input as p
}

# A change without after_unknown is checked like one with nothing unknown.
test_fail_unencrypted_volume_without_after_unknown if {
	p := plan([{
		"address": "aws_ebs_volume.v", "mode": "managed", "type": "aws_ebs_volume", "name": "v",
		"change": {"actions": ["update"], "before": {}, "after": {"encrypted": false}},
	}])
	count(enc.deny) == 1 with input as p
}

# A wholly unknown planned value is unverifiable for every checked block.
test_fail_wholly_unknown_instance_is_unverifiable if {
	p := plan([rc("aws_instance", "i", {}, true)])
	count(enc.deny) == 0 with input as p
	count(enc.unverifiable) == 2 with input as p
}

# A nested unknown (one device's flag) makes the block unverifiable.
test_fail_nested_unknown_block_is_unverifiable if {
	p := plan([rc("aws_instance", "i", {"ebs_block_device": [{}]}, {"ebs_block_device": [{"encrypted": true}]})])
	count(enc.deny) == 0 with input as p
	count(enc.unverifiable) == 1 with input as p
}
