# A conftest policy reading --data (package main, file data.yaml).
package main

import rego.v1

warn_region contains msg if {
	some rc in input.resource_changes
	region := object.get(rc.change.after, "availability_zone", "")
	region != ""
	not startswith(region, data.allowed_region_prefix)
	msg := sprintf("%s: availability zone %s outside %s", [rc.address, region, data.allowed_region_prefix])
}
