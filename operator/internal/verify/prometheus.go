package verify

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// DefaultQueryTimeout bounds one query when Prometheus.Timeout is zero.
const DefaultQueryTimeout = 30 * time.Second

// Prometheus takes measurements with the Prometheus HTTP API, one client
// per URL (kept, so connections are reused across passes).
type Prometheus struct {
	// Timeout bounds one query (the request and Prometheus' own
	// evaluation); DefaultQueryTimeout when zero.
	Timeout time.Duration

	mu      sync.Mutex
	clients map[string]promv1.API
}

// errNoData is a query without a usable number: no series, or NaN/Inf.
var errNoData = errors.New("no data")

// api returns the client for url.
func (p *Prometheus) api(url string) (promv1.API, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if c, ok := p.clients[url]; ok {
		return c, nil
	}
	c, err := api.NewClient(api.Config{Address: url})
	if err != nil {
		return nil, fmt.Errorf("prometheus client for %s: %w", url, err)
	}
	if p.clients == nil {
		p.clients = map[string]promv1.API{}
	}
	p.clients[url] = promv1.NewAPI(c)
	return p.clients[url], nil
}

func (p *Prometheus) timeout() time.Duration {
	if p.Timeout > 0 {
		return p.Timeout
	}
	return DefaultQueryTimeout
}

// Measure runs check's query (already rendered) against url at now and
// judges the result; see the package doc for every outcome.
func (p *Prometheus) Measure(ctx context.Context, url string, check *sluicev1.MetricCheck, query string, now time.Time) sluicev1.Measurement {
	m := sluicev1.Measurement{Check: check.Name, Query: query, Time: metav1.NewMicroTime(now)}
	value, err := p.query(ctx, url, query, now)
	switch {
	case errors.Is(err, errNoData):
		m.Value = value
		if check.NoDataOrDefault() == sluicev1.NoDataInconclusive {
			m.Phase, m.Message = sluicev1.MeasurementInconclusive, err.Error()+" (noData: inconclusive)"
		} else {
			m.Phase, m.Message = sluicev1.MeasurementFailed, err.Error()+" (noData: fail)"
		}
		return m
	case err != nil:
		m.Phase, m.Message = sluicev1.MeasurementError, err.Error()
		return m
	}
	m.Value = value
	v, _ := strconv.ParseFloat(value, 64)
	m.Phase, m.Message = judge(check, v)
	return m
}

// judge applies the check's conditions to v (they were validated when the
// change was built; a condition that does not parse here is an error, not
// a pass).
func judge(check *sluicev1.MetricCheck, v float64) (sluicev1.MeasurementPhase, string) {
	var success, failure *sluicev1.Condition
	for _, c := range []struct {
		text string
		into **sluicev1.Condition
	}{{check.SuccessCondition, &success}, {check.FailureCondition, &failure}} {
		if c.text == "" {
			continue
		}
		cmp, err := sluicev1.ParseCondition(c.text)
		if err != nil {
			return sluicev1.MeasurementError, err.Error()
		}
		*c.into = &cmp
	}
	switch {
	case failure != nil && failure.Holds(v):
		return sluicev1.MeasurementFailed, fmt.Sprintf("failureCondition %q holds", check.FailureCondition)
	case success != nil && success.Holds(v):
		return sluicev1.MeasurementSuccessful, ""
	case success != nil && failure != nil:
		return sluicev1.MeasurementInconclusive, fmt.Sprintf("neither %q nor %q holds", check.SuccessCondition, check.FailureCondition)
	case success != nil:
		return sluicev1.MeasurementFailed, fmt.Sprintf("successCondition %q does not hold", check.SuccessCondition)
	}
	return sluicev1.MeasurementSuccessful, ""
}

// query asks Prometheus for one number. It returns errNoData (wrapped)
// for no series or a NaN/Inf value (with the value as returned), and a
// descriptive error for several series, a refused query or a Prometheus
// that could not answer.
func (p *Prometheus) query(ctx context.Context, url, query string, now time.Time) (string, error) {
	c, err := p.api(url)
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(ctx, p.timeout())
	defer cancel()
	val, _, _, err := c.Query(ctx, query, now, promv1.WithTimeout(p.timeout()))
	if err != nil {
		return "", queryError(err)
	}
	switch v := val.(type) {
	case *model.Scalar:
		return number(float64(v.Value))
	case model.Vector:
		switch len(v) {
		case 0:
			return "", fmt.Errorf("%w: the query returned no series", errNoData)
		case 1:
			return number(float64(v[0].Value))
		}
		return "", fmt.Errorf("the query returned %d series (%s, …); a check needs one: aggregate it (sum, max)", len(v), v[0].Metric)
	}
	return "", fmt.Errorf("the query returned a %s; a check needs an instant vector of one series or a scalar", val.Type())
}

// number formats f, or says it is not a usable number.
func number(f float64) (string, error) {
	s := strconv.FormatFloat(f, 'g', -1, 64)
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return s, fmt.Errorf("%w: the query returned %s", errNoData, s)
	}
	return s, nil
}

// queryError says what went wrong with a query, by the kind of error the
// API returned.
func queryError(err error) error {
	var perr *promv1.Error
	if errors.As(err, &perr) {
		switch perr.Type {
		case promv1.ErrBadData:
			return fmt.Errorf("prometheus refused the query: %s", perr.Msg)
		case promv1.ErrTimeout, promv1.ErrCanceled:
			return fmt.Errorf("prometheus timed out: %s", perr.Msg)
		case promv1.ErrServer:
			return fmt.Errorf("prometheus answered with a server error: %s", perr.Msg)
		}
		return fmt.Errorf("prometheus: %s: %s", perr.Type, perr.Msg)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("prometheus did not answer in time: %w", err)
	}
	return fmt.Errorf("prometheus could not be asked: %w", err)
}
