package router

import (
	"testing"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/proxytest"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/gpuroute/gpuroute/plugin/proxy"
)

// The "go" leg: the router's contexts under the SDK's proxytest emulator,
// reached through the native build of plugin/proxy.
//
// proxytest emulates exactly one root context (id 1) with a fixed plugin
// configuration, so a reconfiguration starts a fresh emulator whose root 1 is a
// switch: OnPluginStart goes to a new router root (a fresh id, as Envoy would
// allocate), everything else to the root that is serving. When the new root
// refuses its configuration the old root keeps serving, with its own state.
// Host-side state (shared data, metric values) does not carry over between
// emulators, so tests read counters and shared data only after the last
// configure.
func init() { legs["go"] = newGoDriver }

type goDriver struct {
	t       *testing.T
	vm      types.VMContext
	host    proxytest.HostEmulator
	release func()

	serving   types.PluginContext
	candidate types.PluginContext
	nextRoot  uint32
	oldErrors []string
}

func newGoDriver(t *testing.T) driver {
	d := &goDriver{t: t, vm: New(), nextRoot: 1}
	t.Cleanup(d.close)
	return d
}

func (d *goDriver) close() {
	if d.release != nil {
		d.oldErrors = append(d.oldErrors, d.host.GetErrorLogs()...)
		d.oldErrors = append(d.oldErrors, d.host.GetCriticalLogs()...)
		d.release()
		d.release = nil
	}
}

func (d *goDriver) configure(cfg string) bool {
	d.close()
	opt := proxytest.NewEmulatorOption().
		WithVMContext(switchVM{d}).
		WithPluginConfiguration([]byte(cfg))
	d.host, d.release = proxytest.NewHostEmulator(opt)
	if d.host.StartVM() != types.OnVMStartStatusOK {
		d.t.Fatal("OnVMStart = false, want true")
	}
	ok := d.host.StartPlugin() == types.OnPluginStartStatusOK
	if ok {
		d.serving = d.candidate
	}
	d.candidate = nil
	return ok
}

func (d *goDriver) request(hdrs [][2]string, body string) ([][2]string, types.Action, *localReply) {
	d.t.Helper()
	if d.release == nil {
		d.t.Fatal("request before configure")
	}
	id := d.host.InitializeHttpContext()
	action := d.host.CallOnRequestHeaders(id, hdrs, body == "")
	if body != "" && d.host.GetSentLocalResponse(id) == nil {
		action = d.host.CallOnRequestBody(id, []byte(body), true)
	}
	got := d.host.GetCurrentRequestHeaders(id)
	var local *localReply
	if lr := d.host.GetSentLocalResponse(id); lr != nil {
		local = &localReply{status: lr.StatusCode, headers: lr.Headers, body: string(lr.Data)}
	}
	d.host.CompleteHttpContext(id)
	return got, action, local
}

func (d *goDriver) tick()                    { d.host.Tick() }
func (d *goDriver) tickPeriodMillis() uint32 { return d.host.GetTickPeriod() }

func (d *goDriver) sharedData(key string) ([]byte, uint32, bool) {
	v, cas, err := proxy.GetSharedData(key)
	return v, cas, err == nil
}

func (d *goDriver) counter(name string) (uint64, bool) {
	v, err := d.host.GetCounterMetric(name)
	return v, err == nil
}

func (d *goDriver) errorLogs() []string {
	out := append([]string(nil), d.oldErrors...)
	if d.release != nil {
		out = append(out, d.host.GetErrorLogs()...)
		out = append(out, d.host.GetCriticalLogs()...)
	}
	return out
}

// switchVM hands proxytest's root 1 to switchRoot.
type switchVM struct{ d *goDriver }

func (s switchVM) OnVMStart(n int) types.OnVMStartStatus { return s.d.vm.OnVMStart(n) }

func (s switchVM) NewPluginContext(uint32) types.PluginContext {
	s.d.candidate = s.d.vm.NewPluginContext(s.d.nextRoot)
	s.d.nextRoot++
	return switchRoot{s.d}
}

// switchRoot starts the candidate root and forwards the rest to the serving one.
type switchRoot struct{ d *goDriver }

func (r switchRoot) OnPluginStart(n int) types.OnPluginStartStatus {
	return r.d.candidate.OnPluginStart(n)
}
func (r switchRoot) OnPluginDone() bool                    { return r.d.serving.OnPluginDone() }
func (r switchRoot) OnQueueReady(id uint32)                { r.d.serving.OnQueueReady(id) }
func (r switchRoot) OnTick()                               { r.d.serving.OnTick() }
func (r switchRoot) NewTcpContext(uint32) types.TcpContext { return nil }
func (r switchRoot) NewHttpContext(id uint32) types.HttpContext {
	if r.d.serving == nil {
		return nil
	}
	return r.d.serving.NewHttpContext(id)
}
