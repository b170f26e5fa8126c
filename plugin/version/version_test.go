package version

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// semver is Semantic Versioning 2.0.0's core with an optional pre-release.
var semver = regexp.MustCompile(`^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?$`)

// released is a dated release heading of CHANGELOG.md.
var released = regexp.MustCompile(`^## \[([^]]+)\] - [0-9]{4}-[0-9]{2}-[0-9]{2}$`)

// TestChangelogNamesRelease holds Release and CHANGELOG.md together, so a
// tag never names a release the changelog does not describe: a "-dev"
// Release has an "Unreleased" section first and no section of its own yet;
// any other Release is the first dated section.
func TestChangelogNamesRelease(t *testing.T) {
	if !semver.MatchString(Release) {
		t.Fatalf("Release = %q, want a semantic version such as 1.2.3 or 1.2.3-dev", Release)
	}
	b, err := os.ReadFile(filepath.Join("..", "..", "CHANGELOG.md"))
	if err != nil {
		t.Fatal(err)
	}
	var headings []string
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "## ") {
			headings = append(headings, line)
		}
	}
	if len(headings) == 0 {
		t.Fatal("CHANGELOG.md has no ## section")
	}
	base, dev := strings.CutSuffix(Release, "-dev")
	if dev {
		if headings[0] != "## [Unreleased]" {
			t.Errorf("CHANGELOG.md opens with %q, want \"## [Unreleased]\" while Release is %q", headings[0], Release)
		}
		for _, h := range headings {
			if m := released.FindStringSubmatch(h); m != nil && m[1] == base {
				t.Errorf("CHANGELOG.md has %q, but Release %q says %s is not cut yet", h, Release, base)
			}
		}
		return
	}
	for _, h := range headings {
		if h == "## [Unreleased]" {
			continue
		}
		if m := released.FindStringSubmatch(h); m == nil || m[1] != Release {
			t.Errorf("CHANGELOG.md's first release section is %q, want \"## [%s] - YYYY-MM-DD\"", h, Release)
		}
		return
	}
	t.Errorf("CHANGELOG.md has no section for release %s", Release)
}
