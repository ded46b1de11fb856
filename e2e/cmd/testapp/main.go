// Command testapp is the workload of the e2e tests' Helm charts: a static
// HTTP server whose health endpoints (/healthz and /readyz; the golden-path
// chart probes /healthz for readiness) answer 503 for the first
// -ready-after (or $TESTAPP_READY_AFTER, which a chart sets through its
// ConfigMap), so a test can tell "installed" from "Ready". /metrics gives
// the share of requests it would answer with errors, $TESTAPP_ERROR_RATE
// (0 when unset), as the gauge app_error_ratio: a "bad version" is one
// deployed with a higher rate, so verification on live metrics fails it.
package main

import (
	"flag"
	"fmt"
	"log"
	"net/http"
	"os"
	"strconv"
	"sync/atomic"
	"time"
)

func main() {
	addr := flag.String("addr", ":8080", "listen address")
	readyAfter := flag.Duration("ready-after", envDuration("TESTAPP_READY_AFTER"), "answer the health endpoints with 503 for this long after start")
	flag.Parse()
	var ready atomic.Bool
	go func() {
		time.Sleep(*readyAfter) // the delay is the point: a pod that is Running but not yet Ready
		ready.Store(true)
	}()
	health := func(w http.ResponseWriter, _ *http.Request) {
		if !ready.Load() {
			http.Error(w, "not ready", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", health)
	mux.HandleFunc("/readyz", health)
	errorRate, _ := strconv.ParseFloat(os.Getenv("TESTAPP_ERROR_RATE"), 64)
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, "# TYPE app_error_ratio gauge\napp_error_ratio %g\n", errorRate)
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
		host, _ := os.Hostname()
		fmt.Fprintf(w, "testapp %s\n", host)
	})
	log.Printf("testapp listening on %s, ready after %s", *addr, *readyAfter)
	log.Fatal(http.ListenAndServe(*addr, mux))
}

// envDuration parses the duration in the environment variable name; unset
// or invalid means none.
func envDuration(name string) time.Duration {
	d, err := time.ParseDuration(os.Getenv(name))
	if err != nil {
		return 0
	}
	return d
}
