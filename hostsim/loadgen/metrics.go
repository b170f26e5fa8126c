package loadgen

import (
	"bufio"
	"context"
	"net/http"
	"strconv"
	"strings"
)

// scrapeAll sums the vLLM prefix-cache query and hit counters of every
// metrics page: [queries, hits], and whether any page answered.
func scrapeAll(ctx context.Context, c *http.Client, urls []string) ([2]float64, bool) {
	var sum [2]float64
	ok := false
	for _, u := range urls {
		q, h, err := scrape(ctx, c, u)
		if err == nil {
			sum[0] += q
			sum[1] += h
			ok = true
		}
	}
	return sum, ok
}

func scrape(ctx context.Context, c *http.Client, url string) (queries, hits float64, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, 0, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		name, v, ok := sample(sc.Text())
		if !ok {
			continue
		}
		switch name {
		case metricQueries:
			queries += v
		case metricHits:
			hits += v
		}
	}
	return queries, hits, sc.Err()
}

// sample splits a Prometheus text sample line into its metric name and
// value; comments and malformed lines are not samples.
func sample(line string) (string, float64, bool) {
	if line == "" || line[0] == '#' {
		return "", 0, false
	}
	name, rest := line, ""
	if i := strings.IndexAny(line, "{ "); i >= 0 {
		name, rest = line[:i], line[i:]
	}
	if j := strings.LastIndexByte(rest, '}'); j >= 0 {
		rest = rest[j+1:]
	}
	f := strings.Fields(rest)
	if len(f) == 0 {
		return "", 0, false
	}
	v, err := strconv.ParseFloat(f[0], 64)
	return name, v, err == nil
}
