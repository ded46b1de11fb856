package main

deny contains msg if {
	msg := sprintf("x %s", [input.name)
}
