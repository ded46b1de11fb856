package sluice.terraform.s3_public_test

import data.sluice.terraform.s3_public

plan(type, after, unknown) := {"resource_changes": [{
	"address": sprintf("%s.b", [type]), "mode": "managed", "type": type, "name": "b",
	"change": {"actions": ["create"], "before": null, "after": after, "after_unknown": unknown},
}]}

test_pass_private_acl if {
	count(s3_public.deny) == 0 with input as plan("aws_s3_bucket_acl", {"acl": "private"}, {})
}

test_pass_full_public_access_block if {
	after := {"block_public_acls": true, "block_public_policy": true, "ignore_public_acls": true, "restrict_public_buckets": true}
	count(s3_public.deny) == 0 with input as plan("aws_s3_bucket_public_access_block", after, {})
}

test_pass_policy_with_condition if {
	doc := json.marshal({"Statement": [{"Effect": "Allow", "Principal": "*", "Action": "s3:GetObject", "Condition": {"StringEquals": {"aws:SourceVpce": "vpce-1"}}}]})
	count(s3_public.deny) == 0 with input as plan("aws_s3_bucket_policy", {"policy": doc}, {})
}

test_fail_public_read_acl if {
	got := s3_public.deny with input as plan("aws_s3_bucket_acl", {"acl": "public-read"}, {})
	some r in got
	contains(r.msg, "public-read")
}

test_fail_all_users_grant if {
	after := {"access_control_policy": [{"grant": [{"permission": "READ", "grantee": [{"type": "Group", "uri": "http://acs.amazonaws.com/groups/global/AllUsers"}]}]}]}
	count(s3_public.deny) == 1 with input as plan("aws_s3_bucket_acl", after, {})
}

test_fail_public_access_block_off if {
	after := {"block_public_acls": true, "block_public_policy": false, "ignore_public_acls": true, "restrict_public_buckets": true}
	got := s3_public.deny with input as plan("aws_s3_bucket_public_access_block", after, {})
	count(got) == 1
	some r in got
	contains(r.msg, "block_public_policy")
}

test_fail_policy_any_principal if {
	doc := json.marshal({"Statement": {"Effect": "Allow", "Principal": {"AWS": "*"}, "Action": "s3:GetObject"}})
	count(s3_public.deny) == 1 with input as plan("aws_s3_bucket_policy", {"policy": doc}, {})
}

test_fail_unknown_policy_is_unverifiable if {
	got := s3_public.unverifiable with input as plan("aws_s3_bucket_policy", {}, {"policy": true})
	count(got) == 1
	count(s3_public.deny) == 0 with input as plan("aws_s3_bucket_policy", {}, {"policy": true})
}
