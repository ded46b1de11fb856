package metrics

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func counter() prometheus.Counter {
	return prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_test_total", Help: "A test counter."})
}

func TestRegister_aSecondInstanceReplacesTheFirst(t *testing.T) {
	reg := prometheus.NewRegistry()
	first, second := counter(), counter()
	if err := Register(reg, first); err != nil {
		t.Fatal(err)
	}
	first.Add(5)
	if err := Register(reg, second); err != nil {
		t.Fatalf("a second instance: %v", err)
	}
	second.Inc()
	if got, err := testutil.GatherAndCount(reg, "sluice_test_total"); err != nil || got != 1 {
		t.Fatalf("series = %d (%v), want one", got, err)
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader("# HELP sluice_test_total A test counter.\n# TYPE sluice_test_total counter\nsluice_test_total 1\n"), "sluice_test_total"); err != nil {
		t.Fatalf("the registry does not report the running instance: %v", err)
	}
}

func TestRegister_aClashOfAnotherKindIsAnError(t *testing.T) {
	reg := prometheus.NewRegistry()
	if err := Register(reg, counter()); err != nil {
		t.Fatal(err)
	}
	other := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_test_total", Help: "A test counter."}, []string{"result"})
	err := Register(reg, other)
	if err == nil || !strings.Contains(err.Error(), "register metrics") {
		t.Fatalf("err = %v, want a registration error", err)
	}
}
