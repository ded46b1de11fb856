# Security-group ingress from anywhere (0.0.0.0/0 or ::/0) to an admin port
# (data.sluice.config.terraform.admin_ports, default 22 and 3389). Covers
# aws_security_group inline rules, aws_security_group_rule and
# aws_vpc_security_group_ingress_rule.
package sluice.terraform.security_group

import data.sluice.lib.terraform as tf

open_cidrs := {"0.0.0.0/0", "::/0"}

sg_types := ["aws_security_group", "aws_security_group_rule", "aws_vpc_security_group_ingress_rule"]

deny contains tf.result(rc, msg) if {
	some type in sg_types
	some rc in tf.live_of(type)
	some rule in ingress(rc)
	some cidr in rule.cidrs
	cidr in open_cidrs
	some port in tf.config("admin_ports", [22, 3389])
	covers(rule, port)
	msg := sprintf("%s: ingress from %s to port %d", [rc.address, cidr, port])
}

unverifiable contains tf.result(rc, msg) if {
	some type in sg_types
	some rc in tf.live_of(type)
	some attr in unknown_attrs(rc)
	tf.unknown(rc, attr)
	msg := sprintf("%s: %s is known only after apply, so open admin ports cannot be ruled out", [rc.address, attr])
}

unknown_attrs(rc) := ["ingress"] if {
	rc.type == "aws_security_group"
} else := ["cidr_blocks", "ipv6_cidr_blocks", "from_port", "to_port", "protocol"] if {
	rc.type == "aws_security_group_rule"
	tf.after(rc).type == "ingress"
} else := ["cidr_ipv4", "cidr_ipv6", "from_port", "to_port", "ip_protocol"] if {
	rc.type == "aws_vpc_security_group_ingress_rule"
} else := []

# ingress lists the ingress rules of a change as {cidrs, from, to, protocol}.
ingress(rc) := [rule |
	some r in object.get(tf.after(rc), "ingress", [])
	is_object(r)
	rule := {
		"cidrs": array.concat(list(r, "cidr_blocks"), list(r, "ipv6_cidr_blocks")),
		"from": object.get(r, "from_port", null),
		"to": object.get(r, "to_port", null),
		"protocol": object.get(r, "protocol", ""),
	}
] if rc.type == "aws_security_group"

ingress(rc) := [rule] if {
	rc.type == "aws_security_group_rule"
	a := tf.after(rc)
	a.type == "ingress"
	rule := {
		"cidrs": array.concat(list(a, "cidr_blocks"), list(a, "ipv6_cidr_blocks")),
		"from": object.get(a, "from_port", null),
		"to": object.get(a, "to_port", null),
		"protocol": object.get(a, "protocol", ""),
	}
}

ingress(rc) := [rule] if {
	rc.type == "aws_vpc_security_group_ingress_rule"
	a := tf.after(rc)
	rule := {
		"cidrs": [c | some k in ["cidr_ipv4", "cidr_ipv6"]; c := a[k]; is_string(c)],
		"from": object.get(a, "from_port", null),
		"to": object.get(a, "to_port", null),
		"protocol": object.get(a, "ip_protocol", ""),
	}
}

list(obj, key) := l if {
	l := obj[key]
	is_array(l)
} else := []

# covers holds when a rule lets traffic reach port: all protocols, or a TCP
# or UDP port range that includes it.
covers(rule, _) if sprintf("%v", [rule.protocol]) in {"-1", "all"}

covers(rule, port) if {
	is_number(rule.from)
	is_number(rule.to)
	rule.from <= port
	port <= rule.to
}
