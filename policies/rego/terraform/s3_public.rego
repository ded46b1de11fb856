# S3 buckets or ACLs open to the public: public canned ACLs, grants to the
# AllUsers/AuthenticatedUsers groups, a public access block that is switched
# off, and bucket policies that allow any principal without a condition.
package sluice.terraform.s3_public

import data.sluice.lib.terraform as tf

public_acls := {"public-read", "public-read-write", "authenticated-read"}

public_groups := {
	"http://acs.amazonaws.com/groups/global/AllUsers",
	"http://acs.amazonaws.com/groups/global/AuthenticatedUsers",
}

block_flags := ["block_public_acls", "block_public_policy", "ignore_public_acls", "restrict_public_buckets"]

deny contains tf.result(rc, msg) if {
	some type in ["aws_s3_bucket", "aws_s3_bucket_acl"]
	some rc in tf.live_of(type)
	acl := rc.change.after.acl
	acl in public_acls
	msg := sprintf("%s: canned ACL %q opens the bucket to the public", [rc.address, acl])
}

deny contains tf.result(rc, msg) if {
	some rc in tf.live_of("aws_s3_bucket_acl")
	some policy in object.get(tf.after(rc), "access_control_policy", [])
	some grant in object.get(policy, "grant", [])
	some grantee in object.get(grant, "grantee", [])
	grantee.uri in public_groups
	msg := sprintf("%s: grants %s to %s", [rc.address, object.get(grant, "permission", "access"), grantee.uri])
}

deny contains tf.result(rc, msg) if {
	some rc in tf.live_of("aws_s3_bucket_public_access_block")
	some flag in block_flags
	not tf.unknown(rc, flag)
	object.get(tf.after(rc), flag, false) != true
	msg := sprintf("%s: %s is not true, so the bucket can be made public", [rc.address, flag])
}

deny contains tf.result(rc, msg) if {
	some rc in tf.live_of("aws_s3_bucket_policy")
	some statement in statements(tf.after(rc).policy)
	object.get(statement, "Effect", "") == "Allow"
	any_principal(object.get(statement, "Principal", null))
	not statement.Condition
	msg := sprintf("%s: a statement allows any principal (\"*\") without a condition", [rc.address])
}

# The unknown test is inline (see tf.has_unknown): it runs for every
# bucket in the plan.
unverifiable contains {"msg": msg, "resource": rc.address} if {
	some type, attrs in unknown_attrs
	some rc in tf.live_of(type)
	u := rc.change.after_unknown
	some attr in attrs
	walk(u[attr], [_, true])
	msg := sprintf("%s: %s is known only after apply, so public access cannot be checked", [rc.address, attr])
}

unverifiable contains {"msg": msg, "resource": rc.address} if {
	some type, attrs in unknown_attrs
	some rc in tf.live_of(type)
	rc.change.after_unknown == true
	some attr in attrs
	msg := sprintf("%s: %s is known only after apply, so public access cannot be checked", [rc.address, attr])
}

# unknown_attrs: resource type -> attributes public access depends on.
unknown_attrs := {
	"aws_s3_bucket": ["acl"],
	"aws_s3_bucket_acl": ["acl", "access_control_policy"],
	"aws_s3_bucket_public_access_block": block_flags,
	"aws_s3_bucket_policy": ["policy"],
}

# statements are the Statement entries of a policy document in JSON; a
# single statement object counts as a list of one.
statements(doc) := s if {
	is_string(doc)
	json.is_valid(doc)
	s := as_list(object.get(json.unmarshal(doc), "Statement", []))
} else := []

as_list(x) := x if is_array(x)

else := [x]

any_principal("*")

any_principal(p) if {
	is_object(p)
	some v in as_list(object.get(p, "AWS", []))
	v == "*"
}
