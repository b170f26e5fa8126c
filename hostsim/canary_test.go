package hostsim

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

// newCanaryHost starts n worker VMs of the conformance guest in one Host.
func newCanaryHost(t *testing.T, opts Options, n int) (*Host, []*VM) {
	t.Helper()
	h, first := startGuest(t, opts, "vm", "")
	vms := []*VM{first}
	for len(vms) < n {
		vm, err := h.NewVM(context.Background(), first.mod, "vm", nil)
		if err != nil {
			t.Fatal(err)
		}
		vms = append(vms, vm)
	}
	return h, vms
}

// callbacks lists the "cb NAME" lines the guest logged, as "NAME@context".
func callbacks(h *Host, names ...string) []string {
	var out []string
	for _, e := range h.Logs() {
		f := strings.Fields(e.Message)
		if len(f) >= 2 && f[0] == "cb" {
			for _, n := range names {
				if f[1] == n {
					out = append(out, n+"@"+itoa(int64(e.Context)))
				}
			}
		}
	}
	return out
}

// TestCanary: one canary per new configuration, before any worker, in
// cpp-host's order (the root's context create, vm_start with the root's id,
// configure); none for a configuration already judged; its ticks never
// fire; its shared data writes stay.
func TestCanary(t *testing.T) {
	h, vms := newCanaryHost(t, Options{}, 2)
	h.ClearLogs()
	const cfg = "configure: setshared by-$ctx x 0; tick 10\ntick: log 2 ticked"
	for _, vm := range vms {
		configure(t, vm, "r", cfg)
	}
	if got := h.Canaries(); got != 1 {
		t.Errorf("Canaries() after one configuration on two workers = %d, want 1", got)
	}
	// The canary's root is its context 1, as each worker's first root.
	want := []string{"root_create@1", "vm_start@1", "configure@1", "root_create@1", "configure@1", "root_create@1", "configure@1"}
	if got := callbacks(h, "root_create", "vm_start", "configure"); !reflect.DeepEqual(got, want) {
		t.Errorf("callbacks = %q, want %q (the canary, then each worker)", got, want)
	}
	if _, _, ok := h.SharedData("vm", "by-1"); !ok {
		t.Errorf("the canary's shared data write is gone")
	}
	if err := h.Advance(25 * time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if got := len(callbacks(h, "tick")); got != 4 {
		t.Errorf("ticks in 25 ms = %d, want 4 (two workers, none of the canary's)", got)
	}
	// The same configuration again (a new root in each worker): judged.
	configure(t, vms[0], "r", cfg)
	if got := h.Canaries(); got != 1 {
		t.Errorf("Canaries() after the same configuration again = %d, want 1", got)
	}
	configure(t, vms[0], "r", cfg+"\ndone: log 2 bye")
	if got := h.Canaries(); got != 2 {
		t.Errorf("Canaries() after a new configuration = %d, want 2", got)
	}
}

// TestCanaryRefuses: a configuration the canary refuses (its
// proxy_on_configure returns false, or it traps) reaches no worker, the
// previous root keeps serving, and the refusal is remembered.
func TestCanaryRefuses(t *testing.T) {
	tests := []struct {
		name, cfg, want string
	}{
		{name: "configure returns false", cfg: "configure: setshared tried yes 0; ret 0", want: "proxy_on_configure returned false"},
		{name: "configure traps", cfg: "configure: setshared tried yes 0; exit 3", want: "proc_exit(3)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h, vms := newCanaryHost(t, Options{}, 1)
			old := configure(t, vms[0], "r", "configure: log 2 first")
			h.ClearLogs()
			for try := range 2 {
				_, err := vms[0].Configure("r", []byte(tc.cfg))
				if err == nil || !strings.Contains(err.Error(), "canary") || !strings.Contains(err.Error(), tc.want) ||
					!strings.Contains(err.Error(), "keeps serving") || errors.Is(err, ErrVMFailed) {
					t.Fatalf("Configure(refused) try %d = %v, want the canary's refusal (%s)", try, err, tc.want)
				}
			}
			if got := h.Canaries(); got != 2 {
				t.Errorf("Canaries() = %d, want 2 (the first configuration's, the refused one's once)", got)
			}
			if got := callbacks(h, "configure"); len(got) != 1 {
				t.Errorf("configure callbacks = %q, want the canary's only", got)
			}
			if vms[0].Root("r") != old || vms[0].Err() != nil {
				t.Errorf("worker after a refused configuration: root %v (want the old one), err %v", vms[0].Root("r"), vms[0].Err())
			}
			if _, _, ok := h.SharedData("vm", "tried"); !ok {
				t.Errorf("the refusing canary's shared data write is gone")
			}
		})
	}
}

// TestNoCanary: with Options.NoCanary the workers are configured directly.
func TestNoCanary(t *testing.T) {
	h, vms := newCanaryHost(t, Options{NoCanary: true}, 1)
	configure(t, vms[0], "r", "configure: log 2 x")
	if got := h.Canaries(); got != 0 || len(callbacks(h, "configure")) != 1 {
		t.Errorf("NoCanary: Canaries() = %d, configure callbacks %q; want 0 and the worker's", got, callbacks(h, "configure"))
	}
}

// TestV8Restrictions: under V8's allow-lists a host call the allocator may
// not make traps the VM, naming it; proxy_log may; without V8 anything
// goes. The guest's _initialize passes both lists.
func TestV8Restrictions(t *testing.T) {
	tests := []struct {
		name string
		v8   V8Restrictions
		call string
		trap bool
	}{
		{name: "no restrictions, set tick", v8: NoRestrictions, call: "tick"},
		{name: "before 533, proxy_log", v8: V8Before533, call: "log"},
		{name: "before 533, set tick", v8: V8Before533, call: "tick", trap: true},
		{name: "after 533, set tick", v8: V8After533, call: "tick", trap: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, vm := newGuestVM(t, Options{V8: tc.v8}, "vm", "")
			r := configure(t, vm, "r", "request_headers: alloccall "+tc.call+"; get 0 :path")
			s, _ := r.NewStream()
			_, err := s.RequestHeaders([][2]string{{":path", "/p"}}, true)
			switch {
			case tc.trap && (!errors.Is(err, ErrVMFailed) || !strings.Contains(err.Error(), "restricted_callback: env.proxy_set_tick_period_milliseconds")):
				t.Errorf("RequestHeaders = %v, want a restricted_callback trap naming the call", err)
			case !tc.trap && err != nil:
				t.Errorf("RequestHeaders = %v, want no trap", err)
			}
		})
	}
}

// TestV8Lists: the allow-lists as cpp-host has them.
func TestV8Lists(t *testing.T) {
	tests := []struct {
		name        string
		v8          V8Restrictions
		call        string
		init, alloc bool
	}{
		{"none: anything", NoRestrictions, "env.proxy_http_call", true, true},
		{"before: random_get at init only", V8Before533, "wasi_snapshot_preview1.random_get", true, false},
		{"before: poll_oneoff nowhere", V8Before533, "wasi_snapshot_preview1.poll_oneoff", false, false},
		{"before: clock everywhere", V8Before533, "wasi_snapshot_preview1.clock_time_get", true, true},
		{"after: poll_oneoff everywhere", V8After533, "wasi_snapshot_preview1.poll_oneoff", true, true},
		{"after: sched_yield everywhere", V8After533, "wasi_snapshot_preview1.sched_yield", true, true},
		{"after: proxy_get_property nowhere", V8After533, "env.proxy_get_property", false, false},
	}
	allowed := func(list []string, call string) bool {
		vm := &VM{restricted: list}
		defer func() { _ = recover() }()
		vm.checkAllowed(call)
		return true
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			initialize, allocate := tc.v8.allowed()
			if got := allowed(initialize, tc.call); got != tc.init {
				t.Errorf("%s allowed in _initialize = %v, want %v", tc.call, got, tc.init)
			}
			if got := allowed(allocate, tc.call); got != tc.alloc {
				t.Errorf("%s allowed in the allocator = %v, want %v", tc.call, got, tc.alloc)
			}
		})
	}
}

// TestWASIEnvoyAnswers: poll_oneoff answers ENOSYS (52) or success with zero
// events per Options.Poll; an unknown clock id is ENOTSUP (58).
func TestWASIEnvoyAnswers(t *testing.T) {
	tests := []struct {
		name   string
		poll   PollMode
		script string
		cmd    string
		want   []string
	}{
		{"poll enosys", PollENOSYS, "poll 2000", "poll", []string{"52 99"}},
		{"poll zero events", PollZeroEvents, "poll 2000", "poll", []string{"0 0"}},
		{"clocks", PollENOSYS, "clock 0; clock 1; clock 2; clock 3", "clock", []string{"0", "0", "58", "58"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h, vm := newGuestVM(t, Options{Poll: tc.poll}, "vm", "")
			configure(t, vm, "r", "configure: "+tc.script)
			if got := results(h, "configure", tc.cmd); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("%s = %q, want %q", tc.script, got, tc.want)
			}
		})
	}
}
