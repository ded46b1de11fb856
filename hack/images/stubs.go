package main

import "io"

func runRelease(args []string, stdout, stderr io.Writer) error { return &UsageError{Msg: "release: not built yet"} }
func runVerify(args []string, stdout, stderr io.Writer) error  { return &UsageError{Msg: "verify: not built yet"} }
func runPush(args []string, stdout, stderr io.Writer) error    { return &UsageError{Msg: "push: not built yet"} }
