package gateway

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"image"
	"image/color"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// The fleet page in a real browser: `make e2e-browser` runs this with
// GPUROUTE_E2E_BROWSER=1 after installing Debian's chromium; without it the
// test is skipped (it installs npm packages and starts a browser).

// pageResult is what e2e/browser/fleet.mjs printed.
type pageResult struct {
	Rows      []string   `json:"rows"`
	Decisions []float64  `json:"decisions"`
	Polls     []float64  `json:"polls"`
	InFlight  [][]string `json:"inFlight"`
	Legend    []string   `json:"legend"`
	Missing   string     `json:"missing"`
	PageError string     `json:"pageError"`
	Chart     struct {
		X, Y, Width, Height float64
	} `json:"chart"`
	Errors []string `json:"errors"`
}

func TestE2EBrowserFleetPage(t *testing.T) {
	if os.Getenv("GPUROUTE_E2E_BROWSER") != "1" {
		t.Skip("set GPUROUTE_E2E_BROWSER=1 (make e2e-browser) to load the fleet page in headless Chromium")
	}
	chromium := "/usr/bin/chromium"
	if _, err := os.Stat(chromium); err != nil {
		t.Fatalf("%s: %v (make e2e-browser installs Debian's chromium)", chromium, err)
	}
	dir := installNodePackage(t, filepath.Join("e2e", "browser"), "playwright-core", []string{"fleet.mjs"}, true)
	f := newFixture(t, 3)

	// Load: four clients sending completions with a few shared prefixes,
	// so decisions, in-flight counts and KV usage move while the page polls.
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for c := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				prompt := strings.Repeat("shared context "+strconv.Itoa(i%3)+" ", 40) + "question " + strconv.Itoa(c*1000+i)
				r := collect(t, goClient{}.stream(t, f.srv.URL()+"/v1", prompt, 24, ""), 20*time.Second)
				if r.err != "" && ctx.Err() == nil {
					t.Errorf("load request: %s", r.err)
					return
				}
			}
		}()
	}
	defer func() { stop(); wg.Wait() }()

	shot := filepath.Join(t.TempDir(), "fleet.png")
	arg, _ := json.Marshal(map[string]any{"url": f.srv.URL() + DefaultFleetPath + "?every=250", "screenshot": shot, "chromium": chromium})
	cmd := exec.Command("node", filepath.Join(dir, "fleet.mjs"), string(arg))
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node fleet.mjs: %v\n%s\n%s", err, out, stderr.String())
	}
	var res pageResult
	if err := json.Unmarshal(bytes.TrimSpace(lastLine(out)), &res); err != nil {
		t.Fatalf("fleet.mjs printed %q: %v", out, err)
	}
	t.Logf("page: %+v", res)
	if len(res.Errors) > 0 || res.PageError != "" {
		t.Errorf("page errors: %v %q", res.Errors, res.PageError)
	}
	if strings.Join(res.Rows, ",") != "a,b,c" {
		t.Errorf("replica rows = %v, want a, b, c", res.Rows)
	}
	if len(res.Decisions) != 2 || !(res.Decisions[1] > res.Decisions[0]) {
		t.Errorf("decisions shown = %v, want a number that grows under load", res.Decisions)
	}
	if len(res.Legend) == 0 {
		t.Error("the decisions chart has no reasons in its legend")
	}
	c := res.Chart
	checkScreenshot(t, shot, image.Rect(int(c.X), int(c.Y), int(c.X+c.Width), int(c.Y+c.Height)))
	if dst := os.Getenv("GPUROUTE_E2E_SCREENSHOT"); dst != "" {
		b, _ := os.ReadFile(shot)
		if err := os.WriteFile(dst, b, 0o644); err != nil {
			t.Error(err)
		}
	}
}

func lastLine(b []byte) []byte {
	var last []byte
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 1<<16), 1<<22)
	for sc.Scan() {
		if len(bytes.TrimSpace(sc.Bytes())) > 0 {
			last = append(last[:0], sc.Bytes()...)
		}
	}
	return last
}

// checkScreenshot holds the screenshot to what the page draws: the whole
// table's width, dark text in the top third (the table), and in the chart's
// box coloured lines above its zero line (decision rates above zero).
func checkScreenshot(t *testing.T, path string, chart image.Rectangle) {
	t.Helper()
	file, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	img, err := png.Decode(file)
	if err != nil {
		t.Fatalf("screenshot %s: %v", path, err)
	}
	b := img.Bounds()
	if b.Dx() < 1280 || b.Dy() < 400 || !chart.In(b) || chart.Dy() < 100 {
		t.Fatalf("screenshot is %v with the chart at %v, want at least 1280x400 holding a chart of 100 px or more", b, chart)
	}
	dark := count(img, image.Rect(0, 0, b.Dx(), b.Dy()/3), func(r, g, bl uint8) bool { return int(r)+int(g)+int(bl) < 200 })
	// Above the bottom fifth of the chart, where the zero line runs.
	above := image.Rect(chart.Min.X, chart.Min.Y, chart.Max.X, chart.Max.Y-chart.Dy()/5)
	lines := count(img, above, func(r, g, bl uint8) bool { return max(r, g, bl)-min(r, g, bl) > 60 })
	t.Logf("screenshot %v: %d dark text pixels in the top third, %d line pixels above the chart's zero line", b, dark, lines)
	if dark < 2000 {
		t.Errorf("screenshot's top third has %d dark pixels, want the table's text (>= 2000): blank page?", dark)
	}
	if lines < 100 {
		t.Errorf("the chart has %d coloured pixels above its zero line, want the decision rates' lines (>= 100)", lines)
	}
}

func count(img image.Image, r image.Rectangle, match func(r, g, b uint8) bool) int {
	n := 0
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			c := color.NRGBAModel.Convert(img.At(x, y)).(color.NRGBA)
			if match(c.R, c.G, c.B) {
				n++
			}
		}
	}
	return n
}
