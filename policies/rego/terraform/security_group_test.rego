package sluice.terraform.security_group_test

import data.sluice.terraform.security_group as sg

plan(type, after, unknown) := {"resource_changes": [{
	"address": sprintf("%s.sg", [type]), "mode": "managed", "type": type, "name": "sg",
	"change": {"actions": ["create"], "before": null, "after": after, "after_unknown": unknown},
}]}

ingress(cidrs, v6, from, to, proto) := {"cidr_blocks": cidrs, "ipv6_cidr_blocks": v6, "from_port": from, "to_port": to, "protocol": proto}

test_pass_https_from_anywhere if {
	after := {"ingress": [ingress(["0.0.0.0/0"], ["::/0"], 443, 443, "tcp")]}
	count(sg.deny) == 0 with input as plan("aws_security_group", after, {"ingress": [{"cidr_blocks": [false], "ipv6_cidr_blocks": [false]}]})
}

test_pass_ssh_from_office if {
	after := {"type": "ingress", "cidr_blocks": ["10.0.0.0/8"], "from_port": 22, "to_port": 22, "protocol": "tcp"}
	count(sg.deny) == 0 with input as plan("aws_security_group_rule", after, {})
	count(sg.unverifiable) == 0 with input as plan("aws_security_group_rule", after, {})
}

test_fail_ssh_from_anywhere if {
	after := {"ingress": [ingress(["0.0.0.0/0"], [], 22, 22, "tcp")]}
	got := sg.deny with input as plan("aws_security_group", after, {})
	some r in got
	contains(r.msg, "port 22")
}

test_fail_rdp_in_range_ipv6 if {
	after := {"type": "ingress", "ipv6_cidr_blocks": ["::/0"], "from_port": 3000, "to_port": 4000, "protocol": "tcp"}
	got := sg.deny with input as plan("aws_security_group_rule", after, {})
	some r in got
	contains(r.msg, "::/0 to port 3389")
}

test_fail_all_protocols_vpc_rule if {
	after := {"cidr_ipv4": "0.0.0.0/0", "ip_protocol": "-1", "from_port": null, "to_port": null}
	count(sg.deny) == 2 with input as plan("aws_vpc_security_group_ingress_rule", after, {})
}

test_fail_unknown_cidr_is_unverifiable if {
	after := {"from_port": 22, "to_port": 22, "ip_protocol": "tcp"}
	got := sg.unverifiable with input as plan("aws_vpc_security_group_ingress_rule", after, {"cidr_ipv4": true})
	count(got) == 1
}

# An aws_security_group_rule whose type is not known yet may be an ingress
# rule, so its unknown attributes are unverifiable; a known egress rule is
# never checked.
test_fail_rule_of_unknown_type_is_unverifiable if {
	after := {"cidr_blocks": ["0.0.0.0/0"], "from_port": 22, "to_port": 22, "protocol": "tcp"}
	got := sg.unverifiable with input as plan("aws_security_group_rule", after, {"type": true, "cidr_blocks": true})
	count(got) == 1
}

test_pass_egress_rule_with_unknown_cidr if {
	after := {"type": "egress", "from_port": 22, "to_port": 22, "protocol": "tcp"}
	p := plan("aws_security_group_rule", after, {"cidr_blocks": true})
	count(sg.unverifiable) == 0 with input as p
	count(sg.deny) == 0 with input as p
}

# Every open rule of a group is reported, each with its port.
test_fail_two_open_rules_of_one_group if {
	after := {"ingress": [ingress(["0.0.0.0/0"], [], 22, 22, "tcp"), ingress([], ["::/0"], 3389, 3389, "tcp")]}
	got := sg.deny with input as plan("aws_security_group", after, {})
	{r.msg | some r in got} == {"aws_security_group.sg: ingress from 0.0.0.0/0 to port 22", "aws_security_group.sg: ingress from ::/0 to port 3389"}
}
