# Missing encryption at rest on EBS volumes (standalone and instance block
# devices), RDS instances and clusters, and new S3 buckets without a
# server-side encryption configuration.
package sluice.terraform.encryption

import data.sluice.lib.terraform as tf

# flag_checks: resource type -> attribute that must be true.
flag_checks := {
	"aws_ebs_volume": "encrypted",
	"aws_db_instance": "storage_encrypted",
	"aws_rds_cluster": "storage_encrypted",
	"aws_docdb_cluster": "storage_encrypted",
	"aws_neptune_cluster": "storage_encrypted",
	"aws_efs_file_system": "encrypted",
}

# The checks below run for every volume, database and instance in the plan,
# so the unknown test is inline instead of a call of tf.unknown: a value is
# unknown when the whole planned value is (after_unknown is true) or any
# part of the attribute is.
deny contains {"msg": msg, "resource": rc.address} if {
	some type, attr in flag_checks
	some rc in tf.live_of(type)
	object.get(rc.change.after, attr, null) != true
	u := object.get(rc.change, "after_unknown", {})
	u != true
	not tf.has_unknown(u, attr)
	msg := sprintf("%s: %s is not true, so the data is stored unencrypted", [rc.address, attr])
}

unverifiable contains {"msg": msg, "resource": rc.address} if {
	some type, attr in flag_checks
	some rc in tf.live_of(type)
	walk(rc.change.after_unknown[attr], [_, true])
	msg := sprintf("%s: %s is known only after apply, so encryption cannot be checked", [rc.address, attr])
}

unverifiable contains {"msg": msg, "resource": rc.address} if {
	some type, attr in flag_checks
	some rc in tf.live_of(type)
	rc.change.after_unknown == true
	msg := sprintf("%s: %s is known only after apply, so encryption cannot be checked", [rc.address, attr])
}

deny contains {"msg": msg, "resource": rc.address} if {
	some rc in tf.live_of("aws_instance")
	some block in ["root_block_device", "ebs_block_device"]
	some i, dev in rc.change.after[block]
	object.get(dev, "encrypted", false) == false
	u := object.get(rc.change, "after_unknown", {})
	u != true
	not tf.has_unknown(u, block)
	msg := sprintf("%s: %s[%d] is not encrypted", [rc.address, block, i])
}

unverifiable contains {"msg": msg, "resource": rc.address} if {
	some rc in tf.live_of("aws_instance")
	some block in ["root_block_device", "ebs_block_device"]
	walk(rc.change.after_unknown[block], [_, true])
	msg := sprintf("%s: %s is known only after apply, so encryption cannot be checked", [rc.address, block])
}

unverifiable contains {"msg": msg, "resource": rc.address} if {
	some rc in tf.live_of("aws_instance")
	rc.change.after_unknown == true
	some block in ["root_block_device", "ebs_block_device"]
	msg := sprintf("%s: %s is known only after apply, so encryption cannot be checked", [rc.address, block])
}

# A new bucket needs an inline server_side_encryption_configuration or an
# aws_s3_bucket_server_side_encryption_configuration that points at it.
deny contains tf.result(rc, msg) if {
	some rc in tf.changes_of("aws_s3_bucket")
	"create" in object.get(rc, ["change", "actions"], [])
	count(object.get(tf.after(rc), "server_side_encryption_configuration", [])) == 0
	not sse_configured(rc)
	msg := sprintf("%s: new bucket has no server-side encryption configuration", [rc.address])
}

sse_type := "aws_s3_bucket_server_side_encryption_configuration"

# sse_configured holds when the configuration has an SSE resource whose bucket
# expression references this bucket, or a planned SSE resource names it. The
# references and bucket names are gathered once per plan (sse_refs,
# sse_buckets), so checking many new buckets stays linear in the plan size.
sse_configured(rc) if {
	some ref in {sprintf("%s.%s", [rc.type, rc.name]), sprintf("%s.%s.id", [rc.type, rc.name]), sprintf("%s.%s.bucket", [rc.type, rc.name])}
	ref in sse_refs
}

sse_configured(rc) if {
	name := tf.after(rc).bucket
	is_string(name)
	name in sse_buckets
}

# sse_refs are the bucket references of the SSE resources in the configuration.
sse_refs contains ref if {
	walk(object.get(input, "configuration", {}), [_, res])
	is_object(res)
	object.get(res, "type", "") == sse_type
	some ref in object.get(res, ["expressions", "bucket", "references"], [])
}

# sse_buckets are the bucket names of the planned SSE resources.
sse_buckets contains tf.after(other).bucket if {
	some other in tf.changes_of(sse_type)
}
