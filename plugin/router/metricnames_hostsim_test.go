package router

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpuroute/gpuroute/hostsim"
)

// trtllmPage renders trtllm-serve's load gauges with prefix before each name:
// "trtllm_" as trtllm-serve exports them, "trtllm:" as NVIDIA Dynamo
// re-exports them (plugin/metrics/names.go).
func trtllmPage(prefix string, waiting, running int, kv float64) hostsim.Cluster {
	body := []byte("# TYPE " + prefix + "num_requests_waiting gauge\n" +
		prefix + "num_requests_waiting{model_name=\"m\"} " + strconv.Itoa(waiting) + "\n" +
		prefix + "num_requests_running{model_name=\"m\"} " + strconv.Itoa(running) + "\n" +
		prefix + "kv_cache_utilization{model_name=\"m\"} " + strconv.FormatFloat(kv, 'f', 3, 64) + "\n")
	return hostsim.ClusterFunc(func(*hostsim.CallRequest) hostsim.CallReply {
		return hostsim.CallReply{Body: body, Latency: 5 * time.Millisecond}
	})
}

// dynamoNames is r0's override: the three gauges its page carries, under
// Dynamo's prefix.
const dynamoNames = `"metric_names":{"waiting":"trtllm:num_requests_waiting",` +
	`"running":"trtllm:num_requests_running","kv_usage":"trtllm:kv_cache_utilization"}`

// TestMetricNamesOverride: three trtllm-serve replicas, of which r0 sits
// behind Dynamo and serves its gauges as trtllm:*. Without metric_names its
// pages carry nothing the engine's names read, so every scrape of it fails
// and it is ruled out while it is the idle one; with metric_names on r0
// alone its load is read (and wins the traffic) while r1 and r2 keep the
// default names: replicas of one engine share a parser only when their
// names are equal too. A reconfiguration with a bad override is refused
// and the last good configuration keeps routing.
func TestMetricNamesOverride(t *testing.T) {
	h, mod := wasmHost(t, hostsim.Options{Start: start})
	f := &testFleet{t: t, h: h, mod: mod}
	h.AddCluster("r0-metrics", trtllmPage("trtllm:", 1, 2, 0.1))
	h.AddCluster("r1-metrics", trtllmPage("trtllm_", 40, 60, 0.9))
	h.AddCluster("r2-metrics", trtllmPage("trtllm_", 40, 60, 0.9))
	for range 2 {
		vm, err := h.NewVM(context.Background(), mod, testVMID, nil)
		if err != nil {
			t.Fatalf("NewVM = %v", err)
		}
		f.vms = append(f.vms, vm)
	}
	config := func(r0 string) string {
		var b strings.Builder
		b.WriteString(`{"tick_ms":100,"status_path":"/status","replicas":[`)
		for i := range 3 {
			if i > 0 {
				b.WriteByte(',')
			}
			n := strconv.Itoa(i)
			b.WriteString(`{"name":"r` + n + `","address":"10.0.0.` + strconv.Itoa(i+1) + `:8000","metrics_cluster":"r` + n +
				`-metrics","engine":"trtllm-serve"`)
			if i == 0 && r0 != "" {
				b.WriteString("," + r0)
			}
			b.WriteByte('}')
		}
		b.WriteString("]}")
		return b.String()
	}

	// Without the override r0's page is unread: failed scrapes rule it out.
	f.configure(config(""))
	f.advance(time.Second)
	for w := range f.vms {
		st := f.replicas3(w)
		if st[0].Healthy || st[0].ScrapeFailures < 3 || st[0].Waiting != 0 {
			t.Errorf("worker %d without metric_names: r0 healthy %v, %d scrape failures, waiting %d; want unhealthy, ≥ 3 failures, nothing read",
				w, st[0].Healthy, st[0].ScrapeFailures, st[0].Waiting)
		}
		for i := 1; i < 3; i++ {
			if !st[i].Healthy || st[i].Waiting != 40 || st[i].Running != 60 {
				t.Errorf("worker %d: r%d healthy %v waiting %d running %d, want healthy 40/60", w, i, st[i].Healthy, st[i].Waiting, st[i].Running)
			}
		}
	}
	if n := f.metric(statScrapeFailures); n < 3 {
		t.Errorf("%s without metric_names = %d, want ≥ 3", statScrapeFailures, n)
	}
	for i := range 6 {
		if dst := f.route(i%2, "before "+strconv.Itoa(i)); dst == "10.0.0.1:8000" {
			t.Fatalf("request %d went to r0, whose metrics are unread; want r1 or r2", i)
		}
	}

	// With it, r0's figures are read and its short queue takes the traffic.
	f.configure(config(dynamoNames))
	f.advance(time.Second)
	failures := f.metric(statScrapeFailures)
	for w := range f.vms {
		st := f.replicas3(w)
		if !st[0].Healthy || st[0].Waiting != 1 || st[0].Running != 2 || st[0].KVUsage != 0.1 {
			t.Errorf("worker %d with metric_names: r0 healthy %v waiting %d running %d kv %v, want healthy 1/2/0.1",
				w, st[0].Healthy, st[0].Waiting, st[0].Running, st[0].KVUsage)
		}
		for i := 1; i < 3; i++ {
			if !st[i].Healthy || st[i].Waiting != 40 || st[i].Running != 60 || st[i].ScrapeFailures != 0 {
				t.Errorf("worker %d with r0's override: r%d healthy %v waiting %d running %d failures %d, want healthy 40/60 with default names",
					w, i, st[i].Healthy, st[i].Waiting, st[i].Running, st[i].ScrapeFailures)
			}
		}
	}
	for w := range f.vms {
		for i := range 8 {
			if dst := f.route(w, "after "+strconv.Itoa(i)); dst != "10.0.0.1:8000" {
				t.Fatalf("worker %d request %d went to %s, want 10.0.0.1:8000 (r0: 1 waiting, the others 40)", w, i, dst)
			}
		}
	}
	f.advance(500 * time.Millisecond)
	if n := f.metric(statScrapeFailures); n != failures {
		t.Errorf("%s grew from %d to %d with metric_names set, want no more failures", statScrapeFailures, failures, n)
	}

	// A bad override is refused, with the reason logged; the last good
	// configuration (and its names) keeps serving.
	bad := config(`"metric_names":{"waiting":5}`)
	for w, vm := range f.vms {
		if _, err := vm.Configure(testRootID, []byte(bad)); err == nil {
			t.Errorf("worker %d: Configure(%s) = nil error, want it refused", w, bad)
		}
	}
	if logsWith(h, "replicas[0].metric_names.waiting must be a string") == 0 {
		t.Errorf("no guest log names the bad override; want the config error logged")
	}
	f.advance(300 * time.Millisecond)
	if dst := f.route(0, "after the bad reconfigure"); dst != "10.0.0.1:8000" {
		t.Errorf("after a refused reconfigure the request went to %s, want 10.0.0.1:8000 (overrides kept)", dst)
	}
}

// replicas3 reads worker w's status endpoint, which lists three replicas.
func (f *testFleet) replicas3(w int) []statusReplica {
	f.t.Helper()
	st := f.status(w).Replicas
	if len(st) != 3 {
		f.t.Fatalf("status lists %d replicas, want 3", len(st))
	}
	return st
}
