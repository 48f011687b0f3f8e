package main

import (
	"strconv"
	"time"

	"github.com/lash-run/lash"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// metrics are the node's Prometheus metrics, fed by its events and by the
// node API.
type metrics struct {
	reg *prometheus.Registry

	turnsCommitted  prometheus.Counter
	turnsFailed     prometheus.Counter
	turnsAborted    *prometheus.CounterVec
	inputsRefused   prometheus.Counter
	settingsLeft    prometheus.Counter
	turnSeconds     prometheus.Histogram
	effectsExecuted *prometheus.CounterVec
	effectsReplayed *prometheus.CounterVec
	effectSeconds   *prometheus.HistogramVec
	leaseClaims     prometheus.Counter
	leaseBusy       prometheus.Counter
	leaseLosses     prometheus.Counter
	commitConflicts prometheus.Counter
	wakes           prometheus.Counter
	signalsRefused  prometheus.Counter
	apiRequests     *prometheus.CounterVec
	apiSeconds      *prometheus.HistogramVec
	toolProblems    prometheus.Counter
	takeovers       prometheus.Counter
	modelCalls      *prometheus.CounterVec
	modelTokens     *prometheus.CounterVec
	modelErrors     *prometheus.CounterVec
	toolCalls       *prometheus.CounterVec
}

// latencyBuckets run from a millisecond to ten minutes: effects and turns
// range from a journal write to a long model call.
var latencyBuckets = []float64{.001, .005, .025, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600}

func newMetrics() *metrics {
	m := &metrics{reg: prometheus.NewRegistry()}
	counter := func(name, help string) prometheus.Counter {
		c := prometheus.NewCounter(prometheus.CounterOpts{Namespace: "lash", Name: name, Help: help})
		m.reg.MustRegister(c)
		return c
	}
	m.turnsCommitted = counter("turns_committed_total", "Turns this node committed.")
	m.turnsFailed = counter("turns_failed_total", "Session runs that stopped without committing their turn (it is tried again, and finished by replay).")
	m.inputsRefused = counter("inputs_refused_total", "Inputs consumed without a turn because they were refused (unreadable, a key used for other content, a decision for no suspended call), and inputs set aside because their subject names no session.")
	m.settingsLeft = counter("settings_mismatches_total", "Session runs left to another node because their turn began under turn settings this node does not run.")
	m.turnsAborted = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "lash", Name: "turns_aborted_total",
		Help: "Turns that could never succeed, committed as failed, by code (nondeterminism, attempts_exhausted, ...)."}, []string{"code"})
	m.leaseClaims = counter("lease_claims_total", "Session leases this node took.")
	m.leaseBusy = counter("lease_busy_total", "Session lease claims that found another holder.")
	m.leaseLosses = counter("lease_losses_total", "Session leases lost while running a turn.")
	m.commitConflicts = counter("commit_conflicts_total", "Commits refused: fenced out by a newer holder, or a different commit of the same turn.")
	m.wakes = counter("wakes_total", "Parked calls woken by a signal or a timer.")
	m.signalsRefused = counter("signals_refused_total", "Signals passed over (their payload cannot be delivered), and signals and fired timers given up after their handling failed too often.")
	m.toolProblems = counter("tool_discovery_problems_total", "Tool endpoints left out by discovery: malformed, conflicting or shadowing a built-in tool.")
	m.turnSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "lash", Name: "turn_duration_seconds",
		Help: "How long committed turns ran on this node.", Buckets: latencyBuckets})
	m.effectsExecuted = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "lash", Name: "effects_executed_total",
		Help: "Effects performed and recorded in the journal, by kind."}, []string{"kind"})
	m.effectsReplayed = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "lash", Name: "effects_replayed_total",
		Help: "Effects answered from the journal instead of performed, by kind."}, []string{"kind"})
	m.effectSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "lash", Name: "effect_duration_seconds",
		Help: "How long performed effects took, by kind.", Buckets: latencyBuckets}, []string{"kind"})
	m.apiRequests = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "lash", Name: "api_requests_total",
		Help: "Node API requests, by endpoint and the code answered (200: done)."}, []string{"endpoint", "code"})
	m.apiSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "lash", Name: "api_request_duration_seconds",
		Help: "How long node API requests took, by endpoint.", Buckets: latencyBuckets}, []string{"endpoint"})
	m.takeovers = counter("takeovers_total", "Turns this node took over from runs that began them and did not finish.")
	vec := func(name, help string, labels ...string) *prometheus.CounterVec {
		v := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "lash", Name: name, Help: help}, labels)
		m.reg.MustRegister(v)
		return v
	}
	m.modelCalls = vec("model_calls_total", "Model calls this node made (replays make none), by model.", "model")
	m.modelTokens = vec("model_tokens_total", "Tokens of the model calls this node made, by model and direction (in: the request, out: the answer; cache_read, cache_write: the part of in read from or written to the provider's prompt cache; reasoning: the part of out spent reasoning).", "model", "direction")
	m.modelErrors = vec("model_errors_total", "Model calls that failed, by model and error class (rate_limit, timeout, connection, http_500, ...).", "model", "code")
	m.toolCalls = vec("tool_calls_total", "Tool calls this node ran, by tool and status (ok, error, pending).", "tool", "status")
	m.reg.MustRegister(m.turnsAborted, m.turnSeconds, m.effectsExecuted, m.effectsReplayed, m.effectSeconds, m.apiRequests, m.apiSeconds,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// observe takes the node's events (lash.WithObserver).
func (m *metrics) observe(ev lash.Event) {
	switch ev.Kind {
	case lash.EventTurnCommitted:
		m.turnsCommitted.Inc()
		m.turnSeconds.Observe(ev.Took.Seconds())
	case lash.EventTurnFailed:
		m.turnsFailed.Inc()
	case lash.EventTurnAborted:
		m.turnsAborted.WithLabelValues(ev.Code).Inc()
	case lash.EventInputRefused:
		m.inputsRefused.Inc()
	case lash.EventSettingsMismatch:
		m.settingsLeft.Inc()
	case lash.EventEffectExecuted:
		m.effectsExecuted.WithLabelValues(ev.Effect).Inc()
		m.effectSeconds.WithLabelValues(ev.Effect).Observe(ev.Took.Seconds())
	case lash.EventEffectReplayed:
		m.effectsReplayed.WithLabelValues(ev.Effect).Inc()
	case lash.EventModelCall:
		m.modelCalls.WithLabelValues(ev.Model).Inc()
		if ev.Code != "" {
			m.modelErrors.WithLabelValues(ev.Model, ev.Code).Inc()
			break
		}
		m.modelTokens.WithLabelValues(ev.Model, "in").Add(float64(ev.Usage.InputTokens))
		m.modelTokens.WithLabelValues(ev.Model, "out").Add(float64(ev.Usage.OutputTokens))
		// Parts of the above, counted apart only when the provider says.
		for dir, n := range map[string]int64{"cache_read": ev.Usage.CacheReadTokens, "cache_write": ev.Usage.CacheWriteTokens, "reasoning": ev.Usage.ReasoningTokens} {
			if n > 0 {
				m.modelTokens.WithLabelValues(ev.Model, dir).Add(float64(n))
			}
		}
	case lash.EventToolCall:
		m.toolCalls.WithLabelValues(ev.Tool, ev.Code).Inc()
	case lash.EventTakeover:
		m.takeovers.Inc()
	case lash.EventLeaseClaimed:
		m.leaseClaims.Inc()
	case lash.EventLeaseBusy:
		m.leaseBusy.Inc()
	case lash.EventLeaseLost:
		m.leaseLosses.Inc()
	case lash.EventCommitConflict:
		m.commitConflicts.Inc()
	case lash.EventWake:
		if ev.Err != nil {
			m.signalsRefused.Inc()
		} else {
			m.wakes.Inc()
		}
	}
}

// request takes the node API's requests (nodeapi.Config.OnRequest).
func (m *metrics) request(endpoint string, code int, took time.Duration) {
	m.apiRequests.WithLabelValues(endpoint, strconv.Itoa(code)).Inc()
	m.apiSeconds.WithLabelValues(endpoint).Observe(took.Seconds())
}

// gauge adds a gauge read at every scrape.
func (m *metrics) gauge(name, help string, f func() float64) {
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "lash", Name: name, Help: help}, f))
}

// info adds a constant 1 with the node's identity as labels.
func (m *metrics) info(labels prometheus.Labels) {
	g := prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "lash", Name: "node_info",
		Help: "The node's identity, as labels; the value is 1.", ConstLabels: labels})
	g.Set(1)
	m.reg.MustRegister(g)
}
