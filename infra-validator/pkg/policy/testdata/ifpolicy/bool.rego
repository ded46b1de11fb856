package main

deny if {
	input.bad
}
