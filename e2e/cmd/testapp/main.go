// Command testapp is the workload of the e2e tests' Helm charts: a static
// HTTP server whose readiness endpoint answers only after -ready-after, so
// a test can tell "installed" from "Ready".
package main

import (
	"flag"
	"fmt"
	"log"
	"net/http"
	"os"
	"sync/atomic"
	"time"
)

func main() {
	addr := flag.String("addr", ":8080", "listen address")
	readyAfter := flag.Duration("ready-after", 0, "answer /readyz with 503 for this long after start")
	flag.Parse()
	var ready atomic.Bool
	go func() {
		time.Sleep(*readyAfter) // the delay is the point: a pod that is Running but not yet Ready
		ready.Store(true)
	}()
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !ready.Load() {
			http.Error(w, "not ready", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
		host, _ := os.Hostname()
		fmt.Fprintf(w, "testapp %s %s\n", os.Getenv("TESTAPP_MESSAGE"), host)
	})
	log.Printf("testapp listening on %s", *addr)
	log.Fatal(http.ListenAndServe(*addr, mux))
}
