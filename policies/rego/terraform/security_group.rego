# Security-group ingress from anywhere (0.0.0.0/0 or ::/0) to an admin port
# (data.sluice.config.terraform.admin_ports, default 22 and 3389). Covers
# aws_security_group inline rules, aws_security_group_rule and
# aws_vpc_security_group_ingress_rule.
package sluice.terraform.security_group

import data.sluice.lib.terraform as tf

open_cidrs := {"0.0.0.0/0", "::/0"}

# Each resource is first tested for an open CIDR, with the expressions
# inline (they run for every security group in the plan); only the rules
# open to anywhere are normalised (open_ingress) and checked for ports.
deny contains {"msg": msg, "resource": rc.address} if {
	some pair in open_ingress
	[rc, rule] := pair
	some port in tf.config("admin_ports", [22, 3389])
	covers(rule, port)
	msg := sprintf("%s: ingress from %s to port %d", [rc.address, rule.cidr, port])
}

# open_ingress holds [rc, rule] for each ingress rule open to anywhere,
# rule as {cidr, from, to, protocol}.
open_ingress contains [rc, rule] if {
	some rc in tf.live_of("aws_security_group")
	some r in rc.change.after.ingress
	some key in ["cidr_blocks", "ipv6_cidr_blocks"]
	some cidr in r[key]
	cidr in open_cidrs
	rule := open_rule(r, cidr, "protocol")
}

open_ingress contains [rc, rule] if {
	some rc in tf.live_of("aws_security_group_rule")
	a := rc.change.after
	a.type == "ingress"
	some key in ["cidr_blocks", "ipv6_cidr_blocks"]
	some cidr in a[key]
	cidr in open_cidrs
	rule := open_rule(a, cidr, "protocol")
}

open_ingress contains [rc, rule] if {
	some rc in tf.live_of("aws_vpc_security_group_ingress_rule")
	a := rc.change.after
	some key in ["cidr_ipv4", "cidr_ipv6"]
	cidr := a[key]
	cidr in open_cidrs
	rule := open_rule(a, cidr, "ip_protocol")
}

# open_rule normalises an ingress rule open from cidr; protocol names the
# attribute holding its protocol. A call is fine here: it runs only for
# the rules open to anywhere.
open_rule(r, cidr, protocol) := {
	"cidr": cidr,
	"from": object.get(r, "from_port", null),
	"to": object.get(r, "to_port", null),
	"protocol": object.get(r, protocol, ""),
}

# A value unknown until apply: the whole planned value (after_unknown is
# true), or any part of one of the attributes the check reads.
unverifiable contains {"msg": msg, "resource": rc.address} if {
	some type, attrs in unknown_attrs
	some rc in tf.live_of(type)
	rc.change.after_unknown == true
	object.get(rc.change, ["after", "type"], "ingress") == "ingress"
	some attr in attrs
	msg := sprintf("%s: %s is known only after apply, so open admin ports cannot be ruled out", [rc.address, attr])
}

unverifiable contains {"msg": msg, "resource": rc.address} if {
	some type, attrs in unknown_attrs
	some rc in tf.live_of(type)
	u := rc.change.after_unknown
	some attr in attrs
	walk(u[attr], [_, true])
	object.get(rc.change, ["after", "type"], "ingress") == "ingress"
	msg := sprintf("%s: %s is known only after apply, so open admin ports cannot be ruled out", [rc.address, attr])
}

# unknown_attrs: resource type -> the attributes the check reads. A rule of
# aws_security_group_rule counts unless its type is known and not ingress.
unknown_attrs := {
	"aws_security_group": ["ingress"],
	"aws_security_group_rule": ["cidr_blocks", "ipv6_cidr_blocks", "from_port", "to_port", "protocol"],
	"aws_vpc_security_group_ingress_rule": ["cidr_ipv4", "cidr_ipv6", "from_port", "to_port", "ip_protocol"],
}

# covers holds when a rule lets traffic reach port: all protocols, or a TCP
# or UDP port range that includes it.
covers(rule, _) if sprintf("%v", [rule.protocol]) in {"-1", "all"}

covers(rule, port) if {
	is_number(rule.from)
	is_number(rule.to)
	rule.from <= port
	port <= rule.to
}
