package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"strconv"
	"strings"
	"time"
)

// Plugin configuration keys the gateway writes (the plugin's README
// configuration reference).
const (
	keyTickMillis = "tick_ms"
	keyReplicas   = "replicas"
	keyStatusPath = "status_path"
)

// Replica states of the plugin configuration.
const (
	StateActive   = "active"
	StateDraining = "draining"
	StateDrained  = "drained"
)

// MetricsClusterSuffix names a replica's metrics cluster in generated
// configurations: "<name>-metrics".
const MetricsClusterSuffix = "-metrics"

// ReplicaSpec is one replica of a generated plugin configuration.
type ReplicaSpec struct {
	Name     string // unique name
	Address  string // ip:port the plugin writes into HeaderDestination
	Hardware string // cost profile; "" leaves the plugin's default
	State    string // StateActive (""), StateDraining or StateDrained
	// DrainDeadline, for a draining replica, is when its streams are reset;
	// zero means none.
	DrainDeadline time.Time
}

// ConfigOptions are the non-replica keys of a generated configuration.
type ConfigOptions struct {
	TickMillis int    // 0: the plugin's default
	StatusPath string // "": no status endpoint
}

// ParseReplicaFlag reads "name=ip:port" (the CLI's --replica value).
func ParseReplicaFlag(v string) (ReplicaSpec, error) {
	name, addr, ok := strings.Cut(v, "=")
	if !ok || name == "" || addr == "" {
		return ReplicaSpec{}, errors.New("gateway: replica must be name=ip:port, got " + strconv.Quote(v))
	}
	return ReplicaSpec{Name: name, Address: addr}, nil
}

// PluginConfig renders a plugin configuration for replicas; each gets the
// metrics cluster name+MetricsClusterSuffix, which the gateway serves from
// the replica's own address.
func PluginConfig(replicas []ReplicaSpec, o ConfigOptions) ([]byte, error) {
	type replica struct {
		Name            string `json:"name"`
		Address         string `json:"address"`
		MetricsCluster  string `json:"metrics_cluster"`
		Hardware        string `json:"hardware,omitempty"`
		State           string `json:"state,omitempty"`
		DrainDeadlineMs int64  `json:"drain_deadline_ms,omitempty"`
	}
	seen := map[string]bool{}
	rs := make([]replica, 0, len(replicas))
	for _, r := range replicas {
		if r.Name == "" || r.Address == "" {
			return nil, errors.New("gateway: replica needs a name and an address, got name " + strconv.Quote(r.Name) + " address " + strconv.Quote(r.Address))
		}
		if seen[r.Name] {
			return nil, errors.New("gateway: replica name " + strconv.Quote(r.Name) + " appears twice")
		}
		seen[r.Name] = true
		out := replica{Name: r.Name, Address: r.Address, MetricsCluster: r.Name + MetricsClusterSuffix, Hardware: r.Hardware, State: r.State}
		if !r.DrainDeadline.IsZero() {
			out.DrainDeadlineMs = r.DrainDeadline.UnixMilli()
		}
		rs = append(rs, out)
	}
	m := map[string]any{keyReplicas: rs}
	if o.TickMillis > 0 {
		m[keyTickMillis] = o.TickMillis
	}
	if o.StatusPath != "" {
		m[keyStatusPath] = o.StatusPath
	}
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, errors.New("gateway: render plugin configuration: " + err.Error())
	}
	return append(b, '\n'), nil
}

// ReloadFile reads a plugin configuration file and applies it if it differs
// from the one serving (force applies it anyway, as SIGHUP does). A refused
// or unreadable file leaves the serving configuration in place.
func (g *Gateway) ReloadFile(path string, force bool) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return errors.New("gateway: reload: " + err.Error())
	}
	g.cfgMu.Lock()
	defer g.cfgMu.Unlock()
	if !force && bytes.Equal(b, g.lastCfg) {
		return nil
	}
	return g.reconfigureLocked(b)
}

// WatchFile polls path's modification time and size every interval and
// reloads the plugin configuration when either changes (no fsnotify:
// polling is portable and cheap for one file). It returns when ctx ends;
// errors are logged.
func (g *Gateway) WatchFile(ctx context.Context, path string, interval time.Duration) {
	poll(ctx, path, interval, func() {
		if err := g.ReloadFile(path, false); err != nil {
			g.log.Print(err, "; the previous configuration keeps serving")
		}
	})
}

// ReloadModuleFile reads a module file and swaps it in if it differs from
// the serving one (force swaps anyway).
func (g *Gateway) ReloadModuleFile(ctx context.Context, path string, force bool) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return errors.New("gateway: reload module: " + err.Error())
	}
	g.cfgMu.Lock()
	same := bytes.Equal(b, g.lastWASM)
	g.cfgMu.Unlock()
	if same && !force {
		return nil
	}
	return g.ReloadModule(ctx, b)
}

// WatchModule is WatchFile for the module file: a changed module is swapped
// in with ReloadModule.
func (g *Gateway) WatchModule(ctx context.Context, path string, interval time.Duration) {
	poll(ctx, path, interval, func() {
		if err := g.ReloadModuleFile(ctx, path, false); err != nil {
			g.log.Print(err)
		}
	})
}

// poll calls changed whenever path's modification time or size changes.
func poll(ctx context.Context, path string, interval time.Duration, changed func()) {
	var lastMod time.Time
	lastSize := int64(-1)
	if fi, err := os.Stat(path); err == nil {
		lastMod, lastSize = fi.ModTime(), fi.Size()
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		fi, err := os.Stat(path)
		if err != nil || (fi.ModTime().Equal(lastMod) && fi.Size() == lastSize) {
			continue
		}
		lastMod, lastSize = fi.ModTime(), fi.Size()
		changed()
	}
}
