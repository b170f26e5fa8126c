package gateway

import (
	"bufio"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func get(h http.Handler, path string) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, path, nil))
	return w
}

// TestReplicaEngineAPI reads every informational endpoint in the shape the
// routers in front of the replicas parse.
func TestReplicaEngineAPI(t *testing.T) {
	r := NewReplica(ReplicaOptions{Name: "a", TimeScale: 1e-6, Adapters: []string{"sql-lora"}})
	tests := []struct {
		name  string
		path  string
		check func(t *testing.T, body []byte)
	}{
		{name: "health", path: PathHealth, check: func(t *testing.T, body []byte) {
			if len(body) != 0 {
				t.Errorf("GET %s body = %q, want empty", PathHealth, body)
			}
		}},
		{name: "health_generate", path: PathHealthGenerate, check: func(*testing.T, []byte) {}},
		{name: "models", path: PathModels, check: func(t *testing.T, body []byte) {
			var m struct {
				Object string `json:"object"`
				Data   []struct {
					ID, Object string
					Parent     *string `json:"parent"`
					MaxLen     *int    `json:"max_model_len"`
				} `json:"data"`
			}
			if err := json.Unmarshal(body, &m); err != nil || m.Object != "list" || len(m.Data) != 2 {
				t.Fatalf("GET %s = %s (%v), want a list of the base model and one adapter", PathModels, body, err)
			}
			if m.Data[0].ID != testModel || m.Data[0].Parent != nil || m.Data[0].MaxLen == nil || *m.Data[0].MaxLen <= 0 {
				t.Errorf("first model = %+v, want %q without parent, with max_model_len", m.Data[0], testModel)
			}
			if m.Data[1].ID != "sql-lora" || m.Data[1].Parent == nil || *m.Data[1].Parent != testModel {
				t.Errorf("second model = %+v, want sql-lora with parent %q", m.Data[1], testModel)
			}
		}},
		{name: "model info", path: PathModelInfo, check: func(t *testing.T, body []byte) {
			var m struct {
				ModelPath    string `json:"model_path"`
				IsGeneration bool   `json:"is_generation"`
			}
			if err := json.Unmarshal(body, &m); err != nil || m.ModelPath != testModel || !m.IsGeneration {
				t.Errorf("GET %s = %s (%v), want model_path %q, is_generation", PathModelInfo, body, err, testModel)
			}
		}},
		{name: "server info", path: PathServerInfo, check: checkServerInfo},
		{name: "server info, new name", path: PathServerInfoNew, check: checkServerInfo},
		{name: "sglang load", path: PathLoad, check: func(t *testing.T, body []byte) {
			var l []struct {
				DPRank    *int `json:"dp_rank"`
				NumReqs   *int `json:"num_reqs"`
				Waiting   *int `json:"num_waiting_reqs"`
				NumTokens *int `json:"num_tokens"`
			}
			if err := json.Unmarshal(body, &l); err != nil || len(l) != 1 || l[0].DPRank == nil || l[0].NumReqs == nil ||
				l[0].Waiting == nil || l[0].NumTokens == nil {
				t.Errorf("GET %s = %s (%v), want one dp rank with num_reqs, num_waiting_reqs, num_tokens", PathLoad, body, err)
			}
		}},
		{name: "vllm load", path: PathVLLMLoad, check: func(t *testing.T, body []byte) {
			var l struct {
				ServerLoad *int `json:"server_load"`
			}
			if err := json.Unmarshal(body, &l); err != nil || l.ServerLoad == nil {
				t.Errorf("GET %s = %s (%v), want server_load", PathVLLMLoad, body, err)
			}
		}},
		{name: "version", path: PathVersion, check: func(t *testing.T, body []byte) {
			if !strings.Contains(string(body), SimVersion) {
				t.Errorf("GET %s = %s, want %q", PathVersion, body, SimVersion)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := get(r, tt.path)
			if w.Code != http.StatusOK {
				t.Fatalf("GET %s = %d %s, want 200", tt.path, w.Code, w.Body)
			}
			tt.check(t, w.Body.Bytes())
		})
	}
}

func checkServerInfo(t *testing.T, body []byte) {
	t.Helper()
	var s struct {
		ModelPath string `json:"model_path"`
		DPSize    int    `json:"dp_size"`
		MaxTotal  int    `json:"max_total_num_tokens"`
		Version   string `json:"version"`
	}
	if err := json.Unmarshal(body, &s); err != nil || s.ModelPath != testModel || s.DPSize != 1 || s.MaxTotal <= 0 || s.Version != SimVersion {
		t.Errorf("server info = %s (%v), want model_path, dp_size 1, max_total_num_tokens and version", body, err)
	}
}

// TestReplicaLoadCounts: /get_load and /load count a request in flight
// (read while its stream is open).
func TestReplicaLoadCounts(t *testing.T) {
	r := NewReplica(ReplicaOptions{Name: "a", TimeScale: 1e-3})
	srv := httptest.NewServer(r)
	defer srv.Close()
	resp, err := http.Post(srv.URL+PathCompletions, "application/json",
		strings.NewReader(`{"prompt":"`+strings.Repeat("x", 400)+`","max_tokens":2000,"stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if _, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil {
		t.Fatalf("first stream line: %v", err)
	}
	if b := get(r, PathVLLMLoad).Body.String(); !strings.Contains(b, `"server_load":1`) {
		t.Errorf("GET %s with one stream open = %s, want server_load 1", PathVLLMLoad, b)
	}
	if b := get(r, PathLoad).Body.String(); !strings.Contains(b, `"num_reqs":1`) {
		t.Errorf("GET %s with one stream open = %s, want num_reqs 1", PathLoad, b)
	}
}

// TestReplicaModelNames: a model the replica serves (its base model under
// any name) answers without an adapter load; a listed adapter pays one;
// usage reports the cached prompt tokens as vLLM does.
func TestReplicaModelNames(t *testing.T) {
	r := NewReplica(ReplicaOptions{Name: "a", TimeScale: 1e-6, Adapters: []string{"sql-lora"}})
	for _, tt := range []struct {
		name, model string
		adapter     bool
	}{
		{name: "base", model: testModel},
		{name: "alias", model: "m"},
		{name: "adapter", model: "sql-lora", adapter: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			w := post(r, PathCompletions, `{"model":"`+tt.model+`","prompt":"`+strings.Repeat("y", 300)+`","max_tokens":1}`)
			if w.Code != 200 {
				t.Fatalf("POST model %q = %d %s", tt.model, w.Code, w.Body)
			}
			qs := r.Requests()
			if got := qs[len(qs)-1].Adapter != ""; got != tt.adapter {
				t.Errorf("model %q served as adapter = %v, want %v", tt.model, got, tt.adapter)
			}
			var resp struct {
				Usage struct {
					Details *struct {
						Cached *int `json:"cached_tokens"`
					} `json:"prompt_tokens_details"`
				} `json:"usage"`
			}
			if err := json.Unmarshal(w.Body.Bytes(), &resp); err != nil || resp.Usage.Details == nil || resp.Usage.Details.Cached == nil {
				t.Errorf("usage of model %q = %s, want prompt_tokens_details.cached_tokens", tt.model, w.Body)
			}
		})
	}
}
